"""Ids and labels read as text, exactly as the source wrote them; JSON read line by line.

No library guesses a type on the way: a JSON number stays the digits that were written (a large
integer id keeps every digit, ``007`` in a CSV stays ``007``, a null elsewhere in the column turns
no id into ``1.0``). Decided here:

- an id is text. The JSON number ``1`` and the string ``"1"`` are therefore the same id, and the
  second row holding it is quarantined as a duplicate, with that said in its reason;
- a label is a class number: an integer written as such (``1``, ``"1"``, ``-1``; ``1.0`` only
  from a numeric Parquet column). Anything else (``1.5``, ``pos``, ``true``) is kept as the text
  it was, for screening to quarantine with that text in the reason. Missing (null, an empty CSV
  field) means unlabelled;
- a JSONL line that is not JSON, or not an object, becomes a row of its own named ``line-N``
  whose ``problem`` says what is wrong with line N;
- a CSV row with more fields than the header becomes such a row too (pandas' reader would stop
  the whole file there, or silently take the first column as an index), so CSV is read by the
  standard library's ``csv`` module, row by row, every field a string as written.
"""

from __future__ import annotations

import csv
import decimal
import json
import math
import numbers
import re
import sys
from collections.abc import Iterator

import numpy as np
import pandas as pd

from xai_ray.data.text import escaped

_INTEGER = re.compile(r"[+-]?\d+")
csv.field_size_limit(sys.maxsize)  # a review is one field: a 1 MB review is data, not a broken file


class JsonNumber(str):
    """A JSON number as written (``12345678901234567890``, ``1.50``): text, never a float."""


def _number(literal: str) -> JsonNumber:
    return JsonNumber(literal)


def parse_json(text: str):
    """``json.loads`` keeping every number (and NaN/Infinity) as the text it was written as."""
    return json.loads(text, parse_int=_number, parse_float=_number, parse_constant=_number)


def read_json_lines(text: str) -> pd.DataFrame:
    """One row per non-blank line; a line that is not a JSON object is a row with a ``problem``."""
    rows = [json_line_row(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    frame = pd.DataFrame(rows, dtype=object)  # object: no column inferred to a type, JsonNumber kept
    return frame if "__problem" in frame else frame.assign(__problem=pd.Series(dtype=object))


def json_line_row(number: int, line: str) -> dict:
    """Line ``number`` of a JSONL file as a row: the object's keys, or a ``line-N`` row saying what is wrong."""
    try:
        value = parse_json(line)
    except ValueError as err:
        message = getattr(err, "msg", str(err))
        return _bad_line(number, f"line {number} is not valid JSON ({message} at column {getattr(err, 'colno', '?')})")
    if not isinstance(value, dict):
        return _bad_line(number, f"line {number} is a JSON {json_kind(value)}, not an object")
    return _object_row(value)


def json_row(item, index: int, problem: str) -> dict:
    """Element ``index`` of a ``.json`` array as a row (a non-object element is a row with ``problem``)."""
    return _object_row(item) if isinstance(item, dict) else _bad_line(index, problem)


# The reader's own keys beside a row's columns: a file's column of one of these names is not read
# (a JSON key "__line_id" renamed its document).
OWN_KEYS = ("__line_id", "__problem", "__line", "__where")


def _object_row(value: dict) -> dict:
    # A key with a lone surrogate ("\\ud800") cannot name a column: written escaped, it names none we read.
    return {**{escaped(key): item for key, item in value.items() if key not in OWN_KEYS}, "__problem": None}


def read_json_array(text: str) -> pd.DataFrame:
    """A ``.json`` file: an array of objects, each element a row (a non-object element is named by index)."""
    value = parse_json(text)
    if not isinstance(value, list):
        raise ValueError(f"the file holds a JSON {json_kind(value)}, not an array of objects")
    rows = [
        json_row(item, i, f"element {i} is a JSON {json_kind(item)}, not an object") for i, item in enumerate(value)
    ]
    return pd.DataFrame(rows, dtype=object) if rows else pd.DataFrame({"__problem": []})


def csv_columns(header: list[str]) -> list[str]:
    """A CSV header's column names as pandas names them: ``Unnamed: i`` for a blank one, a repeated
    name numbered (``text``, ``text.1``), so ``--set text_column`` means what it meant before."""
    names: list[str] = []
    for i, name in enumerate(header):
        name = name or f"Unnamed: {i}"
        base, n = name, 0
        while name in names:
            n += 1
            name = f"{base}.{n}"
        names.append(name)
    return names


def csv_header(reader, written: bool = False) -> list[str]:
    """The column names of a ``csv.reader``'s first line that is not blank ([] when there is none);
    ``written``: as the line writes them, not yet named as ``csv_columns`` names them."""
    for values in reader:
        if not _blank(values):
            return values if written else csv_columns(values)
    return []


def _blank(values: list[str]) -> bool:
    return not values or (len(values) == 1 and not values[0].strip())


def csv_rows(handle) -> Iterator[dict]:
    """The rows of a CSV text stream after its header, each ``{column: field, "__line": N}`` (N: the
    line the row starts on); blank lines are skipped, missing trailing fields are missing, and a row
    with more fields than the header is a ``line-N`` row saying so. ``csv.Error``: the file is broken."""
    reader = csv.reader(handle, strict=True)  # a quote that never closes right is an error, not rows swallowed
    columns = csv_header(reader)
    start = reader.line_num + 1
    while True:
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as err:  # the reader goes on at the next line: only the lines of the broken row are lost
            yield {**_bad_line(start, _broken_quote(start, reader.line_num, err)), "__line": start}
            start = reader.line_num + 1
            continue
        if len(values) > len(columns):
            problem = f"line {start} has {len(values)} fields, the header {len(columns)}"
            yield {**_bad_line(start, problem), "__line": start}
        elif not _blank(values):
            yield {**{c: v for c, v in zip(columns, values) if c not in OWN_KEYS}, "__problem": None, "__line": start}
        start = reader.line_num + 1


def _broken_quote(start: int, end: int, err: csv.Error) -> str:
    """Why the CSV lines ``start`` to ``end`` are no row: a quoted field that does not close right
    before a comma or the line's end (Python's non-strict reader ran it on, taking the rows after it
    into one field)."""
    lines = f"line {start}" if end == start else f"lines {start} to {end}"
    if "unexpected end of data" in str(err):
        return (
            f"{lines}: a quote opened on line {start} never closes, so the rest of the file is no row; fix its quoting"
        )
    return (
        f"{lines}: not a CSV row ({err}): a quoted field must close right before a comma or the line's end, "
        "so no row on them is read; fix their quoting"
    )


def _bad_line(number: int, problem: str) -> dict:
    return {"__line_id": f"line-{number}", "__problem": problem}


def json_kind(value) -> str:
    if isinstance(value, JsonNumber):
        return "number"
    return {str: "string", bool: "boolean", list: "array", dict: "object", type(None): "null"}.get(type(value), "value")


def missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def id_text(value) -> tuple[str | None, str | None]:
    """(the id as text, or None when missing; a problem with it, or None)."""
    if missing(value):
        return None, None
    if isinstance(value, JsonNumber | str):
        return str(value), None
    if isinstance(value, bool | np.bool_):
        return str(value), f"doc_id {value!r} is a boolean, not a string or number"
    if isinstance(value, numbers.Integral):
        return str(int(value)), None
    if isinstance(value, float):  # only from a float Parquet column: its shortest exact text
        return repr(value), None
    if isinstance(value, decimal.Decimal):  # a decimal Parquet column: its digits as written
        return str(value), None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace"), None
    kind = json_kind(value)
    return written_json(value)[:80], f"doc_id is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a string or number"


def written_json(value, depth: int = 0) -> str:
    """``value`` (``parse_json``'s) as JSON text with each number as it was written: ``json.dumps``
    quotes a ``JsonNumber`` (it is a str), so ``{"a": 1}`` read back as ``{"a": "1"}``."""
    if depth > 8:  # only the first 80 characters are kept
        return "..."
    if isinstance(value, JsonNumber):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {written_json(v, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(written_json(v, depth + 1) for v in value) + "]"
    return json.dumps(value, default=str)


def not_a_number(written: str) -> str:
    """The reader's problem for a label that is no class number (screening may find it a class name)."""
    return f"label {written!r} is not a class number"


def label_value(value) -> tuple[int | None, str | None]:
    """(the class number, or None; the label as written when it is not a class number, or None)."""
    if missing(value):
        return None, None
    if isinstance(value, bool | np.bool_):
        return None, str(bool(value)).lower()
    if isinstance(value, numbers.Integral):
        return int(value), None
    if isinstance(value, float) and not isinstance(value, JsonNumber):  # a numeric Parquet column
        return (int(value), None) if value.is_integer() else (None, repr(value))
    if isinstance(value, decimal.Decimal):  # a decimal Parquet column: 1.00 is class 1, as a float 1.0 is
        return (int(value), None) if value.is_finite() and value == value.to_integral_value() else (None, str(value))
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None, None
        if _INTEGER.fullmatch(text):
            return int(text), None
        return None, str(value)
    return None, str(value)
