"""The small shared base of every explanation method.

A method turns what one forward (and, for gradient methods, backward) pass captured of a batch
of documents into per-layer scores over their input positions (``Method.batch``: torch tensors
on the model's device, (B, L, N, N) in, (B, L, N) out, padding masked; ``attribute`` is the same
math on one document in float64 numpy). It is pure array math: no Ray, no Parquet, no Hugging
Face. What it reads is named by ``Method.needs`` (the capture in ``xai_ray.model`` produces each
once per batch, whatever the number of methods reading it), per document:

    attention            (L, n, n)  head-fused attention of layer 1..L, real tokens only, rows sum to 1
    norm_attention       (L, n, n)  ||sum_h alpha^h_ij f^h(x_j)|| per layer (``xai_ray.model.value_norms``)
    globenc              (L, n, n)  ||A (sum_h alpha^h_ij f^h(x_j) + [i==j] x_j)|| per layer, A both layer
                                    norms' linear part (``xai_ray.model.encoder_norms``)
    attention_gradients  (L, n, n)  per layer, the head mean of clamp(dy_t/dA * A, min=0) (Chefer et al.)
    input_x_gradient     (n,)       word embedding x gradient of log p_t, summed over the hidden size
    integrated_gradients (n,)       integrated gradients of log p_t from a zero word-embedding baseline
    lrp                  (n,)       summed input embedding x gradient of the logit y_t, attention
                                    probabilities and layer norms' 1/sigma held constant (``lrp``)

    scores: (L, n)     scores[l-1, j] = score of input position j read at layer l ([CLS] row)

Layers a method does not define carry NaN (below ``start_layer``; every layer but the last for
methods without layers, see ``TokenAttribution``). Scores are shares (``to_shares``): each
defined layer sums to 1 over the tokens, or, for signed methods, its absolute values do.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from xai_ray.methods.batched import as_batch, masked, shares, undefined_below

RESIDUAL_MODES = ("half", "none")
# Rows of the fused matrices always sum to 1 (mean fusion, or max/min/discard renormalised), and
# for such rows (W + I) renormalised is exactly 0.5 W + 0.5 I: "add" was "half" under another name.
RETIRED_RESIDUAL = {
    "add": "residual=add (W + I, rows renormalised) equals residual=half whenever rows sum to 1, "
    "which fused attention always does here; use residual=half"
}
HEAD_FUSIONS = ("mean", "max", "min")

# What a method reads (``Method.needs``): the names of the captures in ``xai_ray.model``.
ATTENTION = "attention"
NORM_ATTENTION = "norm_attention"
GLOBENC = "globenc"
ATTENTION_GRADIENTS = "attention_gradients"
INPUT_GRADIENTS = "input_x_gradient"
INTEGRATED_GRADIENTS = "integrated_gradients"
LRP = "lrp"
GRADIENT_NEEDS = (ATTENTION_GRADIENTS, INPUT_GRADIENTS, INTEGRATED_GRADIENTS, LRP)


@dataclass(frozen=True)
class AttentionOptions:
    """How per-head attention becomes the matrices the methods read.

    residual: ``half`` is Abnar & Zuidema's A = 0.5*W + 0.5*I; ``none`` keeps W as it is. (W + I
        with rows renormalised, vit-explain's form, is the same matrix once W's rows sum to 1.)
    head_fusion: how the H heads of a layer become one matrix (``mean``, ``max``, ``min``);
        ``max``/``min`` rows are renormalised so every row still sums to 1.
    discard_ratio: share of the lowest weights of each row dropped per head before fusion
        (column 0, [CLS], is never dropped), then rows renormalised.
    start_layer: first layer (1-based) that rollout and flow propagate from.
    """

    residual: str = "half"
    head_fusion: str = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 1

    def __post_init__(self) -> None:
        if self.residual in RETIRED_RESIDUAL:
            raise ValueError(RETIRED_RESIDUAL[self.residual])
        if self.residual not in RESIDUAL_MODES:
            raise ValueError(f"residual must be one of {RESIDUAL_MODES}, got {self.residual!r}")
        if self.head_fusion not in HEAD_FUSIONS:
            raise ValueError(f"head_fusion must be one of {HEAD_FUSIONS}, got {self.head_fusion!r}")
        if not 0.0 <= self.discard_ratio < 1.0:
            raise ValueError(f"discard_ratio must be in [0, 1), got {self.discard_ratio!r}")
        if self.start_layer < 1:
            raise ValueError(f"start_layer is 1-based and must be >= 1, got {self.start_layer!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def mix_residual(fused: np.ndarray, mode: str) -> np.ndarray:
    """Account for the residual stream: (..., n, n) -> (..., n, n), rows still sum to 1."""
    fused = np.asarray(fused, dtype=np.float64)
    if mode == "none":
        return fused
    eye = np.eye(fused.shape[-1])
    if mode == "half":
        return 0.5 * fused + 0.5 * eye
    raise ValueError(f"residual must be one of {RESIDUAL_MODES}, got {mode!r}")


def as_layers(A) -> np.ndarray:
    """Accept a numpy array or torch tensor of shape (L, n, n); return float64 numpy."""
    if hasattr(A, "detach"):
        A = A.detach().cpu().double().numpy()
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"attention must have shape (L, n, n), got {A.shape}")
    return A


def to_shares(scores: np.ndarray, signed: bool = False) -> np.ndarray:
    """(L, n) scores -> each row divided by its sum (``signed``: by the sum of its absolute
    values, so signs survive and |scores| sum to 1). A row summing to 0 stays 0; NaN rows stay NaN."""
    scores = np.asarray(scores, dtype=np.float64)
    totals = (np.abs(scores) if signed else scores).sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, scores / np.where(totals > 0, totals, 1.0), scores)


class Method:
    """One explanation method. Subclasses set ``name`` and implement ``batch``.

    needs: which capture the method reads (see the module docstring).
    class_specific: the scores explain one class (the run's ``target``); attention methods do not.
    signed: scores may be negative (evidence against the target class); shares of |score|.
    objective: what a class-specific method differentiates: ``logit`` or ``log_probability`` of the target.
    host_stage: the method runs on the host, one document at a time (attention flow's max-flow
        solver): a GPU actor leaves it to a CPU stage after it, with the attention it reads.
    """

    name: ClassVar[str]
    needs: ClassVar[str] = ATTENTION
    class_specific: ClassVar[bool] = False
    signed: ClassVar[bool] = False
    objective: ClassVar[str | None] = None
    host_stage: ClassVar[bool] = False

    def __init__(self, options: AttentionOptions | None = None) -> None:
        self.options = options or AttentionOptions()

    def batch(self, matrices, lengths):  # (B, L, N, N) -> (B, L, N)
        """Scores of a right-padded batch, on its device and in its dtype: (B, L, N, N) torch
        matrices and (B,) lengths in, (B, L, N) out, padding columns 0, undefined layers NaN."""
        raise NotImplementedError

    def scores(self, captured: dict, lengths, n_layers: int):
        """(B, L, N) scores of a batch from its captures (``captured[self.needs]``, torch)."""
        return self.batch(captured[self.needs], lengths)

    def attribute(self, fused) -> np.ndarray:  # (L, n, n) -> (L, n)
        """One document's (L, n) scores in float64 numpy: the batched form on a batch of one."""
        matrices = as_batch(fused)  # (1, L, n, n)
        return self.batch(matrices, [matrices.shape[-1]])[0].numpy()

    def explain(self, captured: dict, n_layers: int) -> np.ndarray:
        """(L, n) scores of one document from its captures (``captured[self.needs]``)."""
        return self.attribute(captured[self.needs])


class TokenAttribution(Method):
    """A method with one score per input token and no layers (input x gradient, integrated
    gradients, lrp).

    Its scores are stored under the last layer and every other layer is NaN (not stored): layer l
    of every method reads the model up to layer l, and these read all of it, down from the
    logits. Every view that defaults to the last layer (``topk``, the report's per-method
    sections, method agreement, nightly) then includes them. Signed: shares of |score|.
    """

    needs: ClassVar[str]
    class_specific = True
    signed = True
    objective = "log_probability"

    def scores(self, captured: dict, lengths, n_layers: int):  # (B, N) -> (B, L, N)
        values = captured[self.needs]  # (B, N)
        last = masked(shares(values, signed=True)[:, None, :], lengths)  # (B, 1, N)
        return undefined_below(max(1, int(n_layers)) - 1, last, max(1, int(n_layers)))

    def attribute(self, values, n_layers: int = 1) -> np.ndarray:  # (n,) -> (L, n)
        import torch

        values = values.detach().cpu().double() if hasattr(values, "detach") else np.asarray(values, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"token attributions must have shape (n,), got {tuple(values.shape)}")
        batch = torch.as_tensor(values)[None]  # (1, n)
        return self.scores({self.needs: batch}, [batch.shape[1]], n_layers)[0].numpy()

    def explain(self, captured: dict, n_layers: int) -> np.ndarray:
        return self.attribute(captured[self.needs], n_layers)


REGISTRY: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    REGISTRY[cls.name] = cls
    return cls


def methods_need(names) -> set[str]:
    """The captures the methods ``names`` read (``Method.needs``); unknown names need none here."""
    return {REGISTRY[name].needs for name in names if name in REGISTRY}


def get_method(name: str, options: AttentionOptions | None = None) -> Method:
    if name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        raise ValueError(f"unknown method {name!r}; known methods: {known}")
    return REGISTRY[name](options)


def build_attention(
    per_head, residual: str = "half", head_fusion: str = "mean", discard_ratio: float = 0.0
) -> np.ndarray:
    """Raw per-head attention (L, H, n, n) -> the (L, n, n) matrices rollout and flow take.

    For notebook users holding ``output_attentions`` (stack the layers first): drops each head
    row's lowest ``discard_ratio`` share (never column 0, [CLS]), fuses heads (mean/max/min,
    rows renormalised when that breaks their sum), then mixes in the residual stream.
    The pipeline does the same inside the forward pass (``xai_ray.model.capture``).
    """
    options = AttentionOptions(residual=residual, head_fusion=head_fusion, discard_ratio=discard_ratio)
    heads = per_head.detach().cpu().double().numpy() if hasattr(per_head, "detach") else np.asarray(per_head, float)
    if heads.ndim != 4 or heads.shape[-1] != heads.shape[-2]:
        raise ValueError(f"per-head attention must have shape (L, H, n, n), got {heads.shape}")
    if options.discard_ratio > 0:
        heads = _discard_lowest(heads, options.discard_ratio)
    fused = {"mean": heads.mean, "max": heads.max, "min": heads.min}[options.head_fusion](axis=1)  # (L, n, n)
    if options.head_fusion != "mean" or options.discard_ratio > 0:
        fused = _renormalise(fused)
    return mix_residual(fused, options.residual)


def _renormalise(rows: np.ndarray) -> np.ndarray:
    total = rows.sum(axis=-1, keepdims=True)
    return np.divide(rows, total, out=rows.copy(), where=total > 0)


def _discard_lowest(heads: np.ndarray, ratio: float) -> np.ndarray:
    n = heads.shape[-1]
    ranked = heads.copy()
    ranked[..., 0] = np.inf  # [CLS] is never dropped
    rank = np.argsort(np.argsort(ranked, axis=-1, kind="stable"), axis=-1, kind="stable")
    kept = np.where(rank < int(np.floor((n - 1) * ratio)), 0.0, heads)
    return _renormalise(kept)
