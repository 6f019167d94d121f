"""One forward pass that yields what the methods need: logits and head-fused attention.

The attention of every layer is fused over heads as soon as the model returns it, so only
(B, L, n, n) floats leave this module instead of (B, L, H, n, n).
"""

from __future__ import annotations

import torch


def fuse_heads(attn: torch.Tensor, fusion: str = "mean", discard_ratio: float = 0.0,
               lengths: torch.Tensor | None = None) -> torch.Tensor:
    """(B, H, n, n) per-head attention -> (B, n, n) fused attention whose real rows sum to 1.

    discard_ratio drops, per head and row, that share of the lowest weights among the row's real
    columns (never column 0, [CLS]) before fusion; max/min fusion renormalises rows afterwards.
    """
    attn = attn.float()
    if discard_ratio > 0:
        attn = _discard_lowest(attn, discard_ratio, lengths)
    if fusion == "mean":
        fused = attn.mean(dim=1)  # (B, n, n)
    elif fusion == "max":
        fused = attn.amax(dim=1)  # (B, n, n)
    elif fusion == "min":
        fused = attn.amin(dim=1)  # (B, n, n)
    else:
        raise ValueError(f"head fusion must be mean, max or min; got {fusion!r}")
    if fusion != "mean" or discard_ratio > 0:
        fused = _renormalise(fused)
    return fused


def _renormalise(rows: torch.Tensor) -> torch.Tensor:
    total = rows.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, rows / total.clamp_min(1e-30), rows)


def _discard_lowest(attn: torch.Tensor, ratio: float, lengths: torch.Tensor | None) -> torch.Tensor:
    batch, _, n, _ = attn.shape
    if lengths is None:
        lengths = torch.full((batch,), n, device=attn.device)
    columns = torch.arange(n, device=attn.device)
    real = columns[None, :] < lengths[:, None]  # (B, n)
    protected = ~real[:, None, None, :] | (columns == 0)[None, None, None, :]  # (B, 1, 1, n)
    ranked = attn.masked_fill(protected, float("inf"))  # (B, H, n, n)
    order = ranked.argsort(dim=-1, stable=True)  # ascending; protected columns last
    rank = order.argsort(dim=-1)  # rank of each column within its row
    n_drop = torch.floor((lengths - 1).clamp_min(0).float() * ratio).long()  # (B,)
    drop = rank < n_drop[:, None, None, None]
    return _renormalise(attn.masked_fill(drop, 0.0))


@torch.inference_mode()
def forward_with_attention(model, encoding: dict, fusion: str = "mean", discard_ratio: float = 0.0):
    """Run the model once; return (logits (B, C), fused attention (B, L, n, n)) as float32."""
    outputs = model(**encoding, output_attentions=True)
    if not outputs.attentions or outputs.attentions[0] is None:
        raise RuntimeError("the model returned no attention weights (is eager attention available?)")
    lengths = encoding["attention_mask"].sum(dim=1)
    fused = [fuse_heads(layer, fusion, discard_ratio, lengths) for layer in outputs.attentions]
    return outputs.logits.float(), torch.stack(fused, dim=1)  # (B, C), (B, L, n, n)
