"""``query.open_union``: several runs seen as one (what the nightly report reads), on a hand-written
store: given rows per run, the expected rows worked out by hand."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from test_charts import write_run

from xai_ray.query import wordstats
from xai_ray.query.connection import open_union, run_named
from xai_ray.store import layout, schemas


def errors(root, run_id: str, doc_ids: list[str]) -> None:
    folder = layout.run_dir(root, run_id) / "errors"
    folder.mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [{"doc_id": d, "stage": "score", "reason": "boom"} for d in doc_ids], schema=schemas.ERRORS
        ),
        folder / "part-0.parquet",
    )


def words(doc_scores: dict) -> dict:
    return {("rollout", 2): [(doc, i, w, s) for doc, pairs in doc_scores.items() for i, (w, s) in enumerate(pairs)]}


def test_latest_version_of_each_document_and_errors_superseded(tmp_path):
    # n1 scores a, b, c (e fails); n2 scores a again (its text changed) and e (f fails);
    # n3 scores g, and b fails with a new text.
    write_run(
        tmp_path,
        "n1",
        [{"doc_id": d, "pred": 1, "label": 1, "text": f"{d} old"} for d in "abc"],
        words({"a": [("good", 0.6), ("film", 0.4)], "b": [("bad", 1.0)], "c": [("good", 0.2), ("plot", 0.8)]}),
        created_at="2026-01-01T00:00:00",
    )
    errors(tmp_path, "n1", ["e"])
    write_run(
        tmp_path,
        "n2",
        [{"doc_id": "a", "pred": 0, "label": 1, "text": "a new"}, {"doc_id": "e", "pred": 0, "label": 0, "text": "e"}],
        words({"a": [("dull", 0.9), ("film", 0.1)], "e": [("good", 0.5), ("film", 0.5)]}),
        created_at="2026-01-02T00:00:00",
    )
    errors(tmp_path, "n2", ["f"])
    write_run(
        tmp_path,
        "n3",
        [{"doc_id": "g", "pred": 1, "label": 0, "text": "g"}],
        words({"g": [("plot", 1.0)]}),
        created_at="2026-01-03T00:00:00",
    )
    errors(tmp_path, "n3", ["b"])

    con = open_union(tmp_path, ["n1", "n2", "n3"], "all")
    docs = con.execute("select run_id, source_run_id, doc_id, text, pred from docs order by doc_id").fetchall()
    assert docs == [
        ("all", "n2", "a", "a new", 0),
        ("all", "n1", "b", "b old", 1),
        ("all", "n1", "c", "c old", 1),
        ("all", "n2", "e", "e", 0),
        ("all", "n3", "g", "g", 1),
    ]
    got = con.execute("select doc_id, word, score, source_run_id from words order by doc_id, word_id").fetchall()
    assert [(d, w, round(s, 6), r) for d, w, s, r in got] == [
        ("a", "dull", 0.9, "n2"),
        ("a", "film", 0.1, "n2"),
        ("b", "bad", 1.0, "n1"),
        ("c", "good", 0.2, "n1"),
        ("c", "plot", 0.8, "n1"),
        ("e", "good", 0.5, "n2"),
        ("e", "film", 0.5, "n2"),
        ("g", "plot", 1.0, "n3"),
    ]
    assert con.execute("select doc_id, source_run_id from errors order by doc_id").fetchall() == [
        ("b", "n3"),
        ("f", "n2"),
    ]

    summary = run_named(con, "summary", run_id="all").iloc[0]
    assert (
        summary.n_docs == 5 and summary.n_errors == 2 and summary.accuracy == 3 / 5
    )  # b, c, e right; a (new version), g wrong
    # top words over the union, in at least 2 documents: film (.1, .5) -> .3; good (.2, .5) -> .35;
    # plot (.8, 1.0) -> .9 as shares; as lifts (x 2, 2, 2, 1 words in a, c, e, g): film .6, good .7, plot 1.3
    top = run_named(
        con, "topk", run_id="all", method="rollout", layer=2, k=5, **wordstats.query_params("share", 2, 1, None)
    )
    assert top.word.tolist() == ["plot", "good", "film"]
    assert [round(x, 6) for x in top.mean_score] == [0.9, 0.35, 0.3]
    lifted = run_named(
        con, "topk", run_id="all", method="rollout", layer=2, k=5, **wordstats.query_params("lift", 2, 1, None)
    )
    assert [(w, round(x, 6)) for w, x in zip(lifted.word, lifted.mean_score)] == [
        ("plot", 1.3),
        ("good", 0.7),
        ("film", 0.6),
    ]
    run = con.execute("select run_id, manifest from runs").fetchall()
    assert len(run) == 1 and run[0][0] == "all" and json.loads(run[0][1])["runs"] == ["n1", "n2", "n3"]

    earlier = open_union(tmp_path, ["n1"], "then")  # the night before: a's first version, e failed
    assert earlier.execute("select doc_id, text from docs order by doc_id").fetchall() == [
        ("a", "a old"),
        ("b", "b old"),
        ("c", "c old"),
    ]
    assert earlier.execute("select doc_id from errors").fetchall() == [("e",)]


def faithfulness(root, run_id: str, rows: list[tuple]) -> None:
    folder = layout.run_dir(root, run_id) / "faithfulness"
    folder.mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [{"doc_id": d, "method": m, "layer": None, "metric": "spearman_loo", "value": v} for d, m, v in rows],
            schema=schemas.FAITHFULNESS,
        ),
        folder / "part-0.parquet",
    )


def test_faithfulness_of_each_documents_latest_version_and_no_heads(tmp_path):
    # n1 evaluates a and b; n2 scores a again (new text) and evaluates it; the union keeps a's
    # n2 rows and b's n1 rows. Head statistics are means over one run: the union shows none.
    write_run(
        tmp_path,
        "n1",
        [{"doc_id": d, "pred": 1, "label": 1, "text": f"{d} old"} for d in "ab"],
        words({"a": [("good", 1.0)], "b": [("bad", 1.0)]}),
        created_at="2026-01-01T00:00:00",
    )
    faithfulness(tmp_path, "n1", [("a", "random", 0.1), ("b", "random", 0.2)])
    write_run(
        tmp_path,
        "n2",
        [{"doc_id": "a", "pred": 0, "label": 1, "text": "a new"}],
        words({"a": [("dull", 1.0)]}),
        created_at="2026-01-02T00:00:00",
    )
    faithfulness(tmp_path, "n2", [("a", "random", 0.7)])

    con = open_union(tmp_path, ["n1", "n2"], "all")
    got = con.execute("select run_id, source_run_id, doc_id, value from faithfulness order by doc_id").fetchall()
    assert got == [("all", "n2", "a", 0.7), ("all", "n1", "b", 0.2)]
    assert con.execute("select count(*) from heads").fetchone() == (0,)
    assert con.execute("select count(*) from head_similarity").fetchone() == (0,)
