"""Does the offline fine-tune reach a useful classifier on a small CPU machine, and how fast?

Fine-tunes the packaged all-MiniLM-L6-v2 weights on 3,000 IMDB train reviews (max length 256
with head+tail truncation, 1 epoch, batch 16, peak lr 2e-4: `jobs/finetune.yaml`) and measures held-out accuracy on 1,000 OTHER train reviews (a
stratified, seeded slice of the same 4,000-review sample, recorded by id in metrics.json). This is
exactly

    xai-ray finetune --config jobs/finetune.yaml --out OUT

Prints accuracy, the majority baseline, minutes and training docs/s. Usage (run it inside the
loopback wrapper, it starts Ray):

    bash scripts/loopback.sh .venv/bin/python bench/finetune.py [--out DIR] [--workers K] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from xai_ray import cli

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="model folder (default: a temporary folder)")
    parser.add_argument("--workers", help="Ray Train workers (default: one per CPU)")
    parser.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="xai-ray-finetune-")) / "model"
    argv = [
        "finetune",
        "--config",
        str(ROOT / "jobs" / "finetune.yaml"),
        "--data",
        str(ROOT.parent / "shared" / "data" / "imdb" / "train.parquet"),
        "--out",
        str(out),
    ]
    argv += ["--workers", args.workers] if args.workers else []
    argv += [x for item in args.sets for x in ("--set", item)]
    print("command: xai-ray " + " ".join(argv), flush=True)
    started = time.perf_counter()
    status = cli.main(argv)
    minutes = (time.perf_counter() - started) / 60
    if status:
        return status
    metrics = json.loads((out / "metrics.json").read_text())
    logging.shutdown()
    print(
        json.dumps(
            {
                "train_docs": metrics["data"]["train_docs"],
                "heldout_docs": metrics["data"]["heldout_docs"],
                "heldout_accuracy": metrics["heldout_accuracy"],
                "majority_baseline": metrics["majority_baseline"],
                "minutes": round(minutes, 2),
                "train_docs_per_s": metrics["timings"]["train_docs_per_s"],
                "workers": metrics["scaling"]["workers"],
                "threads_per_worker": metrics["scaling"]["threads"],
                "model": str(out),
            },
            indent=1,
        )
    )
    print(
        f"accuracy {metrics['heldout_accuracy']:.4f} on {metrics['data']['heldout_docs']} held-out reviews "
        f"in {minutes:.1f} min",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
