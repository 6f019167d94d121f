"""How many reviews does the head-similarity map need?

    python bench/head_sample.py MODEL DATA [--docs 64] [--rows 64] [--max-length 512]

A run compares every pair of heads by the Jensen-Shannon divergence of their attention rows on
``heads_sample`` reviews (the first ``heads_sample_rows`` query rows of each), and the report draws
the mean over those reviews as a map. This takes ``--docs`` seeded IMDB reviews, each review's
(P, P) mean divergence (``methods.heads.jsd_sums`` over its kept rows, P = layers x heads), and
compares the maps two disjoint samples of k reviews give (k = 8, 16, 32, ...: the first k against
the next k): their Pearson correlation over every pair of heads, the largest difference between
them, and the spread of the map itself (the standard deviation of its pairs). Two samples that
agree closely say that k reviews draw the same map; the gap from k to 2k says what the cost of
each review buys. Also the time the pass takes per review.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow.parquet as pq
import torch


def per_review_maps(model_name: str, texts: list[str], rows: int, max_length: int) -> tuple[np.ndarray, float]:
    """(docs, P, P) each review's mean divergence per row, and the pass's seconds per review."""
    from xai_ray.methods.heads import jsd_sums
    from xai_ray.model.loading import load_model

    loaded = load_model(model_name, attn_implementation="eager")
    maps, spent = [], 0.0
    for text in texts:
        encoded = loaded.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.inference_mode():
            attention = loaded.model(**encoded, output_attentions=True).attentions
        heads = torch.cat([layer[0, :, :rows].float() for layer in attention])  # (P, R, n)
        started = time.perf_counter()
        sums = jsd_sums(heads)  # (P, P) summed over the R rows
        spent += time.perf_counter() - started
        maps.append(sums.numpy() / heads.shape[1])
    return np.stack(maps), spent / len(texts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread, as a CPU actor runs

    texts = pq.read_table(args.data, columns=["text"]).column("text").to_pylist()
    chosen = np.random.default_rng(0).choice(len(texts), args.docs, replace=False)
    maps, seconds = per_review_maps(args.model, [texts[i] for i in chosen], args.rows, args.max_length)
    upper = np.triu_indices(maps.shape[1], 1)
    print(
        f"{args.docs} reviews, {args.rows} rows each, {maps.shape[1]} heads; the pass {seconds * 1000:.0f} ms a review"
    )
    print(f"{'k':>4} {'correlation':>12} {'largest gap':>12} {'map spread':>11}")
    k = 8
    while 2 * k <= args.docs:
        first, second = maps[:k].mean(axis=0)[upper], maps[k : 2 * k].mean(axis=0)[upper]
        correlation = np.corrcoef(first, second)[0, 1]
        print(f"{k:>4} {correlation:>12.4f} {np.abs(first - second).max():>12.4f} {first.std():>11.4f}")
        k *= 2


if __name__ == "__main__":
    main()
