"""Which attention implementation a model runs, as we asked for it.

The capture (``capture.forward_with_attention``) and the gradient pass (``attention_gradients``)
take a different path for a model whose attention comes through the capture ("xai_capture") and
for an eager one, which returns its attention weights. transformers 5 keeps the implementation
only in a private config field (``config._attn_implementation``), so ``load_model`` records the
one it asked for on the model, and both read that record.
"""

from __future__ import annotations

ATTENTION = "xai_ray_attention"  # the model attribute holding the record


def record_attention(model, implementation: str):
    """Keep on ``model`` the attention implementation it was built with; returns the model."""
    setattr(model, ATTENTION, implementation)
    return model


def attention_of(model) -> str:
    """The implementation ``record_attention`` kept; a model built elsewhere and not recorded is
    taken as eager: it must return its attention weights."""
    return getattr(model, ATTENTION, "eager")
