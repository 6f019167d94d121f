"""Norm-based attention (Kobayashi et al. 2020, "Attention is not only a weight") and its rollout."""

from __future__ import annotations

from xai_ray.methods.base import NORM_ATTENTION, Method, register
from xai_ray.methods.batched import masked, shares
from xai_ray.methods.rollout import AttentionRollout


@register
class NormAttention(Method):
    """Layer l's [CLS] row of || sum_h alpha^h_0j f^h(x_j) ||, as shares of the row.

    f^h(x_j) = v^h_j W_O^h is what head h would add to [CLS] if it attended to token j alone; a
    large weight on a token whose transformed value is small (often [SEP] and punctuation) then
    counts for little, which raw attention cannot see (``xai_ray.model.value_norms``). Heads are
    summed as vectors, so heads that cancel each other out at a token count for little too.
    Read from the capture itself: head fusion, discard_ratio and residual do not apply.
    """

    name = "norm"
    needs = NORM_ATTENTION

    def batch(self, norms, lengths):  # (B, L, N, N) -> (B, L, N)
        return masked(shares(norms[:, :, 0, :]), lengths)


@register
class NormRollout(AttentionRollout):
    """Rollout of norm-based attention: each layer's norms as shares of their row (N~, rows sum
    to 1 like fused attention's), then R_l = A_l R_(l-1) with A = 0.5 N~ + 0.5 I (``residual``),
    from ``start_layer`` up. What reaches [CLS] through the layers, each step weighted by what
    the tokens actually send rather than by attention weights alone."""

    name = "norm_rollout"
    needs = NORM_ATTENTION

    def batch(self, norms, lengths):  # (B, L, N, N) -> (B, L, N)
        return super().batch(shares(norms), lengths)  # padding rows are all 0 and stay 0
