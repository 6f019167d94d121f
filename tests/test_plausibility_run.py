"""Plausibility in a run (``--set rationales=COLUMN``): the rows land in the faithfulness view for
every method, layer and the random floor, equal an independent scikit-learn computation from the
stored word scores, a bad rationale becomes an errors row while the run goes on, and a missing
column is refused in one sentence before anything is scored."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score

from xai_ray import cli
from xai_ray.scoring import plausibility as pl

TEXTS = [
    "a wonderful film with great acting",
    "the plot was dull and boring",
    "terrible script but lovely music",
    "I liked it",
]
RATIONALES = [
    json.dumps([0, 1, 0, 0, 1, 0]),  # a mask: "wonderful", "great"
    json.dumps([[4, 6]]),  # token spans: "and boring"
    json.dumps([[0, 1], [3, 5]]),  # token spans: "terrible", "lovely music"
    json.dumps([1, 1]),  # two values for three tokens: an errors row
]


@pytest.fixture(scope="module")
def plausible_store(tmp_path_factory, tiny_bert_dir, ray_cluster):
    root = tmp_path_factory.mktemp("plausible")
    pd.DataFrame({"id": [f"r{i}" for i in range(4)], "text": TEXTS, "label": [1, 0, 0, 1], "why": RATIONALES}).to_csv(
        root / "corpus.csv", index=False
    )
    common = ["run", "--data", str(root / "corpus.csv"), "--model", tiny_bert_dir, "--store", str(root / "store")]
    common += ["--methods", "raw,rollout", "--max-length", "32", "--actors", "1", "--set", "rationales=why"]
    assert cli.main([*common, "--run-id", "p"]) == 0
    assert cli.main([*common, "--run-id", "e", "--evaluate"]) == 0  # with faithfulness beside
    return root / "store"


@pytest.mark.ray
@pytest.mark.slow
def test_a_run_stores_plausibility_beside_faithfulness(plausible_store):
    from xai_ray.query.connection import open_store

    con = open_store(plausible_store)
    rows = con.execute("select * from faithfulness where run_id = 'p'").df()
    assert sorted(rows.doc_id.unique()) == ["r0", "r1", "r2"]
    assert set(rows.metric) == set(pl.metric_names())
    assert set(rows.method) == {"raw", "rollout", "random"}
    assert set(rows[rows.method == "rollout"].layer) == {1, 2} and rows[rows.method == "random"].layer.isna().all()
    assert rows.value.between(0, 1).all()
    errors = con.execute("select * from errors where run_id = 'p' and stage = 'plausibility'").df()
    assert errors.doc_id.tolist() == ["r3"]
    assert errors.reason.iloc[0] == "rationale mask has 2 values, the review 3 whitespace tokens"
    assert con.execute("select count(*) from docs where run_id = 'p'").fetchone() == (4,)  # the review was scored
    manifest = json.loads((plausible_store / "runs" / "run_id=p" / "manifest.json").read_text())
    assert manifest["counts"]["plausibility_reviews"] == 3 and manifest["counts"]["plausibility_errors"] == 1


@pytest.mark.ray
@pytest.mark.slow
def test_stored_auprc_equals_scikit_learn_on_the_stored_words(plausible_store):
    from xai_ray.query.connection import open_store

    con = open_store(plausible_store)
    words = con.execute(
        "select word_id, word, raw_score from words where run_id = 'p' and doc_id = 'r0'"
        " and method = 'rollout' and layer = 2 order by word_id"
    ).df()
    assert words.word.tolist() == TEXTS[0].split()  # one word per whitespace token here
    expected = average_precision_score([0, 1, 0, 0, 1, 0], words.raw_score.to_numpy(float))
    stored = con.execute(
        "select value from faithfulness where run_id = 'p' and doc_id = 'r0' and method = 'rollout'"
        " and layer = 2 and metric = 'auprc'"
    ).fetchone()[0]
    assert stored == pytest.approx(expected, abs=1e-6)
    k = 2  # the rationale's own size: the two best-scored tokens
    top = set(np.argsort(-words.raw_score.to_numpy(float), kind="stable")[:k])
    f1 = con.execute(
        "select value from faithfulness where run_id = 'p' and doc_id = 'r0' and method = 'rollout'"
        " and layer = 2 and metric = 'token_f1@rationale'"
    ).fetchone()[0]
    assert f1 == pytest.approx(len(top & {1, 4}) / k)


def test_a_missing_rationale_column_is_one_sentence(tmp_path, tiny_bert_dir, capsys):
    pd.DataFrame({"text": TEXTS, "label": [1, 0, 0, 1]}).to_csv(tmp_path / "corpus.csv", index=False)
    status = cli.main(
        ["run", "--data", str(tmp_path / "corpus.csv"), "--model", tiny_bert_dir, "--store", str(tmp_path / "s")]
        + ["--set", "rationales=why"]
    )
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert "rationales='why' is not a column of" in err and "(columns: text, label)" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s" / "runs").exists()


@pytest.mark.ray
@pytest.mark.slow
def test_the_leaderboard_shows_auprc_beside_comprehensiveness_and_sufficiency(plausible_store):
    page = (plausible_store / "runs" / "run_id=e" / "report.html").read_text()
    board = page[page.index("<table class='faithfulness leaderboard'>") :]
    head = board[: board.index("</tr>")]
    assert "<th>comprehensiveness AOPC [95% t interval]</th>" in head
    assert "<th>sufficiency AOPC (lower is better) [95% t interval]</th>" in head
    assert "<th>AUPRC against human rationales [95% t interval]</th>" in head
    assert re.search(r"<td>0\.\d{3} \[[-0-9.]+, [-0-9.]+\] \(\d\.\d\dx random\)</td>", board)


@pytest.mark.ray
@pytest.mark.slow
def test_the_report_ranks_a_rationale_only_run_by_auprc(plausible_store):
    page = (plausible_store / "runs" / "run_id=p" / "report.html").read_text()
    assert "Leaderboard: AUPRC against human rationales" in page
    assert "ranked by AUPRC against the human rationales" in page
    assert re.search(r"<td>rollout, layer \d \([a-z, ]+\)</td><td>0\.\d{3} \[", page)
    # its section speaks of agreement, with its three metrics in the table, not of perturbations
    assert "Agreement of each method with human rationales" in page and "of a review's tokens" not in page
    table = page[page.index("<table class='faithfulness'>") :]
    table = table[: table.index("</table>")]
    assert "<th>auprc (higher is better)</th><th>token_f1@rationale" in table
    assert "comprehensiveness" not in table and re.search(r"<td>rollout</td><td>2</td><td>0\.\d{3} \[", table)


def test_rationales_are_read_as_screening_reads_the_rows(tmp_path):
    # a CSV's empty cell is no rationale; a repeated id keeps the first row's, as screening keeps
    # that row's text; a JSON line that is no object keeps the rows after it in their numbers
    from xai_ray.config import RunConfig
    from xai_ray.pipeline.plausibility import read_rationales

    csv = tmp_path / "c.csv"
    csv.write_text('id,text,why\na,good film,"[1, 0]"\nb,bad film,\na,x y,"[0, 1]"\nc,ok, \n')
    found = read_rationales(RunConfig(data=str(csv), rationales="why"))
    assert list(found) == ["a"]  # b's and c's cells are empty: no rationale
    assert found["a"].of("good film") == "[1, 0]" and found["a"].of("x y") == "[0, 1]"  # the row scored
    lines = tmp_path / "c.jsonl"
    lines.write_text('{"text": "good film", "why": [1, 0]}\nnot json\n[1]\n{"text": "bad one", "why": [0, 1]}\n')
    found = read_rationales(RunConfig(data=str(lines), rationales="why"))  # no ids: named by row
    assert {k: list(v) for k, v in found.items()} == {"test-0": [1, 0], "test-3": [0, 1]}


def test_a_repeated_id_under_a_limit_takes_the_rationale_of_the_row_the_sample_kept(tmp_path):
    # each id twice: its first row says the first word, its second the last; the sample (pandas'
    # seeded draw, which --limit documents) keeps some ids' second row only, and screening then
    # scores that row: its rationale is the one read, not the first row's (a whole-file read's)
    from xai_ray.config import RunConfig
    from xai_ray.pipeline.plausibility import read_rationales

    first, second = ("good film here", [1, 0, 0]), ("bad plot here", [0, 0, 1])
    rows = [(str(i // 2), *(first if i % 2 == 0 else second)) for i in range(40)]
    frame = pd.DataFrame(rows, columns=["id", "text", "why"])
    path = tmp_path / "twice.parquet"
    frame.to_parquet(path)
    sample = frame.sample(n=12, random_state=3).sort_index()  # the rows --limit 12 --set seed=3 keeps
    expected = {}
    for _, row in sample.iterrows():
        expected.setdefault(row["id"], list(row["why"]))
    assert any(value == [0, 0, 1] for value in expected.values()), "no id kept by its second row: the check is empty"
    found = read_rationales(RunConfig(data=str(path), rationales="why", limit=12, seed=3))
    texts = {row["id"]: row["text"] for _, row in sample.iloc[::-1].iterrows()}  # each id's first sampled row
    assert {k: list(v.of(texts[k]) if hasattr(v, "of") else v) for k, v in found.items()} == expected


def test_a_repeated_id_whose_first_row_is_rejected_takes_the_scored_rows_rationale(tmp_path):
    """Screening rejects a's first row (no text) and scores its second: the rationale was the
    first row's, read as the run's without a word."""
    from xai_ray.pipeline.plausibility import read_rationales, score_run

    path = tmp_path / "r.parquet"
    rows = [("a", "", [[0, 1]]), ("a", "so bad really", [[1, 2]]), ("b", "so bad really", [[1, 2]])]
    pd.DataFrame(rows, columns=["id", "text", "ev"]).to_parquet(path)
    from xai_ray.config import RunConfig

    found = read_rationales(RunConfig(data=str(path), rationales="ev"))
    words = pd.DataFrame(
        [
            (d, "raw", 1, i, w, s, "so bad really")
            for d in ("a", "b")
            for i, (w, s) in enumerate([("so", 0.1), ("bad", 0.8), ("really", 0.1)])
        ],
        columns=["doc_id", "method", "layer", "word_id", "word", "raw_score", "text"],
    )
    metrics, errors = score_run(words, found, "tokens")
    got = metrics.to_pandas().query("method == 'raw' and metric == 'token_f1@rationale'").set_index("doc_id")["value"]
    assert errors.num_rows == 0 and got["a"] == got["b"] == 1.0  # "bad", the word marked in the row scored


def test_a_run_where_no_rationale_can_be_read_has_no_plausibility_rows_and_no_failure():
    words = pd.DataFrame(
        {
            "doc_id": ["a", "a"],
            "text": ["good film"] * 2,
            "method": ["raw", "raw"],
            "layer": [1, 1],
            "word": ["good", "film"],
            "raw_score": [0.7, 0.3],
        }
    )
    from xai_ray.pipeline.plausibility import score_run

    metrics, errors = score_run(words, {"a": "oops"}, "tokens")
    assert metrics.num_rows == 0 and metrics.schema.names == ["doc_id", "method", "layer", "metric", "value"]
    assert errors.column("doc_id").to_pylist() == ["a"] and "is not JSON" in errors.column("reason")[0].as_py()


def test_rationales_are_read_by_the_corpus_reader_whatever_the_file_holds(tmp_path):
    """The rationale reader was a second reader: integer ids with one null became '1.0' (every
    rationale lost, silently), JSON numbers 3e2 became '300.0'; a CSV row with an extra field, a byte
    that is not UTF-8, a JSON array with a string element and a byte-order mark crashed the run or
    lost the first rationale. Given rows, expected rationales by the ids the corpus reader gives."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from xai_ray.config import RunConfig
    from xai_ray.pipeline.plausibility import read_rationales

    def read(path, **keys):
        return read_rationales(RunConfig(data=str(path), rationales="why", **keys))

    ids = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1, 2, None, 4], pa.int64()),
                "text": ["a b", "c d", "e f", "g h"],
                "why": pa.array([[[0, 1]], [[1, 2]], [[0, 2]], None], pa.list_(pa.list_(pa.int64()))),
            }
        ),
        ids,
    )
    found = read(ids)
    assert sorted(found) == ["1", "2"] and [list(map(list, found["1"]))] == [[[0, 1]]]
    numbers = tmp_path / "n.jsonl"
    numbers.write_text('{"id": 3e2, "text": "a b", "why": [1, 0]}\n{"id": 7, "text": "c d", "why": [0, 1]}\n')
    assert read(numbers) == {"3e2": [1, 0], "7": [0, 1]}
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(
        '\ufeff{"id": "k1", "text": "a b", "why": [1, 0]}\n{"id": "k2", "text": "c d", "why": [0, 1]}\n'.encode()
    )
    assert read(bom) == {"k1": [1, 0], "k2": [0, 1]}
    rough = tmp_path / "rough.csv"
    rough.write_bytes(b'id,text,why\na,good film,"[1, 0]"\nb,bad,"[0, 1]",extra\nc,caf\xe9 ok,"[0, 1]"\n')
    assert read(rough) == {"a": "[1, 0]", "c": "[0, 1]"}  # the extra-field row is an error row of the run
    array = tmp_path / "a.json"
    array.write_text('[{"id": "x", "text": "a b", "why": [1, 1]}, "oops", {"id": "y", "text": "c d", "why": [1, 0]}]')
    assert read(array) == {"x": [1, 1], "y": [1, 0]}


@pytest.mark.parametrize("written", ["[[NaN, 2]]", "[1, 0, Infinity]", "[[-Infinity, 1]]"])
def test_nan_or_infinity_as_a_json_lines_number_is_its_reviews_error_row(tmp_path, written):
    """A JSON Lines rationale holding NaN or Infinity as a number (not in a string) stopped the whole
    run before scoring: `int('NaN')` raised from the rationales' reading. It is its review's error."""
    from xai_ray.data import fields
    from xai_ray.pipeline.plausibility import _plain, score_run

    value = _plain(fields.parse_json(written))
    words = pd.DataFrame(
        {
            "doc_id": ["a", "a", "a", "b", "b"],
            "text": ["good film here"] * 3 + ["bad film"] * 2,
            "method": ["raw"] * 5,
            "layer": [1] * 5,
            "word": ["good", "film", "here", "bad", "film"],
            "raw_score": [0.5, 0.3, 0.2, 0.6, 0.4],
        }
    )
    units = "tokens" if written.startswith("[1") else "chars"
    metrics, errors = score_run(words, {"a": value, "b": [1, 0] if units == "tokens" else [[0, 3]]}, units)
    assert errors.column("doc_id").to_pylist() == ["a"]
    assert set(metrics.column("doc_id").to_pylist()) == {"b"}


def test_a_review_that_fails_in_an_unforeseen_way_is_an_error_row_and_the_others_are_scored(monkeypatch):
    """An Infinity in a JSON rationale stopped the whole stage (OverflowError): no review got its
    metrics. Any failure of one review is now that review's error row."""
    from xai_ray.pipeline.plausibility import score_run

    words = pd.DataFrame(
        {
            "doc_id": ["a", "a", "b", "b"],
            "text": ["good film"] * 2 + ["bad film"] * 2,
            "method": ["raw"] * 4,
            "layer": [1] * 4,
            "word": ["good", "film", "bad", "film"],
            "raw_score": [0.7, 0.3, 0.6, 0.4],
        }
    )
    metrics, errors = score_run(words, {"a": "[[0, Infinity]]", "b": [1, 0]}, "tokens")
    assert errors.column("doc_id").to_pylist() == ["a"] and "[start, end] pair" in errors.column("reason")[0].as_py()
    assert set(metrics.column("doc_id").to_pylist()) == {"b"}
    real = pl.review_rows

    def broken(rankings, gold, gold_spans=None):
        if len(gold) == 2 and gold[1]:
            raise ZeroDivisionError("a case nobody foresaw")
        return real(rankings, gold, gold_spans=gold_spans)

    monkeypatch.setattr(pl, "review_rows", broken)
    metrics, errors = score_run(words, {"a": [0, 1], "b": [1, 0]}, "tokens")
    assert errors.column("reason").to_pylist() == ["plausibility failed: ZeroDivisionError: a case nobody foresaw"]
    assert set(metrics.column("doc_id").to_pylist()) == {"b"}
