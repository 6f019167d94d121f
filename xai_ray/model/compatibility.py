"""Whether a model type can be explained, answered without importing its modeling code.

transformers' text-classification class for a type says whether its attention goes through the
attention interface, where the capture hooks in (``is_backend_compatible``). Asking it imports
the class's modeling module and transformers' modeling utilities, which a driver that never loads
the model does not otherwise need; the answers are kept in the user's cache folder.
"""

from __future__ import annotations

from xai_ray.model.answers import keep, kept

FILE = "backend-compatible.json"


def backend_compatible(config) -> bool:
    """Whether transformers' text-classification class for ``config`` routes its attention through
    the attention interface (``is_backend_compatible``); KeyError for a type that has none.

    Asking the class imports its modeling module and transformers' modeling utilities: about 2 s
    on a driver that never loads the model (a 24-review run took 11.3 s with it, 9.5 s without, on
    2 cores). The answer is kept in the user's cache folder ($XDG_CACHE_HOME or ~/.cache,
    ``xai-ray/``) under the transformers version, the model type and the class name, and asked
    again where that folder cannot be read or written."""
    import transformers
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    )

    class_name = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(config.model_type)
    if class_name is None:  # a type registered at run time, or none: ask the mapping itself
        return bool(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING[type(config)].is_backend_compatible())
    key = f"{transformers.__version__} {config.model_type} {class_name}"
    answer = kept(FILE).get(key)
    if isinstance(answer, bool):
        return answer
    verdict = bool(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING[type(config)].is_backend_compatible())
    keep(FILE, key, verdict)
    return verdict
