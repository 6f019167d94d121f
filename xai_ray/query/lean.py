"""Whether a method's top words lean toward the class it explains or against it, measured on the
run's own reviews (``sql/topk_lean.sql`` defines the lean; no lexicon).

A word leans toward class c when the reviews the model predicts as c hold it more often than the
reviews it predicts otherwise (a smoothed log odds ratio of document frequencies). A method whose
top words for its predicted class c lean, on average, toward the other classes lists words that
read as evidence for the other side: ``topk --by pred``, the report and the nightly summary say so
in one sentence per (method, layer, class).
"""

from __future__ import annotations

import pandas as pd

from xai_ray.query.connection import run_named
from xai_ray.query.top_words import has_word_totals, settle
from xai_ray.terminal import visible


def lean(con, run_id: str, k: int, method: str | None = None, layer: int | None = None, **word_params) -> pd.DataFrame:
    """Per (method, layer, predicted class): the top ``k`` words (``words``), their mean lean toward
    the class (``mean_lean``; null with no review predicted otherwise), how many lean against it
    (``n_against``, ``share_against``), the reviews on each side and ``flagged`` (mean lean below
    0). ``method`` / ``layer`` None: every one the run has; ``word_params``: ``wordstats.query_params``.
    Read from the kept word totals when the run has them, else from the words view."""
    name = "topk_lean_totals" if has_word_totals(con, run_id) else "topk_lean"
    return run_named(con, name, run_id=run_id, method=method, layer=layer, k=int(k), **word_params)


def topk_lean(con, run_id, method, layer, k, min_count=1, *, stat="lift", min_docs=None, exclude=None) -> pd.DataFrame:
    """``lean`` of the one method and layer that ``top_words.topk`` ranks with the same arguments."""
    params = settle(con, run_id, method, layer, k, min_count, stat=stat, min_docs=min_docs, exclude=exclude)
    return lean(con, **params)


def flagged(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["flagged"].astype(bool)]


def sentence(row, label: str) -> str:
    """``raw, layer 6 leans against the prediction for class positive: ...`` for one flagged row of
    ``lean`` (``label``: the class's name, or its number; its control and bidirectional characters
    escaped: the sentence goes to the terminal and the nightly log, and a model's author names it)."""
    return (
        f"{row.method}, layer {int(row.layer)} leans against the prediction for class {visible(str(label))}: "
        f"mean lean {row.mean_lean:+.2f} over its top {int(row.n_words)} words, "
        f"{int(row.n_against)} of them more frequent in reviews predicted otherwise"
    )


def sentences(frame: pd.DataFrame, label=str) -> list[str]:
    """One ``sentence`` per flagged row of ``frame``, in its order; ``label`` names a class number."""
    return [sentence(row, label(row.pred)) for row in flagged(frame).itertuples()]
