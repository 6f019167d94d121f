"""``xai-ray evaluate``: faithfulness metrics for a run published without ``--evaluate``.

The run's documents are scored again on Ray actors with the run's own config (same model, same
attention options, so the same token scores) and evaluated there, exactly as ``--evaluate``
would have done; only the metrics and the evaluation's errors are added to the run, beside a
manifest that records the evaluation. The model's weights must still be the run's: the
fingerprints are compared before anything is written.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from xai_ray.config import RunConfig, absolute_paths
from xai_ray.model.loading import describe_model
from xai_ray.progress import Progress, native_stderr_into, route_noise
from xai_ray.query.connection import open_store, pick_run, run_named
from xai_ray.scoring.evaluation import chosen_for_evaluation
from xai_ray.store import StoreError, layout
from xai_ray.store.schemas import ERRORS, FAITHFULNESS
from xai_ray.store.writer import add_faithfulness, faithfulness_tables

log = logging.getLogger("xai_ray")


def evaluate_run(
    store: str | Path, run_id: str | None = None, share: float | None = None, actors: int | None = None
) -> dict:
    """Evaluate the published run ``run_id`` (default: the newest) in place; returns its new manifest."""
    from xai_ray import pipeline
    from xai_ray.pipeline.writing import WAITING

    started = time.perf_counter()
    con = open_store(store, run=run_id)
    run = pick_run(con, run_id)
    run_id, manifest = run["run_id"], json.loads(run["manifest"])
    # the writer's own test (add_faithfulness), asked before any document is scored again: the
    # folder, which also stands where an evaluation found no rows (a count of rows said "none")
    if (layout.run_dir(store, run_id) / "faithfulness").exists():
        raise StoreError(f"run {run_id!r} already has faithfulness metrics")
    cfg = RunConfig.from_manifest(manifest)
    cfg = RunConfig.from_manifest(
        manifest,
        evaluate=True,
        store=str(store),
        evaluate_share=share or cfg.evaluate_share,
        actors=cfg.actors if actors is None else actors,
    )
    cfg = absolute_paths(cfg)  # its actors read the model in Ray's folder, not this process's
    # The model's files checked here, before Ray: a folder deleted or moved since the run was scored
    # failed in every actor, with Ray's tracebacks, instead of one sentence.
    describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code)
    corpus = run_named(con, "run_corpus", run_id=run_id)
    con.close()
    # only the share is scored again: the actors would evaluate no other (the same stable choice)
    n_run = len(corpus)
    corpus = corpus[[chosen_for_evaluation(doc_id, cfg.evaluate_share) for doc_id in corpus.doc_id]]
    if n_run and corpus.empty:  # written, an empty evaluation would refuse every later one ("already has")
        raise StoreError(
            f"evaluate_share {cfg.evaluate_share} picked none of run {run_id!r}'s {n_run} documents: "
            "nothing was written; pass a larger --share (1.0 evaluates every document)"
        )
    share = cfg.evaluate_share
    log.info("evaluating run %s: %d of its %d documents (evaluate_share %g)", run_id, len(corpus), n_run, share)
    metrics, errors, seconds, fingerprints = [], [], {}, set()
    # Ray's and the libraries' chatter into the run's log, as `run` routes it (not onto the terminal)
    with native_stderr_into(route_noise(layout.run_log(store, run_id))):
        # made inside: its lines go to the terminal, which fd 2 no longer is (it was the log's)
        bar = Progress(len(corpus), "evaluating", "documents", heartbeat=True, waiting=WAITING)
        for batch in pipeline.score(corpus, cfg).iter_batches(batch_format="pyarrow", batch_size=None):
            bar.update(batch.num_rows)
            scored = [row for row in batch.to_pylist() if not row.get("error")]
            fingerprints.update(row["model_fingerprint"] for row in scored if row.get("model_fingerprint"))
            table, failed = faithfulness_tables(scored)
            metrics.append(table)
            errors.append(failed)
            for row in scored:
                for stage in ("gradient", "evaluate"):
                    seconds[stage] = seconds.get(stage, 0.0) + dict(row.get("seconds") or {}).get(stage, 0.0)
        bar.close()
    expected = manifest.get("model", {}).get("fingerprint")
    if expected and fingerprints - {expected}:
        raise StoreError(f"the model {cfg.model!r} no longer has the weights run {run_id!r} was scored with")
    metrics_table = pa.concat_tables(metrics) if metrics else FAITHFULNESS.empty_table()
    errors_table = pa.concat_tables(errors) if errors else ERRORS.empty_table()
    if metrics_table.num_rows == 0 and errors_table.num_rows == 0 and len(corpus):
        # written, this empty evaluation would have refused every later one ("already has")
        raise StoreError(
            f"evaluate_share {cfg.evaluate_share} picked none of run {run_id!r}'s {len(corpus)} documents: "
            "nothing was written; pass a larger --share (1.0 evaluates every document)"
        )
    manifest["config"] = {
        **manifest["config"],
        **{k: cfg.to_dict()[k] for k in ("evaluate", "evaluate_fractions", "evaluate_share")},
    }
    manifest["counts"] = {
        **manifest.get("counts", {}),
        "faithfulness": metrics_table.num_rows,
        "evaluate_errors": errors_table.num_rows,
    }
    timings = manifest.setdefault("timings", {})
    timings["actor_seconds"] = {**timings.get("actor_seconds", {}), **{k: round(v, 3) for k, v in seconds.items()}}
    timings["evaluate_s"] = round(time.perf_counter() - started, 3)
    manifest["evaluated_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    add_faithfulness(store, run_id, metrics_table, errors_table, manifest)
    _keep_report_aggregates(store, run_id)
    log.info(
        "run %s: %d faithfulness rows, %d evaluation errors", run_id, metrics_table.num_rows, errors_table.num_rows
    )
    return manifest


def _keep_report_aggregates(store, run_id: str) -> None:
    """Refresh what the report keeps beside the run (its faithfulness summary is new), and the
    page itself when the run has one."""
    from xai_ray.pipeline import report
    from xai_ray.report.aggregates import keep_aggregates

    keep_aggregates(store, run_id)
    page = layout.report_path(store, run_id)
    if page.is_file():
        report(store, run_id, page)
