"""A local model folder's description (type, layers, heads, classes), kept in the user's cache
(``model.answers``) under everything it is derived from: the folder's config.json bytes, the
transformers version and these rules. Read back, it is believed only where config.json itself says
the same (its type, its layer and head counts, its classes, where it names them): a kept answer
never changes what a run records of its model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from xai_ray.model.answers import keep, kept

DESCRIPTIONS = "descriptions.json"
RULES = 2  # (2: a single-output head is refused) bump when what describe_model derives from a config changes: older kept answers then go unread
# config.json's own names for what a description counts, by model family
LAYERS = ("num_hidden_layers", "n_layers", "num_layers")
HEADS = ("num_attention_heads", "n_heads", "num_heads")


def description_key(folder: Path) -> str | None:
    """The key of a local folder's description: its config.json's bytes, transformers' version,
    these rules; None for a name that is no local folder with a config.json (a Hub id)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        config = (folder / "config.json").read_bytes()
        transformers = version("transformers")
    except (OSError, PackageNotFoundError):
        return None
    return f"{RULES} {transformers} {hashlib.sha256(config).hexdigest()}"


def kept_description(key: str | None, folder: Path) -> dict | None:
    """The description kept under ``key``, or None when there is none or it is not believed."""
    found = kept(DESCRIPTIONS).get(key) if key else None
    try:
        labels = {int(k): str(v) for k, v in found["labels"].items()}
        described = {"model_type": str(found["model_type"]), "n_layers": int(found["n_layers"]),
                     "n_heads": int(found["n_heads"]), "labels": labels}  # fmt: skip
    except (TypeError, KeyError, ValueError, AttributeError):  # none kept, or not what this writes
        return None
    return described if _agrees(described, folder) else None


def keep_description(key: str, described: dict) -> None:
    keep(DESCRIPTIONS, key, {**described, "labels": {str(k): v for k, v in described["labels"].items()}})


def _agrees(described: dict, folder: Path) -> bool:
    """Whether a kept description is one this code could have derived from the folder's config.json:
    at least one layer and head, classes numbered 0..k-1, the type and the layer and head counts
    config.json states, where it states them, and as many classes as it names (two where it names
    none, as transformers reads it)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(config, dict) or described["n_layers"] < 1 or described["n_heads"] < 1:
        return False
    if sorted(described["labels"]) != list(range(len(described["labels"]))) or not described["labels"]:
        return False
    stated = [
        (config.get("model_type"), described["model_type"]),
        (_first(config, LAYERS), described["n_layers"]),
        (_first(config, HEADS), described["n_heads"]),
    ]
    names = config.get("id2label")  # else transformers' own default: two classes
    classes = len(names) if isinstance(names, dict) and names else config.get("num_labels") or 2
    stated.append((classes, len(described["labels"])))
    return all(said is None or said == found for said, found in stated)


def _first(config: dict, keys: tuple[str, ...]):
    return next((config[key] for key in keys if key in config), None)
