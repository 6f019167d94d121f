"""Screening a corpus before it is scored: rows that cannot be scored are quarantined, not fatal.

Each rejected row becomes an ``errors`` row (doc id, stage ``read``, reason) and the job goes on
with the rest. Rejected: a missing id, an id seen before (the first occurrence is kept; ids are
compared as text, see ``fields``), a row the reader found bad (a JSONL line that is not an
object), a text that is null, not a string, empty or whitespace only, a text whose file bytes
were not UTF-8, and a label outside the model's classes, a number or not (``7``, ``1.5``,
``pos``, ``true``: scoring it would put a wrong class into every per-class statistic;
``--set label_column=none`` scores unlabelled data instead). An id whose file bytes were not
UTF-8 keeps each bad byte as ``\\xNN``, so two such ids stay two.

A label is a class index (``2``) or one of the model's class names (``neutral``; compared
after stripping spaces, and without case when that names one class only). A written integer is
always read as an index, even when a model names its classes ``"1"``, ``"2"``, ...
"""

from __future__ import annotations

import re

import pandas as pd

from xai_ray.data.corpus import INVALID_UTF8

_BAD_BYTE = re.compile(INVALID_UTF8 + "([0-9a-f]{2})")


def screen(corpus: pd.DataFrame, classes=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``doc_id, text, label`` rows into (kept rows, rejected rows as ``doc_id, stage, reason``).

    ``classes``: the model's classes, ``{index: name}`` (or indices alone); None checks no label."""
    classes = _classes(classes)
    first_row: dict[str, int] = {}
    keep, rejected = [], []
    ids = []
    labels = list(corpus["label"])
    problems = corpus["problem"] if "problem" in corpus else [None] * len(corpus)
    names = corpus["label_name"] if "label_name" in corpus else [None] * len(corpus)
    rows = zip(corpus["doc_id"], corpus["text"], problems, names)
    for row, (doc_id, text, problem, name) in enumerate(rows):
        missing_id = _missing(doc_id) or not str(doc_id).strip()
        doc_id = f"row-{row}" if missing_id else _BAD_BYTE.sub(r"\\x\1", str(doc_id))
        ids.append(doc_id)
        problem = None if _missing(problem) else problem
        if problem and not _missing(name) and classes is not None:  # the label's problem alone: maybe a name
            labels[row], problem = _by_name(name, classes)
        reason = (
            "doc_id is missing (named here by its row)"
            if missing_id
            else _problem(row, doc_id, text, labels[row], classes, first_row, problem)
        )
        if reason is None:
            first_row[doc_id] = row
            keep.append(row)
        else:
            rejected.append({"doc_id": doc_id, "stage": "read", "reason": reason})
    kept = corpus.assign(label=pd.array(labels, dtype="Int64")).iloc[keep]
    kept = kept.drop(columns=["problem", "label_name"], errors="ignore")
    kept["doc_id"] = [ids[i] for i in keep]
    errors = pd.DataFrame(rejected, columns=["doc_id", "stage", "reason"])
    return kept.reset_index(drop=True), errors


def _classes(classes) -> dict[int, str | None] | None:
    if classes is None:
        return None
    if isinstance(classes, dict):
        return {int(k): str(v) for k, v in classes.items()}
    return {int(c): None for c in classes}


def _listing(classes: dict) -> str:
    if all(name is None for name in classes.values()):
        return ", ".join(str(i) for i in sorted(classes))
    return ", ".join(f"{i}: {classes[i]}" for i in sorted(classes))


NO_LABELS = "use --set label_column=none to score without labels"


def _by_name(written: str, classes: dict) -> tuple[int | None, str | None]:
    """(class index, None) when ``written`` names one of the model's classes, else (None, why not)."""
    text = str(written).strip()
    exact = [i for i, name in classes.items() if name is not None and name.strip() == text]
    folded = [i for i, name in classes.items() if name is not None and name.strip().casefold() == text.casefold()]
    found = exact or (folded if len(folded) == 1 else [])
    if found:
        return found[0], None
    return None, (
        f"label {written!r} is not a class number nor one of the model's class names ({_listing(classes)}); {NO_LABELS}"
    )


def _problem(row, doc_id, text, label, classes, first_row, found) -> str | None:
    if doc_id in first_row:
        return f"duplicate doc_id: row {row} repeats the id of row {first_row[doc_id]}, which is kept"
    if found and found.startswith("label ") and classes is not None and NO_LABELS not in found:
        return f"{found} (the model's classes are {_listing(classes)}); {NO_LABELS}"
    if found:
        return found
    problem = text_problem(text)
    if problem:
        return problem
    if INVALID_UTF8 in text:
        at = text.index(INVALID_UTF8)
        return f"text is not valid UTF-8 (undecodable bytes from character {at}); fix the file's encoding"
    if classes is not None and not _missing(label) and int(label) not in classes:
        return f"label {int(label)} is not one of the model's classes ({_listing(classes)}); {NO_LABELS}"
    return None


def text_problem(text) -> str | None:
    """Why a text cannot be scored, or None."""
    if not isinstance(text, str):
        return "text is null" if _missing(text) else f"text is {type(text).__name__}, not a string"
    if not text.strip():
        return "text is empty or whitespace only"
    return None


def _missing(value) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):  # arrays and other containers are not "missing"
        return False
