"""xai-ray: corpus-scale attention explanations (raw, rollout, flow) for transformer classifiers on Ray."""

from xai_ray.methods.base import build_attention
from xai_ray.methods.rollout import attention_rollout

__version__ = "0.1.0"

__all__ = ["attention_rollout", "build_attention", "__version__"]

try:  # attention flow lands with its own module; keep the package importable meanwhile
    from xai_ray.methods.flow import attention_flow  # noqa: F401

    __all__.append("attention_flow")
except ImportError:
    pass
