"""A local Ray head with only the services a run on one machine uses.

``ray.init`` without an address starts, beside the GCS, the raylet and the raylet's two agents,
three Python processes that a local run never calls on, each importing Ray on the machine's cores:

- the dashboard head, started even with ``include_dashboard=False`` (it then serves Ray's usage
  statistics only), and waited on until it has published its address, before the raylet starts;
- the autoscaler's monitor: a cluster of one machine has nothing to scale;
- the log monitor, which carries the workers' output to the driver: needed only when that output is
  shown (``log_to_driver``; ``xai-ray finetune`` shows its workers' progress through it).

Without them the raylet starts without waiting for the dashboard head's address, and Ray's shutdown
takes about a quarter as long (bench/ray_start.py). ``ray start`` has flags for the two monitors,
``ray.init`` none:
the head is trimmed through two methods of Ray's private ``Node`` class, replaced only while
``ray.init`` runs and put back after it. A Ray without them starts as ``ray.init`` alone would.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator

log = logging.getLogger("xai_ray")

# The Node methods replaced while a local head starts, and the RayParams fields the first one sets.
HOOKS = ("start_head_processes", "start_api_server")
PARAMS = ("no_monitor", "include_log_monitor")


def init_local(init: Callable[..., object], keep_log_monitor: bool, **options) -> bool:
    """``init(**options)`` (``ray.init`` starting a local cluster) with only the services a local run
    uses; the log monitor kept when ``keep_log_monitor``. Returns whether the trimmed start was used.

    When this Ray lacks a hook, or the trimmed start fails, Ray starts in full with the same
    options: a faster start is never worth a run that does not start."""
    node_class = _node_class()
    if node_class is None:
        log.debug("this Ray has no hooks to trim a local head: starting all of its services")
        init(**options)
        return False
    try:
        with _trimmed_head(node_class, keep_log_monitor):
            init(**options)
        return True
    except Exception as error:  # a Ray whose head needs a skipped service: start it all instead
        log.debug("a local Ray head without its dashboard and monitors failed (%s): starting all of them", error)
        _stop_half_started()
    init(**options)
    return False


def _node_class() -> type | None:
    """Ray's ``Node`` class when it has every hook, else None. Looked up on each start: Ray is
    unpinned, and these names are private."""
    try:
        from ray._private import node, parameter
    except ImportError:
        return None
    node_class = getattr(node, "Node", None)
    if node_class is None or not all(callable(getattr(node_class, name, None)) for name in HOOKS):
        return None
    try:
        fields = inspect.signature(parameter.RayParams).parameters
    except (AttributeError, TypeError, ValueError):
        return None
    return node_class if all(name in fields for name in PARAMS) else None


@contextlib.contextmanager
def _trimmed_head(node_class: type, keep_log_monitor: bool) -> Iterator[None]:
    """Within: a head node started by this process skips the dashboard head and the autoscaler's
    monitor, and the log monitor unless ``keep_log_monitor``. Outside: ``node_class`` as it was, so
    a later ``ray.init`` in this process (a test's, a notebook's own) starts Ray in full."""
    start_head = node_class.start_head_processes

    def start_head_processes(self):
        self._ray_params.no_monitor = True  # read at once, in start_head_processes
        if not keep_log_monitor:
            self._ray_params.include_log_monitor = False  # read next, in start_ray_processes
        return start_head(self)

    def start_api_server(self, **_):  # the dashboard head: not started, no address to wait for
        return None

    own = {name: vars(node_class)[name] for name in HOOKS if name in vars(node_class)}
    node_class.start_head_processes = start_head_processes
    node_class.start_api_server = start_api_server
    try:
        yield
    finally:
        for name in HOOKS:  # as they were: the class's own functions back, inherited ones unshadowed
            if name in own:
                setattr(node_class, name, own[name])
            else:
                delattr(node_class, name)


def _stop_half_started() -> None:
    """After a failed start: end what it left (a connected driver, a node's processes) before Ray
    is started again. Processes of a node that never got back to the driver end with this process."""
    import ray

    with contextlib.suppress(Exception):
        ray.shutdown()
