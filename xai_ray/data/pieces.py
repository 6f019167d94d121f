"""A piece of a corpus source (``sources.plan``) read as standardised Arrow chunks.

``read_piece`` reads one piece wherever it runs (a Ray worker, or this process for
``read_corpus``), a chunk at a time, as rows ``doc_id, text, label, problem`` exactly as
``corpus`` documents them, each row carrying its place (``piece``, ``piece_row``) so the source's
row order can be rebuilt without moving rows.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.data import fields
from xai_ray.data.sources import INT64, Piece, SourcePlan, first_line, hub_stream, imdb_name
from xai_ray.data.text import CorpusError, clean_text, open_text

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
            doc_id, label = imdb_name(name, source.split)
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
        raise CorpusError(f"{piece.path!r} cannot be parsed: {first_line(err)}") from None


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
                raise CorpusError(f"{piece.path!r} cannot be parsed: {first_line(err)}") from None
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
                parsed = imdb_name(member.name, source.split) if member.isfile() else None
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
    for row in hub_stream(source.source, source.split):
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
    names: list = [None] * n
    if source.label_column in frame.columns:
        for i, value in enumerate(frame[source.label_column]):
            labels[i], written = fields.label_value(value)
            if labels[i] is not None and not INT64[0] <= labels[i] <= INT64[1]:
                labels[i], written = None, str(value)
            if written is not None and problems[i] is None:
                problems[i] = f"label {written!r} is not a class number"
                names[i] = written  # maybe a class name: screening knows the model's
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
            pa.array(names, pa.string()),
        ],
        schema=CHUNK,
    )
