"""What a terminal, or a log read in one, is shown of text that came from data.

A store's values, a model's class names (its ``id2label``: a Hub model's author writes them) and
review texts may hold control characters (ESC sequences retitle a window or clear the screen),
bidirectional formatting characters (U+202E shows ``exe.png`` for ``gnp.exe``) and line or
paragraph separators. Printed as they are, the terminal obeys them; ``visible`` writes each as its
escape (``\\x1b``, ``\\u202e``), and ``json_visible`` does the same inside JSON text, where the
escape is the same character to a JSON reader.
"""

from __future__ import annotations

import logging
import re
import unicodedata

BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
HIDDEN = ("Cc", "Zl", "Zp")  # control characters (C0, DEL, C1), line and paragraph separators
# what JSON text may hold raw that a terminal obeys: DuckDB's to_json escapes only C0 characters
JSON_HIDDEN = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def visible(text: str) -> str:
    """``text`` with each control, bidirectional formatting or separator character as its escape."""
    if text.isprintable():
        return text
    return "".join(ascii(c)[1:-1] if c in BIDI or unicodedata.category(c) in HIDDEN else c for c in text)


def visible_lines(text: str) -> str:
    """``visible`` of each line of ``text``: the line breaks a message means (a traceback's) kept."""
    return "\n".join(visible(line) for line in text.split("\n"))


class VisibleFormatter(logging.Formatter):
    """Log lines as ``visible_lines``: a warning naming a file, a column or a class name read from
    data could otherwise clear or retitle the terminal that shows it, or the one a log is read in."""

    def format(self, record: logging.LogRecord) -> str:
        return visible_lines(super().format(record))


def json_visible(text: str) -> str:
    """JSON ``text`` with those characters written as ``\\uXXXX`` escapes (they occur only inside
    its strings: JSON's own syntax is ASCII), so the same values read back."""
    return JSON_HIDDEN.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def undecodable(text: str) -> str | None:
    """Where ``text`` is not valid UTF-8, as "byte 0xff at character 5", or None. Python keeps an
    undecodable byte of the command line or stdin as a lone surrogate (U+DC80-U+DCFF), which no
    encoder takes: a parser or tokenizer then fails with a TypeError instead of saying so."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(text[err.start])
        what = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"a lone surrogate U+{code:04X}"
        return f"{what} at character {err.start}"
    return None
