"""A run's staging folder: durable parts, each made real by one small record, so a killed run resumes.

Layout (private, like the rest of the store's; ``store`` is its only user)::

    STORE/_staging/run_id=<id>/identity.json                 what shapes the run's outputs (checked on resume)
    STORE/_staging/run_id=<id>/_parts/part-<key>.json          one record per committed part: files, doc ids, counts
    STORE/_staging/run_id=<id>/<table>/.../part-<key>.parquet  the part's rows, one file per table slice
    STORE/_staging/run_id=<id>/.lock                           held (flock) by the one process driving the run

A part's key is a number for parts the driver writes itself, and for parts written by Ray workers
(``store.parts``) a name derived from what the part holds, so a block written twice (a retried
task) lands on the same files. A part's Parquet files are written under temporary names (``*.tmp``:
never matched by the views' ``*.parquet``) and renamed into place; then its record is written the
same way. A part exists only once its record does: on opening, every file no record names is
removed. A kill at any moment therefore leaves a whole committed part or nothing of it, and the
lock, being an ``flock``, dies with its process. Workers never take the lock: the driver holds it
for them while the run lasts.
"""

from __future__ import annotations

import fcntl
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from xai_ray.config import local_path
from xai_ray.store.files import write_atomically, write_parquet_atomically
from xai_ray.store.records import PartRecord

PARTS = "_parts"
log = logging.getLogger("xai_ray")
FILE_THREADS = 4


class StagingError(RuntimeError):
    """Staging cannot be used as asked; the message says why (``store`` turns it into a StoreError)."""


# Identity keys of what a run reads rather than of its settings (``pipeline.pool.source_state``)
CONTENT_KEYS = {"model_files": "model folder", "data_files": "corpus files"}


class Staging:
    """The staging folder of one run, opened for writing: locked, swept, its committed parts read."""

    def __init__(self, folder: Path, identity: dict) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._lock = open(folder / ".lock", "a+")  # noqa: SIM115  (held for the writer's lifetime)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StagingError(f"another process is writing {folder.name} right now; wait for it or stop it") from None
        self._check_identity(identity)
        self.records = self._read_records()
        self._sweep()
        self.next_part = max((r["part"] for r in self.records if isinstance(r["part"], int)), default=-1) + 1

    def _check_identity(self, identity: dict) -> None:
        path = self.folder / "identity.json"
        identity = json.loads(json.dumps(identity, default=str))  # as it reads back from JSON
        if path.is_file():
            kept = _read_identity(path)
            if kept is None:
                self.close()
                raise StagingError(
                    f"the unfinished {self.folder.name} cannot be resumed: {path} is damaged (not a JSON mapping of "
                    "its settings), so a changed setting could not be told; restore it, or start a new run with "
                    "another --run-id"
                )
            # a key the first attempt did not record (an older version's staging) is not compared
            changed = sorted(k for k in kept if not _same_setting(k, kept.get(k), identity.get(k)))
            files = [k for k in changed if k in CONTENT_KEYS]
            settings = [k for k in changed if k not in CONTENT_KEYS]
            if settings:
                self.close()
                raise StagingError(
                    f"the unfinished {self.folder.name} was started with other settings ({', '.join(settings)}); "
                    "a run keeps its first settings: resume it without changing them (`xai-ray run --resume "
                    "RUN_ID`), or start a new run with another --run-id"
                )
            if files:
                self.close()
                what = " and ".join(CONTENT_KEYS[k] for k in files)
                raise StagingError(
                    f"the {what} of the unfinished {self.folder.name} changed since it started (file sizes or "
                    "times): its parts would mix two versions; restore them, or start a new run with another --run-id"
                )
            return
        write_atomically(path, json.dumps(identity, indent=2, sort_keys=True).encode())

    def _read_records(self) -> list[dict]:
        """The committed parts, less any that cannot count: a record that does not read as one (cut
        short, edited) or that names a file which is gone or not a whole Parquet file. Such a part is
        removed (its files then too, by ``_sweep``), so its documents are scored again."""
        records = []
        for path in sorted((self.folder / PARTS).glob("part-*.json")):
            record = read_record(path)
            damaged = ["its record"] if record is None else unreadable_files(self.folder, record)
            damaged = damaged or [f"{name} ({size} bytes, not the {kept} written)" for name, size, kept in
                                  resized_files(self.folder, record)]  # fmt: skip
            if damaged:
                log.warning(
                    "%s: %s of %s cannot be read; the part is dropped and its documents are scored again",
                    self.folder.name,
                    ", ".join(damaged),
                    path.stem,
                )
                path.unlink(missing_ok=True)
                continue
            records.append(record)
        return sorted(records, key=_order)

    def _sweep(self) -> None:
        """Remove what a killed writer left half done: temporary files and parts without a record."""
        committed = {name for record in self.records for name in record["files"]}
        for path in sorted(self.folder.rglob("*")):
            if not path.is_file():
                continue
            relative = path.relative_to(self.folder).as_posix()
            if path.name.endswith(".tmp") or (path.name.endswith(".parquet") and relative not in committed):
                path.unlink()

    def commit(self, tables: dict[str, pa.Table], record: PartRecord, row_group_rows: int, options=None) -> dict:
        """Write one part: ``tables`` maps a slice folder (e.g. ``tokens/method=raw/layer=1``) to its rows."""
        record = commit_part(self.folder, self.next_part, tables, record, row_group_rows, options)
        self.records.append(record)
        self.next_part += 1
        return record

    def drop(self, record: dict) -> None:
        """Remove a part that must not count (a block delivered again under another grouping)."""
        remove_part(self.folder, record)

    def close(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()


def commit_part(
    folder: Path, key, tables: dict[str, pa.Table], record: PartRecord, row_group_rows: int, options=None
) -> dict:
    """Write one part into the staging ``folder``: its files, then its record (which makes it real).
    Called by the driver (numbered parts) and by Ray workers (named parts) alike. ``options``: the
    Parquet writer's, or a function of the table giving them."""
    paths = {where: folder / where / f"part-{key}.parquet" for where in sorted(tables)}

    def one(where: str) -> None:
        table = tables[where]
        chosen = {"compression": "zstd", "row_group_size": row_group_rows}
        chosen.update((options(table) if callable(options) else options) or {})  # may set its own row groups
        write_parquet_atomically(paths[where], table, durable=True, **chosen)

    # A few files at once: Parquet encoding and fsync release the GIL, so one file's wait for the
    # disk overlaps the next one's encoding. The record is written only when every file is durable.
    with ThreadPoolExecutor(max_workers=FILE_THREADS) as pool:
        list(pool.map(one, paths))
    files = [path.relative_to(folder).as_posix() for path in paths.values()]
    # each file's size: a sibling part copied over one keeps the magic bytes and an id range inside
    # the record's, and is then told by its size (``resized_files``)
    sizes = {name: path.stat().st_size for name, path in zip(files, paths.values())}
    record = {**record.as_json(), "part": key, "files": files, "sizes": sizes}
    write_atomically(folder / PARTS / f"part-{key}.json", json.dumps(record).encode())
    return record


def remove_part(folder: Path, record: dict) -> None:
    """Take a committed part back: its record first (so it stops counting), then its files."""
    (folder / PARTS / f"part-{record['part']}.json").unlink(missing_ok=True)
    for name in record["files"]:
        (folder / name).unlink(missing_ok=True)


def read_committed_ids(folder: Path) -> list[str]:
    """The documents the committed parts of a staging folder hold (read without the lock: what a
    resumed run will not score again). A part the run's own open will drop (``Staging._read_records``)
    holds none: its documents are scored again."""
    ids: list[str] = []
    for path in sorted((folder / PARTS).glob("part-*.json")):
        record = read_record(path)
        if record is not None and not unreadable_files(folder, record) and not resized_files(folder, record):
            ids.extend(str(doc_id) for doc_id in record["doc_ids"])
    return ids


def _same_setting(key: str, kept, now) -> bool:
    """Equal, or a corpus or model path an older version kept as typed (relative) that names the
    file or folder now given as an absolute path (``config.absolute_paths``)."""
    return kept == now or (key in ("data", "model") and isinstance(kept, str) and local_path(kept) == now)


def _read_identity(path: Path) -> dict | None:
    """A staging's identity.json, or None where it is not a non-empty JSON mapping (edited, cut short)."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and kept else None


def read_record(path: Path) -> dict | None:
    """A part's record, or None where the file is not one (cut short, not JSON, fields missing)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    shaped = (
        isinstance(record, dict)
        and isinstance(record.get("files"), list)
        and isinstance(record.get("doc_ids"), list)
        and isinstance(record.get("part"), (int, str))
    )
    return record if shaped else None


def unreadable_files(folder: Path, record: dict) -> list[str]:
    """The files ``record`` names (relative to ``folder``) that are gone or are not whole Parquet
    files: a complete one ends with the magic bytes ``PAR1``, which a cut-short copy lacks."""
    bad = []
    for name in record["files"]:
        path = folder / str(name)
        try:
            with open(path, "rb") as file:
                file.seek(-4, 2)
                whole = file.read(4) == b"PAR1"
        except OSError:  # gone, a folder, or shorter than 4 bytes
            whole = False
        if not whole:
            bad.append(str(name))
    return bad


def resized_files(folder: Path, record: dict) -> list[tuple[str, int, int]]:
    """(file, its size, the size written) for each file ``record`` names whose size is not the one
    its part wrote (``commit_part`` records them; a record without sizes, an older one, says nothing)."""
    sizes = record.get("sizes")
    if not isinstance(sizes, dict):
        return []
    changed = []
    for name in record["files"]:
        kept = sizes.get(str(name))
        try:
            size = (folder / str(name)).stat().st_size
        except OSError:  # gone: unreadable_files names it
            continue
        if type(kept) is int and size != kept:
            changed.append((str(name), size, kept))
    return changed


def _order(record: dict):
    """Numbered parts in number order, then named parts by name."""
    part = record["part"]
    return (0, part, "") if isinstance(part, int) else (1, 0, str(part))
