"""Do the explanations agree with people? Plausibility against human rationales, after DeYoung et
al. 2020 (ERASER). Pure numpy: no model, no store.

A rationale marks the passages an annotator found to justify a review's label. It is read over
the review's whitespace tokens (``text.split()``, ERASER's unit), in one of three forms:

    a 0/1 mask        one 0/1 (or true/false) per whitespace token
    token spans       [[start, end], ...]: whitespace tokens start..end-1 (ERASER's evidence spans)
    character spans   [[start, end], ...] over the text; a token is in when any of its characters is

(``rationale_units`` says which a list of pairs is; a JSON string holding any form is parsed.)
A method's score of a whitespace token is the sum of its words' raw scores at that layer (the
tokenizer's words lie inside one whitespace token each), signed methods keeping their signs, so
the tokens pushing hardest toward the explained class rank first, as in the faithfulness metrics.
Only tokens the model read count (a truncated review's tail is left out of both sides).

Metrics of one review, each a row (method, layer, metric, value) beside the faithfulness rows:

    auprc               average precision of the soft scores against the 0/1 rationale (the step
                        sum sum_k (R_k - R_{k-1}) P_k over distinct thresholds, as scikit-learn's
                        ``average_precision_score``); undefined (null) without rationale tokens
    token_f1@rationale  F1 of the top-|rationale| tokens against the rationale (there P = R = F1)
    iou_f1@rationale    the top-|rationale| tokens as maximal runs of neighbours ("spans"); a span
                        is a hit when its IOU with some rationale span (as the annotator marked
                        them: two touching spans are two) is >= 0.5; precision = hits / predicted
                        spans, recall = hits / rationale spans (at most 1), their F1
    token_f1@f, iou_f1@f   the same for the top ceil(f * tokens) tokens

Ties rank by position. ERASER pools token and span counts over the whole corpus (micro); here
each review gives one value so that every mean gets the product's interval over reviews.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence

import numpy as np

FRACTIONS = (0.10, 0.20, 0.50)
UNITS = ("tokens", "chars")
IOU_HIT = 0.5  # ERASER's threshold for a predicted span to count as matching a rationale span
WHITESPACE_TOKEN = re.compile(r"\S+")


class RationaleError(ValueError):
    """A review's rationale cannot be read; its message is the one sentence the errors row keeps."""


def metric_names(fractions: Sequence[float] = FRACTIONS) -> list[str]:
    """Every plausibility metric a ranking gets, in the order they are stored."""
    sizes = ["rationale", *(f"{f:.2f}" for f in fractions)]
    return ["auprc", *(f"{kind}@{size}" for size in sizes for kind in ("token_f1", "iou_f1"))]


def whitespace_tokens(text: str) -> list[tuple[int, int]]:
    """Each whitespace token's (start, end) character span."""
    return [(m.start(), m.end()) for m in WHITESPACE_TOKEN.finditer(text)]


def rationale_mask(value, text: str, units: str = "tokens") -> np.ndarray:
    """One review's rationale -> (T,) bool over its whitespace tokens (see the module docstring).
    Raises ``RationaleError`` naming what is wrong."""
    return rationale_spans(value, text, units)[0]


def rationale_spans(value, text: str, units: str = "tokens") -> tuple[np.ndarray, list[tuple[int, int]]]:
    """One review's rationale -> ((T,) bool over its whitespace tokens, the annotator's spans as
    [start, end) whitespace-token ranges): spans as written (a character span as the tokens it
    touches), a mask's runs. ``iou_f1`` matches predicted spans against these, as ERASER does, so
    two touching spans stay two. Raises ``RationaleError`` naming what is wrong."""
    if units not in UNITS:
        raise RationaleError(f"rationale_units must be one of {', '.join(UNITS)}, got {units!r}")
    spans = whitespace_tokens(text)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RationaleError(
                f"rationale {value[:40]!r} is not JSON (a 0/1 list or a list of [start, end] pairs)"
            ) from None
    value = _listed(value)
    if value is None:
        raise RationaleError("rationale is null")
    if not isinstance(value, list):
        raise RationaleError(f"rationale is a {type(value).__name__}, not a 0/1 list or a list of [start, end] pairs")
    if value and all(not isinstance(v, (list, tuple)) for v in value):
        mask = _mask_of(value, len(spans))
        return mask, runs(mask)
    pairs = [_pair(v) for v in value]
    mask = np.zeros(len(spans), dtype=bool)
    limit = len(spans) if units == "tokens" else len(text)
    gold = []
    for start, end in pairs:
        if start == end:
            raise RationaleError(f"rationale span [{start}, {end}] is empty (its end must be past its start)")
        if not 0 <= start < end <= limit:
            raise RationaleError(
                f"rationale span [{start}, {end}] is outside the review's {limit} {units} (0 <= start < end <= {limit})"
            )
        if units == "chars":
            touched = np.flatnonzero([s < end and start < e for s, e in spans])
            if not len(touched):
                raise RationaleError(f"rationale span [{start}, {end}] of characters holds no word, only white space")
            start, end = int(touched[0]), int(touched[-1]) + 1
        mask[start:end] = True
        gold.append((start, end))
    return mask, gold


def spans_within(spans: list[tuple[int, int]], kept: np.ndarray) -> list[tuple[int, int]]:
    """``spans`` over all whitespace tokens -> the same over the ``kept`` ones only (the tokens the
    model read), each span cut to its kept tokens; a span with none is dropped."""
    kept = np.asarray(kept, dtype=bool)
    index = np.cumsum(kept) - 1
    out = []
    for start, end in spans:
        inside = np.flatnonzero(kept[start:end]) + start
        if len(inside):
            out.append((int(index[inside[0]]), int(index[inside[-1]]) + 1))
    return out


def _listed(value):
    """Arrays as lists at every depth: a Parquet list<list<int>> column reaches pandas as an array of
    arrays, whose truth value numpy refuses to tell."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_listed(item) for item in value]
    return value


def _mask_of(values: list, n_tokens: int) -> np.ndarray:
    if any(v not in (0, 1) for v in values):  # 0.0, 1.0, False and True compare equal to 0 and 1
        raise RationaleError("a rationale mask holds only 0 and 1 (one per whitespace token)")
    if len(values) != n_tokens:
        raise RationaleError(f"rationale mask has {len(values)} values, the review {n_tokens} whitespace tokens")
    return np.asarray(values, dtype=bool)


def _pair(value) -> tuple[int, int]:
    ok = isinstance(value, (list, tuple)) and len(value) == 2
    if not ok or any(not _whole(v) for v in value):
        shown = [None if isinstance(v, float) and math.isnan(v) else v for v in value] if ok else value
        raise RationaleError(f"rationale span {shown!r} is not a [start, end] pair of whole numbers")
    return int(value[0]), int(value[1])


def _whole(value) -> bool:
    """A whole number (``3`` or ``3.0``; not a bool, NaN or an infinity, which JSON text may hold)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def token_scores(
    word_scores: np.ndarray,
    word_starts: Sequence[int | None],
    text: str,
    word_lengths: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(L, W) word scores and each word's first character (and length) -> ((L, T) whitespace-token
    scores, (T,) bool: the tokens holding a scored word, i.e. the ones the model read). A word that
    runs across white space (the tokenizer drops a form feed or a separator control that
    ``str.split`` splits at: "good\x0cfilm" is one word to it) counts for each token it covers."""
    spans = whitespace_tokens(text)
    begins, ends = np.array([b for b, _ in spans]), np.array([e for _, e in spans])
    word_scores = np.atleast_2d(np.asarray(word_scores, dtype=np.float64))
    out = np.zeros((word_scores.shape[0], len(spans)))
    seen = np.zeros(len(spans), dtype=bool)
    for w, start in enumerate(word_starts):
        if start is None:
            continue
        first = int(np.searchsorted(ends, start, side="right"))  # the token whose end lies past the word's start
        end = start + (word_lengths[w] if word_lengths is not None else 1)
        last = max(first + 1, int(np.searchsorted(begins, end, side="left")))  # tokens beginning before its end
        if first < len(spans):
            out[:, first:last] += word_scores[:, w : w + 1]
            seen[first:last] = True
    return out, seen


def word_starts(words: Sequence[str], text: str) -> list[int | None]:
    """Each word's first character, found in order (words are cut from the text in order)."""
    starts, cursor = [], 0
    for word in words:
        found = text.find(word, cursor) if word else -1
        starts.append(None if found < 0 else found)
        cursor = found + len(word) if found >= 0 else cursor
    return starts


def average_precision(scores: np.ndarray, gold: np.ndarray) -> float:
    """Step-wise area under the precision-recall curve; NaN without positives."""
    gold = np.asarray(gold, dtype=bool)
    if not gold.any():
        return float("nan")
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ranked, hits = np.asarray(scores, dtype=np.float64)[order], gold[order]
    last_of_tie = np.r_[ranked[1:] != ranked[:-1], True]  # a threshold admits a whole tie at once
    true_pos = np.cumsum(hits)[last_of_tie]
    admitted = (np.arange(len(ranked)) + 1)[last_of_tie]
    recall = true_pos / gold.sum()
    precision = true_pos / admitted
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def top_tokens(scores: np.ndarray, k: int) -> np.ndarray:
    """(T,) bool: the k best-scored tokens, ties by position."""
    chosen = np.zeros(len(scores), dtype=bool)
    chosen[np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]] = True
    return chosen


def token_f1(predicted: np.ndarray, gold: np.ndarray) -> float:
    true_pos = float(np.sum(predicted & gold))
    if true_pos == 0:
        return 0.0
    precision, recall = true_pos / predicted.sum(), true_pos / gold.sum()
    return 2 * precision * recall / (precision + recall)


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True as [start, end) pairs."""
    edges = np.diff(np.r_[0, np.asarray(mask, dtype=np.int8), 0])
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def iou_f1(predicted: np.ndarray, gold: np.ndarray, gold_spans: list[tuple[int, int]] | None = None) -> float:
    """F1 of span hits (IOU >= 0.5 with some rationale span); 0 when either side has no span. The
    rationale's spans are ``gold_spans`` (the annotator's, ``rationale_spans``), else ``gold``'s runs;
    a span given twice (annotators' spans merged, two character spans in one token) counts once,
    as ERASER keeps its rationales in a set."""
    mine, theirs = runs(predicted), runs(gold) if gold_spans is None else sorted(set(map(tuple, gold_spans)))
    if not mine or not theirs:
        return 0.0

    def iou(a, b):
        overlap = max(0, min(a[1], b[1]) - max(a[0], b[0]))
        return overlap / (max(a[1], b[1]) - min(a[0], b[0]))

    hits = sum(max(iou(p, g) for g in theirs) >= IOU_HIT for p in mine)
    precision, recall = hits / len(mine), min(1.0, hits / len(theirs))
    return 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)


def n_top(n_tokens: int, fraction: float) -> int:
    return min(n_tokens, max(1, math.ceil(fraction * n_tokens - 1e-9)))


def score_review(
    scores: np.ndarray,
    gold: np.ndarray,
    fractions: Sequence[float] = FRACTIONS,
    gold_spans: list[tuple[int, int]] | None = None,
) -> list[float]:
    """Every metric of one ranking (``metric_names`` order): (T,) scores, (T,) bool rationale, and
    its spans (default: its runs). A review without rationale tokens (an empty rationale, or one only
    in a truncated tail) has no value for any metric: null, not 0, which would pull every mean down."""
    gold = np.asarray(gold, dtype=bool)
    sizes = [int(gold.sum()), *(n_top(len(gold), f) for f in fractions)]
    if not gold.any():
        return [float("nan")] * (1 + 2 * len(sizes))
    values = [average_precision(scores, gold)]
    for k in sizes:
        chosen = top_tokens(scores, k)
        values += [token_f1(chosen, gold), iou_f1(chosen, gold, gold_spans)]
    return values


def review_rows(
    rankings: list[tuple[str, int | None, np.ndarray]],
    gold: np.ndarray,
    fractions: Sequence[float] = FRACTIONS,
    gold_spans: list[tuple[int, int]] | None = None,
) -> list[tuple[str, int | None, str, float]]:
    """(method, layer, metric, value) rows of one review: ``rankings`` are (method, layer, (T,)
    scores over the tokens the model read), ``gold`` the rationale over the same tokens, and
    ``gold_spans`` its spans there (``spans_within``)."""
    names = metric_names(fractions)
    return [
        (method, layer, name, value)
        for method, layer, scores in rankings
        for name, value in zip(names, score_review(scores, gold, fractions, gold_spans))
    ]
