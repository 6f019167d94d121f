"""Scorer rows -> store tables, column-wise (``store.tables``) and as a worker's part (``store.parts``),
in store layout 3 (a row per token, a word on its first token), layout 2 (a row per token and
word, a column per method x layer) and layout 1 (a table per method x layer).

The expected tables are rebuilt here document by document in plain Python from the scorer rows
(the rules the README states: one tokens row per position, word_id null for special tokens, a
layer left out when the method does not define it, lift = share x the review's words / the words
of the word's unit), so the Arrow code is checked against an independent reading of the same rows."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from xai_ray.methods.head_summary import HeadTotals
from xai_ray.store.layout import staging_dir
from xai_ray.store.parts import PartWriter, part_key
from xai_ray.store.tables import part_tables
from xai_ray.store.writer import RunWriter

METHODS = ["raw", "rollout"]
TEXTS = ["the film was good", "bad movie", "i loved the story, wasn't it", "not very boring", None, "great acting!"]


@pytest.fixture(scope="module")
def rows(scorer_factory):
    """Real scorer rows of the tiny BERT: five documents and one error row, rollout from layer 2."""
    scorer = scorer_factory("bert", start_layer=2)
    ids = [f"d{i}" for i in range(len(TEXTS))]
    scored = scorer({"doc_id": ids, "text": TEXTS, "label": [0, 1, None, 1, 0, 1]})
    return scored.take(pc.sort_indices(scored, [("doc_id", "ascending")]))  # d0..d5, whatever the batch order


def expected(rows: pa.Table) -> dict[str, list[tuple]]:
    """Every table's rows, document by document, in plain Python."""
    out: dict[str, list[tuple]] = {}
    for row in rows.to_pylist():
        if row["error"]:
            out.setdefault("errors", []).append((row["doc_id"], "score", row["error"]))
            continue
        n, words, layers = row["n_tokens"], row["words"], row["n_layers"]
        probs = row["probs"]
        out.setdefault("docs", []).append(
            (row["doc_id"], row["label"], row["pred"], probs[1], n, len(words), row["truncated"], row["text"])
        )
        span = row["word_span"] or list(range(len(words)))
        unit_words = [span.count(s) for s in span]  # a contraction's words share its unit
        joined = row["word_joined"] or words
        for method in METHODS:
            scores = row[f"scores_{method}"]
            shares, raw = row[f"word_scores_{method}"], row[f"word_raw_{method}"]
            for layer in range(layers):
                token_scores = scores[layer * n : (layer + 1) * n]
                if all(s != s for s in token_scores):  # NaN everywhere: a layer the method leaves out
                    continue
                where = f"method={method}/layer={layer + 1}"
                for p in range(n):
                    word = row["word_index"][p]
                    out.setdefault(f"tokens/{where}", []).append(
                        (row["doc_id"], p, row["tokens"][p], None if word < 0 else word, token_scores[p])
                    )
                for w in range(len(words)):
                    share = shares[layer * len(words) + w]
                    out.setdefault(f"words/{where}", []).append(
                        (
                            row["doc_id"],
                            w,
                            words[w],
                            share,
                            raw[layer * len(words) + w],
                            share * len(words) / unit_words[w],
                            span[w],
                            joined[w],
                        )
                    )
    return out


def as_rows(table: pa.Table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


def close(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            if isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-6, abs=1e-7), (g, w)
            else:
                assert a == b, (g, w)


def sliced(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Layout 2's token and word tables cut back into layout 1's per method x layer tables."""
    out = {name: table for name, table in tables.items() if name not in ("token_scores", "word_scores")}
    tokens, words = tables["token_scores"], tables["word_scores"]
    for name in tokens.column_names:
        if not name.startswith("score:"):
            continue
        _, method, layer = name.split(":")
        where = f"method={method}/layer={layer}"
        out[f"tokens/{where}"] = pa.table(
            {c: tokens.column(c) for c in ("doc_id", "position", "token", "word_id")} | {"score": tokens.column(name)}
        )
        share = words.column(name).to_numpy()
        out[f"words/{where}"] = pa.table(
            {c: words.column(c) for c in ("doc_id", "word_id", "word")}
            | {
                "score": words.column(name),
                "raw_score": words.column(f"raw_score:{method}:{layer}"),
                "lift": pa.array((share.astype("float64") * words.column("unit_weight").to_numpy()).astype("float32")),
                "span_id": words.column("span_id"),
                "joined": words.column("joined"),
            }
        )
    return out


def sliced3(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Layout 3's table cut back into layout 1's per method x layer tables: a word is the row of
    its first token (span_id set), its raw score the row's score, its share the one stored or else
    raw / the divisor in float32; a token's score its token_score where set, else the row's score."""
    out = {name: table for name, table in tables.items() if name != "token_scores"}
    table = tables["token_scores"]
    words = table.filter(pc.is_valid(table.column("span_id")))
    for name in table.column_names:
        if not name.startswith("score:"):
            continue
        _, method, layer = name.split(":")
        where, kept = f"method={method}/layer={layer}", f"{method}:{layer}"
        tokens = table.filter(pc.is_valid(table.column("position")))  # words' rows first: back in token order
        tokens = tokens.set_column(0, "doc_id", tokens.column("doc_id").cast(pa.string()))
        tokens = tokens.sort_by([("doc_id", "ascending"), ("position", "ascending")])
        own = tokens.column(f"token_score:{kept}")
        score = np.where(
            pc.is_valid(own).to_numpy(zero_copy_only=False),
            own.to_numpy(zero_copy_only=False),
            tokens.column(name).to_numpy(zero_copy_only=False),
        )
        out[f"tokens/{where}"] = pa.table(
            {c: tokens.column(c) for c in ("doc_id", "position", "token", "word_id")}
            | {"score": pa.array(score.astype("float32"))}
        )
        raw = words.column(name).to_numpy(zero_copy_only=False).astype("float32")
        share = raw.astype("float32") / words.column(f"divisor:{kept}").to_numpy().astype("float32")
        if f"share:{kept}" in words.column_names:
            kept_share = words.column(f"share:{kept}")
            share = np.where(
                pc.is_valid(kept_share).to_numpy(zero_copy_only=False), kept_share.to_numpy(zero_copy_only=False), share
            )
        out[f"words/{where}"] = pa.table(
            {c: words.column(c) for c in ("doc_id", "word_id", "word")}
            | {
                "score": pa.array(share.astype("float32")),
                "raw_score": pa.array(raw.astype("float32")),
                "lift": pa.array((share.astype("float64") * words.column("unit_weight").to_numpy()).astype("float32")),
                "span_id": words.column("span_id"),
                "joined": words.column("joined"),
            }
        )
    return out


@pytest.mark.parametrize("layout", [3, 2, 1])
def test_tables_equal_a_plain_python_reading_of_the_rows(rows, layout):
    got = part_tables(rows, METHODS, layout=layout)
    want = expected(rows)
    tables = got.merged()
    if layout == 3:
        assert sorted(tables) == ["docs", "errors", "token_scores"]
        assert "score:rollout:1" not in tables["token_scores"].column_names  # rollout starts at layer 2
        assert not any(name.startswith("share:") for name in tables["token_scores"].column_names)
        tables = sliced3(tables)
    if layout == 2:
        assert sorted(tables) == ["docs", "errors", "token_scores", "word_scores"]
        assert "score:rollout:1" not in tables["token_scores"].column_names  # rollout starts at layer 2
        tables = sliced(tables)
    assert sorted(tables) == sorted(want)
    assert "tokens/method=rollout/layer=1" not in tables
    docs = tables["docs"].select(["doc_id", "label", "pred", "prob_pos", "n_tokens", "n_words", "truncated", "text"])
    close(as_rows(docs), want["docs"])
    for folder, table in tables.items():
        if folder != "docs":
            close(as_rows(table), want[folder])
    assert got.counts == {
        "docs": 5,
        "errors": 1,
        "tokens": sum(len(v) for k, v in want.items() if k.startswith("tokens")),
        "words": sum(len(v) for k, v in want.items() if k.startswith("words")),
    }


def test_a_part_written_by_a_worker_reads_back_as_strings_with_its_record(rows, tmp_path):
    record = PartWriter(tmp_path, "r", METHODS, totals=HeadTotals).write(rows, node="node-a")
    ids = rows.column("doc_id").to_pylist()
    assert record["part"] == part_key(ids) and record["doc_ids"] == ids and record["node"] == "node-a"
    folder = staging_dir(tmp_path, "r")
    assert json.loads((folder / "_parts" / f"part-{record['part']}.json").read_text()) == record
    tokens = pq.read_table(folder / "token_scores")
    assert tokens.schema.field("doc_id").type == pa.string() and tokens.schema.field("token").type == pa.string()
    assert tokens.schema.field("word").type == pa.string() and not (folder / "word_scores").exists()
    for table in ("tokens", "words"):
        folder_name = f"{table}/method=raw/layer=1"
        close(as_rows(sliced3({"token_scores": tokens})[folder_name]), expected(rows)[folder_name])
    assert record["layout"] == 3 and record["slices"] == ["raw:1", "raw:2", "rollout:2"] and record["shares"] == []
    assert record["totals"]["n_docs"] == 5 and record["seconds"]["forward"] > 0
    # the same block written again lands on the same files: nothing is added
    files = sorted(p.relative_to(folder) for p in folder.rglob("*.parquet"))
    assert PartWriter(tmp_path, "r", METHODS, totals=HeadTotals).write(rows, node="node-b")["part"] == record["part"]
    assert sorted(p.relative_to(folder) for p in folder.rglob("*.parquet")) == files


def test_the_driver_counts_a_part_once_drops_one_that_overlaps_and_records_what_it_lost(rows, tmp_path):
    from xai_ray.pipeline.writing import _record_lost

    writer = RunWriter(tmp_path, "r", METHODS)
    first = PartWriter(tmp_path, "r", METHODS).write(rows.slice(0, 3))  # d0 d1 d2
    again = PartWriter(tmp_path, "r", METHODS).write(rows.slice(0, 3))  # a retried task: the same part
    overlapping = PartWriter(tmp_path, "r", METHODS).write(rows.slice(2, 2))  # d2 d3, another grouping
    rest = PartWriter(tmp_path, "r", METHODS).write(rows.slice(4, 2))  # d4 (an error row) d5
    assert [writer.collect(r) for r in (first, again, overlapping, rest)] == [True, False, False, True]
    assert not (staging_dir(tmp_path, "r") / "_parts" / f"part-{overlapping['part']}.json").exists()
    assert writer.counts["duplicates"] == 1  # d2
    ids = rows.column("doc_id").to_pylist()
    _record_lost(writer, None, ids)  # d3 was only in the dropped part
    run = writer.publish({"created_at": "x"})
    docs = pq.read_table(run / "docs").column("doc_id").to_pylist()
    errors = dict(zip(*(pq.read_table(run / "errors").column(c).to_pylist() for c in ("doc_id", "reason"))))
    assert sorted(docs) == ["d0", "d1", "d2", "d5"] and sorted(errors) == ["d3", "d4"]
    assert errors["d3"] == "no result came back from the scoring actors"


def test_a_row_group_keeps_only_the_dictionary_entries_its_rows_use(tmp_path):
    """Layout 3 writes its runs of rows as row groups of a part whose dictionary columns share one
    dictionary; each group stores only the entries it uses (by hand: rows 1-3 use c, e and a null),
    reads back the same strings, and a file of one large and one small group shrinks by what the
    small group would have repeated."""
    from xai_ray.store.files import used_entries, write_parquet

    letters = pa.array(["a", "b", "c", "d", "e"])
    small = pa.table({"token": pa.DictionaryArray.from_arrays(pa.array([4, None, 2, 4, 0], pa.int32()), letters)})
    cut = used_entries(small.slice(1, 3)).column("token").chunk(0)
    assert cut.dictionary.to_pylist() == ["c", "e"] and cut.indices.to_pylist() == [None, 0, 1]
    words = pa.array([f"{x:016x}" for x in np.random.default_rng(0).integers(0, 2**62, 5000)])  # hardly compressible
    indices = np.concatenate([np.arange(5000), np.arange(10)]).astype(np.int32)  # the second group: 10 words
    table = pa.table({"token": pa.DictionaryArray.from_arrays(pa.array(indices), words)})
    sizes = {}
    for name, writer in (("used", write_parquet), ("whole", None)):
        path = tmp_path / f"{name}.parquet"
        if writer:
            writer(table, path, row_groups=[5000, 10], compression="zstd", store_schema=False)
        else:  # the plain writer: the second group repeats the whole dictionary
            with pq.ParquetWriter(path, table.schema, compression="zstd", store_schema=False) as plain:
                plain.write_table(table.slice(0, 5000), row_group_size=5000)
                plain.write_table(table.slice(5000, 10), row_group_size=10)
        assert pq.read_table(path).column("token").to_pylist() == [words[int(i)].as_py() for i in indices]
        sizes[name] = path.stat().st_size
    assert sizes["used"] < 0.6 * sizes["whole"]  # the dictionary is most of each file: about half
