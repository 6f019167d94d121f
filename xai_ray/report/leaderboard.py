"""The faithfulness leaderboard: every method of a run's faithfulness table ranked by
comprehensiveness AOPC (DeYoung et al. 2020, ERASER), with 95% intervals, the random floor, and
what each method cost per review.

Rows come from ``sql/report_leaderboard.sql`` (any method name, layered or not; a layered
method's best and last layer), their intervals from the rule of every table (``query.intervals``,
``with_intervals``); costs from the manifest's ``timings.actor_seconds``, which the
scoring actors fill per method under the method's own name, plus the backward pass a gradient
method reads (``scoring.gradient_pass``), and the evaluation's input x gradient under ``gradient``. Nothing here knows the list of methods, so methods added later
rank as they come.
"""

from __future__ import annotations

import html

import pandas as pd

from xai_ray.query.intervals import RULE, t_interval
from xai_ray.query.limits import QueryError
from xai_ray.report.blocks import number
from xai_ray.scoring.faithfulness import GRADIENT, RANDOM
from xai_ray.scoring.gradient_pass import pass_seconds_key

METRIC = "comprehensiveness_aopc"
PLAUSIBLE = "auprc"  # agreement with human rationales (scoring.plausibility), when the run has them
PARAMS = {"metric": METRIC, "floor": RANDOM}
# Shown beside the ranking metric, when the run has them: each entry's mean [interval].
BESIDE = ("comprehensiveness_aopc", "sufficiency_aopc", PLAUSIBLE)
NAMES = {
    "comprehensiveness_aopc": "comprehensiveness AOPC",
    "sufficiency_aopc": "sufficiency AOPC (lower is better)",
    PLAUSIBLE: "AUPRC against human rationales",
}


def params(metric: str) -> dict:
    return {"metric": metric, "floor": RANDOM}


BASELINE = "baseline: predicted class"  # report_leaderboard.sql's which of a baseline beside its method
# Without a leaderboard of its own (no --evaluate, no rationales), a run leads with the first of these
# it has: the gradient-weighted attention methods agreed best with human rationales and with a sentiment
# lexicon, and ranked above plain attention in comprehensiveness (docs/faithfulness.md), so they lead.
PRIOR = (
    "grad_rollout",
    "attn_x_grad",
    "integrated_gradients",
    "norm_rollout",  # attention weighted by the size of what it moves (Kobayashi et al. 2020)
    "globenc",  # the same through the residual and both layer norms (Modarressi et al. 2022)
    "norm",
    "rollout",
    "raw",
    "flow",
    "lrp",  # conservative relevance propagation (Ali et al. 2022)
    "input_x_gradient",
)


def lead_method(con, run_id: str, methods: list[str], layer: int | None = None) -> tuple[str, str]:
    """(the method a run's report, ``topk`` and nightly lead with, why): the best entry of the run's
    own leaderboard among its stored methods (comprehensiveness AOPC, else AUPRC against rationales)
    at the layer they show, the last (a method's best layer, picked on the same documents, is not
    what they show), else the first of ``PRIOR`` the run has. Rollout and the others stay one choice
    away. ``layer``: the layer asked for (``topk --layer``), which only the methods stored there
    can show (lrp, integrated gradients and input x gradient: the last layer only)."""
    from xai_ray.query.connection import run_named

    among = ""
    if layer is not None:
        there = stored_at(con, run_id, methods, int(layer))
        among = f" (among the methods stored at layer {layer})" if there and len(there) < len(methods) else ""
        methods = there or methods
    baseline_only = _explains_another_class(con, run_id)
    for metric in (METRIC, PLAUSIBLE):
        board = run_named(con, "report_leaderboard", run_id=run_id, **params(metric))
        # a baseline row stands for a stored method only where the method has no rows of its own,
        # and never for a stored input_x_gradient of another class (runs evaluated before it was
        # evaluated as itself hold the baseline's row only)
        stands_in = board["method"].eq(GRADIENT) & board["layer"].isna() & baseline_only
        board = board[board["method"].isin(methods) & ~board["which"].isin(["best layer", BASELINE]) & ~stands_in]
        if not board.empty:
            best = board.sort_values(["mean", "method"], ascending=[False, True]).iloc[0]
            why = f"ranked first at its last layer by {NAMES[metric]} on this run's leaderboard{among}"
            return str(best["method"]), why
    for name in PRIOR:
        if name in methods:
            return name, "the default order (the run has no leaderboard: see --evaluate)"
    return methods[0], "the run's first method"


def _explains_another_class(con, run_id: str) -> bool:
    """Whether the run's class-specific methods explain another class than the prediction
    (``target`` label or a class, from its manifest; False where the store cannot say)."""
    import json

    import duckdb

    from xai_ray.query.connection import pick_run

    try:
        manifest = json.loads(pick_run(con, run_id).get("manifest") or "{}")
    except (duckdb.Error, QueryError, ValueError):  # a connection without the runs view (a bare table)
        return False
    target = (manifest.get("config") or {}).get("target")  # 0 is a class: not "or"
    return target is not None and target != "pred"


def stored_at(con, run_id: str, methods: list[str], layer: int) -> list[str]:
    """Those of ``methods`` the run stores at ``layer``, by its manifest's slices (a layout-1 run,
    whose manifest lists none, by its words)."""
    import json

    from xai_ray.query.connection import pick_run
    from xai_ray.query.top_words import holds_slice
    from xai_ray.query.views import manifest_slices

    run = pick_run(con, run_id)
    manifest = json.loads(run.get("manifest") or "{}")
    if "store_layout" not in manifest:  # layout 1 lists no slices: asked of its words, one row at most each
        return [m for m in methods if holds_slice(con, run_id, m, layer)]
    slices = manifest_slices(manifest)
    listed = {m for m, _ in slices}
    return [m for m in methods if m not in listed or (m, layer) in slices]


# Methods timed under another name: the evaluation's own input x gradient is one backward per batch.
TIMED_AS = {GRADIENT: "gradient"}
FORWARD = "forward"  # the capture forward every attention method reads, timed once per review


def with_intervals(board: pd.DataFrame, metric: str = METRIC) -> pd.DataFrame:
    """The query's rows plus ``lo``/``hi`` (of the mean, over ``n_docs`` reviews) and
    ``gain_lo``/``gain_hi`` (of the paired gain over the floor, over ``n_paired``), by the one rule."""
    lo, hi = t_interval(board["mean"], board["sd"], board["n_docs"])
    gain_lo, gain_hi = t_interval(board["gain"], board["gain_sd"], board["n_paired"])
    out = board.assign(lo=lo, hi=hi, gain_lo=gain_lo, gain_hi=gain_hi)
    out.attrs["metric"] = metric  # what the rows are ranked by
    return out


def with_beside(board: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The board plus one text column per ``BESIDE`` metric the run has (other than the one it is
    ranked by): that entry's 'mean [lo, hi]' from the faithfulness summary (the same rule), AUPRC
    also as a multiple of the random ranking's; ``attrs["beside"]`` lists them."""
    shown = [m for m in BESIDE if m != board.attrs.get("metric") and m in set(summary["metric"])]
    frame = board.copy()
    for metric in shown:
        mine = summary[summary["metric"] == metric]
        floor = mine[mine["method"] == RANDOM]["mean"]
        cells = []
        for r in frame.itertuples():
            of_method = mine[mine["method"] == r.method]
            found = of_method[of_method["layer"].isna() if pd.isna(r.layer) else of_method["layer"] == r.layer]
            if found.empty and len(of_method) == 1:  # a method without layers, which one stage keeps at
                found = of_method  # the last layer (plausibility: its stored words), the other at none
            if found.empty:
                cells.append("n/a")
                continue
            row = found.iloc[0]
            cell = f"{row['mean']:.3f} [{number(row['lo'], '.3f')}, {number(row['hi'], '.3f')}]"
            if metric == PLAUSIBLE and len(floor) and floor.iloc[0] > 0 and r.method != RANDOM:
                cell += f" ({row['mean'] / floor.iloc[0]:.2f}x random)"
            cells.append(cell)
        frame[metric] = cells
    frame.attrs = {**board.attrs, "beside": shown}
    return frame


def board_with_costs(board: pd.DataFrame, manifest: dict, n_docs: int) -> pd.DataFrame:
    """The leaderboard rows plus ``entry`` (a label per row), ``seconds`` (actor-seconds per review
    of the method; NaN where the manifest has no timing for it) and ``x_forward`` (that over the
    capture forward's seconds per review).

    A stored method ran on every review this attempt scored (``resumed.docs_scored_now`` of a
    resumed run); the evaluation's gradient on the evaluated share of them."""
    spent = manifest.get("timings", {}).get("actor_seconds", {}) or {}
    scored = int((manifest.get("resumed") or {}).get("docs_scored_now") or n_docs or 0)
    evaluated = int(board["n_docs"].max()) if len(board) else 0
    evaluated_now = evaluated * scored / n_docs if n_docs else 0  # a resumed run timed only its part
    forward = spent[FORWARD] / scored if spent.get(FORWARD) and scored else None

    def seconds(method: str) -> float | None:
        if method in spent and scored:
            return (spent[method] + spent.get(pass_seconds_key(method), 0.0)) / scored
        alias = TIMED_AS.get(method)
        if alias in spent and evaluated_now:
            return spent[alias] / evaluated_now
        return None

    frame = board.copy()
    frame["entry"] = [_entry(r.method, r.layer, r.which) for r in frame.itertuples()]
    frame["seconds"] = pd.array([seconds(m) for m in frame["method"]], dtype="Float64").astype(float)
    frame["x_forward"] = frame["seconds"] / forward if forward else float("nan")
    frame.attrs["forward_seconds"] = forward
    return frame


def _entry(method: str, layer, which: str) -> str:
    if pd.isna(layer):
        return f"{method} ({BASELINE})" if which == BASELINE else method
    short = {"best and last layer": "best, last", "best layer": "best", "last layer": "last"}.get(which, which)
    return f"{method}, layer {int(layer)} ({short})"


def note(board: pd.DataFrame) -> str:
    """How to read the leaderboard, in a few sentences, with the run's own numbers."""
    forward = board.attrs.get("forward_seconds")
    floor = board[board["is_floor"]]
    above = board[~board["is_floor"] & (board["gain_lo"] > 0)]["entry"].tolist()
    parts = [
        (
            "Every method of the evaluation ranked by comprehensiveness AOPC (the drop in the predicted "
            "class's probability when the method's top tokens are removed, averaged over the shares; higher = "
            "more faithful)."
            if board.attrs.get("metric", METRIC) == METRIC
            else "Every method ranked by AUPRC against the human rationales (how well its scores single out "
            "the words people marked; higher = more plausible)."
        )
        + " A method with layers appears at its best layer and at its last layer; the best "
        "layer is picked on these same reviews, so its mean is optimistic.",
        f"Intervals: {RULE} (mean +- t(0.975, reviews - 1) x sd / sqrt(reviews)).",
    ]
    if not floor.empty:
        row = floor.iloc[0]
        parts.append(
            f"Grey band: the random ranking's interval ({number(row['lo'], '.3f')} to {number(row['hi'], '.3f')}), "
            "the floor. Above it on the same reviews (paired difference's interval above 0): "
            + (", ".join(above) if above else "none")
            + "."
        )
    if forward:
        parts.append(
            f"Cost: actor-seconds per review of the method itself, beside the capture forward's "
            f"{number(forward, '.4f')} s that every attention method shares; random is not timed."
        )
    return " ".join(parts)


def table(board: pd.DataFrame) -> str:
    """The leaderboard as an HTML table: rank, entry, mean [lo, hi], gain over the floor, reviews, cost."""
    rows = []
    for r in board.itertuples():
        gain = "" if pd.isna(r.gain) else f"{r.gain:+.3f} [{number(r.gain_lo, '+.3f')}, {number(r.gain_hi, '+.3f')}]"
        cost = "n/a" if pd.isna(r.seconds) else f"{r.seconds:.4f}"
        ratio = "" if pd.isna(r.x_forward) else f"{r.x_forward:.2f}x"
        style = " style='font-style:italic'" if r.is_floor else ""
        cells = [
            str(r.rank),
            html.escape(r.entry),
            html.escape(f"{r.mean:.3f} [{number(r.lo, '.3f')}, {number(r.hi, '.3f')}]"),
            html.escape(gain),
            str(int(r.n_docs)),
            cost,
            ratio,
            *(html.escape(getattr(r, m)) for m in board.attrs.get("beside", ())),
        ]
        rows.append(f"<tr{style}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "rank",
            "method",
            f"{NAMES[board.attrs.get('metric', METRIC)]} [95% t interval]",
            "minus random, same reviews [95% t interval]",
            "reviews",
            "seconds per review",
            "x capture forward",
            *(f"{NAMES[m]} [95% t interval]" for m in board.attrs.get("beside", ())),
        )
    )
    return f"<table class='faithfulness leaderboard'><tr>{head}</tr>{''.join(rows)}</table>"
