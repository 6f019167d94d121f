"""Raw attention: the [CLS] row of each layer's head-fused attention."""

from __future__ import annotations

import numpy as np

from xai_ray.methods.base import Method, as_layers, register


@register
class RawAttention(Method):
    """Raw attention of layer l: fused softmax(QK^T/sqrt(d)) read from the [CLS] row.

    No residual mixing and no propagation: this is what attention-map viewers show, and it
    fades into near-uniform rows in deep layers (Abnar & Zuidema 2020, fig. 1).
    """

    name = "raw"

    def attribute(self, fused: np.ndarray) -> np.ndarray:  # (L, n, n) -> (L, n)
        return as_layers(fused)[:, 0, :].copy()
