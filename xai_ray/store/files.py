"""Writing a file so that readers see all of it or none: into a fresh temporary file, flushed, renamed.

The one atomic-write helper of the project, for the store's files and the pages users name
(``report --out``, ``explain --out``). The temporary file is created beside its target with
``O_EXCL | O_NOFOLLOW`` under a name no one can guess (``.<name>.<random>.tmp``), so nothing
planted there beforehand (a symbolic link, a FIFO) is ever opened or written through; it is
written through the descriptor that created it and renamed onto the target, which replaces the
target's directory entry and never writes into what was there. A target that exists and is not
a regular file (a folder, a device, a FIFO, a socket, a symbolic link) is refused: renaming over
it would destroy it. Temporary names end in ``.tmp``, which the views' ``*.parquet`` globs never
match and staging sweeps away; a failed write removes its temporary.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)
NAME_BYTES = 200  # of the target's name kept in the temporary's: it must fit in 255 bytes too


def not_regular(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``"a FIFO"``, ...), else None.

    The path itself is examined (``lstat``): a symbolic link is a link, whatever it points at."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:  # missing, or unreachable: the write itself says why
        return None
    return next((kind for test, kind in KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


@contextmanager
def replacing(path: str | Path, durable: bool = False) -> Iterator[BinaryIO]:
    """Yield a binary file created exclusively beside ``path``; on success it replaces ``path`` in
    one rename, on failure it is removed. ``durable`` flushes the file and its folder to disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = not_regular(path)
    if kind is not None:
        raise FileExistsError(errno.EEXIST, f"it is {kind}, not a regular file; it was left as it is", str(path))
    temporary, descriptor = _create_beside(path)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with suppress(OSError):  # the original failure is the one to report
            temporary.unlink(missing_ok=True)
        raise
    if durable:
        _fsync(path.parent)


def _create_beside(path: Path) -> tuple[Path, int]:
    """A new file in ``path``'s folder, created by this call (never an existing name or a link)."""
    stem = os.fsencode(path.name)[:NAME_BYTES].decode("utf-8", "ignore")
    while True:
        temporary = path.with_name(f".{stem}.{secrets.token_hex(8)}.tmp")
        try:
            # 0o666 less the umask: the page gets the permissions a plain write would give it
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            return temporary, os.open(temporary, flags, 0o666)
        except FileExistsError:  # 64 random bits taken already: draw again
            continue


def write_atomically(path: str | Path, data: bytes | str, durable: bool = True) -> Path:
    """``data`` into ``path``, all or nothing (text is written as UTF-8)."""
    with replacing(path, durable) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def write_parquet_atomically(path: str | Path, table: pa.Table, durable: bool = False, **options) -> Path:
    """One Parquet file, all or nothing; ``options`` as ``write_parquet``'s."""
    with replacing(path, durable) as handle:
        write_parquet(table, handle, **options)
    return Path(path)


def write_parquet(table: pa.Table, sink, row_groups: list[int] | None = None, **options) -> None:
    """``table`` as Parquet into ``sink``; ``options`` go to ``pyarrow.parquet.write_table``.
    ``row_groups``: the rows of each row group in turn (they add up to the table's), so rows
    that a filter keeps or skips together sit in groups of their own."""
    if row_groups is None:
        pq.write_table(table, sink, **options)
        return
    options.pop("row_group_size", None)
    with pq.ParquetWriter(sink, table.schema, **options) as writer:
        start = 0
        for rows in row_groups:
            if rows:
                writer.write_table(used_entries(table.slice(start, rows)), row_group_size=rows)
            start += rows


def used_entries(table: pa.Table) -> pa.Table:
    """``table`` with each dictionary column's dictionaries cut to the entries its rows use. The
    writer stores a row group's dictionary whole: a small group sliced from a part would repeat
    every token of the part (layout 3's runs of rows: its token, word and joined columns took 1.7x
    the bytes). A count per entry and a running sum: no string is hashed."""
    columns = []
    for column in table.columns:
        if not pa.types.is_dictionary(column.type):
            columns.append(column)
            continue
        chunks = []
        for chunk in column.chunks:
            indices = chunk.indices.fill_null(0).to_numpy(zero_copy_only=False)  # (rows,)
            null = chunk.is_null().to_numpy(zero_copy_only=False)  # (rows,) a null's index uses nothing
            used = np.bincount(indices[~null], minlength=len(chunk.dictionary)) > 0  # (entries,)
            if not used.any():  # every row null (or none): an empty dictionary
                empty = pa.nulls(len(chunk), column.type.index_type)
                chunks.append(pa.DictionaryArray.from_arrays(empty, chunk.dictionary[:0]))
                continue
            kept = np.cumsum(used) - 1  # (entries,) each used entry's place among the used
            remapped = pa.array(kept[indices], mask=null, type=column.type.index_type)
            chunks.append(pa.DictionaryArray.from_arrays(remapped, chunk.dictionary.filter(pa.array(used))))
        columns.append(pa.chunked_array(chunks, type=column.type))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
