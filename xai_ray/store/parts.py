"""Parts written where the rows are: a Ray worker turns a block of scorer rows into one committed part.

The driver never sees the rows: each worker writes its block's tables into the run's staging
(``tables``: Arrow column by column) and commits them with a record (``staging.commit_part``);
the record (document ids, counts, head sums, the node that wrote it) is all that travels back.
A part's key is derived from the documents it holds, so a block written again (a retried task)
overwrites its own files and record instead of adding a second copy; the driver drops a record
whose documents another part already holds (``RunWriter.collect``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from xai_ray.store.heap import keep_freed_memory
from xai_ray.store.layout import staging_dir
from xai_ray.store.records import PartRecord
from xai_ray.store.schemas import LAYOUT
from xai_ray.store.staging import commit_part
from xai_ray.store.tables import error_table, parquet_options, part_tables, stage_seconds

ROW_GROUP_ROWS = 256_000


def part_key(doc_ids: list[str], prefix: str = "w") -> str:
    """A part's name from the documents it holds (in order): the same block, the same part."""
    digest = hashlib.sha256("\x00".join(doc_ids).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}{digest[:24]}"


class PartWriter:
    """Writes blocks of scorer rows into one run's staging folder, one committed part per block.

    ``totals``: a class summing run-wide statistics per part (``methods.head_summary.HeadTotals``),
    or None. ``layout``: the store layout the run is written in (``RunWriter.layout``). Stateless
    between blocks, so any worker on any node (that sees the store) can hold one.
    """

    def __init__(self, store: str | Path, run_id: str, methods: list[str], totals=None, layout: int = LAYOUT) -> None:
        keep_freed_memory()  # a worker writing part after part reuses its pages (store.heap)
        self.folder = staging_dir(store, run_id)
        self.methods = list(methods)
        self.totals_class = totals
        self.layout = layout

    def write(self, rows: pa.Table, node: str | None = None) -> dict | None:
        """Commit ``rows`` (scorer rows; a document twice in the block is kept once) as one part;
        returns its record, or None for an empty block."""
        if rows.num_rows == 0:
            return None
        ids = rows.column("doc_id").to_pylist()  # per document, not per score
        if len(set(ids)) < len(ids):
            first = {}
            for i, doc_id in enumerate(ids):
                first.setdefault(doc_id, i)
            rows = rows.take(pa.array(sorted(first.values())))
            ids = rows.column("doc_id").to_pylist()
        found = part_tables(rows, self.methods, layout=self.layout)
        tables = found.merged()
        totals = None
        if self.totals_class is not None:
            summed = self.totals_class()
            summed.add(rows)
            totals = summed.state()
        record = PartRecord.of(
            tables,
            ids,
            found.counts,
            self.layout,
            fingerprints=sorted(found.fingerprints),
            n_layers=found.n_layers or _n_layers(rows),
            totals=totals,
            seconds=stage_seconds(rows),  # where the scoring time went, for the manifest
            node=node,
        )
        return commit_part(self.folder, part_key(ids), tables, record, ROW_GROUP_ROWS, parquet_options)

    def write_errors(self, doc_ids: list[str], stage: str, reasons: list[str], key: str, node: str | None = None):
        """Commit rows that never reached a scorer (``stage`` 'read') as one part named ``key``."""
        table = error_table(doc_ids, stage, reasons)
        counts = {"docs": 0, "errors": table.num_rows, "tokens": 0, "words": 0}
        # no doc_ids: a rejected row's id may be a kept document's too (a duplicate id)
        tables = {"errors": table} if table.num_rows else {}
        record = PartRecord.of(tables, [], counts, self.layout, read_errors=stage == "read", node=node)
        return commit_part(self.folder, key, tables, record, ROW_GROUP_ROWS, parquet_options)


def _n_layers(rows: pa.Table) -> int | None:
    valid = rows.column("n_layers").drop_null()
    return int(pc.max(valid).as_py()) if len(valid) else None
