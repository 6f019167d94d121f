"""The scoring actors: a warm pool, started early and kept for the process's life.

Each actor (``ScorerHost``) loads the model once; a run's settings (methods, lengths, heads...) come
with every batch, and a ``Scorer`` is built on the loaded model when they change. So:

- ``xai-ray run`` starts the actors as soon as Ray is up, and they load the model while the corpus is
  read and screened (the model load was most of a short run's wait);
- a notebook's second ``xai_ray.run`` with the same model finds the actors warm and starts scoring
  at once; ``xai_ray.shutdown()``, another model, or the interpreter's exit release them.

For a corpus streamed through Ray Data, the scoring stage is a task per batch that hands the batch
to a free actor of the pool (one batch in flight per actor, given to whichever is free, never
queued behind a busy one) and returns its rows; a small corpus the driver holds (``data.held``) is
handed out by the driver itself the same way (``score_here``), without Ray Data. On one node the
actors hold no CPU in Ray's books, so the reading, screening and writing tasks run beside an idle
warm pool rather than wait for it; torch still uses ``cpus_per_actor`` threads in each. On a
cluster they hold their CPUs (Ray spreads them over the nodes), so they start after screening
(whose tasks would wait for those CPUs) and are released after each run.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xai_ray import runtime

log = logging.getLogger("xai_ray")
HOST = "ScorerHost"  # the actors' class name in Ray's actor table (tests find them by it)
_pool: dict = {}  # "current": the live Pool of this process, if any


class ScorerHost:
    """One actor of the pool: the model loaded once; ``score(config, batch)`` as ``Scorer`` scores it."""

    def __init__(self, identity: dict, gpus: float, cpus: float, asked_at: float | None = None) -> None:
        began = time.time()
        import torch

        from xai_ray.model.loading import load_model

        imported = time.time()
        torch.set_num_threads(max(1, int(cpus or 1)))
        # The tokenizer's batch encoding (Rust, rayon) likewise uses the actor's CPUs, not every
        # core: set here, in the actor's own process, before its first batch (a notebook's
        # in-process scorer leaves the kernel's threads alone).
        os.environ.setdefault("RAYON_NUM_THREADS", str(max(1, int(cpus or 1))))
        device = "cuda" if torch.cuda.is_available() and gpus else "cpu"
        if device == "cuda":
            torch.zeros(1, device=device)  # the CUDA context, timed apart from the weights
        ready = time.time()
        self.loaded = load_model(**identity, device=device)
        # Where this actor's start went (the manifest's timings.actor_start): on an H100 four GPU
        # actors took about 15 s to score their first batch of a 200-review run, most of it
        # importing transformers' model code, which a BERT-family folder now skips (model.lean).
        self.start_s = {
            "process": max(0.0, began - asked_at) if asked_at else None,  # Ray's worker start (one clock per node)
            "imports": imported - began,
            "device": ready - imported,
            "model": time.time() - ready,
        }
        self.config = self.scorer = None

    def start_seconds(self) -> dict:
        return self.start_s

    def input_limit(self) -> int:
        """The most tokens the loaded model takes at once (a run's ``max_length`` is capped there)."""
        from xai_ray.scoring.actor import model_limit

        return model_limit(self.loaded.tokenizer, self.loaded.model)

    def pid(self) -> int:
        return os.getpid()

    def score(self, config, batch: dict):
        from xai_ray.scoring.actor import Scorer

        if self.scorer is None or config != self.config:  # a run with other settings: same weights
            self.scorer, self.config = Scorer(config, loaded=self.loaded), config
        return self.scorer(batch)


@dataclass
class Pool:
    key: tuple  # what the actors were started for: model identity, size, resources, Ray session
    actors: list  # ActorHandles
    kept: bool  # whether it outlives the run (one node) or is released after it (a cluster)
    leases: object = None  # a ray.util.queue.Queue holding the actors not scoring a batch now (``queue``)
    runs: int = 0  # runs this pool has scored to the end (a warm pool's next run finds it above 0)

    def queue(self):
        """The queue Ray Data's scoring tasks take a free actor from, made on first use: a small
        corpus the driver hands out itself needs none, and the queue is an actor of its own whose
        start the driver would wait for (about 1 s on 2 cores, beside the model loads)."""
        if self.leases is None:
            from ray.util.queue import Queue

            self.leases = Queue(actor_options={"num_cpus": 0})
            for handle in self.actors:
                self.leases.put(handle)
        return self.leases

    def pids(self) -> list[int]:
        """The actors' process ids (waits for them to be up)."""
        import ray

        return ray.get([actor.pid.remote() for actor in self.actors])


def identity(cfg) -> dict:
    """What loading the model depends on: ``load_model``'s arguments."""
    return {
        "name": cfg.model,
        "allow_pickle": cfg.allow_pickle,
        "trust_remote_code": cfg.trust_remote_code,
        "seed": cfg.seed,
    }


def source_state(name: str, nested: bool = True, outside: str | None = None) -> str | None:
    """sha256 of what a local file or folder holds now (each file's absolute path, size and
    modification time; ``nested``: the folder's subfolders too, less anything under ``outside``),
    None for a name that is neither (a Hub id). A model fine-tuned again in place, or a corpus file
    rewritten under the same name, changes it: a resumed run refuses it (``open_writer``), and a
    warm pool holding the model's old weights is replaced (``start``)."""
    path = Path(name).expanduser()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        found = path.rglob("*") if nested else path.iterdir()
        skip = Path(outside).expanduser().resolve() if outside else None
        files = sorted(f for f in found if f.is_file() and not (skip and skip in f.resolve().parents))
    else:
        return None
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        digest.update(f"{file.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def start(cfg, actors: int, gpus: float, early: bool = False) -> Pool | None:
    """The pool for ``cfg``'s model: this process's warm one when it matches, else a new one (the old
    released). Returns at once: the actors load the model in the background. ``early`` (before
    screening): None on a cluster, whose actors would hold the CPUs the screening tasks wait for."""
    import ray

    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    session = runtime.ray_session()  # a new session's job ids start again: never a dead pool's
    key = (
        tuple(sorted(identity(cfg).items())),
        source_state(cfg.model, nested=False),  # a folder fine-tuned again in place: new actors
        actors,
        gpus,
        cfg.cpus_per_actor,
        nodes,
        session,
    )
    current = _pool.get("current")
    if current is not None and current.key == key:
        return current
    kept = nodes == 1
    if early and not kept:
        return None
    release()
    host = ray.remote(ScorerHost).options(
        num_cpus=0 if kept else cfg.cpus_per_actor,
        num_gpus=gpus,
        # A killed actor is restarted (its constructor reloads the model) and the batch it held is
        # run again; tests/test_faults_ray.py kills one mid-run and checks every document once.
        max_restarts=-1,
        max_task_retries=-1,
        scheduling_strategy="SPREAD",
    )
    handles = [host.remote(identity(cfg), gpus, cfg.cpus_per_actor, time.time()) for _ in range(actors)]
    _pool["current"] = pool = Pool(key=key, actors=handles, kept=kept)
    log.info("starting %d scoring actor(s) for %s", actors, cfg.model)
    return pool


def start_actors(cfg, early: bool = False) -> Pool | None:
    """The scoring actors for ``cfg`` (a ``RunConfig``): started now, or this process's warm ones;
    as many as ``actors`` says, else one per GPU (or per ``cpus_per_actor`` CPUs) of the cluster.
    ``early`` (before screening): only where they hold no CPU that screening waits for (one node)."""
    gpus = actor_gpus(cfg)
    return start(cfg, actor_count(cfg.actors, gpus, cfg.cpus_per_actor), gpus, early=early)


def actor_count(asked: int | None, gpus: float, cpus_per_actor: float) -> int:
    """``asked`` actors, or as many as the cluster holds (``auto_actors``). On one machine the
    actors hold no CPU in Ray's books (``start``), so nothing stopped `--actors 100` on 2 CPUs from
    starting 100 processes (11 GB, and no document scored in minutes): CPU actors there are capped
    at what the machine's CPUs hold, and the log says so."""
    import ray

    if not asked:
        return auto_actors(gpus, cpus_per_actor)
    one_node = sum(1 for node in ray.nodes() if node.get("Alive")) == 1
    cpus = ray.cluster_resources().get("CPU", 1)
    fits = max(1, int(cpus // cpus_per_actor)) if cpus_per_actor > 0 else asked
    if one_node and gpus == 0 and asked > fits:
        said = (asked, cpus, cpus_per_actor, fits)
        if said not in _SAID:  # the pool is asked for more than once a run
            _SAID.add(said)
            log.warning(
                "actors %d: this machine has %g CPU(s), for scoring actors of %g CPU(s) each; starting %d",
                *said,
            )
        return fits
    return asked


_SAID: set = set()


def actor_gpus(cfg) -> float:
    """GPUs a scoring actor asks for: ``gpus_per_actor``, or where the cluster has GPUs a share of
    one (``gpu_share``), else 0."""
    import ray

    if cfg.gpus_per_actor is not None:
        return float(cfg.gpus_per_actor)
    gpu_nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) >= 1]
    if not gpu_nodes:
        return 0.0
    cpus_per_gpu = min(n.get("CPU", 0) / n["GPU"] for n in gpu_nodes)
    return gpu_share(cpus_per_gpu, cfg.cpus_per_actor)


def gpu_share(cpus_per_gpu: float, cpus_per_actor: float) -> float:
    """The GPU share of an actor by default: 1/4 where a GPU has 16 or more CPUs beside it (at
    ``cpus_per_actor`` 1), 1/2 from 8, else the whole GPU. A GPU actor's host work per review
    (tokenizing, words, columns) takes far longer than its share of the GPU: on an H100 with 16
    CPUs, one MiniLM actor spent 4.0 of its 26.7 s scoring 5,000 IMDB reviews in the forward and
    methods, and four actors sharing the GPU made the whole run 1.2x faster (bench/README,
    throughput.py on CUDA)."""
    per_gpu = next((k for k in (4, 2) if cpus_per_gpu >= 4 * k * max(cpus_per_actor, 1)), 1)
    return 1.0 / per_gpu


def auto_actors(gpus: float, cpus_per_actor: float) -> int:
    """Actors the cluster holds: one per ``gpus`` GPUs, or (no GPU asked) one per ``cpus_per_actor`` CPUs."""
    import ray

    resources = ray.cluster_resources()
    if gpus > 0:
        return max(1, int(resources.get("GPU", 1) // gpus))
    return max(1, int(resources.get("CPU", 1) // max(cpus_per_actor, 1)))


def score_on_pool(batch: dict, leases, config):
    """A Ray Data task's work: the batch scored by whichever actor of the pool is free."""
    import ray

    actor = leases.get()  # blocks until one is free; as many tasks run as the pool has actors
    try:
        return ray.get(actor.score.remote(config, batch))
    finally:
        leases.put(actor)


def score_here(workers: Pool, config, table, batch_size: int, then=None) -> Iterator:
    """The rows of ``table`` (``doc_id, text, label, heads_sample``) scored by the pool's actors, handed
    out by the driver a batch at a time (a small corpus: ``data.held``). Each actor holds one batch;
    the next goes to whichever finishes first, before the driver takes in (and writes) what it
    returned, so the actors never wait on the writing. ``then``: a step applied to each scored batch
    here (the methods deferred to the host). Yields the scorer rows as they come back."""
    import numpy as np
    import ray

    starts = iter(range(0, table.num_rows, batch_size))
    running = {}

    def hand(actor) -> None:
        start = next(starts, None)
        if start is not None:
            rows = table.slice(start, batch_size)
            batch = {name: np.asarray(rows.column(name).to_pylist(), dtype=object) for name in rows.column_names}
            running[actor.score.remote(config, batch)] = actor

    for actor in workers.actors:
        hand(actor)
    while running:
        [ready], _ = ray.wait(list(running), num_returns=1)
        hand(running.pop(ready))
        scored = ray.get(ready)
        yield then(scored) if then is not None else scored


def current() -> Pool | None:
    return _pool.get("current")


def after_run() -> None:
    """A cluster's pool holds CPUs in Ray's books: released when its run ends."""
    pool = _pool.get("current")
    if pool is not None:
        pool.runs += 1
        if not pool.kept:
            release()


def start_timings() -> dict | None:
    """Where the current pool's actors spent their start, in seconds, the median over its actors:
    ``process`` (asked for until the constructor ran: Ray's worker start), ``imports`` (torch,
    the loader), ``device`` (the CUDA context; 0 on CPU), ``model`` (its code and tokenizer imported,
    the weights read and moved);
    with ``actors`` and ``warm`` (started for an earlier run of this process). None without a pool
    or when an actor does not answer within seconds (the run's outputs never wait on this)."""
    pool = _pool.get("current")
    if pool is None:
        return None
    import ray

    try:
        starts = ray.get([actor.start_seconds.remote() for actor in pool.actors], timeout=10)
    except Exception as error:  # a lost actor, a timeout: the timings are a diagnosis, not a result
        log.debug("the actors' start timings are not recorded: %s", error)
        return None
    medians = {}
    for key in starts[0]:
        values = [start[key] for start in starts if start.get(key) is not None]
        medians[key] = round(statistics.median(values), 3) if values else None
    return {**medians, "actors": len(starts), "warm": pool.runs > 0}


def input_limit() -> int | None:
    """The current pool's model's input limit in tokens (``ScorerHost.input_limit``); None without a
    pool or when no actor answers within seconds."""
    pool = _pool.get("current")
    if pool is None:
        return None
    import ray

    try:
        return int(ray.get(pool.actors[0].input_limit.remote(), timeout=10))
    except Exception as error:  # a lost actor, a timeout: the manifest then says only what was asked
        log.debug("the model's input limit is not recorded: %s", error)
        return None


def release() -> None:
    """End this process's actors, if any (a later run starts new ones)."""
    pool = _pool.pop("current", None)
    if pool is None:
        return
    import ray

    if not ray.is_initialized():
        return
    for handle in [*pool.actors, getattr(pool.leases, "actor", None)]:
        if handle is not None:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # already gone with its cluster: nothing to release
                pass


atexit.register(release)
