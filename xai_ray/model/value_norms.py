"""Norm-based attention (Kobayashi et al. 2020): how much of each token actually reaches a row.

An attention weight alpha^h_ij says how much of token j head h takes, not how large what it takes
is: the head adds alpha^h_ij f^h(x_j) to row i, where f^h(x_j) = v^h_j W_O^h is token j's value
through that head's slice of the attention output projection. The layer's attention output at
row i is then the sum over j of sum_h alpha^h_ij f^h(x_j), and the norm of each of those vectors
is token j's share of it. The capture (``xai_ray.model.capture``) computes those norms beside the
fused attention when a method reads them (``norm``), from the same per-head probabilities.

Summing the heads as vectors needs every pair of heads' dot products at column j, not the vectors
themselves: || sum_h a_h f_h ||^2 = sum_h,k a_h a_k <f_h, f_k>. That (n, H, H) Gram per document
is built once per layer; the per-block work is then as large as the attention probabilities.
"""

from __future__ import annotations

import torch

UNSUPPORTED = (
    "the norm method needs each attention layer's output projection, and this model's attention "
    "modules expose none it knows (BERT and RoBERTa: attention.output.dense; DistilBERT: attention.out_lin)"
)


def output_projections(model) -> dict[int, torch.Tensor]:
    """id of each self-attention module (what the attention function receives as ``module``) ->
    the weight (D, H*d) of the projection applied to its output."""
    found = {}
    for module in model.modules():
        out_lin = getattr(module, "out_lin", None)  # DistilBERT: inside the attention module itself
        if isinstance(out_lin, torch.nn.Linear):
            found[id(module)] = out_lin.weight
        inner, dense = getattr(module, "self", None), getattr(getattr(module, "output", None), "dense", None)
        if isinstance(inner, torch.nn.Module) and isinstance(dense, torch.nn.Linear):  # BERT, RoBERTa: a sibling
            found[id(inner)] = dense.weight
    return found


def transformed_values(value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(B, H, n, d) values and the (D, H*d) output projection -> (B, n, H, D): f^h(x_j) = v^h_j W_O^h."""
    _, heads, _, size = value.shape
    per_head = weight.float().reshape(weight.shape[0], heads, size)  # (D, H, d): input h*d + k is head h's k
    return torch.einsum("bhjd,ehd->bjhe", value.float(), per_head)  # (B, n, H, D)


def gram_of(vectors: torch.Tensor) -> torch.Tensor:
    """(B, n, K, D) K vectors at each position -> (B, n, K, K) their dot products."""
    return torch.matmul(vectors, vectors.transpose(-1, -2))  # (B, n, K, K)


def value_gram(value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(B, H, n, d) values and the (D, H*d) output projection -> (B, n, H, H): at each position j,
    the dot products <f^h(x_j), f^k(x_j)> of the transformed values of every pair of heads."""
    return gram_of(transformed_values(value, weight))  # (B, n, H, H)


def with_residual(probs: torch.Tensor, start: int) -> torch.Tensor:
    """(..., H, r, n) probabilities of rows start..start+r-1 -> (..., H + 1, r, n): one more
    "head" whose row i is 1 at column i and 0 elsewhere, the weight of the residual connection
    (its vector is the layer's input x_i, the last in a ``globenc`` Gram)."""
    rows, n = probs.shape[-2:]
    diagonal = (
        torch.arange(n, device=probs.device)[None, :] == torch.arange(start, start + rows, device=probs.device)[:, None]
    )
    residual = diagonal.to(probs.dtype).expand(*probs.shape[:-3], 1, rows, n)  # (..., 1, r, n)
    return torch.cat([probs, residual], dim=-3)  # (..., H + 1, r, n)


def vector_norms(probs: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """(B, H, r, n) probabilities of a block of rows and the (B, n, H, H) Gram of their columns ->
    (B, r, n) norms || sum_h probs^h_ij f^h(x_j) ||."""
    mixed = torch.einsum("bhij,bjhk->bijk", probs, gram)  # (B, r, n, H): sum_h a_h <f_h, f_k>
    squared = (mixed * probs.permute(0, 2, 3, 1)).sum(dim=-1)  # (B, r, n)
    return squared.clamp_min(0.0).sqrt()  # rounding can leave a tiny negative
