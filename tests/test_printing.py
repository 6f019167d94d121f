"""``xai-ray sql`` and ``topk`` print what the query returned: every value as DuckDB writes it, in
csv, json and the aligned table (``cli.printing``). Given Arrow rows, expected text, by hand."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os

import pyarrow as pa
import pytest

from xai_ray.cli import printing


def printed(capsys, batches, fmt: str) -> str:
    printing.print_rows(batches, fmt)
    return capsys.readouterr().out


def test_a_whole_number_beside_a_null_stays_whole_and_null_stays_apart_from_nan(capsys):
    big = pa.table({"id": pa.array([9007199254740993, None, 7], pa.int64())})
    assert printed(capsys, [big], "csv") == 'id\n9007199254740993\n""\n7\n'  # a lone empty field is quoted
    assert json.loads(printed(capsys, [big], "json")) == [{"id": 9007199254740993}, {"id": None}, {"id": 7}]
    assert printed(capsys, [big], "table").splitlines() == [
        "              id",
        "9007199254740993",
        "            NULL",
        "               7",
    ]
    floats = pa.table({"x": pa.array([float("nan"), None, float("inf"), 0.5]), "n": ["a", "b", "c", "d"]})
    assert printed(capsys, [floats], "csv") == "x,n\nnan,a\n,b\ninf,c\n0.5,d\n"
    text = printed(capsys, [floats], "json")
    rows = json.loads(text, parse_constant=_refused)  # strict JSON: no bare NaN or Infinity
    assert [row["x"] for row in rows] == ["NaN", None, "Infinity", 0.5]  # three different values stay apart


def _refused(literal: str):
    raise AssertionError(f"{literal} is no JSON: JavaScript's JSON.parse and jq refuse it")


def test_json_is_strict_at_any_depth_and_leaves_strings_alone(capsys):
    table = pa.table(
        {
            "scores": pa.array([[1.0, float("nan"), float("-inf"), None]]),
            "pair": pa.array([{"a": float("inf"), "b": 'NaN "Infinity" -Infinity'}]),
        }
    )
    (row,) = json.loads(printed(capsys, [table], "json"), parse_constant=_refused)
    assert row == {
        "scores": [1.0, "NaN", "-Infinity", None],
        "pair": {"a": "Infinity", "b": 'NaN "Infinity" -Infinity'},
    }


def test_a_carriage_return_in_csv_is_quoted_so_the_row_stays_one(capsys):
    import csv
    import io

    table = pa.table({"a": ["x\ry"], "b": ["\r"], "c": ["z"]})
    text = printed(capsys, [table], "csv")
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["a", "b", "c"], ["x\ry", "\r", "z"]]


def test_dates_decimals_lists_structs_and_intervals_read_as_in_duckdb(capsys):
    table = pa.table(
        {
            "when": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5)], pa.timestamp("us")),
            "day": pa.array([dt.date(2026, 1, 2)]),
            "price": pa.array([decimal.Decimal("1.50")], pa.decimal128(4, 2)),
            "scores": pa.array([[1.0, float("nan"), None]]),
            "pair": pa.array([{"a": 1, "b": "x"}]),
            "gap": pa.array([pa.MonthDayNano([0, 3, 0])], pa.month_day_nano_interval()),
        }
    )
    assert printed(capsys, [table], "csv").splitlines() == [
        "when,day,price,scores,pair,gap",
        "2026-01-02 03:04:05,2026-01-02,1.50,\"[1.0, nan, NULL]\",\"{'a': 1, 'b': x}\",3 days",
    ]
    (row,) = json.loads(printed(capsys, [table], "json"))
    assert row["when"] == "2026-01-02 03:04:05" and row["day"] == "2026-01-02" and row["gap"] == "3 days"
    assert row["price"] == 1.5 and row["pair"] == {"a": 1, "b": "x"} and row["scores"][2] is None


def test_any_column_name_comes_back_as_it_was_named(capsys):
    # names a row alias or a struct_pack could trip on, and a name the result repeats
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2]), pa.array([3])], names=['t "q"', "shown", "shown"])
    assert printed(capsys, [table], "csv").splitlines() == ['"t ""q""",shown,shown', "1,2,3"]
    assert json.loads(printed(capsys, [table], "json")) == [{'t "q"': 1, "shown": 2, "shown_1": 3}]


def test_batches_stream_with_one_header_and_a_table_shows_its_first_rows(capsys, monkeypatch):
    batches = [pa.record_batch({"k": pa.array([i, i + 1]), "w": ["a\nb", "c"]}) for i in (0, 2, 4)]
    assert printed(capsys, batches, "csv") == 'k,w\n0,"a\nb"\n1,c\n2,"a\nb"\n3,c\n4,"a\nb"\n5,c\n'
    assert [r["k"] for r in json.loads(printed(capsys, batches, "json"))] == [0, 1, 2, 3, 4, 5]
    monkeypatch.setattr(printing, "TABLE_ROWS", 3)
    lines = printed(capsys, batches, "table").splitlines()
    assert lines[:4] == ["k  w", "0  a b", "1  c", "2  a b"]  # a newline inside a value stays on its row
    assert lines[4] == "(first 3 rows shown; --format csv or json prints every row)" and len(lines) == 5


@pytest.mark.parametrize("fmt,expected", [("csv", "k\n"), ("json", "[]\n"), ("table", "(no rows)\n")])
def test_no_rows(capsys, fmt, expected):
    assert printed(capsys, [pa.table({"k": pa.array([], pa.int64())})], fmt) == expected


def test_csv_keeps_an_empty_text_apart_from_null_as_duckdb_writes_them(capsys):
    """`,,x` printed both an empty text and a NULL as nothing; DuckDB's own CSV writer gives `"",,x`."""
    table = pa.table({"e": [""], "nv": pa.array([None], pa.string()), "x": ["x"], "q": ['say "hi", then go']})
    assert printed(capsys, [table], "csv") == 'e,nv,x,q\n"",,x,"say ""hi"", then go"\n'


def test_control_and_bidi_characters_are_shown_escaped_on_a_terminal(capsys, monkeypatch):
    """A review's text reached the terminal raw: ESC sequences (clear the screen, retitle the window),
    BEL, NUL, and U+202E, which reverses the rest of the line. The table shows them escaped; csv does
    on a terminal and keeps the data as it is in a pipe; json escapes control characters itself."""
    table = pa.table({"t\x1b]0;x\x07": ["a\x1b[2Jb\x00\x07 \u202eevil\u2069 caf\u00e9 \u65e5\u672c"]})
    out = printed(capsys, [table], "table")
    assert "\x1b" not in out and "\x00" not in out and "\u202e" not in out
    assert "a\\x1b[2Jb\\x00\\x07 \\u202eevil\\u2069 caf\u00e9 \u65e5\u672c" in out and "t\\x1b]0;x\\x07" in out
    assert "\x1b" in printed(capsys, [table], "csv")  # a pipe: the data as it is
    monkeypatch.setattr(printing.sys.stdout, "isatty", lambda: True, raising=False)
    assert "a\\x1b[2Jb" in printed(capsys, [table], "csv") and "\x1b" not in printed(capsys, [table], "csv")


def test_json_escapes_c1_del_bidi_and_separators_which_duckdb_leaves_raw(capsys):
    """DuckDB's to_json escapes only C0 characters: U+009B (an 8-bit CSI), DEL, U+202E and U+2028
    reached the terminal raw in values, column names and lists. The same values read back."""
    hostile = "a\x9b2J\x7f\u202eevil\u2028\x85"
    table = pa.table({"c\u202e": [hostile], "l": [[hostile]]})
    out = printed(capsys, [table], "json")
    assert not any(c in out for c in "\x9b\x7f\u202e\u2028\x85"), ascii(out)
    assert json.loads(out) == [{"c\u202e": hostile, "l": [hostile]}]
    shown = printed(capsys, [table], "table")  # line and paragraph separators too
    assert "\\u2028" in shown and "\u2028" not in shown


def test_a_class_name_reaches_the_caution_line_escaped():
    """A model's id2label is its author's text: the lean caution line (topk's stderr, the nightly
    line and log) carried ESC sequences and U+202E to the terminal."""
    from types import SimpleNamespace

    from xai_ray.query.lean import sentence

    row = SimpleNamespace(method="raw", layer=2, mean_lean=-0.5, n_words=10, n_against=7)
    said = sentence(row, "\x1b]0;PWN\x07\x1b[2J\u202eneg")
    assert "\x1b" not in said and "\u202e" not in said and "\\x1b]0;PWN\\x07\\x1b[2J\\u202eneg" in said


def test_a_value_duckdb_cannot_print_is_named_as_the_results_not_the_stores(capsys):
    """A UHUGEINT >= 2**127 travels over Arrow as decimal128(38, 0) and fails DuckDB's cast back:
    the command said "DuckDB failed on the store (a damaged file?)"."""
    import duckdb

    from xai_ray.query.connection import QueryError

    table = duckdb.connect().sql("select 170141183460469231731687303715884105728::uhugeint v").to_arrow_table()
    with pytest.raises(QueryError, match="a value of the query's result cannot be printed"):
        printing.print_rows([table], "table")


ESCAPES = "\x1b]0;OWNED\x07\x1b[2J"  # retitle the window, clear the screen


def test_errors_and_warnings_quote_data_as_escapes_not_as_terminal_commands(tmp_path):
    """A CSV column's name in the error line, a file's name in the folder's warning: printed as
    they were, the terminal obeyed them (the paths beside them were already quoted)."""
    import subprocess
    import sys

    (tmp_path / "header.csv").write_text(f"id,{ESCAPES}RED,label\n1,a,1\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.csv").write_text("id,text,label\n1,good film,1\n")
    (folder / f"x{ESCAPES}.json").write_text("")
    said = []
    for data, model in (("header.csv", "minilm"), ("folder", str(tmp_path / "no-model"))):
        done = subprocess.run(
            [sys.executable, "-m", "xai_ray.cli", "run", "--data", str(tmp_path / data), "--model", model],
            cwd=tmp_path,
            capture_output=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        said.append(done.stderr.decode())
    assert "has no text column 'text' (columns: id, \\x1b]0;OWNED\\x07\\x1b[2JRED, label)" in said[0]
    assert "are not read (x\\x1b]0;OWNED\\x07\\x1b[2J.json)" in said[1]
    assert not any(c in text for text in said for c in "\x1b\x07")


def test_a_log_line_keeps_its_line_breaks_and_escapes_the_rest():
    import logging

    from xai_ray.terminal import VisibleFormatter

    record = logging.LogRecord("xai_ray", logging.WARNING, __file__, 1, "class %s\nnext\rline", (ESCAPES,), None)
    assert VisibleFormatter("%(message)s").format(record) == "class \\x1b]0;OWNED\\x07\\x1b[2J\nnext\\rline"


def test_values_whose_arrow_form_is_not_their_value_travel_as_duckdbs_text():
    """UHUGEINT's largest printed as -1, BIT as its bytes, TIMETZ without its offset: each column
    holding them comes as DuckDB's text, in its place and under its name; HUGEINT stays a number."""
    import duckdb

    from xai_ray.query.user_sql import stream_arrow

    query = (
        "select 340282366920938463463374607431768211455::uhugeint as v, '101'::bit as b, "
        "'12:00:00+05'::timetz as t, ['1'::bit] as l, sum(3) as s, 1 as v, {'BIT': 1} as f"
    )
    (batch,) = stream_arrow(duckdb.connect(), query)
    assert batch.schema.names == ["v", "b", "t", "l", "s", "v", "f"]
    assert batch.to_pylist()[0] == {
        "v": 1,  # to_pylist keeps the last of two columns of one name
        "b": "101",
        "t": "12:00:00+05",
        "l": "[1]",
        "s": decimal.Decimal(3),
        "f": {"BIT": 1},  # a field called BIT is no BIT: the struct stays a struct
    }
    assert batch.column(0).to_pylist() == ["340282366920938463463374607431768211455"]
