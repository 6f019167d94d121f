"""Query results on stdout as csv, json or an aligned table, every value as DuckDB writes it.

Rows arrive as Arrow record batches (``query.isolated.stream``) and are printed as they come.
DuckDB renders each value, so what is printed is what the query returned: a BIGINT stays a whole
number beside a NULL, NULL and NaN stay apart, dates and timestamps are ISO text, DECIMALs keep
their digits, and lists, structs and intervals read as in DuckDB. csv: a header, then one line a
row, NULL an empty field and an empty text "" (a row of one NULL field is "" too: readers skip a
blank line; a field holding the separator, a quote, a line break
or a carriage return is quoted, as DuckDB's own CSV writer does). json: one
array of objects (DuckDB's ``to_json``), strict JSON: NaN and the infinities, at any depth, are
the strings "NaN", "Infinity" and "-Infinity" (JSON has no literal for them; JavaScript's and jq's
readers refuse DuckDB's bare ones), NULL is null. table: the first
``TABLE_ROWS`` rows aligned, NULL written as NULL. The table, and csv printed on a terminal, show
control and bidirectional formatting characters as escapes (``\x1b``, ``\u202e``): a review's text
could otherwise clear or retitle the terminal, or reverse the line; json escapes them itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator

from xai_ray.terminal import json_visible, visible

TABLE_ROWS = 500
# In DuckDB's JSON text: a string (kept as it is), or a NaN or infinity written as a bare literal.
JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|-?Infinity|NaN')


def print_rows(batches: Iterable, fmt: str) -> None:
    """Print ``batches`` (one schema) in ``fmt``: csv and json stream every row, a table shows the
    first ``TABLE_ROWS``."""
    if fmt == "csv":
        _csv(batches)
    elif fmt == "json":
        _json(batches)
    else:
        _table(batches)
    sys.stdout.flush()


def _csv(batches) -> None:
    shown = visible if sys.stdout.isatty() else str  # on a terminal, its control characters escaped
    header = False
    for names, rows in _as_text(batches):
        if not header:
            sys.stdout.write(",".join(_csv_field(shown(name)) for name in names) + "\n")
            header = True
        for row in rows:
            line = ",".join("" if value is None else _csv_field(shown(value)) for value in row)
            sys.stdout.write((line or '""') + "\n")  # a lone NULL as "": a blank line is skipped by readers


def _csv_field(value: str) -> str:
    """A non-NULL value as DuckDB's CSV writer gives it: quoted when empty (NULL is the empty field),
    or when it holds the separator, a quote or a line break (``\r`` too, which readers take as one)."""
    if value == "" or any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


# What a terminal would act on instead of showing: C0 and C1 control characters (ESC starts a
# sequence that can clear the screen or retitle the window) and the bidirectional formatting
# characters (U+202E turns the rest of the line around: a review or class name could spoof the text
# around it).
def _json(batches) -> None:
    opened = False
    for _, rows in _as_text(batches, json=True):
        for (record,) in rows:
            sys.stdout.write(",\n " if opened else "[\n ")
            sys.stdout.write(json_visible(_strict(record)))  # C1, DEL, bidi: escaped as well
            opened = True
    sys.stdout.write("\n]\n" if opened else "[]\n")


def _strict(record: str) -> str:
    """``record`` as strict JSON: each bare NaN, Infinity or -Infinity outside a string, at any depth,
    written as a string ("NaN", ...); strings untouched."""
    if "NaN" not in record and "Infinity" not in record:
        return record
    return JSON_TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else f'"{m.group(0)}"', record)


def _table(batches) -> None:
    names, shown, more, right = [], [], False, []
    for names, rows in _as_text(batches, keep_types=right):  # noqa: B007 (the last batch's names: every batch's)
        shown.extend(rows)
        if len(shown) > TABLE_ROWS:
            more = True
            break
    if not shown:
        print("(no rows)")
        return
    cells = [
        ["NULL" if value is None else visible(value.replace("\n", " ")) for value in row] for row in shown[:TABLE_ROWS]
    ]
    names = [visible(name) for name in names]
    widths = [max(len(name), *(len(row[k]) for row in cells)) for k, name in enumerate(names)]
    line = lambda values: "  ".join(  # noqa: E731
        value.rjust(width) if numeric else value.ljust(width) for value, width, numeric in zip(values, widths, right)
    ).rstrip()
    print(line(names))
    for row in cells:
        print(line(row))
    if more:
        print(f"(first {TABLE_ROWS} rows shown; --format csv or json prints every row)")


def _as_text(batches, json: bool = False, keep_types: list | None = None) -> Iterator[tuple[list[str], list[tuple]]]:
    """(column names, rows) for each Arrow batch or table, every value rendered by DuckDB: as VARCHAR
    (None for NULL), or with ``json`` one ``to_json`` object a row. ``keep_types`` gets, once,
    whether each column is a number (right-aligned in a table)."""
    import duckdb
    import pyarrow as pa

    from xai_ray.query.connection import QueryError
    from xai_ray.query.user_sql import quoted

    numbers = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)

    con = duckdb.connect(":memory:")  # formats rows already fetched: no store, no user SQL here
    for batch in batches:
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        names = table.schema.names
        if keep_types is not None and not keep_types:
            keep_types.extend(any(test(field.type) for test in numbers) for field in table.schema)
        con.register("shown", table.rename_columns([f"c{k}" for k in range(len(names))]))
        if json:  # named back here: a column may be called anything, a row alias included
            fields = ", ".join(f"{quoted(name)} := c{k}" for k, name in enumerate(_distinct(names)))
            query = f"select to_json(struct_pack({fields}))::varchar from shown"
        else:
            query = "select " + ", ".join(f"c{k}::varchar" for k in range(len(names))) + " from shown"
        try:
            rows = con.execute(query).fetchall()
        except duckdb.Error as err:  # the result's own value, not the store: say so
            detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise QueryError(f"a value of the query's result cannot be printed: {detail}") from None
        yield names, rows
        con.unregister("shown")


def _distinct(names: list[str]) -> list[str]:
    """A json object's keys: a name the result repeats gets _1, _2... as DuckDB names such columns."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        key = name
        while key.lower() in seen:
            seen[name.lower()] += 1
            key = f"{name}_{seen[name.lower()]}"
        seen[key.lower()] = 0
        seen.setdefault(name.lower(), 0)
        out.append(key)
    return out
