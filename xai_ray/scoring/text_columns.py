"""A batch's token and word columns as Arrow arrays, cut from the texts' code points in numpy.

A 400-word review used to cost a Python string per token and per word (``convert_ids_to_tokens``,
``text[s:e].strip()``, ``pa.array`` of the lists, the contraction rule tried word by word). Here
the tokens are one ``take`` from the vocabulary, and a word is a range of the batch's code points
(its pieces' span, moved past the combining marks that follow it as ``words.with_marks`` moves it,
trimmed of white space by two running scans), gathered with every other word of the batch at once
and encoded as UTF-8 in numpy. Each character's class (white space, combining mark, ``\\w``) is
Python's own, asked once per distinct character outside ASCII. The contraction rule reads each
word's kind from those classes, and only the words where a unit starts are walked.
``tests/test_text_columns.py`` checks every column against the per-word cut of ``words.word_texts``
and ``words.join_contractions``.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

import numpy as np
import pyarrow as pa

from xai_ray.words import span_arrays, start_end_pairs

_WORD = re.compile(r"\w")
_APOSTROPHES = (ord("'"), ord("\u2019"))
# per ASCII character: white space to ``str.strip``, ``\w`` to ``re``; none is a combining mark
_SPACE = np.array([chr(c).isspace() for c in range(128)])
_LETTER = np.array([bool(_WORD.fullmatch(chr(c))) for c in range(128)])


class Vocabulary:
    """Every token id's text as one Arrow array, read from the tokenizer once (a scoring actor
    keeps it for its life); ids past its end are read when first seen. A tokenizer that cannot
    name every id of its range (code of a model folder's own) is asked for a batch's ids instead."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        try:
            self.tokens = pa.array(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))), pa.string())
        except Exception:  # an id it never gives: not this actor's failure
            self.tokens = None

    def take(self, ids: np.ndarray) -> pa.Array:
        """(T,) int ids -> (T,) their tokens."""
        if self.tokens is None:
            return pa.array(self.tokenizer.convert_ids_to_tokens(ids.tolist()), pa.string())
        if len(ids) and int(ids.max()) >= len(self.tokens):
            extra = range(len(self.tokens), int(ids.max()) + 1)
            added = pa.array(self.tokenizer.convert_ids_to_tokens(list(extra)), pa.string())
            self.tokens = pa.concat_arrays([self.tokens, added])
        return self.tokens.take(pa.array(ids, pa.int64()))


def text_columns(texts: list[str], token_ids, indexes, n_words, offsets, vocabulary: Vocabulary) -> dict:
    """The ``tokens``, ``word_index``, ``words``, ``word_span`` and ``word_joined`` columns of D
    documents (one list each) from their texts, input ids, word index per token (-1: special),
    word counts and the tokens' character offsets. A text holding a lone surrogate (no Unicode,
    which Arrow cannot store) raises ``UnicodeEncodeError``, as its conversion to Arrow did."""
    n_words = np.asarray(n_words, dtype=np.int64).reshape(-1)  # (D,)
    points = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)  # (chars,)
    words, joined, span = _words(points, [len(t) for t in texts], indexes, n_words, offsets)
    word_offsets = _offsets(n_words)
    ids = np.concatenate([np.asarray(x, dtype=np.int64) for x in token_ids]) if texts else np.zeros(0, np.int64)
    return {
        "tokens": pa.ListArray.from_arrays(_offsets([len(x) for x in token_ids]), vocabulary.take(ids)),
        "word_index": _int_lists([np.asarray(i) for i in indexes]),
        "words": pa.ListArray.from_arrays(word_offsets, _utf8(points, words)),
        "word_span": pa.ListArray.from_arrays(word_offsets, pa.array(span)),
        "word_joined": pa.ListArray.from_arrays(word_offsets, _utf8(points, joined)),
    }


def _words(points: np.ndarray, sizes: list[int], indexes, n_words: np.ndarray, offsets):
    """Texts one after another in ``points``: each word's (start, end) range of ``points`` as
    ``words.word_texts`` cuts it (W, 2), its unit's range (a contraction joined back: ``wasn't``)
    (W, 2), and its unit's first word in its document (W,)."""
    n_docs, total = len(sizes), int(n_words.sum())
    if total == 0:
        return np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.int32)
    text_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(sizes, out=text_start[1:])
    word_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(n_words, out=word_start[1:])
    pieces = np.asarray([len(i) for i in indexes])  # (D,) tokens
    index = np.concatenate([np.asarray(i, dtype=np.int64) for i in indexes])  # (T,)
    index = np.where(index >= 0, index + np.repeat(word_start[:-1], pieces), -1)  # the batch's word ids
    spans = start_end_pairs(list(itertools.chain.from_iterable(offsets)))  # (T, 2) in each text
    spans = spans + np.repeat(text_start[:-1], pieces)[:, None]  # (T, 2) in points
    starts, ends, seen = span_arrays(index, total, spans)  # (W,) each, as the tokenizer gave them
    doc = np.repeat(np.arange(n_docs), n_words)  # (W,)
    low, high = text_start[doc], text_start[doc + 1]
    space, mark, letter = _classes(points)  # (chars,) each
    ends = _past_marks(starts, ends, seen, mark, high)  # words.with_marks
    first, last = np.clip(starts, low, high), np.clip(ends, low, high)  # as a slice of its text clips
    next_solid = _next(~space)  # (chars + 1,)
    last_solid = np.maximum.accumulate(np.where(~space, np.arange(len(points)), -1))  # (chars,)
    stripped_first = np.minimum(next_solid[first], last)  # str.strip()
    stripped_last = np.maximum(np.where(last > 0, last_solid[np.maximum(last - 1, 0)] + 1, 0), stripped_first)
    words = np.stack([stripped_first, stripped_last], axis=1) * seen[:, None]  # (W, 2); no pieces: ""
    span = (np.arange(total) - word_start[doc]).astype(np.int32)  # (W,): each word its own unit
    joined = words.copy()
    for i, j in _units(points, letter, words, starts, ends, seen, doc):
        span[i : j + 1] = span[i]
        joined[i : j + 1] = (first[i], max(last[j], first[i]))  # text[spans[i][0] : spans[j][1]]
    return words, joined, span


def _classes(points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(white space to ``str.strip``, a combining mark, ``\\w`` to ``re``) of every code point:
    ASCII from tables, the rest asked of Python once per distinct character."""
    small = points < 128
    space, letter = np.zeros(len(points), bool), np.zeros(len(points), bool)
    mark = np.zeros(len(points), bool)
    space[small], letter[small] = _SPACE[points[small]], _LETTER[points[small]]
    if not small.all():
        wide = ~small
        distinct, which = np.unique(points[wide], return_inverse=True)
        chars = [chr(c) for c in distinct.tolist()]
        space[wide] = np.array([c.isspace() for c in chars])[which]
        mark[wide] = np.array([unicodedata.category(c).startswith("M") for c in chars])[which]
        letter[wide] = np.array([bool(_WORD.fullmatch(c)) for c in chars])[which]
    return space, mark, letter


def _past_marks(starts, ends, seen, mark, high) -> np.ndarray:
    """Each word's end moved past the combining marks that follow it in its text, stopping where
    another word starts (``words.with_marks``: a tokenizer that strips accents leaves them out)."""
    if not mark.any():
        return ends
    stop = ~mark
    stop[starts[seen & (starts < len(mark))]] = True  # a mark where a word starts stays that word's
    next_stop = _next(stop)
    inside = seen & (ends < high) & (ends >= 0)
    return np.where(inside, np.minimum(next_stop[np.clip(ends, 0, len(mark))], high), ends)


def _next(mask: np.ndarray) -> np.ndarray:
    """(n + 1,): for each position p (and n), the first position at or after p where ``mask``
    holds, else n. One running minimum from the end."""
    at = np.where(mask, np.arange(len(mask)), len(mask))
    return np.append(np.minimum.accumulate(at[::-1])[::-1], len(mask))


def _units(points, letter, words: np.ndarray, starts: np.ndarray, ends: np.ndarray, seen, doc) -> list:
    """``words.contraction_units``'s rule over a batch of words at once: the (first, last) words
    of each unit. Each word's kind comes from its characters (``\\w`` only; an apostrophe and
    ``\\w``; a lone apostrophe), with whether it touches the next word (same text, no space
    between); only the words where a unit can start are walked, left to right."""
    others = np.zeros(len(points) + 1, dtype=np.int64)
    np.cumsum(~letter, out=others[1:])  # others[p]: characters before p that \w does not match
    size = words[:, 1] - words[:, 0]  # (W,)
    opening = np.isin(np.append(points, 0)[words[:, 0]], _APOSTROPHES)
    wordlike = (size > 0) & (others[words[:, 1]] == others[words[:, 0]])
    tail = (size > 1) & opening & (others[words[:, 1]] == others[np.minimum(words[:, 0] + 1, words[:, 1])])
    mark = (size == 1) & opening
    touch = np.zeros(len(words), dtype=bool)  # word k ends where word k + 1 starts, in one text
    touch[:-1] = seen[:-1] & seen[1:] & (doc[:-1] == doc[1:]) & (ends[:-1] == starts[1:])
    one = np.zeros_like(touch)  # extended by the next word, a piece such as 't
    one[:-1] = touch[:-1] & tail[1:]
    two = np.zeros_like(touch)  # extended by a lone apostrophe and a word of letters
    two[:-2] = ~one[:-2] & touch[:-2] & mark[1:-1] & touch[1:-1] & wordlike[2:]
    steps = one | two
    units, done = [], -1  # done: the last word of the last unit
    for i in np.flatnonzero(wordlike & steps).tolist():
        if i <= done:
            continue
        j = i
        while steps[j]:
            j += 1 if one[j] else 2
        units.append((i, j))
        done = j
    return units


def _utf8(points: np.ndarray, ranges: np.ndarray) -> pa.Array:
    """(S, 2) ranges of ``points`` -> S strings: one gather of their code points, encoded as
    UTF-8 in numpy (1 to 4 bytes each)."""
    lengths = (ranges[:, 1] - ranges[:, 0]).astype(np.int64)  # (S,)
    point_offsets = np.zeros(len(ranges) + 1, dtype=np.int64)
    np.cumsum(lengths, out=point_offsets[1:])
    picks = np.repeat(ranges[:, 0] - point_offsets[:-1], lengths) + np.arange(point_offsets[-1])
    code = points[picks].astype(np.int64)  # (P,)
    width = 1 + (code >= 0x80) + (code >= 0x800) + (code >= 0x10000)  # (P,) bytes each
    ends = np.cumsum(width)
    begin = ends - width
    data = np.zeros(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    lead = {1: 0x00, 2: 0xC0, 3: 0xE0, 4: 0xF0}
    for n, first in lead.items():
        at = width == n
        if not at.any():
            continue
        value, start = code[at], begin[at]
        data[start] = first | (value >> (6 * (n - 1)))
        for k in range(1, n):  # continuation bytes: 10xxxxxx
            data[start + k] = 0x80 | ((value >> (6 * (n - 1 - k))) & 0x3F)
    byte_offsets = np.append(0, ends)[point_offsets]  # (S + 1,)
    return pa.StringArray.from_buffers(
        len(ranges), pa.py_buffer(byte_offsets.astype(np.int32)), pa.py_buffer(data.tobytes())
    )


def _offsets(lengths) -> pa.Array:
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return pa.array(out)


def _int_lists(arrays: list[np.ndarray]) -> pa.Array:
    flat = np.concatenate(arrays).astype(np.int32) if arrays else np.zeros(0, dtype=np.int32)
    return pa.ListArray.from_arrays(_offsets([len(a) for a in arrays]), pa.array(flat))
