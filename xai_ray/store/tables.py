"""Scorer rows -> the store's tables, column-wise in Arrow: no Python object per score.

A batch of scorer rows (``scoring.rows.row_schema``: one row per document, each method's per-layer
scores flattened to L*n floats) becomes one ``docs`` table, the ``errors`` and ``faithfulness``
rows, and the tokens and words of the store's layout (``scores_v3``: a row per token, its word on
its first token, the floats a method x layer adds; ``scores_v2`` and ``scores_v1``, the previous
layouts: a row per token and per word, and a table per method x layer).
Every score is moved by numpy gathers over the flattened list columns; the id columns (document,
position, token, word) are built once per batch (``pieces``), dictionary-encoded once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xai_ray.store import scores_v1, scores_v2, scores_v3
from xai_ray.store.pieces import Pieces, flat, lengths_of
from xai_ray.store.schemas import DOCS, ERRORS, FAITHFULNESS, LAYOUT

# Dictionary pages for the string columns only (a float column's dictionary only grows, then is
# dropped), delta encoding for the counters (positions, word ids), statistics only where a reader
# can prune with them. ``store_schema=False``: the dictionary-encoded id columns read back as
# plain strings. The score columns are plain floats under zstd: split by byte
# (``BYTE_STREAM_SPLIT``) they were 6% smaller on MiniLM's scores of IMDB reviews, but DuckDB
# reassembles every float a query reads, and a token aggregate over a slice took 1.14x instead of
# 1.30x layout 1's (bench/README.md, store_layout.py). Layout 3's divisors (one value per
# document, on each of its rows) are dictionary-encoded: a query reading a share decodes a run of
# indices, not a float a row.
PARQUET_OPTIONS = {
    "compression": "zstd",
    "use_dictionary": ["doc_id", "token", "word", "joined", "stage", "method", "metric"],
    "column_encoding": {name: "DELTA_BINARY_PACKED" for name in ("position", "word_id", "span_id")},
    "write_statistics": ["doc_id", "layer"],
    "store_schema": False,
}


def parquet_options(table: pa.Table) -> dict:
    """The writer's options for ``table``: ``PARQUET_OPTIONS``, layout 3's
    divisors dictionary-encoded and its runs of rows (``scores_v3.row_runs``) in row groups of
    their own, with the statistics that let a view's filter decide a whole group. The options are
    ``store.files.write_parquet``'s."""
    names = table.schema.names
    if not any(name.startswith(SCORE_KINDS) for name in names):
        return PARQUET_OPTIONS
    dictionary = PARQUET_OPTIONS["use_dictionary"] + [name for name in names if name.startswith("divisor:")]
    options = {**PARQUET_OPTIONS, "use_dictionary": dictionary}
    runs = scores_v3.row_runs(table)
    if runs is not None:  # layout 3's one table, its runs of rows in groups of their own
        statistics = PARQUET_OPTIONS["write_statistics"] + ["span_id", "position"]
        options.update(write_statistics=statistics, row_groups=runs)
    return options


SCORE_KINDS = ("score:", "raw_score:", "token_score:", "share:")  # float columns of a method x layer


@dataclass
class PartTables:
    """One batch's rows for the store: ``tables`` maps a slice folder to its rows."""

    tables: dict[str, list[pa.Table]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    fingerprints: set[str] = field(default_factory=set)
    n_layers: int | None = None

    def add(self, folder: str, table: pa.Table, count: str | None = None) -> None:
        if table.num_rows == 0:
            return
        self.tables.setdefault(folder, []).append(table)
        if count:
            self.counts[count] = self.counts.get(count, 0) + table.num_rows

    def merged(self) -> dict[str, pa.Table]:
        """One table per slice folder (a slice's dictionary-encoded columns unified across batches;
        layout 3's batches joined run by run, ``scores_v3.in_runs``)."""
        # one batch (a Ray writer's part) is in its runs already: cutting and joining it copied it whole
        return {
            folder: parts[0] if len(parts) == 1 else _concat(scores_v3.in_runs(parts))
            for folder, parts in self.tables.items()
        }

    def rows(self) -> dict[str, int]:
        return {folder: sum(t.num_rows for t in parts) for folder, parts in self.tables.items()}


def _concat(parts: list[pa.Table]) -> pa.Table:
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="permissive").unify_dictionaries().combine_chunks()


def part_tables(rows: pa.Table, methods: list[str], into: PartTables | None = None, layout: int = LAYOUT) -> PartTables:
    """Add one batch of scorer rows to ``into`` (a new ``PartTables`` by default) as the tables of
    store ``layout``."""
    out = into if into is not None else PartTables()
    for key in ("docs", "errors", "tokens", "words"):
        out.counts.setdefault(key, 0)
    if rows.num_rows == 0:
        return out
    fingerprints = pc.unique(rows.column("model_fingerprint").drop_null()).to_pylist()
    out.fingerprints.update(fingerprints)
    scored = rows
    if rows.column("error").null_count < rows.num_rows:  # some rows failed (filter copies: only then)
        failed_mask = pc.is_valid(rows.column("error"))
        failed = rows.filter(failed_mask)
        out.add("errors", _errors(failed.column("doc_id"), "score", failed.column("error")), "errors")
        scored = rows.filter(pc.invert(failed_mask))
    if scored.num_rows:
        _add_faithfulness(out, scored)
        _add_scored(out, scored, methods, layout)
    return out


def _errors(doc_ids, stage: str, reasons) -> pa.Table:
    """``errors`` rows: ``doc_ids`` and ``reasons`` are Arrow arrays (or lists) of one length."""
    stages = pa.array(np.full(len(doc_ids), stage, dtype=object), pa.string())
    return pa.Table.from_arrays([_strings(doc_ids), stages, _strings(reasons)], schema=ERRORS)


def _strings(values) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.cast(pa.string()) if isinstance(values, pa.Array) else pa.array(values, pa.string())


def error_table(doc_ids: list[str], stage: str, reasons: list[str]) -> pa.Table:
    """Rows that never reached a scorer (stage ``read``) or came back from none (``score``)."""
    return _errors(doc_ids, stage, reasons)


def _add_scored(out: PartTables, scored: pa.Table, methods: list[str], layout: int) -> None:
    column = scored.column
    doc_ids = column("doc_id").combine_chunks()
    n_tokens = column("n_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    n_layers = int(column("n_layers")[0].as_py())
    out.n_layers = out.n_layers or n_layers
    word_lists = column("words").combine_chunks()
    n_words = lengths_of(word_lists)
    probs = column("probs").combine_chunks()
    prob_values = flat(probs).to_numpy(zero_copy_only=False)
    prob_lengths = lengths_of(probs)
    prob_starts = np.cumsum(prob_lengths) - prob_lengths
    has_pos = prob_lengths == 2  # P(class 1) of a two-class model; with more classes no class is "the positive" one
    prob_pos = np.where(has_pos, prob_values[np.minimum(prob_starts + 1, max(len(prob_values) - 1, 0))], 0.0)
    docs = pa.Table.from_arrays(
        [
            doc_ids,
            column("label").combine_chunks().cast(pa.int64()),
            column("pred").combine_chunks().cast(pa.int64()),
            pa.array(prob_pos.astype(np.float32), mask=~has_pos),
            probs.cast(DOCS.field("probs").type),
            pa.array(n_tokens.astype(np.int32)),
            pa.array(n_words.astype(np.int32)),
            column("truncated").combine_chunks(),
            column("text").combine_chunks(),
            *(
                _optional(scored, name, DOCS.field(name).type)
                for name in ("target", "ig_delta", "ig_completeness_error")
            ),
        ],
        schema=DOCS,
    )
    out.add("docs", docs, "docs")

    pieces = Pieces.of(scored, doc_ids, n_tokens, n_words, n_layers)
    builder = {1: scores_v1, 2: scores_v2, 3: scores_v3}[layout]
    builder.add(out, scored, methods, pieces)


def _optional(rows: pa.Table, name: str, kind: pa.DataType) -> pa.Array:
    """A column the scorer fills only for some methods (``target``, ``ig_delta``...), else nulls."""
    if name not in rows.column_names:
        return pa.nulls(rows.num_rows, kind)
    return rows.column(name).combine_chunks().cast(kind)


def _add_faithfulness(out: PartTables, scored: pa.Table) -> None:
    """The evaluation's metric rows, and its per-document failures as ``evaluate`` errors."""
    if "evaluate_error" in scored.column_names:
        failed = scored.filter(pc.is_valid(scored.column("evaluate_error")))
        if failed.num_rows:
            out.add("errors", _errors(failed.column("doc_id"), "evaluate", failed.column("evaluate_error")))
            out.counts["evaluate_errors"] = out.counts.get("evaluate_errors", 0) + failed.num_rows
    if "faithfulness" not in scored.column_names:
        return
    lists = scored.column("faithfulness").combine_chunks()
    lengths = lengths_of(lists)
    if not lengths.sum():
        return
    metrics = flat(lists)
    table = pa.Table.from_arrays(
        [
            scored.column("doc_id").combine_chunks().take(pa.array(np.repeat(np.arange(len(lengths)), lengths))),
            metrics.field("method"),
            metrics.field("layer").cast(pa.int32()),
            metrics.field("metric"),
            metrics.field("value").cast(pa.float64()),
        ],
        schema=FAITHFULNESS,
    )
    out.add("faithfulness", table, "faithfulness")


def stage_seconds(rows: pa.Table) -> dict[str, float]:
    """The scorer's per-stage seconds summed over a batch (its ``seconds`` map column)."""
    if "seconds" not in rows.column_names:
        return {}
    column = rows.column("seconds").combine_chunks()
    if column.null_count == len(column):
        return {}
    flat = pa.table({"stage": column.keys, "seconds": column.items}).group_by("stage").aggregate([("seconds", "sum")])
    return dict(zip(flat.column("stage").to_pylist(), flat.column("seconds_sum").to_pylist()))


def slices_of(tables: dict[str, pa.Table]) -> list[str]:
    """The method x layer slices (``rollout:3``) a part's layout-2 or 3 tables hold, for its record."""
    return _columns_of(tables, "score:")


def shares_of(tables: dict[str, pa.Table]) -> list[str]:
    """The slices whose shares a part's layout-3 table keeps as a column (``scores_v3``: those a
    document's divisor does not reproduce), for its record and the run's manifest."""
    return _columns_of(tables, "share:")


def _columns_of(tables: dict[str, pa.Table], kind: str) -> list[str]:
    table = tables.get(scores_v2.TOKEN_TABLE)
    return [] if table is None else [name.split(":", 1)[1] for name in table.column_names if name.startswith(kind)]
