"""The list layouts #25 suggested, measured beside store layouts 1 and 3: write cost, size and ad-hoc SQL.

    python bench/list_layout.py [--docs 2000] [--repeats 5]

The same synthetic scorer rows as ``store_layout.py`` (MiniLM's shape: 6 layers, raw + rollout,
512 tokens, ~400 words a review) in four layouts, each built from the scorer's rows and encoded as
Parquet in memory with the store's options, in parts as large as a run's (the write path's floor,
one core):
  - layout 1: a table per method x layer, a row per token or word (the store before #25);
  - layout 3: a row per token, a float column per method x layer (the store today, ``scores_v3``);
  - lists per review: one row per review, its token and word strings once as lists, and a
    ``list<float32>`` column of token scores and of word scores per method x layer, with a divisor
    per review (the share is raw / divisor, as in layout 3);
  - lists per slice: one row per (review, method, layer) holding its token and word scores as
    lists, the strings once per review in a table of their own, joined by review in the view.
The list layouts' views unnest the lists (DuckDB zips unnests of one select by position) into the
``tokens`` and ``words`` views' columns; both are checked to return the rows layout 3's views return.
Then the four queries of ``store_layout.py`` over each (median of --repeats, alternating).
Ends with one line: ``lists: write ... reviews/s per core against layout 1 (RATIOx) ...``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_layout import BLOCK, QUERIES, block, encode_seconds, write_seconds  # noqa: E402

from xai_ray.query.connection import open_store  # noqa: E402
from xai_ray.store.divisors import divisors  # noqa: E402
from xai_ray.store.pieces import Pieces, every_layer, lengths_of  # noqa: E402

METHODS, LAYERS, PART = ["raw", "rollout"], 6, 500  # PART: reviews a run's part holds at 512 tokens
OPTIONS = {
    "compression": "zstd",
    "use_dictionary": ["doc_id", "token", "word", "joined", "method"],
    "write_statistics": ["doc_id", "method", "layer"],
    "store_schema": False,
}
SLICES = [(m, layer) for m in METHODS for layer in range(1, LAYERS + 1)]


def offsets(lengths: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))


def text_lists(rows: pa.Table) -> tuple[dict, np.ndarray, np.ndarray, Pieces]:
    """A batch's strings and word units as one list per review (the store's ``Pieces``, re-cut by review)."""
    n_tokens, n_words = (lengths_of(rows.column(c).combine_chunks()) for c in ("tokens", "words"))
    pieces = Pieces.of(rows, rows.column("doc_id").combine_chunks(), n_tokens, n_words, LAYERS)
    tok, word = offsets(n_tokens), offsets(n_words)
    lists = {
        "doc_id": rows.column("doc_id").combine_chunks(),
        "token": pa.ListArray.from_arrays(tok, pieces.token_columns[2].cast(pa.string())),
        "word_id": pa.ListArray.from_arrays(tok, pieces.token_columns[3]),
        "word": pa.ListArray.from_arrays(word, pieces.word_columns[2].cast(pa.string())),
        "span_id": pa.ListArray.from_arrays(word, pieces.unit_columns[0]),
        "joined": pa.ListArray.from_arrays(word, pieces.unit_columns[1].cast(pa.string())),
        "unit_weight": pa.ListArray.from_arrays(word, pa.array(pieces.unit_weight)),
    }
    return lists, n_tokens, n_words, pieces


def slice_lists(rows: pa.Table, n_tokens, n_words):
    """Per (method, layer): token scores (tokens,), word raw scores (words,), divisors (D,)."""
    word_doc = np.repeat(np.arange(len(n_words)), n_words)
    for method in METHODS:
        tokens = every_layer(rows.column(f"scores_{method}"), n_tokens, LAYERS)  # (L, tokens)
        raw = every_layer(rows.column(f"word_raw_{method}"), n_words, LAYERS)  # (L, words)
        shares = every_layer(rows.column(f"word_scores_{method}"), n_words, LAYERS)
        for layer in range(LAYERS):
            divisor, exact = divisors(raw[layer], shares[layer], word_doc, len(n_words), ordered=True)
            assert exact.all(), "a synthetic review whose shares no divisor gives"
            yield method, layer + 1, tokens[layer], raw[layer], divisor


def per_review(rows: pa.Table) -> dict[str, pa.Table]:
    lists, n_tokens, n_words, _ = text_lists(rows)
    columns = dict(lists)
    for method, layer, tokens, raw, divisor in slice_lists(rows, n_tokens, n_words):
        columns[f"score:{method}:{layer}"] = pa.ListArray.from_arrays(offsets(n_tokens), pa.array(tokens))
        columns[f"raw:{method}:{layer}"] = pa.ListArray.from_arrays(offsets(n_words), pa.array(raw))
        columns[f"divisor:{method}:{layer}"] = pa.array(divisor)
    return {"reviews": pa.table(columns)}


def per_slice(rows: pa.Table) -> dict[str, pa.Table]:
    lists, n_tokens, n_words, _ = text_lists(rows)
    n_docs, ids = len(n_tokens), lists["doc_id"]
    parts = list(slice_lists(rows, n_tokens, n_words))
    # a slice's rows, then the next slice's: each (review, method, layer) a row
    token_values = np.concatenate([p[2] for p in parts])  # (slices x tokens,)
    word_values = np.concatenate([p[3] for p in parts])
    scores = pa.table(
        {
            "doc_id": pa.concat_arrays([ids] * len(parts)),
            "method": pa.array(np.repeat([p[0] for p in parts], n_docs)),
            "layer": pa.array(np.repeat([p[1] for p in parts], n_docs).astype(np.int32)),
            "token_scores": pa.ListArray.from_arrays(offsets(np.tile(n_tokens, len(parts))), pa.array(token_values)),
            "word_raw": pa.ListArray.from_arrays(offsets(np.tile(n_words, len(parts))), pa.array(word_values)),
            "divisor": pa.array(np.concatenate([p[4] for p in parts])),
        }
    )
    return {"reviews": pa.table(lists), "scores": scores}


BUILDS = {"lists per review": per_review, "lists per slice": per_slice}


def encode(rows: pa.Table, build) -> tuple[float, dict[str, list[bytes]]]:
    """CPU seconds to build and encode ``rows`` in parts of ``PART`` reviews; the parts' bytes by table."""
    files: dict[str, list[bytes]] = {}
    started = time.process_time()
    for first in range(0, rows.num_rows, PART):
        for name, table in build(rows.slice(first, PART)).items():
            sink = io.BytesIO()
            pq.write_table(table, sink, row_group_size=100, **OPTIONS)
            files.setdefault(name, []).append(sink.getvalue())
    return time.process_time() - started, files


def list_views(con, folder: Path, kind: str, run_id: str) -> None:
    """``docs``, ``tokens`` and ``words`` over a list layout's files, as the store's views name them."""
    for name in ("reviews", "scores"):
        found = sorted(str(p) for p in folder.glob(f"{name}-*.parquet"))
        if found:
            con.execute(f"set variable files_{name} = ?", [found])
    reviews, scores = "read_parquet(getvariable('files_reviews'))", "read_parquet(getvariable('files_scores'))"
    con.execute(f"create view docs as select '{run_id}' as run_id, doc_id, 0 as label from {reviews}")
    token_columns = "unnest(range(len(token)))::integer as position, unnest(token) as token, unnest(word_id) as word_id"
    word_columns = (
        "unnest(range(len(word)))::integer as word_id, unnest(word) as word, {share} as score, "
        "unnest({raw}) as raw_score, cast(cast({share} as double) * unnest(unit_weight) as float) as lift, "
        "unnest(span_id) as span_id, unnest(joined) as joined"
    )
    tokens, words = [], []
    for method, layer in SLICES:
        tail = f"cast({layer} as integer) as layer, cast('{method}' as varchar) as method, '{run_id}' as run_id"
        if kind == "lists per review":
            raw = f'"raw:{method}:{layer}"'
            share = f'unnest({raw}) / "divisor:{method}:{layer}"'
            source = reviews
            score = f'unnest("score:{method}:{layer}")'
        else:
            raw, share = "s.word_raw", "unnest(s.word_raw) / s.divisor"
            source = f"{reviews} r join {scores} s using (doc_id) where s.method = '{method}' and s.layer = {layer}"
            score = "unnest(s.token_scores)"
        tokens.append(f"select * from (select doc_id, {token_columns}, {score} as score, {tail} from {source})")
        words.append(f"select doc_id, {word_columns.format(share=share, raw=raw)}, {tail} from {source}")
    con.execute("create view tokens as select * from (" + " union all ".join(tokens) + ") where token is not null")
    con.execute("create view words as " + " union all ".join(words))


def fingerprint(con, view: str, run_id: str):
    return con.execute(
        f"select count(*), sum(hash(columns(* exclude (run_id)))) from {view} where run_id = ?", [run_id]
    ).fetchone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, rng = args.docs, np.random.default_rng(0)
    blocks = [block(min(BLOCK, n - f), f, METHODS, LAYERS, rng) for f in range(0, n, BLOCK)]
    rows = pa.concat_tables(blocks).combine_chunks()
    kinds = ["layout 1", "layout 3", *BUILDS]
    seconds, size, cons = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="xai-lists-") as tmp:
        for version in (1, 3):  # the floor as store_layout.py measures it (process time: one core's work)
            started = time.process_time()
            encode_seconds(blocks, METHODS, version, PART)
            seconds[f"layout {version}"] = time.process_time() - started
        store = Path(tmp) / "layout3"
        write_seconds(store, "layout3", blocks, METHODS, 3, LAYERS)
        cons["layout 3"] = open_store(store)
        size["layout 3"] = sum(f.stat().st_size for f in store.rglob("token_scores/*.parquet"))
        for kind, build in BUILDS.items():
            seconds[kind], files = encode(rows, build)
            folder = Path(tmp) / kind.replace(" ", "-")
            folder.mkdir()
            for name, parts in files.items():
                for k, data in enumerate(parts):
                    (folder / f"{name}-{k}.parquet").write_bytes(data)
            size[kind] = sum(len(d) for parts in files.values() for d in parts)
            cons[kind] = duckdb.connect()
            list_views(cons[kind], folder, kind, "layout3")
        for view in ("tokens", "words"):
            found = {kind: fingerprint(con, view, "layout3") for kind, con in cons.items()}
            assert len(set(found.values())) == 1, (view, found)
        params = {"method": METHODS[-1], "layer": LAYERS, "doc": f"train_{n // 2}", "run": "layout3"}
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeats):
            for name, sql in QUERIES.items():
                for kind, con in cons.items():
                    bound = {k: x for k, x in params.items() if f"${k}" in sql}
                    started = time.perf_counter()
                    con.execute(sql, bound).fetchall()
                    times.setdefault((name, kind), []).append(time.perf_counter() - started)
    print(f"{n} synthetic reviews of 512 tokens, {len(METHODS)} methods x {LAYERS} layers; one core")
    print(f"{'':24}" + "".join(f"{k:>18}" for k in kinds))
    print(f"{'encode (reviews/s)':24}" + "".join(f"{n / seconds[k]:18.0f}" for k in kinds))
    print(f"{'  / layout 1':24}" + "".join(f"{seconds['layout 1'] / seconds[k]:17.2f}x" for k in kinds))
    print(f"{'store (KB/review)':24}{'':>18}" + "".join(f"{size[k] / n / 1024:18.1f}" for k in kinds[1:]))
    for name in QUERIES:
        median = {k: statistics.median(times[(name, k)]) * 1000 for k in cons}
        cells = "".join(f"{median[k]:11.1f} ({median[k] / median['layout 3']:.2f}x)" for k in cons)
        print(f"{name + ' (ms)':24}{'':>18}" + cells)
    worst = {
        k: max(statistics.median(times[(q, k)]) / statistics.median(times[(q, "layout 3")]) for q in QUERIES)
        for k in BUILDS
    }
    print(
        "lists: write "
        + "; ".join(
            f"{k} {seconds['layout 1'] / seconds[k]:.1f}x layout 1 (layout 3 {seconds['layout 1'] / seconds['layout 3']:.1f}x), slowest query {worst[k]:.2f}x layout 3's"
            for k in BUILDS
        )
    )


if __name__ == "__main__":
    main()
