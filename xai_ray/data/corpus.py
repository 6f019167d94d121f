"""Corpus sources -> one DataFrame of rows ``{doc_id, text, label}``.

Sources: a Hugging Face Hub dataset id, a Parquet, CSV or JSONL file or a folder of one of those
formats, an ``aclImdb`` folder or the ``aclImdb_v1.tar.gz`` archive. Ids are the source's own
when it has them, else stable ``{split}-{row}`` ids, so the same document keeps its id between
runs. Ids and labels are read as the text the source wrote (``fields``): never through a float.
Rows the reader already knows to be bad carry a ``problem`` (a label that is not a class number,
a JSONL line that is not an object) for screening to quarantine. A label that is not a class
number is also kept as written in ``label_name`` (when it is the row's only problem): screening
accepts it when it names one of the model's classes (``positive``), which the reader cannot know.
"""

from __future__ import annotations

import codecs
import io
import re
import tarfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.data import fields

COLUMNS = ["doc_id", "text", "label", "problem", "label_name"]
FOLDER_FORMATS = (".parquet", ".csv", ".jsonl")
# A Unicode noncharacter (never meant for interchange): it stands in for each byte of a CSV/JSONL
# file that is not UTF-8, so those rows can be quarantined rather than silently "repaired".
INVALID_UTF8 = "\ufdd0"
IMDB_LABELS = {"neg": 0, "pos": 1}
_BREAK = re.compile(r"<br\s*/?>", flags=re.IGNORECASE)


class CorpusError(ValueError):
    """The corpus cannot be read as asked; the message says what to change."""


def clean_text(text: str) -> str:
    """Turn HTML line breaks (IMDB's ``<br />``) into spaces; every other character stays data."""
    return _BREAK.sub(" ", text)


def read_corpus(
    source: str,
    split: str = "test",
    text_column: str = "text",
    label_column: str = "label",
    id_column: str = "id",
    limit: int | None = None,
    seed: int = 0,
    clean_html: bool = True,
) -> pd.DataFrame:
    """Read a corpus into ``doc_id`` (str), ``text`` (object), ``label`` (nullable Int64),
    ``problem`` (None, or why the row cannot be scored: see ``fields``) and ``label_name`` (the
    label as written when it is no class number and the row has no other problem, else None).

    ``limit`` keeps a seeded random sample of that many rows (in source order), because
    sources such as IMDB are sorted by class and their first rows are all one label.
    """
    frame = _read_source(source, split)
    frame = _standardise(frame, source, split, text_column, label_column, id_column)
    if limit is not None and limit < len(frame):
        frame = frame.sample(n=limit, random_state=seed).sort_index()
    frame = frame.reset_index(drop=True)
    if clean_html:
        frame["text"] = [clean_text(t) if isinstance(t, str) else t for t in frame["text"]]
    return frame


def _read_source(source: str, split: str) -> pd.DataFrame:
    path = Path(source)
    if path.is_dir():
        if _imdb_root(path) is not None:
            return _read_aclimdb_dir(_imdb_root(path), split)
        return _read_folder(path)
    if path.is_file():
        name = path.name.lower()
        if name.endswith((".tar.gz", ".tgz")):
            return _read_aclimdb_tar(path, split)
        if name.endswith((".parquet", ".csv", ".jsonl", ".json")):
            return _read_file(path)
        raise CorpusError(f"cannot read {source!r}: use .parquet, .csv, .jsonl, an aclImdb folder or .tar.gz")
    if source.startswith((".", "/", "~")) or source.endswith((".parquet", ".csv", ".jsonl", ".gz")):
        raise CorpusError(f"data path {source!r} does not exist")
    return _read_hub(source, split)


def _read_folder(folder: Path) -> pd.DataFrame:
    """Every data file of a folder, all of one format (read whole); several formats are refused."""
    found = sorted(f for f in folder.rglob("*") if f.is_file() and f.name.lower().endswith(FOLDER_FORMATS))
    kinds = {f.suffix.lower() for f in found}
    if not found:
        raise CorpusError(
            f"folder {str(folder)!r} holds no .parquet, .csv or .jsonl files and is not an aclImdb folder"
        )
    if len(kinds) > 1:
        names = ", ".join(f.relative_to(folder).as_posix() for f in found[:8]) + (", ..." if len(found) > 8 else "")
        raise CorpusError(
            f"folder {str(folder)!r} mixes {' and '.join(sorted(kinds))} files ({names}); a corpus folder "
            "holds one format: move the others out or pass one file with --data"
        )
    return pd.concat([_read_file(f) for f in found], ignore_index=True)


def _read_file(path: Path) -> pd.DataFrame:
    name = path.name.lower()
    if name.endswith(".parquet"):
        return _read_parquet(path)
    if name.endswith(".csv"):
        # Every field as written: no "NA"/"null" turned missing, no "007" turned 7.
        return _parse(path, lambda text: pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False))
    if name.endswith(".jsonl"):
        return _parse(path, fields.read_json_lines)
    return _parse(path, fields.read_json_array)


def _parse(path: Path, parse) -> pd.DataFrame:
    """Parse a text file whose bytes that are not UTF-8 became ``INVALID_UTF8`` (screening quarantines
    those rows); a file that does not parse at all is one sentence."""
    text = decode_marking_invalid(path.read_bytes())
    try:
        return parse(text)
    except Exception as err:  # pandas raises several types for malformed files
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CorpusError(f"{str(path)!r} cannot be parsed: {first}") from None


def decode_marking_invalid(data: bytes) -> str:
    """UTF-8 (a BOM dropped), each undecodable byte replaced by ``INVALID_UTF8``."""
    return data.decode("utf-8-sig", errors=_MARK_INVALID)


def _mark_invalid(error: UnicodeDecodeError) -> tuple[str, int]:
    # One marker per bad byte, followed by the byte in hex: two ids that differ only in their
    # bad bytes stay two ids (screening writes them as "\\xff").
    return f"{INVALID_UTF8}{error.object[error.start]:02x}", error.start + 1


_MARK_INVALID = "xai_ray_mark_invalid"
codecs.register_error(_MARK_INVALID, _mark_invalid)


# Integer columns stay nullable integers in pandas: a null must not turn ids 1, 2 into 1.0, 2.0.
_NULLABLE = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(),
    pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(),
    pa.uint64(): pd.UInt64Dtype(),
}


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pq.read_table(path).to_pandas(types_mapper=_NULLABLE.get)
    except Exception as err:  # pyarrow raises several types for broken files
        raise CorpusError(f"Parquet file {str(path)!r} cannot be read: {err}") from None


def _read_hub(dataset_id: str, split: str) -> pd.DataFrame:
    try:
        import datasets

        table = datasets.load_dataset(dataset_id, split=split)
    except Exception as err:
        raise CorpusError(
            f"could not load Hub dataset {dataset_id!r} (split {split!r}); offline, pass a local path "
            f"instead, e.g. --data ../shared/data/imdb/train.parquet ({type(err).__name__})"
        ) from None
    return table.to_pandas()


def _imdb_root(path: Path) -> Path | None:
    for root in (path, path / "aclImdb"):
        if (root / "train" / "pos").is_dir() or (root / "test" / "pos").is_dir():
            return root
    return None


def _imdb_name(name: str, split: str) -> tuple[str, int] | None:
    """``aclImdb/train/pos/123_8.txt`` -> (``train_pos_123``, 1)."""
    parts = name.split("/")
    if len(parts) < 3 or parts[-3] != split or parts[-2] not in IMDB_LABELS:
        return None
    if not parts[-1].endswith(".txt"):
        return None
    number = parts[-1].split("_")[0]
    return f"{split}_{parts[-2]}_{number}", IMDB_LABELS[parts[-2]]


def _read_aclimdb_dir(root: Path, split: str) -> pd.DataFrame:
    rows = []
    for folder in ("neg", "pos"):
        for file in sorted((root / split / folder).glob("*.txt")):
            parsed = _imdb_name(f"{split}/{folder}/{file.name}", split)
            if parsed:
                text = file.read_bytes().decode("utf-8", errors="replace")
                rows.append({"id": parsed[0], "text": text, "label": parsed[1]})
    if not rows:
        raise CorpusError(f"aclImdb folder {str(root)!r} has no reviews for split {split!r}")
    return pd.DataFrame(rows)


def _read_aclimdb_tar(path: Path, split: str) -> pd.DataFrame:
    rows = []
    try:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive:
                parsed = _imdb_name(member.name, split) if member.isfile() else None
                if parsed:
                    text = archive.extractfile(member).read().decode("utf-8", errors="replace")
                    rows.append({"id": parsed[0], "text": text, "label": parsed[1]})
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CorpusError(f"archive {str(path)!r} cannot be read: {err}") from None
    if not rows:
        raise CorpusError(f"archive {str(path)!r} has no aclImdb reviews for split {split!r}")
    return pd.DataFrame(rows)


def _standardise(frame, source, split, text_column, label_column, id_column) -> pd.DataFrame:
    if text_column not in frame.columns and "__problem" in frame and len(frame) and frame["__problem"].notna().all():
        frame = frame.assign(**{text_column: None})  # every JSONL line is bad: each is one errors row
    if text_column not in frame.columns:
        raise CorpusError(
            f"{source!r} has no text column {text_column!r} (columns: {', '.join(map(str, frame.columns))}); "
            "name the right one with --set text_column=NAME"
        )
    n = len(frame)
    problems = [None if fields.missing(p) else p for p in frame["__problem"]] if "__problem" in frame else [None] * n
    line_ids = list(frame["__line_id"]) if "__line_id" in frame else [None] * n
    if id_column in frame.columns:
        read = [fields.id_text(v) for v in frame[id_column]]
    else:
        read = [(f"{split}-{i}", None) for i in range(n)]
    ids = [doc_id if fields.missing(line_id) else line_id for (doc_id, _), line_id in zip(read, line_ids)]
    problems = [p or id_problem for p, (_, id_problem) in zip(problems, read)]
    texts = list(frame[text_column])
    problems = [
        p or ("text is a JSON number, not a string" if isinstance(t, fields.JsonNumber) else None)
        for p, t in zip(problems, texts)
    ]
    labels: list = [None] * n
    names: list = [None] * n
    if label_column in frame.columns:
        for i, value in enumerate(frame[label_column]):
            labels[i], written = fields.label_value(value)
            if written is not None and problems[i] is None:
                problems[i] = f"label {written!r} is not a class number"
                names[i] = written  # maybe a class name: screening knows the model's
    return pd.DataFrame(
        {
            "doc_id": pd.Series(ids, dtype=object),
            "text": pd.Series(texts, dtype=object),
            "label": pd.array(labels, dtype="Int64"),
            "problem": pd.Series(problems, dtype=object),
            "label_name": pd.Series(names, dtype=object),
        }
    )
