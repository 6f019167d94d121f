"""Writing a run: Parquet parts in staging, committed durably, published by one rename.

Partitioning by method and layer lets a top-k over one slice read few files; rows are buffered
so each part holds large row groups rather than many small ones. Parts are committed durably as
they fill (see ``staging``), so a killed run resumes where it stopped. A run appears under
``runs/`` by one directory rename, after its manifest is written: readers see all of it or none.
Where the files go is ``layout``'s business; what their columns are, ``schemas``'.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.store import StoreError
from xai_ray.store.files import write_atomically, write_parquet_atomically
from xai_ray.store.layout import MANIFEST, check_folders, run_dir, staging_dir
from xai_ray.store.records import PartRecord
from xai_ray.store.schemas import DOCS, ERRORS, FAITHFULNESS, HEAD_SIMILARITY, HEADS, LAYOUT
from xai_ray.store.staging import Staging, StagingError
from xai_ray.store.tables import PartTables, error_table, parquet_options, part_tables

ROW_GROUP_ROWS = 256_000


def check_store(store: str | Path) -> None:
    """Refuse, in one sentence, a store that is a file or cannot be written (read-only, full)."""
    store = Path(store)
    if store.exists() and not store.is_dir():
        raise StoreError(f"store {str(store)!r} is a file, not a folder; pass a folder with --store")
    check_folders(store)
    try:
        store.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=store):
            pass
    except OSError as err:  # a read-only or full file system: nothing was written
        raise StoreError(f"cannot write into store {str(store)!r}: {(err.strerror or str(err)).lower()}") from None


class RunWriter:
    """Writes one run's tables into staging in durable parts; ``publish`` moves the finished run into place.

    Rows are buffered and committed as a part (one file per table slice, then a record) every
    ``part_rows`` rows in the largest slice or ``part_seconds`` seconds, so files keep large row
    groups and a killed run loses at most one part's work. Opening a run id whose staging holds
    committed parts resumes it: ``done_ids`` are the documents those parts hold, and rows for
    them that arrive again (a retried Ray task) are dropped and counted as ``duplicates``.

    ``layout``: the store layout to write (``schemas.LAYOUT``; 1 only to compare with the previous
    one); a resumed run keeps the layout its committed parts were written in.
    """

    def __init__(
        self,
        store: str | Path,
        run_id: str,
        methods: list[str],
        identity: dict | None = None,
        part_rows: int = ROW_GROUP_ROWS,
        part_seconds: float = 300.0,
        totals=None,
        layout: int = LAYOUT,
    ) -> None:
        self.store, self.run_id, self.methods = Path(store), run_id, list(methods)
        check_store(store)
        if run_dir(store, run_id).exists():
            raise StoreError(f"run {run_id!r} already exists in store {str(store)!r}; pick another --run-id")
        self.staging = staging_dir(store, run_id)
        try:
            self.stage = Staging(self.staging, identity if identity is not None else {"methods": self.methods})
        except StagingError as err:
            raise StoreError(str(err)) from None
        except OSError as err:  # a read-only or full file system, a name too long: nothing was written
            raise StoreError(f"cannot write into store {str(store)!r}: {(err.strerror or str(err)).lower()}") from None
        self.part_rows, self.part_seconds = part_rows, part_seconds
        # parts of a run staged by an earlier version (no ``layout`` in their records) are layout 1
        scored = [record.get("layout", 1) for record in self.stage.records if record.get("n_layers")]
        self.layout = scored[0] if scored else layout
        self.slices: set[str] = set()
        self.shares: set[str] = set()  # layout 3: slices some part keeps shares of (scores_v3)
        self.counts = {"docs": 0, "errors": 0, "tokens": 0, "words": 0, "duplicates": 0}
        self.done_ids: set[str] = set()  # documents out of the scorer, committed or pending
        self.fingerprints: set[str] = set()
        self.n_layers: int | None = None
        self.read_errors_done = False
        # Run-wide sums over the rows written (e.g. head_summary.HeadTotals): kept per part in its
        # record, so a resumed run's sums cover every document exactly once.
        self.totals_class = totals
        self.totals = totals() if totals else None
        self.collected = {record["part"] for record in self.stage.records}
        for record in self.stage.records:
            self._count(record)
        self.reused = {"parts": len(self.stage.records), "docs": self.counts["docs"], "errors": self.counts["errors"]}
        self._clear_pending()

    def _count(self, record: dict) -> None:
        for key, value in record["counts"].items():
            self.counts[key] = self.counts.get(key, 0) + value
        self.done_ids.update(record["doc_ids"])
        self.fingerprints.update(record["fingerprints"])
        self.n_layers = self.n_layers or record.get("n_layers")
        self.slices.update(record.get("slices") or [])
        self.shares.update(record.get("shares") or [])
        self.read_errors_done = self.read_errors_done or record.get("read_errors", False)
        if self.totals is not None and record.get("totals"):
            self.totals.merge(self.totals_class.from_state(record["totals"]))

    def _clear_pending(self) -> None:
        self.pending = PartTables()
        self.pending_ids: list[str] = []
        self.pending_duplicates = 0
        self.pending_read_errors = False
        self.pending_totals = self.totals_class() if self.totals_class else None
        self.last_commit = time.monotonic()

    def write(self, rows: pa.Table) -> None:
        """Add one batch of scorer rows (see ``scoring.row_schema``); a document already written is dropped."""
        fresh = self._first_time(rows.column("doc_id").to_pylist())  # per document, not per score
        if len(fresh) < rows.num_rows:
            rows = rows.take(pa.array(fresh, pa.int64()))
        if rows.num_rows == 0:
            return
        if self.pending_totals is not None:
            self.pending_totals.add(rows)
        part_tables(rows, self.methods, into=self.pending, layout=self.layout)
        if self.pending.tables and (
            max(self.pending.rows().values()) >= self.part_rows
            or time.monotonic() - self.last_commit >= self.part_seconds
        ):
            self.commit()

    def _first_time(self, doc_ids: list[str]) -> list[int]:
        """Positions of the rows whose document was not written before (the others are counted)."""
        fresh = []
        for i, doc_id in enumerate(doc_ids):
            if doc_id in self.done_ids:
                self.pending_duplicates += 1
                continue
            self.done_ids.add(doc_id)
            self.pending_ids.append(doc_id)
            fresh.append(i)
        return fresh

    def write_errors(self, doc_ids: list[str], stage: str, reasons: list[str]) -> None:
        """Record rows that never reached the scorer (``stage`` 'read': bad text, duplicate id, ...)."""
        if stage == "read":
            if self.read_errors_done or self.pending_read_errors:
                return  # a resumed run re-reads the corpus; its read errors are in an earlier part
            self.pending_read_errors = True
        if doc_ids:
            self.pending.add("errors", error_table(list(doc_ids), stage, list(reasons)), "errors")

    def collect(self, record: dict) -> bool:
        """Count a part a Ray worker committed (``store.parts``); False when it is dropped.

        The same part delivered twice counts once. A part holding a document another part already
        holds (a block re-delivered under another grouping) is removed whole and its documents
        counted as ``duplicates``; any of its documents no other part holds then show up as lost
        (``pipeline.write`` records those as errors)."""
        if record["part"] in self.collected:
            return False
        unseen = [name for name in record["files"] if not (self.staging / name).is_file()]
        if unseen:
            raise StoreError(
                f"a part written on node {record.get('node')} is not in {str(self.staging)!r} as this process "
                f"sees it ({unseen[0]}); on a cluster of several machines, set shared_store=true only when "
                "every node mounts the store"
            )
        seen = [doc_id for doc_id in record["doc_ids"] if doc_id in self.done_ids]
        if seen:
            self.stage.drop(record)
            self.counts["duplicates"] += len(seen)
            return False
        self.collected.add(record["part"])
        self.stage.records.append(record)
        self._count(record)
        return True

    def commit(self) -> None:
        """Make everything written so far durable as one part (a no-op when nothing is pending)."""
        if not self.pending.tables and not self.pending_ids and not self.pending_duplicates:
            return
        counts = {**self.pending.counts, "duplicates": self.pending_duplicates}
        tables = self.pending.merged()
        record = PartRecord.of(
            tables,
            self.pending_ids,
            counts,
            self.layout,
            fingerprints=sorted(self.pending.fingerprints),
            n_layers=self.n_layers or self.pending.n_layers,
            read_errors=self.pending_read_errors,
            totals=self.pending_totals.state() if self.pending_totals is not None else None,
        )
        record = self.stage.commit(tables, record, ROW_GROUP_ROWS, parquet_options)
        self.slices.update(record["slices"])
        self.shares.update(record["shares"])
        self.collected.add(record["part"])
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        self.fingerprints.update(self.pending.fingerprints)
        self.n_layers = self.n_layers or self.pending.n_layers
        self.read_errors_done = self.read_errors_done or self.pending_read_errors
        if self.totals is not None:
            self.totals.merge(self.pending_totals)
        self._clear_pending()

    def write_whole(self, name: str, table: pa.Table) -> None:
        """A small table computed over the whole run (``heads``, ``head_similarity``), written just
        before ``publish`` (a resumed run recomputes it: it belongs to no part)."""
        schema = {"heads": HEADS, "head_similarity": HEAD_SIMILARITY}[name]
        write_parquet_atomically(self.staging / name / "part-whole.parquet", table.cast(schema))
        self.counts[name] = table.num_rows

    def publish(self, manifest: dict) -> Path:
        """Commit the last part, write the manifest, and move the run into ``runs/`` in one rename."""
        self.commit()
        for table, schema in (("docs", DOCS), ("errors", ERRORS)):
            if not any((self.staging / table).glob("part-*.parquet")):  # empty tables still exist for the views
                (self.staging / table).mkdir(exist_ok=True)
                pq.write_table(schema.empty_table(), self.staging / table / "part-empty.parquet")
        manifest = {**manifest, "run_id": self.run_id, "counts": dict(self.counts)}
        if self.layout > 1:  # layout 1's manifests had no such key: readers take its absence as 1
            manifest.update(store_layout=self.layout, slices=sorted(self.slices, key=_slice_order))
        if self.layout > 2:
            manifest.update(shares=sorted(self.shares, key=_slice_order))
        write_atomically(self.staging / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str).encode())
        target = run_dir(self.store, self.run_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.staging, target)
        (target / ".lock").unlink(missing_ok=True)
        self.stage.close()
        return target

    def abort(self, keep_parts: bool = False) -> None:
        """Stop writing: drop what is not committed; with ``keep_parts`` the committed parts stay
        in staging for a resume, else the whole staging folder goes."""
        self._clear_pending()
        self.stage.close()
        if not keep_parts:
            shutil.rmtree(self.staging, ignore_errors=True)


def _slice_order(name: str) -> tuple[str, int]:
    method, layer = name.split(":")
    return method, int(layer)


def faithfulness_tables(scored: list[dict]) -> tuple[pa.Table, pa.Table]:
    """Scorer rows -> (faithfulness rows, ``evaluate`` error rows) in the store's schemas."""
    failed = [r for r in scored if r.get("evaluate_error")]
    errors = pa.table(
        {
            "doc_id": [r["doc_id"] for r in failed],
            "stage": ["evaluate"] * len(failed),
            "reason": [r["evaluate_error"] for r in failed],
        },
        schema=ERRORS,
    )
    metrics = [(r["doc_id"], m) for r in scored for m in r.get("faithfulness") or []]
    table = pa.table(
        {
            "doc_id": [doc_id for doc_id, _ in metrics],
            "method": [m["method"] for _, m in metrics],
            "layer": [m["layer"] for _, m in metrics],
            "metric": [m["metric"] for _, m in metrics],
            "value": [m["value"] for _, m in metrics],
        },
        schema=FAITHFULNESS,
    )
    return table, errors


def add_faithfulness(store: str | Path, run_id: str, metrics: pa.Table, errors: pa.Table, manifest: dict) -> Path:
    """Add an after-the-fact evaluation to a published run: its error rows, then the metrics
    (appearing by one rename, so readers see all of them or none), then the updated manifest."""
    run = run_dir(store, run_id)
    if (run / "faithfulness").exists():
        raise StoreError(f"run {run_id!r} already has faithfulness metrics")
    if errors.num_rows:
        write_parquet_atomically(run / "errors" / "part-evaluate.parquet", errors)
    staging = run / "_faithfulness.tmp"  # not read by the views: they read faithfulness/ only
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    pq.write_table(
        metrics.cast(FAITHFULNESS), staging / "part-0.parquet", compression="zstd", row_group_size=ROW_GROUP_ROWS
    )
    os.rename(staging, run / "faithfulness")
    write_atomically(run / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str).encode())
    return run / "faithfulness"
