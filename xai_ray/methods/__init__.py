"""Explanation methods, registered by name: ``get_method("rollout")``."""

from xai_ray.methods import (  # noqa: F401  (registers the methods)
    attn_x_grad,
    flow,
    globenc,
    grad_rollout,
    input_x_gradient,
    integrated_gradients,
    lrp,
    norm,
    raw,
    rollout,
)
from xai_ray.methods.base import REGISTRY, AttentionOptions, Method, get_method, methods_need, mix_residual

__all__ = ["REGISTRY", "AttentionOptions", "Method", "get_method", "methods_need", "mix_residual"]
