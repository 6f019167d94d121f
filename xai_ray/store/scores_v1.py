"""Store layout 1 (the earlier layout, kept to read and write such runs): ``tokens`` and
``words`` as long tables, one file per method and layer (``tokens/method=<m>/layer=<l>/``), each
row repeating its document id and token or word text for every method x layer slice."""

from __future__ import annotations

import pyarrow as pa

from xai_ray.store.pieces import Pieces, defined_slices
from xai_ray.store.schemas import TOKENS, WORDS


def _encoded(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its shared string columns dictionary-encoded (as they are built here)."""
    shared = {"doc_id", "token", "word", "joined"}
    return pa.schema(
        [pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in shared else f for f in schema]
    )


TOKENS_ENCODED, WORDS_ENCODED = _encoded(TOKENS), _encoded(WORDS)


def add(out, scored: pa.Table, methods: list[str], pieces: Pieces) -> None:
    """Add each (method, layer) slice of ``scored`` as a ``tokens`` and a ``words`` table to ``out``."""
    for method, layer, values, shares, raw in defined_slices(scored, methods, pieces):
        where = f"method={method}/layer={layer}"
        out.add(
            f"tokens/{where}",
            pa.Table.from_arrays([*pieces.token_columns, pa.array(values)], schema=TOKENS_ENCODED),
            "tokens",
        )
        words = pa.Table.from_arrays(
            [
                *pieces.word_columns,
                pa.array(shares),
                pa.array(raw),
                pa.array(pieces.lifts(shares)),
                *pieces.unit_columns,
            ],
            schema=WORDS_ENCODED,
        )
        out.add(f"words/{where}", words, "words")
