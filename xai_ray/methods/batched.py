"""The torch pieces the methods' batched form shares: masks, shares and the [CLS]-row chain.

A batch of documents arrives right padded: (B, L, N, N) matrices whose rows and columns past a
document's length are 0, and ``lengths`` (B,). Every function keeps the tensors on their device
and in their dtype (float32 on the scoring actor, float64 when a notebook asks ``attribute`` for
one document), so a GPU actor copies only the (B, L, N) scores to the host.
"""

from __future__ import annotations

from collections.abc import Callable


def real_columns(lengths, n: int, device):
    """(B, N) bool: position j is one of document b's real tokens."""
    import torch

    lengths = torch.as_tensor(lengths, device=device)
    return torch.arange(n, device=device)[None, :] < lengths[:, None]


def masked(scores, lengths):
    """(B, L, N) scores with every padding column set to 0 (NaN layers stay NaN in real columns)."""
    real = real_columns(lengths, scores.shape[-1], scores.device)  # (B, N)
    return scores.masked_fill(~real[:, None, :], 0.0)


def shares(scores, signed: bool = False):
    """(..., N) -> each row divided by its sum (``signed``: by the sum of its absolute values).
    A row summing to 0 stays 0; a NaN row stays NaN."""
    import torch

    totals = (scores.abs() if signed else scores).sum(dim=-1, keepdim=True)
    return torch.where(totals > 0, scores / torch.where(totals > 0, totals, torch.ones_like(totals)), scores)


def undefined_below(start: int, defined, n_layers: int):
    """(B, L, N): ``defined`` (B, L - start, N) placed at layers start..L-1, NaN below them."""
    import torch

    batch, _, n = defined.shape
    out = torch.full((batch, n_layers, n), float("nan"), dtype=defined.dtype, device=defined.device)
    out[:, start:] = defined
    return out


def cls_chain(layers, step: Callable):
    """[CLS] rows of every top layer's product: row_t = e_0 M_t M_(t-1) ... M_1, for each t.

    layers: (B, L, N, N); ``step(rows, A)`` applies M = f(A) to a stack of rows (B, K, N) -> (B, K, N)
    without building M (rollout's 0.5 A + 0.5 I, grad_rollout's I + Abar). Top layers are walked
    down together: at layer l, the rows of every top t >= l are multiplied by M_l, one batched
    matmul per layer, L(L+1)/2 vector-matrix products per document in all instead of the L
    matrix products (n^3 each) of rolling out whole matrices. Returns (B, L, N).
    """
    import torch

    batch, n_layers, n, _ = layers.shape
    rows = torch.zeros(batch, n_layers, n, dtype=layers.dtype, device=layers.device)  # (B, L, N)
    if n == 0:
        return rows
    rows[:, :, 0] = 1.0  # e_0 for every top layer
    for layer in range(n_layers - 1, -1, -1):
        rows[:, layer:] = step(rows[:, layer:], layers[:, layer])  # (B, L - layer, N)
    return rows


def as_batch(matrices):
    """One document's (L, n, n) (numpy or torch) -> a (1, L, n, n) float64 torch tensor on the CPU."""
    import numpy as np
    import torch

    if hasattr(matrices, "detach"):
        matrices = matrices.detach().cpu().double()
    else:
        matrices = torch.from_numpy(np.asarray(matrices, dtype=np.float64))
    if matrices.ndim != 3 or matrices.shape[1] != matrices.shape[2]:
        raise ValueError(f"attention must have shape (L, n, n), got {tuple(matrices.shape)}")
    return matrices[None]
