"""The tokenizer of a plain-torch classifier (``lean``), answered without importing transformers.

Importing anything of transformers costs an actor about 0.8 s of CPU on the 2-core machine (it
reads the sources of every model folder it ships to build its lazy import table), and more on a
slow disk. What transformers' tokenizer class settles for a folder (the family's normaliser,
pre-tokenizer, special-token template and ids, read from tokenizer_config.json and the vocabulary
files) is a Rust tokenizer and a few attributes. ``kept_state`` reads them once through the class
AutoTokenizer would build and keeps them in ``~/.cache/xai-ray/tokenizers/`` (``$XDG_CACHE_HOME``)
under the sha256 of the folder's tokenizer files, its model type and transformers' version; from
then on ``LeanTokenizer`` answers the calls the scorer and the explain page make on that Rust
tokenizer alone: the same ids, offsets and word ids (``tests/test_lean_encoders.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

RULES = 2  # the state's fields: a change here makes every kept state stale
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
)
ATTRIBUTES = (
    "cls_token",
    "sep_token",
    "pad_token",
    "bos_token",
    "eos_token",
    "mask_token",
    "unk_token",
    "pad_token_id",
    "cls_token_id",
    "sep_token_id",
    "mask_token_id",
    "unk_token_id",
    "all_special_ids",
    "model_input_names",
    "model_max_length",
    "padding_side",
    "truncation_side",
)


class Encoded(dict):
    """transformers' BatchEncoding, as far as the callers read it: the fields, ``word_ids(i)`` and
    ``to(device)`` for tensors."""

    def __init__(self, fields: dict, encodings: list, width: int | None) -> None:
        super().__init__(fields)
        self.encodings, self.width = encodings, width

    def word_ids(self, index: int = 0) -> list:
        return _padded(self.encodings[index].word_ids, self.width, None)

    def to(self, device) -> Encoded:
        return Encoded({k: v.to(device) for k, v in self.items()}, self.encodings, self.width)


class LeanTokenizer:
    """A fast tokenizer's calls on its Rust tokenizer (``backend_tokenizer``) and kept attributes."""

    is_fast = True

    def __init__(self, state: dict) -> None:
        from tokenizers import Tokenizer

        self.state = state
        self.backend_tokenizer = Tokenizer.from_str(state["backend"])
        self.backend_tokenizer.no_truncation()
        self.backend_tokenizer.no_padding()
        for name in ATTRIBUTES:
            setattr(self, name, state[name])
        self.split_special_tokens = False

    def __reduce__(self):
        """Pickled as its state and whether a "[SEP]" written in a text is read as text (the Rust
        tokenizer's pickle forgets that flag)."""
        return _restored, (self.state, self.backend_tokenizer.encode_special_tokens, self.padding_side)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def convert_ids_to_tokens(self, ids):
        """One id -> its token; a list of ids -> theirs, as transformers' method."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        """One token -> its id (the unknown token's for one out of the vocabulary); a list -> theirs."""
        if isinstance(tokens, str):
            found = self.backend_tokenizer.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def __call__(
        self,
        text,
        add_special_tokens: bool = True,
        truncation: bool = False,
        max_length: int | None = None,
        padding: bool = False,
        return_offsets_mapping: bool = False,
        return_tensors: str | None = None,
    ) -> Encoded:
        """One text (lists in the fields) or a list of them (a list each), as transformers returns them."""
        single = isinstance(text, str)
        backend = self.backend_tokenizer
        limit = max_length or self.model_max_length
        if truncation and limit < 2**31:  # transformers' "no limit" is 1e30: nothing to cut at
            backend.enable_truncation(limit, direction=self.truncation_side)
        try:
            encodings = backend.encode_batch([text] if single else list(text), add_special_tokens=add_special_tokens)
        finally:
            backend.no_truncation()
        width = max((len(e.ids) for e in encodings), default=0) if padding or return_tensors else None
        fields = {"input_ids": [_padded(e.ids, width, self.pad_token_id or 0) for e in encodings]}
        if "token_type_ids" in self.model_input_names:
            fields["token_type_ids"] = [_padded(e.type_ids, width, 0) for e in encodings]
        fields["attention_mask"] = [_padded(e.attention_mask, width, 0) for e in encodings]
        if return_offsets_mapping:
            fields["offset_mapping"] = [_padded(list(e.offsets), width, (0, 0)) for e in encodings]
        if return_tensors == "pt":
            import torch

            fields = {k: torch.tensor(v, dtype=torch.long) for k, v in fields.items()}
        elif single:
            fields = {k: v[0] for k, v in fields.items()}
        return Encoded(fields, encodings, width)


def _restored(state: dict, encode_special_tokens: bool, padding_side: str) -> LeanTokenizer:
    tokenizer = LeanTokenizer(state)
    tokenizer.backend_tokenizer.encode_special_tokens = encode_special_tokens
    tokenizer.split_special_tokens, tokenizer.padding_side = encode_special_tokens, padding_side
    return tokenizer


def _padded(values: list, width: int | None, fill) -> list:
    """``values`` padded on the right to ``width`` (None: as they are)."""
    values = list(values)
    return values if width is None else values + [fill] * (width - len(values))


def state_key(path: str, model_type: str) -> str:
    """sha256 of the folder's tokenizer files' bytes, its model type, transformers' version and these rules."""
    from importlib.metadata import version

    digest = hashlib.sha256(f"{RULES}\0{model_type}\0{version('transformers')}\n".encode())
    for name in TOKENIZER_FILES:
        file = Path(path) / name
        digest.update(f"{name}\0".encode() + (file.read_bytes() if file.is_file() else b"\0absent") + b"\n")
    return digest.hexdigest()


def _cache_file(path: str, model_type: str) -> Path:
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xai-ray" / "tokenizers"
    return folder / f"{state_key(path, model_type)}.json"


def kept_state(path: str, model_type: str) -> dict | None:
    """The folder's tokenizer state kept by an earlier ``keep_state``, else None."""
    try:
        state = json.loads(_cache_file(path, model_type).read_text())
    except (OSError, ValueError):  # not kept yet, or unreadable: read it again
        return None
    return state if isinstance(state, dict) and set(ATTRIBUTES) | {"backend"} <= set(state) else None


def keep_state(path: str, model_type: str, tokenizer) -> dict | None:
    """The state of ``tokenizer`` (transformers' fast tokenizer of the folder), kept for the next
    start (written whole or not at all: several actors may start at once); None for one this
    class does not reproduce (no Rust tokenizer, padding on the left)."""
    if getattr(tokenizer, "backend_tokenizer", None) is None or getattr(tokenizer, "padding_side", "") != "right":
        return None
    state = {"backend": tokenizer.backend_tokenizer.to_str(), **{k: getattr(tokenizer, k, None) for k in ATTRIBUTES}}
    state.update({k: None if state[k] is None else str(state[k]) for k in ATTRIBUTES if k.endswith("_token")})
    state["model_input_names"] = list(state["model_input_names"])
    file = _cache_file(path, model_type)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(state))
        partial.replace(file)
    except OSError:  # a read-only home: nothing kept, the next start reads the folder again
        pass
    return state
