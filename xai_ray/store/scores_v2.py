"""Store layout 2: a part's tokens and words stored once, every method x layer as a float column.

``token_scores/part-<k>.parquet`` holds one row per (document, token position): the document id,
position, token text and word id once, then one float32 column per method and layer
(``score:<method>:<layer>``). ``word_scores/part-<k>.parquet`` holds one row per (document, word):
id, text, unit (``span_id``, ``joined``) and ``unit_weight`` once, then ``score:<m>:<l>`` and
``raw_score:<m>:<l>`` per method and layer. So writing a slice costs its floats only, and a query
over one method and layer reads the id columns and one float column, as a per-slice file did.
The views (``query.views``) turn the columns back into the ``tokens`` and ``words`` rows; ``lift``
is computed there from the share and the unit's weight, exactly as layout 1 stored it.

A method that leaves a layer out (below ``start_layer``: NaN everywhere in the batch) gets no
column in that batch, which reads as null and yields no rows, as layout 1 wrote no file for it.
"""

from __future__ import annotations

import pyarrow as pa

from xai_ray.store.pieces import Pieces, defined_slices
from xai_ray.store.schemas import TOKEN_PIECES, WORD_PIECES, slice_column

TOKEN_TABLE, WORD_TABLE = "token_scores", "word_scores"


def _encoded(schema: pa.Schema) -> list[pa.Field]:
    shared = {"doc_id", "token", "word", "joined"}
    return [pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in shared else f for f in schema]


TOKEN_FIELDS, WORD_FIELDS = _encoded(TOKEN_PIECES), _encoded(WORD_PIECES)


def add(out, scored: pa.Table, methods: list[str], pieces: Pieces) -> None:
    """Add ``scored``'s tokens and words, every method x layer as a column, to ``out``."""
    token_fields, token_arrays = list(TOKEN_FIELDS), list(pieces.token_columns)
    word_fields = list(WORD_FIELDS)
    word_arrays = [*pieces.word_columns, *pieces.unit_columns, pa.array(pieces.unit_weight)]
    slices = 0
    for method, layer, values, shares, raw in defined_slices(scored, methods, pieces):
        slices += 1
        token_fields.append(pa.field(slice_column("score", method, layer), pa.float32()))
        token_arrays.append(pa.array(values))
        for kind, scores in (("score", shares), ("raw_score", raw)):
            word_fields.append(pa.field(slice_column(kind, method, layer), pa.float32()))
            word_arrays.append(pa.array(scores))
    if not slices:
        return
    out.add(TOKEN_TABLE, pa.Table.from_arrays(token_arrays, schema=pa.schema(token_fields)))
    out.add(WORD_TABLE, pa.Table.from_arrays(word_arrays, schema=pa.schema(word_fields)))
    # counted as the rows of the tokens and words views, so manifests say the same in both layouts
    out.counts["tokens"] = out.counts.get("tokens", 0) + slices * int(pieces.n_tokens.sum())
    out.counts["words"] = out.counts.get("words", 0) + slices * int(pieces.n_words.sum())
