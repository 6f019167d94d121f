"""Word spans and contraction units against plain per-word references written here: the
library reduces runs of pieces in numpy and tries only the words before an apostrophe."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xai_ray.words import join_contractions, word_spans


def spans_by_hand(index, n_words, offsets):
    """Each word's span from a loop over its pieces: min of starts, max of ends; None when it has none."""
    out = []
    for w in range(n_words):
        pieces = [offsets[p] for p in range(len(index)) if index[p] == w]
        out.append((min(s for s, _ in pieces), max(e for _, e in pieces)) if pieces else (None, 0))
    return out


def units_by_hand(texts, spans, text):
    """The contraction rule walked over every word in turn (the rule of ``join_contractions``'s
    docstring): a word of letters or digits takes, while touching, ``'x`` pieces or ``'`` + word."""
    word, quote, tail = re.compile(r"\w+"), re.compile(r"['\u2019]"), re.compile(r"['\u2019]\w+")
    n = len(texts)

    def touch(a, b):
        return spans[a][0] is not None and spans[b][0] is not None and spans[a][1] == spans[b][0]

    first, i = list(range(n)), 0
    while i < n:
        j = i
        if word.fullmatch(texts[i]):
            while True:
                if j + 1 < n and touch(j, j + 1) and tail.fullmatch(texts[j + 1]):
                    j += 1
                elif (
                    j + 2 < n
                    and touch(j, j + 1)
                    and touch(j + 1, j + 2)
                    and quote.fullmatch(texts[j + 1])
                    and word.fullmatch(texts[j + 2])
                ):
                    j += 2
                else:
                    break
        for w in range(i, j + 1):
            first[w] = i
        i = j + 1
    joined = []
    for w in range(n):
        unit = [k for k in range(n) if first[k] == first[w]]
        joined.append(texts[w] if len(unit) == 1 else text[spans[unit[0]][0] : spans[unit[-1]][1]])
    return first, joined


def test_spans_hand_worked_with_specials_and_a_word_of_three_pieces():
    index = np.array([-1, 0, 1, 1, 1, 2, -1])
    offsets = [(0, 0), (0, 2), (3, 5), (5, 11), (11, 15), (15, 16), (0, 0)]
    assert word_spans(index, 3, offsets) == [(0, 2), (3, 15), (15, 16)]


def test_spans_of_a_word_whose_pieces_are_apart_and_a_word_without_pieces():
    # word 0's pieces at positions 1 and 3 (not one run); word 2 has no piece at all
    index = np.array([-1, 0, 1, 0, 3, -1])
    offsets = [(0, 0), (0, 2), (3, 4), (2, 3), (6, 9), (0, 0)]
    assert word_spans(index, 4, offsets) == [(0, 3), (3, 4), (None, 0), (6, 9)]
    assert word_spans(np.array([-1, -1]), 2, [(0, 0), (0, 0)]) == [(None, 0), (None, 0)]


@pytest.mark.parametrize("seed", range(20))
def test_spans_equal_the_per_word_loop_on_random_alignments(seed):
    rng = np.random.default_rng(seed)
    n_words = int(rng.integers(1, 40))
    pieces = rng.integers(1, 4, n_words)  # pieces per word, in order, as a tokenizer gives them
    index = np.concatenate([[-1], np.repeat(np.arange(n_words), pieces), [-1]])
    if seed % 3 == 0:  # some reviews: a few pieces moved out of their word's run, a word dropped
        index[1:-1] = rng.permutation(index[1:-1])
        index[index == n_words - 1] = -1
    starts = np.cumsum(rng.integers(0, 3, len(index)))
    offsets = [(int(s), int(s + rng.integers(0, 4))) for s in starts]
    assert word_spans(index, n_words, offsets) == spans_by_hand(index, n_words, offsets)


def test_units_hand_worked_wordpiece_and_byte_level():
    text = "it wasn't bad, they'd've said"
    # BERT: wasn ' t ; they ' d ' ve
    texts = ["it", "wasn", "'", "t", "bad", ",", "they", "'", "d", "'", "ve", "said"]
    spans = [(0, 2), (3, 7), (7, 8), (8, 9), (10, 13), (13, 14), (15, 19), (19, 20), (20, 21), (21, 22), (22, 24)]
    spans.append((25, 29))
    first, joined = join_contractions(texts, spans, text)
    assert first == [0, 1, 1, 1, 4, 5, 6, 6, 6, 6, 6, 11]
    assert joined[1:4] == ["wasn't"] * 3 and joined[6:11] == ["they'd've"] * 5
    assert joined[0] == "it" and joined[5] == ","
    # byte-level BPE: wasn 't, and a quote after a space stays apart
    text = "wasn't 'quoted'"
    first, joined = join_contractions(
        ["wasn", "'t", "'", "quoted", "'"], [(0, 4), (4, 6), (7, 8), (8, 14), (14, 15)], text
    )
    assert first == [0, 0, 2, 3, 4]
    assert joined == ["wasn't", "wasn't", "'", "quoted", "'"]


@pytest.mark.parametrize("seed", range(30))
def test_units_equal_the_rule_walked_over_every_word(seed):
    rng = np.random.default_rng(seed)
    vocabulary = ["it", "wasn", "'", "t", "'t", "’", "s", "'s", "don", "ve", "'ve", ",", "!", "x1", ""]
    texts = [vocabulary[k] for k in rng.integers(0, len(vocabulary), int(rng.integers(1, 30)))]
    spans, at, text = [], 0, ""
    for word in texts:
        gap = " " if rng.random() < 0.3 else ""
        text += gap
        at += len(gap)
        none = rng.random() < 0.05
        spans.append((None, 0) if none else (at, at + len(word)))
        text += word
        at += len(word)
    assert join_contractions(texts, spans, text) == units_by_hand(texts, spans, text)


def test_a_batch_table_holds_the_same_lists_whichever_way_each_column_came():
    """``rows.table_of``: list columns given as numpy arrays (a document's word index, its
    probabilities) are concatenated in one step; the table equals Arrow's own conversion."""
    import pyarrow as pa

    from xai_ray.scoring.rows import table_of

    schema = pa.schema(
        [("word_index", pa.list_(pa.int32())), ("probs", pa.list_(pa.float32())), ("heads", pa.list_(pa.float64()))]
    )
    meta = [
        {"word_index": np.array([-1, 0, 0, 1, -1]), "probs": np.array([0.25, 0.75], np.float32), "heads": None},
        {"word_index": np.array([], dtype=np.int64), "probs": np.array([1.0, 0.0], np.float32), "heads": None},
        {"word_index": np.array([-1, 0, -1]), "probs": np.array([0.5, 0.5], np.float32), "heads": np.array([1.5, 2.0])},
    ]
    built = table_of(schema, meta, {})
    by_arrow = pa.Table.from_pylist(
        [{k: (None if v is None else v.tolist()) for k, v in m.items()} for m in meta], schema=schema
    )
    assert built.equals(by_arrow)
    assert built.column("word_index").to_pylist() == [[-1, 0, 0, 1, -1], [], [-1, 0, -1]]
