"""The pieces a report page is made of (a section: a title, a note, charts and HTML fragments)
and the formatting of numbers in them; shared by every section module."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Fragment:
    """HTML assembled in this module from escaped pieces (a facts table, highlighted text)."""

    html: str


@dataclass
class Section:
    key: str
    title: str
    note: str = ""
    items: list = field(default_factory=list)  # Altair charts and Fragments, in page order


def percent(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.1%}"


def number(value, fmt: str = ".3f") -> str:
    return "n/a" if value is None or pd.isna(value) else format(value, fmt)


# Control characters a page would carry raw (NUL, ESC, BEL, DEL, C1): a browser drops NUL and
# shows the others as nothing, joining the words around them. Tabs and line breaks stay text.
CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def text_html(text: str) -> str:
    """``text`` escaped for HTML, each control character shown as its Unicode control picture
    (NUL as U+2400, ESC as U+241B, DEL as U+2421) or, for C1, as its ``\\x85``-style escape."""
    return html.escape(CONTROLS.sub(_picture, text))


def _picture(found: re.Match) -> str:
    code = ord(found.group())
    if code < 0x20:
        return chr(0x2400 + code)
    return "\u2421" if code == 0x7F else f"\\x{code:02x}"
