"""Stages 5 and 6, a run's aggregates and its report, and finishing a published run without them.

A run is published once each of its input rows is in ``docs`` or ``errors``; its aggregates and
report are written after that. A disk that fills up there leaves the run whole but without them,
and ``xai-ray run --resume RUN_ID`` then writes what is missing (``finish_published``) rather than
saying there is nothing to resume.
"""

from __future__ import annotations

import logging
from pathlib import Path

from xai_ray.config import RunConfig
from xai_ray.store import StoreError, layout

log = logging.getLogger("xai_ray")


def aggregate(store: str | Path, run_id: str, k: int = 20) -> dict:
    """Stage 5: the run's corpus-wide aggregates, kept beside it for the report, and its headline
    numbers and top words (of the method the run's leaderboard ranks best: report.leaderboard) for the log."""
    from xai_ray.query.connection import open_store, pick_run, run_named
    from xai_ray.query.top_words import topk
    from xai_ray.query.word_totals import keep_word_totals
    from xai_ray.report.aggregates import keep_aggregates
    from xai_ray.report.definition import DEFAULTS
    from xai_ray.report.leaderboard import lead_method

    keep_word_totals(store, run_id)  # first: the report's top words are ranked from them
    keep_aggregates(store, run_id)
    con = open_store(store, run=run_id)
    run = pick_run(con, run_id)
    summary = run_named(con, "summary", run_id=run_id).iloc[0].to_dict()
    methods = run["methods"].split(",")
    method, _ = lead_method(con, run_id, methods)
    # The report's defaults (wordstats): lift, wordstats.default_min_docs, punctuation left out.
    top = topk(con, run_id=run_id, method=method, k=k, exclude=DEFAULTS["exclude"])
    return {**summary, "method": method, "top_words": top["word"].tolist()[:10]}


def report(store: str | Path, run_id: str, out: str | Path) -> Path:
    """Stage 6: one self-contained HTML report of the run."""
    from xai_ray.report.page import build_report

    return build_report(store, run_id, out, option="the run's report")


def stage_failed(run_id: str, stage: str, err: Exception, store: str | Path) -> StoreError:
    """The sentence for a published run whose ``stage`` could not be written (a full disk): the run is
    whole, queries read it, and ``--resume`` writes what it lacks once the cause is mended."""
    reason = (err.strerror or type(err).__name__).lower() if isinstance(err, OSError) else str(err)
    return StoreError(
        f"run {run_id!r} is published with all its documents, but its {stage} could not be written ({reason}); "
        f"queries read the run as it is, and once that is mended `xai-ray run --resume {run_id} --store {store}` "
        "writes what it lacks"
    )


def unfinished(store: str | Path, run_id: str, manifest: dict) -> list[str]:
    """The stages a published run (``manifest``: its manifest) still lacks: ``aggregates`` when a
    kept aggregate that its stage writes is missing, ``report`` when its settings asked for a
    report and there is none."""
    from xai_ray.query.connection import WORD_TOTALS, word_totals_tag
    from xai_ray.report.aggregates import missing_aggregates
    from xai_ray.store.aggregates import is_kept

    missing = []
    if not is_kept(store, run_id, WORD_TOTALS, word_totals_tag()) or missing_aggregates(store, run_id):
        missing.append("aggregates")
    report_file = layout.report_path(store, run_id)
    if RunConfig.from_manifest(manifest).report and not (report_file.is_file() and report_file.stat().st_size):
        missing.append("report")
    return missing


def finish_published(store: str | Path, run_id: str) -> dict | None:
    """Write what a published run lacks (``unfinished``): its aggregates, then its report. Returns
    the run's manifest, the stages written and the report's path; None when the store holds no
    published run ``run_id`` or the run lacks nothing (``--resume`` then says why in its own words)."""
    from xai_ray.query.connection import open_store
    from xai_ray.report.outputs import OutputError

    if not layout.manifest_path(store, run_id).is_file():
        return None
    open_store(store, run=run_id).close()  # a damaged run is refused (query.run_files), never aggregated as it is
    manifest = layout.read_manifest(layout.manifest_path(store, run_id))
    missing = unfinished(store, run_id, manifest)
    if not missing:
        return None
    cfg = RunConfig.from_manifest(manifest)
    log.info("run %s is published without its %s: writing them", run_id, " and ".join(missing))
    stage = "aggregates"
    try:
        if "aggregates" in missing:  # kept ones are not written again: a report alone needs none
            log.info("run %s: %s", run_id, aggregate(store, run_id, cfg.top_k))
        stage = "report"
        out = report(store, run_id, layout.report_path(store, run_id)) if cfg.report else None
    except (OSError, OutputError) as err:
        raise stage_failed(run_id, stage, err, store) from err
    return {"manifest": manifest, "written": missing, "report": out}
