"""What a scoring actor's start costs: transformers' model classes against the plain-torch ones.

    .venv/bin/python bench/actor_start.py [MODEL] [--repeats 3] [--device cpu|cuda]

Each variant runs in a fresh process, in turn, doing what a scoring actor does before its first
batch (``pipeline.pool.ScorerHost``, ``scoring.actor.Scorer``): import torch and the loader, start
CUDA (``--device cuda``), load the model and its tokenizer (``load_model(lean=...)``), build the
scorer, then score one batch of 8 short reviews. Variants: ``transformers`` (``lean=False``: its
model classes and AutoTokenizer's class), ``lean, first`` (plain-torch classes; the tokenizer read
through transformers' class and kept, in an empty cache folder each time), ``lean`` (the kept
tokenizer: every later start). Prints each part's median over the repeats, the process's whole
wall time (interpreter start to exit), and what of transformers it imported, then one line:
``actor start: TRANSFORMERS -> LEAN s (RATIOx)``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
began = time.perf_counter()
import torch
from xai_ray.model.loading import load_model
marks = {"imports": time.perf_counter() - began}
device = sys.argv[3]
if device == "cuda":
    t = time.perf_counter(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
    marks["cuda"] = time.perf_counter() - t
t = time.perf_counter()
loaded = load_model(sys.argv[1], lean=sys.argv[2] == "lean", device=device)
marks["load"] = time.perf_counter() - t
from xai_ray.scoring.actor import Scorer
t = time.perf_counter()
scorer = Scorer({"model": sys.argv[1], "max_length": 128, "methods": ["raw", "rollout"],
                 "gpus_per_actor": 1 if device == "cuda" else 0}, loaded=loaded)
rows = scorer({"doc_id": [str(i) for i in range(8)], "text": ["a fine film, well acted"] * 8, "label": [1] * 8})
marks["first batch"] = time.perf_counter() - t
assert rows.column("error").null_count == 8
marks["transformers"] = (
    "model code" if "transformers.modeling_utils" in sys.modules else "tokenizer" if "transformers" in sys.modules else "none"
)
print(json.dumps(marks))
"""


def one(model: str, variant: str, device: str) -> dict:
    import os
    import tempfile

    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as empty:
        if variant == "lean, first":
            env["XDG_CACHE_HOME"] = empty  # no kept tokenizer (nor model description)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, model, "transformers" if variant == "transformers" else "lean", device],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            env=env,
        )
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    return {**marks, "process": time.perf_counter() - began}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default="minilm")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    one(args.model, "lean", args.device)  # keeps the tokenizer for the "lean" variant (untimed)
    runs: dict[str, list[dict]] = {"lean": [], "lean, first": [], "transformers": []}
    for _ in range(args.repeats):
        for variant in runs:
            runs[variant].append(one(args.model, variant, args.device))
    parts = [k for k in runs["lean"][0] if k != "transformers"]
    print(f"model {args.model}, {args.device}, {args.repeats} fresh processes each, in turn; medians in seconds")
    print(f"{'variant':<14}" + "".join(f"{p:>13}" for p in parts) + "  of transformers imported")
    medians = {}
    for variant, found in runs.items():
        medians[variant] = {p: statistics.median(r[p] for r in found) for p in parts}
        cells = "".join(f"{medians[variant][p]:>13.2f}" for p in parts)
        print(f"{variant:<14}{cells}  {found[0]['transformers']}")
    before, after = medians["transformers"]["process"], medians["lean"]["process"]
    print(f"actor start: {before:.2f} -> {after:.2f} s ({before / after:.2f}x)")


if __name__ == "__main__":
    main()
