"""A piece of a corpus source (``sources.plan``) read as standardised Arrow chunks.

``read_piece`` reads one piece wherever it runs (a Ray worker, or this process for
``read_corpus``), a chunk at a time, as rows ``doc_id, text, label, problem`` exactly as
``corpus`` documents them, each row carrying its place (``piece``, ``piece_row``) so the source's
row order can be rebuilt without moving rows.
"""

from __future__ import annotations

import csv
import math
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.data import fields
from xai_ray.data.sources import IMDB_FOLDERS, INT64, Piece, SourcePlan, first_line, hub_stream, imdb_name
from xai_ray.data.text import CorpusError, clean_text, decode_file, escaped, lone_surrogate, not_utf8, open_text

CHUNK_ROWS = 1024  # rows per chunk: what one worker holds of a piece at once
CHUNK = pa.schema(
    [
        ("piece", pa.int32()),
        ("piece_row", pa.int64()),
        ("doc_id", pa.string()),  # null: missing (or, with ``numbered``, to be named by its row)
        ("numbered", pa.bool_()),  # the source has no id column: the id is "{split}-{row}"
        ("text", pa.string()),  # null: missing, or not a string (then ``problem`` says so)
        ("label", pa.int64()),
        ("problem", pa.string()),  # why the reader already knows the row cannot be scored
        ("label_name", pa.string()),  # the label as written when it is no class number (maybe a class name)
    ]
)


def read_piece(source: SourcePlan, piece: Piece, chunk_rows: int = CHUNK_ROWS, wanted=None) -> Iterator[pa.Table]:
    """One piece as standardised chunks (schema ``CHUNK``), in source order.

    ``wanted``: the piece's rows to keep (sorted numbers within the piece), or None for all; the
    others are dropped before they are standardised (cleaning a text costs more than reading it)."""
    start = 0
    for frame in _frames(source, piece, chunk_rows):
        rows = np.arange(start, start + len(frame), dtype=np.int64)
        start += len(frame)
        if wanted is not None:
            keep = np.isin(rows, wanted)
            frame, rows = frame.iloc[np.nonzero(keep)[0]].reset_index(drop=True), rows[keep]
        chunk = standardise(frame, source, piece, 0)
        if chunk.num_rows:
            yield chunk.set_column(chunk.schema.get_field_index("piece_row"), "piece_row", pa.array(rows))


def count_piece(source: SourcePlan, piece: Piece) -> tuple[int, bool]:
    """(rows, whether any row has the id column) of a piece, its texts read and dropped."""
    rows, has_ids = 0, False
    for frame in _frames(source, piece, CHUNK_ROWS * 8):
        rows += len(frame)
        has_ids = has_ids or (source.id_column in frame and frame[source.id_column].map(_present).any())
    return rows, bool(has_ids)


def column_rows(source: SourcePlan, piece: Piece, column: str) -> Iterator[tuple[str | None, object]]:
    """(the row's id as the corpus reader reads it, or None without one; its ``column`` value, or
    None) for each row of ``piece`` in order: a column the run does not score (``rationales``) read
    by the reader that read the scored rows, so both name the same rows (an integer id column with a
    null stays 1, 2; a byte-order mark, a bad CSV row or a JSON line that is no object are what they
    are to the corpus)."""
    for frame in _frames(source, piece, CHUNK_ROWS, extra=(column,)):
        n = len(frame)
        ids = [fields.id_text(v)[0] for v in frame[source.id_column]] if source.id_column in frame else [None] * n
        if "__line_id" in frame:
            ids = [i if fields.missing(line) else line for i, line in zip(ids, frame["__line_id"])]
        values = list(frame[column]) if column in frame else [None] * n
        yield from zip(ids, values)


def _present(value) -> bool:
    return not (value is None or (isinstance(value, float) and value != value))


def _frames(source: SourcePlan, piece: Piece, chunk_rows: int, extra: tuple = ()) -> Iterator[pd.DataFrame]:
    """The piece's rows as written, in frames; ``extra``: columns a Parquet file is read for beyond
    the id, text and label (the other formats read every column anyway)."""
    if piece.kind == "parquet":
        yield from _parquet_frames(source, piece, chunk_rows, extra)
    elif piece.kind == "csv":
        yield from _csv_frames(piece, chunk_rows)
    elif piece.kind in ("jsonl", "json"):
        yield from _chunked(_json_rows(piece), chunk_rows)
    elif piece.kind == "aclimdb":
        yield from _chunked(_folder_reviews(source, piece), chunk_rows)
    elif piece.kind == "tar":
        yield from _tar_frames(source, piece, chunk_rows)
    else:
        yield from _chunked(hub_stream(source.source, source.split), chunk_rows)


def _chunked(rows, chunk_rows: int) -> Iterator[pd.DataFrame]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == chunk_rows:
            yield _row_frame(chunk)
            chunk = []
    if chunk:
        yield _row_frame(chunk)


def _row_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, dtype=object)  # object: no column inferred to a type, JsonNumber kept
    return frame if "__problem" in frame else frame.assign(__problem=pd.Series(dtype=object))


def _review(doc_id: str, label: int, data: bytes, where: str) -> dict:
    """An aclImdb review file's row; ``__where`` names the file for a bad byte's reason, and
    ``__label_name`` its folder, a class name that screening matches to the model's classes
    (``label`` is the dataset's own number for it: what a run without a model's classes keeps)."""
    return {
        "id": doc_id,
        "text": decode_file(data),
        "label": label,
        "__problem": None,
        "__where": where,
        "__label_name": IMDB_FOLDERS[label],
    }


def _folder_reviews(source: SourcePlan, piece: Piece) -> Iterator[dict]:
    """The reviews of an aclImdb folder's piece; one that cannot be read (a folder named like a
    review, a file gone or unreadable) is a row whose problem says so, and the others go on."""
    for name in piece.part:
        doc_id, label = imdb_name(name, source.split)
        path = Path(piece.path) / name
        try:
            data = path.read_bytes()
        except OSError as err:
            why = "is a folder, not a review file" if path.is_dir() else f"cannot be read ({err.strerror or err})"
            yield {
                "id": doc_id,
                "text": None,
                "label": label,
                "__problem": f"{str(path)!r} {why}",
                "__label_name": None,
            }
            continue
        yield _review(doc_id, label, data, repr(str(path)))


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


def _parquet_frames(source: SourcePlan, piece: Piece, chunk_rows: int, extra: tuple = ()) -> Iterator[pd.DataFrame]:
    try:
        parquet = pq.ParquetFile(piece.path)
        names = parquet.schema_arrow.names
        wanted = [c for c in (source.id_column, source.text_column, source.label_column, *extra) if c in names]
        for batch in parquet.iter_batches(batch_size=chunk_rows, row_groups=list(piece.part), columns=wanted):
            frame = batch.to_pandas(types_mapper=_NULLABLE.get)
            if source.label_column in names and pa.types.is_floating(batch.schema.field(source.label_column).type):
                frame[source.label_column] = _float_labels(batch.column(source.label_column))
            yield frame
    except CorpusError:
        raise
    except Exception as err:  # pyarrow raises several types for broken files
        raise CorpusError(f"Parquet file {piece.path!r} cannot be read: {first_line(err)}") from None


def _float_labels(column: pa.Array) -> pd.Series:
    """A float label column with its NaN told apart from its nulls: pandas reads both as missing,
    and a NaN is a label written wrong (an error row, as in JSON Lines), not a review without one."""
    values = ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in column.to_pylist()]
    return pd.Series(values, dtype=object)


def _csv_frames(piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    # Every field as written: no "NA"/"null" turned missing, no "007" turned 7 (see fields.csv_rows).
    try:
        with open_text(Path(piece.path)) as handle:
            yield from _chunked(fields.csv_rows(handle), chunk_rows)
    except csv.Error as err:
        raise CorpusError(f"{piece.path!r} cannot be parsed: {first_line(err)}") from None


def _json_rows(piece: Piece):
    """JSON lines (or a ``.json`` array's elements) as rows; a line that is not a JSON object is a
    row named ``line-N`` (``element N`` in an array) whose ``__problem`` says what is wrong."""
    if piece.kind == "json":
        with open_text(Path(piece.path)) as handle:
            try:
                value = fields.parse_json(handle.read())
            except Exception as err:
                raise CorpusError(f"{piece.path!r} cannot be parsed: {first_line(err)}") from None
        if not isinstance(value, list):
            kind = fields.json_kind(value)
            raise CorpusError(f"{piece.path!r} cannot be parsed: the file holds a JSON {kind}, not an array of objects")
        for i, item in enumerate(value):
            row = fields.json_row(item, i, f"element {i} is a JSON {fields.json_kind(item)}, not an object")
            yield {**row, "__where": f"the text of element {i} of {piece.path!r}"}
        return
    with open_text(Path(piece.path), newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield {**fields.json_line_row(number, line), "__line": number}


def _tar_frames(source: SourcePlan, piece: Piece, chunk_rows: int) -> Iterator[pd.DataFrame]:
    rows = []
    try:
        with tarfile.open(piece.path, "r:gz") as archive:
            for member in archive:
                parsed = imdb_name(member.name, source.split) if member.isfile() else None
                if parsed:
                    data = archive.extractfile(member).read()
                    rows.append(_review(*parsed, data, f"{member.name!r} in {piece.path!r}"))
                    if len(rows) == chunk_rows:
                        yield _row_frame(rows)
                        rows = []
    except (tarfile.TarError, OSError, EOFError) as err:
        raise CorpusError(f"archive {piece.path!r} cannot be read: {first_line(err)}") from None
    if rows:
        yield _row_frame(rows)


# -------------------------------------------------------------------------------- standardise


def standardise(frame: pd.DataFrame, source: SourcePlan, piece: Piece, start: int) -> pa.Table:
    """A frame as the source wrote it -> ``CHUNK`` rows: ids and labels read as text (``fields``),
    rows the reader knows to be bad carrying their ``problem`` (the first one found)."""
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
    ids, problems = _storable(ids, problems, "doc_id")
    values = list(frame[source.text_column]) if source.text_column in frame.columns else [None] * n
    problems = [
        p or ("text is a JSON number, not a string" if isinstance(t, fields.JsonNumber) else None)
        for p, t in zip(problems, values)
    ]
    labels: list = [None] * n
    names: list = [None] * n
    if source.label_column in frame.columns:
        for i, value in enumerate(frame[source.label_column]):
            labels[i], written = fields.label_value(value)
            if labels[i] is not None and not INT64[0] <= labels[i] <= INT64[1]:
                labels[i], written = None, str(value)
            if written is not None and problems[i] is None:
                problems[i] = fields.not_a_number(written)
                names[i] = written  # maybe a class name: screening knows the model's
    if "__label_name" in frame and source.label_column in frame.columns:  # aclImdb: its folder names its class
        names = [n if n is not None else folder for n, folder in zip(names, frame["__label_name"])]
    names, problems = _storable(names, problems, "label")
    texts = []
    wheres = _wheres(frame, piece)
    for i, value in enumerate(values):
        if isinstance(value, str) and not isinstance(value, fields.JsonNumber):
            surrogate = lone_surrogate(value, "text")
            value = escaped(value) if surrogate else value
            problems[i] = problems[i] or surrogate or not_utf8(value, wheres[i])
            texts.append(clean_text(value) if source.clean_html else value)
            if problems[i] is None and value.strip() and not texts[-1].strip():
                problems[i] = BREAKS_ONLY  # screening would call it empty, a text the file does not hold
        else:
            texts.append(None)
            if not fields.missing(value) and problems[i] is None and not isinstance(value, fields.JsonNumber):
                problems[i] = f"text is {type(value).__name__}, not a string"
    return pa.Table.from_arrays(
        [
            pa.array([piece.index] * n, pa.int32()),
            pa.array(range(start, start + n), pa.int64()),
            pa.array(ids, pa.string()),
            pa.array(numbers, pa.bool_()),
            pa.array(texts, pa.string()),
            pa.array(labels, pa.int64()),
            pa.array(problems, pa.string()),
            pa.array(names, pa.string()),
        ],
        schema=CHUNK,
    )


BREAKS_ONLY = (
    "text is HTML line breaks (<br />) and white space only: clean_html turns the breaks into spaces, "
    "which leaves no word to score"
)


def _storable(values: list, problems: list, what: str) -> tuple[list, list]:
    """``values`` with each lone surrogate escaped (Arrow stores only Unicode text), the row's first
    problem kept or else this one: such an id or label is not the one the file meant."""
    out = list(values)
    for i, value in enumerate(values):
        found = lone_surrogate(value, what) if isinstance(value, str) else None
        if found:
            out[i], problems[i] = escaped(value), problems[i] or found
    return out, problems


def _wheres(frame: pd.DataFrame, piece: Piece) -> list[str]:
    """Where each row's text sits, for the reason of a byte that is not UTF-8."""
    if "__where" in frame:
        return ["the text" if fields.missing(w) else w for w in frame["__where"]]
    if "__line" in frame:
        return [f"the text on line {line} of {piece.path!r}" for line in frame["__line"]]
    return ["the text"] * len(frame)
