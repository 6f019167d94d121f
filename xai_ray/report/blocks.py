"""The pieces a report page is made of (a section: a title, a note, charts and HTML fragments)
and the formatting of numbers in them; shared by every section module."""

from __future__ import annotations

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
