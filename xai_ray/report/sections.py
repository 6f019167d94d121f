"""The report's sections: one builder per section, ``builder(ctx) -> Section | None``.

A builder returns None when the run lacks its data (no labels, a single method, a table that a
later version adds), so the report of any run is valid. A new section (head statistics,
faithfulness, nightly trends) is one more function here, its name in ``BUILDERS`` and in
``reports/default.yaml``; ``has_relation`` tells whether its view or table exists.
Builders run DuckDB aggregates (``sql/report_*.sql``) and hand small DataFrames to ``charts``;
text from the data reaches HTML only through ``html.escape`` (review text and facts through
``blocks.text_html``, which also shows control characters as their control pictures).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import pandas as pd

from xai_ray.config import ConfigError
from xai_ray.report import charts
from xai_ray.report.blocks import Fragment, Section, number, percent, text_html
from xai_ray.report.changes import since_last_night
from xai_ray.report.context import Context
from xai_ray.report.definition import SECTIONS
from xai_ray.report.faithfulness import faithfulness
from xai_ray.report.heads import heads

CURVE_WORDS = 4
MAX_CHART_ROWS = 4_500  # Altair refuses more than 5,000 rows per chart; stay clear of it
SHADES = 10  # highlight levels w0..w9 (n0..n9 below 0), styled in page.SHADE_CSS
SHADE_NOTE = (
    "Darker = closer to the review's largest score for that method (hover a word for its score); "
    "blue marks a signed method's words that speak against the explained class."
)
TAIL_CHARS = 300  # unscored text past max_length shown, at most, after a highlighted review


def summary(ctx: Context) -> Section:
    s, timings = ctx.summary, ctx.manifest.get("timings", {})
    mean_probs = [(f"Mean P({ctx.label(c.cls)})", number(c.mean_prob)) for c in ctx.classes().itertuples()]
    facts = [
        ("Run", ctx.run_id),
        ("Created", ctx.run["created_at"]),
        ("Model", ctx.run["model"]),
        ("Fingerprint", (ctx.run["model_fingerprint"] or "")[:16]),
        ("Data", ctx.run["data"]),
        ("Methods", ctx.run["methods"]),
        ("Layers", ctx.last_layer),
        ("Documents", s["n_docs"]),
        ("Labelled", s["n_labelled"]),
        ("Errors", s["n_errors"]),
        ("Truncated", s["n_truncated"]),
        ("Accuracy", percent(s["accuracy"])),
        *mean_probs,
        ("Mean tokens", number(s["mean_tokens"], ".1f")),
        ("Scoring + writing, s", timings.get("score_and_write_s")),
        ("Total, s", timings.get("total_s")),
        ("Docs/s", timings.get("docs_per_s")),
    ]
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{text_html(_fact(v))}</td></tr>" for k, v in facts)
    section = Section("summary", "Run summary", items=[Fragment(f"<table class='facts'>{rows}</table>")])
    confusion = ctx.query("confusion")
    if not confusion.empty:
        section.items.append(charts.confusion(confusion, ctx.labels))
    return section


def mean_probabilities(ctx: Context) -> str:
    """``Mean class probabilities: negative 0.48, positive 0.52`` (every class of the model)."""
    shown = ", ".join(f"{ctx.label(c.cls)} {number(c.mean_prob, '.2f')}" for c in ctx.classes().itertuples())
    return f"Mean class probabilities: {shown}"


def headline(ctx: Context) -> Section | None:
    top = ctx.topk_all()
    top = top[(top.method == ctx.main_method) & (top.layer == ctx.last_layer) & (top.group == "all")]
    if top.empty:
        return None
    s = ctx.summary
    subtitle = [
        mean_probabilities(ctx),
        f"Overall accuracy: {percent(s['accuracy'])} over {int(s['n_labelled'])} labelled reviews",
    ]
    title = f"Top {ctx.k} important words across all samples ({ctx.main_method}, layer {ctx.last_layer})"
    return Section(
        "headline",
        "Top words across all reviews",
        ctx.support_note() + ctx.lean_note(ctx.main_method, ctx.last_layer),
        [charts.topk_bar(top, title, subtitle, ctx.stat)],
    )


def explorer(ctx: Context) -> Section | None:
    top = ctx.topk_all()
    if top.empty:
        return None
    note = (
        f"Pick a method, layer and predicted class; top {ctx.k} words of each. {ctx.support_note()} "
        "The minimum-documents slider hides rarer words; bars are labelled with the mean and the reviews "
        "holding the word."
    )
    layers = sorted(top.layer.unique())
    per_layer = max(1, len(top) // len(layers))
    if len(top) > MAX_CHART_ROWS:  # a deep model with many methods: keep the deepest layers
        kept = layers[-max(1, MAX_CHART_ROWS // per_layer) :]
        top = top[top.layer.isin(kept)]
        note += f" Layers {kept[0]}-{kept[-1]} only, to keep the page small."
    note += ctx.lean_summary()
    return Section(
        "explorer",
        "Top words by method, layer and predicted class",
        note,
        [charts.topk_explorer(top, ctx.main_method, ctx.last_layer, ctx.min_docs, f"Top {ctx.k} words", ctx.stat)],
    )


def per_method(ctx: Context) -> Section | None:
    top = ctx.topk_all()
    top = top[(top.layer == ctx.last_layer) & (top.group == "all")]
    if top.method.nunique() < 2:
        return None  # the headline already shows the only method
    return Section(
        "per_method",
        "Top words per method",
        f"Layer {ctx.last_layer}; special tokens excluded. {ctx.support_note()}" + ctx.lean_note(layer=ctx.last_layer),
        [charts.topk_facets(top, "method", f"Top {ctx.k} words per method (layer {ctx.last_layer})", ctx.stat)],
    )


def per_class(ctx: Context) -> Section | None:
    top = ctx.topk_all()
    top = top[(top.method == ctx.main_method) & (top.layer == ctx.last_layer) & (top.group != "all")]
    if top.empty:
        return None
    top = top.rename(columns={"group": "predicted"})
    return Section(
        "per_class",
        "Top words per predicted class",
        ctx.support_note() + ctx.lean_note(ctx.main_method, ctx.last_layer),
        [
            charts.topk_facets(
                top,
                "predicted",
                f"Top {ctx.k} words per predicted class ({ctx.main_method}, layer {ctx.last_layer})",
                ctx.stat,
            )
        ],
    )


def contrast(ctx: Context) -> Section | None:
    if not ctx.binary:
        return None  # classes 0 and 1 of a k-class model are no opposites; per_class shows each class
    frame = ctx.query("report_contrast", method=ctx.main_method, layer=ctx.last_layer, k=ctx.k, **ctx.word_params())
    if frame.empty:
        return None  # one predicted class only, or no word common to both
    positive, negative = ctx.label(1), ctx.label(0)
    return Section(
        "contrast",
        f"Most {positive} vs most {negative} words",
        f"Mean score of a word in reviews predicted {positive} minus in reviews predicted {negative} "
        f"({ctx.main_method}, layer {ctx.last_layer}; words in at least {ctx.min_docs} reviews of each; "
        f"{ctx.stat} per review, averaged over reviews).",
        [charts.contrast_bars(frame, positive, negative, f"Words weighed more when predicted {positive} / {negative}")],
    )


def _example_title(ctx: Context, example) -> str:
    verdict = "correct" if example.correct else "wrong"
    return (
        f"Review {example.doc_id}: true {ctx.label(example.label)}, predicted {ctx.label(example.pred)} "
        f"({verdict}, P({ctx.label(example.pred)})={number(example.confidence, '.2f')})"
    )


def layers(ctx: Context) -> Section | None:
    examples = ctx.examples()
    if examples.empty:
        return None
    max_words = int(ctx.definition["examples"]["max_words"])
    items = []
    for example in examples.itertuples():
        words = ctx.query("layer_words", doc_id=example.doc_id)
        items.append(charts.layer_curves(_curves(words, ctx.main_method), _example_title(ctx, example)))
        shown = words[words.word_id < max_words]
        cut = f" (first {max_words} words)" if len(shown) < len(words) else ""
        items.append(charts.layer_heatmap(shown, f"Per-layer word scores, review {example.doc_id}{cut}"))
    both = {"raw", "rollout"} <= set(ctx.methods)  # the sentence compares the two
    return Section(
        "layers",
        "Per-layer [CLS] scores on example reviews",
        f"Methods: {', '.join(ctx.methods)}. "
        + ("Raw attention fades towards uniform in deep layers; rollout keeps the signal. " if both else "")
        + f"Curves follow the review's top words by {ctx.main_method} at the last layer.",
        items,
    )


def _curves(words: pd.DataFrame, main_method: str) -> pd.DataFrame:
    """The review's top words by the main method's last layer, followed through every layer."""
    last = words[(words.method == main_method) & (words.layer == words.layer.max())]
    top_ids = last.nlargest(CURVE_WORDS, "score")["word_id"]
    chosen = words[words.word_id.isin(top_ids)]  # none where the method has no row at the last layer
    return chosen.assign(word=chosen["word_id"].map("{:03d} ".format).astype(str) + chosen["word"].astype(str))


def highlights(ctx: Context) -> Section | None:
    examples = ctx.examples()
    spec = ctx.definition["highlight"]
    methods = [m for m in spec["methods"] if m in ctx.methods] or [ctx.main_method]
    layer = ctx.last_layer if spec["layer"] == "last" else int(spec["layer"])
    if ctx.last_layer and layer > ctx.last_layer:  # every example read "not scored at this layer"
        raise ConfigError(
            f"report definition: highlight.layer is {layer}, but run {ctx.run_id!r}'s model has {ctx.last_layer} "
            "layers; give a layer from 1 to that, or 'last'"
        )
    if examples.empty:
        return None
    items = []
    for example in examples.itertuples():
        words = ctx.query("layer_words", doc_id=example.doc_id)
        columns = []
        for method in methods:
            mine = words[(words.method == method) & (words.layer == layer)].sort_values("word_id")
            body = highlight_html(example.text or "", mine) if not mine.empty else "<em>not scored at this layer</em>"
            columns.append(f"<div class='hl'><h4>{html.escape(method)}, layer {layer}</h4><p>{body}</p></div>")
        items.append(
            Fragment(
                f"<div class='example'><h3>{text_html(_example_title(ctx, example))}</h3>"
                f"<div class='hl-grid'>{''.join(columns)}</div></div>"
            )
        )
    return Section(
        "highlights",
        "Example reviews, each word shaded by its score",
        f"{SHADE_NOTE} Grey text lies past max_length and was not scored.",
        items,
    )


def highlight_html(text: str, words: pd.DataFrame) -> str:
    """The review with each scored word in a shaded <span>; every piece of it escaped.

    words: columns word, score of one method and layer, in word order. Words were cut from the
    review by the tokenizer's offsets, so they are found in order and the gaps (spaces, line
    breaks) come from the text itself; a word not found is shown on its own.
    """
    top = words["score"].abs().max()  # a signed method's evidence against the class is as large
    pieces, cursor = [], 0
    for word, score in zip(words["word"], words["score"]):
        word = word or ""
        at = text.find(word, cursor) if word else -1
        if at >= 0:
            pieces.append(text_html(text[cursor:at]))
            cursor = at + len(word)
        else:
            pieces.append(" ")
        level = 0 if pd.isna(score) or not top > 0 else min(SHADES - 1, int(abs(score) / top * SHADES))
        shade = "n" if score < 0 else "w"  # against the explained class: its own colour (SHADE_CSS)
        pieces.append(f"<span class='{shade}{level}' title='{number(score, '.4f')}'>{text_html(word)}</span>")
    rest = text[cursor:]
    if rest.strip():
        more = "…" if len(rest) > TAIL_CHARS else ""
        pieces.append(f"<span class='cut'>{text_html(rest[:TAIL_CHARS])}{more}</span>")
    return "".join(pieces)


def agreement(ctx: Context) -> Section | None:
    if len(ctx.methods) < 2:
        return None
    spec = ctx.definition["agreement"]
    max_docs, n_docs = int(spec["max_docs"]), int(ctx.summary["n_docs"])
    frame = ctx.query("report_agreement", layer=ctx.last_layer, bins=int(spec["bins"]), max_docs=max_docs)
    if frame.empty:
        return None
    frame = frame.assign(pair=frame["method_a"] + " vs " + frame["method_b"])
    pairs = "; ".join(
        f"{p.pair}: median {p.median_rho:.2f} (IQR {p.q1_rho:.2f} to {p.q3_rho:.2f}, {p.n_docs} reviews)"
        for p in frame.drop_duplicates("pair").itertuples()
    )
    sampled = f" Reviews: a fixed sample of {max_docs} of {n_docs}." if n_docs > max_docs else ""
    return Section(
        "agreement",
        "Agreement between methods",
        f"Spearman rank correlation of word scores per review, layer {ctx.last_layer}. {pairs}.{sampled}",
        [charts.agreement_histogram(frame, f"Per-review rank agreement between methods (layer {ctx.last_layer})")],
    )


def _fact(value) -> str:
    """Counts come back as floats from a one-row DataFrame; show them as the integers they are."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "n/a"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


BUILDERS: dict[str, Callable[[Context], Section | None]] = {
    "summary": summary,
    "headline": headline,
    "explorer": explorer,
    "per_method": per_method,
    "per_class": per_class,
    "contrast": contrast,
    "layers": layers,
    "highlights": highlights,
    "agreement": agreement,
    "faithfulness": faithfulness,
    "heads": heads,
    "since_last_night": since_last_night,
}
assert tuple(BUILDERS) == SECTIONS, "report.definition.SECTIONS names every builder, in order"
