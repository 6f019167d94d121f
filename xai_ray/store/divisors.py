"""Per document, a float32 divisor that turns its words' raw scores into their shares bit for bit.

Store layout 3 (``scores_v3``) keeps a word's share as raw / a divisor per document, method and
layer: the scorer divides each word's float32 sum by the document's float32 total, so a share is
within half an ulp of raw / total and the total is found near raw / share. The writer checks the
divisor it keeps on every word; a document where none fits keeps its shares.
"""

from __future__ import annotations

import numpy as np

STEPS = 2  # ulps either side of the total a word's share implies, tried as its document's divisor
PROBE = 4  # words of a document a divisor is tried on before all of them


def divisors(raw: np.ndarray, shares: np.ndarray, word_doc: np.ndarray, n_docs: int, ordered: bool = False):
    """(divisor (D,) float32, exact (D,) bool): per document, a float32 d with raw / d == share
    bit for bit on each of its words, where one was found. ``word_doc`` (words,) is each word's
    document, the words of a document together and the documents in order (as a batch lays them
    out). Tried in turn, each on the documents still open: the total a word's share implies (its
    raw score / its share) and ``STEPS`` ulps either side, then inf (a total <= 0 makes every
    share 0) and NaN (a NaN total). A candidate is first tried on a document's first ``PROBE``
    words and checked on all of them only where those fit, so shares no divisor gives cost a few
    words a try, not every word. Every step works on whole arrays: no per-document loop, no index
    array per word. ``ordered``: the caller built ``word_doc`` in order, which is then not checked."""
    if not ordered and len(word_doc) > 1 and (np.diff(word_doc) < 0).any():
        raise ValueError("divisors needs each document's words together and the documents in order")
    counts = np.bincount(word_doc, minlength=n_docs)  # (D,) words of each document
    starts = np.cumsum(counts) - counts  # (D,) each document's first word
    divisor = np.full(n_docs, np.nan, dtype=np.float32)
    exact = counts == 0  # a document without words needs none
    if exact.all():  # no words at all (a batch of reviews with none): nothing to find, nothing to index
        return divisor, exact
    probe_ok = np.arange(PROBE)[None, :] < counts[:, None]  # (D, PROBE) the words a document has
    probe = np.where(probe_ok, starts[:, None] + np.arange(PROBE)[None, :], 0)  # (D, PROBE) their indices
    with np.errstate(all="ignore"):
        for candidate in _candidates(raw, shares, word_doc, counts, starts):
            open_doc = ~exact & (candidate != 0)  # a zero divisor is never kept: DuckDB reads x / 0 as null
            probed_wrong = ~same_bits(raw[probe] / candidate[:, None], shares[probe]) & probe_ok  # (D, PROBE)
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
    wrong = (~same_bits(raw_of / np.repeat(candidate, counts_of), shares_of)).view(np.int8)  # (chosen words,)
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


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit-for-bit equality of two float32 arrays (NaN equals a NaN of the same bits; -0 is not 0)."""
    return a.view(np.int32) == b.view(np.int32)
