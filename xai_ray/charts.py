"""DataFrame -> ``alt.Chart``: one function per chart, no I/O, no SQL."""

from __future__ import annotations

import altair as alt
import pandas as pd

WIDTH = 520


def topk_bar(top: pd.DataFrame, title: str, subtitle: list[str] | None = None) -> alt.Chart:
    """The headline chart: top-k words as horizontal bars with their mean score written beside them.

    top: columns word, mean_score, occurrences, documents (one group).
    """
    base = alt.Chart(top).encode(
        # An explicit order: both layers then share one sort, which Vega can union without warning.
        y=alt.Y("word:N", sort=top.sort_values("mean_score", ascending=False)["word"].tolist(), title=None),
        x=alt.X("mean_score:Q", title="mean normalised score"),
        tooltip=["word:N", alt.Tooltip("mean_score:Q", format=".4f"), "occurrences:Q", "documents:Q"],
    )
    bars = base.mark_bar(color="#5b9bd5")
    labels = base.mark_text(align="left", dx=3, fontSize=10).encode(text=alt.Text("mean_score:Q", format=".3f"))
    return (bars + labels).properties(
        width=WIDTH, height=alt.Step(16), title=alt.TitleParams(title, subtitle=subtitle or [])
    )


def topk_facets(top: pd.DataFrame, facet: str, title: str) -> alt.Chart:
    """Top-k bars side by side, one panel per value of ``facet`` (method or predicted class)."""
    return (
        alt.Chart(top)
        .mark_bar()
        .encode(
            y=alt.Y("word:N", sort=alt.EncodingSortField("mean_score", order="descending"), title=None),
            x=alt.X("mean_score:Q", title="mean normalised score"),
            color=alt.Color(f"{facet}:N", legend=None),
            tooltip=[f"{facet}:N", "word:N", alt.Tooltip("mean_score:Q", format=".4f"), "occurrences:Q"],
        )
        .properties(width=220, height=alt.Step(14))
        .facet(column=alt.Column(f"{facet}:N", title=None))
        .resolve_scale(y="independent")
        .properties(title=title)
    )


def layer_heatmap(words: pd.DataFrame, title: str) -> alt.Chart:
    """Layers x words heatmap of one review, one panel per method (raw fades, rollout keeps).

    words: columns method, layer, word_id, word, score.
    """
    frame = words.assign(label=words["word_id"].map("{:03d} ".format) + words["word"])
    return (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("label:N", sort=None, title=None, axis=alt.Axis(labelAngle=-60, labelLimit=90)),
            y=alt.Y("layer:O", sort="descending"),
            color=alt.Color("score:Q", scale=alt.Scale(scheme="blues"), title="score"),
            tooltip=["method:N", "layer:O", "word:N", alt.Tooltip("score:Q", format=".4f")],
        )
        .properties(width=alt.Step(11), height=alt.Step(16))
        .facet(row=alt.Row("method:N", title=None))
        .properties(title=title)
    )


def layer_curves(curves: pd.DataFrame, title: str) -> alt.Chart:
    """Per-layer [CLS] score of a review's top words, one panel per method.

    curves: columns method, layer, word, score.
    """
    return (
        alt.Chart(curves)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer:O"),
            y=alt.Y("score:Q", title="normalised word score"),
            color=alt.Color("word:N"),
            tooltip=["method:N", "layer:O", "word:N", alt.Tooltip("score:Q", format=".4f")],
        )
        .properties(width=240, height=180)
        .facet(column=alt.Column("method:N", title=None))
        .properties(title=title)
    )


def confusion(counts: pd.DataFrame, labels: dict) -> alt.Chart:
    """True label x predicted class counts."""
    frame = counts.assign(
        true=counts["label"].map(lambda v: labels.get(int(v), str(v))),
        predicted=counts["pred"].map(lambda v: labels.get(int(v), str(v))),
    )
    base = alt.Chart(frame).encode(x=alt.X("predicted:N"), y=alt.Y("true:N"))
    cells = base.mark_rect().encode(color=alt.Color("documents:Q", scale=alt.Scale(scheme="greens")))
    text = base.mark_text(fontSize=13).encode(text="documents:Q")
    return (cells + text).properties(width=200, height=160, title="Confusion matrix")
