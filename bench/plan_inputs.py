"""What does cutting reviews into model inputs cost the scoring actor, one call per review against
one call per batch?

    python bench/plan_inputs.py [MODEL] [DATA] [--docs 1000] [--max-length 512] [--repeats 3] [--threads 1]

On the same reviews: (old) ``segments.plan`` once per review, as the scorer did (a tokenizer call
through transformers, plus two more to read its special tokens); (new) ``segments.plan_batch``
over the batch (one call, the fast tokenizer's encodings read directly, special tokens read once).
Checks that both give every review the same plan, then prints ms per review (best of
``--repeats``) and the ratio. ``--threads``: the tokenizer's threads (RAYON_NUM_THREADS), 1 as
a default-sized CPU actor has.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="minilm")
    parser.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/imdb/train.parquet"))
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # before the tokenizer's first batch call

    from xai_ray.data.corpus import read_corpus
    from xai_ray.model.loading import load_model
    from xai_ray.scoring import segments

    tokenizer = load_model(args.model).tokenizer
    texts = read_corpus(args.data, limit=args.docs, seed=0).text.tolist()
    old = [segments.plan(tokenizer, t, args.max_length, "head") for t in texts]
    new = segments.plan_batch(tokenizer, texts, args.max_length, "head")
    assert [dataclasses.asdict(p) for p in old] == [dataclasses.asdict(p) for p in new], "plans differ"
    before = best(lambda: [segments.plan(tokenizer, t, args.max_length, "head") for t in texts], args.repeats)
    after = best(lambda: segments.plan_batch(tokenizer, texts, args.max_length, "head"), args.repeats)
    per = 1000 / len(texts)
    print(f"{args.model}, {len(texts)} IMDB reviews, max length {args.max_length}, {args.threads} tokenizer thread(s)")
    print(f"plans identical for all {len(texts)} reviews")
    print(f"tokenize: {before * per:.3f} -> {after * per:.3f} ms/review ({before / after:.2f}x)")


if __name__ == "__main__":
    main()
