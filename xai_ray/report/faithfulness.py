"""The report's faithfulness section: first the leaderboard (``report.leaderboard``: every method
ranked by comprehensiveness AOPC, the random floor as a band, cost per review), then per method
(and layer) the mean of every metric, next to the input x gradient baseline and the random floor.
Every interval is the one rule of the report's tables (``query.intervals``: a 95% t interval over
reviews).

The per-document values come from ``sql/report_faithfulness.sql``; their small summary is kept
beside the run by the pipeline's aggregate stage (``report.aggregates``), so building the report
stays flat as runs grow.
"""

from __future__ import annotations

import html

import pandas as pd

from xai_ray.query.intervals import RULE, SUMMARY, SUMMARY_PARAMS, faithfulness_summary
from xai_ray.report import charts_faithfulness as charts
from xai_ray.report import leaderboard
from xai_ray.report.blocks import Fragment, Section, number
from xai_ray.report.context import Context
from xai_ray.scoring.faithfulness import CURVES, GRADIENT, RANDOM
from xai_ray.store.aggregates import read_aggregate

HEADLINE = ["comprehensiveness_aopc", "sufficiency_aopc", "spearman_loo", "spearman_grad"]
AGREEMENT = ["auprc", "token_f1@rationale", "iou_f1@rationale"]  # against human rationales (--set rationales=)
BETTER = {
    "comprehensiveness_aopc": "higher",
    "sufficiency_aopc": "lower",
    "spearman_loo": "higher",
    "spearman_grad": "higher",
    **dict.fromkeys(AGREEMENT, "higher"),
}


BASELINE_ENTRY = f"{GRADIENT} ({leaderboard.BASELINE})"  # the evaluation's, beside a stored one of another class


def summary_of(ctx: Context) -> pd.DataFrame:
    """The faithfulness summary of the run: kept beside it, else computed and cached for keeping."""
    key = (SUMMARY, tuple(sorted(SUMMARY_PARAMS.items())))
    if key in ctx.cache:
        return ctx.cache[key]
    kept = read_aggregate(ctx.store, ctx.run_id, SUMMARY, SUMMARY_PARAMS) if ctx.store else None
    summary = kept if kept is not None else faithfulness_summary(ctx.query("report_faithfulness"))
    if not summary.empty:  # a run without --evaluate keeps nothing
        ctx.cache[key] = summary
    return summary


def order_methods(methods: list[str], run_methods: list[str]) -> list[str]:
    """The run's methods in its order, then the gradient baseline, then the floor (a stored
    input_x_gradient of the predicted class is evaluated once, as the baseline, and listed there;
    of another class it keeps its place, its baseline named apart: ``baseline_apart``)."""
    found, baselines = set(methods), (GRADIENT, BASELINE_ENTRY, RANDOM)
    return (
        [m for m in run_methods if m in found and m not in baselines]
        + [m for m in baselines if m in found]
        + sorted(found - set(run_methods) - set(baselines))
    )


def baseline_apart(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with the evaluation's input x gradient of the predicted class named apart
    (``BASELINE_ENTRY``) where the run's own input_x_gradient, of another class, holds the same
    metrics at its layer: the table, the charts and the verdict counted the two as one method."""
    grad = summary["method"] == GRADIENT
    layered = set(summary.loc[grad & summary["layer"].notna(), "metric"])
    bare = grad & summary["layer"].isna()
    if not (bare & summary["metric"].isin(layered)).any():
        return summary
    return summary.assign(method=summary["method"].where(~bare, BASELINE_ENTRY))


def faithfulness(ctx: Context) -> Section | None:
    summary = baseline_apart(summary_of(ctx))
    if summary.empty:
        return None  # the run was not evaluated (no --evaluate)
    methods = order_methods(summary["method"].unique().tolist(), ctx.methods)
    n_docs = int(summary["n_docs"].max())
    held = set(summary["metric"])
    headline = [m for m in HEADLINE + AGREEMENT if m in held]  # a run with rationales only: agreement alone
    perturbed = any(m in held for m in HEADLINE)
    items = _leaderboard(ctx)
    title = "Faithfulness per layer" if perturbed else "Agreement with human rationales per layer"
    items.append(charts.by_layer(summary, headline, f"{title}, mean and {RULE} ({n_docs} reviews)"))
    curves = _curves(summary, ctx.last_layer)
    if not curves.empty:
        items.append(
            charts.by_fraction(
                curves,
                list(CURVES),
                f"Drop in predicted-class probability by share of tokens (attention methods at layer {ctx.last_layer})",
            )
        )
    items.append(Fragment(_table(summary, methods, headline)))
    shares = ", ".join(f"{f:.0%}" for f in sorted(curves["fraction"].unique())) if not curves.empty else "-"
    perturbation = (
        "Comprehensiveness: drop in the predicted class's probability when a method's top-ranked tokens "
        f"({shares} of a review's tokens) are removed (higher = more faithful); sufficiency: the drop when only they are "
        "kept (lower = more faithful); AOPC = mean over the shares. spearman_loo / spearman_grad: rank "
        "correlation of the token scores with leave-one-out importance (token replaced by the mask token) "
        "and with input x gradient (higher = agrees more). Dashed rules: the baselines, input x gradient "
        "and a seeded random ranking (the floor), shaded by their 95% interval. "
    )
    agreement = (
        "auprc: average precision of a method's whitespace-token scores against the human rationale; "
        "token_f1@rationale / iou_f1@rationale: F1 of its top tokens, as many as the rationale holds, by token "
        "and by span (IOU >= 0.5), as ERASER defines them (higher = agrees more with people; dashed rule: the "
        "seeded random ranking). "
    )
    note = (
        (perturbation if perturbed else "")
        + (agreement if any(m in held for m in AGREEMENT) else "")
        + f"Intervals: {RULE} (mean +- t(0.975, reviews - 1) x sd / sqrt(reviews)). "
        + _verdict(summary, ctx.last_layer, methods, headline)
        + _cost(ctx, n_docs)
    )
    name = "Faithfulness of each method" if perturbed else "Agreement of each method with human rationales"
    return Section("faithfulness", name, note, items)


def _leaderboard(ctx: Context) -> list:
    """The leaderboard's chart, table and reading note (nothing when no method has the metric)."""
    metric = leaderboard.METRIC
    board = ctx.query("report_leaderboard", **leaderboard.PARAMS)
    if board.empty:  # a run measured against rationales only ranks by agreement with people
        metric = leaderboard.PLAUSIBLE
        board = ctx.query("report_leaderboard", **leaderboard.params(metric))
    if board.empty:
        return []
    board = leaderboard.board_with_costs(
        leaderboard.with_intervals(board, metric), ctx.manifest, int(ctx.summary["n_docs"] or 0)
    )
    board = leaderboard.with_beside(board, summary_of(ctx))
    reviews = int(board["n_docs"].max())
    ranked_by = leaderboard.NAMES[board.attrs["metric"]]
    title = f"Leaderboard: {ranked_by} with {RULE}, cost per review ({reviews} reviews)"
    # the lead method's top words leaning against its predictions is said beside its rank
    note = leaderboard.note(board) + ctx.lean_note(ctx.main_method, ctx.last_layer)
    return [
        charts.leaderboard(board, title, leaderboard.NAMES[metric]),
        Fragment(f"<p class='note'>{html.escape(note)}</p>"),
        Fragment(leaderboard.table(board)),
    ]


def _cost(ctx: Context, n_docs: int) -> str:
    """The evaluation's actor seconds per review (gradient + perturbed forwards), from the manifest."""
    seconds = ctx.manifest.get("timings", {}).get("actor_seconds", {})
    spent = seconds.get("evaluate", 0.0) + seconds.get("gradient", 0.0)
    return f" Cost: {spent / max(n_docs, 1):.2f} actor-seconds per review." if spent else ""


def _curves(summary: pd.DataFrame, last_layer: int) -> pd.DataFrame:
    """Per-fraction rows at the last layer and of the baselines, with the share split out."""
    split = summary["metric"].str.extract(r"^(?P<curve>\w+)@(?P<fraction>[0-9.]+)$")
    at_last = summary["layer"].isna() | (summary["layer"] == last_layer)
    chosen = split["curve"].isin(CURVES) & at_last  # not plausibility's token_f1@f and iou_f1@f
    frame = summary[chosen].assign(metric=split["curve"][chosen], fraction=split["fraction"][chosen].astype(float))
    return frame


def _verdict(summary: pd.DataFrame, last_layer: int, methods: list[str], headline: list[str]) -> str:
    """Which methods clear the random floor at the last layer: interval beyond the floor's."""
    floor = summary[summary["method"] == RANDOM].set_index("metric")
    cleared = []
    for method in methods:
        if method == RANDOM:
            continue
        mine = summary[(summary["method"] == method) & (summary["layer"].isna() | (summary["layer"] == last_layer))]
        wins = [
            row.metric
            for row in mine.itertuples()
            if row.metric in headline
            and row.metric in floor.index
            and _beats(row, floor.loc[row.metric], BETTER[row.metric])
        ]
        cleared.append(f"{method}: {len(wins)} of {len(mine[mine.metric.isin(headline)])}")
    if floor.empty or not cleared:
        return ""
    return (
        f"Headline metrics whose interval clears the random floor's (attention methods at layer {last_layer}): "
        + "; ".join(cleared)
        + "."
    )


def _beats(row, floor, better: str) -> bool:
    return bool(row.lo > floor["hi"]) if better == "higher" else bool(row.hi < floor["lo"])


def _table(summary: pd.DataFrame, methods: list[str], headline: list[str]) -> str:
    """Every (method, layer) x headline metric as 'mean [lo, hi]'; the floor's row in italics."""
    head = "".join(f"<th>{html.escape(m)} ({BETTER[m]} is better)</th>" for m in headline)
    rows = []
    for method in methods:
        mine = summary[summary["method"] == method]
        for layer in sorted(mine["layer"].dropna().unique()) or [None]:
            cells = mine[mine["layer"].isna()] if layer is None else mine[mine["layer"] == layer]
            by_metric = cells.set_index("metric")
            values = "".join(f"<td>{_cell(by_metric, m)}</td>" for m in headline)
            style = " style='font-style:italic'" if method == RANDOM else ""
            where = "" if layer is None else str(int(layer))
            rows.append(f"<tr{style}><td>{html.escape(method)}</td><td>{where}</td>{values}</tr>")
    caption = f"<caption>mean [{RULE}]</caption>"
    return f"<table class='faithfulness'>{caption}<tr><th>method</th><th>layer</th>{head}</tr>{''.join(rows)}</table>"


def _cell(by_metric: pd.DataFrame, metric: str) -> str:
    if metric not in by_metric.index:
        return "n/a"
    row = by_metric.loc[metric]
    return html.escape(f"{number(row['mean'], '.3f')} [{number(row['lo'], '.3f')}, {number(row['hi'], '.3f')}]")
