"""A corpus source cut into pieces, and each piece read as standardised Arrow chunks.

``plan`` (on the driver) looks at names, headers and Parquet footers only, never at the texts:
it checks what a job can be refused for before anything starts (a missing file, a folder mixing
formats, no text column) and cuts the source into pieces (a Parquet row group, a CSV or JSONL
file, a thousand files of an aclImdb folder, a tar archive, a Hub dataset stream). ``read_piece``
reads one piece, wherever it runs (a Ray worker, or this process for ``read_corpus``), as chunks
of rows ``doc_id, text, label, problem`` exactly as ``corpus`` documents them, each row carrying
its place (``piece``, ``piece_row``) so the source's row order can be rebuilt without moving rows.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.data import fields
from xai_ray.data.text import CorpusError, clean_text, open_text

FOLDER_FORMATS = (".parquet", ".csv", ".jsonl")
IMDB_LABELS = {"neg": 0, "pos": 1}
CHUNK_ROWS = 1024  # rows per chunk: what one worker holds of a piece at once
FILES_PER_PIECE = 1000  # aclImdb files read by one task
INT64 = (-(2**63), 2**63 - 1)

CHUNK = pa.schema(
    [
        ("piece", pa.int32()),
        ("piece_row", pa.int64()),
        ("doc_id", pa.string()),  # null: missing (or, with ``numbered``, to be named by its row)
        ("numbered", pa.bool_()),  # the source has no id column: the id is "{split}-{row}"
        ("text", pa.string()),  # null: missing, or not a string (then ``problem`` says so)
        ("label", pa.int64()),
        ("problem", pa.string()),  # why the reader already knows the row cannot be scored
    ]
)


@dataclass(frozen=True)
class Piece:
    index: int
    kind: str  # parquet, csv, jsonl, json, aclimdb, tar, hub
    path: str
    rows: int | None = None  # known without reading the texts, else None
    part: tuple = ()  # parquet: row groups; aclimdb: (relative name, label) pairs


@dataclass(frozen=True)
class SourcePlan:
    source: str
    split: str
    text_column: str
    label_column: str
    id_column: str
    clean_html: bool
    pieces: tuple[Piece, ...]
    has_ids: bool | None  # whether the source has the id column (None: only a full scan can tell)

    def with_ids(self, has_ids: bool) -> SourcePlan:
        return replace(self, has_ids=has_ids)


def plan(source, split="test", text_column="text", label_column="label", id_column="id", clean_html=True):
    """Cut ``source`` into pieces, refusing in one sentence what cannot be read as asked."""
    args = (source, split, text_column, label_column, id_column, clean_html)
    path = Path(source)
    if path.is_dir():
        root = _imdb_root(path)
        if root is not None:
            return SourcePlan(*args, _aclimdb_pieces(root, split), has_ids=True)
        return _file_plan(args, _folder_files(path))
    if path.is_file():
        name = path.name.lower()
        if name.endswith((".tar.gz", ".tgz")):
            return SourcePlan(*args, (_tar_piece(path, split),), has_ids=True)
        if name.endswith((".parquet", ".csv", ".jsonl", ".json")):
            return _file_plan(args, [path])
        raise CorpusError(f"cannot read {source!r}: use .parquet, .csv, .jsonl, an aclImdb folder or .tar.gz")
    if source.startswith((".", "/", "~")) or source.endswith((".parquet", ".csv", ".jsonl", ".gz")):
        raise CorpusError(f"data path {source!r} does not exist")
    return _hub_plan(args)


def _folder_files(folder: Path) -> list[Path]:
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
    return found


def _file_plan(args, files: list[Path]) -> SourcePlan:
    source, text_column, id_column = args[0], args[2], args[4]
    kind = files[0].suffix.lower().lstrip(".")
    pieces, columns = [], []
    for file in files:
        if kind == "parquet":
            metadata, names = _parquet_footer(file)
            columns += names
            groups = [g for g in range(metadata.num_row_groups) if metadata.row_group(g).num_rows]
            pieces += [
                Piece(len(pieces) + i, kind, str(file), metadata.row_group(g).num_rows, (g,))
                for i, g in enumerate(groups)
            ]
        else:
            columns += _text_header(file, kind, text_column) if kind == "csv" else []
            pieces.append(Piece(len(pieces), kind, str(file)))
    if kind in ("csv", "parquet"):
        _require_text_column(source, text_column, list(dict.fromkeys(columns)))
        return SourcePlan(*args, tuple(pieces), has_ids=id_column in columns)
    keys, has_ids = _json_keys(files, kind, text_column, id_column)
    if text_column not in keys and not _all_lines_bad(files, kind):
        _require_text_column(source, text_column, keys)
    return SourcePlan(*args, tuple(pieces), has_ids=has_ids)


def _require_text_column(source, text_column: str, columns: list[str]) -> None:
    if text_column not in columns:
        raise CorpusError(
            f"{source!r} has no text column {text_column!r} (columns: {', '.join(map(str, columns))}); "
            "name the right one with --set text_column=NAME"
        )


def _parquet_footer(file: Path):
    try:
        parquet = pq.ParquetFile(file)
        return parquet.metadata, list(parquet.schema_arrow.names)
    except Exception as err:  # pyarrow raises several types for broken files
        raise CorpusError(f"Parquet file {str(file)!r} cannot be read: {err}") from None


def _text_header(file: Path, kind: str, text_column: str) -> list[str]:
    """A CSV file's column names (its header line, parsed as the reader will)."""
    try:
        with open_text(file) as handle:
            return list(pd.read_csv(handle, dtype=str, keep_default_na=False, nrows=0).columns)
    except Exception as err:  # pandas raises several types for malformed files
        raise CorpusError(f"{str(file)!r} cannot be parsed: {_first_line(err)}") from None


def _json_keys(files: list[Path], kind: str, text_column: str, id_column: str) -> tuple[list[str], bool | None]:
    """The keys of the first JSON object holding the text column (read line by line, nothing kept);
    whether the id column exists is known when that object has it, else only a full scan tells."""
    keys: list[str] = []
    for file in files:
        for _, value in _json_values(file, kind):
            if isinstance(value, dict):
                keys += [k for k in value if k not in keys]
                if text_column in value:
                    return keys, True if id_column in value else None
    return keys, None


def _all_lines_bad(files: list[Path], kind: str) -> bool:
    return all(not isinstance(v, dict) for f in files for _, v in _json_values(f, kind))


def _json_values(file: Path, kind: str):
    """(line number, parsed value or None) of each non-blank line; a ``.json`` file's elements."""
    if kind == "json":
        try:
            with open_text(file) as handle:
                value = fields.parse_json(handle.read())
        except Exception as err:
            raise CorpusError(f"{str(file)!r} cannot be parsed: {_first_line(err)}") from None
        yield from enumerate(value if isinstance(value, list) else [value])
        return
    with open_text(file, newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield number, fields.parse_json(line)
                except ValueError:
                    yield number, None


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _imdb_root(path: Path) -> Path | None:
    for root in (path, path / "aclImdb"):
        if (root / "train" / "pos").is_dir() or (root / "test" / "pos").is_dir():
            return root
    return None


def _imdb_name(name: str, split: str) -> tuple[str, int] | None:
    """``aclImdb/train/pos/123_8.txt`` -> (``train_pos_123``, 1)."""
    parts = name.split("/")
    if len(parts) < 3 or parts[-3] != split or parts[-2] not in IMDB_LABELS or not parts[-1].endswith(".txt"):
        return None
    return f"{split}_{parts[-2]}_{parts[-1].split('_')[0]}", IMDB_LABELS[parts[-2]]


def _aclimdb_pieces(root: Path, split: str) -> tuple[Piece, ...]:
    names = [
        f"{split}/{folder}/{file.name}"
        for folder in ("neg", "pos")
        for file in sorted((root / split / folder).glob("*.txt"))
        if _imdb_name(f"{split}/{folder}/{file.name}", split)
    ]
    if not names:
        raise CorpusError(f"aclImdb folder {str(root)!r} has no reviews for split {split!r}")
    chunks = [tuple(names[i : i + FILES_PER_PIECE]) for i in range(0, len(names), FILES_PER_PIECE)]
    return tuple(Piece(i, "aclimdb", str(root), len(chunk), chunk) for i, chunk in enumerate(chunks))


def _tar_piece(path: Path, split: str) -> Piece:
    """The archive is one piece (gzip cannot be split); its member names are counted here."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            count = sum(1 for m in archive if m.isfile() and _imdb_name(m.name, split))
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CorpusError(f"archive {str(path)!r} cannot be read: {err}") from None
    if not count:
        raise CorpusError(f"archive {str(path)!r} has no aclImdb reviews for split {split!r}")
    return Piece(0, "tar", str(path), count)


def _hub_plan(args) -> SourcePlan:
    source, split, text_column, id_column = args[0], args[1], args[2], args[4]
    stream = _hub_stream(source, split)
    first = next(iter(stream), None)
    columns = list(first) if isinstance(first, dict) else []
    if first is not None:
        _require_text_column(source, text_column, columns)
    return SourcePlan(*args, (Piece(0, "hub", source),), has_ids=id_column in columns)


def _hub_stream(dataset_id: str, split: str):
    try:
        import datasets

        return datasets.load_dataset(dataset_id, split=split, streaming=True)
    except Exception as err:
        raise CorpusError(
            f"could not load Hub dataset {dataset_id!r} (split {split!r}); offline, pass a local path "
            f"instead, e.g. --data ../shared/data/imdb/train.parquet ({type(err).__name__})"
        ) from None


# ------------------------------------------------------------------------------------ reading


def read_piece(source: SourcePlan, piece: Piece, chunk_rows: int = CHUNK_ROWS) -> Iterator[pa.Table]:
    """One piece as standardised chunks (schema ``CHUNK``), in source order."""
    start = 0
    for frame in _frames(source, piece, chunk_rows):
        chunk = standardise(frame, source, piece.index, start)
        start += chunk.num_rows
        if chunk.num_rows:
            yield chunk


def count_piece(source: SourcePlan, piece: Piece) -> tuple[int, bool]:
    """(rows, whether any row has the id column) of a piece, its texts read and dropped."""
    rows, has_ids = 0, False
    for frame in _frames(source, piece, CHUNK_ROWS * 8):
        rows += len(frame)
        has_ids = has_ids or (source.id_column in frame and frame[source.id_column].map(_present).any())
    return rows, bool(has_ids)


def _present(value) -> bool:
    return not (value is None or (isinstance(value, float) and value != value))


def _frames(source: SourcePlan, piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    if piece.kind == "parquet":
        yield from _parquet_frames(source, piece, chunk_rows)
    elif piece.kind == "csv":
        yield from _csv_frames(piece, chunk_rows)
    elif piece.kind in ("jsonl", "json"):
        yield from _json_frames(piece, chunk_rows)
    elif piece.kind == "aclimdb":
        rows = []
        for name in piece.part:
            doc_id, label = _imdb_name(name, source.split)
            text = (Path(piece.path) / name).read_bytes().decode("utf-8", errors="replace")
            rows.append({"id": doc_id, "text": text, "label": label})
        yield from _sliced(pd.DataFrame(rows), chunk_rows)
    elif piece.kind == "tar":
        yield from _tar_frames(source, piece, chunk_rows)
    else:
        yield from _hub_frames(source, chunk_rows)


def _sliced(frame: pd.DataFrame, chunk_rows: int) -> Iterator[pd.DataFrame]:
    for start in range(0, len(frame), chunk_rows):
        yield frame.iloc[start : start + chunk_rows].reset_index(drop=True)


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


def _parquet_frames(source: SourcePlan, piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    try:
        parquet = pq.ParquetFile(piece.path)
        names = parquet.schema_arrow.names
        wanted = [c for c in (source.id_column, source.text_column, source.label_column) if c in names]
        for batch in parquet.iter_batches(batch_size=chunk_rows, row_groups=list(piece.part), columns=wanted):
            yield batch.to_pandas(types_mapper=_NULLABLE.get)
    except CorpusError:
        raise
    except Exception as err:  # pyarrow raises several types for broken files
        raise CorpusError(f"Parquet file {piece.path!r} cannot be read: {err}") from None


def _csv_frames(piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    # Every field as written: no "NA"/"null" turned missing, no "007" turned 7.
    try:
        with open_text(Path(piece.path)) as handle:
            yield from pd.read_csv(handle, dtype=str, keep_default_na=False, chunksize=chunk_rows)
    except Exception as err:  # pandas raises several types for malformed files
        raise CorpusError(f"{piece.path!r} cannot be parsed: {_first_line(err)}") from None


def _json_frames(piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    """JSON lines (or a ``.json`` array's elements) as rows; a line that is not a JSON object is a
    row named ``line-N`` (``element N`` in an array) whose ``__problem`` says what is wrong."""
    rows = []
    for _, row in _json_rows(piece):
        rows.append(row)
        if len(rows) == chunk_rows:
            yield _json_frame(rows)
            rows = []
    if rows:
        yield _json_frame(rows)


def _json_rows(piece: Piece):
    if piece.kind == "json":
        with open_text(Path(piece.path)) as handle:
            try:
                value = fields.parse_json(handle.read())
            except Exception as err:
                raise CorpusError(f"{piece.path!r} cannot be parsed: {_first_line(err)}") from None
        if not isinstance(value, list):
            kind = fields.json_kind(value)
            raise CorpusError(f"{piece.path!r} cannot be parsed: the file holds a JSON {kind}, not an array of objects")
        for i, item in enumerate(value):
            yield i, fields.json_row(item, i, f"element {i} is a JSON {fields.json_kind(item)}, not an object")
        return
    with open_text(Path(piece.path), newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, fields.json_line_row(number, line)


def _json_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, dtype=object)  # object: no column inferred to a type, JsonNumber kept
    return frame if "__problem" in frame else frame.assign(__problem=pd.Series(dtype=object))


def _tar_frames(source: SourcePlan, piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    rows = []
    try:
        with tarfile.open(piece.path, "r:gz") as archive:
            for member in archive:
                parsed = _imdb_name(member.name, source.split) if member.isfile() else None
                if parsed:
                    text = archive.extractfile(member).read().decode("utf-8", errors="replace")
                    rows.append({"id": parsed[0], "text": text, "label": parsed[1]})
                    if len(rows) == chunk_rows:
                        yield pd.DataFrame(rows)
                        rows = []
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CorpusError(f"archive {piece.path!r} cannot be read: {err}") from None
    if rows:
        yield pd.DataFrame(rows)


def _hub_frames(source: SourcePlan, chunk_rows: int) -> Iterator[pd.DataFrame]:
    rows = []
    for row in _hub_stream(source.source, source.split):
        rows.append(row)
        if len(rows) == chunk_rows:
            yield pd.DataFrame(rows, dtype=object)
            rows = []
    if rows:
        yield pd.DataFrame(rows, dtype=object)


# -------------------------------------------------------------------------------- standardise


def standardise(frame: pd.DataFrame, source: SourcePlan, piece: int, start: int) -> pa.Table:
    """A frame as the source wrote it -> ``CHUNK`` rows: ids and labels read as text (``fields``),
    rows the reader knows to be bad carrying their ``problem``."""
    n = len(frame)
    problems = [None if fields.missing(p) else p for p in frame["__problem"]] if "__problem" in frame else [None] * n
    line_ids = list(frame["__line_id"]) if "__line_id" in frame else [None] * n
    numbered = not source.has_ids
    if source.id_column in frame.columns:
        read = [fields.id_text(v) for v in frame[source.id_column]]
    else:
        read = [(None, None)] * n
    ids = [doc_id if fields.missing(line_id) else line_id for (doc_id, _), line_id in zip(read, line_ids)]
    numbers = [numbered and fields.missing(line_id) for line_id in line_ids]
    problems = [p or id_problem for p, (_, id_problem) in zip(problems, read)]
    values = list(frame[source.text_column]) if source.text_column in frame.columns else [None] * n
    problems = [
        p or ("text is a JSON number, not a string" if isinstance(t, fields.JsonNumber) else None)
        for p, t in zip(problems, values)
    ]
    labels: list = [None] * n
    if source.label_column in frame.columns:
        for i, value in enumerate(frame[source.label_column]):
            labels[i], written = fields.label_value(value)
            if labels[i] is not None and not INT64[0] <= labels[i] <= INT64[1]:
                labels[i], written = None, str(value)
            if written is not None and problems[i] is None:
                problems[i] = f"label {written!r} is not a class number"
    texts = []
    for i, value in enumerate(values):
        if isinstance(value, str) and not isinstance(value, fields.JsonNumber):
            texts.append(clean_text(value) if source.clean_html else value)
        else:
            texts.append(None)
            if not fields.missing(value) and problems[i] is None and not isinstance(value, fields.JsonNumber):
                problems[i] = f"text is {type(value).__name__}, not a string"
    return pa.Table.from_arrays(
        [
            pa.array([piece] * n, pa.int32()),
            pa.array(range(start, start + n), pa.int64()),
            pa.array(ids, pa.string()),
            pa.array(numbers, pa.bool_()),
            pa.array(texts, pa.string()),
            pa.array(labels, pa.int64()),
            pa.array(problems, pa.string()),
        ],
        schema=CHUNK,
    )
