"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

The attention graph is a layered DAG: position i at level l links to position j at level
l-1 with capacity A[l-1][i, j] (layer index 0 = the model's layer 1). The flow score of input
token j at layer l is the max-flow value from [CLS] at level l to token j at level 0. Exact
max-flow values, computed by the numba push-relabel kernel in ``maxflow.py``: it warm-starts
each token from the previous token's flow instead of solving every token from scratch.
"""

from __future__ import annotations

import numpy as np

from xai_ray.methods.base import Method, as_layers, mix_residual, register


def attention_flow(A, per_layer: bool = False) -> np.ndarray:
    """[CLS] attention-flow scores of already fused, residual-mixed attention.

    A: (L, n, n) numpy array or torch tensor, rows sum to 1 (they are the capacities).
    Returns the max-flow value from (level L, position 0) to every (level 0, position j) with
    shape (n,), or every layer's values with shape (L, n) when ``per_layer`` (row l-1 uses
    source level l and only levels 0..l). Every value is at most the source's out-capacity
    (1 for row-stochastic A) and at most the column sum of A[0] (the token's in-capacity).
    """
    from xai_ray.methods.maxflow import flow_scores  # numba: imported by the runs that ask for flow, no other

    A = np.ascontiguousarray(as_layers(A))  # (L, n, n)
    if not np.isfinite(A).all() or (A < 0).any():
        raise ValueError("attention capacities must be finite and non-negative")
    n_layers, n = A.shape[:2]
    layers = np.arange(1, n_layers + 1) if per_layer else np.array([n_layers])  # (K,)
    if n_layers == 0 or n == 0:
        scores = np.zeros((layers.shape[0], n))  # (K, n)
    else:
        scores = flow_scores(A, layers.astype(np.int64))  # (K, n)
    return scores if per_layer else scores[0]


@register
class AttentionFlow(Method):
    """Attention flow: the max flow each input token can take from [CLS] through the layers.

    Unlike rollout, which multiplies attention through (paths share no capacity), flow treats
    attention weights as capacities, so a token gets what the narrowest cut allows.

    Scores are shares: each layer's max-flow values divided by their sum over the tokens, so they
    sum to 1 per layer like raw attention and rollout (Abnar & Zuidema's reference normalises
    the same way). The max-flow values themselves grow with depth (their sum is not bounded by 1:
    every token's flow is computed alone, and the flows share capacity), so they compare neither
    across layers nor across documents; ``attention_flow`` still returns them.

    The solver is a host program run one document at a time (``host_stage``): the only method
    whose (L, n, n) attention is copied off the model's device, by a CPU stage after a GPU actor.
    """

    name = "flow"
    host_stage = True

    def batch(self, fused, lengths):  # (B, L, N, N) -> (B, L, N), one document at a time on the host
        import torch

        out = torch.zeros(fused.shape[:3], dtype=torch.float64)  # (B, L, N)
        for b, n in enumerate(torch.as_tensor(lengths).tolist()):
            out[b, :, :n] = torch.from_numpy(self.attribute(fused[b, :, :n, :n].detach().cpu()))
        return out.to(device=fused.device, dtype=fused.dtype)

    def attribute(self, fused) -> np.ndarray:  # (L, n, n) -> (L, n), each defined row sums to 1
        fused = as_layers(fused)
        start = self.options.start_layer - 1
        values = np.full(fused.shape[:2], np.nan)  # (L, n): layers below start stay undefined
        if start < fused.shape[0]:
            values[start:] = attention_flow(mix_residual(fused[start:], self.options.residual), per_layer=True)
        totals = values.sum(axis=1, keepdims=True)  # (L, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(totals > 0, values / totals, values)
