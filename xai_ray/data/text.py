"""Text as a corpus file holds it: decoded with every byte that is not UTF-8 marked, never repaired.

A Unicode noncharacter (never meant for interchange) stands in for each such byte, followed by the
byte in hex, so screening can quarantine those rows and two ids differing only in their bad bytes
stay two ids. ``open_text`` decodes a file that way as a stream, so a worker never needs the whole
file in memory. Every format (CSV, JSONL, an aclImdb review file, a member of the tar archive) is
decoded this way, and ``not_utf8`` names the first bad byte, where it sits and in which file.

A lone surrogate (half of a UTF-16 pair: JSON's ``"\\ud800"`` escape makes one) is no Unicode
text either and cannot be stored; ``lone_surrogate`` finds it, ``escaped`` writes it as ``\\ud800``.
"""

from __future__ import annotations

import codecs
import io
import re
from pathlib import Path

INVALID_UTF8 = "\ufdd0"
MARKED = re.compile(INVALID_UTF8 + "([0-9a-f]{2})")  # a marked byte and its hex
_BREAK = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)


class CorpusError(ValueError):
    """The corpus cannot be read as asked; the message says what to change."""


def clean_text(text: str) -> str:
    """Turn HTML line breaks (IMDB's ``<br />``) into spaces; every other character stays data."""
    return _BREAK.sub(" ", text)


def decode_marking_invalid(data: bytes) -> str:
    """UTF-8 (a BOM dropped), each undecodable byte replaced by ``INVALID_UTF8`` and its hex."""
    return data.decode("utf-8-sig", errors=_MARK_INVALID)


def decode_file(data: bytes) -> str:
    """A whole file (a review) decoded like ``decode_marking_invalid``, a BOM kept as a character, so
    a marked byte's place in the text (``not_utf8``) is its place in the file."""
    return data.decode("utf-8", errors=_MARK_INVALID)


def not_utf8(text: str, where: str) -> str | None:
    """Why a marked text is refused (its first bad byte, at which byte of ``where``), or None."""
    found = MARKED.search(text)
    if found is None:
        return None
    offset = len(text[: found.start()].encode("utf-8", "surrogatepass"))
    return f"text is not valid UTF-8: byte 0x{found.group(1)} at byte {offset} of {where}; fix the file's encoding"


def lone_surrogate(value: str, what: str) -> str | None:
    """Why ``value`` (the ``what`` of a row) is no Unicode text, or None."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(value[err.start])
        return (
            f"{what} is not valid Unicode: a lone surrogate U+{code:04X} (half of a UTF-16 pair) at "
            f"character {err.start}; fix the file"
        )
    return None


def escaped(value: str) -> str:
    """``value`` with each lone surrogate written ``\\udNNN``: text Arrow can store."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def open_text(path: Path, newline: str = "") -> io.TextIOWrapper:
    """``path`` as a text stream decoded like ``decode_marking_invalid``; ``newline``: as ``open``'s
    (the default keeps line endings as written, ``"\\n"`` splits lines at LF only)."""
    return io.TextIOWrapper(open(path, "rb"), encoding="utf-8-sig", errors=_MARK_INVALID, newline=newline)  # noqa: SIM115


def _mark_invalid(error: UnicodeDecodeError) -> tuple[str, int]:
    return f"{INVALID_UTF8}{error.object[error.start]:02x}", error.start + 1


_MARK_INVALID = "xai_ray_mark_invalid"
codecs.register_error(_MARK_INVALID, _mark_invalid)
