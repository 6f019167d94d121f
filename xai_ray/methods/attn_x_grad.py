"""Attention x gradient per layer: the [CLS] row of Abar_l = mean over heads of
clamp(dy_t/dA_l * A_l, min=0), the gradient-weighted attention of Chefer, Gur & Wolf 2021
("Generic Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder
Transformers", eq. 5) before it is rolled out (``methods.grad_rollout``).

Like raw attention it reads one layer alone, but only the heads and positions whose attention
raises the target class's logit count.
"""

from __future__ import annotations

from xai_ray.methods.base import ATTENTION_GRADIENTS, Method, register
from xai_ray.methods.batched import masked, shares


@register
class AttentionTimesGradient(Method):
    """attn_x_grad: Abar_l[0] of every layer as a share (a layer whose [CLS] row has no positive
    term, so nothing to share, stays 0)."""

    name = "attn_x_grad"
    needs = ATTENTION_GRADIENTS
    class_specific = True
    objective = "logit"

    def batch(self, weighted, lengths):  # (B, L, N, N) -> (B, L, N)
        return shares(masked(weighted[:, :, 0, :], lengths))
