"""Screening a corpus before it is scored: rows that cannot be scored are quarantined, not fatal.

Each rejected row becomes an ``errors`` row (doc id, stage ``read``, reason) and the job goes on
with the rest. Rejected: a missing id, an id seen before (the first occurrence is kept; ids are
compared as text, see ``fields``), a row the reader found bad (a JSONL line that is not an
object), a text that is null, not a string, empty or whitespace only, a text whose file bytes
were not UTF-8, and a label outside the model's classes, a number or not (``7``, ``1.5``,
``joy``, ``true``: scoring it would put a wrong class into every per-class statistic;
``--set label_column=none`` scores unlabelled data instead). An id whose file bytes were not
UTF-8 keeps each bad byte as ``\\xNN``, so two such ids stay two.

A label is a class index (``2``) or one of the model's class names (``neutral``; compared
after stripping spaces, and without case when that names one class only; ``pos`` and ``neg`` for
``positive`` and ``negative``, as aclImdb's folders write them). A written integer is
always read as an index, even when a model names its classes ``"1"``, ``"2"``, ...
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from xai_ray.data import fields
from xai_ray.data.text import INVALID_UTF8, MARKED

READABLE = "LNPS"  # Unicode categories a word can be made of: letters, numbers, punctuation, symbols


def screen(corpus: pd.DataFrame, classes=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``doc_id, text, label`` rows into (kept rows, rejected rows as ``doc_id, stage, reason``).

    ``classes``: the model's classes, ``{index: name}`` (or indices alone); None checks no label."""
    classes = class_map(classes)
    first_row: dict[str, int] = {}
    keep, rejected = [], []
    ids = []
    labels = list(corpus["label"])
    problems = corpus["problem"] if "problem" in corpus else [None] * len(corpus)
    names = corpus["label_name"] if "label_name" in corpus else [None] * len(corpus)
    rows = zip(corpus["doc_id"], corpus["text"], problems, names)
    for row, (doc_id, text, problem, name) in enumerate(rows):
        doc_id, reason, labels[row] = local_problem(row, doc_id, text, labels[row], problem, classes, name)
        ids.append(doc_id)
        if doc_id in first_row and not unnamed(reason):
            reason = duplicate(row, first_row[doc_id])  # a repeated id is named as such, whatever else
        if reason is None:
            first_row[doc_id] = row
            keep.append(row)
        else:
            rejected.append({"doc_id": doc_id, "stage": "read", "reason": reason})
    named = {ids[i] for i in keep} | {r["doc_id"] for r in rejected if not unnamed(r["reason"])}
    for r in rejected:
        if unnamed(r["reason"]) and r["doc_id"] in named:
            r["doc_id"] = unclashed(r["doc_id"])
    kept = corpus.assign(label=pd.array(labels, dtype="Int64")).iloc[keep]
    kept = kept.drop(columns=["problem", "label_name"], errors="ignore")
    kept["doc_id"] = [ids[i] for i in keep]
    errors = pd.DataFrame(rejected, columns=["doc_id", "stage", "reason"])
    return kept.reset_index(drop=True), errors


MISSING_ID = "doc_id is missing"
NO_LABELS = "use --set label_column=none to score without labels"


# How the reader begins the reason of a row it could not read as one (data.fields: a JSON line that
# is no object, a CSV row with a broken quote or too many fields, an array element that is no
# object); such a row is named by where it stands (``line-N``), not by an id of the corpus.
READER_NAMED = re.compile(r"(lines? \d+|element \d+)\b")


def unnamed(reason: str | None) -> bool:
    """Whether a rejected row's name is screening's or the reader's, not an id of the corpus: a
    row without an id (``row-N``) or a line that is no row (``line-N``). Such a row is never a
    duplicate, and never named as a real id (``unclashed``)."""
    return reason is not None and (reason.startswith(MISSING_ID) or READER_NAMED.match(reason) is not None)


def unclashed(name: str) -> str:
    """The name of a row without an id (``row-N``, ``line-N``) where a row of the corpus has that
    very id: ``errors`` would otherwise hold a row that reads as the other's."""
    return f"{name} (no id)"


def duplicate(row: int, first: int) -> str:
    return f"duplicate doc_id: row {row} repeats the id of row {first}, which is kept"


def local_problem(row: int, doc_id, text, label, found, classes, name=None) -> tuple[str, str | None, object]:
    """(the row's id as stored, why the row alone cannot be scored or None, its label): everything
    screening decides without looking at other rows (a repeated id is ``screen``'s, or
    ``verdicts'``). ``classes``: as ``class_map`` gives them; ``name``: the label as written when it
    is no class number (the reader's ``label_name``), taken when it names one of the classes."""
    found = None if _missing(found) else found
    # a label written as a name (the reader's only problem with the row), or an aclImdb folder's
    # name (no problem; its number the dataset's) where the model names its classes: the class
    # of that name
    if not _missing(name) and (found == fields.not_a_number(name) or (found is None and names_classes(classes))):
        label, found = by_name(name, classes) if classes is not None else (label, found)
    if _missing(doc_id) or not str(doc_id).strip():
        return f"row-{row}", f"{MISSING_ID} (named here by its row)", label
    return stored_id(doc_id), _problem(text, label, classes, found), label


def stored_id(doc_id) -> str:
    """An id as the store keeps it: each byte that was not UTF-8 written ``\\xNN``."""
    return MARKED.sub(r"\\x\1", str(doc_id))


def class_map(classes) -> dict[int, str | None] | None:
    """The model's classes as ``{index: name}`` (names None when only indices are known)."""
    if classes is None:
        return None
    if isinstance(classes, dict):
        return {int(k): str(v) for k, v in classes.items()}
    return {int(c): None for c in classes}


def names_classes(classes: dict | None) -> bool:
    """Whether the model names its classes (``class_map``'s), so a label may be read by its name."""
    return classes is not None and any(name is not None for name in classes.values())


def _listing(classes: dict) -> str:
    if all(name is None for name in classes.values()):
        return ", ".join(str(i) for i in sorted(classes))
    return ", ".join(f"{i}: {classes[i]}" for i in sorted(classes))


# aclImdb's folder names (and a common way to write labels): each the class it abbreviates
SHORT_NAMES = {"pos": "positive", "neg": "negative"}


def _spelled_out(name: str) -> str:
    folded = name.strip().casefold()
    return SHORT_NAMES.get(folded, folded)


def by_name(written: str, classes: dict) -> tuple[int | None, str | None]:
    """(class index, None) when ``written`` names one of the model's classes, else (None, why not).
    Where no class has its name, ``pos`` and ``neg`` name a class called ``positive`` and
    ``negative`` (without case), and the other way round: aclImdb's ``pos`` folder is a model's
    ``POSITIVE`` class."""
    text = str(written).strip()
    exact = [i for i, name in classes.items() if name is not None and name.strip() == text]
    folded = [i for i, name in classes.items() if name is not None and name.strip().casefold() == text.casefold()]
    found = exact or (folded if len(folded) == 1 else [])
    if not found and not folded:
        short = [i for i, name in classes.items() if name is not None and _spelled_out(name) == _spelled_out(text)]
        found = short if len(short) == 1 else []
    if found:
        return found[0], None
    return None, (
        f"label {written!r} is not a class number nor one of the model's class names ({_listing(classes)}); {NO_LABELS}"
    )


def _problem(text, label, classes, found) -> str | None:
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
    """Why a text cannot be scored, or None (the screening's and the scorer's one rule)."""
    if not isinstance(text, str):
        return "text is null" if _missing(text) else f"text is {type(text).__name__}, not a string"
    if not text.strip():
        return "text is empty or whitespace only"
    if not any(unicodedata.category(c)[0] in READABLE for c in text):  # stops at the first letter
        return (
            "text has no letter, digit, punctuation or symbol (only spaces, control, zero-width or "
            "combining characters): the model would see no word of it"
        )
    return None


def _missing(value) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):  # arrays and other containers are not "missing"
        return False


# ------------------------------------------------------------------ the same rules, column-wise

TODO, REJECTED, DUPLICATE, DONE, UNCHANGED = 0, 1, 2, 3, 4
VERDICTS = pa.schema([("pos", pa.int64()), ("verdict", pa.int8()), ("doc_id", pa.string()), ("reason", pa.string())])


def verdicts(rows: pa.Table) -> pa.Table:
    """Every row ``screen`` would not score, decided over all rows of the corpus at once.

    ``rows``: ``pos`` (the row's number in input order), ``doc_id`` (as stored), ``missing`` (no id
    of its own: ``unnamed``), ``reason`` (``local_problem``'s, or null), ``done`` and ``unchanged`` (kept
    rows a resumed run or a nightly run need not score). Returns ``VERDICTS`` rows sorted by
    ``pos``: REJECTED (with the local reason), DUPLICATE (a later row with the id of a kept row:
    the first row without a problem wins, as in ``screen``), DONE and UNCHANGED. Rows to score
    (TODO) are left out, so the result stays as small as what is not scored.
    """
    pos = rows.column("pos").to_numpy()
    missing = rows.column("missing").to_numpy(zero_copy_only=False)
    ok = pc.is_null(rows.column("reason")).to_numpy(zero_copy_only=False) & ~missing
    candidates = rows.filter(pa.array(ok)).select(["doc_id", "pos"])
    first = candidates.group_by("doc_id").aggregate([("pos", "min")]).rename_columns(["doc_id", "first"])
    joined = rows.append_column("row", pa.array(np.arange(rows.num_rows))).join(first, "doc_id", join_type="left outer")
    joined = joined.sort_by("row")  # the join does not keep the order
    first_pos = joined.column("first").to_numpy(zero_copy_only=False)
    has_first = pc.is_valid(joined.column("first")).to_numpy(zero_copy_only=False) & ~missing
    first_pos = np.where(has_first, np.nan_to_num(first_pos, nan=-1), -1).astype(np.int64)
    verdict = np.where(missing | ~has_first | (pos < first_pos), REJECTED, TODO).astype(np.int8)
    verdict[has_first & (pos > first_pos)] = DUPLICATE
    winner = has_first & (pos == first_pos)
    verdict[winner & rows.column("done").to_numpy(zero_copy_only=False)] = DONE
    verdict[winner & rows.column("unchanged").to_numpy(zero_copy_only=False)] = UNCHANGED
    reasons = rows.column("reason").to_pylist()
    for i in np.nonzero(verdict == DUPLICATE)[0]:
        reasons[i] = duplicate(int(pos[i]), int(first_pos[i]))
    ids = rows.column("doc_id")
    if missing.any():  # all rows of an id meet here (a bucket per id): a row-N name a real id holds is told apart
        named = set(ids.filter(pa.array(~missing)).to_pylist())
        names = ids.to_pylist()
        ids = pa.array([unclashed(n) if m and n in named else n for n, m in zip(names, missing)], pa.string())
    out = pa.Table.from_arrays([pa.array(pos), pa.array(verdict), ids, pa.array(reasons, pa.string())], schema=VERDICTS)
    return out.filter(pa.array(verdict != TODO)).sort_by("pos")
