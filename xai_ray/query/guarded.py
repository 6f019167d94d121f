"""An in-process connection to a store that only reads, for the notebook's ``Run``.

``connection.open_store`` sandboxes its DuckDB connection to the store's own Parquet files, but
DuckDB's ``allowed_paths`` grants writing as well as reading: ``COPY ... TO`` one of those files
would replace it. The command line's user SQL passes the statement guard first (``guard``); the
``Run`` object's own queries, fixed text with bound values, pass it here too, and the object holds
no DuckDB connection among its attributes for a notebook user to find by tab completion.
"""

from __future__ import annotations

import pandas as pd

from xai_ray.query.guard import check_reads


class GuardedReader:
    """``execute(text, params).df()`` over a sandboxed store connection, each statement judged by
    the statement guard first (a statement that writes raises ``guard.RefusedStatement``)."""

    __slots__ = ("_read",)

    def __init__(self, con) -> None:
        def read(text: str, params) -> pd.DataFrame:
            check_reads(con, text)
            return con.execute(text, params).df()

        self._read = read  # the connection lives in this closure only

    def execute(self, text: str, params=None) -> Rows:
        return Rows(self._read(text, params))

    def __repr__(self) -> str:
        return "<xai-ray guarded store reader>"


class Rows:
    """A query's rows, already read: ``df()`` as a DuckDB result gives them."""

    __slots__ = ("_frame",)

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    def df(self) -> pd.DataFrame:
        return self._frame
