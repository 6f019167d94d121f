"""DataFrame -> ``alt.Chart``: one function per chart, no I/O, no SQL."""

from __future__ import annotations

import json

import altair as alt
import pandas as pd

from xai_ray.report.outputs import BIDI_CONTROLS, drawn

WIDTH = 520


AXIS = {"lift": "mean lift per review (1 = even spread)", "share": "mean share of the review's score"}


# The methods every JavaScript object inherits. Vega keeps a nominal scale's values as keys of a
# plain object, so a word such as "constructor" or "toString" among a chart's values emptied the
# chart in the page and failed its image export (vega-encode 5.1, 2026-11).
OBJECT_MEMBERS = frozenset(
    "constructor hasOwnProperty isPrototypeOf propertyIsEnumerable toLocaleString toString valueOf"
    " __defineGetter__ __defineSetter__ __lookupGetter__ __lookupSetter__ __proto__".split()
)
# Vega-Lite compiles an explicit sort into an expression comparing the field with each value, and
# Vega's expression parser fails on the value "if" there ("Unrecognized signal name"), emptying the
# chart (the contrast chart of a run whose words included "if"; vega-lite 6, 2026-11).
UNSORTABLE = frozenset({"if"})
JOINER = "\u2060"  # WORD JOINER: zero width, so the word reads the same and is no longer a member name


def spec(chart) -> dict:
    """A chart's Vega-Lite spec, its data inline however many rows it has: the page holds them
    anyway, and altair's default limit (5,000) is passed by a deep model's heads (48 layers x 12
    heads x 9 statistics) or a long review's words on a 12-layer model. Not validated against the
    Vega-Lite schema here (see ``unchecked``). Every string value that names an ``OBJECT_MEMBERS``
    method or is ``UNSORTABLE`` (a word, a class name; in the data, sort lists and controls alike)
    is drawn with a zero-width ``JOINER`` after it, and every character a chart cannot carry as
    the page shows it (``outputs.drawn``)."""
    with alt.data_transformers.disable_max_rows():
        return _drawable(chart.to_dict(validate=False))


def _drawable(value):
    if isinstance(value, str):
        value = drawn(value)  # a control, line separator or bidi control as the page shows it
        return value + JOINER if value in OBJECT_MEMBERS or value in UNSORTABLE else value
    if isinstance(value, dict):
        return {key: _drawable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_drawable(item) for item in value]
    return value


def unchecked():
    """A context in which charts are built without altair validating each piece against the
    Vega-Lite schema as it is made: the README job's report took 0.96 s without it against 1.04 s
    with it (2 cores, means of 3). Every chart a report builds is validated by the tests instead
    (``tests/test_report.py``), whose specs come from the same code."""
    return alt.utils.schemapi.debug_mode(False)


def _tooltip_title(text: str) -> str:
    """A tooltip title holding a user's text (a class name): Vega-Lite writes it into an expression
    string escaping its quotes but not its backslashes, so a name ending in one broke the chart."""
    return text.replace("\\", "\\\\")


def _interval_tooltip() -> list:
    return [
        alt.Tooltip("ci_low:Q", format=".4f", title="95% low"),
        alt.Tooltip("ci_high:Q", format=".4f", title="95% high"),
        "documents:Q",
        "occurrences:Q",
    ]


def topk_bar(top: pd.DataFrame, title: str, subtitle: list[str] | None = None, stat: str = "lift") -> alt.Chart:
    """The headline chart: top-k words as horizontal bars, each with its 95% interval as an error
    bar and its mean written beside it, so a reader sees which ranks differ.

    top: columns word, mean_score, ci_low, ci_high, occurrences, documents (one group).
    """
    base = alt.Chart(top).encode(
        # An explicit order: every layer then shares one sort, which Vega can union without warning.
        y=alt.Y("word:N", sort=top.sort_values("mean_score", ascending=False)["word"].tolist(), title=None),
        tooltip=["word:N", alt.Tooltip("mean_score:Q", format=".4f"), *_interval_tooltip()],
    )
    x = alt.X("mean_score:Q", title=AXIS.get(stat, stat))
    bars = base.mark_bar(color="#5b9bd5").encode(x=x)
    errors = base.mark_rule(color="#222222").encode(x=alt.X("ci_low:Q"), x2="ci_high:Q")
    labels = base.mark_text(align="left", dx=3, dy=-5, fontSize=9).encode(
        x="ci_high:Q", text=alt.Text("mean_score:Q", format=".3f")
    )
    return alt.layer(bars, errors, labels).properties(
        width=WIDTH, height=alt.Step(18), title=alt.TitleParams(title, subtitle=subtitle or [])
    )


def topk_facets(top: pd.DataFrame, facet: str, title: str, stat: str = "lift") -> alt.Chart:
    """Top-k bars with 95% error bars side by side, one panel per value of ``facet`` (method or
    predicted class). Panels are concatenated rather than faceted: each layers bars and error bars
    over its own word order, which a faceted layer with independent scales cannot do cleanly."""
    tooltip = [f"{facet}:N", "word:N", alt.Tooltip("mean_score:Q", format=".4f"), *_interval_tooltip()]
    panels = []
    for value in sorted(top[facet].unique(), key=str):
        part = top[top[facet] == value]
        base = alt.Chart(part).encode(
            y=alt.Y("word:N", sort=part.sort_values("mean_score", ascending=False)["word"].tolist(), title=None),
            tooltip=tooltip,
        )
        bars = base.mark_bar().encode(
            x=alt.X("mean_score:Q", title=AXIS.get(stat, stat)), color=alt.Color(f"{facet}:N", legend=None)
        )
        errors = base.mark_rule(color="#222222").encode(x="ci_low:Q", x2="ci_high:Q")
        panels.append(alt.layer(bars, errors, title=str(value)).properties(width=220, height=alt.Step(14)))
    return alt.hconcat(*panels).properties(title=title)


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
    """True label x predicted class counts: k x k cells for the model's k classes (and any other
    value seen), zeros drawn, both axes in class-index order."""
    classes = sorted({int(c) for c in labels} | {int(v) for v in counts["label"]} | {int(v) for v in counts["pred"]})
    seen = {(int(r.label), int(r.pred)): int(r.documents) for r in counts.itertuples()}
    names = [labels.get(c, str(c)) for c in classes]
    frame = pd.DataFrame(
        [
            {"true": labels.get(t, str(t)), "predicted": labels.get(p, str(p)), "documents": seen.get((t, p), 0)}
            for t in classes
            for p in classes
        ]
    )
    base = alt.Chart(frame).encode(x=alt.X("predicted:N", sort=names), y=alt.Y("true:N", sort=names))
    cells = base.mark_rect().encode(color=alt.Color("documents:Q", scale=alt.Scale(scheme="greens")))
    text = base.mark_text(fontSize=13).encode(text="documents:Q")
    side = max(160, 40 * len(classes))
    return (cells + text).properties(width=side + 40, height=side, title="Confusion matrix")


def topk_explorer(
    top: pd.DataFrame, default_method: str, default_layer: int, min_docs: int, title: str, stat: str = "lift"
) -> alt.LayerChart:
    """Top-k words of one slice at a time, picked with a method menu, a layer slider, a predicted-
    class radio and a minimum-documents slider; the default view (main method, last layer, all
    reviews) reads without touching anything. Every bar carries its 95% interval.

    top: columns method, layer, group ('all' or a class name), word, mean_score, ci_low, ci_high,
    occurrences, documents; the top k of every method x layer x group (already cut at ``min_docs``).
    """
    layers = sorted(int(v) for v in top["layer"].unique())
    method = alt.param(
        name="pick_method",
        value=default_method,
        bind=alt.binding_select(options=sorted(top["method"].unique()), name="method "),
    )
    layer = alt.param(
        name="pick_layer",
        value=int(default_layer),
        bind=alt.binding_range(min=layers[0], max=layers[-1], step=1, name="layer "),
    )
    groups = ["all", *sorted(g for g in top["group"].unique() if g != "all")]
    group = alt.param(name="pick_class", value="all", bind=alt.binding_radio(options=groups, name="predicted class "))
    # Raising the bar hides rare words inside each slice's top k (the query already cut at min_docs).
    most = int(max(min_docs, top["documents"].max())) if len(top) else min_docs
    least = alt.param(
        name="pick_min",
        value=int(min_docs),
        bind=alt.binding_range(min=int(min_docs), max=most, step=1, name="minimum documents "),
    )
    base = (
        alt.Chart(top)
        .transform_filter(
            (alt.datum.method == method)
            & (alt.datum.layer == layer)
            & (alt.datum.group == group)
            & (alt.datum.documents >= least)
        )
        .transform_calculate(label="format(datum.mean_score, '.3f') + '  (' + datum.documents + ' docs)'")
        .encode(
            # op=max: layered charts union their sorts, which Vega allows only for min/max/count.
            y=alt.Y("word:N", sort=alt.EncodingSortField("mean_score", op="max", order="descending"), title=None),
            tooltip=[
                "method:N",
                "layer:O",
                "group:N",
                "word:N",
                alt.Tooltip("mean_score:Q", format=".4f"),
                *_interval_tooltip(),
            ],
        )
    )
    bars = base.mark_bar(color="#4c78a8").encode(x=alt.X("mean_score:Q", title=AXIS.get(stat, stat)))
    errors = base.mark_rule(color="#222222").encode(x="ci_low:Q", x2="ci_high:Q")
    labels = base.mark_text(align="left", dx=3, dy=-5, fontSize=9).encode(x="ci_high:Q", text="label:N")
    # The title names the slice on show, so a screenshot or an exported PNG says what it is. Above
    # min_docs the slider hides words of the top k ranked at min_docs, which is not `topk
    # --min-docs N` (a title saying "in >= N reviews" there promised that ranking): it says both.
    ranked = int(min_docs)
    shown = alt.ExprRef(
        expr=f"{json.dumps(title.translate(BIDI_CONTROLS))} + ': ' + pick_method + ', layer ' + pick_layer + ', '"
        " + (pick_class == 'all' ? 'all reviews' : 'predicted ' + pick_class)"
        f" + (pick_min <= {ranked} ? ', in >= ' + pick_min + ' reviews'"
        f" : ', ranked in >= {ranked} reviews, those in >= ' + pick_min + ' shown')"
    )
    return (
        alt.layer(bars, errors, labels)
        .add_params(method, layer, group, least)
        .properties(width=WIDTH, height=alt.Step(18), title=alt.TitleParams(shown))
    )


def contrast_bars(contrast: pd.DataFrame, positive: str, negative: str, title: str) -> alt.Chart:
    """Diverging bars: mean score in reviews predicted ``positive`` minus in those predicted
    ``negative``; words to the right weigh more in positive predictions.

    contrast: columns side ('positive' | 'negative'), word, difference, mean_pos, mean_neg,
    occurrences_pos, occurrences_neg.
    """
    order = contrast.sort_values("difference", ascending=False)["word"].tolist()
    # The legend names the classes from the data, never from an expression: a class name written
    # into one (a labelExpr) broke the chart on "if" or a name ending in a backslash and kept a
    # bidi override live (a model's id2label is its author's text).
    shown = {"positive": positive, "negative": negative if negative != positive else f"{negative} (other)"}
    contrast = contrast.assign(predicted=contrast["side"].map(shown))
    return (
        alt.Chart(contrast)
        .mark_bar()
        .encode(
            y=alt.Y("word:N", sort=order, title=None),
            x=alt.X("difference:Q", title=f"mean per review when predicted {positive} - when predicted {negative}"),
            color=alt.Color(
                "predicted:N",
                scale=alt.Scale(domain=[shown["positive"], shown["negative"]], range=["#2f7ebc", "#d6604d"]),
                legend=alt.Legend(title="weighs more when predicted"),
            ),
            tooltip=[
                "word:N",
                alt.Tooltip("difference:Q", format="+.4f"),
                alt.Tooltip("mean_pos:Q", format=".4f", title=_tooltip_title(f"mean score, predicted {positive}")),
                alt.Tooltip("mean_neg:Q", format=".4f", title=_tooltip_title(f"mean score, predicted {negative}")),
                "occurrences_pos:Q",
                "occurrences_neg:Q",
            ],
        )
        .properties(width=WIDTH, height=alt.Step(14), title=title)
    )


def agreement_histogram(agreement: pd.DataFrame, title: str) -> alt.FacetChart:
    """Per-document Spearman correlation between two methods, one histogram per method pair,
    with the median as a dashed rule.

    agreement: columns pair, bin_lo, bin_hi, documents, median_rho (pre-binned: one row per bin).
    """
    bars = (
        alt.Chart()
        .mark_bar(color="#72b7b2")
        .encode(
            x=alt.X("bin_lo:Q", bin="binned", scale=alt.Scale(domain=[-1, 1]), title="Spearman rho per review"),
            x2="bin_hi:Q",
            y=alt.Y("documents:Q", title="reviews"),
            tooltip=[
                "pair:N",
                alt.Tooltip("bin_lo:Q", format=".2f", title="from"),
                alt.Tooltip("bin_hi:Q", format=".2f", title="to"),
                "documents:Q",
            ],
        )
    )
    median = (
        alt.Chart()
        .mark_rule(color="#333", strokeDash=[4, 3])
        .encode(
            x=alt.X("max(median_rho):Q"), tooltip=[alt.Tooltip("max(median_rho):Q", format=".3f", title="median rho")]
        )
    )
    return (
        alt.layer(bars, median, data=agreement)
        .properties(width=220, height=150)
        .facet(column=alt.Column("pair:N", title=None))
        .properties(title=title)
    )


def vega_lite_version() -> str:
    """The Vega-Lite version of the installed Altair, as vl-convert names it (``v6_4``), from Altair's
    public ``SCHEMA_VERSION`` (``v6.4.1``): the inlined bundle must match the specs Altair writes."""
    major, minor = alt.SCHEMA_VERSION.lstrip("v").split(".")[:2]
    return f"v{major}_{minor}"
