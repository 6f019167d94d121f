"""What does scoring long reviews whole cost?

    python bench/long_text.py MODEL DATA N [--max-length 128] [--repeats 2]

Takes the N longest of 2,000 seeded IMDB reviews and scores them with the scoring stage
(xai_ray.scoring.actor.Scorer, raw + rollout, heads off) under long_text head, head_tail and window
(default stride, half a window), alternating the variants ``--repeats`` times in one process so a
busy machine slows them alike; prints the best seconds per review, the model inputs per review and
the cost relative to head.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("n", type=int)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from xai_ray.data.corpus import read_corpus
    from xai_ray.scoring import segments
    from xai_ray.scoring.actor import Scorer

    corpus = read_corpus(args.data, split="train", limit=2000, seed=0)
    corpus = corpus.assign(chars=corpus.text.str.len()).nlargest(args.n, "chars")
    batch = {"doc_id": corpus.doc_id.values, "text": corpus.text.values, "label": corpus.label.values}
    modes = ("head", "head_tail", "window")
    scorers = {
        m: Scorer(
            {
                "model": args.model,
                "max_length": args.max_length,
                "methods": ["raw", "rollout"],
                "heads": False,
                "long_text": m,
            }
        )
        for m in modes
    }
    tokenizer = scorers["head"].tokenizer
    inputs = {
        m: sum(len(segments.plan(tokenizer, t, scorers[m].max_length, m).inputs) for t in corpus.text) / len(corpus)
        for m in modes
    }
    tokens = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in corpus.text) / len(corpus)
    best = {m: float("inf") for m in modes}
    for _ in range(args.repeats):
        for m in modes:
            started = time.perf_counter()
            rows = scorers[m](batch).to_pylist()
            best[m] = min(best[m], (time.perf_counter() - started) / len(rows))
            assert not any(r["error"] for r in rows)
    print(f"{len(corpus)} reviews, {tokens:.0f} tokens each on average, max_length {args.max_length}")
    for m in modes:
        print(
            f"{m:>10}: {best[m]:.3f} s/review, {inputs[m]:.1f} model inputs/review, {best[m] / best['head']:.2f}x head"
        )


if __name__ == "__main__":
    main()
