"""SQL a user typed (``xai-ray sql``, ``open_store`` in a notebook): refused unless it only reads
(``guard`` looks inside EXPLAIN, WITH, PIVOT and the like), run under a timeout, streamed in
record batches so a large result never sits whole in memory. ``isolated`` runs it this way in a
child process under a memory cap."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import duckdb
import pyarrow as pa

from xai_ray.query.connection import QueryError
from xai_ray.query.guard import RefusedStatement, check_reads
from xai_ray.terminal import undecodable


def check_read_only(con, text: str) -> list:
    """Refuse ``text`` unless every statement in it only reads (``guard`` looks inside EXPLAIN, WITH,
    PIVOT and the like); returns its statements."""
    if undecodable(text):  # undecodable command-line bytes: DuckDB's parser raised a TypeError
        raise QueryError(f"the query is not valid UTF-8: {undecodable(text)}")
    try:
        statements = con.extract_statements(text)
        check_reads(con, text)
    except RefusedStatement as err:
        raise QueryError(
            f"xai-ray sql runs read-only queries (select, with, from, pivot, describe, show, "
            f"summarize, explain of those); refused {err}"
        ) from None
    except duckdb.Error as err:
        raise QueryError(str(err).splitlines()[0]) from None
    return statements


def run_sql(con, text: str, timeout_s: float | None = None):
    """User SQL (guarded, see ``stream_sql``) as one pandas DataFrame."""
    import pandas as pd

    frames = list(stream_sql(con, text, timeout_s))
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def stream_sql(con, text: str, timeout_s: float | None = None, batch_rows: int = 10_000) -> Iterator:
    """User SQL as pandas DataFrames of at most ``batch_rows`` rows (at least one, maybe empty)."""
    for batch in stream_arrow(con, text, None, timeout_s, batch_rows):
        yield batch.to_pandas()


def stream_arrow(con, text: str, params=None, timeout_s: float | None = None, batch_rows: int = 10_000) -> Iterator:
    """User SQL as Arrow record batches of at most ``batch_rows`` rows (at least one, maybe empty).

    Only statements the guard finds to read run; each runs until ``timeout_s`` seconds have
    passed, counted from its start to its last row, then ``con.interrupt()`` stops it. ``params``
    (a list or a dict) are bound to the last statement.
    """
    statements = check_read_only(con, text)
    if not statements:
        raise QueryError("the query is empty")
    # Every statement only reads, so the ones before the last change nothing: the last one prints.
    reader = None
    try:
        with limited(con, timeout_s):
            relation = con.sql(statements[-1].query, params=params)
            if relation is None:
                raise QueryError("the statement returned no rows to print")
            reader = as_text_where_arrow_differs(relation).to_arrow_reader(batch_rows)
            yield from batches_or_empty(reader)
    finally:
        if reader is not None:
            reader.close()


# DuckDB types whose Arrow form is not their value: UHUGEINT's largest read back as -1, BIT as its
# bytes, TIMETZ without its offset. Such a column (or one holding them: a list of BIT) travels as
# DuckDB's text of it. HUGEINT (what sum() of integers gives) stays a number.
ARROW_DIFFERS = frozenset({"uhugeint", "bit", "time with time zone"})
NESTED = frozenset({"struct", "list", "array", "map", "union"})


def arrow_differs(kind) -> bool:
    """Whether a DuckDB type is, or holds, one of ``ARROW_DIFFERS`` (read from the type, not its
    text: a struct's field may be called BIT)."""
    if kind.id in ARROW_DIFFERS:
        return True
    return kind.id in NESTED and any(arrow_differs(child) for _, child in kind.children)


def as_text_where_arrow_differs(relation):
    """``relation`` with each column of a type ``arrow_differs`` cast to VARCHAR, in place and under
    its own name (positions, not names: a result may name two columns alike)."""
    differs = [arrow_differs(kind) for kind in relation.types]
    if not any(differs):
        return relation
    columns = [
        f"#{i}{'::VARCHAR' if cast else ''} AS {quoted(name)}"
        for i, (name, cast) in enumerate(zip(relation.columns, differs), start=1)
    ]
    return relation.project(", ".join(columns))


def quoted(name: str) -> str:
    """``name`` as a SQL identifier (a column may be called anything)."""
    return '"' + name.replace('"', '""') + '"'


def batches_or_empty(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """The reader's batches, or one empty batch of its schema: a result with no rows still has columns."""
    empty = True
    for batch in reader:
        empty = False
        yield batch
    if empty:
        yield pa.RecordBatch.from_pylist([], schema=reader.schema)


@contextlib.contextmanager
def limited(con, timeout_s: float | None):
    """Run the block under ``timeout_s`` (``con.interrupt()`` from a timer); DuckDB's errors come
    out as one sentence (the timeout and the memory limit named)."""
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        con.interrupt()

    timer = threading.Timer(timeout_s, stop) if timeout_s else None
    try:
        if timer:
            timer.start()
        yield
    except (duckdb.Error, OSError) as err:  # an interrupted Arrow stream raises OSError
        if fired.is_set():
            raise QueryError(f"the query ran past --timeout {timeout_s:g} s and was stopped") from None
        if isinstance(err, duckdb.OutOfMemoryException):
            limit = con.execute("select current_setting('memory_limit')").fetchone()[0]
            raise QueryError(
                f"the query needs more memory than --memory-limit allows (now {limit}); raise it, "
                "or select fewer rows or columns"
            ) from None
        if type(err) is duckdb.Error or isinstance(err, duckdb.InternalException):
            raise DamagedRead(f"DuckDB failed reading the store ({str(err).strip()[:200]}): a damaged file?") from None
        raise QueryError(str(err).splitlines()[0]) from None
    finally:
        if timer:
            timer.cancel()


class DamagedRead(QueryError):
    """DuckDB failed while reading with an error of no kind (``duckdb.Error`` itself, or internal):
    what a page damaged inside a file whose footer reads gives ("don't know what type")."""
