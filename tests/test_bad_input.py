"""Bad and hostile input without Ray: screening, invalid UTF-8, job-level errors in one sentence,
model safety flags, the SQL sandbox's refusals, and generated hostile texts through the scorer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from test_faults import METHODS, TEXTS, scorer_rows

from xai_ray import cli
from xai_ray.data.corpus import read_corpus
from xai_ray.data.screening import screen
from xai_ray.query.connection import QueryError, open_store
from xai_ray.query.user_sql import run_sql
from xai_ray.store import StoreError
from xai_ray.store.writer import RunWriter

# --------------------------------------------------------------------------- bad input


def test_screening_quarantines_bad_rows_and_keeps_the_first_duplicate():
    from xai_ray.data.corpus import INVALID_UTF8

    corpus = pd.DataFrame(
        {
            "doc_id": ["a", "b", "c", "d", "e", "a", None, "f", "g", "h", "i", "j"],
            "text": [
                "good",
                None,
                "",
                " \n\t ",
                42,
                "again",
                "no id",
                "bad " + INVALID_UTF8 + "bytes",
                "fine",
                "fine",
                "x",
                ["a", "list"],
            ],
            "label": pd.array([1, 0, 0, 0, 0, 1, 0, 1, 7, -1, None, 0], dtype="Int64"),
        }
    )
    kept, rejected = screen(corpus, {0: "negative", 1: "positive"})
    assert kept.doc_id.tolist() == ["a", "i"]
    assert kept.text.tolist() == ["good", "x"] and pd.isna(kept.label.iloc[1])
    reasons = dict(zip(rejected.doc_id, rejected.reason))
    assert set(rejected.stage) == {"read"} and len(rejected) == 10
    assert reasons["b"] == "text is null"
    assert reasons["c"] == reasons["d"] == "text is empty or whitespace only"
    assert reasons["e"] == "text is int, not a string"
    assert reasons["j"] == "text is list, not a string"
    assert reasons["row-6"].startswith("doc_id is missing")
    assert "not valid UTF-8" in reasons["f"] and "character 4" in reasons["f"]
    assert reasons["g"].startswith("label 7 is not one of the model's classes (0: negative, 1: positive)")
    assert reasons["h"].startswith("label -1 is not one")
    dup = rejected[rejected.doc_id == "a"].reason.tolist()
    assert dup == ["duplicate doc_id: row 5 repeats the id of row 0, which is kept"]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_invalid_utf8_rows_are_quarantined_and_the_rest_read_exactly(tmp_path, kind):
    if kind == "csv":
        raw = (
            "\ufeffid,text,label\n".encode()
            + b'a,"caf\xc3\xa9, fine",1\n'
            + b'b,"bad \xff\xfe bytes",0\n'
            + b"c\xff,ok,1\n"
            + b"c\xfe,also ok,0\n"
            + 'd,"emoji \U0001f600 ok",0\n'.encode()
        )
    else:
        raw = (
            b'{"id": "a", "text": "caf\xc3\xa9, fine", "label": 1}\n'
            b'{"id": "b", "text": "bad \xff\xfe bytes", "label": 0}\n'
            b'{"id": "c\xff", "text": "ok", "label": 1}\n'
            b'{"id": "c\xfe", "text": "also ok", "label": 0}\n'
            + '{"id": "d", "text": "emoji \U0001f600 ok", "label": 0}\n'.encode()
        )
    source = tmp_path / f"c.{kind}"
    source.write_bytes(raw)
    corpus = read_corpus(str(source))
    kept, rejected = screen(corpus, [0, 1])
    # each bad byte of an id is kept as \xNN: two ids differing only there stay two documents
    assert kept.doc_id.tolist() == ["a", "c\\xff", "c\\xfe", "d"]
    assert kept.text.tolist() == ["café, fine", "ok", "also ok", "emoji \U0001f600 ok"]
    assert len(corpus) == len(kept) + len(rejected)
    assert rejected.doc_id.tolist() == ["b"] and "not valid UTF-8" in rejected.reason[0]


def test_a_row_without_an_id_is_not_named_as_a_real_id():
    """A row without an id is named by its row (``row-0``); a real row with that very id made
    ``errors`` and ``docs`` hold one id for two rows. The missing one is now told apart."""
    corpus = pd.DataFrame(
        {"doc_id": [None, "row-0", "row-1", None], "text": ["a", "b", "", "d"], "label": [1, 0, 1, 0]}
    )
    kept, rejected = screen(corpus, [0, 1])
    assert kept.doc_id.tolist() == ["row-0"]
    assert rejected.doc_id.tolist() == ["row-0 (no id)", "row-1", "row-3"]  # row-3: nobody's id, kept as it was
    assert rejected.reason.tolist()[0].startswith("doc_id is missing")


def test_a_line_that_is_no_row_is_not_named_as_a_real_id(tmp_path):
    """A JSON line that is no object is named by its line (``line-2``); a real row with that very
    id made its error read as the other's, or, when the real row came first, called the bad line a
    duplicate of it. The bad line is now told apart, with its own reason."""
    kept, rejected = _screened_lines(
        tmp_path,
        '{"id": "line-2", "text": "good", "label": 1}',
        "not json",
        "[1]",
        '{"id": "line-3", "text": "fine", "label": 0}',
    )
    assert kept.doc_id.tolist() == ["line-2", "line-3"]
    assert rejected.doc_id.tolist() == ["line-2 (no id)", "line-3 (no id)"]
    assert rejected.reason[0].startswith("line 2 is not valid JSON")
    assert rejected.reason[1] == "line 3 is a JSON array, not an object"


def _screened_lines(tmp_path, *lines: str):
    """(kept, rejected) of a JSON Lines file of ``lines``, read and screened for classes 0 and 1."""
    (tmp_path / "c.jsonl").write_text("".join(line + "\n" for line in lines))
    return screen(read_corpus(str(tmp_path / "c.jsonl")), [0, 1])


def test_an_id_that_is_a_json_object_is_named_with_its_numbers_as_written(tmp_path):
    """An object id is refused, named by its JSON text: its numbers were written as strings there."""
    kept, rejected = _screened_lines(
        tmp_path,
        '{"id": {"a": 1, "b": [2.50, true, null]}, "text": "x", "label": 1}',
        '{"id": [7], "text": "y", "label": 1}',
        '{"id": "ok", "text": "z", "label": 1}',
    )
    assert kept.doc_id.tolist() == ["ok"]
    assert rejected.doc_id.tolist() == ['{"a": 1, "b": [2.50, true, null]}', "[7]"]
    assert rejected.reason.tolist() == [
        "doc_id is an object, not a string or number",
        "doc_id is an array, not a string or number",
    ]


def test_a_csv_quote_that_never_closes_right_is_an_error_row_not_rows_swallowed(tmp_path):
    """A quote opened in a field and not closed right before a comma ran on through the next rows:
    they became one review's text, with the label of the last, and were in neither docs nor errors."""
    source = tmp_path / "c.csv"
    source.write_text(
        'id,text,label\n1,good film,1\n2,"Best movie ever,1\n3,ok film,0\n4,"bad film",0\n5,fine,1\n'
        '6,"x"y,1\n7,"a ""quoted"" word, and a\nsecond line",0\n8,"never closed\n9,z,1\n'
    )
    corpus = read_corpus(str(source))
    kept, rejected = screen(corpus, [0, 1])
    assert kept.doc_id.tolist() == ["1", "5", "7"]
    assert kept.text.tolist()[2] == 'a "quoted" word, and a\nsecond line'  # real quoting still reads
    reasons = dict(zip(rejected.doc_id, rejected.reason))
    assert list(reasons) == ["line-3", "line-7", "line-10"]
    assert reasons["line-3"].startswith("lines 3 to 5: not a CSV row (',' expected after '\"'): a quoted field")
    assert reasons["line-7"].startswith("line 7: not a CSV row")
    assert reasons["line-10"].startswith("lines 10 to 11: a quote opened on line 10 never closes")


def test_a_column_named_like_the_readers_own_keys_is_not_read_as_them(tmp_path):
    """A JSON key or CSV column ``__line_id`` renamed its row's document."""
    (tmp_path / "c.jsonl").write_text(
        '{"id": "a", "text": "hello", "label": 1, "__line_id": "zzz", "__problem": "x"}\n'
    )
    (tmp_path / "c.csv").write_text("id,text,label,__line_id\nb,hello,1,zzz\n")
    for name, doc_id in (("c.jsonl", "a"), ("c.csv", "b")):
        kept, rejected = screen(read_corpus(str(tmp_path / name)), [0, 1])
        assert kept.doc_id.tolist() == [doc_id] and rejected.empty


def test_a_parquet_file_with_two_columns_of_one_name_is_refused(tmp_path):
    """Two ``text`` columns: every review's text was the word "text" (2 rows) or a traceback (3)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from xai_ray.data.corpus import CorpusError

    names = ["id", "text", "text", "label"]
    pq.write_table(
        pa.Table.from_arrays(
            [pa.array(["a", "b"]), pa.array(["I loved it", "awful"]), pa.array(["x", "y"]), pa.array([1, 0])],
            names=names,
        ),
        tmp_path / "d.parquet",
    )
    with pytest.raises(CorpusError, match=r"has 4 columns, some of one name \('text'\): which one is meant"):
        read_corpus(str(tmp_path / "d.parquet"))


def test_a_folder_says_which_data_files_it_leaves_unread(tmp_path, caplog):
    """A .json, .ndjson, .tsv or .csv.gz file beside the .jsonl files was left out without a word."""
    (tmp_path / "a.jsonl").write_text('{"id": 1, "text": "good", "label": 1}\n')
    (tmp_path / "b.json").write_text('[{"id": 2, "text": "in json", "label": 1}]')
    (tmp_path / "c.ndjson").write_text('{"id": 3, "text": "nd", "label": 1}\n')
    (tmp_path / "notes.md").write_text("not data")
    with caplog.at_level("WARNING", logger="xai_ray"):
        corpus = read_corpus(str(tmp_path))
    assert corpus.doc_id.tolist() == ["1"]
    said = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert len(said) == 1 and "2 file(s) of another format are not read (b.json, c.ndjson)" in said[0]


def test_decimal_labels_are_class_numbers_as_float_ones_are(tmp_path):
    """A decimal(5, 2) label column holding 1.00 and 0.00 was refused on every row ("not a class
    number"), where a float column of 1.0 and 0.0 was read."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = pa.array([decimal.Decimal("1.00"), decimal.Decimal("0.00"), decimal.Decimal("0.50")], pa.decimal128(5, 2))
    pq.write_table(
        pa.table({"id": ["a", "b", "c"], "text": ["good", "bad", "meh"], "label": labels}), tmp_path / "d.parquet"
    )
    kept, rejected = screen(read_corpus(str(tmp_path / "d.parquet")), [0, 1])
    assert kept.label.tolist() == [1, 0] and rejected.doc_id.tolist() == ["c"]
    assert rejected.reason[0].startswith("label '0.50' is not a class number")


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"\x1f\x8b\x08\x00", "gzip-compressed (decompress it: gunzip)"),
        (b"PAR1\x15\x04", "a Parquet file (name it .parquet)"),
        (b"BZh91AY", "bzip2-compressed (decompress it: bunzip2)"),
    ],
)
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_compressed_or_binary_file_under_a_text_name_is_named_as_what_it_is(tmp_path, head, what, kind):
    """gzip bytes in a .csv were said to be UTF-16; in a .jsonl they made a run of error rows."""
    from xai_ray.data.corpus import CorpusError

    source = tmp_path / f"c.{kind}"
    source.write_bytes(head + bytes(range(256)))
    with pytest.raises(CorpusError, match=f"is no {kind.upper()} text: it is {re.escape(what)}"):
        read_corpus(str(source))


def test_a_csv_whose_header_begins_like_a_magic_number_is_read(tmp_path):
    """Only bzip2's whole magic (BZh and a block size digit) is taken for bzip2: a column may be "BZhang"."""
    (tmp_path / "c.csv").write_text("BZhang,text,label\na,good,1\n")
    corpus = read_corpus(str(tmp_path / "c.csv"), id_column="BZhang")
    assert corpus.doc_id.tolist() == ["a"]


def test_a_text_of_line_breaks_alone_is_named_as_such(tmp_path):
    """A review of `<br />` tags alone was refused as "empty or whitespace only": true of the text
    clean_html leaves, not of the file's. Kept with clean_html off, where the tags are its words."""
    lines = (
        '{"id": "a", "text": "<br /><BR/> <br>", "label": 1}',
        '{"id": "b", "text": "fine<br />film", "label": 0}',
        '{"id": "c", "text": "  ", "label": 0}',
    )
    kept, rejected = _screened_lines(tmp_path, *lines)
    reasons = dict(zip(rejected.doc_id, rejected.reason))
    assert kept.text.tolist() == ["fine film"]
    assert reasons["a"].startswith("text is HTML line breaks (<br />) and white space only: clean_html turns")
    assert reasons["c"] == "text is empty or whitespace only"
    kept, rejected = screen(read_corpus(str(tmp_path / "c.jsonl"), clean_html=False), [0, 1])
    assert kept.doc_id.tolist() == ["a", "b"] and rejected.doc_id.tolist() == ["c"]


def _run(argv, capsys):
    status = cli.main(argv)
    err = capsys.readouterr().err
    return status, err


@pytest.fixture()
def corpus_csv(tmp_path):
    source = tmp_path / "c.csv"
    pd.DataFrame({"id": ["a", "b"], "review": ["good", "bad"], "label": [1, 0]}).to_csv(source, index=False)
    return source


def test_job_level_problems_are_one_sentence_and_exit_2(tmp_path, tiny_bert_dir, corpus_csv, capsys, monkeypatch):
    from transformers import GPT2Config, ResNetConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    good = tmp_path / "good.parquet"
    pd.DataFrame(
        {"id": [str(i) for i in range(200)], "text": ["the film was good"] * 200, "label": [0, 1] * 100}
    ).to_parquet(good)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(os.urandom(4096))
    GPT2Config(n_layer=1, n_head=1, n_embd=8).save_pretrained(tmp_path / "gpt2")
    ResNetConfig().save_pretrained(tmp_path / "resnet")
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(
        json.dumps({"model_type": "bert", "auto_map": {"AutoModelForSequenceClassification": "modeling_evil.Evil"}})
    )
    base = ["run", "--store", str(tmp_path / "store"), "--model", tiny_bert_dir]
    cases = [
        (["--data", str(truncated)], "truncated.parquet' cannot be read"),
        (["--data", str(corrupt)], "corrupt.parquet' cannot be read"),
        (["--data", str(corpus_csv)], "no text column 'text' (columns: id, review, label)"),
        (["--data", str(good), "--methods", "raw,rolout"], "unknown method 'rolout'"),
        (["--data", str(good), "--model", str(tmp_path / "gpt2")], "not an encoder classifier"),
        (
            ["--data", str(good), "--model", str(tmp_path / "resnet")],
            "has type 'resnet', which has no text-classification model",
        ),
        (["--data", str(good), "--model", str(remote)], "ships its own code"),
        (["--data", str(good), "--run-id", "../escape"], "run_id '../escape' may hold only"),
        (["--resume", "nothing-here"], "has no unfinished run 'nothing-here'"),
    ]
    for extra, message in cases:
        status, err = _run(base + extra, capsys)
        assert status == 2, (extra, err)
        assert message in err, (extra, err)
        lines = [line for line in err.splitlines() if line.startswith("xai-ray:")]
        assert len(lines) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "store" / "runs").exists()  # all refused before anything was scored


def test_the_command_line_prints_no_traceback(tmp_path):
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1" + os.urandom(100))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xai_ray.cli",
            "run",
            "--data",
            str(corrupt),
            "--model",
            "minilm",
            "--store",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("xai-ray: ") and "cannot be read" in lines[-1]
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- models


def test_pickled_weights_load_only_with_the_flag(tmp_path):
    from conftest import build_tiny_model

    from xai_ray.model.loading import ModelError, describe_model, load_model

    model, tokenizer = build_tiny_model("bert")
    folder = tmp_path / "pickled"
    model.save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # the pickled format
    tokenizer.save_pretrained(folder)
    assert (folder / "pytorch_model.bin").is_file() and not list(folder.glob("*.safetensors"))
    with pytest.raises(ModelError, match="no .safetensors weights.*allow_pickle=true"):
        load_model(str(folder))
    loaded = load_model(str(folder), allow_pickle=True)
    torch.testing.assert_close(loaded.model.state_dict()["classifier.weight"], model.state_dict()["classifier.weight"])
    assert loaded.info["allow_pickle"] is True and loaded.info["trust_remote_code"] is False
    described = describe_model(str(folder), allow_pickle=True)
    assert described["allow_pickle"] is True and described["trust_remote_code"] is False


# --------------------------------------------------------------------------- the SQL sandbox


@pytest.fixture(scope="module")
def small_store(tmp_path_factory, scorer_factory):
    scorer = scorer_factory("bert")
    store = tmp_path_factory.mktemp("sandbox")
    writer = RunWriter(store, "r", METHODS)
    for first in range(0, 8, 2):
        writer.write(scorer_rows(scorer, TEXTS[first : first + 2], first=first))
    writer.publish({"created_at": "x"})
    return store


def test_sql_refuses_every_way_out_of_the_store(small_store, tmp_path, capsys):
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    inside = small_store / "runs" / "run_id=r" / "docs"
    part = next(inside.glob("*.parquet"))
    before = part.read_bytes()
    refused = [
        f"select * from read_csv('{outside}')",  # reading other files
        "select * from read_text('/etc/passwd')",
        "select * from read_blob('" + str(small_store) + "/../../../etc/passwd')",
        "select * from glob('/etc/*')",
        f"copy docs to '{tmp_path / 'x.csv'}'",  # writing, outside the store and inside it
        f"copy (select 1 as a) to '{inside / 'evil.parquet'}'",
        f"copy (select 1 as a) to '{part}'",
        f"export database '{small_store / 'dump'}'",
        "select 1; copy (select 1) to 'y.csv'",
        "create table t as select 1",
        f"attach '{tmp_path / 'x.db'}'",  # other databases
        "install httpfs",  # extensions
        "load httpfs",
        "set enable_external_access = true",  # loosening the sandbox
        "set allowed_directories = ['/']",
        "reset allowed_directories",
        "call checkpoint()",
    ]
    for query in refused:
        status, err = _run(["sql", "--store", str(small_store), query], capsys)
        assert status == 2 and err.startswith("xai-ray: ") and "Traceback" not in err, (query, err)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.db").exists()
    assert not (inside / "evil.parquet").exists() and not (small_store / "dump").exists()
    assert part.read_bytes() == before
    con = open_store(small_store)
    assert run_sql(con, "select count(*) as n from docs").n.tolist() == [8]
    assert run_sql(con, "describe docs").column_name.tolist()[0] == "doc_id"
    with pytest.raises(QueryError, match="refused a COPY statement"):
        run_sql(con, "copy docs to 'z.csv'")


def test_undecodable_command_line_bytes_are_named_not_a_traceback(small_store, tmp_path, capsys):
    """Python keeps an undecodable byte of argv as a lone surrogate: `sql` died in DuckDB's parser
    with a TypeError's traceback, and `explain --doc-id` blamed the store."""
    for argv, said in (
        (
            ["sql", "--store", str(small_store), "select '\udcff'"],
            "the query is not valid UTF-8: byte 0xff at character 8",
        ),
        (
            ["explain", "--store", str(small_store), "--doc-id", "\udcff", "--out", str(tmp_path / "p.html")],
            "--doc-id is not valid UTF-8: byte 0xff at character 0",
        ),
    ):
        status, err = _run(argv, capsys)
        assert status == 2 and said in err and "Traceback" not in err, err


def test_a_notebook_runs_own_queries_pass_the_guard_and_it_holds_no_connection(small_store):
    """The sandbox lets a COPY replace one of the store's own parts: the ``Run`` object's in-process
    reader passes every statement through the guard, and none of its attributes is a connection."""
    import duckdb

    from xai_ray.api import Run
    from xai_ray.query.guard import RefusedStatement

    part = next((small_store / "runs" / "run_id=r" / "docs").glob("*.parquet"))
    before = part.read_bytes()
    run = Run.load(str(small_store), "r")
    assert len(run.docs()) == 8
    reader = run._database()
    with pytest.raises(RefusedStatement):
        reader.execute(f"copy (select * from docs limit 1) to '{part}' (format parquet, use_tmp_file false)")
    assert part.read_bytes() == before
    reachable = [getattr(reader, name, None) for name in dir(reader)] + [getattr(run, name, None) for name in dir(run)]
    assert not any(isinstance(value, duckdb.DuckDBPyConnection) for value in reachable)
    assert not run.words(method=METHODS[0], layer=1).empty
    from xai_ray.config import ConfigError

    for layer in (0, -1, 3):  # an empty frame before: a layer the model has not
        with pytest.raises(ConfigError, match="layer"):
            Run(str(small_store), "r", manifest={"model": {"n_layers": 2}}).words(layer=layer)


def test_a_notebook_topk_names_its_keywords_not_the_command_lines_flags(tmp_path, scorer_factory):
    from xai_ray.api import Run

    writer = RunWriter(tmp_path, "r", METHODS)
    writer.write(scorer_rows(scorer_factory("bert"), TEXTS[:4]))
    writer.publish({"created_at": "x", "config": {"methods": METHODS}, "model": {"n_layers": 2}})
    run = Run.load(str(tmp_path), "r")
    for call, said in (
        (lambda: run.topk(method=METHODS[0], layer=99), "layer must be between 1 and"),
        (lambda: run.topk(method=METHODS[0], min_count=0), "min_count must be"),
        (lambda: run.topk(method=METHODS[0], stat="nope"), "stat"),
    ):
        with pytest.raises(ValueError, match=said) as refused:
            call()
        assert "--" not in str(refused.value), refused.value


# --------------------------------------------------------------------------- generated texts

# Control characters, emoji (with skin tones and ZWJ sequences), combining marks, right-to-left
# scripts, zero-width and format characters, mixed with words the tiny vocabularies know.
HOSTILE_PIECES = [
    "\x00",
    "\x07",
    "\x1b[31m",
    "\r\n",
    "\t",
    "\u0085",
    "\u2028",
    "\U0001f600",
    "\U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "e\u0301",
    "\u0303\u0303",
    "\u05e9\u05dc\u05d5\u05dd",
    "\u0645\u0631\u062d\u0628\u0627",
    "\u202e",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\u2060",
    "<br />",
    "<script>alert(1)</script>",
    "film",
    "good",
    "the",
    "bad",
    " ",
    "!!!",
    "\ufffd",
    "\U00010000",
]


def _texts():
    from hypothesis import strategies as st

    piece = st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(min_size=1, max_size=8))
    return st.lists(st.lists(piece, min_size=1, max_size=12).map("".join), min_size=1, max_size=4)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_generated_hostile_texts_score_finite_and_sum_to_one(family, scorer_factory):
    from hypothesis import HealthCheck, given, settings

    from xai_ray.data.screening import text_problem

    scorer = scorer_factory(family)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(_texts())
    def check(texts):
        rows = scorer(
            {"doc_id": [f"g{i}" for i in range(len(texts))], "text": texts, "label": [0] * len(texts)}
        ).to_pylist()
        assert sorted(r["doc_id"] for r in rows) == sorted(f"g{i}" for i in range(len(texts)))
        for row in rows:
            text = texts[int(row["doc_id"][1:])]
            if text_problem(text):
                assert row["error"] == text_problem(text)
                continue
            assert row["error"] is None, row["error"]
            n_layers, n, n_words = row["n_layers"], row["n_tokens"], len(row["words"])
            assert len(row["tokens"]) == len(row["word_index"]) == n
            for method in METHODS:
                scores = np.asarray(row[f"scores_{method}"]).reshape(n_layers, n)
                assert np.isfinite(scores).all()
                words = np.asarray(row[f"word_scores_{method}"], dtype=np.float64).reshape(n_layers, n_words)
                assert np.isfinite(words).all()
                if n_words:
                    np.testing.assert_allclose(words.sum(axis=1), 1.0, atol=1e-5)

    check()


def test_csv_fields_are_read_as_written(tmp_path):
    source = tmp_path / "c.csv"
    source.write_text('id,text,label\n007,NA,1\nnull,None,\nNaN,"",0\n')
    corpus = read_corpus(str(source))
    assert corpus.doc_id.tolist() == ["007", "null", "NaN"]
    assert corpus.text.tolist() == ["NA", "None", ""]  # a review may say "NA"; an empty field is empty
    assert corpus.label.tolist()[0] == 1 and pd.isna(corpus.label[1]) and corpus.label[2] == 0


def test_rerunning_a_run_id_with_other_settings_is_one_sentence(tmp_path, tiny_bert_dir, scorer_factory, capsys):
    from xai_ray import pipeline
    from xai_ray.config import resolve

    data = tmp_path / "c.csv"
    pd.DataFrame({"id": ["d0", "d1"], "text": TEXTS[:2], "label": [0, 1]}).to_csv(data, index=False)
    flags = {"data": str(data), "model": tiny_bert_dir, "store": str(tmp_path / "s"), "run_id": "x", "max_length": 32}
    writer = pipeline.open_writer(resolve(None, flags, []), "x")
    writer.write(scorer_rows(scorer_factory("bert"), TEXTS[:1]))
    writer.commit()
    writer.abort(keep_parts=True)  # as a killed run leaves it
    argv = ["run", "--data", str(data), "--model", tiny_bert_dir, "--store", str(tmp_path / "s"), "--run-id", "x"]
    for extra, changed in (
        (["--max-length", "16"], "(max_length)"),
        (["--max-length", "32", "--methods", "raw"], "(methods)"),
    ):
        status = cli.main(argv + extra)
        err = capsys.readouterr().err
        assert status == 2 and f"was started with other settings {changed}" in err and "Traceback" not in err
    status = cli.main(["run", "--resume", "x", "--store", str(tmp_path / "s"), "--max-length", "16"])
    assert status == 2 and "(max_length)" in capsys.readouterr().err


def test_a_run_folder_without_its_manifest_is_named_when_its_id_is_taken(tmp_path, scorer_factory, capsys):
    """Readers leave out a run folder without manifest.json; `run --run-id` and `--resume` said
    only "already exists" and "already complete" of a run no query could see."""
    writer = RunWriter(tmp_path, "r", METHODS)
    writer.write(scorer_rows(scorer_factory("bert"), TEXTS[:2]))
    (writer.publish({"created_at": "x"}) / "manifest.json").unlink()
    for argv in (
        ["run", "--data", str(tmp_path / "c.csv"), "--store", str(tmp_path), "--run-id", "r"],
        ["run", "--resume", "r", "--store", str(tmp_path)],
    ):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "its folder's manifest.json is missing (deleted, or a copy cut short before it)" in err, err


@pytest.mark.parametrize(
    "text, readable",
    [
        ("\x01\x02\x03", False),
        ("\x00\x00", False),
        ("\u200b\ufeff\u200d", False),
        ("\u0301\u0308", False),  # combining marks with nothing to combine with
        ("\u00a0\u3000 \u2028", False),
        ("\u200bok\u200b", True),
        ("!", True),
        ("\u263a", True),
    ],
)
def test_a_text_with_nothing_to_read_is_rejected_like_an_empty_one(text, readable, scorer_factory):
    """Control, zero-width or combining characters alone were "scored": a prediction made on the
    tokenizer's markers alone, with no word, and --evaluate failing on each such review."""
    from xai_ray.data.screening import text_problem

    problem = text_problem(text)
    assert (problem is None) == readable, problem
    (row,) = scorer_factory("bert")({"doc_id": ["t"], "text": [text], "label": [0]}).to_pylist()
    assert row["error"] == problem
    if readable:
        assert len(row["words"]) >= 1


def test_a_resume_after_the_model_or_the_corpus_changed_is_refused_before_scoring(
    tmp_path, tiny_bert_dir, scorer_factory, capsys
):
    """A resume after the model folder got other weights scored every remaining document, then could
    never publish ("actors loaded different weights"); one after the corpus file was rewritten
    under the same name published old and new texts in one run. Both are refused up front, in one
    sentence, and the staging stays resumable once the files are back."""
    import shutil

    from xai_ray import pipeline
    from xai_ray.config import resolve

    data, model = tmp_path / "c.csv", tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    pd.DataFrame({"id": ["d0", "d1"], "text": TEXTS[:2], "label": [0, 1]}).to_csv(data, index=False)
    flags = {"data": str(data), "model": str(model), "store": str(tmp_path / "s"), "run_id": "x", "max_length": 32}
    writer = pipeline.open_writer(resolve(None, flags, []), "x")
    writer.write(scorer_rows(scorer_factory("bert"), TEXTS[:1]))
    writer.commit()
    writer.abort(keep_parts=True)  # as a killed run leaves it
    weights = next(model.glob("*.safetensors"))
    kept = weights.read_bytes()
    weights.write_bytes(kept[:-4] + b"\0\0\0\0")  # fine-tuned again in place
    status = cli.main(["run", "--resume", "x", "--store", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert status == 2 and "the model folder of the unfinished run_id=x changed since it started" in err, err
    weights.write_bytes(kept)
    os.utime(weights, ns=(0, 0))  # same bytes, another time: still refused (sizes or times are compared)
    assert cli.main(["run", "--resume", "x", "--store", str(tmp_path / "s")]) == 2
    capsys.readouterr()
    data.write_text(data.read_text().replace("d1,", "d1,CHANGED "))
    with pytest.raises(StoreError, match="the corpus files and model folder of the unfinished run_id=x changed"):
        pipeline.open_writer(resolve(None, flags, []), "x")
    assert (pipeline_staging := tmp_path / "s" / "_staging" / "run_id=x").is_dir() and any(pipeline_staging.iterdir())


def test_a_decimal_id_column_gives_each_row_its_digits(tmp_path):
    """A Parquet decimal id was refused for every row as '"1.50"': doc_id is a value."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = pa.array([decimal.Decimal("1.50"), decimal.Decimal("2")], pa.decimal128(5, 2))
    pq.write_table(pa.table({"id": ids, "text": ["x good", "y bad"], "label": [1, 0]}), tmp_path / "d.parquet")
    kept, rejected = screen(read_corpus(str(tmp_path / "d.parquet")), [0, 1])
    assert kept.doc_id.tolist() == ["1.50", "2.00"] and rejected.empty


def test_a_nan_in_a_float_label_column_is_an_error_row_and_a_null_is_no_label(tmp_path):
    """pandas reads a float column's NaN and null alike as missing: the NaN was read as a review
    without a label, where JSON Lines' NaN is an error row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = pa.array([1.0, None, float("nan"), 0.0], pa.float32())
    table = pa.table({"id": ["a", "b", "c", "d"], "text": ["good", "fine", "odd", "bad"], "label": labels})
    pq.write_table(table, tmp_path / "f.parquet")
    kept, rejected = screen(read_corpus(str(tmp_path / "f.parquet")), [0, 1])
    assert kept.doc_id.tolist() == ["a", "b", "d"]
    assert kept.label.iloc[0] == 1 and pd.isna(kept.label.iloc[1]) and kept.label.iloc[2] == 0
    assert rejected.doc_id.tolist() == ["c"] and "'NaN'" in rejected.reason.iloc[0]
