"""The straight line: read -> score on Ray actors -> write Parquet -> aggregate -> report.

Each stage takes and returns plain values (a DataFrame, an iterator of Arrow tables, a folder),
so a notebook can call any one of them alone.
"""

from __future__ import annotations

import logging
import os
import platform
import secrets
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import yaml

from xai_ray.config import RunConfig
from xai_ray.corpus import read_corpus
from xai_ray.head_summary import HeadTotals
from xai_ray.model import describe_model
from xai_ray.screening import screen
from xai_ray.store import RunWriter

log = logging.getLogger("xai_ray")


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    manifest: dict
    report: Path | None


def run(cfg: RunConfig) -> RunResult:
    """Score a corpus end to end and publish one run into ``cfg.store``.

    A run id whose staging holds committed parts (a killed earlier attempt) is resumed: only the
    documents those parts lack are scored.
    """
    started = time.perf_counter()
    run_id = cfg.run_id or new_run_id()
    model = describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code)  # fail before Ray starts
    corpus = read(cfg)
    kept, rejected = screen(corpus, model["labels"])
    writer = open_writer(cfg, run_id)
    kept["heads_sample"] = heads_sample(len(kept), cfg)  # over the whole corpus: a resume keeps the sample
    todo = kept[~kept["doc_id"].isin(writer.done_ids)].reset_index(drop=True)
    if writer.reused["parts"]:
        log.info("resuming run %s: %d documents already committed in %d part(s); %d left to score",
                 run_id, len(kept) - len(todo), writer.reused["parts"], len(todo))
    rows = score(todo, cfg) if len(todo) else iter(())
    run_dir, manifest = write(rows, cfg, run_id, n_input=len(corpus), started=started, model=model,
                              writer=writer, rejected=rejected, todo=todo["doc_id"])
    summary = aggregate(cfg.store, run_id, cfg.top_k)
    log.info("run %s: %s", run_id, summary)
    out = report(cfg.store, run_id, run_dir / "report.html") if cfg.report else None
    return RunResult(run_id=run_id, run_dir=run_dir, manifest=manifest, report=out)


# What shapes a run's outputs: a resumed run must agree on all of these with its first attempt.
IDENTITY_KEYS = ("data", "split", "text_column", "label_column", "id_column", "clean_html", "limit", "seed",
                 "model", "allow_pickle", "trust_remote_code", "max_length", "methods", "residual",
                 "head_fusion", "discard_ratio", "start_layer", "heads", "heads_sample", "heads_sample_rows",
                 "evaluate", "evaluate_fractions", "evaluate_share")


def open_writer(cfg: RunConfig, run_id: str) -> RunWriter:
    """The run's writer; resumes the run when its staging holds committed parts."""
    settings = cfg.to_dict()
    writer = RunWriter(cfg.store, run_id, list(cfg.methods), identity={k: settings[k] for k in IDENTITY_KEYS},
                       part_rows=cfg.part_rows, totals=HeadTotals if cfg.heads else None)
    (writer.staging / "config.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))  # what --resume reads
    return writer


def resume_config(store: str, run_id: str, flags: dict | None = None, sets: list[str] | None = None) -> RunConfig:
    """The config an unfinished run was started with (its staging keeps it), execution flags on top."""
    from xai_ray.config import resolve
    from xai_ray.store import StoreError, run_dir, staging_dir

    saved = staging_dir(store, run_id) / "config.yaml"
    if not saved.is_file():
        if run_dir(store, run_id).is_dir():
            raise StoreError(f"run {run_id!r} in store {store!r} is already complete; nothing to resume")
        raise StoreError(f"store {store!r} has no unfinished run {run_id!r} to resume")
    flags = {**(flags or {}), "store": store, "run_id": run_id}
    return resolve(saved, flags, sets)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def read(cfg: RunConfig) -> pd.DataFrame:
    """Stage 1: the corpus as ``doc_id, text, label`` rows."""
    corpus = read_corpus(cfg.data, cfg.split, cfg.text_column, cfg.label_column, cfg.id_column,
                         cfg.limit, cfg.seed, cfg.clean_html)
    log.info("read %d documents from %s", len(corpus), cfg.data)
    return corpus


def score(corpus: pd.DataFrame, cfg: RunConfig) -> Iterator[pa.Table]:
    """Stage 2: score on a pool of Ray actors; yields Arrow batches of scorer rows."""
    import ray
    from ray.data import ActorPoolStrategy

    from xai_ray.scoring import DeferredMethods, Scorer

    ensure_ray()
    gpus = float(cfg.gpus_per_actor) if cfg.gpus_per_actor is not None else (
        1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0)
    actors = cfg.actors or _auto_actors(gpus, cfg.cpus_per_actor)
    ordered = order_corpus(corpus, cfg)
    table = pa.Table.from_pandas(ordered, preserve_index=False)
    n_blocks = max(1, min(len(ordered) // max(cfg.batch_size, 1), actors * 8))
    step = -(-table.num_rows // n_blocks)
    dataset = ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)])
    defer = cfg.defer_flow if cfg.defer_flow is not None else gpus > 0
    defer = defer and not cfg.evaluate  # the evaluation ranks tokens by flow too, on the actor holding the model
    deferred = [m for m in cfg.methods if m == "flow"] if defer else []
    config = {**cfg.to_dict(), "gpus_per_actor": gpus, "deferred_methods": deferred}
    scored = dataset.map_batches(
        Scorer,
        fn_constructor_kwargs={"config": config},
        batch_size=cfg.batch_size,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=actors),
        num_gpus=gpus,
        num_cpus=cfg.cpus_per_actor,
        **ACTOR_FAULT_TOLERANCE,
    )
    if deferred:
        # Flow is CPU work: GPU actors hand it the compact fused attention and move on.
        cpu_workers = max(1, int(ray.cluster_resources().get("CPU", 1)) - int(actors * cfg.cpus_per_actor))
        scored = scored.map_batches(
            DeferredMethods,
            fn_constructor_kwargs={"config": config},
            batch_size=cfg.batch_size,
            batch_format="pyarrow",
            compute=ActorPoolStrategy(min_size=1, max_size=cpu_workers),
            num_cpus=1,
            **ACTOR_FAULT_TOLERANCE,
        )
    log.info("scoring %d documents on %d actor(s), %.0f GPU each", len(ordered), actors, gpus)
    yield from scored.iter_batches(batch_format="pyarrow", batch_size=None)


# A killed actor is restarted (its constructor reloads the model) and the block it held is run
# again. Ray Data 2.x defaults to these; they are spelled out so a change of default cannot turn
# a lost worker into a failed run. Application errors are not retried: the scorer records them.
ACTOR_FAULT_TOLERANCE = {"max_restarts": -1, "max_task_retries": -1}


def order_corpus(corpus: pd.DataFrame, cfg: RunConfig) -> pd.DataFrame:
    """The corpus as the actors get it: longest first (batches hold similar lengths, so little
    padding, and memory trouble shows early), with the head-similarity sample marked."""
    order = corpus["text"].map(lambda t: len(t) if isinstance(t, str) else 0).sort_values(ascending=False).index
    ordered = corpus.loc[order].reset_index(drop=True)
    if "heads_sample" not in ordered:  # run() marks it over the whole corpus; a lone call here
        ordered["heads_sample"] = heads_sample(len(ordered), cfg)
    return ordered


def heads_sample(n_docs: int, cfg: RunConfig):
    """Which documents the actors compare heads on (Jensen-Shannon): a seeded random ``heads_sample``."""
    import numpy as np

    chosen = np.zeros(n_docs, dtype=bool)
    if cfg.heads and cfg.heads_sample:
        picked = np.random.default_rng(cfg.seed).choice(n_docs, size=min(cfg.heads_sample, n_docs), replace=False)
        chosen[picked] = True
    return chosen


def ensure_ray() -> None:
    import ray

    if not ray.is_initialized():
        # Inside `ray job submit` or with RAY_ADDRESS this joins that cluster; else starts a local one.
        if not os.environ.get("RAY_ADDRESS"):
            _loopback_only()
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 logging_level=logging.WARNING, log_to_driver=True)
        ray.data.DataContext.get_current().enable_progress_bars = sys.stderr.isatty()
    # Never drop a failed block silently (the default, spelled out): a lost block fails the run,
    # which then resumes from its committed parts, rather than publishing without those documents.
    ray.data.DataContext.get_current().max_errored_blocks = 0


def _loopback_only() -> None:
    """Make a local cluster started here listen on loopback only.

    Ray gives a new head the machine's routable address, and its servers then listen on every
    interface (even with ``_node_ip_address="127.0.0.1"``, which it resolves back to that address).
    With clusters switched off, as Ray does on macOS and Windows, the node address is loopback and
    every server binds to it. Joining a real cluster (``RAY_ADDRESS``) is unaffected.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # for the processes started from here
    ray_constants.ENABLE_RAY_CLUSTER = False  # read when the node address is chosen


def _auto_actors(gpus: float, cpus_per_actor: float) -> int:
    import ray

    resources = ray.cluster_resources()
    if gpus > 0:
        return max(1, int(resources.get("GPU", 1) // gpus))
    return max(1, int(resources.get("CPU", 1) // max(cpus_per_actor, 1)))


def write(rows: Iterable[pa.Table], cfg: RunConfig, run_id: str, n_input: int, started: float | None = None,
          model: dict | None = None, writer: RunWriter | None = None, rejected: pd.DataFrame | None = None,
          todo: Iterable[str] | None = None):
    """Stage 3: write scorer rows into the store and publish the run; returns (run folder, manifest).

    ``rejected`` rows (from ``screen``) go to ``errors``; every id in ``todo`` that no scorer row
    came back for is recorded as an error too, so the run accounts for each input document.
    On failure the committed parts stay in staging for ``xai-ray run --resume``.
    """
    started = started or time.perf_counter()
    writer = writer or open_writer(cfg, run_id)
    done, last_note = 0, time.perf_counter()
    n_todo = len(todo) if todo is not None else n_input
    actor_seconds: dict[str, float] = {}  # summed over actors: where the scoring time went
    score_started = time.perf_counter()
    try:
        if rejected is not None:
            writer.write_errors(rejected["doc_id"].tolist(), "read", rejected["reason"].tolist())
        for batch in rows:
            writer.write(batch)
            for stages in batch.column("seconds").to_pylist():
                for stage, seconds in stages or []:
                    actor_seconds[stage] = actor_seconds.get(stage, 0.0) + seconds
            done += batch.num_rows
            if time.perf_counter() - last_note > 10 or done == n_todo:
                rate = done / max(time.perf_counter() - score_started, 1e-9)
                log.info("scored %d/%d documents (%.1f docs/s)", done, n_todo, rate)
                last_note = time.perf_counter()
        lost = [doc_id for doc_id in (todo if todo is not None else []) if doc_id not in writer.done_ids]
        if lost:  # cannot happen unless a block vanished; recorded rather than silently missing
            log.error("%d documents came back from no actor; recorded as errors", len(lost))
            writer.write_errors(lost, "score", ["no result came back from the scoring actors"] * len(lost))
        writer.commit()  # the last part, so the fingerprints and counts below are complete
        if len(writer.fingerprints) > 1:
            raise RuntimeError(f"actors loaded different weights: {sorted(writer.fingerprints)}")
        score_s = time.perf_counter() - score_started
        model = model or describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code)
        model = {**model, "fingerprint": next(iter(writer.fingerprints), None),
                 "n_layers": writer.n_layers or model["n_layers"]}
        manifest = build_manifest(cfg, run_id, model, n_input, score_s, started)
        manifest["timings"]["docs_per_s"] = round(done / max(score_s, 1e-9), 3)  # this attempt's documents
        manifest["timings"]["actor_seconds"] = {k: round(v, 3) for k, v in sorted(actor_seconds.items())}
        manifest["resumed"] = {**writer.reused, "docs_scored_now": done}
        head_totals = writer.totals  # per-head sums over every committed part
        if head_totals is not None and head_totals.n_docs:
            writer.write_whole("heads", head_totals.heads_table())
            manifest["heads"] = {"documents": head_totals.n_docs, "rows": head_totals.n_rows,
                                 "similarity_documents": head_totals.jsd_docs,
                                 "similarity_rows": head_totals.jsd_rows}
        if head_totals is not None and head_totals.jsd is not None:
            writer.write_whole("head_similarity", head_totals.similarity_table())
        run_dir = writer.publish(manifest)
    except BaseException:
        writer.abort(keep_parts=True)
        if writer.stage.records:
            log.error("run %s stopped; %d committed part(s) kept: finish it with `xai-ray run --resume %s "
                      "--store %s`", run_id, len(writer.stage.records), run_id, cfg.store)
        raise
    log.info("published run %s into %s (%s)", run_id, run_dir, writer.counts)
    return run_dir, {**manifest, "counts": writer.counts}


def build_manifest(cfg, run_id, model: dict, n_input, score_s, started) -> dict:
    return {
        "run_id": run_id,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "status": "complete",
        "config": cfg.to_dict(),
        "model": model,
        "attention": cfg.attention_options,
        "input_documents": n_input,
        "timings": {"score_and_write_s": round(score_s, 3), "total_s": round(time.perf_counter() - started, 3),
                    "docs_per_s": round(n_input / max(score_s, 1e-9), 3)},
        "versions": versions(),
        "host": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("xai-ray", "torch", "transformers", "tokenizers", "ray", "pyarrow", "duckdb", "altair", "numpy",
                 "numba"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def aggregate(store: str | Path, run_id: str, k: int = 20) -> dict:
    """Stage 4: the run's corpus-wide aggregates, kept beside it for the report, and its headline
    numbers and top words (rollout if present, else the first method) for the log."""
    from xai_ray.query import open_store, pick_run, run_named, topk
    from xai_ray.report import keep_aggregates

    keep_aggregates(store, run_id)
    con = open_store(store)
    run = pick_run(con, run_id)
    summary = run_named(con, "summary", run_id=run_id).iloc[0].to_dict()
    methods = run["methods"].split(",")
    method = "rollout" if "rollout" in methods else methods[0]
    top = topk(con, run_id=run_id, method=method, k=k, min_count=min(5, max(1, int(summary["n_docs"]) // 20)))
    return {**summary, "method": method, "top_words": top["word"].tolist()[:10]}


def report(store: str | Path, run_id: str, out: str | Path) -> Path:
    """Stage 5: one self-contained HTML report of the run."""
    from xai_ray.report import build_report

    return build_report(store, run_id, out)
