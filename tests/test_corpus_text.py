"""Ids and labels read as the source wrote them, in every format; rows the reader finds bad are
quarantined with their reason; and always rows in = rows kept (docs) + rows rejected (errors)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xai_ray.data.corpus import CorpusError, read_corpus
from xai_ray.data.screening import screen

CLASSES = {0: "negative", 1: "positive"}


def _screened(source) -> tuple[pd.DataFrame, dict[str, str], pd.DataFrame]:
    corpus = read_corpus(str(source))
    kept, rejected = screen(corpus, CLASSES)
    assert len(corpus) == len(kept) + len(rejected)  # rows in = docs + errors
    return kept, dict(zip(rejected.doc_id, rejected.reason)), rejected


def test_jsonl_ids_are_the_text_written(tmp_path):
    source = tmp_path / "c.jsonl"
    big = "123456789012345678901234567890"
    source.write_text(
        "\n".join(
            [
                '{"id": "007", "text": "a", "label": 0}',
                '{"id": 7, "text": "b", "label": 1}',
                '{"id": null, "text": "c", "label": 0}',
                '{"id": 1, "text": "d", "label": 1}',
                '{"id": "1", "text": "e", "label": 0}',  # the same id as the number 1: a duplicate
                '{"id": 2, "text": "f", "label": 1}',
                f'{{"id": {big}, "text": "g", "label": 0}}',
                f'{{"id": {big[:-1]}1, "text": "h", "label": 1}}',  # differs from the previous only in its last digit
                '{"id": 1.50, "text": "i", "label": 0}',
            ]
        )
        + "\n"
    )
    kept, reasons, _ = _screened(source)
    assert kept.doc_id.tolist() == ["007", "7", "1", "2", big, big[:-1] + "1", "1.50"]
    assert kept.text.tolist() == ["a", "b", "d", "f", "g", "h", "i"]
    assert reasons == {
        "row-2": "doc_id is missing (named here by its row)",
        "1": "duplicate doc_id: row 4 repeats the id of row 3, which is kept",
    }


def test_parquet_integer_ids_with_a_null_stay_integers(tmp_path):
    source = tmp_path / "c.parquet"
    pq.write_table(
        pa.table(
            {
                "id": pa.array([1, None, 2**62 + 1], pa.int64()),
                "text": ["a", "b", "c"],
                "label": pa.array([0.0, 1.0, 1.5]),
            }
        ),
        source,
    )
    kept, reasons, _ = _screened(source)
    assert kept.doc_id.tolist() == ["1"] and kept.label.tolist() == [0]
    assert reasons["row-1"].startswith("doc_id is missing")
    assert reasons[str(2**62 + 1)].startswith("label '1.5' is not a class number")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_labels_that_are_not_classes_go_to_errors_with_the_label(tmp_path, kind):
    labels = ["1", "1.5", "joy", "true", "", "7", " 0 ", "-1", "positive", " Negative "]
    if kind == "csv":
        source = tmp_path / "c.csv"
        source.write_text("id,text,label\n" + "".join(f"d{i},text {i},{v}\n" for i, v in enumerate(labels)))
    else:  # JSON values of every kind: numbers, strings, booleans, null
        source = tmp_path / "c.jsonl"
        values = ["1", "1.5", '"joy"', "true", "null", "7", '" 0 "', "-1", '"positive"', '" Negative "']
        source.write_text(
            "".join(f'{{"id": "d{i}", "text": "text {i}", "label": {v}}}\n' for i, v in enumerate(values))
        )
    kept, reasons, rejected = _screened(source)
    # a label names a class by its index or by the model's name for it (case aside, when unambiguous)
    assert kept.doc_id.tolist() == ["d0", "d4", "d6", "d8", "d9"]
    assert kept.label.tolist()[0] == 1 and pd.isna(kept.label.iloc[1]) and kept.label.tolist()[2:] == [0, 1, 0]
    classes = "(0: negative, 1: positive); use --set label_column=none to score without labels"
    named = "is not a class number nor one of the model's class names"
    assert reasons["d1"] == f"label '1.5' {named} {classes}"
    assert reasons["d2"] == f"label 'joy' {named} {classes}"
    assert reasons["d3"] == f"label 'true' {named} {classes}"
    assert reasons["d5"] == f"label 7 is not one of the model's classes {classes}"
    assert reasons["d7"].startswith("label -1 is not one of the model's classes")
    assert set(rejected.stage) == {"read"}


def test_a_bad_jsonl_line_is_named_by_its_number(tmp_path):
    source = tmp_path / "c.jsonl"
    source.write_text(
        '{"id": "a", "text": "fine", "label": 1}\n\n[1, 2]\n"just a string"\n{"id": "b", "text": \n'
        '{"id": "c", "text": "fine too", "label": 0}\n'
    )
    kept, reasons, _ = _screened(source)
    assert kept.doc_id.tolist() == ["a", "c"]
    assert reasons["line-3"] == "line 3 is a JSON array, not an object"
    assert reasons["line-4"] == "line 4 is a JSON string, not an object"
    assert reasons["line-5"].startswith("line 5 is not valid JSON (")


def test_a_jsonl_file_of_bad_lines_only_is_all_errors(tmp_path):
    source = tmp_path / "c.jsonl"
    source.write_text("1\n2\n")
    kept, reasons, _ = _screened(source)
    assert kept.empty and sorted(reasons) == ["line-1", "line-2"]


def test_a_folder_of_one_format_is_read_whole_and_of_several_refused(tmp_path):
    folder = tmp_path / "csvs"
    folder.mkdir()
    (folder / "a.csv").write_text("id,text,label\n01,x,0\n")
    (folder / "b.csv").write_text("id,text,label\n02,y,1\n")
    (folder / "notes.md").write_text("not data")
    kept, reasons, _ = _screened(folder)
    assert kept.doc_id.tolist() == ["01", "02"] and reasons == {}

    mixed = tmp_path / "mixed"
    (mixed / "sub").mkdir(parents=True)
    pd.DataFrame({"id": ["p"], "text": ["x"], "label": [0]}).to_parquet(mixed / "part-0.parquet")
    (mixed / "extra.csv").write_text("id,text,label\nq,y,1\n")
    (mixed / "sub" / "more.jsonl").write_text('{"id": "r", "text": "z", "label": 1}\n')
    with pytest.raises(CorpusError) as refused:
        read_corpus(str(mixed))
    message = str(refused.value)
    assert "mixes .csv and .jsonl and .parquet files" in message and len(message.splitlines()) == 1
    assert all(name in message for name in ("extra.csv", "part-0.parquet", "sub/more.jsonl"))


def test_a_folder_leaves_out_a_store_kept_in_it_and_refuses_a_file_without_the_text_or_id_column(tmp_path):
    """A store inside the data folder was read back as corpus (its parts and aggregates, 6,864 rows
    of "doc_id is missing"); a file of the folder without the text column gave a row of errors."""
    folder = tmp_path / "data"
    (folder / "sub").mkdir(parents=True)
    pd.DataFrame({"id": ["a", "b"], "text": ["x", "y"], "label": [0, 1]}).to_parquet(folder / "a.parquet")
    for below in ("st/runs/run_id=r1/docs", "st/runs/run_id=r1/aggregates", "st/_staging/run_id=r2/docs"):
        (folder / below).mkdir(parents=True)
        pd.DataFrame({"doc_id": ["a"], "n_tokens": [3]}).to_parquet(folder / below / "part-0.parquet")
    (folder / "st/runs/run_id=r1/manifest.json").write_text("{}")  # what makes them a store's runs
    (folder / "st/_staging/run_id=r2/identity.json").write_text("{}")
    (folder / "by/runs/run_id=2024").mkdir(parents=True)  # folders of those names holding no run: data
    pd.DataFrame({"id": ["c"], "text": ["z"], "label": [1]}).to_parquet(folder / "by/runs/run_id=2024/c.parquet")
    pd.DataFrame({"text": [], "label": []}).to_parquet(folder / "sub/none.parquet")  # no rows: no id needed
    kept, reasons, _ = _screened(folder)
    assert kept.doc_id.tolist() == ["a", "b", "c"] and reasons == {}

    pd.DataFrame({"x": [1]}).to_parquet(folder / "sub" / "z.parquet")
    with pytest.raises(CorpusError, match=r"sub/z.parquet' has no text column 'text' \(columns: x\)"):
        read_corpus(str(folder))
    pd.DataFrame({"text": ["z"], "label": [1]}).to_parquet(folder / "sub" / "z.parquet")
    with pytest.raises(CorpusError, match=r"sub/z.parquet' has no id column 'id', which other files of"):
        read_corpus(str(folder))


@pytest.mark.slow
@pytest.mark.ray
def test_a_hostile_jsonl_runs_to_the_end_with_ids_as_written(ray_cluster, tmp_path, tiny_bert_dir):
    from xai_ray import cli
    from xai_ray.query.connection import open_store

    big = "98765432109876543210987654321"
    lines = [
        '{"id": "007", "text": "the film was good", "label": 1}',
        '{"id": 7, "text": "bad movie", "label": 0}',
        f'{{"id": {big}, "text": "fine plot", "label": 1}}',
        f'{{"id": {big[:-1]}2, "text": "a fine plot too", "label": 0}}',
        '{"id": 1, "text": "good acting", "label": 1}',
        '{"id": "1", "text": "the same id as text", "label": 0}',
        '{"id": null, "text": "no id", "label": 0}',
        '{"id": "half", "text": "good", "label": 1.5}',
        '{"id": "word", "text": "good", "label": "joy"}',
        '{"id": "bool", "text": "good", "label": true}',
        '["not", "an", "object"]',
        '{"id": "cut", "text": ',
    ]
    source = tmp_path / "hostile.jsonl"
    source.write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    argv = [
        "run",
        "--data",
        str(source),
        "--model",
        tiny_bert_dir,
        "--store",
        str(store),
        "--run-id",
        "j",
        "--actors",
        "1",
        "--max-length",
        "32",
        "--no-report",
    ]
    assert cli.main(argv) == 0
    con = open_store(store)
    docs = con.execute("select doc_id, label from docs").df()
    errors = con.execute("select doc_id, reason from errors").df()
    assert sorted(docs.doc_id) == sorted(["007", "7", big, big[:-1] + "2", "1"])
    assert dict(zip(docs.doc_id, docs.label))["007"] == 1
    reasons = dict(zip(errors.doc_id, errors.reason))
    assert sorted(reasons) == ["1", "bool", "half", "line-11", "line-12", "row-6", "word"]
    assert reasons["half"].startswith("label '1.5' is not a class number")
    assert reasons["word"].startswith("label 'joy'") and reasons["bool"].startswith("label 'true'")
    assert reasons["line-11"] == "line 11 is a JSON array, not an object"
    assert len(docs) + len(errors) == len(lines)  # rows in = docs + errors


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_csv_is_named_as_not_utf8(tmp_path, encoding):
    """Its column list came out garbled ("columns: \\ufdd0ff\\ufdd0fei d ...") instead of naming the encoding."""
    source = tmp_path / "c.csv"
    pd.DataFrame({"id": ["a"], "text": ["a good film"], "label": [1]}).to_csv(source, index=False, encoding=encoding)
    with pytest.raises(CorpusError, match=r"c.csv' is not UTF-8 text: .*save it as UTF-8"):
        read_corpus(str(source))
