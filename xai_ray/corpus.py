"""Corpus sources -> one DataFrame of rows ``{doc_id, text, label}``.

Sources: a Hugging Face Hub dataset id, a Parquet file or folder, CSV, JSONL, an ``aclImdb``
folder or the ``aclImdb_v1.tar.gz`` archive. Ids are the source's own when it has them, else
stable ``{split}-{row}`` ids, so the same document keeps its id between runs.
"""

from __future__ import annotations

import codecs
import io
import re
import tarfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

COLUMNS = ["doc_id", "text", "label"]
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
    """Read a corpus into ``doc_id`` (str), ``text`` (object), ``label`` (nullable Int64).

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
        files = sorted(path.rglob("*.parquet"))
        if not files:
            raise CorpusError(f"folder {source!r} holds no .parquet files and is not an aclImdb folder")
        return pd.concat([_read_parquet(f) for f in files], ignore_index=True)
    if path.is_file():
        name = path.name.lower()
        if name.endswith((".tar.gz", ".tgz")):
            return _read_aclimdb_tar(path, split)
        if name.endswith(".parquet"):
            return _read_parquet(path)
        if name.endswith(".csv"):
            # Every field as written: no "NA"/"null" turned missing, no "007" turned 7.
            return _parse(path, lambda text: pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False))
        if name.endswith((".jsonl", ".json")):
            return _parse(path, lambda text: pd.read_json(io.StringIO(text), lines=name.endswith(".jsonl"),
                                                          convert_dates=False))
        raise CorpusError(f"cannot read {source!r}: use .parquet, .csv, .jsonl, an aclImdb folder or .tar.gz")
    if source.startswith((".", "/", "~")) or source.endswith((".parquet", ".csv", ".jsonl", ".gz")):
        raise CorpusError(f"data path {source!r} does not exist")
    return _read_hub(source, split)


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
    return INVALID_UTF8, error.start + 1  # one marker per bad byte


_MARK_INVALID = "xai_ray_mark_invalid"
codecs.register_error(_MARK_INVALID, _mark_invalid)


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pq.read_table(path).to_pandas()
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
    if text_column not in frame.columns:
        raise CorpusError(
            f"{source!r} has no text column {text_column!r} (columns: {', '.join(map(str, frame.columns))}); "
            "name the right one with --set text_column=NAME"
        )
    if id_column in frame.columns:
        ids = frame[id_column].map(lambda v: None if v is None or v is pd.NA or v != v else str(v))
    else:
        ids = pd.Series([f"{split}-{i}" for i in range(len(frame))], index=frame.index)
    if label_column in frame.columns:
        labels = pd.to_numeric(frame[label_column], errors="coerce").astype("Int64")
    else:
        labels = pd.Series(pd.NA, index=frame.index, dtype="Int64")
    return pd.DataFrame({"doc_id": ids.values, "text": frame[text_column].values, "label": labels.values})
