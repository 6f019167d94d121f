"""Scorer rows -> the store's tables, column-wise in Arrow: no Python object per score.

A batch of scorer rows (``scoring.rows.row_schema``: one row per document, each method's per-layer
scores flattened to L*n floats) becomes one ``docs`` table, one ``tokens`` and one ``words``
table per method and layer, and the ``errors`` and ``faithfulness`` rows. Every score is moved by
numpy gathers over the flattened list columns; the id columns (document, position, token, word)
are built once per batch and shared by every (method, layer) slice, dictionary-encoded once, so
the Parquet writer does not hash the same strings for each of the L x methods slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from xai_ray.store.schemas import DOCS, ERRORS, FAITHFULNESS, TOKENS, WORDS

# Dictionary pages for the string columns only (a float column's dictionary only grows, then is
# dropped), delta encoding for the counters (positions, word ids), statistics only where a reader
# can prune with them: together about 6x faster to write than pyarrow's defaults, and smaller.
# ``store_schema=False``: the dictionary-encoded id columns read back as plain strings.
PARQUET_OPTIONS = {
    "compression": "zstd",
    "use_dictionary": ["doc_id", "token", "word", "joined", "stage", "method", "metric"],
    "column_encoding": {name: "DELTA_BINARY_PACKED" for name in ("position", "word_id", "span_id")},
    "write_statistics": ["doc_id", "layer"],
    "store_schema": False,
}


def _encoded(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its shared string columns dictionary-encoded (as they are built here)."""
    shared = {"doc_id", "token", "word", "joined"}
    return pa.schema(
        [pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in shared else f for f in schema]
    )


TOKENS_ENCODED, WORDS_ENCODED = _encoded(TOKENS), _encoded(WORDS)


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
        """One table per slice folder (a slice's dictionary-encoded columns unified across batches)."""
        return {folder: _concat(parts) for folder, parts in self.tables.items()}

    def rows(self) -> dict[str, int]:
        return {folder: sum(t.num_rows for t in parts) for folder, parts in self.tables.items()}


def _concat(parts: list[pa.Table]) -> pa.Table:
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="permissive").unify_dictionaries().combine_chunks()


def part_tables(rows: pa.Table, methods: list[str], into: PartTables | None = None) -> PartTables:
    """Add one batch of scorer rows to ``into`` (a new ``PartTables`` by default) as store tables."""
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
        _add_scored(out, scored, methods)
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


def _lengths(column: pa.Array) -> np.ndarray:
    return pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _flat(column: pa.Array) -> pa.Array:
    return pc.list_flatten(column)


def _local(lengths: np.ndarray) -> np.ndarray:
    """Each element's position inside its own list: [3, 2] -> [0, 1, 2, 0, 1]."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)


def _add_scored(out: PartTables, scored: pa.Table, methods: list[str]) -> None:
    column = scored.column
    doc_ids = column("doc_id").combine_chunks()
    n_tokens = column("n_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    n_layers = int(column("n_layers")[0].as_py())
    out.n_layers = out.n_layers or n_layers
    word_lists = column("words").combine_chunks()
    n_words = _lengths(word_lists)
    probs = column("probs").combine_chunks()
    prob_values = _flat(probs).to_numpy(zero_copy_only=False)
    prob_lengths = _lengths(probs)
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

    ids = doc_ids.dictionary_encode()  # one dictionary for the batch: every slice reuses it
    token_owner = np.repeat(np.arange(len(doc_ids)), n_tokens)
    token_position = _local(n_tokens)
    word_index = _flat(column("word_index").combine_chunks()).to_numpy(zero_copy_only=False).astype(np.int32)
    token_columns = [
        ids.take(pa.array(token_owner)),
        pa.array(token_position.astype(np.int32)),
        _flat(column("tokens").combine_chunks()).dictionary_encode(),
        pa.array(np.where(word_index >= 0, word_index, 0), mask=word_index < 0, type=pa.int32()),
    ]
    word_owner = np.repeat(np.arange(len(doc_ids)), n_words)
    word_position = _local(n_words)
    words_flat = _flat(word_lists)
    span = _spans(column("word_span").combine_chunks(), n_words, word_position)
    unit_key = np.arange(len(span)) - word_position + span  # batch-wide index of each word's unit's first word
    unit_size = np.bincount(unit_key, minlength=len(span))[unit_key]  # words in each word's unit
    unit_weight = np.repeat(n_words, n_words) / unit_size  # words.lift: share x W / the unit's words
    word_columns = [
        ids.take(pa.array(word_owner)),
        pa.array(word_position.astype(np.int32)),
        words_flat.dictionary_encode(),
    ]
    unit_columns = [
        pa.array(span.astype(np.int32)),
        _joined(column("word_joined").combine_chunks(), words_flat, n_words).dictionary_encode(),
    ]
    for method in methods:
        token_scores = _layers(column(f"scores_{method}"), n_tokens, n_layers)
        word_scores = _layers(column(f"word_scores_{method}"), n_words, n_layers)
        word_raw = _layers(column(f"word_raw_{method}"), n_words, n_layers)
        for layer in range(n_layers):
            values = token_scores(layer)
            if values.size and np.isnan(values).all():
                continue  # the method does not define this layer (below start_layer)
            where = f"method={method}/layer={layer + 1}"
            out.add(
                f"tokens/{where}",
                pa.Table.from_arrays([*token_columns, pa.array(values)], schema=TOKENS_ENCODED),
                "tokens",
            )
            shares = word_scores(layer)
            lifts = (shares.astype(np.float64) * unit_weight).astype(np.float32)
            words = pa.Table.from_arrays(
                [*word_columns, pa.array(shares), pa.array(word_raw(layer)), pa.array(lifts), *unit_columns],
                schema=WORDS_ENCODED,
            )
            out.add(f"words/{where}", words, "words")


def _optional(rows: pa.Table, name: str, kind: pa.DataType) -> pa.Array:
    """A column the scorer fills only for some methods (``target``, ``ig_delta``...), else nulls."""
    if name not in rows.column_names:
        return pa.nulls(rows.num_rows, kind)
    return rows.column(name).combine_chunks().cast(kind)


def _layers(column: pa.ChunkedArray, lengths: np.ndarray, n_layers: int):
    """``layer -> (sum lengths,) float32``: layer l of every document's flattened (L, n) scores, in order."""
    lists = column.combine_chunks()
    values = _flat(lists).to_numpy(zero_copy_only=False)
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    expected = int(lengths.sum()) * n_layers
    if values.size != expected:
        raise ValueError(f"a score column holds {values.size} values where L x lengths make {expected}")
    starts = np.repeat(np.cumsum(lengths * n_layers) - lengths * n_layers, lengths) + _local(lengths)
    widths = np.repeat(lengths, lengths)
    return lambda layer: values[starts + layer * widths]


def _spans(column: pa.Array, n_words: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Per word, the first word of its unit (``word_span``); a row without spans: every word its own unit."""
    if column.null_count == 0:
        return _flat(column).to_numpy(zero_copy_only=False).astype(np.int64)
    span = local.copy()
    has = np.repeat(column.is_valid().to_numpy(zero_copy_only=False), n_words)
    span[has] = _flat(column).to_numpy(zero_copy_only=False)
    return span


def _joined(column: pa.Array, words: pa.Array, n_words: np.ndarray) -> pa.Array:
    """Per word, its unit's text (``word_joined``), or the word itself for rows without it."""
    lengths = _lengths(column)
    usable = column.is_valid().to_numpy(zero_copy_only=False) & (lengths == n_words) & (lengths > 0)
    if usable.all():
        return _flat(column)
    joined_flat = _flat(column.filter(pa.array(usable)))
    pick = np.repeat(usable, n_words)
    index = np.arange(len(words), dtype=np.int64)
    index[pick] = len(words) + np.arange(int(pick.sum()))
    return pa.concat_arrays([words.cast(pa.string()), joined_flat.cast(pa.string())]).take(pa.array(index))


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
    lengths = _lengths(lists)
    if not lengths.sum():
        return
    metrics = _flat(lists)
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
