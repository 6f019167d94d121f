"""Writing a file so that readers see all of it or none: under a temporary name, flushed, renamed.

The one atomic-write helper of the project. Temporary names end in ``.tmp``, which the views'
``*.parquet`` globs never match and staging sweeps away; a failed write removes its temporary.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


@contextmanager
def replacing(path: str | Path, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename, on
    failure it is removed. ``durable`` flushes the file and its folder to disk (parts, manifests)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    try:
        yield temporary
        if durable:
            _fsync(temporary)
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):  # the original failure is the one to report
            temporary.unlink(missing_ok=True)
        raise
    if durable:
        _fsync(path.parent)


def write_atomically(path: str | Path, data: bytes | str, durable: bool = True) -> Path:
    """``data`` into ``path``, all or nothing (text is written as UTF-8)."""
    with replacing(path, durable) as temporary:
        temporary.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def write_parquet_atomically(path: str | Path, table: pa.Table, durable: bool = False, **options) -> Path:
    """One Parquet file, all or nothing; ``options`` go to ``pyarrow.parquet.write_table``."""
    with replacing(path, durable) as temporary:
        pq.write_table(table, temporary, **options)
    return Path(path)


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
