"""The Arrow schemas of every table a store holds, and of the ``runs`` view: one place.

``TABLES`` are the views' tables. Layout 3 (``LAYOUT``, ``store.scores_v3``) stores ``tokens`` and
``words`` in one table, ``SCORE_PIECES`` plus a score, raw score, divisor and share column per
method x layer (``slice_column``); layout 2 (``store.scores_v2``) stored them as ``TOKEN_PIECES``
/ ``WORD_PIECES`` plus float columns per method x layer; layout 1 as ``TOKENS`` / ``WORDS`` files
per method and layer.
"""

import re

import pyarrow as pa

LAYOUT = 3  # the store layout this version writes (recorded in each manifest as ``store_layout``)
LAYOUTS = (1, 2, 3)  # the layouts it reads: 1 = a manifest without ``store_layout`` (written before layout 2)

DOCS = pa.schema(
    [
        ("doc_id", pa.string()),
        ("label", pa.int64()),
        ("pred", pa.int64()),
        ("prob_pos", pa.float32()),  # P(class 1) of a two-class model, null with more classes
        ("probs", pa.list_(pa.float32())),  # every class's probability, in class-index order
        ("n_tokens", pa.int32()),
        ("n_words", pa.int32()),
        ("truncated", pa.bool_()),
        ("text", pa.string()),
        # the class the class-specific methods explained (null when the run has none of them)
        ("target", pa.int64()),
        # integrated_gradients: f(x) - f(baseline) of f = log p_target, and |sum of attributions - that|
        ("ig_delta", pa.float64()),
        ("ig_completeness_error", pa.float64()),
    ]
)
TOKENS = pa.schema(
    [
        ("doc_id", pa.string()),
        ("position", pa.int32()),
        ("token", pa.string()),
        ("word_id", pa.int32()),
        ("score", pa.float32()),
    ]
)
# score: the word's share of the document's score (sums to 1 over its words); lift: share x the
# document's words / the words of its unit, so a unit's lift (the sum over its words) is 1 for an
# even spread (words.lift); span_id/joined: the word's unit, a contraction split by the tokenizer
# joined back (words.join_contractions; else the word itself).
WORDS = pa.schema(
    [
        ("doc_id", pa.string()),
        ("word_id", pa.int32()),
        ("word", pa.string()),
        ("score", pa.float32()),
        ("raw_score", pa.float32()),
        ("lift", pa.float32()),
        ("span_id", pa.int32()),
        ("joined", pa.string()),
    ]
)
# Layout 2: a row per token and per word, the id columns once; slice columns follow them.
TOKEN_PIECES = pa.schema([f for f in TOKENS if f.name != "score"])
WORD_PIECES = pa.schema(
    [
        ("doc_id", pa.string()),
        ("word_id", pa.int32()),
        ("word", pa.string()),
        ("span_id", pa.int32()),
        ("joined", pa.string()),
        ("unit_weight", pa.float64()),  # the document's words / the words of the word's unit: lift = score x this
    ]
)
# Layout 3: a row per token, the word's columns on its first token (null on the others).
SCORE_PIECES = pa.schema([*TOKEN_PIECES, *(f for f in WORD_PIECES if f.name not in TOKEN_PIECES.names)])
SLICE = re.compile(r"^(score|raw_score|token_score|divisor|share):([a-z][a-z0-9_]*):([0-9]+)$")


def slice_column(kind: str, method: str, layer: int) -> str:
    """The layout-2 or 3 column of one method and (1-based) layer: ``score:rollout:3``."""
    return f"{kind}:{method}:{layer}"


ERRORS = pa.schema([("doc_id", pa.string()), ("stage", pa.string()), ("reason", pa.string())])
# Long form, one row per (document, method, layer, metric); layer is null for the baselines
# (input_x_gradient, random) and value null where a metric is undefined (see faithfulness.py).
FAITHFULNESS = pa.schema(
    [
        ("doc_id", pa.string()),
        ("method", pa.string()),
        ("layer", pa.int32()),
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)
# Per layer x head means over the run's heads_docs sample of reviews (xai_ray.methods.head_summary); entropies in nats.
HEADS = pa.schema(
    [
        ("layer", pa.int32()),
        ("head", pa.int32()),
        ("entropy", pa.float64()),
        ("entropy_norm", pa.float64()),
        ("cls_entropy", pa.float64()),
        ("to_cls", pa.float64()),
        ("to_sep", pa.float64()),
        ("to_punct", pa.float64()),
        ("to_self", pa.float64()),
        ("to_prev", pa.float64()),
        ("to_next", pa.float64()),
        ("n_docs", pa.int64()),
        ("n_rows", pa.int64()),
    ]
)
# Mean Jensen-Shannon divergence (nats) between two heads' attention rows over the sampled reviews.
HEAD_SIMILARITY = pa.schema(
    [
        ("layer_a", pa.int32()),
        ("head_a", pa.int32()),
        ("layer_b", pa.int32()),
        ("head_b", pa.int32()),
        ("jsd", pa.float64()),
        ("n_docs", pa.int64()),
        ("n_rows", pa.int64()),
    ]
)
RUNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("created_at", pa.string()),
        ("model", pa.string()),
        ("model_fingerprint", pa.string()),
        ("data", pa.string()),
        ("methods", pa.string()),
        ("n_layers", pa.int32()),
        ("n_docs", pa.int64()),
        ("n_errors", pa.int64()),
        ("seconds", pa.float64()),
        ("manifest", pa.string()),
    ]
)
# The aggregate stage's per-word sums of a run (query.top_words.keep_word_totals): typed here, as a
# run that scored nothing writes them too (an empty frame's text columns would be null-typed).
WORD_TOTALS = pa.schema(
    [
        ("method", pa.large_string()),
        ("layer", pa.int32()),
        ("pred", pa.int64()),
        ("word", pa.large_string()),
        ("total_lift", pa.float64()),
        ("squares_lift", pa.float64()),
        ("total_share", pa.float64()),
        ("squares_share", pa.float64()),
        ("occurrences", pa.int64()),
        ("documents", pa.int64()),
    ]
)
TABLES = {
    "docs": DOCS,
    "tokens": TOKENS,
    "words": WORDS,
    "errors": ERRORS,
    "faithfulness": FAITHFULNESS,
    "heads": HEADS,
    "head_similarity": HEAD_SIMILARITY,
}
