"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers")."""

from __future__ import annotations

import numpy as np

from xai_ray.methods.base import PropagatedMethod, as_layers, register


def attention_rollout(A, per_layer: bool = False) -> np.ndarray:
    """[CLS]-row rollout scores of already fused, residual-mixed attention.

    A: (L, n, n) numpy array or torch tensor, rows sum to 1.
    R_1 = A_1, R_l = A_l @ R_(l-1); returns R_L[0] with shape (n,), or every layer's
    R_l[0] with shape (L, n) when ``per_layer``.

    Only [CLS] rows are needed, so each layer's row is a chain of vector-matrix products
    e_0^T A_l A_(l-1) ... A_1 (n^2 work per factor) instead of the n^3 matrix rollout.
    """
    A = as_layers(A)
    n_layers = A.shape[0]
    wanted = range(n_layers) if per_layer else [n_layers - 1]
    rows = []
    for top in wanted:
        row = A[top, 0, :]  # (n,)
        for below in range(top - 1, -1, -1):
            row = row @ A[below]  # (n,)
        rows.append(row)
    return np.stack(rows) if per_layer else rows[0]


@register
class AttentionRollout(PropagatedMethod):
    """Attention rollout: residual-aware attention multiplied through the layers."""

    name = "rollout"

    propagate = staticmethod(attention_rollout)
