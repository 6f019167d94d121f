"""The files of a local model folder, checked before anything loads them (no torch imported).

``from_pretrained`` loads ``model.safetensors`` (or the shards its index names), and the pickled
``pytorch_model.bin`` only when pickles are allowed; each of those files must be a regular file
of the folder and, for safetensors, a file whose header the safetensors library reads. A weights
file that is a link is followed only inside the folder (or, for a folder of the Hugging Face
cache, a snapshot, into that model's ``blobs``, where the cache keeps the files its links name):
a link out of the folder would load whatever file it names, and a dangling one fails deep inside
``transformers``. Every refusal is one sentence naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
PICKLED_WEIGHTS = "pytorch_model.bin"
PICKLED_INDEX = "pytorch_model.bin.index.json"


class ModelError(ValueError):
    """The model cannot be used as asked; the message says what to change."""


# A tokenizer needs its vocabulary: tokenizer.json (fast), or the files its slow class reads.
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)


def check_weights(folder: Path, allow_pickle: bool) -> None:
    """Decide from the files ``from_pretrained`` loads: with ``use_safetensors=True`` only
    model.safetensors (or its shard index); with pickle allowed that first, else pytorch_model.bin
    (or its index). Another *.safetensors file in the folder is not loaded, so it does not count."""
    for name in (SAFE_WEIGHTS, SAFE_INDEX, PICKLED_WEIGHTS, PICKLED_INDEX):
        _check_link(folder, folder / name)
    if (folder / SAFE_WEIGHTS).is_file():
        _check_safetensors(folder, folder / SAFE_WEIGHTS)
        return
    if (folder / SAFE_INDEX).is_file():
        for shard in _shards(folder, folder / SAFE_INDEX):
            _check_safetensors(folder, shard)
        return
    pickled = any((folder / name).is_file() for name in (PICKLED_WEIGHTS, PICKLED_INDEX))
    if not pickled:
        raise ModelError(f"model folder {str(folder)!r} holds no weights ({SAFE_WEIGHTS} or {PICKLED_WEIGHTS})")
    if not allow_pickle:
        raise ModelError(
            f"model folder {str(folder)!r} has no .safetensors weights ({SAFE_WEIGHTS}); its pickled "
            f"{PICKLED_WEIGHTS} loads only with --set allow_pickle=true (explain: --allow-pickle), as pickles can run code"
        )


def check_tokenizer(folder: Path) -> None:
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(
            f"model folder {str(folder)!r} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, "
            "...); save the tokenizer next to the model (tokenizer.save_pretrained(folder))"
        )


def _check_link(folder: Path, path: Path) -> None:
    """A link among the weights files must name an existing file inside the folder (or its cache blobs)."""
    if not path.is_symlink():
        return
    target = path.resolve()
    if not target.exists():
        raise ModelError(
            f"model folder {str(folder)!r}: {path.name} is a link to {str(target)!r}, which does not exist"
        )
    home = folder.resolve()
    allowed = [home] + ([home.parent.parent / "blobs"] if home.parent.name == "snapshots" else [])
    if not any(target.is_relative_to(root) for root in allowed):
        raise ModelError(
            f"model folder {str(folder)!r}: {path.name} is a link to {str(target)!r}, outside the folder; "
            "copy the file into the folder"
        )


def _check_safetensors(folder: Path, path: Path) -> None:
    """The safetensors library must read the file's header (random bytes, a truncated or a foreign
    file fail here, in one sentence, rather than in every actor that loads the model)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            pass
    except Exception as err:  # the Rust library raises its own error type, and OSError
        first = (str(err).splitlines() or [type(err).__name__])[0][:200]
        raise ModelError(
            f"model folder {str(folder)!r}: {path.name} is not a safetensors file that can be read ({first})"
        ) from None


def _shards(folder: Path, index: Path) -> list[Path]:
    """The shard files a safetensors index names: plain file names of the folder, each there."""
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ModelError(f"model folder {str(folder)!r}: {index.name} is not an index of weight shards") from None
    shards = []
    for name in names:
        shard = folder / str(name)
        if Path(str(name)).name != name or not (shard.is_file() or shard.is_symlink()):
            raise ModelError(
                f"model folder {str(folder)!r}: {index.name} names {name!r}, which is no file of the folder"
            )
        _check_link(folder, shard)
        shards.append(shard)
    return shards
