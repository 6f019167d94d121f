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
from xai_ray.store import layout

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

    return build_report(store, run_id, out)


def unfinished(store: str | Path, run_id: str) -> list[str]:
    """The stages a published run still lacks: ``aggregates`` when a kept aggregate that its
    stage writes is missing, ``report`` when its settings asked for a report and there is none."""
    from xai_ray.query.connection import WORD_TOTALS
    from xai_ray.report.aggregates import missing_aggregates

    manifest = layout.read_manifest(layout.manifest_path(store, run_id))
    missing = []
    if not layout.aggregate_file(store, run_id, WORD_TOTALS).is_file() or missing_aggregates(store, run_id):
        missing.append("aggregates")
    if RunConfig.from_manifest(manifest).report and not layout.report_path(store, run_id).is_file():
        missing.append("report")
    return missing


def finish_published(store: str | Path, run_id: str) -> dict | None:
    """Write what a published run lacks (``unfinished``): its aggregates, then its report. Returns
    the run's manifest, the stages written and the report's path; None when the store holds no
    published run ``run_id`` or the run lacks nothing (``--resume`` then says why in its own words)."""
    if not layout.manifest_path(store, run_id).is_file():
        return None
    missing = unfinished(store, run_id)
    if not missing:
        return None
    manifest = layout.read_manifest(layout.manifest_path(store, run_id))
    cfg = RunConfig.from_manifest(manifest)
    log.info("run %s is published without its %s: writing them", run_id, " and ".join(missing))
    summary = aggregate(store, run_id, cfg.top_k)
    log.info("run %s: %s", run_id, summary)
    out = report(store, run_id, layout.report_path(store, run_id)) if cfg.report else None
    return {"manifest": manifest, "written": missing, "report": out}
