"""What the scorer does when a batch or a document misbehaves: out-of-memory detection, and a
character cut that keeps the tokenizer from chewing a megabyte of text only to keep 512 tokens.

Ray Data neither retries an exception raised inside ``map_batches`` by default nor keeps the
rest of the batch (and ``max_errored_blocks`` drops whole blocks silently), so the scorer catches
everything itself: out of memory splits the group in halves down to one document; any other
failure re-scores the group one document at a time; what still fails becomes an error row.
"""

from __future__ import annotations

import gc
import re

CHARS_PER_TOKEN = 64  # a generous bound: real text averages 4-6 characters per sub-token
_SPACE = re.compile(r"\s")


def is_out_of_memory(err: BaseException) -> bool:
    """True for host or accelerator out-of-memory errors, whatever layer raised them."""
    if isinstance(err, MemoryError):
        return True
    try:
        import torch

        if isinstance(err, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def release_memory(device: str) -> None:
    """Give back what a failed forward pass held before the halves are tried."""
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def prefix_for_tokenizer(tokenizer, text: str, max_length: int) -> str:
    """The shortest whitespace-bounded prefix of ``text`` whose tokens fill ``max_length``, or all of it.

    Cut at whitespace, a prefix tokenizes exactly like the start of the whole text, so the tokens the
    model keeps are the same; only the work on the part truncation would discard is saved. A text of
    mostly whitespace or symbols may need more characters: the limit grows until the tokens fill up.
    """
    limit = max_length * CHARS_PER_TOKEN
    while len(text) > limit:
        cut = text[:limit]
        spaces = [m.start() for m in _SPACE.finditer(cut, limit // 2)]
        if spaces:
            cut = cut[: spaces[-1]]
        if len(tokenizer(cut, truncation=True, max_length=max_length)["input_ids"]) >= max_length:
            return cut
        limit *= 4
    return text
