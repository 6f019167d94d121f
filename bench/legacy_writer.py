"""The driver-side write path (before Ray workers wrote parts), kept verbatim for ``bench/scale.py``'s before/after comparison:
the driver's ``RunWriter`` turning each batch into Python objects (``to_pylist``, a per-document
``np.asarray`` of every method's scores) before writing Parquet. Not used by xai_ray itself."""

# ruff: noqa
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.store import StoreError
from xai_ray.store.files import write_atomically, write_parquet_atomically
from xai_ray.store.layout import MANIFEST, run_dir, staging_dir
from xai_ray.store.records import PartRecord
from xai_ray.store.schemas import DOCS, ERRORS, FAITHFULNESS, HEAD_SIMILARITY, HEADS, TOKENS, WORDS
from xai_ray.store.staging import Staging, StagingError
from xai_ray.words import lift

ROW_GROUP_ROWS = 256_000


def check_store(store: str | Path) -> None:
    """Refuse, in one sentence, a store that is a file or cannot be written (read-only, full)."""
    store = Path(store)
    if store.exists() and not store.is_dir():
        raise StoreError(f"store {str(store)!r} is a file, not a folder; pass a folder with --store")
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
        self.counts = {"docs": 0, "errors": 0, "tokens": 0, "words": 0, "duplicates": 0}
        self.done_ids: set[str] = set()  # documents out of the scorer, committed or pending
        self.fingerprints: set[str] = set()
        self.n_layers: int | None = None
        self.read_errors_done = False
        # Run-wide sums over the rows written (e.g. head_summary.HeadTotals): kept per part in its
        # record, so a resumed run's sums cover every document exactly once.
        self.totals_class = totals
        self.totals = totals() if totals else None
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
        self.read_errors_done = self.read_errors_done or record.get("read_errors", False)
        if self.totals is not None and record.get("totals"):
            self.totals.merge(self.totals_class.from_state(record["totals"]))

    def _clear_pending(self) -> None:
        self.pending: dict[str, list[pa.Table]] = {}
        self.pending_rows: dict[str, int] = {}
        self.pending_ids: list[str] = []
        self.pending_counts = {"docs": 0, "errors": 0, "tokens": 0, "words": 0, "duplicates": 0}
        self.pending_fingerprints: set[str] = set()
        self.pending_read_errors = False
        self.pending_totals = self.totals_class() if self.totals_class else None
        self.last_commit = time.monotonic()

    def _add(self, folder: str, table: pa.Table) -> None:
        self.pending.setdefault(folder, []).append(table)
        self.pending_rows[folder] = self.pending_rows.get(folder, 0) + table.num_rows

    def write(self, rows: pa.Table) -> None:
        """Add one batch of scorer rows (see ``scoring.row_schema``); a document already written is dropped."""
        table = rows
        rows = self._first_time(table.to_pylist())
        if self.pending_totals is not None and rows:
            fresh = {r["doc_id"] for r in rows}
            self.pending_totals.add(table.filter(pa.array([d in fresh for d in table.column("doc_id").to_pylist()])))
        self.pending_fingerprints.update(r["model_fingerprint"] for r in rows if r.get("model_fingerprint"))
        failed = [row for row in rows if row.get("error")]
        scored = [row for row in rows if not row.get("error")]
        if failed:
            self._add_errors([r["doc_id"] for r in failed], "score", [r["error"] for r in failed])
        if scored:
            self._write_faithfulness(scored)
            self._add_scored(scored)
        if self.pending and (
            max(self.pending_rows.values()) >= self.part_rows
            or time.monotonic() - self.last_commit >= self.part_seconds
        ):
            self.commit()

    def _first_time(self, rows: list[dict]) -> list[dict]:
        fresh = []
        for row in rows:
            if row["doc_id"] in self.done_ids:
                self.pending_counts["duplicates"] += 1
                continue
            self.done_ids.add(row["doc_id"])
            self.pending_ids.append(row["doc_id"])
            fresh.append(row)
        return fresh

    def write_errors(self, doc_ids: list[str], stage: str, reasons: list[str]) -> None:
        """Record rows that never reached the scorer (``stage`` 'read': bad text, duplicate id, ...)."""
        if stage == "read":
            if self.read_errors_done or self.pending_read_errors:
                return  # a resumed run re-reads the corpus; its read errors are in an earlier part
            self.pending_read_errors = True
        if doc_ids:
            self._add_errors(list(doc_ids), stage, list(reasons))

    def _add_errors(self, doc_ids, stage, reasons) -> None:
        self._add(
            "errors", pa.table({"doc_id": doc_ids, "stage": [stage] * len(doc_ids), "reason": reasons}, schema=ERRORS)
        )
        self.pending_counts["errors"] += len(doc_ids)

    def _add_scored(self, scored: list[dict]) -> None:
        self._add(
            "docs",
            pa.table(
                {
                    "doc_id": [r["doc_id"] for r in scored],
                    "label": [r["label"] for r in scored],
                    "pred": [r["pred"] for r in scored],
                    # P(class 1) of a two-class model; with more classes no class is "the positive" one
                    "prob_pos": [r["probs"][1] if len(r["probs"]) == 2 else None for r in scored],
                    "probs": [r["probs"] for r in scored],
                    "n_tokens": [r["n_tokens"] for r in scored],
                    "n_words": [len(r["words"]) for r in scored],
                    "truncated": [r["truncated"] for r in scored],
                    "text": [r["text"] for r in scored],
                    "target": [r.get("target") for r in scored],
                    "ig_delta": [r.get("ig_delta") for r in scored],
                    "ig_completeness_error": [r.get("ig_completeness_error") for r in scored],
                },
                schema=DOCS,
            ),
        )
        self.pending_counts["docs"] += len(scored)
        self.n_layers = self.n_layers or scored[0]["n_layers"]
        tokens = _long_columns(scored, "tokens")
        words = _long_columns(scored, "words")
        spans = [_spans(r) for r in scored]
        units = _unit_columns(scored, spans)
        for method in self.methods:
            token_scores = [np.asarray(r[f"scores_{method}"], np.float32).reshape(r["n_layers"], -1) for r in scored]
            word_scores = [
                np.asarray(r[f"word_scores_{method}"], np.float32).reshape(r["n_layers"], -1) for r in scored
            ]
            word_raw = [np.asarray(r[f"word_raw_{method}"], np.float32).reshape(r["n_layers"], -1) for r in scored]
            word_lift = [lift(s, span).astype(np.float32) for s, span in zip(word_scores, spans)]
            for layer in range(scored[0]["n_layers"]):
                layer_tokens = np.concatenate([s[layer] for s in token_scores])  # (sum n,)
                if np.isnan(layer_tokens).all():
                    continue  # the method does not define this layer (below start_layer)
                where = f"method={method}/layer={layer + 1}"
                self._add(f"tokens/{where}", pa.Table.from_arrays([*tokens, pa.array(layer_tokens)], schema=TOKENS))
                self._add(
                    f"words/{where}",
                    pa.Table.from_arrays(
                        [
                            *words,
                            pa.array(np.concatenate([s[layer] for s in word_scores])),
                            pa.array(np.concatenate([s[layer] for s in word_raw])),
                            pa.array(np.concatenate([s[layer] for s in word_lift])),
                            *units,
                        ],
                        schema=WORDS,
                    ),
                )
                self.pending_counts["tokens"] += len(layer_tokens)
                self.pending_counts["words"] += len(words[0])

    def _write_faithfulness(self, scored: list[dict]) -> None:
        """The evaluation's metric rows, and its per-document failures as ``evaluate`` errors."""
        metrics, failed = _faithfulness_tables(scored)
        if failed.num_rows:
            self._add("errors", failed)
            self.pending_counts["evaluate_errors"] = self.pending_counts.get("evaluate_errors", 0) + failed.num_rows
        if metrics.num_rows:
            self._add("faithfulness", metrics)
            self.pending_counts["faithfulness"] = self.pending_counts.get("faithfulness", 0) + metrics.num_rows

    def commit(self) -> None:
        """Make everything written so far durable as one part (a no-op when nothing is pending)."""
        if not self.pending and not self.pending_ids and not self.pending_counts["duplicates"]:
            return
        tables = {folder: pa.concat_tables(parts) for folder, parts in self.pending.items()}
        record = PartRecord.of(  # (the record's type is today's; the rest of this writer is as it was)
            tables,
            self.pending_ids,
            self.pending_counts,
            1,
            fingerprints=sorted(self.pending_fingerprints),
            n_layers=self.n_layers,
            read_errors=self.pending_read_errors,
            totals=self.pending_totals.state() if self.pending_totals is not None else None,
        )
        record = self.stage.commit(tables, record, ROW_GROUP_ROWS)
        for key, value in self.pending_counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        self.fingerprints.update(self.pending_fingerprints)
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


def _spans(row: dict) -> np.ndarray:
    """A row's per-word unit ids (``word_span``); every word its own unit for rows without them."""
    span = row.get("word_span")
    return np.asarray(span if span is not None else np.arange(len(row["words"])), np.int32)


def _unit_columns(rows: list[dict], spans: list[np.ndarray]) -> list[pa.Array]:
    """The words table's span_id and joined columns for a batch of documents."""
    joined = [w for r in rows for w in (r.get("word_joined") or r["words"])]
    return [
        pa.array(np.concatenate(spans) if spans else np.zeros(0, np.int32), pa.int32()),
        pa.array(joined, pa.string()),
    ]


def _faithfulness_tables(scored):
    from xai_ray.store.writer import faithfulness_tables

    return faithfulness_tables(scored)
