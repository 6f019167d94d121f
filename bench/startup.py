"""What a run costs beyond its documents: the README's main job against the bare forward.

    bash scripts/loopback.sh .venv/bin/python bench/startup.py [MODEL] [DATA] [N] [--skip old]

In one run, each in its own process, on the same N reviews (default 200, the README's main job):
  run    the whole `xai-ray run --limit N` (imports, Ray start, screening, actors, scoring, publish,
         summary, report), wall time to exit
  old    the same command with the scoring stage as it was before the warm pool (Ray Data's own
         actor pool, started after screening; kept below as code) and the corpus streamed through
         Ray Data whatever its size, wall time to exit
  fwd    the bare forward of the same reviews: fused SDPA, length-sorted batches, no capture; the
         forward alone (its process's imports and model load not counted)
then each run's phases from its log (until reading, Ray and screening, scoring, publishing and
the rest), the ratios run/fwd (goal <= 2) and run/old, and the CPU seconds behind each: the
machine's busy time while a run ran (/proc/stat: its actors, Ray's processes, the driver), the
forward's own process time; a run's CPU seconds over the machine's cores bound its wall time from
below.

``--against CHECKOUT`` adds ``base``: the same command from another checkout of xai-ray (e.g. a
``git worktree`` of an earlier commit), for a before/after of whole runs; ``--repeats R`` runs the
variants in turn R times (run, base, old, run, base, old, ...) and prints each one's median run,
so a drift of the machine's speed reaches them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def forward_seconds(model_name: str, data: str, n: int, max_length: int) -> tuple[float, float]:
    import torch
    from throughput import batches, texts_for

    from xai_ray.model.loading import load_model

    torch.set_num_threads(os.cpu_count() or 1)
    _, texts = texts_for(data, n)
    loaded = load_model(model_name, attn_implementation="sdpa")
    model, tok = loaded.model, loaded.tokenizer
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for group in batches(tok, texts, max_length):
            model(**tok(group, truncation=True, max_length=max_length, padding=True, return_tensors="pt"))
    return time.perf_counter() - start, time.process_time() - cpu


def old_score(rows, cfg):
    """The scoring stage before the warm pool: Ray Data's actor pool of ``Scorer``, started when the
    dataset runs (after screening), its actors gone with it."""
    from ray.data import ActorPoolStrategy

    from xai_ray import pipeline
    from xai_ray.pipeline import pool
    from xai_ray.pipeline.batches import scorer_input
    from xai_ray.runtime import check_actor_fits, ensure_ray
    from xai_ray.scoring.actor import Scorer
    from xai_ray.scoring.settings import ScorerConfig

    ensure_ray()
    gpus = pipeline.actor_gpus(cfg)
    check_actor_fits(gpus, cfg.cpus_per_actor)
    actors = cfg.actors or pool.auto_actors(gpus, cfg.cpus_per_actor)
    dataset, _ = scorer_input(rows, cfg, actors)
    return dataset.map_batches(
        Scorer,
        fn_constructor_kwargs={"config": ScorerConfig.of(cfg, gpus_per_actor=gpus)},
        batch_size=cfg.batch_size,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        num_gpus=gpus,
        num_cpus=cfg.cpus_per_actor,
    )


def old_cli(argv: list[str]) -> int:
    """``xai-ray ARGS`` with the old scoring stage and no early actor start, the corpus streamed
    through Ray Data (``driver_rows=0``) as it then always was."""
    from xai_ray import pipeline
    from xai_ray.cli.main import main

    pipeline.score = old_score
    pipeline.start_actors = lambda cfg, **_: None
    return main([*argv, "--set", "driver_rows=0"])


def whole_run(variant: str, model: str, data: str, n: int, against: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as store:
        args = ["run", "--data", str(Path(data).resolve()), "--limit", str(n), "--model", model, "--store", store]
        if variant in ("run", "base"):
            cmd = [sys.executable, "-m", "xai_ray.cli", *args]
        else:
            cmd = [sys.executable, __file__, "--old-cli", *args]
        code = against if variant == "base" else str(ROOT)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([code, os.environ.get("PYTHONPATH", "")])}
        start, busy = time.time(), busy_cpu()
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=code)  # `-m` puts the cwd first
        seconds, cpu = time.time() - start, busy_cpu() - busy
        logs = list((Path(store) / "logs").glob("*.log"))
        return {"seconds": seconds, "cpu": cpu, "phases": phases(logs[0].read_text(), start, seconds) if logs else {}}


def busy_cpu() -> float:
    """The machine's busy CPU seconds so far, every process's (/proc/stat: all but idle and iowait):
    a run's actors, Ray's processes and the driver together, which no one process's clock sees."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


MARKS = (
    ("until reading", "reading "),
    ("until actors start", "starting "),
    ("screening", "screened "),
    ("scoring", "published run "),
    ("summary", "top_words"),
)


def phases(log: str, start: float, total: float) -> dict:
    """Seconds of each phase, from the log's timestamps, in the order the marks came (the actors
    start before the corpus is read on the command line); the rest: summary, report, exit."""
    at = {}
    for name, mark in MARKS:
        match = re.search(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\s.*" + re.escape(mark), log, re.M)
        if match:
            at[name] = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    found, last = {}, start
    for name in sorted(at, key=at.get):
        found[name], last = at[name] - last, at[name]
    found["report, exit"] = start + total - last
    return found


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--old-cli":
        raise SystemExit(old_cli(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="minilm")
    parser.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/imdb/train.parquet"))
    parser.add_argument("n", nargs="?", type=int, default=200)
    parser.add_argument("--skip", default="", help="variants to leave out: old")
    parser.add_argument("--against", help="another checkout of xai-ray whose run is timed beside this one's")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each variant, in turn (medians printed)")
    parser.add_argument("--forward-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.forward_only:
        seconds, cpu = forward_seconds(args.model, args.data, args.n, 512)
        print(json.dumps({"seconds": seconds, "cpu": cpu}))
        return
    print(f"model {args.model}, {args.n} IMDB reviews (the README's main job), {os.cpu_count()} CPUs")
    fwd_cmd = [sys.executable, __file__, args.model, args.data, str(args.n), "--forward-only"]
    fwd = json.loads(subprocess.run(fwd_cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    variants = ["run"] + (["base"] if args.against else []) + ([] if "old" in args.skip else ["old"])
    runs = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name in variants:
            runs[name].append(whole_run(name, args.model, args.data, args.n, args.against))
    results = {name: sorted(done, key=lambda r: r["seconds"])[len(done) // 2] for name, done in runs.items()}
    print(f"{'fwd: bare forward (SDPA, batched)':<44}{fwd['seconds']:>8.1f} s   (CPU {fwd['cpu']:.1f} s)")
    labels = {
        "run": "run: xai-ray run, whole",
        "base": f"base: xai-ray run from {Path(args.against or '.').name}",
        "old": "old: xai-ray run, old scoring stage",
    }
    for name, result in results.items():
        parts = ", ".join(f"{k} {v:.1f}" for k, v in result["phases"].items())
        print(f"{labels[name]:<44}{result['seconds']:>8.1f} s   (CPU {result['cpu']:.1f} s; {parts})")
    if args.repeats > 1:
        for name, done in runs.items():
            print(f"  {name} runs: " + ", ".join(f"{r['seconds']:.1f}" for r in done) + " s")
    if "base" in results:
        print(f"ratio base/fwd: {results['base']['seconds'] / fwd['seconds']:.2f}")
        print(f"ratio run/base: {results['run']['seconds'] / results['base']['seconds']:.2f}")
    print(f"ratio run/fwd: {results['run']['seconds'] / fwd['seconds']:.2f}   goal <= 2")
    # On C cores a run cannot take less than its CPU seconds / C, however well its parts overlap.
    floor = results["run"]["cpu"] / (os.cpu_count() or 1)
    print(f"CPU run/fwd: {results['run']['cpu'] / fwd['cpu']:.2f}; wall floor of run on these cores: {floor:.1f} s")
    if "old" in results:
        print(f"ratio old/fwd: {results['old']['seconds'] / fwd['seconds']:.2f}")
        print(f"ratio run/old: {results['run']['seconds'] / results['old']['seconds']:.2f}")


if __name__ == "__main__":
    main()
