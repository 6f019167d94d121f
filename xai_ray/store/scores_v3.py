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
  - ``token_score:<m>:<l>``: the token's own score on the rows where it is not that (the first
    token of a word of several tokens), null elsewhere;
  - ``divisor:<m>:<l>``: a float32 per document such that raw / divisor (IEEE float32 division)
    is the word's share bit for bit, as the scorer divides each word's sum by the document's
    total; the writer finds it within two ulps of the total a word's share implies and checks it
    on every word. It is set on every row of the document (a run of one value: as small as on
    its words alone, and a column without nulls encodes faster);
  - ``share:<m>:<l>``: the share itself, on the words of a document where no divisor reproduced
    every word's share (null elsewhere); a column only in a part that needs it, listed under
    ``shares`` in the part's record and the run's manifest, so the view reads it only then. (The
    CPU stage's methods, flow among them, normalise in float64: their shares are always kept.)
So a review's floats are its token scores plus the few words of more than one token, where layout
2 stored the tokens and two floats per word. The views (``query.views``) rebuild layout 2's rows:
words from the rows with a ``span_id`` (one dense column and the divisor: the words view, read
most, never reads the sparse column), tokens from ``token_score`` where set, else ``score``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from xai_ray.store.pieces import Pieces, every_layer
from xai_ray.store.schemas import SCORE_PIECES, slice_column

TOKEN_TABLE = "token_scores"
STEPS = 2  # ulps either side of the total a word's share implies, tried as its document's divisor
PROBE = 4  # words of a document a divisor is tried on before all of them


def _encoded(schema: pa.Schema) -> list[pa.Field]:
    shared = {"doc_id", "token", "word", "joined"}
    return [pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in shared else f for f in schema]


FIELDS = _encoded(SCORE_PIECES)


def add(out, scored: pa.Table, methods: list[str], pieces: Pieces) -> None:
    """Add ``scored``'s tokens and words, every method x layer as its columns, to ``out``."""
    rows = Rows.of(pieces)
    fields, arrays = list(FIELDS), rows.id_columns(pieces)
    slices = 0
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
        for layer, columns in zip(defined, rows.slice_columns(values[defined], shares[defined], raw[defined])):
            slices += 1
            for kind, array in columns:
                fields.append(pa.field(slice_column(kind, method, int(layer) + 1), pa.float32()))
                arrays.append(array)
    if not slices:
        return
    out.add(TOKEN_TABLE, pa.Table.from_arrays(arrays, schema=pa.schema(fields)))
    # counted as the rows of the tokens and words views, so manifests say the same in every layout
    out.counts["tokens"] = out.counts.get("tokens", 0) + slices * int(pieces.n_tokens.sum())
    out.counts["words"] = out.counts.get("words", 0) + slices * int(pieces.n_words.sum())


class Rows:
    """Where each word sits among a batch's token rows: ``host[w]`` is word w's row (its first
    token's, or an extra row after the tokens for a word without a token)."""

    def __init__(
        self, n_tokens: int, host: np.ndarray, orphans: np.ndarray, word_doc: np.ndarray, row_doc, n_docs: int
    ):
        self.n_tokens = n_tokens  # token rows; the extra rows follow them
        self.host = host  # (words,) int64
        self.orphans = orphans  # (extra rows,) the words that have no token
        self.word_doc = word_doc  # (words,) the batch-local document of each word
        self.row_doc = row_doc  # (rows,) and of each row
        self.n_docs = n_docs
        self.n_rows = n_tokens + len(orphans)
        self.wordless = np.ones(self.n_rows, dtype=bool)  # (rows,) the rows no word sits on
        self.wordless[host] = False

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

    def id_columns(self, pieces: Pieces) -> list[pa.Array]:
        """doc_id, position, token, word_id, word, span_id, joined, unit_weight for every row."""
        doc_id, position, token, word_id = pieces.token_columns
        if len(self.orphans):
            orphan = pa.array(self.orphans)
            doc_id = pa.concat_arrays([doc_id, pieces.word_columns[0].take(orphan)])
            word_id = pa.concat_arrays([word_id, pieces.word_columns[1].take(orphan)])
            position, token = (_padded(column, len(self.orphans)) for column in (position, token))
        words = [pieces.word_columns[2], *pieces.unit_columns, pa.array(pieces.unit_weight)]
        return [doc_id, position, token, word_id, *(self._spread(column) for column in words)]

    def _spread(self, column: pa.Array) -> pa.Array:
        """A per-word column on the words' rows (null on the others); a dictionary column keeps its
        dictionary, only its indices move."""
        if column.null_count:  # not built so here, but kept exact if it were
            word_of_row = np.zeros(self.n_rows, dtype=np.int64)
            word_of_row[self.host] = np.arange(len(self.host))
            return column.take(pa.array(word_of_row, mask=self.wordless))
        dictionary = pa.types.is_dictionary(column.type)
        values = (column.indices if dictionary else column).to_numpy(zero_copy_only=False)
        spread = np.zeros(self.n_rows, dtype=values.dtype)
        spread[self.host] = values
        if dictionary:
            return pa.DictionaryArray.from_arrays(pa.array(spread, mask=self.wordless), column.dictionary)
        return pa.array(spread, mask=self.wordless, type=column.type)

    def slice_columns(self, values: np.ndarray, shares: np.ndarray, raw: np.ndarray):
        """Per layer of one method's (L, tokens) scores and (L, words) shares and raw scores, the
        ``(kind, array)`` pairs of its score, token_score, divisor and share columns."""
        n_layers = len(values)
        if len(self.orphans):
            values = np.concatenate([values, np.full((n_layers, len(self.orphans)), np.nan, np.float32)], axis=1)
        first = values[:, self.host]  # (L, words) each word's first token's score
        kept = ~_same(raw, first)  # (L, words) the word's raw score is not its first token's score
        if len(self.orphans):
            kept[:, self.n_tokens <= self.host] = False  # a word without a token: no token score to keep
        dense = values.copy()  # (L, rows)
        dense[:, self.host] = raw  # a word's row holds the word's raw score
        # every layer's documents at once: document d of layer l is group l x D + d
        groups = (np.arange(n_layers)[:, None] * self.n_docs + self.word_doc[None, :]).ravel()  # (L x words,)
        divisor, exact = divisors(raw.ravel(), shares.ravel(), groups, n_layers * self.n_docs)
        divisor, exact = divisor.reshape(n_layers, self.n_docs), exact.reshape(n_layers, self.n_docs)
        for layer in range(n_layers):
            columns = [
                ("score", pa.array(dense[layer])),
                ("token_score", self._on_words(first[layer], kept[layer])),
                ("divisor", pa.array(divisor[layer][self.row_doc])),
            ]
            if not exact[layer].all():  # a column only where needed: the part's record lists it (tables.shares_of)
                columns.append(("share", self._on_words(shares[layer], ~exact[layer][self.word_doc])))
            yield columns

    def _on_words(self, values: np.ndarray, keep: np.ndarray | None = None) -> pa.Array:
        """``values`` (one per word) on the rows of the words ``keep`` marks (every word by
        default), null on every other row."""
        if keep is not None and not keep.any():
            return pa.nulls(self.n_rows, pa.float32())
        column = np.zeros(self.n_rows, dtype=np.float32)
        if keep is None:
            column[self.host] = values
            return pa.array(column, mask=self.wordless)
        rows = self.host[keep]
        column[rows] = values[keep]
        valid = np.zeros(self.n_rows, dtype=bool)
        valid[rows] = True
        return pa.array(column, mask=~valid)


def words_first(table: pa.Table) -> pa.Table:
    """Layout 3's rows in three runs (``row_runs``): the rows of words whose row holds their token's
    score too (words of one token), then those that keep their token's score apart (words of
    several tokens), then every other row, each in its order; any other table as it is. A view
    reads rows in no particular order, and the writer puts each run in row groups of its own."""
    kinds = _row_kinds(table)
    if kinds is None or not (np.diff(kinds) < 0).any():
        return table
    return table.take(pa.array(np.argsort(kinds, kind="stable")))


def row_runs(table: pa.Table) -> list[int] | None:
    """The lengths of ``words_first``'s three runs in a table it ordered; None for other tables.
    Written as row groups of their own, the ``words`` view's filter on ``span_id`` is decided by
    each group's statistics (never row by row), and a group's ``token_score`` columns are null
    throughout or set throughout, which the ``tokens`` view reads as a run, not row by row."""
    kinds = _row_kinds(table)
    return None if kinds is None else np.bincount(kinds, minlength=3).tolist()


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


def divisors(raw: np.ndarray, shares: np.ndarray, word_doc: np.ndarray, n_docs: int):
    """(divisor (D,) float32, exact (D,) bool): per document, a float32 d with raw / d == share
    bit for bit on each of its words, where one was found. ``word_doc`` (words,) is each word's
    document, the words of a document together and the documents in order (as a batch lays them
    out). Tried in turn, each on the documents still open: the total a word's share implies (its
    raw score / its share) and ``STEPS`` ulps either side, then inf (a total <= 0 makes every
    share 0) and NaN (a NaN total). A candidate is first tried on a document's first ``PROBE``
    words and checked on all of them only where those fit, so a method whose shares no divisor
    gives (normalised in float64: flow) costs a few words a try, not every word. Every step works
    on whole arrays: no per-document loop, no index array per word."""
    if len(word_doc) > 1 and (np.diff(word_doc) < 0).any():
        raise ValueError("divisors needs each document's words together and the documents in order")
    counts = np.bincount(word_doc, minlength=n_docs)  # (D,) words of each document
    starts = np.cumsum(counts) - counts  # (D,) each document's first word
    divisor = np.full(n_docs, np.nan, dtype=np.float32)
    exact = counts == 0  # a document without words needs none
    probe_ok = np.arange(PROBE)[None, :] < counts[:, None]  # (D, PROBE) the words a document has
    probe = np.where(probe_ok, starts[:, None] + np.arange(PROBE)[None, :], 0)  # (D, PROBE) their indices
    with np.errstate(all="ignore"):
        for candidate in _candidates(raw, shares, word_doc, counts, starts):
            open_doc = ~exact & (candidate != 0)  # a zero divisor is never kept: DuckDB reads x / 0 as null
            probed_wrong = ~_same(raw[probe] / candidate[:, None], shares[probe]) & probe_ok  # (D, PROBE)
            maybe = open_doc & ~probed_wrong.any(axis=1)
            fits = maybe & _fits(raw, shares, counts, candidate, maybe)
            divisor[fits] = candidate[fits]
            exact |= fits
            if exact.all():
                break
    return divisor, exact


def _fits(raw, shares, counts: np.ndarray, candidate, docs: np.ndarray) -> np.ndarray:
    """(D,) bool: every word of each of ``docs`` has raw / candidate == its share (others: True)."""
    if docs.all():
        raw_of, shares_of, counts_of = raw, shares, counts
    else:  # the words of the documents asked about, still grouped by document
        chosen = np.repeat(docs, counts)  # (words,)
        raw_of, shares_of, counts_of = raw[chosen], shares[chosen], np.where(docs, counts, 0)
    wrong = (~_same(raw_of / np.repeat(candidate, counts_of), shares_of)).view(np.int8)  # (chosen words,)
    bad = np.zeros(len(counts), dtype=np.int64)
    asked = counts_of > 0
    if wrong.size:
        bad[asked] = np.add.reduceat(wrong, (np.cumsum(counts_of) - counts_of)[asked], dtype=np.int64)
    return bad == 0


def _candidates(raw: np.ndarray, shares: np.ndarray, word_doc: np.ndarray, counts: np.ndarray, starts: np.ndarray):
    # any word of a document will do: a float32 share is within half an ulp of raw / total, so raw /
    # share is within an ulp of the total (of the scorer's float32 total, whatever order it summed in).
    # The first word, where it gives a total; any usable word of the document where it does not.
    first = np.minimum(starts, max(len(raw) - 1, 0))  # (D,)
    n_docs = len(counts)
    if len(raw):
        implied = (raw[first] / shares[first]).astype(np.float32)
        usable = (counts > 0) & (shares[first] != 0) & np.isfinite(shares[first]) & np.isfinite(raw[first])
    else:
        implied, usable = np.full(n_docs, np.nan, np.float32), np.zeros(n_docs, dtype=bool)
    if not usable.all():
        each = (shares != 0) & np.isfinite(shares) & np.isfinite(raw)  # (words,)
        later = np.full(n_docs, np.nan, dtype=np.float32)
        later[word_doc[each]] = raw[each] / shares[each]
        implied = np.where(usable, implied, later)
    yield implied
    up, down = implied, implied
    for _ in range(STEPS):  # 1, -1, 2, -2 ... ulps away
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        yield up
        yield down
    yield np.full(n_docs, np.inf, np.float32)
    yield np.full(n_docs, np.nan, np.float32)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit-for-bit equality of two float32 arrays (NaN equals a NaN of the same bits; -0 is not 0)."""
    return a.view(np.int32) == b.view(np.int32)


def _padded(column: pa.Array, extra: int) -> pa.Array:
    """``column`` followed by ``extra`` nulls, of the same type (a dictionary column keeps its dictionary)."""
    index = np.concatenate([np.arange(len(column)), np.zeros(extra, dtype=np.int64)])
    return column.take(pa.array(index, mask=np.arange(len(index)) >= len(column)))
