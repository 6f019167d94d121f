"""The statement guard of user SQL: a statement runs only when DuckDB's own parser says it reads.

Decided by what each statement does, looking inside wrappers, never by how its text starts:

- ``SELECT`` (DuckDB's type for select, with, from, values, table, describe, show, summarize and
  a pivot with its values listed) reads;
- ``EXPLAIN`` and ``EXPLAIN ANALYZE`` (which runs its statement) read when the statement inside
  does: the wrapper is taken off at the parser's token offsets and the rest is judged again;
- ``MULTI`` is what the parser makes of a pivot whose columns come from the data (it creates an
  enum type of the values first, in memory): it reads when its query, wrappers off, starts as a
  query does and holds no keyword of a statement that writes or changes settings;
- anything else (COPY, EXPORT, ATTACH, SET, CALL, PRAGMA, INSERT, CREATE, ...) is refused, and
  so is a wrapper around it.

The connection's sandbox (``query.open_store``) keeps every other file out of reach: it can open
only the store's own Parquet files, by exact path. For those files the guard is the only wall:
DuckDB's ``allowed_paths`` grants writing too, and ``COPY ... (use_tmp_file false)`` onto a part
would replace it.
"""

from __future__ import annotations

import duckdb

READS = ("SELECT",)
# Keywords that begin a statement which writes, loads or changes settings: none of them can
# appear as a keyword inside a query (in strings and quoted names they are not keywords).
WRITES = frozenset(
    {
        "alter",
        "analyze",
        "attach",
        "call",
        "checkpoint",
        "copy",
        "create",
        "deallocate",
        "delete",
        "detach",
        "drop",
        "execute",
        "export",
        "import",
        "insert",
        "install",
        "load",
        "merge",
        "pragma",
        "prepare",
        "reset",
        "set",
        "truncate",
        "update",
        "use",
        "vacuum",
    }
)
QUERY_STARTS = frozenset(
    {"select", "with", "from", "pivot", "pivot_wider", "unpivot", "pivot_longer", "values", "table", "("}
)
MAX_DEPTH = 8


class RefusedStatement(ValueError):
    """A statement that does more than read; the message names what it is."""


def check_reads(con: duckdb.DuckDBPyConnection, text: str) -> None:
    """Raise ``RefusedStatement`` unless every statement of ``text`` only reads."""
    for statement in con.extract_statements(text):
        _check(con, statement.query, _kind(statement), 0)


def _kind(statement) -> str:
    """The statement's type name; one this DuckDB's Python enum lacks (``UPDATE EXTENSIONS`` is
    number 29 to the parser and nothing to the enum) is named by its first two words and refused."""
    try:
        return statement.type.name
    except ValueError:
        words = [word for _, _, word in _tokens(statement.query)[:2]]
        return " ".join(words).upper() or "UNKNOWN"


def _check(con, query: str, kind: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise RefusedStatement(f"statement nests more than {MAX_DEPTH} wrappers")
    if kind in READS:
        return
    if kind == "EXPLAIN":
        inner = unwrap_explain(query)
        statements = con.extract_statements(inner)
        if len(statements) != 1:
            raise RefusedStatement("EXPLAIN wraps more than one statement")
        try:
            _check(con, statements[0].query, _kind(statements[0]), depth + 1)
        except RefusedStatement as err:
            raise RefusedStatement(f"EXPLAIN of {err}") from None
        return
    if kind == "MULTI" and _is_pivot_query(query):
        return
    if kind == "LOAD" and _tokens(query)[:1] and _tokens(query)[0][2] == "install":
        kind = "INSTALL"  # the parser's LOAD type holds INSTALL too
    raise RefusedStatement(f"{'an' if kind[0] in 'AEIOU' else 'a'} {kind} statement")


def _tokens(query: str) -> list[tuple[int, str, str]]:
    """(offset, kind, lower-case text) of each token that is not a comment."""
    found = duckdb.tokenize(query)
    ends = [offset for offset, _ in found[1:]] + [len(query)]
    return [
        (offset, kind.name, query[offset:end].strip().lower())
        for (offset, kind), end in zip(found, ends)
        if kind.name != "comment"
    ]


def unwrap_explain(query: str) -> str:
    """The statement an ``EXPLAIN [ANALYZE | (options)]`` wraps, cut at the parser's token offsets."""
    tokens = _tokens(query)
    if not tokens or tokens[0][2] != "explain":
        raise RefusedStatement("an EXPLAIN statement the guard cannot take apart")
    rest = tokens[1:]
    if rest and rest[0][2] == "analyze":
        rest = rest[1:]
    elif rest and rest[0][2] == "(":  # EXPLAIN (ANALYZE, FORMAT json) ...: skip to the closing bracket
        depth = 0
        for i, (_, _, word) in enumerate(rest):
            depth += word.count("(") - word.count(")")
            if depth == 0:
                rest = rest[i + 1 :]
                break
        else:
            raise RefusedStatement("an EXPLAIN statement the guard cannot take apart")
    if not rest:
        raise RefusedStatement("an EXPLAIN statement without a statement inside")
    return query[rest[0][0] :]


def _is_pivot_query(query: str) -> bool:
    tokens = _tokens(query)
    if tokens and tokens[0][2] == "explain":
        tokens = _tokens(unwrap_explain(query))
    if not tokens or tokens[0][2] not in QUERY_STARTS:
        return False
    keywords = {word for _, kind, word in tokens if kind == "keyword"}
    return bool(keywords & {"pivot", "pivot_wider", "unpivot", "pivot_longer"}) and not keywords & WRITES
