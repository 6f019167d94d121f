"""What the scoring stage costs against the bare forward on one CPU thread (a CPU actor's setting).

    python bench/capture_cost.py [MODEL] [DATA] [--docs 64] [--max-length 512] [--repeats 2]

In one process, torch and the tokenizer on one thread, on the same reviews, best CPU time of
``--repeats``:
  forward   the bare forward: fused SDPA, no capture, the reviews in length-sorted groups of 8
  scorer-   ``Scorer`` on the reviews (tokenizing, capture, raw + rollout, words, columns),
            per-head statistics off
  scorer    the same with per-head statistics on every review
A whole run's actors run this scorer, one thread each; ``throughput.py``'s bare forward (b) runs on
every core of one process, which a second thread speeds up by less than 2x. So a run's pace against
(b) can pass 1 / (scorer / forward) by what that leaves on the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def best_cpu(step, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        step()
        best = min(best, time.process_time() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="minilm")
    parser.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/imdb/train.parquet"))
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ["RAYON_NUM_THREADS"] = "1"  # before the tokenizer's first call, as in an actor

    import numpy as np
    import torch

    from xai_ray.config import resolve
    from xai_ray.data.corpus import read_corpus
    from xai_ray.model.loading import load_model
    from xai_ray.scoring.actor import Scorer

    torch.set_num_threads(1)
    cfg = resolve(
        None,
        {"data": args.data, "limit": args.docs, "model": args.model, "max_length": args.max_length, "store": "unused"},
    )
    corpus = read_corpus(cfg.data, cfg.split, limit=cfg.limit, seed=cfg.seed)
    batch = {"doc_id": list(corpus.doc_id), "text": list(corpus.text), "label": list(corpus.label)}
    scorer = Scorer({**cfg.to_dict(), "methods": ["raw", "rollout"], "gpus_per_actor": 0})
    scorer(batch)  # warm: the first call builds what later calls reuse
    no_heads = {**batch, "heads_stats": np.zeros(args.docs, dtype=bool)}

    plain = load_model(args.model, attn_implementation="sdpa")
    model, tokenizer = plain.model, plain.tokenizer
    encoded = [tokenizer(t, truncation=True, max_length=args.max_length)["input_ids"] for t in batch["text"]]
    order = np.argsort([len(ids) for ids in encoded])

    def forward() -> None:
        with torch.inference_mode():
            for first in range(0, len(order), 8):
                group = [encoded[i] for i in order[first : first + 8]]
                width = max(len(ids) for ids in group)
                input_ids = torch.tensor([ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids in group])
                mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in group])
                model(input_ids=input_ids, attention_mask=mask)  # (8, width) -> logits

    forward()
    times = {
        "forward": best_cpu(forward, args.repeats),
        "scorer-": best_cpu(lambda: scorer(no_heads), args.repeats),
        "scorer": best_cpu(lambda: scorer(batch), args.repeats),
    }
    print(
        f"{args.model}, {args.docs} IMDB reviews at {args.max_length}, one thread, CPU seconds (best of {args.repeats})"
    )
    for name, seconds in times.items():
        print(f"  {name:<9}{seconds:8.2f} s   {seconds / times['forward']:.2f}x the forward")
    print(
        f"capture_cost: scorer-/forward {times['scorer-'] / times['forward']:.2f}, "
        f"scorer/forward {times['scorer'] / times['forward']:.2f} (CPU seconds, one thread each)"
    )


if __name__ == "__main__":
    main()
