"""Faithfulness charts: DataFrame of bootstrap summaries -> ``alt.Chart``; no I/O, no SQL.

summary: columns method, layer (NaN for the baselines), metric, mean, lo, hi, n_docs.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

BASELINES = ("input_x_gradient", "random")


def _with_kind(summary: pd.DataFrame) -> pd.DataFrame:
    frame = summary.copy()
    frame["baseline"] = frame["layer"].isna()
    frame["layer"] = frame["layer"].astype("Float64")
    return frame


def by_layer(summary: pd.DataFrame, metrics: list[str], title: str) -> alt.FacetChart:
    """One panel per metric: each attention method's mean per layer with its 95% interval as
    error bars; the baselines (input x gradient, the random floor) as horizontal rules across
    the panel with their interval as a band."""
    frame = _with_kind(summary[summary["metric"].isin(metrics)])
    color = alt.Color("method:N", title="method", legend=alt.Legend(symbolOpacity=1))  # not the faint band's
    tooltip = [
        "method:N",
        "layer:O",
        "metric:N",
        alt.Tooltip("mean:Q", format=".4f"),
        alt.Tooltip("lo:Q", format=".4f", title="95% CI low"),
        alt.Tooltip("hi:Q", format=".4f", title="95% CI high"),
        "n_docs:Q",
    ]
    layered = alt.Chart().transform_filter("!datum.baseline")
    lines = layered.mark_line(point=True).encode(
        x=alt.X("layer:O"), y=alt.Y("mean:Q", title="mean"), color=color, tooltip=tooltip
    )
    bars = layered.mark_errorbar(ticks=True).encode(
        x="layer:O", y=alt.Y("lo:Q", title="mean"), y2="hi:Q", color=color
    )  # the layers share one y title
    flat = alt.Chart().transform_filter("datum.baseline")
    band = flat.mark_rect(opacity=0.12).encode(y=alt.Y("lo:Q", title="mean"), y2="hi:Q", color=color)
    rule = flat.mark_rule(strokeDash=[5, 3], size=2).encode(
        y=alt.Y("mean:Q", title="mean"), color=color, tooltip=tooltip
    )
    return (
        alt.layer(band, rule, bars, lines, data=frame)
        .properties(width=200, height=170)
        .facet(facet=alt.Facet("metric:N", title=None, sort=metrics), columns=4)
        .resolve_scale(y="independent")
        .properties(title=title)
    )


def by_fraction(summary: pd.DataFrame, curves: list[str], title: str) -> alt.FacetChart:
    """Comprehensiveness and sufficiency against the share of tokens removed / kept, one line per
    method (attention methods at one layer, plus the baselines), 95% intervals as error bars.

    summary: as above plus a column fraction; metric holds the curve name.
    """
    frame = summary.copy()
    color = alt.Color("method:N", title="method")
    base = alt.Chart().encode(x=alt.X("fraction:Q", title="share of tokens", axis=alt.Axis(format="%")), color=color)
    lines = base.mark_line(point=True).encode(
        y=alt.Y("mean:Q", title="drop in predicted-class probability"),
        tooltip=[
            "method:N",
            "metric:N",
            alt.Tooltip("fraction:Q", format=".0%"),
            alt.Tooltip("mean:Q", format=".4f"),
            alt.Tooltip("lo:Q", format=".4f", title="95% CI low"),
            alt.Tooltip("hi:Q", format=".4f", title="95% CI high"),
        ],
    )
    bars = base.mark_errorbar(ticks=True).encode(
        y=alt.Y("lo:Q", title="drop in predicted-class probability"), y2="hi:Q"
    )
    return (
        alt.layer(bars, lines, data=frame)
        .properties(width=300, height=200)
        .facet(column=alt.Column("metric:N", title=None, sort=curves))
        .resolve_scale(y="independent")
        .properties(title=title)
    )
