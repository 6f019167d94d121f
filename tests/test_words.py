"""Sub-token -> word alignment against hand-worked examples and the real tiny tokenizers."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import pytest

from xai_ray.words import lift, merge_attention, merge_scores, normalise, word_index, word_texts

# --------------------------------------------------------------------------- hand-worked


def test_word_index_dense_with_specials():
    index, n_words = word_index([None, 0, 1, 1, 2, None])
    assert index.tolist() == [-1, 0, 1, 1, 2, -1]
    assert index.dtype == np.int64
    assert n_words == 3


def test_word_index_renumbers_sparse_ids():
    # After truncation of a window, word ids may start late and skip numbers.
    index, n_words = word_index([None, 3, 3, 5, 9, 9, None])
    assert index.tolist() == [-1, 0, 0, 1, 2, 2, -1]
    assert n_words == 3


def test_word_index_only_specials():
    index, n_words = word_index([None, None])
    assert index.tolist() == [-1, -1]
    assert n_words == 0


def test_word_texts_cut_from_offsets():
    text = "Hi unbelievable!"
    #        0123456789012345
    # [CLS] hi un ##believ ##able ! [SEP]
    index = np.array([-1, 0, 1, 1, 1, 2, -1])
    offsets = [(0, 0), (0, 2), (3, 5), (5, 11), (11, 15), (15, 16), (0, 0)]
    assert word_texts(index, 3, offsets, text) == ["Hi", "unbelievable", "!"]


def test_word_texts_byte_level_space_piece():
    # A byte-level BPE "Ġ" piece with an empty span at the start of its word.
    text = "a good"
    index = np.array([-1, 0, 1, 1, 1, -1])
    offsets = [(0, 0), (0, 1), (2, 2), (2, 3), (3, 6), (0, 0)]
    assert word_texts(index, 2, offsets, text) == ["a", "good"]


def test_merge_scores_sums_pieces_and_skips_specials():
    index = np.array([-1, 0, 1, 1, 2, -1])
    scores = np.array(
        [
            [0.30, 0.10, 0.20, 0.05, 0.15, 0.20],
            [1.00, 2.00, 3.00, 4.00, 5.00, 6.00],
        ]
    )
    # layer 1: w0 = 0.10, w1 = 0.20 + 0.05 = 0.25, w2 = 0.15   ([CLS] 0.30 and [SEP] 0.20 left out)
    # layer 2: w0 = 2, w1 = 3 + 4 = 7, w2 = 5
    merged = merge_scores(scores, index, 3)
    assert merged.shape == (2, 3)
    np.testing.assert_allclose(merged, [[0.10, 0.25, 0.15], [2.0, 7.0, 5.0]], atol=1e-15)


def test_merge_scores_word_pieces_not_adjacent_in_index():
    # A word index may repeat after another word (e.g. ids shared by non-adjacent pieces).
    index = np.array([0, 1, 0, -1])
    scores = np.array([[1.0, 10.0, 100.0, 1000.0]])
    np.testing.assert_allclose(merge_scores(scores, index, 2), [[101.0, 10.0]])


def test_normalise_hand_values():
    word_scores = np.array(
        [
            [0.10, 0.25, 0.15],  # sum 0.5
            [2.0, 7.0, 1.0],  # sum 10
            [0.0, 0.0, 0.0],  # nothing to share: stays zero
        ]
    )
    expected = np.array(
        [
            [0.2, 0.5, 0.3],
            [0.2, 0.7, 0.1],
            [0.0, 0.0, 0.0],
        ]
    )
    np.testing.assert_allclose(normalise(word_scores), expected, atol=1e-15)
    sums = normalise(word_scores).sum(axis=-1)
    np.testing.assert_allclose(sums[:2], 1.0, atol=1e-15)


def test_lift_is_one_for_every_unit_under_an_even_spread_and_a_contraction_takes_its_pieces_mean():
    # 5 words: "it", then "wasn" "'" "t" (one unit starting at word 1), then "bad"
    span = [0, 1, 1, 1, 4]
    even = lift(np.full((1, 5), 0.2), span)
    assert even[0, [0, 4]].tolist() == pytest.approx([1.0, 1.0])
    assert even[0, 1:4].sum() == pytest.approx(1.0)  # the unit's lift, not 3
    # by hand: shares .1 | .3 .15 .15 | .3 -> "it" .5, "wasn't" (.6 / 3 words) x 5 = 1.0, "bad" 1.5
    shares = np.array([[0.1, 0.3, 0.15, 0.15, 0.3]])
    got = lift(shares, span)
    assert [got[0, 0], got[0, 1:4].sum(), got[0, 4]] == pytest.approx([0.5, 1.0, 1.5])
    assert lift(shares, [0, 1, 2, 3, 4])[0].tolist() == pytest.approx([0.5, 1.5, 0.75, 0.75, 1.5])


def test_merge_attention_to_is_sum_from_is_mean():
    # positions: 0 = [CLS] (special), 1 and 2 = pieces of word 0, 3 = word 1
    index = np.array([-1, 0, 0, 1])
    attention = np.array(
        [
            [0.40, 0.10, 0.20, 0.30],
            [0.10, 0.20, 0.30, 0.40],
            [0.30, 0.30, 0.10, 0.30],
            [0.25, 0.25, 0.25, 0.25],
        ]
    )
    # to-a-word (columns summed over pieces), specials' column dropped:
    #   row 1 -> [0.2 + 0.3, 0.4] = [0.5, 0.4]
    #   row 2 -> [0.3 + 0.1, 0.3] = [0.4, 0.3]
    #   row 3 -> [0.25 + 0.25, 0.25] = [0.5, 0.25]
    # from-a-word (rows averaged over pieces), specials' row dropped:
    #   word 0 = mean(row 1, row 2) = [0.45, 0.35];  word 1 = row 3 = [0.5, 0.25]
    merged = merge_attention(attention, index, 2)
    assert merged.shape == (2, 2)
    np.testing.assert_allclose(merged, [[0.45, 0.35], [0.5, 0.25]], atol=1e-15)
    # Renormalised, every word's row sums to 1: [0.45, 0.35] / 0.8, [0.5, 0.25] / 0.75
    renormalised = normalise(merged)
    np.testing.assert_allclose(renormalised, [[0.5625, 0.4375], [2 / 3, 1 / 3]], atol=1e-15)
    np.testing.assert_allclose(renormalised.sum(axis=-1), 1.0, atol=1e-15)


def test_merge_attention_without_specials_keeps_row_mass():
    # No specials: word rows are means of stochastic rows, so they still sum to 1.
    rng = np.random.default_rng(0)
    attention = rng.random((5, 5))
    attention /= attention.sum(axis=1, keepdims=True)
    index = np.array([0, 0, 1, 2, 2])
    merged = merge_attention(attention, index, 3)
    expected = np.zeros((3, 3))
    members = {0: [0, 1], 1: [2], 2: [3, 4]}
    for w_from, rows in members.items():
        for w_to, cols in members.items():
            expected[w_from, w_to] = sum(attention[i, j] for i in rows for j in cols) / len(rows)
    np.testing.assert_allclose(merged, expected, atol=1e-12)
    np.testing.assert_allclose(merged.sum(axis=1), 1.0, atol=1e-12)


# --------------------------------------------------------------------------- real tokenizers

WORD_PATTERN = re.compile(r"\w+|[^\w\s]+")


def surface_words(text: str) -> list[tuple[str, int, int]]:
    """Whitespace/punctuation words of ``text`` with their character spans."""
    return [(m.group(), m.start(), m.end()) for m in WORD_PATTERN.finditer(text)]


def pieces_by_word(tokens, offsets, special_tokens, text):
    """Token positions of each surface word, found from character offsets alone (not word ids)."""
    words = surface_words(text)
    groups = [[] for _ in words]
    for position, (token, (start, end)) in enumerate(zip(tokens, offsets, strict=True)):
        if token in special_tokens:
            continue
        owners = [w for w, (_, ws, we) in enumerate(words) if ws <= start and end <= we]
        assert len(owners) >= 1, (token, start, end)
        groups[owners[0]].append(position)
    return [w for w, _, _ in words], groups


def test_wordpiece_tokenizer_gives_word_ids_and_offsets(wordpiece_tokenizer):
    text = "The acting was unbelievable, playing wonderfully!"
    encoding = wordpiece_tokenizer(text, return_offsets_mapping=True)
    assert wordpiece_tokenizer.is_fast
    assert encoding.tokens() == [
        "[CLS]",
        "the",
        "acting",
        "was",
        "un",
        "##believ",
        "##able",
        ",",
        "play",
        "##ing",
        "wonder",
        "##ful",
        "##ly",
        "!",
        "[SEP]",
    ]
    assert encoding.word_ids() == [None, 0, 1, 2, 3, 3, 3, 4, 5, 5, 6, 6, 6, 7, None]
    assert encoding["offset_mapping"][4:7] == [(15, 17), (17, 23), (23, 27)]


def test_bpe_tokenizer_gives_word_ids_and_offsets(bpe_tokenizer):
    text = "The film was unbelievable!"
    encoding = bpe_tokenizer(text, return_offsets_mapping=True)
    assert bpe_tokenizer.is_fast
    tokens = encoding.tokens()
    assert tokens[0] == "<s>" and tokens[-1] == "</s>"
    word_ids = encoding.word_ids()
    assert word_ids[0] is None and word_ids[-1] is None
    assert set(w for w in word_ids if w is not None) == {0, 1, 2, 3, 4}
    # "unbelievable" never occurs in the training sentences: it must split into several pieces.
    assert word_ids.count(3) > 1
    offsets = encoding["offset_mapping"]
    pieces = "".join(text[s:e] for (s, e), w in zip(offsets, word_ids, strict=True) if w == 3)
    assert pieces == "unbelievable"


@pytest.mark.parametrize(
    ("which", "text"),
    [
        ("wordpiece", "The acting was unbelievable, playing wonderfully!"),
        ("wordpiece", "I loved the films and the plot."),
        ("bpe", "The film was unbelievable!"),
        ("bpe", "not very good, the acting was playing wonderfully."),
    ],
)
def test_word_alignment_with_real_tokenizers(which, text, wordpiece_tokenizer, bpe_tokenizer):
    tokenizer = wordpiece_tokenizer if which == "wordpiece" else bpe_tokenizer
    encoding = tokenizer(text, return_offsets_mapping=True)
    tokens = encoding.tokens()
    offsets = encoding["offset_mapping"]
    index, n_words = word_index(encoding.word_ids())

    expected_words, groups = pieces_by_word(tokens, offsets, set(tokenizer.all_special_tokens), text)
    assert any(len(g) > 1 for g in groups), "the sentence should hold a word split into several pieces"
    assert n_words == len(expected_words)
    assert word_texts(index, n_words, offsets, text) == expected_words

    # Token scores: two layers of arbitrary values, specials included.
    n = len(tokens)
    scores = np.stack([np.arange(1, n + 1, dtype=float), np.linspace(0.5, 2.0, n) ** 2])
    merged = merge_scores(scores, index, n_words)
    for w, positions in enumerate(groups):
        for layer in range(2):
            hand = 0.0
            for p in positions:
                hand += scores[layer, p]
            assert merged[layer, w] == pytest.approx(hand, abs=1e-12)
    # Everything but the special tokens' share ends up in some word.
    specials = [p for p, token in enumerate(tokens) if token in tokenizer.all_special_tokens]
    np.testing.assert_allclose(merged.sum(axis=1), scores.sum(axis=1) - scores[:, specials].sum(axis=1))
    np.testing.assert_allclose(normalise(merged).sum(axis=1), 1.0, atol=1e-12)


def test_wordpiece_merge_scores_hand_pieces(wordpiece_tokenizer):
    text = "The acting was unbelievable, playing wonderfully!"
    encoding = wordpiece_tokenizer(text, return_offsets_mapping=True)
    # [CLS] the acting was un ##believ ##able , play ##ing wonder ##ful ##ly ! [SEP]
    #   0    1    2     3   4    5       6    7   8    9     10    11   12  13  14
    scores = np.array([[0.2, 0.05, 0.05, 0.05, 0.1, 0.1, 0.05, 0.02, 0.03, 0.05, 0.1, 0.04, 0.01, 0.05, 0.1]])
    index, n_words = word_index(encoding.word_ids())
    merged = merge_scores(scores, index, n_words)
    expected = [
        0.05,  # The
        0.05,  # acting
        0.05,  # was
        0.1 + 0.1 + 0.05,  # un ##believ ##able
        0.02,  # ,
        0.03 + 0.05,  # play ##ing
        0.1 + 0.04 + 0.01,  # wonder ##ful ##ly
        0.05,  # !
    ]
    np.testing.assert_allclose(merged[0], expected, atol=1e-15)
    # Specials hold 0.2 + 0.1 = 0.3, words 0.7: renormalised they are divided by 0.7.
    np.testing.assert_allclose(normalise(merged)[0], np.array(expected) / 0.7, atol=1e-12)


def test_a_decomposed_accent_stays_on_its_word():
    # BERT's lowercasing tokenizer strips accents: a decomposed "café" (e + U+0301) has offsets that
    # end before the mark, and the word read "cafe"; a mark that starts a word of its own stays there
    text = "the cafe\u0301 scene"
    index = np.array([-1, 0, 1, 2, -1])
    offsets = [(0, 0), (0, 3), (4, 8), (10, 15), (0, 0)]
    assert word_texts(index, 3, offsets, text) == ["the", "cafe\u0301", "scene"]
    zalgo = "ha\u0300\u0301\u0302 x"
    assert word_texts(np.array([0, 1]), 2, [(0, 2), (6, 7)], zalgo) == ["ha\u0300\u0301\u0302", "x"]
    split = "e\u0301"  # a byte-level tokenizer may make the mark a word of its own
    assert word_texts(np.array([0, 1]), 2, [(0, 1), (1, 2)], split) == ["e", "\u0301"]


def test_a_word_that_shows_nothing_joins_the_next_word_or_the_one_before_at_the_end():
    """Byte-level BPE makes a word of a lone "Ġ" (a trailing or doubled space, offsets (i, i)) and of
    tabs and line breaks: each had a row with an empty text and a share of the review's score."""
    from xai_ray.words import visible_word_ids

    #       "good\t\tbad\n\nfilm " : good | \t | \t | bad | \n | \n | film | " " (empty span)
    text = "good\t\tbad\n\nfilm "
    offsets = [(0, 4), (4, 5), (5, 6), (6, 9), (9, 10), (10, 11), (11, 15), (16, 16)]
    assert visible_word_ids([0, 1, 2, 3, 4, 5, 6, 7], offsets, text) == [0, 3, 3, 3, 6, 6, 6, 6]
    assert visible_word_ids([0, 0, 1], [(0, 2), (2, 4), (5, 8)], "good bad") == [0, 0, 1]  # nothing to join
    assert visible_word_ids([None, 0, None], [(0, 0), (0, 1), (0, 0)], "a") == [None, 0, None]  # specials stay


def test_words_a_combining_mark_cut_are_joined_again():
    """Byte-level BPE's pre-tokenizer cuts a word at each combining mark: the U+0301 of a decomposed
    "cafe\u0301" was a word of its own, "re\u0301sume\u0301" four words, Hindi, Thai and Arabic
    with vowel marks several. Pieces that touch with a mark at the seam are one word; a mark
    after a space stays apart."""
    from xai_ray.words import visible_word_ids

    assert visible_word_ids([0, 1, 2], [(0, 4), (4, 5), (6, 8)], "cafe\u0301 ok") == [0, 0, 2]
    resume = "re\u0301sume\u0301 ok"  # re | \u0301 | sume | \u0301 | ok
    offsets = [(0, 2), (2, 3), (3, 7), (7, 8), (9, 11)]
    assert visible_word_ids([0, 1, 2, 3, 4], offsets, resume) == [0, 0, 0, 0, 4]
    hindi = "\u0926\u094b\u0938\u094d\u0924"  # do | s + virama | t: one word, cut after each mark
    assert visible_word_ids([0, 1, 2], [(0, 2), (2, 4), (4, 5)], hindi) == [0, 0, 0]
    assert visible_word_ids([0, 1, 2], [(0, 4), (5, 6), (7, 10)], "good \u0301 bad") == [0, 1, 2]  # apart
    # a line break, then a mark: the break joins the next word that shows something, the mark's too
    assert visible_word_ids([0, 1, 2, 3], [(0, 2), (2, 3), (3, 4), (4, 6)], "ab\n\u0301cd") == [0, 2, 2, 2]
    assert visible_word_ids([0, 1], [(0, 1), (1, 2)], "\u00e9\u00e8") == [0, 1]  # composed letters: no mark


def test_a_roberta_review_with_decomposed_accents_keeps_its_words_whole(scorer_factory):
    text = "cafe\u0301 re\u0301sume\u0301 nai\u0308ve"  # short: the tiny model's input is cut at 16 tokens
    rows = scorer_factory("roberta")({"doc_id": ["a"], "text": [text], "label": [1]})
    words = rows.column("words").to_pylist()[0]
    for word in ("re\u0301sume\u0301", "nai\u0308ve", "cafe\u0301"):
        assert word in words, words
    assert not [w for w in words if unicodedata.category(w[0]).startswith("M")], words
    shares = np.asarray(rows.column("word_scores_rollout").to_pylist()[0]).reshape(-1, len(words))
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-5)


def test_a_roberta_review_with_line_breaks_has_no_empty_words(scorer_factory):
    rows = scorer_factory("roberta")(
        {"doc_id": ["a", "b"], "text": ["good\t\tbad\n\n\nfilm", "the film was good "], "label": [1, 0]}
    )
    for words, shares in zip(rows.column("words").to_pylist(), rows.column("word_scores_rollout").to_pylist()):
        assert "" not in words and [w.strip() for w in words] == words, words
        np.testing.assert_allclose(np.asarray(shares).reshape(-1, len(words)).sum(axis=1), 1.0, atol=1e-5)
    assert rows.column("words").to_pylist()[0] == ["good", "bad", "film"]


@pytest.mark.parametrize("long_text", ["head", "head_tail", "window"])
def test_white_space_pieces_kept_by_a_cut_join_a_word_the_cut_kept(scorer_factory, long_text):
    """Line breaks just before the cut joined the word past it, which the cut left out: the kept
    pieces made a word of empty text again (5 of 30 truncated IMDB reviews on a tiny RoBERTa)."""
    texts = ["good bad film\n\n\n\n\n\n\n\n good bad film", "good\n\n bad\n\n film\n\n\n\n good bad film good"]
    rows = scorer_factory("roberta", max_length=12, long_text=long_text)(
        {"doc_id": ["a", "b"], "text": texts, "label": [1, 0]}
    )
    for words, shares in zip(rows.column("words").to_pylist(), rows.column("word_scores_rollout").to_pylist()):
        assert "" not in words and [w.strip() for w in words] == words, words
        np.testing.assert_allclose(np.asarray(shares).reshape(-1, len(words)).sum(axis=1), 1.0, atol=1e-5)
