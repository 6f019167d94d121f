"""Store layouts 3 and 2 against layout 1: write cost per core, size per review and ad-hoc SQL, in one run.

    python bench/store_layout.py [--docs 2000] [--layers 6] [--methods raw,rollout] [--repeats 5] [--minilm]

The same synthetic scorer rows (MiniLM's shape by default: 6 layers, raw + rollout, 512 tokens,
~400 words a review from a Zipf vocabulary; token scores drawn from a gamma and normalised per
review and layer, as attention shares are, and words summed from them as the scorer sums them) are written by ``RunWriter`` in layout 1 (a table per method x
layer), layout 2 (a row per token and word, a float column per method x layer) and layout 3 (a
row per token, each word on its first token's row holding the word's raw score, a token's own
score kept apart only where it differs, the share derived from a divisor), each in a store of its own, on one core (no Ray: the work one writer does):
  - encode: building the tables and encoding them as Parquet in memory (the write path's floor);
  - write: the same, with files, fsync and the part records (``RunWriter``);
  - size: tokens + words + docs on disk, plus the aggregate stage's kept word totals, per review
    (and the parts alone: what the writer writes);
  - queries: the views over each run (median of --repeats, alternating): a token and a word
    aggregate over one method and layer, a per-review lookup, a join of docs with words.
With ``--minilm`` the rows are the first --docs IMDB reviews scored by MiniLM (raw + rollout,
512 tokens at most) instead: the sizes are then those of real reviews and real scores.
The views are checked to return the same rows for every run. Ends with one line, layout 1 -> 3:
``store: write BEFORE -> AFTER reviews/s per core (RATIOx); encode floor ...; store BEFORE -> AFTER KB/review``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xai_ray.query.connection import open_store  # noqa: E402
from xai_ray.query.word_totals import keep_word_totals  # noqa: E402
from xai_ray.scoring.rows import row_schema  # noqa: E402
from xai_ray.store import layout  # noqa: E402
from xai_ray.store.files import write_parquet  # noqa: E402
from xai_ray.store.parts import ROW_GROUP_ROWS  # noqa: E402
from xai_ray.store.tables import parquet_options, part_tables  # noqa: E402
from xai_ray.store.writer import RunWriter  # noqa: E402

TOKENS, WORDS, BLOCK = 512, 400, 50
VERSIONS = (1, 2, 3)  # layout 1 is the baseline of every ratio
QUERIES = {
    "token aggregate": "select token, avg(score) as mean, count(*) as n from tokens where run_id = $run "
    "and method = $method and layer = $layer group by token order by mean desc, token limit 20",
    "word aggregate": "select lower(word) as w, avg(lift) as mean, count(distinct doc_id) as docs from words "
    "where run_id = $run and method = $method and layer = $layer group by w order by mean desc, w limit 20",
    "per-review lookup": "select * from words where run_id = $run and doc_id = $doc and method = $method "
    "and layer = $layer order by word_id",
    "docs join words": "select d.label, w.word, avg(w.score) as mean from docs d join words w "
    "on d.run_id = w.run_id and d.doc_id = w.doc_id where d.run_id = $run and w.method = $method "
    "and w.layer = $layer group by all order by mean desc, w.word limit 20",
}


def shares(rng, n_docs: int, layers: int, width: int) -> list[np.ndarray]:
    """Per review, (layers, width) positive scores summing to 1 per layer, flattened."""
    values = rng.gamma(0.5, size=(n_docs, layers, width)).astype(np.float32)
    values /= values.sum(axis=2, keepdims=True)
    return list(values.reshape(n_docs, -1))


def block(n_docs: int, first: int, methods: list[str], layers: int, rng) -> pa.Table:
    """``n_docs`` scorer rows (``scoring.rows.row_schema``) of ``TOKENS``-token reviews."""
    vocab = np.array([f"w{i}" for i in range(30_000)], dtype=object)
    columns: dict[str, list] = {name: [] for name in ("doc_id", "tokens", "word_index", "words", "text")}
    for d in range(n_docs):
        inner = np.sort(np.concatenate([np.arange(WORDS), rng.choice(WORDS, TOKENS - 2 - WORDS)]))
        words = vocab[np.minimum(rng.zipf(1.3, WORDS) - 1, len(vocab) - 1)].tolist()
        columns["doc_id"].append(f"train_{first + d}")
        columns["tokens"].append(["[CLS]", *(words[i] for i in inner), "[SEP]"])
        columns["word_index"].append(np.concatenate([[-1], inner, [-1]]).astype(np.int32))
        columns["words"].append(words)
        columns["text"].append(" ".join(words))
    table = {
        **columns,
        "label": [d % 2 for d in range(n_docs)],
        "pred": rng.integers(0, 2, n_docs).tolist(),
        "probs": [[0.4, 0.6]] * n_docs,
        "n_tokens": [TOKENS] * n_docs,
        "n_layers": [layers] * n_docs,
        "truncated": [True] * n_docs,
        "word_span": [np.arange(WORDS, dtype=np.int32)] * n_docs,
        "word_joined": columns["words"],
        "model_fingerprint": ["f" * 64] * n_docs,
    }
    for method in methods:
        tokens = shares(rng, n_docs, layers, TOKENS)
        table[f"scores_{method}"] = tokens
        # words as the scorer makes them: a word's raw score the float32 sum of its tokens' scores,
        # its share that over the review's words (words.merge_batch)
        raw, spread = [], []
        for d in range(n_docs):
            scores, index = tokens[d].reshape(layers, TOKENS), columns["word_index"][d]
            sums = np.zeros((layers, WORDS), dtype=np.float32)
            np.add.at(sums.T, index[index >= 0], scores[:, index >= 0].T)
            raw.append(sums.ravel())
            spread.append((sums / sums.sum(axis=1, keepdims=True, dtype=np.float32)).ravel())
        table[f"word_raw_{method}"], table[f"word_scores_{method}"] = raw, spread
    schema = row_schema(methods)
    arrays = [pa.array(table[f.name], f.type) if f.name in table else pa.nulls(n_docs, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def scored(n_docs: int) -> list[pa.Table]:
    """The first ``n_docs`` IMDB reviews scored by MiniLM (raw + rollout), 16 a batch."""
    from xai_ray.scoring.actor import Scorer

    imdb = next(
        p / "shared/data/imdb/train.parquet" for p in Path(__file__).resolve().parents if (p / "shared").is_dir()
    )
    corpus = pq.read_table(imdb).slice(0, n_docs).to_pydict()
    scorer = Scorer({"model": "minilm", "max_length": 512, "methods": ["raw", "rollout"]})
    return [
        scorer(
            {
                key: corpus[column][k : k + 16]
                for key, column in (("doc_id", "id"), ("text", "text"), ("label", "label"))
            }
        )
        for k in range(0, n_docs, 16)
    ]


def encode_seconds(blocks: list[pa.Table], methods: list[str], version: int, docs_per_part: int) -> float:
    """Build the tables of ``blocks`` and encode them as Parquet in memory, parts as the writers'."""
    rows = pa.concat_tables(blocks)
    started = time.perf_counter()
    for first in range(0, rows.num_rows, docs_per_part):
        for table in part_tables(rows.slice(first, docs_per_part), methods, layout=version).merged().values():
            write_parquet(table, io.BytesIO(), **{"row_group_size": ROW_GROUP_ROWS, **parquet_options(table)})
    return time.perf_counter() - started


def write_seconds(store: Path, run_id: str, blocks, methods: list[str], version: int, n_layers: int) -> float:
    started = time.perf_counter()
    writer = RunWriter(store, run_id, methods, layout=version)
    for item in blocks:
        writer.write(item)
    # the model's layers, as a run records them: layout 1's word totals are kept for each of them
    writer.publish({"created_at": run_id, "config": {"methods": methods}, "model": {"n_layers": n_layers}})
    return time.perf_counter() - started


PARTS = ("docs", "tokens", "words", "token_scores", "word_scores")  # what the writer writes, every layout


def kb_per_review(store: Path, run_id: str, n_docs: int, kept=(*PARTS, "aggregates")) -> float:
    run = layout.run_dir(store, run_id)
    size = sum(f.stat().st_size for name in kept for f in (run / name).rglob("*.parquet"))
    return size / n_docs / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--methods", default="raw,rollout")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--minilm", action="store_true", help="score IMDB reviews with MiniLM instead")
    args = parser.parse_args()
    methods = args.methods.split(",")
    if args.minilm:
        methods, args.layers = ["raw", "rollout"], 6
        blocks = scored(args.docs)
    else:
        rng = np.random.default_rng(0)
        blocks = [block(min(BLOCK, args.docs - f), f, methods, args.layers, rng) for f in range(0, args.docs, BLOCK)]
    n = args.docs
    per_part = max(1, ROW_GROUP_ROWS // TOKENS)  # pipeline.writing.docs_per_part at the default part_rows
    with tempfile.TemporaryDirectory(prefix="xai-layout-") as tmp:
        # a store per layout: a view then holds only its layout's selects, as a user's store would
        stores = {v: Path(tmp) / f"layout{v}" for v in VERSIONS}
        encode = {v: encode_seconds(blocks, methods, v, per_part) for v in VERSIONS}
        write = {v: write_seconds(stores[v], f"layout{v}", blocks, methods, v, args.layers) for v in VERSIONS}
        for v in VERSIONS:
            keep_word_totals(stores[v], f"layout{v}")
        size = {v: kb_per_review(stores[v], f"layout{v}", n) for v in VERSIONS}
        parts = {v: kb_per_review(stores[v], f"layout{v}", n, PARTS) for v in VERSIONS}
        cons = {v: open_store(stores[v]) for v in VERSIONS}
        for view in ("docs", "tokens", "words"):
            counts = [
                cons[v]
                .execute(
                    f"select count(*), sum(hash(columns(* exclude (run_id)))) from {view} where run_id = ?",
                    [f"layout{v}"],
                )
                .fetchone()
                for v in VERSIONS
            ]
            assert counts.count(counts[0]) == len(counts), (view, counts)
        params = {"method": methods[-1], "layer": args.layers, "doc": f"train_{n // 2}"}
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeats):
            for name, sql in QUERIES.items():
                for v in VERSIONS:
                    started = time.perf_counter()
                    bound = {k: x for k, x in {**params, "run": f"layout{v}"}.items() if f"${k}" in sql}
                    cons[v].execute(sql, bound).fetchall()
                    times.setdefault((name, v), []).append(time.perf_counter() - started)
    shape = "IMDB reviews scored by MiniLM" if args.minilm else f"synthetic reviews of {TOKENS} tokens, {WORDS} words"
    print(f"{n} {shape}, {len(methods)} methods x {args.layers} layers; one core")
    print(f"{'':28}" + "".join(f"{f'layout {v}':>12}" for v in VERSIONS) + f"{'2 / 1':>9}{'3 / 1':>9}")
    rows = {
        "encode (reviews/s)": ({v: n / encode[v] for v in VERSIONS}, "{:12.0f}"),
        "write (reviews/s)": ({v: n / write[v] for v in VERSIONS}, "{:12.0f}"),
        "store (KB/review)": (size, "{:12.1f}"),
        "  of which parts (KB/review)": (parts, "{:12.1f}"),
        **{
            f"{name} (ms)": ({v: statistics.median(times[(name, v)]) * 1000 for v in VERSIONS}, "{:12.1f}")
            for name in QUERIES
        },
    }
    for label, (values, cell) in rows.items():
        ratios = "".join(f"{values[v] / values[1]:8.2f}x" for v in VERSIONS[1:])
        print(f"{label:28}" + "".join(cell.format(values[v]) for v in VERSIONS) + ratios)
    last = VERSIONS[-1]
    print(
        f"store: write {n / write[1]:.0f} -> {n / write[last]:.0f} reviews/s per core ({write[1] / write[last]:.1f}x); "
        f"encode floor {n / encode[1]:.0f} -> {n / encode[last]:.0f} reviews/s ({encode[1] / encode[last]:.1f}x); "
        f"store {size[1]:.1f} -> {size[last]:.1f} KB/review"
    )


if __name__ == "__main__":
    main()
