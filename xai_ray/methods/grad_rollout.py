"""Gradient-weighted attention rollout: Chefer, Gur & Wolf 2021, "Generic Attention-model
Explainability for Interpreting Bi-Modal and Encoder-Decoder Transformers" (ICCV), the rules
for self-attention (eq. 5 and 6 there, rules 5 and 6 of their reference code).

Per layer l, A_l is the (H, n, n) attention probabilities and dA_l = d y_t / d A_l the gradient
of the target class's logit y_t (the pre-softmax output, as their one-hot-times-logits backward):

    Abar_l = mean over heads of clamp(dA_l * A_l, min=0)       (n, n)   [methods.attn_x_grad reads its [CLS] row]
    R_0 = I,  R_l = R_(l-1) + Abar_l R_(l-1)                    (n, n)
    score at layer l = R_l[0], the [CLS] row, as a share (divided by its sum)

Rows are not normalised between layers: the paper's self-attention update (eq. 6) and its
reference code (``apply_self_attention_rules``) add Abar_l R without renormalising (only the
bi-modal cross-attention terms are normalised there, which a text classifier has none of). So
R_l[0] sums to 1 + (positive, gradient-sized) relevance; the stored share divides it by that
sum, which keeps the ranking and makes it comparable with the other methods. The identity keeps
R_l[0, 0] >= 1, so the [CLS] position holds a large share; words exclude it and renormalise.
"""

from __future__ import annotations

import numpy as np

from xai_ray.methods.base import ATTENTION_GRADIENTS, Method, register
from xai_ray.methods.batched import as_batch, cls_chain, masked, shares, undefined_below


def gradient_weighted_heads(attention, gradient):
    """(..., H, n, n) attention and its gradient -> (..., n, n): the head mean of
    clamp(gradient * attention, min=0). Works on numpy arrays and torch tensors alike (the
    capture calls it on each layer's gradient as backward produces it, then lets it go)."""
    return (gradient * attention).clip(min=0).mean(-3)


def identity_step(rows, weighted):
    """rows @ (I + Abar) for (B, K, N) rows, without building I + Abar: one fused ``baddbmm``."""
    return rows.baddbmm(rows, weighted)  # (B, K, N): rows + rows @ Abar


def gradient_rollout(weighted, per_layer: bool = False) -> np.ndarray:
    """[CLS] rows of R_l = (I + Abar_l) R_(l-1), R_0 = I, not normalised.

    weighted: (L, n, n) Abar of every layer. Returns R_L[0], shape (n,), or every R_l[0],
    shape (L, n), when ``per_layer``. R_l = (I + Abar_l)(I + Abar_(l-1))...(I + Abar_1), so its
    [CLS] row is the same chain of vector-matrix products as attention rollout's.
    """
    rows = cls_chain(as_batch(weighted), identity_step)[0].numpy()  # (L, n)
    return rows if per_layer else rows[-1]


@register
class GradientRollout(Method):
    """grad_rollout: Chefer et al.'s gradient-weighted rollout, class-specific (the run's target).

    Layer l holds the rollout of layers ``start_layer``..l (R = I at ``start_layer``); lower
    layers are NaN. ``residual``, ``head_fusion`` and ``discard_ratio`` do not apply: the
    identity is the residual, and heads are always averaged after weighting by the gradient.
    """

    name = "grad_rollout"
    needs = ATTENTION_GRADIENTS
    class_specific = True
    objective = "logit"

    def batch(self, weighted, lengths):  # (B, L, N, N) -> (B, L, N)
        start = self.options.start_layer - 1
        rows = cls_chain(weighted[:, start:], identity_step)  # (B, L - start, N)
        return undefined_below(start, shares(masked(rows, lengths)), weighted.shape[1])
