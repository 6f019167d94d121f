"""A batch's token and word columns as Arrow arrays, cut from the texts' bytes in numpy.

A 400-word review used to cost a Python string per token and per word (``convert_ids_to_tokens``,
``text[s:e].strip()``, ``pa.array`` of the lists, the contraction rule tried word by word). Here
the tokens are one ``take`` from the vocabulary, and a word is a byte range into the batch's
texts: its pieces' span, trimmed of whitespace by two running scans, gathered with every other word
of the batch at once; the contraction rule reads each word's kind from its bytes, and only the
words where a unit starts are walked. A review with a character outside ASCII (a character is then
not a byte, and accents may follow a word: ``words.with_marks``) is cut word by word, as
``words.word_texts`` cuts it; ``tests/test_text_columns.py`` checks both against that.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from xai_ray.words import join_contractions, span_arrays, start_end_pairs, with_marks, word_spans

# What ``str.strip()`` removes from ASCII text, what ``\w`` matches there, and the apostrophe.
_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")] = True
_LETTER = np.zeros(256, dtype=bool)
_LETTER[list(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")] = True
_APOSTROPHE = ord("'")


class Vocabulary:
    """Every token id's text as one Arrow array, read from the tokenizer once (a scoring actor
    keeps it for its life); ids past its end are read when first seen."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.tokens = pa.array(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))), pa.string())

    def take(self, ids: np.ndarray) -> pa.Array:
        """(T,) int ids -> (T,) their tokens."""
        if len(ids) and int(ids.max()) >= len(self.tokens):
            extra = range(len(self.tokens), int(ids.max()) + 1)
            added = pa.array(self.tokenizer.convert_ids_to_tokens(list(extra)), pa.string())
            self.tokens = pa.concat_arrays([self.tokens, added])
        return self.tokens.take(pa.array(ids, pa.int64()))


def text_columns(texts: list[str], token_ids, indexes, n_words, offsets, vocabulary: Vocabulary) -> dict:
    """The ``tokens``, ``word_index``, ``words``, ``word_span`` and ``word_joined`` columns of D
    documents (one list each) from their texts, input ids, word index per token (-1: special),
    word counts and the tokens' character offsets."""
    n_words = np.asarray(n_words, dtype=np.int64).reshape(-1)  # (D,)
    plain = [d for d, text in enumerate(texts) if text.isascii()]
    head = "".join(texts[d] for d in plain).encode("ascii")
    words, joined, span = _ascii_words(
        head, [texts[d] for d in plain], [indexes[d] for d in plain], n_words[plain], [offsets[d] for d in plain]
    )
    cut = np.zeros(len(plain) + 1, dtype=np.int64)
    np.cumsum(n_words[plain], out=cut[1:])
    blocks = {"words": [], "joined": [], "span": []}  # per document in turn
    tail, base, k = [], len(head), 0
    for d, text in enumerate(texts):
        if k < len(plain) and plain[k] == d:
            rows = slice(cut[k], cut[k + 1])
            blocks["words"].append(words[rows])
            blocks["joined"].append(joined[rows])
            blocks["span"].append(span[rows])
            k += 1
            continue
        raw, word_ranges, joined_ranges, units = _unicode_words(text, indexes[d], int(n_words[d]), offsets[d])
        blocks["words"].append(word_ranges + base)
        blocks["joined"].append(joined_ranges + base)
        blocks["span"].append(units)
        tail.append(raw)
        base += len(raw)
    buffer = np.frombuffer(head + b"".join(tail), dtype=np.uint8)
    word_offsets = _offsets(n_words)
    ids = np.concatenate([np.asarray(x, dtype=np.int64) for x in token_ids]) if texts else np.zeros(0, np.int64)
    return {
        "tokens": pa.ListArray.from_arrays(_offsets([len(x) for x in token_ids]), vocabulary.take(ids)),
        "word_index": _int_lists([np.asarray(i) for i in indexes]),
        "words": pa.ListArray.from_arrays(word_offsets, _strings(buffer, _stacked(blocks["words"]))),
        "word_span": _int_lists(blocks["span"]),
        "word_joined": pa.ListArray.from_arrays(word_offsets, _strings(buffer, _stacked(blocks["joined"]))),
    }


def _ascii_words(raw: bytes, texts: list[str], indexes, n_words: np.ndarray, offsets):
    """Texts of one byte a character, one after another in ``raw``: each word's (start, end)
    range of ``raw`` stripped of whitespace (W, 2), its unit's range (a contraction joined back:
    ``wasn't``) (W, 2), and its unit's first word in its document (W,)."""
    n_docs, total = len(texts), int(n_words.sum())
    if total == 0:
        return np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.int32)
    text_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=text_start[1:])
    word_start = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(n_words, out=word_start[1:])
    pieces = np.asarray([len(i) for i in indexes])  # (D,) tokens
    index = np.concatenate([np.asarray(i, dtype=np.int64) for i in indexes])  # (T,)
    index = np.where(index >= 0, index + np.repeat(word_start[:-1], pieces), -1)  # the batch's word ids
    spans = start_end_pairs(list(itertools.chain.from_iterable(offsets)))  # (T, 2) in each text
    spans = spans + np.repeat(text_start[:-1], pieces)[:, None]  # (T, 2) in raw
    given_starts, given_ends, seen = span_arrays(index, total, spans)  # (W,) each
    doc = np.repeat(np.arange(n_docs), n_words)  # (W,)
    low, high = text_start[doc], text_start[doc + 1]
    starts, ends = np.clip(given_starts, low, high), np.clip(given_ends, low, high)  # as a slice of its text clips
    data = np.frombuffer(raw, dtype=np.uint8)
    at = np.arange(len(data))
    solid = ~_SPACE[data]  # (bytes,)
    next_solid = np.append(np.minimum.accumulate(np.where(solid, at, len(data))[::-1])[::-1], len(data))
    last_solid = np.maximum.accumulate(np.where(solid, at, -1))  # (bytes,)
    first = np.minimum(next_solid[starts], ends)
    last = np.maximum(np.where(ends > 0, last_solid[np.maximum(ends - 1, 0)] + 1, 0), first)
    words = np.stack([first, last], axis=1) * seen[:, None]  # (W, 2); a word without pieces reads ""
    span = (np.arange(total) - word_start[doc]).astype(np.int32)  # (W,): each word its own unit
    joined = words.copy()
    for i, j in _units(data, words, given_starts, given_ends, seen, doc):
        span[i : j + 1] = span[i]
        joined[i : j + 1] = (starts[i], max(ends[j], starts[i]))  # text[spans[i][0] : spans[j][1]]
    return words, joined, span


def _units(data: np.ndarray, words: np.ndarray, starts: np.ndarray, ends: np.ndarray, seen, doc) -> list:
    """``words.contraction_units``'s rule over a batch of ASCII words at once: the (first, last)
    words of each unit. Each word's kind comes from its bytes (``\\w`` only; an apostrophe and
    ``\\w``; a lone apostrophe), with whether it touches the next word (same text, no space
    between); only the words where a unit can start are walked, left to right."""
    others = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum(~_LETTER[data], out=others[1:])  # others[p]: bytes before p that \w does not match
    size = words[:, 1] - words[:, 0]  # (W,)
    opening = np.append(data, 0)[words[:, 0]] == _APOSTROPHE
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


def _unicode_words(text: str, index, n_words: int, offsets) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """A text with characters outside ASCII, word by word as ``words.word_texts`` cuts it: its
    words' and units' UTF-8 bytes one after another, their ranges in those bytes, and the units."""
    spans = with_marks(word_spans(index, n_words, offsets), text)
    words = [text[s:e].strip() if s is not None else "" for s, e in spans]
    first, joined = join_contractions(words, spans, text)
    encoded = [w.encode("utf-8") for w in words + joined]
    sizes = np.asarray([len(b) for b in encoded], dtype=np.int64)
    ends = np.cumsum(sizes)
    ranges = np.stack([ends - sizes, ends], axis=1)  # (2W, 2)
    return b"".join(encoded), ranges[:n_words], ranges[n_words:], np.asarray(first, dtype=np.int32)


def _offsets(lengths) -> pa.Array:
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return pa.array(out)


def _stacked(ranges: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(ranges) if ranges else np.zeros((0, 2), dtype=np.int64)


def _strings(buffer: np.ndarray, ranges: np.ndarray) -> pa.Array:
    """(S, 2) byte ranges of ``buffer`` -> S strings: one gather of their bytes."""
    lengths = (ranges[:, 1] - ranges[:, 0]).astype(np.int64)  # (S,)
    value_offsets = np.zeros(len(ranges) + 1, dtype=np.int64)
    np.cumsum(lengths, out=value_offsets[1:])
    picks = np.repeat(ranges[:, 0] - value_offsets[:-1], lengths) + np.arange(value_offsets[-1])  # (bytes,)
    return pa.StringArray.from_buffers(
        len(ranges), pa.py_buffer(value_offsets.astype(np.int32)), pa.py_buffer(buffer[picks].tobytes())
    )


def _int_lists(arrays: list[np.ndarray]) -> pa.Array:
    flat = np.concatenate(arrays).astype(np.int32) if arrays else np.zeros(0, dtype=np.int32)
    return pa.ListArray.from_arrays(_offsets([len(a) for a in arrays]), pa.array(flat))
