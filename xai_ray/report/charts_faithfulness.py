"""Faithfulness charts: DataFrame of faithfulness summaries (or leaderboard rows) -> ``alt.Chart``; no I/O, no SQL.

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


def leaderboard(board: pd.DataFrame, title: str, metric_title: str = "comprehensiveness AOPC") -> alt.HConcatChart:
    """Left: one row per leaderboard entry, best first, its mean as a point and its 95% interval as
    an error bar, the floor's interval as a grey band across every row (its mean a dashed rule).
    Right: each entry's actor-seconds per review, on the same rows (entries without a timing
    get no bar).

    board: columns entry, rank, method, which, mean, lo, hi, n_docs, is_floor, seconds.
    """
    order = board.sort_values("rank")["entry"].tolist()
    height = max(120, 24 * len(order))
    y = alt.Y("entry:N", sort=order, title=None)
    tooltip = [
        "rank:Q",
        "entry:N",
        alt.Tooltip("mean:Q", format=".4f"),
        alt.Tooltip("lo:Q", format=".4f", title="95% CI low"),
        alt.Tooltip("hi:Q", format=".4f", title="95% CI high"),
        alt.Tooltip("n_docs:Q", title="reviews"),
        alt.Tooltip("seconds:Q", format=".4f", title="seconds per review"),
    ]
    floor = board[board["is_floor"]]
    band = alt.Chart(floor).mark_rect(opacity=0.18, color="grey").encode(x="lo:Q", x2="hi:Q")  # spans every row
    rule = alt.Chart(floor).mark_rule(strokeDash=[5, 3], color="grey").encode(x="mean:Q")
    base = alt.Chart(board)
    bars = base.mark_errorbar(ticks=True).encode(x=alt.X("lo:Q", title=metric_title), x2="hi:Q", y=y)
    points = base.mark_point(filled=True, size=70).encode(
        x=alt.X("mean:Q", title=metric_title), y=y, color=alt.Color("method:N", title="method"), tooltip=tooltip
    )
    ranked = alt.layer(band, rule, bars, points).properties(width=380, height=height)
    timed = base.transform_filter("isValid(datum.seconds)")
    cost = timed.mark_bar().encode(
        x=alt.X("seconds:Q", title="actor-seconds per review"),
        y=alt.Y("entry:N", sort=order, title=None, axis=alt.Axis(labels=False, ticks=False)),
        color=alt.Color("method:N", title="method"),
        tooltip=tooltip,
    )
    labels = timed.mark_text(align="left", dx=3).encode(
        x="seconds:Q", y=alt.Y("entry:N", sort=order), text=alt.Text("seconds:Q", format=".2~g")
    )
    spent = (cost + labels).properties(width=180, height=height)
    return alt.hconcat(ranked, spent).resolve_scale(y="shared").properties(title=title)
