"""The top words of a run (``xai-ray topk``, the summary, the report): ranked as ``wordstats``
defines them, from the word totals the aggregate stage keeps beside a run when it has them."""

from __future__ import annotations

import json

import pandas as pd

from xai_ray.query import wordstats
from xai_ray.query.connection import WORD_TOTALS, QueryError, pick_run, run_named
from xai_ray.query.views import manifest_slices


def has_word_totals(con, run_id: str) -> bool:
    """Whether the run's aggregate stage kept its word totals (``keep_word_totals``)."""
    if not run_named(con, "relation_exists", relation=WORD_TOTALS).found.iloc[0]:
        return False
    return bool(run_named(con, "run_has_word_totals", run_id=run_id).found.iloc[0])


def topk(
    con,
    run_id: str | None = None,
    method: str = "rollout",
    layer: int | None = None,
    k: int = 20,
    min_count: int = 1,
    by: str = "all",
    *,
    stat: str = "lift",
    min_docs: int | None = None,
    exclude=None,
):
    """Top-k words by mean per-document ``stat`` (``wordstats``), each row with its 95% interval
    (ci_low, ci_high). ``layer`` defaults to the model's last layer, ``min_docs`` to
    ``wordstats.default_min_docs`` of the run's documents; ``exclude``: "punct,stop" or a list."""
    if by not in ("all", "label", "pred", "correct"):
        raise QueryError(f"--by must be all, label, pred or correct; got {by!r}")
    params = settle(con, run_id, method, layer, k, min_count, stat=stat, min_docs=min_docs, exclude=exclude)
    docs, labelled = _labelled(con, params["run_id"]) if by in ("label", "correct") else (None, None)
    if by in ("label", "correct") and not labelled:  # one NULL group, without a word
        why = (
            "scored no document (every row of its corpus is in the errors view)"
            if not docs
            else "has no labels (its corpus had no label column)"
        )
        raise QueryError(f"run {params['run_id']!r} {why}, so --by {by} has no groups; use --by pred or --by all")
    if by in ("all", "pred") and has_word_totals(con, params["run_id"]):  # kept by the run's aggregate stage
        return wordstats.add_interval(run_named(con, "topk_totals", by=by, **params))
    if by == "all":
        return wordstats.add_interval(run_named(con, "topk", **params))
    return wordstats.add_interval(run_named(con, "topk_grouped", by=by, **params))


def _labelled(con, run_id: str) -> tuple[int, int]:
    """(documents, documents with a label) of the run."""
    found = con.execute("select count(*), count(label) from docs where run_id = $run_id", {"run_id": run_id}).df()
    return int(found.iloc[0, 0]), int(found.iloc[0, 1])  # .df(): a notebook's guarded reader has no fetchone


def settle(con, run_id, method, layer, k, min_count, *, stat, min_docs, exclude) -> dict:
    """The bound parameters of one top-k (run, method, layer, k and ``wordstats.query_params``), the
    defaults filled in and every value checked, for ``topk`` and the lean of its words (``lean``)."""
    run = pick_run(con, run_id)
    if method not in run["methods"].split(","):
        raise QueryError(f"run {run['run_id']!r} has no method {method!r}; it has {run['methods']}")
    n_layers = int(run["n_layers"]) if pd.notna(run["n_layers"]) else None  # None: a manifest without it
    if layer is None and n_layers is None:
        raise QueryError(f"run {run['run_id']!r} does not record its model's layers; pass --layer")
    layer = n_layers if layer is None else int(layer)
    if layer < 1 or (n_layers is not None and layer > n_layers):
        raise QueryError(f"--layer must be between 1 and {n_layers} (the model's layers), got {layer}")
    manifest = json.loads(run.get("manifest") or "{}")
    stored = []
    if manifest.get("slices"):
        stored = sorted(la for m, la in manifest_slices(manifest) if m == method)
    elif "store_layout" not in manifest and not holds_slice(con, run["run_id"], method, layer):  # layout 1: no slices
        held = [la for la in range(1, (n_layers or 0) + 1) if holds_slice(con, run["run_id"], method, la)]
        where = f"; it holds layer {', '.join(map(str, held))}" if held else ""
        raise QueryError(f"run {run['run_id']!r} holds no words of method {method!r} at layer {layer}{where}")
    if stored and layer not in stored:  # input_x_gradient, integrated_gradients, lrp: the last layer only
        shown = ", ".join(map(str, stored))
        raise QueryError(f"run {run['run_id']!r} stores method {method!r} at layer {shown} only; got --layer {layer}")
    if int(k) < 1:
        raise QueryError(f"--k must be at least 1, got {k}")
    if min_docs is None:
        min_docs = wordstats.default_min_docs(int(run["n_docs"] or 0))
    try:
        stats = wordstats.query_params(stat, min_docs, min_count, exclude)
    except wordstats.WordStatsError as err:
        raise QueryError(str(err)) from None
    if stats["stat"] == "lift" and without_lift(con, run["run_id"], method, layer):
        raise QueryError(
            f"run {run['run_id']!r} was written by one of xai-ray's first versions, which stored no lift: "
            "use --stat share (its words' share of each review)"
        )
    return {"run_id": run["run_id"], "method": method, "layer": layer, "k": int(k), **stats}


def holds_slice(con, run_id: str, method: str, layer: int) -> bool:
    """Whether the run holds words of ``method`` at ``layer`` (one row read at most)."""
    return bool(run_named(con, "slice_has_words", run_id=run_id, method=method, layer=int(layer)).found.iloc[0])


def without_lift(con, run_id: str, method: str, layer: int) -> bool:
    """Whether the slice's words hold no lift (a first version's layout-1 run: the view reads it as
    null, and a top-k by lift would be empty without a word). One row read, not the slice."""
    found = run_named(con, "slice_first_lift", run_id=run_id, method=method, layer=layer)
    return not found.empty and pd.isna(found.iloc[0, 0])
