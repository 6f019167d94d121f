"""What a local Ray's start and shutdown cost: trimmed, as ``ensure_ray`` starts it, against full.

    bash scripts/loopback.sh .venv/bin/python bench/ray_start.py [--repeats R]

Each start in its own process (``ray.init`` is once per process), the variants in turn (trimmed,
full, trimmed, full, ...) so a drift of the machine's speed reaches both alike:
  trimmed  ``ensure_ray()`` as it is: no dashboard head, no autoscaler monitor, no log monitor
  full     ``ensure_ray()`` with the trimming hooks reported missing: every service Ray starts
each timed as: the start (``ensure_ray``, Ray and Ray Data imported before), one task (the cluster
runs work), the shutdown (``ray.shutdown``), and the three together. Prints each variant's medians
and the ratios trimmed/full.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
import ray, ray.data  # imported before the clock: the start alone is timed
from xai_ray import local_ray
from xai_ray.runtime import ensure_ray

if sys.argv[1] == "full":  # the hooks "missing": Ray starts every service, as plain ray.init does
    local_ray._node_class = lambda: None


@ray.remote
def one():
    return 1


t0 = time.perf_counter()
ensure_ray()
t1 = time.perf_counter()
ray.get(one.remote())
t2 = time.perf_counter()
ray.shutdown()
t3 = time.perf_counter()
print(json.dumps({"start": t1 - t0, "task": t2 - t1, "shutdown": t3 - t2, "total": t3 - t0}))
"""

PHASES = ("start", "task", "shutdown", "total")


def once(variant: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, variant], capture_output=True, text=True, timeout=300, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="starts of each variant, in turn (medians printed)")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"trimmed": [], "full": []}
    for _ in range(args.repeats):
        for variant in runs:
            runs[variant].append(once(variant))
    medians = {v: {p: statistics.median(r[p] for r in rs) for p in PHASES} for v, rs in runs.items()}
    print(f"local Ray start, {args.repeats} in turn, {os.cpu_count()} CPUs; medians in seconds")
    print(f"{'variant':<9}" + "".join(f"{p:>10}" for p in PHASES))
    for variant, phases in medians.items():
        print(f"{variant:<9}" + "".join(f"{phases[p]:>10.2f}" for p in PHASES))
    print(f"{'trim/full':<9}" + "".join(f"{medians['trimmed'][p] / medians['full'][p]:>10.2f}" for p in PHASES))
    for variant, rs in runs.items():
        print(f"  {variant} totals: " + ", ".join(f"{r['total']:.2f}" for r in rs))


if __name__ == "__main__":
    main()
