"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers")."""

from __future__ import annotations

import numpy as np

from xai_ray.methods.base import Method, register
from xai_ray.methods.batched import as_batch, cls_chain, masked, undefined_below


def attention_rollout(A, per_layer: bool = False) -> np.ndarray:
    """[CLS]-row rollout scores of already fused, residual-mixed attention.

    A: (L, n, n) numpy array or torch tensor, rows sum to 1.
    R_1 = A_1, R_l = A_l @ R_(l-1); returns R_L[0] with shape (n,), or every layer's
    R_l[0] with shape (L, n) when ``per_layer``.

    Only [CLS] rows are needed, so each layer's row is a chain of vector-matrix products
    e_0^T A_l A_(l-1) ... A_1 (n^2 work per factor) instead of the n^3 matrix rollout.
    """
    rows = cls_chain(as_batch(A), lambda rows, layer: rows @ layer)[0].numpy()  # (L, n)
    return rows if per_layer else rows[-1]


def residual_step(residual: str):
    """rows @ M for M = 0.5 A + 0.5 I (``half``) or M = A (``none``), without building M: one fused
    ``baddbmm`` (0.5 rows + 0.5 rows @ A), no temporaries for the product and the sum."""
    import torch

    if residual == "none":
        return lambda rows, layer: rows @ layer
    return lambda rows, layer: torch.baddbmm(rows, rows, layer, beta=0.5, alpha=0.5)  # (B, K, N)


@register
class AttentionRollout(Method):
    """Attention rollout: residual-aware attention multiplied through the layers, from
    ``start_layer`` up (lower layers are NaN)."""

    name = "rollout"

    def batch(self, fused, lengths):  # (B, L, N, N) -> (B, L, N)
        start = self.options.start_layer - 1
        rows = cls_chain(fused[:, start:], residual_step(self.options.residual))  # (B, L - start, N)
        return undefined_below(start, masked(rows, lengths), fused.shape[1])
