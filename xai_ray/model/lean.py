"""Loading a local BERT, RoBERTa or DistilBERT classifier without transformers.

A scoring actor that imports transformers' modeling code spends most of its start there (2 s of
CPU on the 2-core machine, 8-10 s on a GPU machine: ``encoders``). ``load_lean`` builds the
plain-torch classifier of ``encoders`` from the folder's config.json and model.safetensors when
the folder is one these classes reproduce exactly: a plain family, a known activation, absolute
positions, whole sizes, one safetensors file, and every weight present except at most the
classifier's last linear layer (drawn as transformers draws it, from the seeded generator). Its
tokenizer is the one AutoTokenizer builds, read once through that class and then kept
(``lean_tokenizer``), so a later start imports nothing of transformers. Anything else returns
None and goes through transformers (``loading.load_model``); tests hold the two paths to the
same weights, fingerprint, tokens and scores (``tests/test_lean_encoders.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from xai_ray.model.files import SAFE_WEIGHTS

FAMILIES = {"bert", "roberta", "distilbert"}
SIZES = {  # the whole numbers each family's classes are built from
    "bert": ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
    "distilbert": ("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim"),
}
# The tokenizer AutoTokenizer builds, by tokenizer_config.json's tokenizer_class: a family's own
# class rebuilds its normaliser, pre-tokenizer and special-token template from its settings
# (do_lower_case, add_prefix_space), not from tokenizer.json; the generic one reads tokenizer.json.
FAMILY_TOKENIZER = {"bert": "BertTokenizer", "roberta": "RobertaTokenizer", "distilbert": "DistilBertTokenizer"}
TOKENIZERS = {name + fast: family for family, name in FAMILY_TOKENIZER.items() for fast in ("", "Fast")}
GENERIC_TOKENIZERS = {"PreTrainedTokenizerFast", "TokenizersBackend"}
SEEDED_HEAD = {"classifier.weight", "classifier.bias"}  # the one missing layer drawn as transformers draws it


def lean_fields(path: str) -> dict | None:
    """config.json's fields when the folder can be loaded by ``encoders``, else None."""
    from xai_ray.model.encoders import ACTIVATIONS

    folder = Path(path)
    if not (folder / SAFE_WEIGHTS).is_file() or not (folder / "tokenizer.json").is_file():
        return None
    try:
        fields = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    kind = fields.get("model_type")
    act = fields.get("activation" if kind == "distilbert" else "hidden_act")
    sizes = [fields.get(key) for key in (*SIZES.get(kind, SIZES["bert"]), "max_position_embeddings")]
    whole = all(isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in sizes)
    plain = (
        kind in FAMILIES
        and whole
        and sizes[1] % sizes[3] == 0  # heads divide the hidden size (transformers refuses the rest)
        and (kind != "roberta" or isinstance(fields.get("pad_token_id"), int))  # positions count from it
        and act in ACTIVATIONS
        and fields.get("position_embedding_type", "absolute") == "absolute"
        and not fields.get("is_decoder")
        and not fields.get("add_cross_attention")
        and not fields.get("sinusoidal_pos_embds")
        and "auto_map" not in fields
    )
    return fields if plain else None


def load_lean(path: str, fields: dict, labels: dict[int, str], seed: int, device: str):
    """(model, tokenizer) of ``encoders`` for the folder with these classes (``loading.label_names``),
    or None where its weights do not fit the classes exactly (transformers then loads it and names
    what is wrong)."""
    import torch
    from safetensors.torch import load_file

    from xai_ray.model.encoders import EncoderConfig, SequenceClassifier

    config = EncoderConfig({**fields, "name_or_path": path, "_name_or_path": path})  # the folder, as transformers says
    config.id2label, config.label2id, config.num_labels = labels, {v: k for k, v in labels.items()}, len(labels)
    try:
        model = SequenceClassifier(config)  # uninitialised: every value comes from the file or the draw below
    except (AttributeError, TypeError, ValueError, KeyError, ZeroDivisionError):  # a field they need is off
        return None
    expected = model.state_dict()
    stored = _prefixed(load_file(str(Path(path) / SAFE_WEIGHTS)), model.prefix, expected)
    missing = set(expected) - set(stored)
    if not missing <= SEEDED_HEAD or model.prefix == "roberta" and missing:
        return None
    if any(stored[key].shape != tensor.shape for key, tensor in expected.items() if key in stored):
        return None
    with torch.no_grad():
        if missing:  # the untrained head, as transformers draws it after load_model seeds the generator
            torch.manual_seed(seed)
            model.classifier.weight.normal_(mean=0.0, std=config.initializer_range)
            model.classifier.bias.zero_()
        # assign: the read tensors become the parameters (a copy of every weight was 0.3 s of an actor's start)
        model.load_state_dict(
            {k: v.to(torch.float32) for k, v in stored.items() if k in expected}, strict=False, assign=True
        )
    model.eval().to(device)
    return model, _tokenizer(path, config.model_type)


def _prefixed(stored: dict, prefix: str, expected: dict) -> dict:
    """A checkpoint saved without the encoder's prefix (``embeddings.…``, as a base model saves it)
    with its encoder keys under it (``bert.embeddings.…``); the head's own keys stay as they are."""
    if any(key.startswith(prefix + ".") for key in stored):
        return stored
    return {f"{prefix}.{key}" if f"{prefix}.{key}" in expected else key: tensor for key, tensor in stored.items()}


def _tokenizer(path: str, model_type: str):
    """The folder's tokenizer as ``LeanTokenizer`` (no transformers import) from the state kept by
    an earlier start, else read through transformers once and kept (``lean_tokenizer``)."""
    from xai_ray.model.lean_tokenizer import LeanTokenizer, keep_state, kept_state

    state = kept_state(path, model_type)
    if state is None:
        tokenizer = _transformers_tokenizer(path, model_type)
        state = keep_state(path, model_type, tokenizer)
        if state is None:  # one LeanTokenizer does not reproduce: used as it is
            return tokenizer
    return LeanTokenizer(state)


def _transformers_tokenizer(path: str, model_type: str):
    """The tokenizer AutoTokenizer would build for the folder (tokenizer_config.json's class, else
    the family's), imported alone: AutoTokenizer's own import costs another second. A class named
    there that is not one of these is left to AutoTokenizer."""
    import importlib

    try:
        named = json.loads((Path(path) / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):  # none, or not an object: the family's class, as AutoTokenizer
        named = None
    named = named if isinstance(named, str) and named else FAMILY_TOKENIZER[model_type]
    if named in GENERIC_TOKENIZERS:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend as chosen
    elif named in TOKENIZERS:
        family = TOKENIZERS[named]
        module = importlib.import_module(f"transformers.models.{family}.tokenization_{family}")
        chosen = getattr(module, named.removesuffix("Fast"))
    else:
        from transformers import AutoTokenizer as chosen
    return chosen.from_pretrained(path)
