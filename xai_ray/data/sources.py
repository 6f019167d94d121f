"""A corpus source cut into pieces (``pieces`` reads each one).

``plan`` (on the driver) looks at names, headers and Parquet footers only, never at the texts:
it checks what a job can be refused for before anything starts (a missing file, a folder mixing
formats, no text column) and cuts the source into pieces: a Parquet row group, a CSV or JSONL
file, a thousand files of an aclImdb folder, a tar archive, a Hub dataset stream.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.parquet as pq

from xai_ray.data import fields
from xai_ray.data.text import INVALID_UTF8, CorpusError, open_text

log = logging.getLogger("xai_ray")

FOLDER_FORMATS = (".parquet", ".csv", ".jsonl")
# data-like files a folder may hold beside those that its reading leaves out (and says so)
UNREAD_FORMATS = (".json", ".ndjson", ".tsv", ".csv.gz", ".jsonl.gz", ".json.gz", ".parquet.gz", ".csv.zip", ".xlsx")
IMDB_LABELS = {"neg": 0, "pos": 1}  # the dataset's own numbers; the names are matched to a model's classes
IMDB_FOLDERS = {number: name for name, number in IMDB_LABELS.items()}
FILES_PER_PIECE = 1000  # aclImdb files read by one task
INT64 = (-(2**63), 2**63 - 1)  # what a label may be


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
    # a path by its look (no Hub id ends in a slash: ``incoming/`` is a folder that is not there)
    if source.startswith((".", "/", "~")) or source.endswith((".parquet", ".csv", ".jsonl", ".gz", "/", os.sep)):
        raise CorpusError(f"data path {source!r} does not exist")
    return _hub_plan(args)


def _folder_files(folder: Path) -> list[Path]:
    # a linked file is skipped (rglob does not enter a linked folder): what it points at lies outside
    runs: dict[Path, bool] = {}  # a run folder below: whether it is one (it holds a store's files)
    found = sorted(
        f
        for f in folder.rglob("*")
        if f.is_file()
        and f.name.lower().endswith(FOLDER_FORMATS)
        and not f.is_symlink()
        and not in_a_store(folder, f.relative_to(folder), runs)
    )
    kinds = {f.suffix.lower() for f in found}
    skipped = [
        f.relative_to(folder).as_posix()
        for f in folder.rglob("*")
        if f.is_file()
        and f.name.lower().endswith(UNREAD_FORMATS)
        and not f.is_symlink()
        and not in_a_store(folder, f.relative_to(folder), runs)
        and not f.name.startswith(".")
    ]
    if skipped and found:  # data a user may think is read: said, not silently left out
        log.warning(
            "folder %r: %d file(s) of another format are not read (%s); a corpus folder is read in "
            ".parquet, .csv or .jsonl files only",
            str(folder),
            len(skipped),
            ", ".join(sorted(skipped)[:8]) + (", ..." if len(skipped) > 8 else ""),
        )
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


# What a store's run folder holds (``store.layout``; the data layer reads no store module): a
# published run's manifest, a run's part records, an unfinished run's identity and settings
RUN_MARKS = ("manifest.json", "_parts", "identity.json", "config.yaml")


def in_a_store(folder: Path, relative: Path, runs: dict) -> bool:
    """Whether a file below a corpus ``folder`` lies in a run folder of an xai-ray store kept there
    (``runs/run_id=<id>/`` or ``_staging/run_id=<id>/`` holding a run's files): a store inside the
    data folder was read back as corpus on the next run, every part and aggregate a row of errors.
    A folder of those names without a run's files is data like any other. ``runs`` caches the
    answer per run folder."""
    parts = relative.parts[:-1]
    for i in range(len(parts) - 1):
        if parts[i] in ("runs", "_staging") and parts[i + 1].startswith("run_id="):
            run = folder.joinpath(*parts[: i + 2])
            if run not in runs:
                runs[run] = any((run / mark).exists() for mark in RUN_MARKS)
            if runs[run]:
                return True
    return False


def _file_plan(args, files: list[Path]) -> SourcePlan:
    source, text_column, id_column = args[0], args[2], args[4]
    kind = files[0].suffix.lower().lstrip(".")
    pieces, columns, rowless = [], {}, set()
    for file in files:
        if kind == "parquet":
            metadata, names = _parquet_footer(file)
            columns[file] = names
            groups = [g for g in range(metadata.num_row_groups) if metadata.row_group(g).num_rows]
            pieces += [
                Piece(len(pieces) + i, kind, str(file), metadata.row_group(g).num_rows, (g,))
                for i, g in enumerate(groups)
            ]
            rowless.update([file] if not metadata.num_rows else [])
        else:
            _refuse_binary(file, kind)
            columns[file] = _text_header(file, kind, text_column) if kind == "csv" else []
            pieces.append(Piece(len(pieces), kind, str(file)))
            rowless.update([file] if kind == "csv" and not _csv_has_rows(file) else [])
    if len(files) > 1:  # a file of a folder with no rows gives no row of errors: no column it lacks matters
        columns = {file: names for file, names in columns.items() if file not in rowless} or columns
    if kind in ("csv", "parquet"):
        for file, names in columns.items():  # each file: one without the text column gave a row of errors
            _require_text_column(source if len(files) == 1 else str(file), text_column, names)
        has_ids = {id_column in names for names in columns.values()}
        if len(has_ids) > 1:
            without = [str(file) for file, names in columns.items() if id_column not in names]
            raise CorpusError(
                f"{without[0]!r} has no id column {id_column!r}, which other files of {source!r} have: its rows "
                "would have no id; give every file the column, or none (the rows are then numbered)"
            )
        return SourcePlan(*args, tuple(pieces), has_ids=has_ids.pop())
    keys, has_ids = _json_keys(files, kind, text_column, id_column)
    if text_column not in keys and not _all_lines_bad(files, kind):
        _require_text_column(source, text_column, keys)
    return SourcePlan(*args, tuple(pieces), has_ids=has_ids)


# What a text format's file holds when its first bytes are these: a compressed or binary file
# renamed, or saved under the wrong name (read as text, its bytes became error rows or garbled names).
MAGIC = {
    b"\x1f\x8b": "gzip-compressed (decompress it: gunzip)",
    b"PK\x03\x04": "a zip archive (unzip it)",
    b"PAR1": "a Parquet file (name it .parquet)",
    b"\xfd7zXZ\x00": "xz-compressed (decompress it: unxz)",
    b"\x28\xb5\x2f\xfd": "zstd-compressed (decompress it: unzstd)",
}
BZIP2 = re.compile(rb"BZh[1-9]")  # bzip2's magic and block size: a CSV header may begin with "BZh" itself


def _refuse_binary(file: Path, kind: str) -> None:
    with open(file, "rb") as handle:
        head = handle.read(8)
    found = [what for magic, what in MAGIC.items() if head.startswith(magic)]
    found += ["bzip2-compressed (decompress it: bunzip2)"] if BZIP2.match(head) else []
    if found:
        raise CorpusError(f"{str(file)!r} is no {kind.upper()} text: it is {found[0]}")


def _require_text_column(source, text_column: str, columns: list[str]) -> None:
    if text_column not in columns and any(INVALID_UTF8 in str(c) or "\0" in str(c) for c in columns):
        # a UTF-16 file (Excel's "Unicode text") read as UTF-8: its column list came out garbled
        raise CorpusError(
            f"{source!r} is not UTF-8 text: its header has bytes UTF-8 cannot hold (a UTF-16 file, as Excel's "
            "'Unicode text' saves it?); save it as UTF-8"
        )
    if text_column not in columns:
        raise CorpusError(
            f"{source!r} has no text column {text_column!r} (columns: {', '.join(map(str, columns))}); "
            "name the right one with --set text_column=NAME"
        )


def _parquet_footer(file: Path):
    try:
        parquet = pq.ParquetFile(file)
        metadata, names = parquet.metadata, list(parquet.schema_arrow.names)
    except Exception as err:  # pyarrow raises several types for broken files
        raise CorpusError(f"Parquet file {str(file)!r} cannot be read: {err}") from None
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:  # read as is, one column stood in for the other (every text the word "text"), or a traceback
        raise CorpusError(
            f"Parquet file {str(file)!r} has {len(names)} columns, some of one name ({', '.join(map(repr, repeated))}): "
            "which one is meant cannot be told; write it with distinct column names"
        )
    return metadata, names


def _text_header(file: Path, kind: str, text_column: str) -> list[str]:
    """A CSV file's column names (its header line, parsed as the reader will: ``fields.csv_rows``)."""
    try:
        with open_text(file) as handle:
            header = fields.csv_header(csv.reader(handle, strict=True), written=True)
    except csv.Error as err:
        raise CorpusError(f"{str(file)!r} cannot be parsed: {first_line(err)}") from None
    if not header:
        raise CorpusError(f"{str(file)!r} cannot be parsed: its first line holds no column names")
    names = fields.csv_columns(header)
    repeated = [(given, read) for given, read in zip(header, names) if given and given != read]
    if repeated:  # read as pandas reads it, and said: the second "text" column is "text.1"
        log.warning(
            "%r has columns of one name: %s; the first of each is read by its name (--set text_column=NAME "
            "and the like name another)",
            str(file),
            ", ".join(f"{given!r} again as {read!r}" for given, read in repeated),
        )
    return names


def _csv_has_rows(file: Path) -> bool:
    """Whether a CSV file holds a line past its header (a header alone makes no row)."""
    try:
        with open_text(file) as handle:
            next(handle, None)
            return any(line.strip() for line in handle)
    except (OSError, UnicodeDecodeError):  # the reader names it, in its own words
        return True


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
            raise CorpusError(f"{str(file)!r} cannot be parsed: {first_line(err)}") from None
        yield from enumerate(value if isinstance(value, list) else [value])
        return
    with open_text(file, newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield number, fields.parse_json(line)
                except ValueError:
                    yield number, None


def piece_columns(piece: Piece) -> list[str]:
    """The columns a piece's file names, as the reader finds them: a Parquet schema, a CSV header,
    the keys of its JSON objects (a JSON lines file may name a key on any line: all are read)."""
    path = Path(piece.path)
    if piece.kind == "parquet":
        return _parquet_footer(path)[1]
    if piece.kind == "csv":
        return _text_header(path, piece.kind, "")
    return list(
        dict.fromkeys(k for _, value in _json_values(path, piece.kind) if isinstance(value, dict) for k in value)
    )


def first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _imdb_root(path: Path) -> Path | None:
    for root in (path, path / "aclImdb"):
        if (root / "train" / "pos").is_dir() or (root / "test" / "pos").is_dir():
            return root
    return None


def imdb_name(name: str, split: str) -> tuple[str, int] | None:
    """``aclImdb/train/pos/123_8.txt`` -> (``train_pos_123``, 1)."""
    parts = name.split("/")
    if len(parts) < 3 or parts[-3] != split or parts[-2] not in IMDB_LABELS or not parts[-1].endswith(".txt"):
        return None
    return f"{split}_{parts[-2]}_{parts[-1].split('_')[0]}", IMDB_LABELS[parts[-2]]


def _aclimdb_pieces(root: Path, split: str) -> tuple[Piece, ...]:
    names = [
        f"{split}/{folder}/{file.name}"
        for folder in ("neg", "pos")
        if unlinked(root, root / split / folder)
        for file in sorted((root / split / folder).glob("*.txt"))
        if imdb_name(f"{split}/{folder}/{file.name}", split) and not file.is_symlink()
    ]
    if not names:
        raise CorpusError(f"aclImdb folder {str(root)!r} has no reviews for split {split!r}")
    chunks = [tuple(names[i : i + FILES_PER_PIECE]) for i in range(0, len(names), FILES_PER_PIECE)]
    return tuple(Piece(i, "aclimdb", str(root), len(chunk), chunk) for i, chunk in enumerate(chunks))


def unlinked(folder: Path, path: Path) -> bool:
    """``path`` is reached from ``folder`` through no symbolic link. A linked review or class folder
    of an aclImdb folder is skipped, as the archive reader skips links: it could be anything."""
    return path.resolve() == folder.resolve() / path.relative_to(folder)


def _tar_piece(path: Path, split: str) -> Piece:
    """The archive is one piece (gzip cannot be split); its member names are counted here."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            count = sum(1 for m in archive if m.isfile() and imdb_name(m.name, split))
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CorpusError(f"archive {str(path)!r} cannot be read: {err}") from None
    if not count:
        raise CorpusError(f"archive {str(path)!r} has no aclImdb reviews for split {split!r}")
    return Piece(0, "tar", str(path), count)


def _hub_plan(args) -> SourcePlan:
    source, split, text_column, id_column = args[0], args[1], args[2], args[4]
    stream = hub_stream(source, split)
    first = next(iter(stream), None)
    columns = list(first) if isinstance(first, dict) else []
    if first is not None:
        _require_text_column(source, text_column, columns)
    return SourcePlan(*args, (Piece(0, "hub", source),), has_ids=id_column in columns)


def hub_stream(dataset_id: str, split: str):
    try:
        import datasets

        return datasets.load_dataset(dataset_id, split=split, streaming=True)
    except Exception as err:
        raise CorpusError(
            f"could not load Hub dataset {dataset_id!r} (split {split!r}); offline, pass a local path "
            f"instead, e.g. --data ../shared/data/imdb/train.parquet ({type(err).__name__})"
        ) from None
