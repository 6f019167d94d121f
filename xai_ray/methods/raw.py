"""Raw attention: the [CLS] row of each layer's head-fused attention."""

from __future__ import annotations

from xai_ray.methods.base import Method, register
from xai_ray.methods.batched import masked


@register
class RawAttention(Method):
    """Raw attention of layer l: fused softmax(QK^T/sqrt(d)) read from the [CLS] row.

    No residual mixing and no propagation: this is what attention-map viewers show, and it
    fades into near-uniform rows in deep layers (Abnar & Zuidema 2020, fig. 1).
    """

    name = "raw"

    def batch(self, fused, lengths):  # (B, L, N, N) -> (B, L, N)
        return masked(fused[:, :, 0, :], lengths)
