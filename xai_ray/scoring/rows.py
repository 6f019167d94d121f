"""A scored document as one Arrow row: its schema and the pieces every scoring path shares.

A row holds the document's prediction, its tokens and words, and every method's per-layer scores
flattened to L*n floats (``scores_<method>``, ``word_raw_<method>``, ``word_scores_<method>``).
A row that cannot be scored carries an ``error`` instead. The scorer builds a batch's score
columns from its padded (D, L, N) arrays at once (``score_arrays``) and the rest from a few
values per document (``table_of``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from xai_ray.scoring.evaluation import FAITHFULNESS_FIELDS
from xai_ray.words import merge_scores, normalise

ROW_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("text", pa.string()),
    pa.field("label", pa.int64()),
    pa.field("pred", pa.int64()),
    pa.field("probs", pa.list_(pa.float32())),
    pa.field("n_tokens", pa.int32()),
    pa.field("n_layers", pa.int32()),
    pa.field("truncated", pa.bool_()),
    pa.field("tokens", pa.list_(pa.string())),
    pa.field("word_index", pa.list_(pa.int32())),
    pa.field("words", pa.list_(pa.string())),
    pa.field("word_span", pa.list_(pa.int32())),  # per word: first word of its unit (a joined contraction)
    pa.field("word_joined", pa.list_(pa.string())),  # per word: its unit's text ("wasn't")
    pa.field("error", pa.string()),
    pa.field("model_fingerprint", pa.string()),
    pa.field("seconds", pa.map_(pa.string(), pa.float64())),  # per stage, for the manifest's timings
    # the class the class-specific methods explained (null when the run has none), and integrated
    # gradients' f(x) - f(baseline) and completeness error (null without integrated_gradients)
    pa.field("target", pa.int64()),
    pa.field("ig_delta", pa.float64()),
    pa.field("ig_completeness_error", pa.float64()),
    *FAITHFULNESS_FIELDS,  # filled when the run evaluates (--evaluate), else null
]


# Per-head statistics of the document (xai_ray.methods.heads): L x H x len(STATISTICS) sums over its rows,
# and for sampled documents the (L*H) x (L*H) Jensen-Shannon sums over its first rows.
HEAD_FIELDS = [
    pa.field("heads", pa.list_(pa.float64())),
    pa.field("head_jsd", pa.list_(pa.float64())),
    pa.field("head_jsd_rows", pa.int32()),
]


def row_schema(methods, with_attention: bool = False) -> pa.Schema:
    per_method = [
        pa.field(f"{prefix}_{m}", pa.list_(pa.float32()))
        for m in methods
        for prefix in ("scores", "word_scores", "word_raw")
    ]
    extra = [pa.field("attention", pa.list_(pa.float32()))] if with_attention else []
    return pa.schema(ROW_FIELDS + per_method + extra + HEAD_FIELDS)


def score_columns(name: str, scores: np.ndarray, index: np.ndarray, n_words: int, signed: bool = False) -> dict:
    """One document's (L, n) token scores -> its method's row columns: token scores, word sums,
    renormalised words (``signed`` methods: absolute values sum to 1). For the CPU stage after a
    GPU actor (``deferred``), which adds a host method to rows one at a time."""
    word_raw = merge_scores(scores, index, n_words).astype(np.float32)  # (L, W) summed in float64
    # shares from the stored float32 sums, divided in float32 as the batched path divides: the
    # store then keeps one divisor per review and layer instead of every share (``store.scores_v3``)
    return {
        f"scores_{name}": scores.astype(np.float32).ravel(),
        f"word_raw_{name}": word_raw.ravel(),
        f"word_scores_{name}": normalise(word_raw, signed).astype(np.float32).ravel(),
    }


def ragged(values, widths: np.ndarray) -> pa.ListArray:
    """(D, L, M) per-document blocks padded to M (torch or numpy) -> one list<float32> per
    document holding its (L, width) block row-major, as a row stores a method's scores. One
    float32 copy off the device and one boolean gather: no Python object per score."""
    values = values.float().cpu().numpy() if hasattr(values, "detach") else np.asarray(values, dtype=np.float32)
    n_docs, n_layers, width = values.shape
    keep = np.arange(width)[None, None, :] < np.asarray(widths)[:, None, None]  # (D, 1, M)
    flat = values[np.broadcast_to(keep, values.shape)]  # document, then layer, then position
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.asarray(widths, dtype=np.int64) * n_layers, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat, type=pa.float32()))


def score_arrays(name: str, tokens, word_raw, word_scores, n_tokens: np.ndarray, n_words: np.ndarray) -> dict:
    """A method's three columns for a batch of D documents from its (D, L, N) token scores and
    (D, L, W) word sums and renormalised words (``words.merge_batch``)."""
    return {
        f"scores_{name}": ragged(tokens, n_tokens),
        f"word_raw_{name}": ragged(word_raw, n_words),
        f"word_scores_{name}": ragged(word_scores, n_words),
    }


def table_of(schema: pa.Schema, meta: list[dict], columns: dict) -> pa.Table:
    """The batch's table: the score columns as built (``score_arrays``), every other column from
    the documents' ``meta`` (a few values per document; absent keys are null)."""
    arrays = [columns[f.name] if f.name in columns else _column([m.get(f.name) for m in meta], f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: list, kind: pa.DataType) -> pa.Array:
    """One column from one value per document; a list column whose values are all numpy arrays (a
    document's word index) from their concatenation, not an Arrow conversion per element."""
    if pa.types.is_list(kind) and values and all(isinstance(v, np.ndarray) and v.ndim == 1 for v in values):
        offsets = np.zeros(len(values) + 1, dtype=np.int32)
        np.cumsum([len(v) for v in values], out=offsets[1:])
        flat = np.concatenate(values).astype(kind.value_type.to_pandas_dtype(), copy=False)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=kind.value_type), type=kind)
    return pa.array(values, type=kind)


def review_meta(
    *,
    doc_id,
    text: str,
    label,
    probs: np.ndarray,
    n_tokens: int,
    n_layers: int,
    truncated: bool,
    fingerprint: str,
    forward_s: float,
) -> dict:
    """The columns of a scored document besides its methods' scores and its tokens and words
    (``text_columns``, built for the whole batch): its prediction, sizes and timings."""
    return {
        "doc_id": doc_id,
        "text": text,
        "label": label,
        "pred": int(probs.argmax()),
        "probs": probs,
        "n_tokens": n_tokens,
        "n_layers": n_layers,
        "truncated": truncated,
        "error": None,
        "model_fingerprint": fingerprint,
        "seconds": {"forward": forward_s},
    }


def error_row(doc_id, label, reason: str, fingerprint: str) -> dict:
    return {"doc_id": doc_id, "label": label, "error": reason, "model_fingerprint": fingerprint}


def head_columns(collector, n_docs: int) -> list[dict]:
    """Per document of a forward pass: its per-head statistics when counted (``HeadCollector.counted``)
    and head similarity when sampled; nothing for the others."""
    if collector is None:
        return [{}] * n_docs
    statistics = collector.statistics().numpy()  # (B, L, H, N_STATS)
    similarity = collector.similarity()
    columns = []
    for b in range(n_docs):
        jsd, jsd_rows = similarity.get(b, (None, None))
        columns.append(
            {
                "heads": statistics[b].ravel() if collector.counted[b] else None,
                "head_jsd": None if jsd is None else jsd.numpy().ravel(),
                "head_jsd_rows": jsd_rows,
            }
        )
    return columns


def missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def rows_to_scores(row: dict, method: str) -> np.ndarray:
    """A row's flattened ``scores_<method>`` back to shape (L, n)."""
    return np.asarray(row[f"scores_{method}"], dtype=np.float32).reshape(row["n_layers"], row["n_tokens"])
