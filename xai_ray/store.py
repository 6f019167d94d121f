"""The store: Parquet tables of one run per folder, published only when complete.

Layout (private; the SQL views in ``query`` are the public interface)::

    STORE/runs/run_id=<id>/manifest.json
    STORE/runs/run_id=<id>/docs/part-0.parquet
    STORE/runs/run_id=<id>/errors/part-0.parquet
    STORE/runs/run_id=<id>/tokens/method=<m>/layer=<l>/part-0.parquet
    STORE/runs/run_id=<id>/words/method=<m>/layer=<l>/part-0.parquet
    STORE/_staging/run_id=<id>/...            (a run being written; never read by the views)

Partitioning by method and layer lets a top-k over one slice read one file; rows are buffered
so each file holds a few large row groups rather than many small ones. A run appears under
``runs/`` by one directory rename, after its manifest is written: readers see all of it or none.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DOCS = pa.schema([
    ("doc_id", pa.string()), ("label", pa.int64()), ("pred", pa.int64()), ("prob_pos", pa.float32()),
    ("probs", pa.list_(pa.float32())), ("n_tokens", pa.int32()), ("n_words", pa.int32()),
    ("truncated", pa.bool_()), ("text", pa.string()),
])
TOKENS = pa.schema([
    ("doc_id", pa.string()), ("position", pa.int32()), ("token", pa.string()),
    ("word_id", pa.int32()), ("score", pa.float32()),
])
WORDS = pa.schema([
    ("doc_id", pa.string()), ("word_id", pa.int32()), ("word", pa.string()),
    ("score", pa.float32()), ("raw_score", pa.float32()),
])
ERRORS = pa.schema([("doc_id", pa.string()), ("stage", pa.string()), ("reason", pa.string())])
ROW_GROUP_ROWS = 256_000


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why."""


def runs_dir(store: str | Path) -> Path:
    return Path(store) / "runs"


def run_dir(store: str | Path, run_id: str) -> Path:
    return runs_dir(store) / f"run_id={run_id}"


def list_runs(store: str | Path) -> list[str]:
    """Published run ids, oldest first by manifest creation time."""
    found = []
    for folder in runs_dir(store).glob("run_id=*"):
        manifest = folder / "manifest.json"
        if manifest.is_file():
            found.append((json.loads(manifest.read_text()).get("created_at", ""), folder.name[7:]))
    return [run_id for _, run_id in sorted(found)]


class _Buffered:
    """One Parquet file that receives rows in pieces and writes them in large row groups."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema = path, schema
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.writer: pq.ParquetWriter | None = None
        self.rows = 0

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_rows += table.num_rows
        self.rows += table.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")
        self.writer.write_table(pa.concat_tables(self.pending), row_group_size=ROW_GROUP_ROWS)
        self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()


class RunWriter:
    """Writes one run's tables into staging; ``publish`` moves the finished run into place."""

    def __init__(self, store: str | Path, run_id: str, methods: list[str]) -> None:
        self.store, self.run_id, self.methods = Path(store), run_id, list(methods)
        if run_dir(store, run_id).exists():
            raise StoreError(f"run {run_id!r} already exists in store {str(store)!r}; pick another --run-id")
        self.staging = self.store / "_staging" / f"run_id={run_id}"
        if self.staging.exists():
            shutil.rmtree(self.staging)  # leftovers of a crashed attempt at the same run id
        self.staging.mkdir(parents=True)
        self.files: dict[tuple, _Buffered] = {}
        self.counts = {"docs": 0, "errors": 0, "tokens": 0, "words": 0}

    def _file(self, *key) -> _Buffered:
        if key not in self.files:
            table, *parts = key
            folder = self.staging / table
            if table in ("tokens", "words"):
                folder = folder / f"method={parts[0]}" / f"layer={parts[1]}"
            schema = {"docs": DOCS, "errors": ERRORS, "tokens": TOKENS, "words": WORDS}[table]
            self.files[key] = _Buffered(folder / "part-0.parquet", schema)
        return self.files[key]

    def write(self, rows: pa.Table) -> None:
        """Add one batch of scorer rows (see ``scoring.row_schema``): one append per file."""
        rows = rows.to_pylist()
        failed = [row for row in rows if row.get("error")]
        scored = [row for row in rows if not row.get("error")]
        if failed:
            self._file("errors").add(pa.table({
                "doc_id": [r["doc_id"] for r in failed], "stage": ["score"] * len(failed),
                "reason": [r["error"] for r in failed]}, schema=ERRORS))
            self.counts["errors"] += len(failed)
        if not scored:
            return
        self._file("docs").add(pa.table({
            "doc_id": [r["doc_id"] for r in scored], "label": [r["label"] for r in scored],
            "pred": [r["pred"] for r in scored],
            "prob_pos": [r["probs"][1] if len(r["probs"]) > 1 else None for r in scored],
            "probs": [r["probs"] for r in scored], "n_tokens": [r["n_tokens"] for r in scored],
            "n_words": [len(r["words"]) for r in scored], "truncated": [r["truncated"] for r in scored],
            "text": [r["text"] for r in scored]}, schema=DOCS))
        self.counts["docs"] += len(scored)
        tokens = _long_columns(scored, "tokens")
        words = _long_columns(scored, "words")
        for method in self.methods:
            token_scores = [np.asarray(r[f"scores_{method}"], np.float32).reshape(r["n_layers"], -1) for r in scored]
            word_scores = [np.asarray(r[f"word_scores_{method}"], np.float32).reshape(r["n_layers"], -1) for r in scored]
            word_raw = [np.asarray(r[f"word_raw_{method}"], np.float32).reshape(r["n_layers"], -1) for r in scored]
            for layer in range(scored[0]["n_layers"]):
                layer_tokens = np.concatenate([s[layer] for s in token_scores])  # (sum n,)
                if np.isnan(layer_tokens).all():
                    continue  # the method does not define this layer (below start_layer)
                self._file("tokens", method, layer + 1).add(
                    pa.Table.from_arrays([*tokens, pa.array(layer_tokens)], schema=TOKENS))
                self._file("words", method, layer + 1).add(pa.Table.from_arrays(
                    [*words, pa.array(np.concatenate([s[layer] for s in word_scores])),
                     pa.array(np.concatenate([s[layer] for s in word_raw]))], schema=WORDS))
                self.counts["tokens"] += len(layer_tokens)
                self.counts["words"] += len(words[0])

    def publish(self, manifest: dict) -> Path:
        """Close every file, write the manifest, and move the run into ``runs/`` in one rename."""
        for file in self.files.values():
            file.close()
        for table, schema in (("docs", DOCS), ("errors", ERRORS)):
            if not (self.staging / table).exists():  # empty tables still exist for the views
                (self.staging / table).mkdir()
                pq.write_table(schema.empty_table(), self.staging / table / "part-0.parquet")
        manifest = {**manifest, "run_id": self.run_id, "counts": dict(self.counts)}
        temporary = self.staging / "manifest.json.tmp"
        temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        os.replace(temporary, self.staging / "manifest.json")
        target = run_dir(self.store, self.run_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.staging, target)
        return target

    def abort(self) -> None:
        for file in self.files.values():
            if file.writer is not None:
                file.writer.close()
        shutil.rmtree(self.staging, ignore_errors=True)


def _long_columns(rows: list[dict], kind: str) -> list[pa.Array]:
    """The id columns shared by every method and layer: tokens (doc_id, position, token,
    word_id) or words (doc_id, word_id, word), for a batch of documents."""
    if kind == "tokens":
        index = np.concatenate([np.asarray(r["word_index"], np.int32) for r in rows])
        return [
            pa.array(np.repeat([r["doc_id"] for r in rows], [r["n_tokens"] for r in rows]), pa.string()),
            pa.array(np.concatenate([np.arange(r["n_tokens"], dtype=np.int32) for r in rows])),
            pa.array([t for r in rows for t in r["tokens"]], pa.string()),
            pa.array(np.where(index >= 0, index, 0), mask=index < 0, type=pa.int32()),
        ]
    return [
        pa.array(np.repeat([r["doc_id"] for r in rows], [len(r["words"]) for r in rows]), pa.string()),
        pa.array(np.concatenate([np.arange(len(r["words"]), dtype=np.int32) for r in rows])),
        pa.array([w for r in rows for w in r["words"]], pa.string()),
    ]


def aggregate_file(store: str | Path, run_id: str, name: str) -> Path:
    return run_dir(store, run_id) / "aggregates" / f"{name}.parquet"


def write_aggregate(store: str | Path, run_id: str, name: str, params: dict, frame) -> Path:
    """Keep a finished run's aggregate (a small DataFrame) beside it, tagged with its parameters."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({b"xai_ray.params": json.dumps(params, sort_keys=True, default=str).encode()})
    path = aggregate_file(store, run_id, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)
    return path


def read_aggregate(store: str | Path, run_id: str, name: str, params: dict):
    """The kept aggregate as a DataFrame if it was computed with exactly ``params``, else None."""
    path = aggregate_file(store, run_id, name)
    if not path.is_file():
        return None
    table = pq.read_table(path)
    kept = (table.schema.metadata or {}).get(b"xai_ray.params", b"")
    if kept != json.dumps(params, sort_keys=True, default=str).encode():
        return None
    return table.to_pandas()


def reports_dir(store: str | Path) -> Path:
    """Where dated reports of a store go (``reports/YYYY-MM-DD/report.html``, ``reports/latest``)."""
    return Path(store) / "reports"
