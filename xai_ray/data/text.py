"""Text as a corpus file holds it: decoded with every byte that is not UTF-8 marked, never repaired.

A Unicode noncharacter (never meant for interchange) stands in for each such byte, followed by the
byte in hex, so screening can quarantine those rows and two ids differing only in their bad bytes
stay two ids. ``open_text`` decodes a file that way as a stream, so a worker never needs the whole
file in memory.
"""

from __future__ import annotations

import codecs
import io
import re
from pathlib import Path

INVALID_UTF8 = "\ufdd0"
_BREAK = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)


class CorpusError(ValueError):
    """The corpus cannot be read as asked; the message says what to change."""


def clean_text(text: str) -> str:
    """Turn HTML line breaks (IMDB's ``<br />``) into spaces; every other character stays data."""
    return _BREAK.sub(" ", text)


def decode_marking_invalid(data: bytes) -> str:
    """UTF-8 (a BOM dropped), each undecodable byte replaced by ``INVALID_UTF8`` and its hex."""
    return data.decode("utf-8-sig", errors=_MARK_INVALID)


def open_text(path: Path, newline: str = "") -> io.TextIOWrapper:
    """``path`` as a text stream decoded like ``decode_marking_invalid``; ``newline``: as ``open``'s
    (the default keeps line endings as written, ``"\\n"`` splits lines at LF only)."""
    return io.TextIOWrapper(open(path, "rb"), encoding="utf-8-sig", errors=_MARK_INVALID, newline=newline)  # noqa: SIM115


def _mark_invalid(error: UnicodeDecodeError) -> tuple[str, int]:
    return f"{INVALID_UTF8}{error.object[error.start]:02x}", error.start + 1


_MARK_INVALID = "xai_ray_mark_invalid"
codecs.register_error(_MARK_INVALID, _mark_invalid)
