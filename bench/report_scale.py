"""Does the report stay flat as the corpus grows? Size and build time of `build_report` on a
small and a large synthetic run, side by side.

Builds each run with the real layout and schemas of `xai_ray/store.py` (docs, words, tokens;
Zipf-distributed words as in bench/topk.py, ~230 words per review, 6 layers x 2 methods, texts
made of the words so the highlighted examples have something to show), then times
`xai_ray.report.page.build_report` (first and median of --repeats) and prints file size and seconds.
Usage: python bench/report_scale.py [--docs 200 5000] [--store DIR]
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

from xai_ray.report.aggregates import keep_aggregates
from xai_ray.report.page import build_report
from xai_ray.store import layout, schemas
from xai_ray.store.writer import ROW_GROUP_ROWS

METHODS = ("raw", "rollout")
LAYERS = 6


def build(store: Path, run_id: str, n_docs: int, words_per_doc: int = 230, seed: int = 0) -> int:
    """One synthetic published run; returns its number of word occurrences (per method and layer)."""
    rng = np.random.default_rng(seed)
    run = layout.run_dir(store, run_id)
    lengths = rng.integers(words_per_doc // 4, words_per_doc * 7 // 4, size=n_docs)  # (D,)
    total = int(lengths.sum())
    vocab = np.array([f"w{i}" for i in range(50_000)])
    words = vocab[np.minimum(rng.zipf(1.3, size=total) - 1, len(vocab) - 1)]  # (total,)
    doc_names = np.array([f"train_{i}" for i in range(n_docs)])
    doc_of_word = np.repeat(np.arange(n_docs), lengths)  # (total,)
    word_ids = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    starts = np.concatenate([[0], np.cumsum(lengths)])
    # Tokens: [CLS] words [SEP], one token per word (enough for the views; the report reads words).
    n_tokens = lengths + 2
    token_doc = np.repeat(np.arange(n_docs), n_tokens)
    positions = np.concatenate([np.arange(n, dtype=np.int32) for n in n_tokens])
    token_word = np.concatenate([np.r_[-1, np.arange(n), -1] for n in lengths]).astype(np.int32)
    token_text = np.where(
        token_word < 0, np.where(positions == 0, "[CLS]", "[SEP]"), words[starts[token_doc] + np.maximum(token_word, 0)]
    )
    for method in METHODS:
        for layer in range(1, LAYERS + 1):
            raw = rng.random(total, dtype=np.float32)
            score = raw / np.bincount(doc_of_word, weights=raw)[doc_of_word].astype(np.float32)
            _write(
                run / "words" / f"method={method}" / f"layer={layer}",
                pa.Table.from_arrays(
                    [
                        pa.array(doc_names[doc_of_word]),
                        pa.array(word_ids),
                        pa.array(words),
                        pa.array(score),
                        pa.array(raw),
                        pa.array(score * lengths[doc_of_word].astype(np.float32)),
                        pa.array(word_ids),
                        pa.array(words),
                    ],
                    schema=schemas.WORDS,
                ),
            )
            _write(
                run / "tokens" / f"method={method}" / f"layer={layer}",
                pa.Table.from_arrays(
                    [
                        pa.array(doc_names[token_doc]),
                        pa.array(positions),
                        pa.array(token_text),
                        pa.array(np.maximum(token_word, 0), mask=token_word < 0),
                        pa.array(rng.random(len(positions), dtype=np.float32)),
                    ],
                    schema=schemas.TOKENS,
                ),
            )
    prob_pos = rng.random(n_docs, dtype=np.float32)
    _write(
        run / "docs",
        pa.table(
            {
                "doc_id": doc_names,
                "label": rng.integers(0, 2, n_docs),
                "pred": (prob_pos > 0.5).astype(np.int64),
                "prob_pos": prob_pos,
                "probs": [[1 - p, p] for p in prob_pos.tolist()],
                "n_tokens": n_tokens.astype(np.int32),
                "n_words": lengths.astype(np.int32),
                "truncated": np.zeros(n_docs, bool),
                "text": [" ".join(words[a:b]) for a, b in zip(starts[:-1], starts[1:])],
                # columns only the gradient methods fill: null here, as a run without them writes them
                **{name: [None] * n_docs for name in ("target", "ig_delta", "ig_completeness_error")},
            },
            schema=schemas.DOCS,
        ),
    )
    _write(run / "errors", schemas.ERRORS.empty_table())
    manifest = {
        "run_id": run_id,
        "created_at": "2026-01-01T00:00:00+00:00",
        "config": {"methods": list(METHODS), "model": "synthetic", "data": "synthetic"},
        "model": {"n_layers": LAYERS, "labels": {"0": "negative", "1": "positive"}},
        "timings": {"total_s": 0.0},
        "counts": {"docs": n_docs, "words": total * LAYERS * len(METHODS)},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return total


def _write(folder: Path, table: pa.Table) -> None:
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-0.parquet", compression="zstd", row_group_size=ROW_GROUP_ROWS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, nargs="+", default=[200, 5_000])
    parser.add_argument("--words-per-doc", type=int, default=230)
    parser.add_argument("--store", help="reuse or create the synthetic store here (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        store, rows = Path(args.store or scratch), []
        for n_docs in args.docs:
            run_id = f"docs{n_docs}"
            if not layout.run_dir(store, run_id).exists():
                start = time.perf_counter()
                total = build(store, run_id, n_docs, args.words_per_doc)
                print(
                    f"built run {run_id}: {total * LAYERS * len(METHODS):,} word rows "
                    f"in {time.perf_counter() - start:.1f}s"
                )
            out = Path(scratch) / f"report-{run_id}.html"
            start = time.perf_counter()
            keep_aggregates(store, run_id)  # the pipeline's aggregate stage, run once per run
            aggregate_s = time.perf_counter() - start
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                build_report(store, run_id, out)
                times.append(time.perf_counter() - start)
            rows.append((n_docs, out.stat().st_size, aggregate_s, times[0], statistics.median(times)))
        # The first build of a process also pays ~1.5 s for vl-convert's Vega bundle (then cached).
        print(
            f"{'documents':>10}{'report bytes':>14}{'aggregate stage s':>19}{'first build s':>15}{'median build s':>16}"
        )
        for n_docs, size, aggregate_s, first, seconds in rows:
            print(f"{n_docs:>10}{size:>14,}{aggregate_s:>19.2f}{first:>15.2f}{seconds:>16.2f}")
        (small_n, small_size, small_agg, _, small_s), (big_n, big_size, big_agg, _, big_s) = rows[0], rows[-1]
        print(
            f"{big_n / small_n:.0f}x the documents: {big_size / small_size:.2f}x the size, "
            f"{big_s / small_s:.2f}x the report build time (aggregate stage: {big_agg / small_agg:.2f}x, "
            "paid once by the run)"
        )


if __name__ == "__main__":
    main()
