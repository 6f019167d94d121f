"""A local Ray started by ``ensure_ray`` runs without the dashboard head, the autoscaler's monitor
and (unless the workers' output is shown) the log monitor, and still runs tasks and actors; a Ray
that lacks the hooks, or refuses the trimmed head, starts in full with the same options.

Each case runs in a fresh Python process (``ray.init`` is once per process): it starts Ray through
``ensure_ray``, runs a task and an actor, and prints the services found among its descendants
(by the script each runs) and the log files of its session."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray]

# What each of the node's Python services runs, as Ray 2.x lays them out.
SERVICES = {
    "dashboard head": "ray/dashboard/dashboard.py",
    "monitor": "ray/autoscaler/_private/monitor.py",
    "log monitor": "ray/_private/log_monitor.py",
    "raylet": "ray/core/src/ray/raylet/raylet",
    "gcs": "ray/core/src/ray/gcs/gcs_server",
}

SCRIPT = """
import io, json, os, sys, time, types
import psutil, ray
from ray._private import node
from xai_ray.runtime import ensure_ray

SERVICES = {services}
{setup}
shown = io.StringIO()
stdout, sys.stdout = sys.stdout, shown  # Ray prints the workers' output to sys.stdout as it is then

ensure_ray(log_to_driver={log_to_driver})


@ray.remote
def square(x):
    print("a worker speaks")
    return x * x


@ray.remote(num_cpus=0)
class Echo:
    def say(self, word):
        return word


answers = [ray.get(square.remote(7)), ray.get(Echo.remote().say.remote("hi"))]
for _ in range(100):  # the log monitor, when there is one, forwards the print within a second or two
    if {log_to_driver} is False or "a worker speaks" in shown.getvalue():
        break
    time.sleep(0.1)
cmdlines = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
logs = sorted(os.listdir(ray._private.worker._global_node.get_logs_dir_path()))
found = {{name: any(path in c for c in cmdlines) for name, path in SERVICES.items()}}
own = {{name: vars(node.Node).get(name).__qualname__ if name in vars(node.Node) else None
       for name in ("start_head_processes", "start_api_server")}}
ray.shutdown()
sys.stdout = stdout
print(json.dumps({{"answers": answers, "found": found, "logs": logs, "own": own,
                  "shown": "a worker speaks" in shown.getvalue()}}))
"""

# A Ray whose Node has no start_api_server (its head starts the API server its own way): the
# hook is missing, while Ray itself still starts.
WITHOUT_HOOK = """
api, head = node.Node.start_api_server, node.Node.start_head_processes
def start_head_processes(self):
    self.__dict__["start_api_server"] = types.MethodType(api, self)
    return head(self)
del node.Node.start_api_server
node.Node.start_head_processes = start_head_processes
"""

# A Ray that refuses to start a head without its monitor.
REFUSING = """
head = node.Node.start_head_processes
def start_head_processes(self):
    if self._ray_params.no_monitor:
        raise RuntimeError("this head needs its monitor")
    return head(self)
node.Node.start_head_processes = start_head_processes
"""


def start(tmp_path, log_to_driver: bool = False, setup: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    code = SCRIPT.format(services=SERVICES, setup=setup, log_to_driver=log_to_driver)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["answers"] == [49, "hi"]  # a task and an actor ran
    assert seen["found"]["raylet"] and seen["found"]["gcs"], seen  # the listing sees the node's processes
    return seen


def test_a_local_start_leaves_out_the_dashboard_head_and_the_monitors(tmp_path):
    seen = start(tmp_path)
    assert not seen["found"]["dashboard head"], seen
    assert not seen["found"]["monitor"], seen
    assert not seen["found"]["log monitor"], seen
    assert not {"dashboard.log", "monitor.log", "log_monitor.log"} & set(seen["logs"]), seen["logs"]
    assert not seen["shown"]  # the workers' output stays in the session's logs
    # Ray's own methods are back once Ray is up: a later ray.init in this process starts it in full
    assert seen["own"] == {
        "start_head_processes": "Node.start_head_processes",
        "start_api_server": "Node.start_api_server",
    }


def test_the_log_monitor_stays_when_the_workers_output_is_shown(tmp_path):
    seen = start(tmp_path, log_to_driver=True)
    assert seen["found"]["log monitor"] and seen["shown"], seen
    assert not seen["found"]["dashboard head"] and not seen["found"]["monitor"], seen


@pytest.mark.parametrize("setup", [WITHOUT_HOOK, REFUSING], ids=["hook missing", "trimmed head refused"])
def test_ray_starts_in_full_when_it_cannot_be_trimmed(tmp_path, setup):
    seen = start(tmp_path, setup=setup)
    assert seen["found"]["dashboard head"] and seen["found"]["monitor"] and seen["found"]["log monitor"], seen
    assert "dashboard.log" in seen["logs"] and "monitor.log" in seen["logs"], seen["logs"]
    if setup == WITHOUT_HOOK:  # nothing of the trimmed start was left on the class
        assert seen["own"]["start_api_server"] is None, seen["own"]
