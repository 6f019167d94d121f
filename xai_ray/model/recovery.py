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
_LAST_SPACE = re.compile(r"\s\S*\Z")  # the last whitespace of a text


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
    """A prefix of ``text`` whose first ``max_length`` tokens are the whole text's, or all of it.

    Cut at whitespace, a prefix tokenizes exactly like the start of the whole text, so the tokens the
    model keeps are the same; only the work on the part truncation would discard is saved. Cut inside
    a run of characters without whitespace, the run's last piece is another word (a word of over
    100 characters is one [UNK] to WordPiece, its first 70 are pieces), which changes the kept tokens
    when they reach it: such a cut is taken only where a cut twice as far keeps the same tokens. A
    text of mostly whitespace or symbols may need more characters: the limit grows until the tokens
    fill up.
    """
    limit = max_length * CHARS_PER_TOKEN
    while len(text) > limit:
        space = _LAST_SPACE.search(text, 0, limit)
        if space and len(_kept(tokenizer, text[: space.start()], max_length)) >= max_length:
            return text[: space.start()]
        kept = _kept(tokenizer, text[:limit], max_length)
        if (
            len(text) > 2 * limit
            and len(kept) >= max_length
            and kept == _kept(tokenizer, text[: 2 * limit], max_length)
        ):
            return text[: 2 * limit]
        limit *= 4
    return text


def _kept(tokenizer, text: str, max_length: int) -> list[int]:
    return tokenizer(text, truncation=True, max_length=max_length)["input_ids"]
