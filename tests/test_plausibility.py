"""Plausibility metrics (ERASER): average precision worked by hand and checked against
scikit-learn, token and IOU F1 worked by hand, the three rationale forms on hand-written reviews,
bad rationales refused in one sentence, and words mapped onto whitespace tokens."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from xai_ray.scoring import plausibility as pl

REVIEW = "A dull plot, but the acting is wonderful and moving."
#          0 1    2     3   4   5      6  7         8   9
# whitespace tokens: A | dull | plot, | but | the | acting | is | wonderful | and | moving.


def test_average_precision_by_hand():
    # ranks 1..4 hold gold 1, 0, 1, 0: precision 1 at recall 1/2, 2/3 at recall 1
    assert pl.average_precision(np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 0, 1, 0])) == pytest.approx(
        0.5 * 1 + 0.5 * 2 / 3
    )
    # a tie is one threshold: 0.5 admits two tokens (one gold, P 1/2, R 1/2), 0.1 the third (P 2/3, R 1)
    assert pl.average_precision(np.array([0.5, 0.5, 0.1]), np.array([1, 0, 1])) == pytest.approx(
        0.5 * 0.5 + 0.5 * 2 / 3
    )
    assert np.isnan(pl.average_precision(np.array([0.3, 0.2]), np.array([0, 0])))


def test_average_precision_matches_scikit_learn():
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(2, 40))
        gold = rng.random(n) < rng.uniform(0.1, 0.6)
        if not gold.any():
            gold[int(rng.integers(n))] = True
        scores = rng.normal(size=n)
        if trial % 2:  # coarse scores: many ties
            scores = np.round(scores, 0)
        assert pl.average_precision(scores, gold) == pytest.approx(average_precision_score(gold, scores), abs=1e-12)


def test_token_and_iou_f1_by_hand():
    gold = np.array([0, 1, 1, 1, 0, 0, 0, 1, 0, 0], dtype=bool)  # spans [1, 4) and [7, 8): 4 tokens
    scores = np.array([0.0, 0.9, 0.8, 0.1, 0.0, 0.0, 0.7, 0.6, 0.0, 0.0])
    values = dict(zip(pl.metric_names((0.10, 0.50)), pl.score_review(scores, gold, (0.10, 0.50))))
    # top 4 = tokens 1, 2, 6, 7: 3 of 4 gold, so P = R = F1 = 3/4
    assert values["token_f1@rationale"] == pytest.approx(0.75)
    # predicted spans [1, 3) (IOU 2/3 with [1, 4): a hit) and [6, 8) (IOU 1/2 with [7, 8): a hit, >= 0.5)
    assert values["iou_f1@rationale"] == pytest.approx(1.0)
    # top 10% = 1 token (1): P 1, R 1/4 -> 0.4; its span [1, 2) has IOU 1/3 with [1, 4): no hit
    assert values["token_f1@0.10"] == pytest.approx(2 * 1 * 0.25 / 1.25)
    assert values["iou_f1@0.10"] == 0.0
    # top 50% = 5 tokens (1, 2, 6, 7, then 3 at 0.1): P 4/5, R 1; spans [1, 4) and [6, 8) both hit
    assert values["token_f1@0.50"] == pytest.approx(2 * 0.8 / 1.8)
    assert values["iou_f1@0.50"] == pytest.approx(1.0)
    # ranks 1 2 3 4 5 hold gold 1 1 0 1 1 -> AP = (1 + 1 + 3/4 + 4/5) / 4
    assert values["auprc"] == pytest.approx((1 + 1 + 0.75 + 0.8) / 4)


def test_iou_f1_counts_a_split_prediction_once_per_hit():
    gold = np.array([1, 1, 1, 1, 0, 0], dtype=bool)  # one span of 4
    predicted = np.array([1, 1, 0, 1, 0, 1], dtype=bool)  # three spans: IOU 1/2, 1/4, 0
    # one hit: precision 1/3, recall 1/1 -> F1 1/2
    assert pl.iou_f1(predicted, gold) == pytest.approx(0.5)


def test_iou_f1_counts_a_rationale_span_given_twice_once():
    text = "good bad ugly film"
    predicted = np.array([1, 0, 0, 0], dtype=bool)  # the one gold token, exactly
    for value, units in (
        ([[0, 1]], "tokens"),
        ([[0, 1], [0, 1]], "tokens"),
        ([[0, 1]] * 5, "tokens"),
        ([[0, 2], [2, 4]], "chars"),
    ):  # the last: two character spans in "good"
        gold, spans = pl.rationale_spans(value, text, units)
        assert pl.iou_f1(predicted, gold, spans) == 1.0, value


def test_the_three_rationale_forms_give_one_mask():
    # "but the acting is wonderful and moving." -> tokens 3..9
    expected = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1], dtype=bool)
    start = REVIEW.index("but")
    forms = [
        ([0, 0, 0, 1, 1, 1, 1, 1, 1, 1], "tokens"),
        ([[3, 10]], "tokens"),
        ([[3, 5], [5, 10]], "tokens"),
        ("[[3, 10]]", "tokens"),  # a CSV column holds JSON text
        ([[start, len(REVIEW)]], "chars"),
        ([[start + 1, start + 2], [REVIEW.index("the") + 1, len(REVIEW) - 1]], "chars"),  # one character is enough
        (np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1]), "tokens"),
        ([False, False, False, True, True, True, True, True, True, True], "tokens"),
    ]
    for value, units in forms:
        np.testing.assert_array_equal(pl.rationale_mask(value, REVIEW, units), expected, err_msg=str(value))


@pytest.mark.parametrize(
    ("value", "units", "says"),
    [
        ([1, 0, 1], "tokens", "rationale mask has 3 values, the review 10 whitespace tokens"),
        ([0, 2, 0, 0, 0, 0, 0, 0, 0, 0], "tokens", "holds only 0 and 1"),
        ([[3, 11]], "tokens", "rationale span [3, 11] is outside the review's 10 tokens"),
        ([[5, 5]], "chars", "rationale span [5, 5] is empty"),
        ([[1, 2, 3]], "tokens", "is not a [start, end] pair"),
        ([["a", "b"]], "tokens", "is not a [start, end] pair"),
        ("[[0, Infinity]]", "tokens", "is not a [start, end] pair"),  # JSON text may hold these
        ("[[NaN, 2]]", "chars", "is not a [start, end] pair"),
        (
            [[float("nan"), 2.0]],
            "tokens",
            "span [None, 2.0] is not a [start, end] pair",
        ),  # a Parquet list<list<double>> null
        ("not json", "tokens", "is not JSON"),
        ({"spans": [[1, 2]]}, "tokens", "rationale is a dict"),
        (None, "tokens", "rationale is null"),
        ([[1, 2]], "words", "rationale_units must be one of tokens, chars, got 'words'"),
    ],
)
def test_a_bad_rationale_is_one_sentence(value, units, says):
    with pytest.raises(pl.RationaleError) as caught:
        pl.rationale_mask(value, REVIEW, units)
    message = str(caught.value)
    assert says in message and "\n" not in message


def test_words_sum_onto_their_whitespace_tokens():
    # a tokenizer's words: punctuation split from its word, and the review read only up to "acting"
    words = ["A", "dull", "plot", ",", "but", "the", "acting"]
    starts = pl.word_starts(words, REVIEW)
    assert starts == [0, 2, 7, 11, 13, 17, 21]
    scores = np.array([[0.1, 0.3, 0.2, 0.05, 0.05, 0.1, 0.2], [0.0, -0.5, 0.25, 0.25, 0.0, 0.0, 0.0]])
    found, seen = pl.token_scores(scores, starts, REVIEW)
    np.testing.assert_allclose(found[:, :6], [[0.1, 0.3, 0.25, 0.05, 0.1, 0.2], [0.0, -0.5, 0.5, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(seen, [True] * 6 + [False] * 4)  # the tail was never read
    lengths = [len(w) for w in words]  # with the words' lengths: the same, no word crosses white space
    again, seen_again = pl.token_scores(scores, starts, REVIEW, lengths)
    np.testing.assert_array_equal(again, found)
    np.testing.assert_array_equal(seen_again, seen)


def test_a_word_read_across_a_form_feed_counts_for_both_whitespace_tokens():
    """ "good\x0cfilm" is two whitespace tokens to str.split and one word to the tokenizer (it drops
    the form feed): "film" counted as never read, and a rationale on it left the review's AUPRC null."""
    text = "a good\x0cfilm indeed"
    words = ["a", "good\x0cfilm", "indeed"]
    starts = pl.word_starts(words, text)
    found, seen = pl.token_scores(np.array([[0.1, 0.7, 0.2]]), starts, text, [len(w) for w in words])
    np.testing.assert_allclose(found, [[0.1, 0.7, 0.7, 0.2]])
    assert seen.all()


def test_review_rows_name_every_ranking_and_metric():
    gold = np.array([1, 0, 0, 1], dtype=bool)
    rows = pl.review_rows([("m", 2, np.array([4.0, 3, 2, 1])), ("random", None, np.array([0.1, 0.9, 0.5, 0.2]))], gold)
    assert len(rows) == 2 * len(pl.metric_names())
    by = {(m, metric): v for m, _, metric, v in rows}
    assert by[("m", "auprc")] == pytest.approx((1 + 2 / 4) / 2)
    assert by[("random", "auprc")] == pytest.approx(average_precision_score(gold, [0.1, 0.9, 0.5, 0.2]))
    assert {layer for m, layer, _, _ in rows if m == "random"} == {None}


def test_touching_rationale_spans_stay_two_as_the_annotator_marked_them():
    """Gold [[0, 2], [2, 4]] was rebuilt as the mask's one run [0, 4), so the prediction 0-3 scored
    iou_f1 1.0. ERASER matches the annotated spans: the one predicted span [0, 4) has IOU 2/4 = 0.5
    with each (a hit), precision 1/1, recall 1/2, F1 = 2 * 1 * 0.5 / 1.5 = 2/3."""
    text = "a b c d e f"
    mask, spans = pl.rationale_spans([[0, 2], [2, 4]], text, "tokens")
    assert mask.tolist() == [True] * 4 + [False] * 2 and spans == [(0, 2), (2, 4)]
    chosen = np.array([True] * 4 + [False] * 2)
    assert pl.iou_f1(chosen, mask, spans) == pytest.approx(2 / 3)
    assert pl.iou_f1(chosen, mask) == 1.0  # the mask's runs: one span
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.1, 0.0])
    assert pl.score_review(scores, mask, (0.5,), spans)[2] == pytest.approx(2 / 3)  # iou_f1@rationale
    # character spans keep their own bounds too: "a b" and "c d" touch no common token
    assert pl.rationale_spans([[0, 3], [4, 7]], text, "chars")[1] == [(0, 2), (2, 4)]


def test_spans_are_cut_to_the_tokens_the_model_read():
    kept = np.array([True, True, False, True, True, False])  # token 2 unread, the tail truncated
    assert pl.spans_within([(0, 2), (1, 4), (5, 6)], kept) == [(0, 2), (1, 3)]


def test_a_review_without_rationale_tokens_has_no_value_for_any_metric():
    """token_f1@f and iou_f1@f were 0.0 for a review whose rationale is empty or lies only in its
    truncated tail (auprc and @rationale were null): 0 pulls every mean toward 0."""
    values = pl.score_review(np.array([0.5, 0.3, 0.2]), np.zeros(3, dtype=bool))
    assert len(values) == len(pl.metric_names()) and all(np.isnan(v) for v in values)


def test_a_character_span_of_white_space_only_is_an_error_not_an_empty_rationale():
    with pytest.raises(pl.RationaleError, match="holds no word, only white space"):
        pl.rationale_spans([[4, 5]], "good    film", "chars")


def test_spans_from_a_parquet_list_of_lists_are_read():
    """A Parquet list<list<int64>> column reaches pandas as an array of arrays: the run crashed
    after publishing (numpy refused to tell the truth value of an array)."""
    value = np.empty(2, dtype=object)  # as pandas holds it: one array per span
    value[0], value[1] = np.array([0, 2]), np.array([3, 4])
    assert pl.rationale_mask(value, "a b c d e", "tokens").tolist() == [True, True, False, True, False]
