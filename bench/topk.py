"""How fast does `topk` answer over a 25,000-review store (every layer, two methods)?

Builds a synthetic store with the real layout and schemas (Zipf-distributed words, ~230 words
per review, 6 layers x 2 methods) and runs the aggregate stage's `keep_word_totals` on it once
(timed: what a run pays at its end), then times, side by side in one run:
  (a) `xai_ray.query.top_words.topk` with its defaults (lift per review, then the mean over reviews, the
      default minimum documents, 95% intervals), answered from the kept word totals,
  (b) the same answer computed from every occurrence of that method/layer file (`topk.sql`: the
      path of nightly unions and of --by label|correct),
  (c) opening the store (views, sandbox) alone,
  (d) the old statistic (mean share over occurrences, one group-by over that file).
Prints seconds and the ratios b/a and d/a. Usage: python bench/topk.py [--docs 25000] [--store DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.query.connection import open_store, run_named
from xai_ray.query.top_words import keep_word_totals, topk
from xai_ray.query.wordstats import default_min_docs, query_params
from xai_ray.store import layout, schemas
from xai_ray.store.layout import aggregate_file
from xai_ray.store.writer import ROW_GROUP_ROWS

METHODS = ("raw", "rollout")
LAYERS = 6


def build(store: Path, n_docs: int, words_per_doc: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    run = layout.run_dir(store, "bench")
    lengths = rng.integers(words_per_doc // 4, words_per_doc * 7 // 4, size=n_docs)  # (D,)
    total = int(lengths.sum())
    vocab = np.array([f"w{i}" for i in range(50_000)])
    word_ids = np.minimum(rng.zipf(1.3, size=total) - 1, len(vocab) - 1)  # (total,)
    doc_ids = np.repeat(np.array([f"train_{i}" for i in range(n_docs)]), lengths)
    positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    words = pa.array(vocab[word_ids])
    for method in METHODS:
        for layer in range(1, LAYERS + 1):
            raw = rng.random(total, dtype=np.float32)  # (total,)
            sums = np.bincount(np.repeat(np.arange(n_docs), lengths), weights=raw)
            score = raw / np.repeat(sums, lengths).astype(np.float32)
            folder = run / "words" / f"method={method}" / f"layer={layer}"
            folder.mkdir(parents=True)
            lift = score * np.repeat(lengths, lengths).astype(np.float32)
            table = pa.Table.from_arrays(
                [
                    pa.array(doc_ids),
                    pa.array(positions),
                    words,
                    pa.array(score),
                    pa.array(raw),
                    pa.array(lift),
                    pa.array(positions),
                    words,
                ],
                schema=schemas.WORDS,
            )
            pq.write_table(table, folder / "part-0.parquet", compression="zstd", row_group_size=ROW_GROUP_ROWS)
    docs = pa.table(
        {
            "doc_id": [f"train_{i}" for i in range(n_docs)],
            "label": rng.integers(0, 2, n_docs),
            "pred": rng.integers(0, 2, n_docs),
            "prob_pos": rng.random(n_docs, dtype=np.float32),
            "probs": [[0.5, 0.5]] * n_docs,
            "n_tokens": (lengths * 1.2).astype(np.int32),
            "n_words": lengths.astype(np.int32),
            "truncated": np.zeros(n_docs, bool),
            "text": [""] * n_docs,
            # columns only the gradient methods fill: null here, as a run without them writes them
            **{name: [None] * n_docs for name in ("target", "ig_delta", "ig_completeness_error")},
        },
        schema=schemas.DOCS,
    )
    (run / "docs").mkdir()
    pq.write_table(docs, run / "docs" / "part-0.parquet")
    manifest = {
        "run_id": "bench",
        "created_at": "2026-01-01T00:00:00+00:00",
        "config": {"methods": list(METHODS)},
        "model": {"n_layers": LAYERS},
        "counts": {"docs": n_docs, "words": total * 12},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return total


OLD_STATISTIC = """
select lower(word) as word, avg(score) as mean_score, count(*) as occurrences
from words where run_id = $run_id and method = $method and layer = $layer
group by lower(word) having count(*) >= $min_count order by mean_score desc, word limit $k
"""


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=25_000)
    parser.add_argument("--words-per-doc", type=int, default=230)
    parser.add_argument("--store", help="reuse or create the synthetic store here (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(args.store or scratch)
        if not layout.run_dir(store, "bench").exists():
            start = time.perf_counter()
            total = build(store, args.docs, args.words_per_doc)
            print(f"built store: {args.docs} docs, {total * 12:,} word rows in {time.perf_counter() - start:.1f}s")
        if not aggregate_file(store, "bench", "word_totals").is_file():
            start = time.perf_counter()
            keep_word_totals(store, "bench")
            print(f"aggregate stage, once per run (keep_word_totals): {time.perf_counter() - start:.1f}s")
        open_s, con = timed(lambda: open_store(store), args.repeats)
        kept_s, top = timed(lambda: topk(con, "bench", "rollout", LAYERS, k=20), args.repeats)
        min_docs = default_min_docs(args.docs)
        params = {
            "run_id": "bench",
            "method": "rollout",
            "layer": LAYERS,
            "k": 20,
            **query_params("lift", min_docs, 1, None),
        }
        scan_s, scanned = timed(lambda: run_named(con, "topk", **params), args.repeats)
        assert top.word.tolist() == scanned.word.tolist(), "kept totals and the scan disagree"
        old = {"run_id": "bench", "method": "rollout", "layer": LAYERS, "min_count": 5, "k": 20}
        old_s, _ = timed(lambda: con.execute(OLD_STATISTIC, old).df(), args.repeats)
        print(f"{'variant':<52}{'median s':>10}")
        print(f"{'(c) open store (views + sandbox)':<52}{open_s:>10.3f}")
        print(f"{'(a) topk, from the kept word totals':<52}{kept_s:>10.3f}")
        print(f"{'(b) same answer from every occurrence (topk.sql)':<52}{scan_s:>10.3f}")
        print(f"{'(d) old statistic (mean share, one group-by)':<52}{old_s:>10.3f}")
        print(
            f"default minimum documents for {args.docs} reviews: {min_docs}; ratios b/a {scan_s / kept_s:.0f}x, "
            f"d/a {old_s / kept_s:.0f}x; a+c = {open_s + kept_s:.3f}s "
            f"({'under' if open_s + kept_s < 1 else 'OVER'} the 1 s target)"
        )


if __name__ == "__main__":
    main()
