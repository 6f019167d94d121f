"""Explanation methods, registered by name: ``get_method("rollout")``."""

from xai_ray.methods import flow, raw, rollout  # noqa: F401  (registers the methods)
from xai_ray.methods.base import REGISTRY, AttentionOptions, Method, get_method, mix_residual

__all__ = ["REGISTRY", "AttentionOptions", "Method", "get_method", "mix_residual"]
