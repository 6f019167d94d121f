"""Store layout 3: one row per token, its word's columns on the word's first token, and each
word's raw score and share stored only where they are not already implied.

``token_scores/part-<k>.parquet`` holds one row per (document, token position), as layout 2's: the
document id, position, token text and word id. A word lives on the row of its first token:
``word``, ``span_id``, ``joined`` and ``unit_weight`` are set there and null on the word's other
tokens and on special tokens (a word without a token, which no tokenizer here makes, gets a row of
its own with no position or token). Per method and layer:
  - ``score:<m>:<l>`` (float32): on a word's row the word's raw score, on every other row the
    token's score. A word of one token, most words, has its token's score as its raw score bit
    for bit (0 + x = x in the scorer's float32 sum), so the column holds both at once;
  - ``token_score:<m>:<l>``: the token's own score on the rows of the words where it is not that
    in some method x layer (the first token of a word of several tokens), null elsewhere;
  - ``divisor:<m>:<l>``: a float32 per document such that raw / divisor (IEEE float32 division)
    is the word's share bit for bit, as the scorer divides each word's sum by the document's
    total; the writer finds it within two ulps of the total a word's share implies and checks it
    on every word. It is set on every row of the document (a run of one value: as small as on
    its words alone, and a column without nulls encodes faster), built as a dictionary of the
    batch's divisors so the writer stores it without hashing a float a row;
  - ``share:<m>:<l>``: the share itself, on the words of a document where no divisor reproduced
    every word's share (null elsewhere); a column only in a part that needs it, listed under
    ``shares`` in the part's record and the run's manifest, so the view reads it only then.
So a review's floats are its token scores plus the few words of more than one token, where layout
2 stored the tokens and two floats per word. The views (``query.views``) rebuild layout 2's rows:
words from the rows with a ``span_id`` (one dense column and the divisor: the words view, read
most, never reads the sparse column), tokens from ``token_score`` where set, else ``score``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from xai_ray.store.divisors import divisors, same_bits
from xai_ray.store.pieces import Pieces, every_layer
from xai_ray.store.schemas import SCORE_PIECES, slice_column

TOKEN_TABLE = "token_scores"


def _encoded(schema: pa.Schema) -> list[pa.Field]:
    shared = {"doc_id", "token", "word", "joined"}
    return [pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in shared else f for f in schema]


FIELDS = _encoded(SCORE_PIECES)


def add(out, scored: pa.Table, methods: list[str], pieces: Pieces) -> None:
    """Add ``scored``'s tokens and words, every method x layer as its columns, to ``out``, the rows
    already in ``row_runs``' three runs (a part's batches are then joined run by run, ``in_runs``)."""
    rows = Rows.of(pieces)
    slices = []  # (method, 0-based layer, token scores (tokens,), shares (words,), raw (words,))
    for method in methods:
        values, shares, raw = (
            every_layer(scored.column(f"{prefix}_{method}"), count, pieces.n_layers)  # (L, tokens or words)
            for prefix, count in (
                ("scores", pieces.n_tokens),
                ("word_scores", pieces.n_words),
                ("word_raw", pieces.n_words),
            )
        )
        # a layer the method leaves out (below start_layer: NaN everywhere in the batch) gets no columns
        defined = np.flatnonzero(~np.isnan(values).all(axis=1) if values.shape[1] else np.ones(len(values), bool))
        slices += [(method, layer, values[layer], shares[layer], raw[layer]) for layer in defined]
    if not slices:
        return
    rows.order(np.any([rows.apart(values, raw) for _, _, values, _, raw in slices], axis=0))
    fields, arrays = list(FIELDS), rows.id_columns(pieces)
    raw_all, shares_all = (np.stack([piece[k] for piece in slices]) for k in (4, 3))  # (slices, words)
    divisor, exact = divisors_of(raw_all, shares_all, rows)
    for k, (method, layer, values, shares, raw) in enumerate(slices):
        columns = rows.slice_columns(values, raw, divisor[k])
        if not exact[k].all():  # a column only where needed: the part's record lists it (tables.shares_of)
            columns.append(("share", rows.on_words(shares, ~exact[k][rows.word_doc])))
        for kind, array in columns:
            fields.append(pa.field(slice_column(kind, method, int(layer) + 1), pa.float32()))
            arrays.append(array)
    out.add(TOKEN_TABLE, pa.Table.from_arrays(arrays, schema=pa.schema(fields)))
    # counted as the rows of the tokens and words views, so manifests say the same in every layout
    out.counts["tokens"] = out.counts.get("tokens", 0) + len(slices) * int(pieces.n_tokens.sum())
    out.counts["words"] = out.counts.get("words", 0) + len(slices) * int(pieces.n_words.sum())


def divisors_of(raw: np.ndarray, shares: np.ndarray, rows: Rows):
    """(divisor (slices, D), exact (slices, D)): ``divisors`` for every slice's documents at once;
    ``raw`` and ``shares`` are (slices, words)."""
    n_slices = len(raw)
    # document d of slice k is group k x D + d
    groups = (np.arange(n_slices)[:, None] * rows.n_docs + rows.word_doc[None, :]).ravel()  # (slices x words,)
    divisor, exact = divisors(raw.ravel(), shares.ravel(), groups, n_slices * rows.n_docs, ordered=True)
    return divisor.reshape(n_slices, rows.n_docs), exact.reshape(n_slices, rows.n_docs)


class Rows:
    """A batch's rows: each token's, in runs (``order``), and where each word sits among them
    (its first token's row, or an extra row after the tokens for a word without a token)."""

    def __init__(
        self, n_tokens: int, host: np.ndarray, orphans: np.ndarray, word_doc: np.ndarray, row_doc, n_docs: int
    ):
        self.n_tokens = n_tokens  # token rows; the extra rows follow them
        self.host = host  # (words,) int64: each word's row, before ``order``
        self.orphans = orphans  # (extra rows,) the words that have no token
        self.word_doc = word_doc  # (words,) the batch-local document of each word
        self.row_doc = row_doc  # (rows,) and of each row
        self.n_docs = n_docs
        self.n_rows = n_tokens + len(orphans)

    @classmethod
    def of(cls, pieces: Pieces) -> Rows:
        n_docs = len(pieces.n_words)
        word_doc = np.repeat(np.arange(n_docs), pieces.n_words)
        word_start = np.cumsum(pieces.n_words) - pieces.n_words
        token_doc = np.repeat(np.arange(n_docs), pieces.n_tokens)
        word_id = pieces.token_columns[3]
        local = word_id.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        inside = (local >= 0) & (local < pieces.n_words[token_doc])
        word = word_start[token_doc[inside]] + local[inside]  # batch-wide word of each worded token
        first_of, first_row = np.unique(word, return_index=True)  # first occurrence = first token
        host = np.full(int(pieces.n_words.sum()), -1, dtype=np.int64)
        host[first_of] = np.flatnonzero(inside)[first_row]
        orphans = np.flatnonzero(host < 0)
        host[orphans] = len(local) + np.arange(len(orphans))
        row_doc = np.concatenate([token_doc, word_doc[orphans]])
        return cls(len(local), host, orphans, word_doc, row_doc, n_docs)

    def apart(self, values: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """(words,) bool: the words whose raw score is not their first token's score in this slice
        (``values`` (tokens,), ``raw`` (words,)): their row keeps the token's own score apart."""
        with_token = self.host < self.n_tokens  # a word without a token has no token score to keep
        first = values[np.where(with_token, self.host, 0)]
        return ~same_bits(raw, first) & with_token

    def order(self, apart: np.ndarray) -> None:
        """Put the rows in ``row_runs``' three runs: the words whose row holds their token's score,
        the words in ``apart`` (words, bool), then every other row, each run in its order."""
        kind = np.full(self.n_rows, 2, dtype=np.int8)
        kind[self.host] = apart
        self.source = np.argsort(kind, kind="stable")  # (rows,) the unordered row each row comes from
        self.runs = np.bincount(kind, minlength=3)
        moved = np.empty(self.n_rows, dtype=np.int64)
        moved[self.source] = np.arange(self.n_rows)
        self.at = moved[self.host]  # (words,) each word's row, in order
        self.kept = np.flatnonzero(apart)[np.argsort(self.at[apart])]  # the apart words, in their rows' order
        self.row_doc = self.row_doc[self.source]
        self.row_doc_indices = pa.array(self.row_doc.astype(np.int32))  # every slice's divisor indices
        # a validity bitmap shared by every slice's token_score column: the second run's rows
        valid = np.zeros(self.n_rows, dtype=bool)
        valid[self.runs[0] : self.runs[0] + self.runs[1]] = True
        self.kept_bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        self.wordless = np.ones(self.n_rows, dtype=bool)  # (rows,) the rows no word sits on
        self.wordless[self.at] = False

    def id_columns(self, pieces: Pieces) -> list[pa.Array]:
        """doc_id, position, token, word_id, word, span_id, joined, unit_weight for every row."""
        doc_id, position, token, word_id = pieces.token_columns
        if len(self.orphans):
            orphan = pa.array(self.orphans)
            doc_id = pa.concat_arrays([doc_id, pieces.word_columns[0].take(orphan)])
            word_id = pa.concat_arrays([word_id, pieces.word_columns[1].take(orphan)])
            position, token = (_padded(column, len(self.orphans)) for column in (position, token))
        source = pa.array(self.source)
        words = [pieces.word_columns[2], *pieces.unit_columns, pa.array(pieces.unit_weight)]
        moved = [column.take(source) for column in (doc_id, position, token, word_id)]
        return [*moved, *(self._spread(column) for column in words)]

    def _spread(self, column: pa.Array) -> pa.Array:
        """A per-word column on the words' rows (null on the others); a dictionary column keeps its
        dictionary, only its indices move."""
        if column.null_count:  # not built so here, but kept exact if it were
            word_of_row = np.zeros(self.n_rows, dtype=np.int64)
            word_of_row[self.at] = np.arange(len(self.at))
            return column.take(pa.array(word_of_row, mask=self.wordless))
        dictionary = pa.types.is_dictionary(column.type)
        values = (column.indices if dictionary else column).to_numpy(zero_copy_only=False)
        spread = np.zeros(self.n_rows, dtype=values.dtype)
        spread[self.at] = values
        if dictionary:
            return pa.DictionaryArray.from_arrays(pa.array(spread, mask=self.wordless), column.dictionary)
        return pa.array(spread, mask=self.wordless, type=column.type)

    def slice_columns(self, values: np.ndarray, raw: np.ndarray, divisor: np.ndarray) -> list:
        """One method x layer's ``(kind, array)`` score, token_score and divisor columns from its
        token scores (tokens,), word raw scores (words,) and per-document divisors (D,)."""
        if len(self.orphans):
            values = np.concatenate([values, np.full(len(self.orphans), np.nan, np.float32)])
        dense = values[self.source]  # (rows,) in order
        dense[self.at] = raw  # a word's row holds the word's raw score
        # the second run's token scores (a word's first token's), under the shared bitmap; set on
        # each of those rows in every slice, so the view's read there is a run, not row by row
        own = np.zeros(self.n_rows, dtype=np.float32)
        own[self.runs[0] : self.runs[0] + self.runs[1]] = values[self.host[self.kept]]
        nulls = self.n_rows - int(self.runs[1])
        token_score = pa.Array.from_buffers(pa.float32(), self.n_rows, [self.kept_bitmap, pa.py_buffer(own)], nulls)
        # one value per document, its indices the rows' documents: the writer stores the dictionary
        # as it is, with no float hashed per row
        per_row = pa.DictionaryArray.from_arrays(self.row_doc_indices, pa.array(divisor))
        return [("score", pa.array(dense)), ("token_score", token_score), ("divisor", per_row)]

    def on_words(self, values: np.ndarray, keep: np.ndarray) -> pa.Array:
        """``values`` (one per word) on the rows of the words ``keep`` marks, null on every other row."""
        if not keep.any():
            return pa.nulls(self.n_rows, pa.float32())
        column = np.zeros(self.n_rows, dtype=np.float32)
        rows = self.at[keep]
        column[rows] = values[keep]
        valid = np.zeros(self.n_rows, dtype=bool)
        valid[rows] = True
        return pa.array(column, mask=~valid)


def in_runs(parts: list[pa.Table]) -> list[pa.Table]:
    """Layout 3's batches (each in ``row_runs``' runs, as ``add`` builds them) cut into their runs
    and put run by run, so the part they make is in three runs too; any other tables as they are."""
    runs = [row_runs(part) for part in parts]
    if any(counts is None for counts in runs):
        return parts
    pieces = []
    for kind in range(3):
        for part, counts in zip(parts, runs):
            start = sum(counts[:kind])
            pieces.append(part.slice(start, counts[kind]))
    return [piece for piece in pieces if piece.num_rows]


def row_runs(table: pa.Table) -> list[int] | None:
    """The lengths of a layout-3 table's three runs of rows (the words whose row holds their
    token's score, the words that keep it apart, every other row); None for other tables. Written
    as row groups of their own, the ``words`` view's filter on ``span_id`` is decided by each
    group's statistics (never row by row), and a group's ``token_score`` columns are null
    throughout or set throughout, which the ``tokens`` view reads as a run, not row by row."""
    kinds = _row_kinds(table)
    if kinds is None:
        return None
    if len(kinds) > 1 and (np.diff(kinds) < 0).any():
        raise ValueError("a layout-3 table whose rows are not in their three runs")
    return np.bincount(kinds, minlength=3).tolist()


def _row_kinds(table: pa.Table) -> np.ndarray | None:
    """(rows,) 0: a word's row holding its token's score; 1: a word's row keeping it apart;
    2: any other row. None for a table that is not layout 3's."""
    if "span_id" not in table.column_names or "position" not in table.column_names:
        return None
    word = table.column("span_id").is_valid().to_numpy(zero_copy_only=False)
    apart = np.zeros(table.num_rows, dtype=bool)
    for name in table.column_names:
        if name.startswith("token_score:"):
            apart |= table.column(name).is_valid().to_numpy(zero_copy_only=False)
    return np.where(word, apart.astype(np.int8), np.int8(2))


def _padded(column: pa.Array, extra: int) -> pa.Array:
    """``column`` followed by ``extra`` nulls, of the same type (a dictionary column keeps its dictionary)."""
    index = np.concatenate([np.arange(len(column)), np.zeros(extra, dtype=np.int64)])
    return column.take(pa.array(index, mask=np.arange(len(index)) >= len(column)))
