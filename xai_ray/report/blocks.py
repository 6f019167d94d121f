"""The pieces a report page is made of (a section: a title, a note, charts and HTML fragments)
and the formatting of numbers in them; shared by every section module."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import pandas as pd

from xai_ray.report.outputs import CONTROL_PICTURES


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


def text_html(text: str) -> str:
    """``text`` escaped for HTML, each control character shown as its Unicode control picture
    (NUL as U+2400, ESC as U+241B, DEL as U+2421) or, for C1, as its ``\\x85``-style escape
    (``outputs.CONTROL_PICTURES``): a browser drops NUL and shows the others as nothing, joining
    the words around them. Tabs and line breaks stay text."""
    return html.escape(text.translate(CONTROL_PICTURES))
