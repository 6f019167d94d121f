"""The straight line: read -> screen -> score -> write -> aggregate -> report.

The corpus never passes through the driver. ``read`` plans the source (names, headers, Parquet
footers); ``screen`` runs on Ray workers and leaves only counts here; ``score`` streams the rows
to the scoring actors; ``write`` has Ray workers commit the scored rows as parts of the run's
staging, and the driver collects their records and publishes. Each stage can be called alone
(``score`` and ``write`` also take a DataFrame or Arrow tables, for a notebook or a test).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from xai_ray import runtime
from xai_ray.config import ConfigError, RunConfig, absolute_paths, check_start_layer, resolve_target
from xai_ray.data.head_docs import head_docs
from xai_ray.methods import REGISTRY, methods_need
from xai_ray.model.loading import describe_model
from xai_ray.model.structure import check_structure
from xai_ray.pipeline import pool
from xai_ray.pipeline.batches import count_of, even_batch, order_corpus, scorer_input
from xai_ray.pipeline.finishing import aggregate, finish_published, report, stage_failed
from xai_ray.pipeline.pool import actor_gpus, start_actors
from xai_ray.pipeline.resume import no_manifest, resume_config
from xai_ray.pipeline.writing import (
    IDENTITY_KEYS,
    build_manifest,
    is_held,
    open_writer,
    resolved,
    write,
    write_parts,
)
from xai_ray.progress import native_stderr_into, route_noise
from xai_ray.report.outputs import OutputError
from xai_ray.runtime import check_actor_fits, ensure_ray
from xai_ray.scoring.segments import resolve_mode
from xai_ray.store import StoreError, layout, remote
from xai_ray.store.writer import RunWriter, check_store

log = logging.getLogger("xai_ray")
__all__ = [
    "IDENTITY_KEYS",
    "finish_published",
    "resume_config",
    "open_writer",
    "resolved",
    "run",
    "publish",
    "read",
    "screen",
    "score",
    "write",
    "write_parts",
    "start_actors",
    "actor_gpus",
    "even_batch",
    "order_corpus",
    "aggregate",
    "report",
    "build_manifest",
]


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
    if cfg.run_id and cfg.run_id.startswith(layout.NIGHTLY_PREFIX):  # nightly's own runs publish through `publish`
        raise ConfigError(
            f"run ids starting with {layout.NIGHTLY_PREFIX!r} are the nightly job's (`xai-ray nightly --date`); "
            f"pick another --run-id than {cfg.run_id!r}"
        )
    started = time.perf_counter()
    cfg = absolute_paths(replace(cfg, run_id=cfg.run_id or new_run_id()))
    runtime.note_run(cfg.store, cfg.run_id)  # a command stopped from here on names it in its resume hint
    created = _folders_to_create(layout.run_log(cfg.store, cfg.run_id).parent)
    check_store(cfg.store)  # before the log file goes into it
    if layout.run_dir(cfg.store, cfg.run_id).is_dir():  # before its log is touched: a refusal removes that
        why = no_manifest(layout.run_dir(cfg.store, cfg.run_id))
        raise StoreError(
            f"run {cfg.run_id!r} already exists in store {cfg.store!r}; pick another --run-id"
            + (f" ({why})" * bool(why))
        )
    logged = route_noise(layout.run_log(cfg.store, cfg.run_id))  # Ray's and setuptools' chatter: into the run's log
    with native_stderr_into(logged):  # and what Ray's C++ core writes to stderr
        try:
            model, found = _describe(cfg)  # the corpus planned before Ray starts: a source it cannot read stops here
            resolve_target(cfg.target, model["labels"])  # a class the model lacks: one sentence
            check_start_layer(cfg.start_layer, model["n_layers"])
            check_structure(cfg.model, methods_need(cfg.methods), cfg.allow_pickle, cfg.trust_remote_code)
            if runtime.one_run_only():  # Ray is up already (_describe): the actors load while the corpus is counted
                _start_early(cfg)
            corpus = read(cfg, found)
            if cfg.rationales:  # a missing column or unreadable source: one sentence, before Ray
                from xai_ray.pipeline.plausibility import read_rationales

                read_rationales(cfg)
            _start_early(cfg)  # they load the model while the corpus is screened
        except BaseException:  # refused before anything was scored: leave no log or empty store behind
            _remove_refused(logged, created)
            raise
        writer = open_writer(cfg, cfg.run_id)  # a resumed run's committed documents are not scored again
        from xai_ray.data.corpus import CorpusError

        try:
            screened = screen(corpus, model["labels"], done=writer.done_ids)
            if not screened.n_input and not writer.stage.records:
                # as an empty CSV or Parquet file is refused: not an empty run published with exit 0
                raise CorpusError(
                    f"{cfg.data!r} holds no rows (an empty file, or a header or schema only): nothing to score"
                )
        except BaseException as err:
            writer.abort(keep_parts=bool(writer.stage.records))
            if isinstance(err, CorpusError) and not writer.stage.records:
                with contextlib.suppress(OSError):  # the staging folder the writer made, if no other run's is in it
                    layout.staging_dir(cfg.store, cfg.run_id).parent.rmdir()
                _remove_refused(logged, created)
            raise
        del corpus  # its handles on Ray's objects are screened's alone, dropped before Ray goes (publish)
        return publish(screened, cfg, model=model, writer=writer, started=started)


def _start_early(cfg: RunConfig) -> None:
    """Ray, and the scoring actors where they hold no CPU that screening waits for (one node); a
    second call finds both running (``pool.start`` returns the warm pool for the same model)."""
    ensure_ray()
    check_actor_fits(actor_gpus(cfg), cfg.cpus_per_actor)  # before the staging exists
    start_actors(cfg, early=True)


def _describe(cfg: RunConfig):
    """(the model's description from its files (``describe_model``), the corpus's plan
    (``plan_corpus``)), each refused in one sentence: the plan always before Ray starts. A notebook
    or a test also learns the model's verdict before Ray starts; the command line
    (``runtime.one_run_per_process``) reads the model's files on a thread while the corpus is
    planned and Ray's processes start, which hides most of the two seconds transformers takes to
    import."""
    if not runtime.one_run_only():
        return describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code), plan_corpus(cfg)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="xai-ray-describe") as ahead:
        described = ahead.submit(describe_model, cfg.model, cfg.allow_pickle, cfg.trust_remote_code)
        found = plan_corpus(cfg)
        ensure_ray()  # in this thread: Ray starts its own threads and signal handlers from the main one
        return described.result(), found


def _folders_to_create(folder: Path) -> list[Path]:
    """The folders above and including ``folder`` that do not exist yet, deepest first."""
    missing = []
    for path in [folder, *folder.parents]:
        if path.exists():
            break
        missing.append(path)
    return missing


def _remove_refused(log_file: Path, created: list[Path]) -> None:
    """A refused run's log file, and the folders this run created for it if they are still empty."""
    log_file.unlink(missing_ok=True)
    for folder in created:  # deepest first: logs/, then the store folder if the run made it
        try:
            folder.rmdir()
        except OSError:  # not empty (another run's files) or already gone: keep it
            break


def publish(screened, cfg: RunConfig, model: dict, writer: RunWriter | None = None, started: float | None = None):
    """Stages 3-6 for a screened corpus: score its rows on actors, have workers write them with the
    screened-out rows as errors, publish, aggregate, report. Every job that publishes a run (``run``,
    ``nightly``, jobs on a cluster) comes through here, so each input row ends up exactly once in
    ``docs`` or ``errors``."""
    started = started or time.perf_counter()
    run_id = cfg.run_id or new_run_id()
    cfg = resolved(replace(cfg, run_id=run_id))
    writer = writer or open_writer(cfg, run_id)
    counts = screened.counts
    if writer.reused["parts"]:
        log.info(
            "resuming run %s: %d documents already committed in %d part(s); %d left to score",
            run_id,
            counts["done"],
            writer.reused["parts"],
            counts["todo"],
        )
    rows = score(screened, cfg) if counts["todo"] else None
    n_input = counts["rows"] - counts["unchanged"]  # the rows this run accounts for, in docs or errors
    try:
        run_dir, manifest = write(
            rows, cfg, run_id, n_input=n_input, started=started, model=model, writer=writer, screened=screened
        )
    finally:
        pool.after_run()  # a cluster's actors hold CPUs: released; one node's stay warm
    stage = "plausibility metrics"
    try:  # the run is published: a failure from here on leaves it whole, and must not send to --resume
        if cfg.rationales:  # agreement with the corpus's human rationales, before the aggregates read faithfulness
            from xai_ray.pipeline.plausibility import add_plausibility

            manifest["counts"] = {**manifest.get("counts", {}), **add_plausibility(cfg, run_id)}
        if runtime.one_run_only():  # nothing below uses Ray: the command's exit need not wait for it
            rows = None  # a handle on Ray's objects freed while Ray shuts down would end the process
            screened.let_go()
            pool.release()
            runtime.release_if_done()
        stage = "aggregates"
        summary = aggregate(cfg.store, run_id, cfg.top_k)
        log.info("run %s: %s", run_id, summary)
        stage = "report"
        out = report(cfg.store, run_id, layout.report_path(cfg.store, run_id)) if cfg.report else None
    except (OSError, OutputError) as err:  # a full disk: the report's write says so as an OutputError
        raise stage_failed(run_id, stage, err, cfg.store) from err
    return RunResult(run_id=run_id, run_dir=run_dir, manifest=manifest, report=out)


def _run_through_mirror(cfg: RunConfig) -> RunResult:
    """A store URI is written through its local mirror, then uploaded. The manifest's
    ``config.store`` is the mirror folder; ``config.extra.store_uri`` the store it was published to."""
    local = remote.pull(cfg.store)
    if cfg.run_id and layout.is_published(local, cfg.run_id):
        if remote.has_run(cfg.store, cfg.run_id):
            raise StoreError(f"run {cfg.run_id!r} already exists in store {cfg.store!r}; pick another --run-id")
        return _upload_published(local, cfg)
    result = run(replace(cfg, store=str(local), extra={**cfg.extra, "store_uri": cfg.store}))
    remote.push_run(local, cfg.store, result.run_id)
    return result


def _upload_published(local: Path, cfg: RunConfig) -> RunResult:
    """A run published in this machine's mirror whose upload never happened (the command was
    stopped between the two): uploaded now, as it is."""
    log.info("run %s is published in the mirror %s but not in %s: uploading it", cfg.run_id, local, cfg.store)
    remote.push_run(local, cfg.store, cfg.run_id)
    run_dir = layout.run_dir(local, cfg.run_id)
    report_file = layout.report_path(local, cfg.run_id)
    manifest = layout.read_manifest(run_dir / layout.MANIFEST)
    return RunResult(cfg.run_id, run_dir, manifest, report_file if report_file.is_file() else None)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def plan_corpus(cfg: RunConfig):
    """The corpus's pieces found from names, headers and footers (``data.sources.SourcePlan``); a
    source it cannot read, or a column it lacks, is refused here. Nothing is read yet."""
    from xai_ray.data.sources import plan

    return plan(cfg.data, cfg.split, cfg.text_column, cfg.label_column, cfg.id_column, cfg.clean_html)


def read(cfg: RunConfig, found=None):
    """Stage 1: the corpus, planned (``data.stream.Corpus``; ``found``: its ``plan_corpus`` when it
    was planned already); a source it cannot read is refused here, before Ray starts. Nothing is
    read yet. A run selecting at most ``driver_rows`` rows (``data.held.reads_here``) is read by the
    driver itself."""
    from xai_ray.data.held import reads_here
    from xai_ray.data.stream import Corpus

    found = found if found is not None else plan_corpus(cfg)
    here = reads_here(found, cfg.limit, cfg.driver_rows)
    log.info("reading %s: %d piece(s)%s", cfg.data, len(found.pieces), " in the driver" if here else "")
    return Corpus(found, limit=cfg.limit, seed=cfg.seed, driver=here)


def screen(corpus, classes=None, done=None, known=None):
    """Stage 2: screen the corpus on Ray workers (``data.stream.screen``): bad rows, repeated ids,
    labels outside the model's classes; ``done``/``known`` leave out what a resumed or nightly run
    need not score. Returns a ``Screened`` (counts here, the verdicts in Ray's object store), or for
    a corpus the driver reads (``Corpus.driver``) a ``data.held.Held`` screened here by the same rules."""
    from xai_ray.data import held, stream

    screen_rows = held.screen if corpus.driver else stream.screen
    screened = screen_rows(corpus, classes, done=done, known=known)
    log.info("screened %d rows: %s", screened.n_input, screened.counts)
    return screened


def score(rows, cfg: RunConfig):
    """Stage 3: score on a pool of Ray actors; returns the Ray Dataset of scorer rows (lazy).

    ``rows``: a ``Screened`` corpus (streamed from the source), a Ray Dataset of ``doc_id, text,
    label`` rows, or a DataFrame of them (a notebook, ``xai-ray evaluate``); or a ``Held`` corpus,
    whose batches the driver hands to the actors itself (``pool.score_here``): then an iterator of
    Arrow tables of scorer rows."""
    import ray

    from xai_ray.scoring.deferred import DeferredMethods
    from xai_ray.scoring.settings import ScorerConfig

    ensure_ray()
    gpus = actor_gpus(cfg)
    check_actor_fits(gpus, cfg.cpus_per_actor)  # else a pool no node can hold waits forever
    workers = start_actors(cfg)  # the warm pool when it holds this model (pipeline.pool)
    actors = len(workers.actors)
    batch = even_batch(cfg.batch_size, count_of(rows), actors)
    defer = cfg.defer_flow if cfg.defer_flow is not None else gpus > 0
    defer = defer and not cfg.evaluate  # the evaluation ranks tokens by flow too, on the actor holding the model
    defer = defer and resolve_mode(cfg.long_text, cfg.model) != "window"  # windows merge on the actor
    deferred = [m for m in cfg.methods if REGISTRY[m].host_stage] if defer else []  # methods run on the host
    config = ScorerConfig.of(cfg, gpus_per_actor=gpus, deferred_methods=deferred)
    if is_held(rows):
        log.info("scoring %d documents on %d actor(s), %g GPU each", rows.counts["todo"], actors, gpus)
        todo = rows.todo(head_docs(rows.counts["kept"], cfg))
        return pool.score_here(workers, config, todo, batch, DeferredMethods(config) if deferred else None)
    dataset, n_docs = scorer_input(rows, replace(cfg, batch_size=batch), actors)
    # One task per batch, two at once per actor of the pool, each handing its batch to whichever
    # actor is free (pipeline.pool): the second waits with its batch in hand, so a free actor gets
    # its next batch at once instead of after Ray Data schedules a task (on a tiny model, one actor,
    # 3,000 reviews, 2 cores: scoring 27.3 and 26.8 s against 30.8 and 28.5). Batches are not queued behind a busy
    # actor (Ray Data's default of 2 an actor left one of two CPU actors idle for the last 29 s of
    # a 600-review run). The tasks only wait: they ask for no CPU. A killed actor is restarted and
    # its batch run again (pool.start); application errors are recorded by the scorer.
    scored = dataset.map_batches(
        pool.score_on_pool,
        fn_kwargs={"leases": workers.queue(), "config": config},
        batch_size=batch,
        batch_format="numpy",
        compute=runtime.ray_data().TaskPoolStrategy(size=2 * actors),
        num_cpus=0,
    )
    if deferred:
        # Flow is CPU work: GPU actors hand it the compact fused attention and move on.
        cpu_workers = max(1, int(ray.cluster_resources().get("CPU", 1)) - int(actors * cfg.cpus_per_actor))
        scored = scored.map_batches(
            DeferredMethods,
            fn_constructor_kwargs={"config": config},
            batch_size=cfg.batch_size,
            batch_format="pyarrow",
            compute=runtime.ray_data().ActorPoolStrategy(min_size=1, max_size=cpu_workers),
            num_cpus=1,
        )
    log.info("scoring %d documents on %d actor(s), %g GPU each", n_docs, actors, gpus)
    return scored
