"""Corpus sources -> rows ``{doc_id, text, label, problem}``.

Sources: a Hugging Face Hub dataset id, a Parquet, CSV or JSONL file or a folder of one of those
formats, an ``aclImdb`` folder or the ``aclImdb_v1.tar.gz`` archive. Ids are the source's own
when it has them, else stable ``{split}-{row}`` ids, so the same document keeps its id between
runs. Ids and labels are read as the text the source wrote (``fields``): never through a float.
Rows the reader already knows to be bad carry a ``problem`` (a label that is not a class number,
a JSONL line that is not an object) for screening to quarantine. A label that is not a class
number is also kept as written in ``label_name`` (when it is the row's only problem): screening
accepts it when it names one of the model's classes (``positive``), which the reader cannot know.
An aclImdb review's ``label_name`` is its folder (``pos``, ``neg``) beside the dataset's number for
it: screening reads it as the model's class of that name where the model names its classes.

``sources`` reads a source piece by piece; ``read_corpus`` gathers every piece into one DataFrame
in this process (a notebook, fine-tuning, tests), while ``pipeline.read`` hands the same pieces
to Ray workers so the driver never holds the texts. Both number rows, name rows without ids and
draw a ``limit`` sample by the functions below, so they give the same rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from xai_ray.data.pieces import CHUNK, count_piece, read_piece
from xai_ray.data.sources import plan
from xai_ray.data.text import INVALID_UTF8, CorpusError, clean_text, decode_marking_invalid

__all__ = ["CorpusError", "INVALID_UTF8", "clean_text", "decode_marking_invalid", "read_corpus", "sample_rows"]


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
    label as written when it is no class number and the row has no other problem, an aclImdb
    review's folder, else None).

    ``limit`` keeps a seeded random sample of that many rows (in source order), because
    sources such as IMDB are sorted by class and their first rows are all one label.
    """
    found = plan(source, split, text_column, label_column, id_column, clean_html)
    if found.has_ids is None:  # a JSONL source whose first object has no id: any later one may
        found = found.with_ids(any(count_piece(found, piece)[1] for piece in found.pieces))
    chunks = [chunk for piece in found.pieces for chunk in read_piece(found, piece)]
    table = pa.concat_tables(chunks) if chunks else CHUNK.empty_table()
    rows = np.arange(table.num_rows, dtype=np.int64)  # pieces in source order, rows in piece order
    table = table.set_column(table.schema.get_field_index("doc_id"), "doc_id", named_ids(table, rows, split))
    if limit is not None and limit < table.num_rows:
        table = table.take(pa.array(sample_rows(table.num_rows, limit, seed)))
    return pd.DataFrame(
        {
            "doc_id": pd.Series(table.column("doc_id").to_pylist(), dtype=object),
            "text": pd.Series(table.column("text").to_pylist(), dtype=object),
            "label": pd.array(table.column("label").to_pylist(), dtype="Int64"),
            "problem": pd.Series(table.column("problem").to_pylist(), dtype=object),
            "label_name": pd.Series(table.column("label_name").to_pylist(), dtype=object),
        }
    )


def named_ids(table: pa.Table, rows: np.ndarray, split: str) -> pa.Array:
    """The ``doc_id`` column with the rows of a source without ids named ``{split}-{row}`` (``rows``:
    each row's number in the whole source)."""
    numbered = table.column("numbered").combine_chunks().to_numpy(zero_copy_only=False)
    ids = table.column("doc_id").combine_chunks()
    if not numbered.any():
        return ids
    names = pc.binary_join_element_wise(pa.scalar(split), pa.array(rows.astype(str)), "-")
    return pc.if_else(pa.array(numbered), names, ids)


def sample_rows(n_rows: int, limit: int, seed: int) -> np.ndarray:
    """The rows a ``limit`` keeps, in source order: the seeded sample pandas'
    ``DataFrame.sample(n=limit, random_state=seed)`` draws (what earlier runs drew)."""
    return np.sort(np.random.RandomState(seed).choice(n_rows, size=limit, replace=False))
