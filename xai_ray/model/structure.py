"""What a method needs of a model's structure, checked on the driver before Ray starts.

Norm-based attention and GlobEnc read each layer's attention output projection (and GlobEnc its
layer norms) off the loaded modules. A model whose modules expose none of them (ALBERT's shared
layer, ModernBERT's fused ``Wo``) used to be found out by the actors, one review at a time: every
review an errors row, and a run that failed whole. Here the model is built from its config alone
on PyTorch's meta device (shapes, no weights, no memory) and asked the same questions the capture
asks, so such a run is refused in one sentence before anything starts.
"""

from __future__ import annotations

from xai_ray.methods.base import GLOBENC, NORM_ATTENTION


def check_structure(name: str, needs: set[str], allow_pickle: bool = False, trust_remote_code: bool = False) -> None:
    """Raise ``ModelError`` when the model ``name`` lacks the modules a capture in ``needs`` reads."""
    wanted = needs & {NORM_ATTENTION, GLOBENC}
    if not wanted:
        return
    import torch
    from transformers import AutoModelForSequenceClassification

    from xai_ray.model import encoder_norms, value_norms
    from xai_ray.model.files import ModelError
    from xai_ray.model.loading import read_model_config

    _, config = read_model_config(name, allow_pickle, trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config, trust_remote_code=trust_remote_code)
    if NORM_ATTENTION in wanted and not value_norms.output_projections(model):
        raise ModelError(f"model {name!r} ({config.model_type}): {value_norms.UNSUPPORTED}")
    if GLOBENC in wanted and not encoder_norms.encoder_layers(model):
        raise ModelError(f"model {name!r} ({config.model_type}): {encoder_norms.UNSUPPORTED}")
