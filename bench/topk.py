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
Each in store layout 1 (a words file per method x layer), layout 2 (one file, a share and a raw
column per method x layer) and layout 3 (one row per token, here one token a word, so a word's raw
score is its token's score and its share raw / the document's divisor), the same rows in all;
prints seconds for each, layout 2 / 1 and 3 / 1, and layout 3's ratios b/a and d/a. Usage: python bench/topk.py [--docs 25000] [--store DIR]
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
from xai_ray.query.top_words import topk
from xai_ray.query.word_totals import keep_word_totals
from xai_ray.query.wordstats import default_min_docs, query_params
from xai_ray.store import layout, schemas
from xai_ray.store.files import write_parquet  # noqa: E402
from xai_ray.store.layout import aggregate_file
from xai_ray.store.schemas import slice_column
from xai_ray.store.tables import parquet_options
from xai_ray.store.writer import ROW_GROUP_ROWS

METHODS = ("raw", "rollout")
LAYERS = 6


def build(store: Path, n_docs: int, words_per_doc: int, seed: int = 0, store_layout: int = 2) -> int:
    """A run of ``n_docs`` reviews in store ``store_layout`` (1: a words file per method x layer; 2: one
    file, a share and a raw column per method x layer; 3: one file, a word on its one token's row,
    the token score and the document's divisor per method x layer), the same rows for all (same ``seed``)."""
    rng = np.random.default_rng(seed)
    run = layout.run_dir(store, "bench")
    lengths = rng.integers(words_per_doc // 4, words_per_doc * 7 // 4, size=n_docs)  # (D,)
    total = int(lengths.sum())
    vocab = np.array([f"w{i}" for i in range(50_000)])
    word_ids = np.minimum(rng.zipf(1.3, size=total) - 1, len(vocab) - 1)  # (total,)
    doc_ids = np.repeat(np.array([f"train_{i}" for i in range(n_docs)]), lengths)
    positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    words = pa.array(vocab[word_ids])
    unit = {name: words for name in ("word", "joined")}
    columns = {"doc_id": pa.array(doc_ids), "word_id": pa.array(positions), **unit, "span_id": pa.array(positions)}
    weight = np.repeat(lengths, lengths).astype(np.float64)  # every word its own unit: lift = share x words
    wide = {**columns, "unit_weight": pa.array(weight)}
    # layout 3: the token columns too (one token a word), the words' columns on the same rows
    rows3 = {
        "doc_id": columns["doc_id"],
        "position": pa.array(positions),
        "token": words,
        "word_id": pa.array(positions),
    }
    rows3.update({name: wide[name] for name in ("word", "span_id", "joined", "unit_weight")})
    for method in METHODS:
        for layer in range(1, LAYERS + 1):
            raw = rng.random(total, dtype=np.float32)  # (total,)
            sums = np.bincount(np.repeat(np.arange(n_docs), lengths), weights=raw)
            divisor = np.repeat(sums, lengths).astype(np.float32)  # (total,) the document's total, as float32
            score = raw / divisor
            wide[slice_column("score", method, layer)] = pa.array(score)
            wide[slice_column("raw_score", method, layer)] = pa.array(raw)
            rows3[slice_column("score", method, layer)] = pa.array(raw)  # a word's one token: raw is its score
            rows3[slice_column("token_score", method, layer)] = pa.nulls(total, pa.float32())
            rows3[slice_column("divisor", method, layer)] = pa.array(divisor)
            if store_layout > 1:
                continue
            folder = run / "words" / f"method={method}" / f"layer={layer}"
            folder.mkdir(parents=True)
            lift = (score.astype(np.float64) * weight).astype(np.float32)
            table = pa.Table.from_arrays(
                [columns["doc_id"], columns["word_id"], words, pa.array(score), pa.array(raw), pa.array(lift)]
                + [columns["span_id"], words],
                schema=schemas.WORDS,
            )
            pq.write_table(table, folder / "part-0.parquet", compression="zstd", row_group_size=ROW_GROUP_ROWS)
    if store_layout > 1:
        folder = {2: "word_scores", 3: "token_scores"}[store_layout]
        (run / folder).mkdir(parents=True)
        table = pa.table(wide if store_layout == 2 else rows3)
        options = parquet_options(table)
        write_parquet(table, run / folder / "part-0.parquet", **{"row_group_size": ROW_GROUP_ROWS, **options})
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
    if store_layout > 1:
        slices = [f"{m}:{layer}" for m in METHODS for layer in range(1, LAYERS + 1)]
        manifest.update(store_layout=store_layout, slices=slices, shares=[])
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


def measure(store: Path, args, store_layout: int) -> dict[str, float]:
    """Build (or reuse) the store of ``store_layout`` and time (a)-(d) on it."""
    if not layout.run_dir(store, "bench").exists():
        start = time.perf_counter()
        total = build(store, args.docs, args.words_per_doc, store_layout=store_layout)
        print(f"built layout-{store_layout} store: {args.docs} docs, {total * 12:,} word rows in "
              f"{time.perf_counter() - start:.1f}s")  # fmt: skip
    if not aggregate_file(store, "bench", "word_totals").is_file():
        start = time.perf_counter()
        keep_word_totals(store, "bench")
        print(f"aggregate stage, once per run (keep_word_totals): {time.perf_counter() - start:.1f}s")
    open_s, con = timed(lambda: open_store(store), args.repeats)
    kept_s, top = timed(lambda: topk(con, "bench", "rollout", LAYERS, k=20), args.repeats)
    params = {
        "run_id": "bench",
        "method": "rollout",
        "layer": LAYERS,
        "k": 20,
        **query_params("lift", default_min_docs(args.docs), 1, None),
    }
    scan_s, scanned = timed(lambda: run_named(con, "topk", **params), args.repeats)
    assert top.word.tolist() == scanned.word.tolist(), "kept totals and the scan disagree"
    old = {"run_id": "bench", "method": "rollout", "layer": LAYERS, "min_count": 5, "k": 20}
    old_s, _ = timed(lambda: con.execute(OLD_STATISTIC, old).df(), args.repeats)
    return {"c": open_s, "a": kept_s, "b": scan_s, "d": old_s, "top": top.word.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=25_000)
    parser.add_argument("--words-per-doc", type=int, default=230)
    parser.add_argument("--store", help="reuse or create the synthetic stores here (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.store or scratch)
        got = {v: measure(root / f"layout{v}", args, v) for v in (1, 2, 3)}
    assert got[1]["top"] == got[2]["top"] == got[3]["top"], "the layouts disagree"
    rows = [
        ("c", "(c) open store (views + sandbox)"),
        ("a", "(a) topk, from the kept word totals"),
        ("b", "(b) same answer from every occurrence (topk.sql)"),
        ("d", "(d) old statistic (mean share, one group-by)"),
    ]
    print(f"{'variant (median s)':<52}{'layout 1':>10}{'layout 2':>10}{'layout 3':>10}{'2 / 1':>8}{'3 / 1':>8}")
    for key, name in rows:
        times = "".join(f"{got[v][key]:>10.3f}" for v in (1, 2, 3))
        print(f"{name:<52}{times}" + "".join(f"{got[v][key] / got[1][key]:>7.2f}x" for v in (2, 3)))
    new = got[3]
    print(
        f"default minimum documents for {args.docs} reviews: {default_min_docs(args.docs)}; layout 3 ratios "
        f"b/a {new['b'] / new['a']:.0f}x, d/a {new['d'] / new['a']:.0f}x; a+c = {new['c'] + new['a']:.3f}s "
        f"({'under' if new['c'] + new['a'] < 1 else 'OVER'} the 1 s target)"
    )


if __name__ == "__main__":
    main()
