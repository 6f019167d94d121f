"""Where a job runs and with what: joining or starting Ray (loopback only when local), and the
versions recorded beside every output. Shared by the pipeline and fine-tuning."""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter
from signal import SIGTERM

from xai_ray.local_ray import init_local
from xai_ray.progress import quiet_ray_env, route_ray_loggers

log = logging.getLogger("xai_ray")


_STARTED = {"session": None}  # the Ray session ensure_ray started or joined (None: none, or not ours)


def ray_session() -> str:
    """This Ray session's unique name: a cluster started again (a test module's, a notebook's after
    ``xai_ray.shutdown()``) counts its jobs from 1 again, so job ids alone would match a dead one."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    return getattr(node, "session_name", None) or ray.get_runtime_context().get_job_id()


def shutdown_own_ray() -> bool:
    """End the Ray connection ``ensure_ray`` made (a local cluster it started goes with it); one the
    user made with ``ray.init`` stays, even after ours was ended behind our back (``ray.shutdown()``
    and ``ray.init()`` by hand). Returns whether one was ended."""
    import ray

    ours = _STARTED["session"]
    if ours is None or not ray.is_initialized() or ray_session() != ours:
        return False
    ray.shutdown()
    _STARTED["session"] = None
    return True


def ensure_ray(log_to_driver: bool | None = None) -> None:
    """Start (or join) Ray. ``log_to_driver``: show the workers' output here (finetune's progress comes
    from its workers); default: only with debug logging. A local start runs only the services a run
    on one machine uses (``local_ray``): no dashboard head, no autoscaler monitor, and no log monitor
    unless the workers' output is shown."""
    import ray

    wait_for_release()  # a one-run process's Ray still shutting down: let it finish first
    if not ray.is_initialized():
        # Inside `ray job submit` or with RAY_ADDRESS this joins that cluster; else starts a local one.
        address = os.environ.get("RAY_ADDRESS")
        if not address:
            _loopback_only()
        quiet_ray_env()
        route_ray_loggers()  # importing ray gave its loggers console handlers
        # Workers' output stays in Ray's session logs unless debugging: failures come back as error rows
        # or exceptions, and their chatter (model-loading warnings per actor) would bury the progress.
        options = {
            "address": address,
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "log_to_driver": log.isEnabledFor(logging.DEBUG) if log_to_driver is None else log_to_driver,
        }
        try:
            if address:
                join_cluster(ray, address, options)
            else:  # a local head without the dashboard head and the monitors a local run never uses
                init_local(ray.init, keep_log_monitor=bool(options["log_to_driver"]), **options)
        except SystemExit as stop:  # ray.init's own SIGTERM handler exits with the signal's number, no word
            if not one_run_only() or stop.code != SIGTERM:
                raise
            _process["terminated"] = True
            raise Terminated() from None
        _STARTED["session"] = ray_session()  # ours to end (xai_ray.shutdown); a Ray the user started is theirs
        route_ray_loggers()
        if one_run_only():  # ray.init set its own SIGTERM handler: exit 1, no word (`timeout`, `docker stop`)
            catch_sigterm()


def ray_data():
    """``ray.data``, set for a run: every stage that builds a Ray Data pipeline takes it from here.
    Imported there and not at Ray's start: it costs most of a second, before the actors could
    start, that a corpus the driver reads itself (``data.held``) never needs."""
    import ray.data

    context = ray.data.DataContext.get_current()
    # Our own bar has the ETA over the whole run; Ray Data's per-operator bars would draw beside it.
    context.enable_progress_bars = False
    # Never drop a failed block silently (the default, spelled out): a lost block fails the run,
    # which then resumes from its committed parts, rather than publishing without those documents.
    context.max_errored_blocks = 0
    return ray.data


class ClusterError(RuntimeError):
    """The Ray cluster named by ``RAY_ADDRESS`` cannot be joined; the message says why."""


def join_cluster(ray, address: str, options: dict) -> None:
    """``ray.init`` on the cluster at ``RAY_ADDRESS``, refused in one sentence where it cannot be
    joined: nothing answering at a host:port (``ray.init`` would wait minutes, silent), or a refused
    connection such as a token the head does not take."""
    host, _, port = address.rpartition(":")
    if "://" not in address and host and port.isdigit():
        import socket

        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as err:
            raise ClusterError(
                f"nothing answers at RAY_ADDRESS={address} ({err.strerror or err}); start the cluster's head "
                "there, or unset RAY_ADDRESS to run on a local Ray"
            ) from None
    try:
        ray.init(**options)
    except ConnectionError as err:  # what ray.init raises for a head it reached and could not join
        cause = f"{type(err.__cause__).__name__}: " if err.__cause__ is not None else ""
        raise ClusterError(
            f"cannot join the Ray cluster at RAY_ADDRESS={address} ({cause}{str(err).strip().splitlines()[0]}); "
            "a cluster with token authentication needs RAY_AUTH_MODE=token here and its token in "
            "~/.ray/auth_token (docs/cluster.md)"
        ) from None


def check_actor_fits(gpus: float, cpus: float, what: str = "scoring actor") -> None:
    """Refuse in one sentence an actor that no live node of the cluster can hold: Ray would keep it
    pending, and the job would wait for it forever without a word (``--gpus-per-actor 1`` on a
    machine without a GPU)."""
    import ray

    from xai_ray.keys import ConfigError

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(n.get("GPU", 0) >= gpus and n.get("CPU", 0) >= cpus for n in nodes):
        return
    kinds = Counter((n.get("CPU", 0), n.get("GPU", 0)) for n in nodes)
    have = ", ".join(
        f"{count} node{'s' if count > 1 else ''} of {cpu:g} CPU and {gpu:g} GPU" for (cpu, gpu), count in kinds.items()
    )
    raise ConfigError(
        f"no node of the Ray cluster can hold a {what} of {cpus:g} CPU and {gpus:g} GPU (the cluster has "
        f"{have or 'no live node'}); lower gpus_per_actor (--gpus-per-actor) or cpus_per_actor (--set cpus_per_actor=N)"
    )


_process: dict = {}  # "one_run": this process ends with its run; "closing": the thread ending Ray


def one_run_per_process() -> None:
    """Declare that this process ends when its run does (``xai-ray run``): Ray is then let go as
    soon as the run's last Ray stage is done (``release_if_done``), so its shutdown (a second or
    more: the actors, the workers, the local head) overlaps the summary and the report instead
    of following them. A notebook keeps Ray and its warm actors for the next run."""
    _process["one_run"] = True


def one_run_only() -> bool:
    return bool(_process.get("one_run"))


def note_run(store: str, run_id: str) -> None:
    """The run this process is making: a stopped command names it in its resume hint."""
    _process["run"] = (str(store), str(run_id))


def forget_run() -> None:
    """No run noted (a command starts: an earlier command's run is not its own)."""
    _process.pop("run", None)


def resume_hint() -> str:
    """How to finish the run this process was making (``note_run``), placeholders where none was noted."""
    store, run_id = _process.get("run", ("STORE", "RUN_ID"))
    return f" (a run keeps its committed parts: `xai-ray run --resume {run_id} --store {store}` finishes it)"


class Terminated(KeyboardInterrupt):
    """SIGTERM in a one-run process (``timeout``, systemd, ``docker stop``, ``kill``): stopped as
    Ctrl-C stops it, its committed parts kept, and the command says so."""


def _terminated(signum, frame) -> None:
    _process["terminated"] = True  # Ray may raise its own KeyboardInterrupt in its place
    raise Terminated()


def was_terminated() -> bool:
    """Whether this process received SIGTERM (``catch_sigterm``)."""
    return bool(_process.get("terminated"))


def catch_sigterm() -> None:
    """SIGTERM raises ``Terminated`` in the main thread (set again after ``ray.init``, which sets its own)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)


def release_if_done() -> None:
    """After the run's last Ray stage: in a one-run process, disconnect from Ray (and stop the
    local cluster this process started) on a background thread; the command's end waits for it
    (``end_of_command``), so no Ray process outlives the command."""
    import threading

    import ray

    if not one_run_only() or "closing" in _process or not ray.is_initialized():
        return
    log.debug("letting Ray go: the run's last Ray stage is done")
    # a daemon, joined by the command's end (``end_of_command``) for at most RELEASE_WAIT_S
    closing = threading.Thread(target=ray.shutdown, name="xai-ray-shutdown", daemon=True)
    _process["closing"] = closing
    _STARTED["session"] = None
    closing.start()


RELEASE_WAIT_S = 60.0  # how long a command's end waits for its Ray to stop


def end_of_command(status: int) -> int:
    """A one-run process's last step: wait for the Ray shutdown ``release_if_done`` started, at
    most ``RELEASE_WAIT_S``. A Ctrl-C or SIGTERM that lands while the main thread imports a module
    can leave that module's import lock held, and the shutdown, importing too, then waits forever
    (the command hung after saying it was interrupted). A shutdown still going at the limit is left
    behind: the process ends at once with ``status``, and the local Ray processes, which share its
    fate, end with it."""
    closing = _process.get("closing")
    if closing is None:
        return status
    closing.join(RELEASE_WAIT_S)
    if not closing.is_alive():
        return status
    log.warning("Ray did not stop within %.0f s; the command ends without waiting for it", RELEASE_WAIT_S)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def wait_for_release(timeout: float | None = None) -> None:
    """Wait for the Ray shutdown ``release_if_done`` started, if any (a command run in-process,
    as tests do, returns while its Ray is still going), at most ``timeout`` seconds."""
    closing = _process.pop("closing", None)
    if closing is not None:
        closing.join(timeout)


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


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in (
        "xai-ray",
        "torch",
        "transformers",
        "tokenizers",
        "ray",
        "pyarrow",
        "duckdb",
        "altair",
        "numpy",
        "numba",
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out
