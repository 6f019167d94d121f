"""The report's head section: what every attention head looks at over the whole run.

Reads the run's ``heads`` and ``head_similarity`` views; left out for runs without them (runs
scored with ``heads: false`` or before the tables existed). The statistics cover the run's
``heads_docs`` sample of its reviews (all of them in a smaller run); the section says how many.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from xai_ray.methods.head_summary import BROAD_ENTROPY, DOMINANT_SHARE, behaviour, classical_mds
from xai_ray.report import head_charts
from xai_ray.report.blocks import Fragment, Section


def heads(ctx):
    """Section ``heads``: layer x head heatmaps, per-layer profiles and the head map."""

    stats = ctx.query("report_heads")
    if stats.empty:
        return None
    stats = stats.assign(behaviour=[behaviour(row) for _, row in stats.iterrows()])
    n_docs, n_rows = int(stats.n_docs.iloc[0]), int(stats.n_rows.iloc[0])
    scored = int(ctx.summary.get("n_docs") or 0)
    over = f"{n_docs} reviews" if n_docs >= scored else f"a seeded sample of {n_docs} of the run's {scored} reviews"
    items = [
        head_charts.layer_profile(stats, "Per layer, averaged over its heads"),
        head_charts.head_heatmaps(stats, f"Per head, over {over} ({n_rows} query rows)"),
    ]
    items.append(Fragment(_highlights(stats)))
    similarity = ctx.query("report_head_similarity")
    if not similarity.empty:
        points = head_points(stats, similarity)
        sampled = (
            f"Jensen-Shannon divergence between heads' attention rows, averaged over the first rows of "
            f"{int(similarity.n_docs.iloc[0])} sampled reviews ({int(similarity.n_rows.iloc[0])} rows), "
            "embedded by classical MDS"
        )
        items.append(head_charts.head_map(points, "Head map: heads that attend alike lie close", [sampled]))
    note = (
        "Clark et al. (2019), 'What does BERT look at?', at corpus scale: every head's attention averaged over "
        f"every query row of {over} (heads_docs). [SEP] and [CLS] are the tokenizer's special tokens (<s>, </s> "
        f"for RoBERTa). A head's dominant behaviour is the target holding at least {DOMINANT_SHARE:.0%} of its "
        f"attention; otherwise 'broad' (entropy at least {BROAD_ENTROPY:.0%} of uniform) or 'mixed'."
    )
    return Section("heads", "Attention heads across the corpus", note, items)


def head_points(stats: pd.DataFrame, similarity: pd.DataFrame) -> pd.DataFrame:
    """The heads' 2-D coordinates: classical MDS of the mean JSD, read as a squared distance
    (sqrt(JSD) is a metric), joined to their statistics and behaviour."""
    keys = list(zip(stats["layer"], stats["head"]))
    position = {key: i for i, key in enumerate(keys)}
    squared = np.zeros((len(keys), len(keys)))
    for row in similarity.itertuples():
        a, b = position.get((row.layer_a, row.head_a)), position.get((row.layer_b, row.head_b))
        if a is not None and b is not None:
            squared[a, b] = row.jsd
    coords = classical_mds((squared + squared.T) / 2)
    return stats.assign(x=coords[:, 0], y=coords[:, 1])


def _highlights(stats: pd.DataFrame) -> str:
    """A short table: for each target, the layer attending to it most and the strongest head."""
    rows = []
    for key in head_charts.TARGETS:
        by_layer = stats.groupby("layer")[key].mean()
        top = stats.loc[stats[key].idxmax()]
        dominated = int((stats[key] >= DOMINANT_SHARE).sum())
        rows.append(
            f"<tr><th>{html.escape(head_charts.LABELS[key])}</th><td>layer {int(by_layer.idxmax())} "
            f"({by_layer.max():.3f} on average)</td><td>head {int(top.layer)}-{int(top['head'])} "
            f"({top[key]:.3f})</td><td>{dominated}</td></tr>"
        )
    entropy = stats.groupby("layer")["entropy"].mean()
    rows.append(
        f"<tr><th>entropy (nats)</th><td>highest: layer {int(entropy.idxmax())} ({entropy.max():.2f}), "
        f"lowest: layer {int(entropy.idxmin())} ({entropy.min():.2f})</td><td></td><td></td></tr>"
    )
    head = (
        "<tr><th></th><th>layer attending most</th><th>strongest head (layer-head)</th>"
        f"<th>heads &ge; {DOMINANT_SHARE:.0%}</th></tr>"
    )
    return f"<table class='facts heads'>{head}{''.join(rows)}</table>"
