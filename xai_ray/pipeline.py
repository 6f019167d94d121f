"""The straight line: read -> score on Ray actors -> write Parquet -> aggregate -> report.

Each stage takes and returns plain values (a DataFrame, an iterator of Arrow tables, a folder),
so a notebook can call any one of them alone.

Over 300 lines: the stages and the publish stage's accounting (every input row ends in docs or
errors exactly once) stay in one file, so the straight line reads top to bottom.
"""

from __future__ import annotations

import logging
import os
import platform
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import yaml

from xai_ray.config import RunConfig, resolve_target
from xai_ray.data.corpus import read_corpus
from xai_ray.data.screening import screen
from xai_ray.methods.head_summary import HeadTotals
from xai_ray.model.loading import describe_model
from xai_ray.progress import Progress, native_stderr_into, route_noise
from xai_ray.runtime import ensure_ray, versions
from xai_ray.scoring.segments import resolve_mode
from xai_ray.store import StoreError, layout, remote
from xai_ray.store.files import write_atomically
from xai_ray.store.writer import RunWriter, check_store

log = logging.getLogger("xai_ray")


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    manifest: dict
    report: Path | None


def run(cfg: RunConfig) -> RunResult:
    """Score a corpus end to end and publish one run into ``cfg.store`` (a folder or a store URI).

    A run id whose staging holds committed parts (a killed earlier attempt) is resumed: only the
    documents those parts lack are scored.
    """
    if remote.is_uri(cfg.store):
        return _run_through_mirror(cfg)
    started = time.perf_counter()
    cfg = replace(cfg, run_id=cfg.run_id or new_run_id())
    check_store(cfg.store)  # before the log file goes into it
    logged = route_noise(layout.run_log(cfg.store, cfg.run_id))  # Ray's and setuptools' chatter: into the run's log
    with native_stderr_into(logged):  # and what Ray's C++ core writes to stderr
        model = describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code)  # fail before Ray starts
        resolve_target(cfg.target, model["labels"])  # a class the model lacks: one sentence, before Ray
        corpus = read(cfg)
        kept, rejected = screen(corpus, model["labels"])
        return publish(kept, rejected, cfg, n_input=len(corpus), model=model, started=started)


def publish(
    kept: pd.DataFrame, rejected: pd.DataFrame, cfg: RunConfig, n_input: int, model: dict, started: float | None = None
) -> RunResult:
    """Stages 2-5 for screened rows: score ``kept`` on actors, record ``rejected`` as errors, write,
    publish, aggregate, report. Every job that publishes a run (``run``, ``nightly``, jobs on a
    cluster) comes through here, so each input row ends up exactly once in ``docs`` or ``errors``."""
    started = started or time.perf_counter()
    run_id = cfg.run_id or new_run_id()
    cfg = resolved(cfg)
    writer = open_writer(cfg, run_id)
    kept = kept.assign(heads_sample=heads_sample(len(kept), cfg))  # over all rows: a resume keeps the sample
    todo = kept[~kept["doc_id"].isin(writer.done_ids)].reset_index(drop=True)
    if writer.reused["parts"]:
        log.info(
            "resuming run %s: %d documents already committed in %d part(s); %d left to score",
            run_id,
            len(kept) - len(todo),
            writer.reused["parts"],
            len(todo),
        )
    rows = score(todo, cfg) if len(todo) else iter(())
    run_dir, manifest = write(
        rows,
        cfg,
        run_id,
        n_input=n_input,
        started=started,
        model=model,
        writer=writer,
        rejected=rejected,
        todo=todo["doc_id"],
    )
    summary = aggregate(cfg.store, run_id, cfg.top_k)
    log.info("run %s: %s", run_id, summary)
    out = report(cfg.store, run_id, layout.report_path(cfg.store, run_id)) if cfg.report else None
    return RunResult(run_id=run_id, run_dir=run_dir, manifest=manifest, report=out)


def _run_through_mirror(cfg: RunConfig) -> RunResult:
    """A store URI is written through its local mirror, then uploaded. The manifest's
    ``config.store`` is the mirror folder; ``config.extra.store_uri`` the store it was published to."""
    local = remote.pull(cfg.store)
    if cfg.run_id and layout.is_published(local, cfg.run_id):
        raise StoreError(f"run {cfg.run_id!r} already exists in store {cfg.store!r}; pick another --run-id")
    result = run(replace(cfg, store=str(local), extra={**cfg.extra, "store_uri": cfg.store}))
    remote.push_run(local, cfg.store, result.run_id)
    return result


# What shapes a run's outputs: a resumed run must agree on all of these with its first attempt.
IDENTITY_KEYS = (
    "data",
    "split",
    "text_column",
    "label_column",
    "id_column",
    "clean_html",
    "limit",
    "seed",
    "model",
    "allow_pickle",
    "trust_remote_code",
    "max_length",
    "long_text",
    "window_stride",
    "methods",
    "residual",
    "head_fusion",
    "discard_ratio",
    "start_layer",
    "target",
    "ig_steps",
    "heads",
    "heads_sample",
    "heads_sample_rows",
    "evaluate",
    "evaluate_fractions",
    "evaluate_share",
)


def resolved(cfg: RunConfig) -> RunConfig:
    """``cfg`` with what depends on the model settled (``long_text=auto`` -> how the model was fine-tuned),
    so the identity of a run and its manifest say what was done."""
    return replace(cfg, long_text=resolve_mode(cfg.long_text, cfg.model))


def open_writer(cfg: RunConfig, run_id: str) -> RunWriter:
    """The run's writer; resumes the run when its staging holds committed parts."""
    settings = resolved(cfg).to_dict()
    writer = RunWriter(
        cfg.store,
        run_id,
        list(cfg.methods),
        identity={k: settings[k] for k in IDENTITY_KEYS},
        part_rows=cfg.part_rows,
        totals=HeadTotals if cfg.heads else None,
    )
    write_atomically(layout.staged_config(cfg.store, run_id), yaml.safe_dump(settings, sort_keys=False))
    return writer


def resume_config(store: str, run_id: str, flags: dict | None = None, sets: list[str] | None = None) -> RunConfig:
    """The config an unfinished run was started with (its staging keeps it), execution flags on top."""
    from xai_ray.config import resolve

    saved = layout.staged_config(store, run_id)
    if not saved.is_file():
        if layout.run_dir(store, run_id).is_dir():
            raise StoreError(f"run {run_id!r} in store {store!r} is already complete; nothing to resume")
        raise StoreError(f"store {store!r} has no unfinished run {run_id!r} to resume")
    flags = {**(flags or {}), "store": store, "run_id": run_id}
    return resolve(saved, flags, sets)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def read(cfg: RunConfig) -> pd.DataFrame:
    """Stage 1: the corpus as ``doc_id, text, label`` rows."""
    corpus = read_corpus(
        cfg.data, cfg.split, cfg.text_column, cfg.label_column, cfg.id_column, cfg.limit, cfg.seed, cfg.clean_html
    )
    log.info("read %d documents from %s", len(corpus), cfg.data)
    return corpus


def score(corpus: pd.DataFrame, cfg: RunConfig) -> Iterator[pa.Table]:
    """Stage 2: score on a pool of Ray actors; yields Arrow batches of scorer rows."""
    import ray
    from ray.data import ActorPoolStrategy

    from xai_ray.scoring.actor import Scorer
    from xai_ray.scoring.deferred import DeferredMethods
    from xai_ray.scoring.settings import ScorerConfig

    ensure_ray()
    gpus = (
        float(cfg.gpus_per_actor)
        if cfg.gpus_per_actor is not None
        else (1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0)
    )
    actors = cfg.actors or _auto_actors(gpus, cfg.cpus_per_actor)
    ordered = order_corpus(corpus, cfg)
    table = pa.Table.from_pandas(ordered, preserve_index=False)
    n_blocks = max(1, min(len(ordered) // max(cfg.batch_size, 1), actors * 8))
    step = -(-table.num_rows // n_blocks)
    dataset = ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)])
    defer = cfg.defer_flow if cfg.defer_flow is not None else gpus > 0
    defer = defer and not cfg.evaluate  # the evaluation ranks tokens by flow too, on the actor holding the model
    defer = defer and resolve_mode(cfg.long_text, cfg.model) != "window"  # windows merge on the actor
    deferred = [m for m in cfg.methods if m == "flow"] if defer else []
    config = ScorerConfig.of(cfg, gpus_per_actor=gpus, deferred_methods=deferred)
    # A killed actor is restarted (its constructor reloads the model) and the block it held is run
    # again: Ray Data's defaults for actor pools (restarts and task retries without limit), passed as
    # no remote args here. tests/test_faults_ray.py kills an actor mid-run and checks every document
    # is published once, so a change of those defaults fails a test rather than a user's run.
    # Application errors are not retried: the scorer records them.
    scored = dataset.map_batches(
        Scorer,
        fn_constructor_kwargs={"config": config},
        batch_size=cfg.batch_size,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=actors),
        num_gpus=gpus,
        num_cpus=cfg.cpus_per_actor,
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
        )
    log.info("scoring %d documents on %d actor(s), %.0f GPU each", len(ordered), actors, gpus)
    yield from scored.iter_batches(batch_format="pyarrow", batch_size=None)


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


def _auto_actors(gpus: float, cpus_per_actor: float) -> int:
    import ray

    resources = ray.cluster_resources()
    if gpus > 0:
        return max(1, int(resources.get("GPU", 1) // gpus))
    return max(1, int(resources.get("CPU", 1) // max(cpus_per_actor, 1)))


def write(
    rows: Iterable[pa.Table],
    cfg: RunConfig,
    run_id: str,
    n_input: int,
    started: float | None = None,
    model: dict | None = None,
    writer: RunWriter | None = None,
    rejected: pd.DataFrame | None = None,
    todo: Iterable[str] | None = None,
):
    """Stage 3: write scorer rows into the store and publish the run; returns (run folder, manifest).

    ``rejected`` rows (from ``screen``) go to ``errors``; every id in ``todo`` that no scorer row
    came back for is recorded as an error too, so the run accounts for each input document.
    On failure the committed parts stay in staging for ``xai-ray run --resume``.
    """
    started = started or time.perf_counter()
    writer = writer or open_writer(cfg, run_id)
    done = 0
    n_todo = len(todo) if todo is not None else n_input
    bar = Progress(n_todo, "scoring", "documents")
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
            bar.update(batch.num_rows)
        bar.close()
        log.debug("scored %d/%d documents", done, n_todo)
        lost = [doc_id for doc_id in (todo if todo is not None else []) if doc_id not in writer.done_ids]
        if lost:  # cannot happen unless a block vanished; recorded rather than silently missing
            log.error("%d documents came back from no actor; recorded as errors", len(lost))
            writer.write_errors(lost, "score", ["no result came back from the scoring actors"] * len(lost))
        writer.commit()  # the last part, so the fingerprints and counts below are complete
        if len(writer.fingerprints) > 1:
            raise RuntimeError(f"actors loaded different weights: {sorted(writer.fingerprints)}")
        score_s = time.perf_counter() - score_started
        model = model or describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code)
        model = {
            **model,
            "fingerprint": next(iter(writer.fingerprints), None),
            "n_layers": writer.n_layers or model["n_layers"],
        }
        manifest = build_manifest(cfg, run_id, model, n_input, score_s, started)
        manifest["timings"]["docs_per_s"] = round(done / max(score_s, 1e-9), 3)  # this attempt's documents
        manifest["timings"]["actor_seconds"] = {k: round(v, 3) for k, v in sorted(actor_seconds.items())}
        manifest["resumed"] = {**writer.reused, "docs_scored_now": done}
        head_totals = writer.totals  # per-head sums over every committed part
        if head_totals is not None and head_totals.n_docs:
            writer.write_whole("heads", head_totals.heads_table())
            manifest["heads"] = {
                "documents": head_totals.n_docs,
                "rows": head_totals.n_rows,
                "similarity_documents": head_totals.jsd_docs,
                "similarity_rows": head_totals.jsd_rows,
            }
        if head_totals is not None and head_totals.jsd is not None:
            writer.write_whole("head_similarity", head_totals.similarity_table())
        run_dir = writer.publish(manifest)
    except BaseException:
        bar.close(failed=True)
        writer.abort(keep_parts=True)
        if writer.stage.records:
            log.error(
                "run %s stopped; %d committed part(s) kept: finish it with `xai-ray run --resume %s --store %s`",
                run_id,
                len(writer.stage.records),
                run_id,
                cfg.store,
            )
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
        "target": target_record(cfg, model),
        "input_documents": n_input,
        "timings": {
            "score_and_write_s": round(score_s, 3),
            "total_s": round(time.perf_counter() - started, 3),
            "docs_per_s": round(n_input / max(score_s, 1e-9), 3),
        },
        "versions": versions(),
        "host": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
    }


def target_record(cfg, model: dict) -> dict | None:
    """What the class-specific methods explained (null when the run has none): the ``target`` asked
    for, the class index it names (null for pred and label, which vary per document: see
    ``docs.target``), the objective each method differentiates, and integrated gradients' steps."""
    from xai_ray.methods import REGISTRY

    chosen = [m for m in cfg.methods if REGISTRY[m].class_specific]
    if not chosen:
        return None
    resolved = resolve_target(cfg.target, model.get("labels") or {})
    return {
        "target": cfg.target,
        "class": None if isinstance(resolved, str) else resolved,
        "objectives": {m: REGISTRY[m].objective for m in chosen},
        "ig_steps": cfg.ig_steps if "integrated_gradients" in chosen else None,
    }


def aggregate(store: str | Path, run_id: str, k: int = 20) -> dict:
    """Stage 4: the run's corpus-wide aggregates, kept beside it for the report, and its headline
    numbers and top words (rollout if present, else the first method) for the log."""
    from xai_ray.query.connection import open_store, pick_run, run_named
    from xai_ray.query.top_words import keep_word_totals, topk
    from xai_ray.report.aggregates import keep_aggregates
    from xai_ray.report.definition import DEFAULTS

    keep_aggregates(store, run_id)
    keep_word_totals(store, run_id)
    con = open_store(store)
    run = pick_run(con, run_id)
    summary = run_named(con, "summary", run_id=run_id).iloc[0].to_dict()
    methods = run["methods"].split(",")
    method = "rollout" if "rollout" in methods else methods[0]
    # The report's defaults (wordstats): lift, wordstats.default_min_docs, punctuation left out.
    top = topk(con, run_id=run_id, method=method, k=k, exclude=DEFAULTS["exclude"])
    return {**summary, "method": method, "top_words": top["word"].tolist()[:10]}


def report(store: str | Path, run_id: str, out: str | Path) -> Path:
    """Stage 5: one self-contained HTML report of the run."""
    from xai_ray.report.page import build_report

    return build_report(store, run_id, out)
