"""Are the explanations faithful? Perturbation metrics of one document, given a ``predict`` callable.

Pure numpy: ``predict(list of 1-D input-id arrays) -> (B, C) class probabilities`` is the only
contact with a model (the scoring actor passes its batched forward; a test passes a plain loop).
Definitions, after DeYoung et al. 2020 (ERASER), for a document x with predicted class c (the
model's argmax on the full input) and a ranking r of its real tokens (special tokens such as
[CLS] and [SEP] are never ranked and never removed):

    top_k(f)            the ceil(f * n_real) best-ranked real tokens (at least 1, at most n_real)
    comprehensiveness@f p_c(x) - p_c(x without top_k(f))      high = the ranked tokens were needed
    sufficiency@f       p_c(x) - p_c(x with only top_k(f))    low = the ranked tokens were enough
    *_aopc              the plain mean of the above over the fractions f: 1, 5, 10, 20 and 50 % by
                        default, the thresholds of ERASER's released scorer, which also averages
                        them this way (the paper's formula sums over bins and divides by |B| + 1,
                        counting an empty rationale; neither this code nor that scorer does)
    leave-one-out       loo_j = p_c(x) - p_c(x with token j replaced by [MASK], or unk without a mask)
    spearman_loo        Spearman's rho between the method's scores and loo over the real tokens
    spearman_grad       Spearman's rho between the method's scores and input x gradient (of log p_c)

"Without" drops the tokens from the sequence (the model sees a shorter input), "only" keeps the
special tokens and the top-k in their original order. A rho is NaN (stored as null) when either
side is constant, e.g. a document of one real token. Ties in a ranking are broken by position,
so the same scores always remove the same tokens; Spearman gives ties their average rank.

Cost per document of n real tokens: 1 + n (leave-one-out) + 2 * |fractions| * R forwards, R being
the rankings evaluated (methods x layers + 2 baselines), before identical inputs are merged;
the leave-one-out inputs are as long as the document, so they dominate for long documents.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

import numpy as np

FRACTIONS = (0.01, 0.05, 0.10, 0.20, 0.50)  # ERASER's scorer defaults (aopc_thresholds)
CURVES = ("comprehensiveness", "sufficiency")
RANDOM = "random"
GRADIENT = "input_x_gradient"

Predict = Callable[[list[np.ndarray]], np.ndarray]


def metric_name(curve: str, fraction: float) -> str:
    """``comprehensiveness@0.05``: the per-fraction metric names of the store."""
    return f"{curve}@{fraction:.2f}"


def metric_names(fractions: Sequence[float] = FRACTIONS) -> list[str]:
    """Every metric a ranking gets, in the order they are stored."""
    per_fraction = [metric_name(curve, f) for curve in CURVES for f in fractions]
    return [*per_fraction, "comprehensiveness_aopc", "sufficiency_aopc", "spearman_loo", "spearman_grad"]


def n_top(n_real: int, fraction: float) -> int:
    """How many tokens ``fraction`` of a document's ``n_real`` real tokens is: ceil, at least 1."""
    return min(n_real, max(1, math.ceil(fraction * n_real - 1e-9)))


def rank_tokens(scores: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Positions of the real tokens, best score first; equal scores keep position order."""
    positions = np.flatnonzero(real)
    order = np.argsort(-np.asarray(scores, dtype=np.float64)[positions], kind="stable")
    return positions[order]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (Pearson correlation of average ranks); NaN when either side is constant."""
    a, b = _average_ranks(np.asarray(a, np.float64)), _average_ranks(np.asarray(b, np.float64))
    if len(a) < 2:
        return float("nan")
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denominator) if denominator > 0 else float("nan")


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    ranks = np.empty(len(values))
    start = 0
    for stop in range(1, len(values) + 1):
        if stop == len(values) or ordered[stop] != ordered[start]:
            ranks[order[start:stop]] = (start + stop - 1) / 2.0  # ties share their average rank
            start = stop
    return ranks


def random_scores(doc_id: str, n: int, seed: int = 0) -> np.ndarray:
    """The random floor's scores of one document: uniform, seeded by the run seed and the doc id
    (a stable hash, not Python's salted one), so every run and every actor draws the same."""
    digest = int.from_bytes(hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()[:8], "little")
    return np.random.default_rng(digest).random(n)


def aopc(drops: Sequence[float]) -> float:
    """Area over the perturbation curve: the plain mean of the drops, one per fraction (no |B| + 1)."""
    return float(np.mean(drops))


class Perturbations:
    """The distinct perturbed inputs of one document, each forwarded once however many
    rankings ask for it (short documents share their top-1 token across layers, say)."""

    def __init__(self) -> None:
        self.inputs: list[np.ndarray] = []
        self.index: dict[bytes, int] = {}

    def add(self, ids: np.ndarray) -> int:
        key = ids.tobytes()
        if key not in self.index:
            self.index[key] = len(self.inputs)
            self.inputs.append(ids)
        return self.index[key]


def evaluate_document(
    ids: np.ndarray,
    special: np.ndarray,
    rankings: list[tuple[str, int | None, np.ndarray]],
    gradient: np.ndarray | None,
    predict: Predict,
    mask_id: int,
    fractions: Sequence[float] = FRACTIONS,
) -> list[tuple[str, int | None, str, float]]:
    """Every metric of every ranking of one document.

    ids: (n,) input ids of the full document; special: (n,) True at [CLS], [SEP] and the like.
    rankings: (method, layer or None, (n,) scores) triples; gradient: (n,) input x gradient
    (None: no ``spearman_grad``). Returns (method, layer, metric, value) rows; NaN = undefined.
    """
    ids = np.asarray(ids, dtype=np.int64)
    real = ~np.asarray(special, dtype=bool)
    n_real = int(real.sum())
    if n_real == 0:
        raise ValueError("the document has no real tokens to perturb")
    positions = np.flatnonzero(real)
    inputs = Perturbations()
    full = inputs.add(ids)
    loo = [inputs.add(np.where(np.arange(len(ids)) == j, mask_id, ids)) for j in positions]
    planned = []
    for method, layer, scores in rankings:
        order = rank_tokens(scores, real)
        planned.append(
            (
                method,
                layer,
                scores,
                [
                    (
                        inputs.add(_without(ids, order[: n_top(n_real, f)])),
                        inputs.add(_only(ids, real, order[: n_top(n_real, f)])),
                    )
                    for f in fractions
                ],
            )
        )
    probs = np.asarray(predict(inputs.inputs), dtype=np.float64)  # (U, C)
    predicted = int(probs[full].argmax())
    p = probs[:, predicted]  # (U,)
    importance = p[full] - p[loo]  # (n_real,)
    rows = []
    for method, layer, scores, pairs in planned:
        comprehensiveness = [float(p[full] - p[without]) for without, _ in pairs]
        sufficiency = [float(p[full] - p[only]) for _, only in pairs]
        values = [
            *comprehensiveness,
            *sufficiency,
            aopc(comprehensiveness),
            aopc(sufficiency),
            spearman(np.asarray(scores)[positions], importance),
        ]
        names = metric_names(fractions)[:-1]
        if gradient is not None and (method, layer) != (GRADIENT, None):  # against itself rho is 1 by construction
            values.append(spearman(np.asarray(scores)[positions], np.asarray(gradient)[positions]))
            names.append("spearman_grad")
        rows.extend((method, layer, name, value) for name, value in zip(names, values))
    return rows


def _without(ids: np.ndarray, drop: np.ndarray) -> np.ndarray:
    keep = np.ones(len(ids), dtype=bool)
    keep[drop] = False
    return ids[keep]


def _only(ids: np.ndarray, real: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    keep = ~real  # special tokens always stay
    keep[chosen] = True
    return ids[keep]


def document_rankings(
    scores: dict[str, np.ndarray], gradient: np.ndarray | None, doc_id: str, seed: int = 0
) -> list[tuple[str, int | None, np.ndarray]]:
    """(method, layer, scores) for every method's defined layers, then the two baselines.

    scores: method -> (L, n) per-layer token scores (layers a method leaves NaN are skipped).
    """
    out = []
    for method, per_layer in scores.items():
        for layer, row in enumerate(np.asarray(per_layer, dtype=np.float64), start=1):
            if not np.isnan(row).all():
                out.append((method, layer, np.nan_to_num(row, nan=-np.inf)))
    n = len(next(iter(scores.values()))[0]) if scores else len(gradient)
    if gradient is not None:
        out.append((GRADIENT, None, np.asarray(gradient, dtype=np.float64)))
    out.append((RANDOM, None, random_scores(doc_id, n, seed)))
    return out
