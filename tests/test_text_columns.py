"""A batch's token and word columns (``scoring.text_columns``) against lists written by hand and
against a per-word reference written here: spans by a loop over pieces, marks and whitespace by a
loop over characters, contractions by the rule walked over every word."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest
from test_word_spans import spans_by_hand, units_by_hand

from xai_ray.scoring.text_columns import Vocabulary, text_columns


class Tokens:
    """A tokenizer's one call that ``Vocabulary`` makes: ids -> tokens ("t<id>")."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def convert_ids_to_tokens(self, ids):
        return [f"t{i}" for i in ids]


def columns(docs: list[tuple[str, list[int], list[tuple[int, int]]]], vocabulary=None) -> dict:
    """``text_columns`` of docs given as (text, word index per token, offsets per token), as lists."""
    texts = [text for text, _, _ in docs]
    indexes = [np.asarray(index) for _, index, _ in docs]
    n_words = [int(max(index, default=-1)) + 1 for _, index, _ in docs]
    token_ids = [list(range(len(index))) for _, index, _ in docs]
    out = text_columns(texts, token_ids, indexes, n_words, [o for _, _, o in docs], vocabulary or Vocabulary(Tokens(8)))
    return {name: array.to_pylist() for name, array in out.items()}


def words_by_hand(text: str, index, n_words: int, offsets) -> tuple[list[str], list[int], list[str]]:
    """Each word cut from the text as a reader would: its pieces' span, its end moved past the
    combining marks that follow (not into another word), stripped; then the contraction units."""
    spans = spans_by_hand(index, n_words, offsets)
    starts = {s for s, _ in spans if s is not None}
    marked = []
    for start, end in spans:
        if start is not None:
            while end < len(text) and end not in starts and unicodedata.category(text[end])[0] == "M":
                end += 1
        marked.append((start, end))
    words = [text[s:e].strip() if s is not None else "" for s, e in marked]
    first, joined = units_by_hand(words, marked, text)
    return words, first, joined


def test_a_batch_hand_worked_contractions_spaces_marks_and_a_word_without_pieces():
    docs = [
        # BERT's pieces: it | wasn ' t | bad | ,  (specials around)
        (
            "it wasn't bad,",
            [-1, 0, 1, 2, 3, 4, 5, -1],
            [(0, 0), (0, 2), (3, 7), (7, 8), (8, 9), (10, 13), (13, 14), (0, 0)],
        ),
        # a piece whose offsets hold the spaces before it; quotes that open no contraction
        ("so  good 'ok'", [-1, 0, 1, 2, 3, 4, -1], [(0, 0), (0, 2), (2, 8), (9, 10), (10, 12), (12, 13), (0, 0)]),
        # a decomposed cafe\u0301 (the tokenizer's offsets leave the accent out), a curly apostrophe
        ("cafe\u0301 isn\u2019t", [-1, 0, 1, 2, 3, -1], [(0, 0), (0, 4), (6, 9), (9, 10), (10, 11), (0, 0)]),
        # word 1 has no piece left (truncation), word 2 is a piece past the text's end
        ("ab cd", [-1, 0, 2, -1], [(0, 0), (0, 2), (3, 9), (0, 0)]),
        ("", [-1, -1], [(0, 0), (0, 0)]),
    ]
    out = columns(docs)
    assert out["words"] == [
        ["it", "wasn", "'", "t", "bad", ","],
        ["so", "good", "'", "ok", "'"],
        ["cafe\u0301", "isn", "\u2019", "t"],
        ["ab", "", "cd"],
        [],
    ]
    assert out["word_span"] == [[0, 1, 1, 1, 4, 5], [0, 1, 2, 3, 4], [0, 1, 1, 1], [0, 1, 2], []]
    assert out["word_joined"] == [
        ["it", "wasn't", "wasn't", "wasn't", "bad", ","],
        ["so", "good", "'", "ok", "'"],
        ["cafe\u0301", "isn\u2019t", "isn\u2019t", "isn\u2019t"],
        ["ab", "", "cd"],
        [],
    ]
    assert out["word_index"] == [index for _, index, _ in docs]
    assert out["tokens"][1] == ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]


def test_ids_past_the_vocabulary_are_read_when_first_seen():
    vocabulary = Vocabulary(Tokens(3))
    docs = [("a b", [-1, 0, 1, -1], [(0, 0), (0, 1), (2, 3), (0, 0)])]
    assert columns(docs, vocabulary)["tokens"] == [["t0", "t1", "t2", "t3"]]
    assert len(vocabulary.tokens) == 4


# letters, digits, apostrophes, white space of every kind str.strip removes, punctuation, an
# accented letter and a combining accent, NBSP; beyond: CJK, an emoji (four UTF-8 bytes),
# ideographic and em spaces, a zero-width joiner (no mark), Devanagari with its vowel sign (a
# spacing mark), a superscript two (\w: a digit)
ALPHABET = list("abZ9_'\u2019") + [" ", "  ", "\t", "\n", "\x1c", ",", "-", "\u00e9", "\u0301", "\u00a0"]
ALPHABET += ["\u4e2d", "\U0001f600", "\u3000", "\u2003", "\u200d", "\u0915", "\u093f", "\u00b2"]


@pytest.mark.parametrize("seed", range(80))
def test_random_batches_equal_the_per_word_reference(seed):
    """Random texts of letters, apostrophes, whitespace of every kind ``str.strip`` removes, marks
    and accented letters (about half the documents ASCII), cut into random pieces: some pieces
    hold spaces, some words lose their pieces, some pieces reach past the text's end."""
    rng = np.random.default_rng(seed)
    docs, expected = [], []
    for _ in range(int(rng.integers(1, 6))):
        ascii_only = rng.random() < 0.5
        alphabet = [c for c in ALPHABET if c.isascii()] if ascii_only else ALPHABET
        text = "".join(alphabet[k] for k in rng.integers(0, len(alphabet), int(rng.integers(0, 40))))
        cuts = np.sort(rng.choice(len(text) + 1, size=min(len(text) + 1, int(rng.integers(1, 12))), replace=False))
        pieces = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        if pieces and rng.random() < 0.2:
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + 3)  # past the end
        word_of = np.cumsum(rng.random(len(pieces)) < 0.7) - 1 if pieces else np.zeros(0, int)
        word_of = np.maximum(word_of, 0)
        n_words = int(word_of.max()) + 1 if len(word_of) else 0
        if n_words > 1 and rng.random() < 0.3:
            word_of[word_of == 0] = -1  # the first word's pieces gone: a word without pieces
        index = [-1, *word_of.tolist(), -1]
        offsets = [(0, 0), *pieces, (0, 0)]
        docs.append((text, index, offsets))
        expected.append(words_by_hand(text, np.asarray(index), n_words, offsets))
    texts = [text for text, _, _ in docs]
    indexes = [np.asarray(index) for _, index, _ in docs]
    n_words = [len(words) for words, _, _ in expected]
    out = text_columns(
        texts, [list(range(len(i))) for i in indexes], indexes, n_words, [o for _, _, o in docs], Vocabulary(Tokens(64))
    )
    assert out["words"].to_pylist() == [words for words, _, _ in expected]
    assert out["word_span"].to_pylist() == [first for _, first, _ in expected]
    assert out["word_joined"].to_pylist() == [joined for _, _, joined in expected]


def test_a_lone_surrogate_is_refused_as_arrow_refused_it():
    """No Unicode (JSON's "\\ud800" escape makes one): the actor's batch fallback then records that
    review alone as an error, as when Arrow refused its words."""
    with pytest.raises(UnicodeEncodeError):
        columns([("a\ud800b", [-1, 0, -1], [(0, 0), (0, 3), (0, 0)])])


def test_a_tokenizer_that_cannot_name_every_id_is_asked_for_the_batchs_ids():
    class Partial(Tokens):
        def convert_ids_to_tokens(self, ids):
            if 5 in ids:  # an id it never gives
                raise KeyError(5)
            return super().convert_ids_to_tokens(ids)

    docs = [("a b", [-1, 0, 1, -1], [(0, 0), (0, 1), (2, 3), (0, 0)])]
    assert columns(docs, Vocabulary(Partial(8)))["tokens"] == [["t0", "t1", "t2", "t3"]]
