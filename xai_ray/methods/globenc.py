"""GlobEnc (Modarressi et al. 2022, "GlobEnc: Quantifying Global Token Attribution by Incorporating
the Whole Encoder Layer in Transformers", NAACL): norm-based attention through the whole encoder
layer but its FFN, rolled out over the layers."""

from __future__ import annotations

from xai_ray.methods.base import GLOBENC, Method, register
from xai_ray.methods.batched import cls_chain, masked, shares, undefined_below


@register
class GlobEnc(Method):
    """R_l = N~_l R_(l-1) from ``start_layer`` up, N~_l layer l's GlobEnc norms ||T_i(x_j)|| as
    shares of their row (``xai_ray.model.encoder_norms``); the score at layer l is R_l's [CLS] row.

    T_i(x_j) carries token j through attention, the residual connection and both layer norms, so
    no identity is added for the residual (``residual`` does not apply, nor do head_fusion and
    discard_ratio: the norms come from the capture itself)."""

    name = "globenc"
    needs = GLOBENC

    def batch(self, norms, lengths):  # (B, L, N, N) -> (B, L, N)
        start = self.options.start_layer - 1
        rows = cls_chain(shares(norms[:, start:]), lambda rows, layer: rows @ layer)  # (B, L - start, N)
        return undefined_below(start, masked(rows, lengths), norms.shape[1])
