"""A run's staging folder: durable parts, each made real by one small record, so a killed run resumes.

Layout (private, like the rest of the store's; ``store`` is its only user)::

    STORE/_staging/run_id=<id>/identity.json                 what shapes the run's outputs (checked on resume)
    STORE/_staging/run_id=<id>/_parts/part-<n>.json          one record per committed part: files, doc ids, counts
    STORE/_staging/run_id=<id>/<table>/.../part-<n>.parquet  the part's rows, one file per table slice
    STORE/_staging/run_id=<id>/.lock                         held (flock) by the one process writing the run

A part's Parquet files are written under temporary names (``*.parquet.tmp``: never matched by the
views' ``*.parquet``) and renamed into place; then its record is written the same way. A part
exists only once its record does: on opening, every file no record names is removed. A kill at any
moment therefore leaves a whole committed part or nothing of it, and the lock, being an ``flock``,
dies with its process.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pyarrow as pa

from xai_ray.store.files import write_atomically, write_parquet_atomically

PARTS = "_parts"


class StagingError(RuntimeError):
    """Staging cannot be used as asked; the message says why (``store`` turns it into a StoreError)."""


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
        self.next_part = max((r["part"] for r in self.records), default=-1) + 1

    def _check_identity(self, identity: dict) -> None:
        path = self.folder / "identity.json"
        identity = json.loads(json.dumps(identity, default=str))  # as it reads back from JSON
        if path.is_file():
            kept = json.loads(path.read_text())
            changed = sorted(k for k in set(kept) | set(identity) if kept.get(k) != identity.get(k))
            if changed:
                self.close()
                raise StagingError(
                    f"the unfinished {self.folder.name} was started with other settings ({', '.join(changed)}); "
                    "finish it with `xai-ray run --resume RUN_ID`, or pick another --run-id"
                )
            return
        write_atomically(path, json.dumps(identity, indent=2, sort_keys=True).encode())

    def _read_records(self) -> list[dict]:
        records = []
        for path in sorted((self.folder / PARTS).glob("part-*.json")):
            records.append(json.loads(path.read_text()))
        return sorted(records, key=lambda r: r["part"])

    def _sweep(self) -> None:
        """Remove what a killed writer left half done: temporary files and parts without a record."""
        committed = {name for record in self.records for name in record["files"]}
        for path in sorted(self.folder.rglob("*")):
            if not path.is_file():
                continue
            relative = path.relative_to(self.folder).as_posix()
            if path.name.endswith(".tmp") or (path.name.endswith(".parquet") and relative not in committed):
                path.unlink()

    def commit(self, tables: dict[str, pa.Table], record: dict, row_group_rows: int) -> dict:
        """Write one part: ``tables`` maps a slice folder (e.g. ``tokens/method=raw/layer=1``) to its rows."""
        number = self.next_part
        files = []
        for folder, table in sorted(tables.items()):
            path = self.folder / folder / f"part-{number}.parquet"
            write_parquet_atomically(path, table, durable=True, compression="zstd", row_group_size=row_group_rows)
            files.append(path.relative_to(self.folder).as_posix())
        record = {**record, "part": number, "files": files}
        write_atomically(self.folder / PARTS / f"part-{number}.json", json.dumps(record).encode())
        self.records.append(record)
        self.next_part += 1
        return record

    def close(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
