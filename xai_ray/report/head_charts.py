"""DataFrame -> ``alt.Chart`` for the per-head statistics: heatmaps, layer profiles, the head map.
No I/O, no SQL (the head counterpart of ``charts``)."""

from __future__ import annotations

import altair as alt
import pandas as pd

# Statistic column -> what a reader sees; the order of the heatmap panels.
LABELS = {
    "entropy": "entropy, all rows (nats)",
    "entropy_norm": "entropy / ln n (1 = uniform)",
    "cls_entropy": "entropy, [CLS] row (nats)",
    "to_cls": "attention to [CLS]",
    "to_sep": "attention to [SEP]",
    "to_punct": "attention to punctuation",
    "to_self": "attention to the same token",
    "to_prev": "attention to the previous token",
    "to_next": "attention to the next token",
}
TARGETS = ("to_cls", "to_sep", "to_punct", "to_self", "to_prev", "to_next")
BEHAVIOUR_COLOURS = {
    "[CLS]": "#e45756",
    "[SEP]": "#4c78a8",
    "punctuation": "#f58518",
    "self": "#b279a2",
    "previous token": "#54a24b",
    "next token": "#72b7b2",
    "broad": "#bab0ac",
    "mixed": "#000000",
}


def head_heatmaps(heads: pd.DataFrame, title: str) -> alt.FacetChart:
    """One layer x head heatmap per statistic, each with its own colour scale.

    heads: columns layer, head and the statistic columns named in ``LABELS``.
    """
    long = heads.melt(id_vars=["layer", "head"], value_vars=list(LABELS), var_name="key", value_name="value")
    long = long.assign(statistic=long["key"].map(LABELS))
    return (
        alt.Chart(long)
        .mark_rect()
        .encode(
            x=alt.X("head:O", title="head"),
            y=alt.Y("layer:O", title="layer"),
            color=alt.Color("value:Q", scale=alt.Scale(scheme="viridis"), title=None),
            tooltip=["statistic:N", "layer:O", "head:O", alt.Tooltip("value:Q", format=".3f")],
        )
        .properties(width=alt.Step(14), height=alt.Step(14))
        .facet(facet=alt.Facet("statistic:N", sort=list(LABELS.values()), title=None), columns=3)
        .resolve_scale(color="independent")
        .properties(title=title)
    )


def layer_profile(heads: pd.DataFrame, title: str) -> alt.HConcatChart:
    """Mean over a layer's heads of each attention target (left) and of the entropies (right)."""
    columns = [*TARGETS, "entropy", "cls_entropy"]
    means = heads.groupby("layer", as_index=False)[columns].mean()
    long = means.melt(id_vars=["layer"], var_name="key", value_name="value")
    long = long.assign(statistic=long["key"].map(LABELS))

    def lines(keys, y_title, chart_title):
        chosen = [LABELS[k] for k in keys]
        return (
            alt.Chart(long[long.key.isin(keys)])
            .mark_line(point=True)
            .encode(
                x=alt.X("layer:O"),
                y=alt.Y("value:Q", title=y_title),
                color=alt.Color("statistic:N", sort=chosen, title=None),
                tooltip=["statistic:N", "layer:O", alt.Tooltip("value:Q", format=".3f")],
            )
            .properties(width=300, height=200, title=chart_title)
        )

    return (
        alt.hconcat(
            lines(list(TARGETS), "mean attention share", "Where the heads look"),
            lines(["entropy", "cls_entropy"], "mean entropy (nats)", "How spread out"),
        )
        .resolve_scale(color="independent")
        .properties(title=title)
    )


def head_map(points: pd.DataFrame, title: str, subtitle: list[str] | None = None) -> alt.HConcatChart:
    """The heads in 2-D (classical MDS of their Jensen-Shannon divergences), twice: coloured by
    layer and by dominant behaviour.

    points: columns x, y, layer, head, behaviour and the statistics named in ``TARGETS``.
    """
    base = (
        alt.Chart(points)
        .encode(
            x=alt.X("x:Q", title="MDS 1", axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("y:Q", title="MDS 2", axis=alt.Axis(labels=False, ticks=False)),
            tooltip=[
                "layer:O",
                "head:O",
                "behaviour:N",
                alt.Tooltip("entropy:Q", format=".2f"),
                *[alt.Tooltip(f"{key}:Q", format=".2f", title=LABELS[key]) for key in TARGETS],
            ],
        )
        .properties(width=330, height=300)
    )
    by_layer = (
        base.mark_circle(size=90, opacity=0.85)
        .encode(color=alt.Color("layer:O", scale=alt.Scale(scheme="viridis")))
        .properties(title="coloured by layer")
    )
    present = [b for b in BEHAVIOUR_COLOURS if b in set(points["behaviour"])]
    by_behaviour = (
        base.mark_circle(size=90, opacity=0.85)
        .encode(
            color=alt.Color(
                "behaviour:N", scale=alt.Scale(domain=present, range=[BEHAVIOUR_COLOURS[b] for b in present])
            )
        )
        .properties(title="coloured by dominant behaviour")
    )
    return (
        alt.hconcat(by_layer, by_behaviour)
        .resolve_scale(color="independent")
        .properties(title=alt.TitleParams(title, subtitle=subtitle or []))
    )
