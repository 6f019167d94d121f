"""Stage 4, writing: Ray workers commit the scored rows as parts; the driver collects and publishes.

``write_parts`` adds a write stage after the scoring actors: Ray tasks turn each block of scorer
rows into one committed part of the run's staging (``store.parts``: Arrow column by column) and
send back only its record. ``write`` counts the records (``RunWriter.collect``: a part delivered
twice counts once, a part overlapping another is dropped), records the screened-out rows and any
document no part came back for as errors, and publishes the run with its manifest. Given Arrow
tables instead (a notebook, a test), the driver writes them itself through the same tables code.

Over 300 lines: the write stage, the driver's accounting of every input row (docs or errors,
exactly once) and the manifest it publishes stay together.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from xai_ray.config import RunConfig, resolve_target
from xai_ray.methods.head_summary import HeadTotals
from xai_ray.model.loading import describe_model
from xai_ray.pipeline.pool import input_limit, source_state, start_timings
from xai_ray.progress import Progress
from xai_ray.runtime import ray_data, versions
from xai_ray.scoring.segments import resolve_mode
from xai_ray.store import layout
from xai_ray.store.files import write_atomically
from xai_ray.store.parts import PartWriter
from xai_ray.store.schemas import LAYOUT
from xai_ray.store.tables import stage_seconds
from xai_ray.store.writer import RunWriter

log = logging.getLogger("xai_ray")
READ_ERRORS_PART = "read"
WAITING = "waiting for the first batch (actors starting, loading the model, scoring)"  # the one part holding the screened-out rows: a resumed run rewrites it in place


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
    "ig_tolerance",
    "heads",
    "heads_docs",
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
    identity = {k: settings[k] for k in IDENTITY_KEYS}
    # what the model folder and the corpus hold now: a resume after either changed would mix versions
    identity["model_files"] = source_state(cfg.model, nested=False)  # the weights sit at its top
    if not cfg.extra.get("nightly"):  # a night's folder gains files by design: its screening skips what is done
        identity["data_files"] = source_state(cfg.data, outside=cfg.store)
    writer = RunWriter(
        cfg.store,
        run_id,
        list(cfg.methods),
        identity=identity,
        part_rows=cfg.part_rows,
        totals=HeadTotals if cfg.heads else None,
        layout=cfg.store_layout,  # a resumed run keeps the layout its parts were written in
    )
    if writer.layout in (2, 3):  # what it is written in, whatever --set store_layout a resume was given
        settings["store_layout"] = writer.layout
    write_atomically(layout.staged_config(cfg.store, run_id), yaml.safe_dump(settings, sort_keys=False))
    return writer


def write_parts(
    scored, cfg: RunConfig, run_id: str, writers: int | None = None, layout: int = LAYOUT
) -> Iterator[dict]:
    """Run ``scored`` (a Ray Dataset of scorer rows) through a write stage on Ray workers; yields the
    records of the parts they commit, as they come (the rows stay on the workers), in store
    ``layout`` (the run writer's)."""
    import ray

    writers = writers or max(2, int(ray.cluster_resources().get("CPU", 2)))
    records = scored.map_batches(
        _write_block,
        fn_kwargs={
            "store": str(Path(cfg.store).resolve()),  # workers do not share the driver's working directory
            "run_id": run_id,
            "methods": list(cfg.methods),
            "heads": cfg.heads,
            "layout": layout,
        },
        batch_size=docs_per_part(cfg),
        batch_format="pyarrow",
        # Writing is Arrow and file work beside the actors: it asks for no CPU of its own, so
        # actors holding every core cannot starve it; the pool's size bounds it instead.
        num_cpus=0,
        compute=ray_data().TaskPoolStrategy(size=writers),
        **_where(cfg),
    )
    for batch in records.iter_batches(batch_format="pyarrow", batch_size=None):
        for text in batch.column("record").to_pylist():
            yield json.loads(text)


def _where(cfg: RunConfig) -> dict:
    """Where writers run: any node when every node mounts the store (``shared_store``), else this
    driver's node (its store folder, or a URI store's local mirror, is there only)."""
    import ray

    if cfg.shared_store and not cfg.extra.get("store_uri"):
        return {}
    return {"label_selector": {"ray.io/node-id": ray.get_runtime_context().get_node_id()}}  # every node's label


def docs_per_part(cfg: RunConfig) -> int:
    """Documents per part: ``part_rows`` rows in the largest slice (a tokens slice holds up to
    ``max_length`` rows a document)."""
    return max(1, cfg.part_rows // max(cfg.max_length, 1))


def _write_block(batch: pa.Table, store: str, run_id: str, methods: list[str], heads: bool, layout: int) -> pa.Table:
    import ray

    node = ray.get_runtime_context().get_node_id()
    totals = HeadTotals if heads else None
    record = PartWriter(store, run_id, methods, totals=totals, layout=layout).write(batch, node=node)
    return pa.table({"record": pa.array([json.dumps(record)] if record else [], pa.string())})


def _write_read_errors(store: str, run_id: str, layout: int, *verdicts: pa.Table) -> dict:
    """The screened-out rows (``data.screening.verdicts``), in input order, as one errors part of
    the run's store ``layout`` (the views refuse a part of another layout than the manifest's)."""
    import ray

    from xai_ray.data.screening import DUPLICATE, REJECTED, VERDICTS

    table = pa.concat_tables([VERDICTS.empty_table(), *verdicts]).sort_by("pos")
    rejected = table.filter(pc.is_in(table.column("verdict"), pa.array([REJECTED, DUPLICATE], pa.int8())))
    node = ray.get_runtime_context().get_node_id()
    return PartWriter(store, run_id, [], layout=layout).write_errors(
        rejected.column("doc_id").to_pylist(),
        "read",
        rejected.column("reason").to_pylist(),
        key=READ_ERRORS_PART,
        node=node,
    )


def write(
    rows,
    cfg: RunConfig,
    run_id: str,
    n_input: int,
    started: float | None = None,
    model: dict | None = None,
    writer: RunWriter | None = None,
    rejected=None,
    todo: Iterable[str] | None = None,
    screened=None,
):
    """Write scored rows into the store and publish the run; returns (run folder, manifest).

    ``rows``: a Ray Dataset of scorer rows (written by workers), records of parts workers wrote
    (``write_parts``), Arrow tables of scorer rows (written here), or None. ``screened`` (the
    screening's outcome: a ``Screened``, or a ``data.held.Held`` the driver holds) or ``rejected``
    (a DataFrame ``doc_id, reason``) give the ``errors`` rows of the rows not scored; every document to score (``screened``'s count, or the ids in ``todo``)
    that no part holds is recorded as an error too, so the run accounts for each input document.
    On failure the committed parts stay in staging for ``xai-ray run --resume``.
    """
    started = started or time.perf_counter()
    writer = writer or open_writer(cfg, run_id)
    if is_held(screened):  # a small corpus the driver read and screened: its rows are here
        rejected, todo, screened = screened.rejected(), screened.todo().column("doc_id").to_pylist(), None
    n_todo = screened.counts["todo"] if screened is not None else (len(todo) if todo is not None else n_input)
    # A line every LINE_EVERY_S from here, before the first part too: actors starting and a first
    # batch of long reviews can take minutes, and a silent log reads as a hung job.
    bar = Progress(n_todo, "scoring", "documents", heartbeat=True, waiting=WAITING)
    actor_seconds: dict[str, float] = {}  # summed over actors: where the scoring time went
    score_started = time.perf_counter()
    done = 0
    try:
        _record_rejected(writer, cfg, run_id, screened, rejected)
        for item in _items(rows, cfg, run_id, writer.layout):
            if isinstance(item, dict):  # a part a worker committed
                new = writer.collect(item)
                n_docs = len(item["doc_ids"]) if new else 0
                seconds = (item.get("seconds") or {}) if new else {}
            else:  # scorer rows, written here
                writer.write(item)
                n_docs = item.num_rows
                seconds = stage_seconds(item)
            for stage, value in seconds.items():
                actor_seconds[stage] = actor_seconds.get(stage, 0.0) + value
            done += n_docs
            bar.update(n_docs)
        bar.close()
        if screened is not None:  # streamed twice: the second pass's rows must be the ones screened
            screened.check_unchanged()
        _record_lost(writer, screened, todo)
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
        if writer.layout in (2, 3):  # as in the staged config.yaml (open_writer)
            manifest["config"]["store_layout"] = writer.layout
        manifest["timings"]["docs_per_s"] = round(done / max(score_s, 1e-9), 3)  # this attempt's documents
        manifest["timings"]["actor_seconds"] = {k: round(v, 3) for k, v in sorted(actor_seconds.items())}
        if rows is not None:  # actors scored in this attempt
            manifest["timings"]["actor_start"] = start_timings()
            limit = input_limit()  # the config says what was asked; this, what the model took
            if limit is not None:
                manifest["model"]["max_length"] = min(cfg.max_length, limit)
        manifest["resumed"] = {**writer.reused, "docs_scored_now": done}
        manifest["nodes"] = sorted({r["node"] for r in writer.stage.records if r.get("node")})
        _whole_run_tables(writer, manifest)
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


def is_held(screened) -> bool:
    """Whether ``screened`` is a small corpus the driver read and screened (``data.held``)."""
    from xai_ray.data.held import Held

    return isinstance(screened, Held)


def _items(rows, cfg: RunConfig, run_id: str, layout: int) -> Iterator:
    """Records or Arrow tables, whatever ``rows`` was."""
    if rows is None:
        return iter(())
    if hasattr(rows, "map_batches"):  # a Ray Dataset of scorer rows
        return write_parts(rows, cfg, run_id, layout=layout)
    return iter(rows)


def _record_rejected(writer: RunWriter, cfg: RunConfig, run_id: str, screened, rejected) -> None:
    if rejected is not None:
        writer.write_errors(rejected["doc_id"].tolist(), "read", rejected["reason"].tolist())
    if screened is None or writer.read_errors_done or not screened.counts["rejected"] + screened.counts["duplicates"]:
        return
    import ray

    task = ray.remote(num_cpus=0)(_write_read_errors).options(**_where(cfg))
    record = ray.get(task.remote(str(Path(cfg.store).resolve()), run_id, writer.layout, *screened.verdicts))
    writer.collected.discard(record["part"])  # a part rewritten in place by a resumed run counts once
    writer.collect(record)


def _record_lost(writer: RunWriter, screened, todo) -> None:
    """Documents to score that no part holds (a block that vanished): recorded, never silently missing."""
    if screened is not None:
        if len(writer.done_ids) >= screened.counts["kept"]:  # every document a part holds, scored or failed
            return
        todo = (
            doc_id
            for batch in screened.todo(4096).select_columns(["doc_id"]).iter_batches(batch_format="pyarrow")
            for doc_id in batch.column("doc_id").to_pylist()
        )
    lost = [doc_id for doc_id in (todo if todo is not None else []) if doc_id not in writer.done_ids]
    if lost:
        log.error("%d documents came back from no actor; recorded as errors", len(lost))
        writer.write_errors(lost, "score", ["no result came back from the scoring actors"] * len(lost))


def _whole_run_tables(writer: RunWriter, manifest: dict) -> None:
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
        "ig_tolerance": cfg.ig_tolerance if "integrated_gradients" in chosen else None,
    }
