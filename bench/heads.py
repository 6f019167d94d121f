"""What do the per-head statistics cost the scoring stage?

    python bench/heads.py MODEL DATA N [--max-length 128] [--repeats 3]

Scores the same N reviews with the scoring stage (xai_ray.scoring.actor.Scorer, raw + rollout) with
heads off, heads on (statistics only), and heads on with every review in the head-similarity
sample (the worst case of the Jensen-Shannon pass), alternating the variants ``--repeats``
times in one process so a busy machine slows them alike; prints the best docs/s of each and
the overhead relative to heads off.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("n", type=int)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from xai_ray.data.corpus import read_corpus
    from xai_ray.scoring.actor import Scorer

    corpus = read_corpus(args.data, limit=args.n, seed=0)
    base = {"model": args.model, "max_length": args.max_length, "methods": ["raw", "rollout"], "cpus_per_actor": 1}
    variants = {
        "heads off": (Scorer({**base, "heads": False}), False),
        "heads on": (Scorer({**base, "heads": True}), False),
        "heads on, all sampled": (Scorer({**base, "heads": True, "heads_sample_rows": args.max_length}), True),
    }
    seconds = {name: [] for name in variants}
    for _ in range(args.repeats):
        spent = dict.fromkeys(variants, 0.0)
        # Variants take turns batch by batch, so a machine whose load drifts slows them alike
        for start in range(0, len(corpus), 64):  # the pipeline's batch_size
            for name, (scorer, sampled) in variants.items():
                part = corpus.iloc[start : start + 64]
                batch = {
                    "doc_id": part.doc_id.values,
                    "text": part.text.values,
                    "label": part.label.values,
                    "heads_sample": np.full(len(part), sampled),
                }
                started = time.perf_counter()
                scorer(batch)
                spent[name] += time.perf_counter() - started
        for name in variants:
            seconds[name].append(spent[name])
    off = min(seconds["heads off"])
    for name, times in seconds.items():
        best = min(times)
        print(
            f"{name:24s} {len(corpus) / best:8.1f} docs/s  best {best:7.2f} s  "
            f"({(best / off - 1) * 100:+.1f}% vs heads off; runs {', '.join(f'{t:.2f}' for t in times)})"
        )


if __name__ == "__main__":
    main()
