"""A batch's per-token and per-word columns, built once and shared by every method x layer.

Every store layout (``scores_v1``: a row per method, layer and token; ``scores_v2``: a row per
token and per word, a column per method and layer; ``scores_v3``: a row per token, its word on its
first token) starts from the same pieces: the document of each token and
word, its position, its text, and each word's unit (a contraction joined back) with the weight
that turns a share into a lift. Everything here is a numpy gather over the scorer rows' flattened
list columns: no Python object per token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def lengths_of(column: pa.Array) -> np.ndarray:
    return pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def flat(column: pa.Array) -> pa.Array:
    return pc.list_flatten(column)


def local(lengths: np.ndarray) -> np.ndarray:
    """Each element's position inside its own list: [3, 2] -> [0, 1, 2, 0, 1]."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)


def _gathered(column: pa.ChunkedArray, lengths: np.ndarray, n_layers: int):
    """(flat float32 values, each element's offset in layer 0, each element's layer stride)."""
    lists = column.combine_chunks()
    values = flat(lists).to_numpy(zero_copy_only=False)
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    expected = int(lengths.sum()) * n_layers
    if values.size != expected:
        raise ValueError(f"a score column holds {values.size} values where L x lengths make {expected}")
    starts = np.repeat(np.cumsum(lengths * n_layers) - lengths * n_layers, lengths) + local(lengths)
    return values, starts, np.repeat(lengths, lengths)


def layers(column: pa.ChunkedArray, lengths: np.ndarray, n_layers: int):
    """``layer -> (sum lengths,) float32``: layer l of every document's flattened (L, n) scores, in order."""
    values, starts, widths = _gathered(column, lengths, n_layers)
    return lambda layer: values[starts + layer * widths]


def every_layer(column: pa.ChunkedArray, lengths: np.ndarray, n_layers: int) -> np.ndarray:
    """(L, sum lengths) float32: what ``layers`` gives for each layer, each document's (L, n) block
    moved whole (no index array of L x sum lengths)."""
    values = flat(column.combine_chunks()).to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    expected = int(lengths.sum()) * n_layers
    if values.size != expected:
        raise ValueError(f"a score column holds {values.size} values where L x lengths make {expected}")
    ends = np.cumsum(lengths * n_layers)
    blocks = [values[end - n * n_layers : end].reshape(n_layers, n) for end, n in zip(ends.tolist(), lengths.tolist())]
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((n_layers, 0), dtype=np.float32)  # (L, sum lengths)


def defined_slices(scored: pa.Table, methods: list[str], pieces: Pieces):
    """``(method, layer, token scores, word shares, word raw scores)`` for every (method, 1-based
    layer) the batch defines, each a flat float32 array over its documents; a layer a method leaves
    out (below ``start_layer``: NaN everywhere in the batch) is skipped. Both layouts store these."""
    for method in methods:
        token_scores = layers(scored.column(f"scores_{method}"), pieces.n_tokens, pieces.n_layers)
        word_scores = layers(scored.column(f"word_scores_{method}"), pieces.n_words, pieces.n_layers)
        word_raw = layers(scored.column(f"word_raw_{method}"), pieces.n_words, pieces.n_layers)
        for layer in range(pieces.n_layers):
            values = token_scores(layer)
            if values.size and np.isnan(values).all():
                continue
            yield method, layer + 1, values, word_scores(layer), word_raw(layer)


@dataclass
class Pieces:
    """The id columns of a batch's tokens and words (dictionary-encoded strings: one dictionary for
    the batch) and each word's unit, with the counts the score columns are cut by."""

    n_tokens: np.ndarray  # (D,) tokens of each document
    n_words: np.ndarray  # (D,) words of each document
    n_layers: int
    token_columns: list[pa.Array]  # doc_id, position, token, word_id
    word_columns: list[pa.Array]  # doc_id, word_id, word
    unit_columns: list[pa.Array]  # span_id, joined
    unit_weight: np.ndarray  # (words,) float64: the document's words / the words of the word's unit

    @classmethod
    def of(cls, scored: pa.Table, doc_ids: pa.Array, n_tokens, n_words, n_layers: int) -> Pieces:
        column = scored.column
        ids = doc_ids.dictionary_encode()
        word_index = flat(column("word_index").combine_chunks()).to_numpy(zero_copy_only=False).astype(np.int32)
        token_columns = [
            ids.take(pa.array(np.repeat(np.arange(len(doc_ids)), n_tokens))),
            pa.array(local(n_tokens).astype(np.int32)),
            flat(column("tokens").combine_chunks()).dictionary_encode(),
            pa.array(np.where(word_index >= 0, word_index, 0), mask=word_index < 0, type=pa.int32()),
        ]
        word_position = local(n_words)
        words_flat = flat(column("words").combine_chunks())
        span = _spans(column("word_span").combine_chunks(), n_words, word_position)
        unit_key = np.arange(len(span)) - word_position + span  # batch-wide index of each word's unit's first word
        unit_size = np.bincount(unit_key, minlength=len(span))[unit_key]  # words in each word's unit
        return cls(
            n_tokens=n_tokens,
            n_words=n_words,
            n_layers=n_layers,
            token_columns=token_columns,
            word_columns=[
                ids.take(pa.array(np.repeat(np.arange(len(doc_ids)), n_words))),
                pa.array(word_position.astype(np.int32)),
                words_flat.dictionary_encode(),
            ],
            unit_columns=[
                pa.array(span.astype(np.int32)),
                _joined(column("word_joined").combine_chunks(), words_flat, n_words).dictionary_encode(),
            ],
            unit_weight=np.repeat(n_words, n_words) / unit_size,  # words.lift: share x W / the unit's words
        )

    def lifts(self, shares: np.ndarray) -> np.ndarray:
        """``words.lift`` of one method and layer's shares (float64 product, stored as float32)."""
        return (shares.astype(np.float64) * self.unit_weight).astype(np.float32)


def _spans(column: pa.Array, n_words: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Per word, the first word of its unit (``word_span``); a row without spans: every word its own unit."""
    if column.null_count == 0:
        return flat(column).to_numpy(zero_copy_only=False).astype(np.int64)
    span = position.copy()
    has = np.repeat(column.is_valid().to_numpy(zero_copy_only=False), n_words)
    span[has] = flat(column).to_numpy(zero_copy_only=False)
    return span


def _joined(column: pa.Array, words: pa.Array, n_words: np.ndarray) -> pa.Array:
    """Per word, its unit's text (``word_joined``), or the word itself for rows without it."""
    lengths = lengths_of(column)
    usable = column.is_valid().to_numpy(zero_copy_only=False) & (lengths == n_words) & (lengths > 0)
    if usable.all():
        return flat(column)
    joined_flat = flat(column.filter(pa.array(usable)))
    pick = np.repeat(usable, n_words)
    index = np.arange(len(words), dtype=np.int64)
    index[pick] = len(words) + np.arange(int(pick.sum()))
    return pa.concat_arrays([words.cast(pa.string()), joined_flat.cast(pa.string())]).take(pa.array(index))
