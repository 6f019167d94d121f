"""Small results of the aggregate stage kept beside a finished run, tagged with their parameters
and with the run they were computed from, so a report reads them instead of scanning the run again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.store.files import write_parquet_atomically
from xai_ray.store.layout import aggregate_file, inside, manifest_path, read_manifest

PARAMS_KEY = b"xai_ray.params"
RUN_KEY = "kept_for"  # beside the parameters in a tag: the run the aggregate was computed from


def run_mark(run_id: str, created_at: str | None) -> dict:
    """What ties a kept aggregate to its run: the run's id and its manifest's ``created_at``. A file
    copied in from another run's folder (by hand, a sync tool), or from a run of the same id in
    another store, carries another mark and is computed again, never read as this run's."""
    return {"run_id": run_id, "created_at": created_at or ""}


def _mark_of(store: str | Path, run_id: str) -> dict:
    return run_mark(run_id, read_manifest(manifest_path(store, run_id)).get("created_at"))


def _tag(params: dict, mark: dict) -> bytes:
    return json.dumps({**params, RUN_KEY: mark}, sort_keys=True, default=str).encode()


def write_aggregate(
    store: str | Path, run_id: str, name: str, params: dict, frame, row_group_size=None, schema=None, **options
) -> Path:
    """Keep a finished run's aggregate (a small DataFrame) beside it, tagged with its parameters;
    ``row_group_size``: small groups let a filtered read skip most of a sorted file; ``schema``:
    its columns' types, which an empty frame cannot tell (its text columns would be written as
    nulls); ``options`` go to ``pyarrow.parquet.write_table`` (encodings, compression)."""
    table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    table = table.replace_schema_metadata({PARAMS_KEY: _tag(params, _mark_of(store, run_id))})
    path = aggregate_file(store, run_id, name)
    return write_parquet_atomically(path, table, row_group_size=row_group_size, **options)


def read_aggregate(store: str | Path, run_id: str, name: str, params: dict):
    """The kept aggregate as a DataFrame if it was computed with exactly ``params``, else None."""
    path = aggregate_file(store, run_id, name)
    if not path.is_file() or not inside(store, path):  # a link is never read as a kept aggregate
        return None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):  # cut short or damaged: computed again, as if never kept
        return None
    if (table.schema.metadata or {}).get(PARAMS_KEY, b"") != _tag(params, _mark_of(store, run_id)):
        return None
    return table.to_pandas()


def kept_rows(path: Path, params: dict, mark: dict) -> int | None:
    """The rows of the kept aggregate at ``path`` if it was computed with exactly ``params`` from
    the run ``mark`` names (``run_mark``), else None (computed otherwise or from another run, cut
    short or damaged); one read of its footer."""
    try:
        footer = pq.ParquetFile(path).metadata
    except (OSError, pa.ArrowException):  # cut short or damaged
        return None
    return footer.num_rows if (footer.metadata or {}).get(PARAMS_KEY, b"") == _tag(params, mark) else None


def is_kept(store: str | Path, run_id: str, name: str, params: dict) -> bool:
    """Whether the run keeps its aggregate ``name``, whole, computed with ``params`` from this run."""
    path = aggregate_file(store, run_id, name)
    if not path.is_file() or not inside(store, path):
        return False
    return kept_rows(path, params, _mark_of(store, run_id)) is not None
