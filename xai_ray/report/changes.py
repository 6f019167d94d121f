"""The nightly report's "since last night" section: what tonight's documents changed.

The nightly job (``xai_ray.ops.nightly``) reports on the union of its runs (``query.open_union``)
and hands this section the union as it stood the night before (``ctx.extra["nightly"]``):
``then`` (an open connection, None on the first night), ``then_label``, ``tonight_run`` (the run
published tonight, None when nothing was new), ``date`` and ``previous_date``. Both states are
ranked with the report's own method, layer, k, statistic and minimum documents, so a word enters or leaves the
top-k because of the documents, never because a threshold moved.

This module imports ``report.sections`` lazily: ``report.sections`` registers the builder below.
"""

from __future__ import annotations

import html

import pandas as pd

from xai_ray.query.connection import run_named
from xai_ray.report.blocks import Fragment, Section, number, percent

DEPTH = 5  # rank both nights' words down to k * DEPTH, so a word that left shows where it went
NEW_SHOWN = 20  # new documents listed by id


def since_last_night(ctx):
    """Builder: None unless the report is a nightly one."""

    night = ctx.extra.get("nightly")
    if not night:
        return None
    then_con = night.get("then")
    then = run_named(then_con, "summary", run_id=night["then_label"]).iloc[0].to_dict() if then_con else None
    if then is not None:  # each class's mean probability last night, beside tonight's (ctx.classes)
        then["classes"] = run_named(then_con, "class_summary", run_id=night["then_label"])
    tonight = night.get("tonight_run")
    new = run_named(ctx.con, "nightly_new_docs", run_id=ctx.run_id, source_run_id=tonight or "")
    then_ids = set(run_named(then_con, "nightly_doc_ids", run_id=night["then_label"]).doc_id) if then_con else set()
    items = [Fragment(_facts_html(ctx, night, then, new, then_ids))]
    if then_con is not None:
        depth = ctx.k * DEPTH
        now_top = run_named(
            ctx.con,
            "topk",
            run_id=ctx.run_id,
            method=ctx.main_method,
            layer=ctx.last_layer,
            k=depth,
            **ctx.word_params(),
        )
        then_top = run_named(
            then_con,
            "topk",
            run_id=night["then_label"],
            method=ctx.main_method,
            layer=ctx.last_layer,
            k=depth,
            **ctx.word_params(),
        )
        changes = rank_changes(then_top, now_top, ctx.k)
        items.append(Fragment(_changes_html(changes, ctx.k, depth)))
        if not changes.empty:
            items.append(
                rank_chart(
                    changes,
                    depth,
                    f"Top {ctx.k} words, last night and tonight ({ctx.main_method}, layer {ctx.last_layer})",
                )
            )
    if not new.empty:
        items.append(Fragment(_new_docs_html(ctx, new, then_ids)))
    note = (
        f"Tonight ({night['date']}) against last night ({night.get('previous_date') or 'none: first night'}): "
        f"the report covers every document the nightly job has scored with this model and these options, each "
        f"in its latest version. Top words: {ctx.main_method}, layer {ctx.last_layer}, ranked by mean "
        f"{ctx.stat} per review among words in at least {ctx.min_docs} reviews, the same threshold for both "
        "nights."
    )
    return Section("since_last_night", "Since last night", note, items)


def rank_changes(then: pd.DataFrame, now: pd.DataFrame, k: int) -> pd.DataFrame:
    """Words in either night's top ``k``: ranks then and now (NaN: below the ranked depth) and
    a status: entered, left, up, down or same. Inputs: ``topk`` frames (rank, word, mean_score)."""
    merged = pd.merge(
        then[["word", "rank", "mean_score"]],
        now[["word", "rank", "mean_score"]],
        on="word",
        how="outer",
        suffixes=("_then", "_now"),
    )
    in_then, in_now = merged["rank_then"] <= k, merged["rank_now"] <= k
    merged = merged[in_then | in_now].copy()
    in_then, in_now = merged["rank_then"] <= k, merged["rank_now"] <= k
    merged["status"] = "same"
    merged.loc[in_now & ~in_then, "status"] = "entered"
    merged.loc[in_then & ~in_now, "status"] = "left"
    both = in_then & in_now
    merged.loc[both & (merged["rank_now"] < merged["rank_then"]), "status"] = "up"
    merged.loc[both & (merged["rank_now"] > merged["rank_then"]), "status"] = "down"
    order = merged["rank_now"].where(in_now, k + merged["rank_then"])
    return merged.assign(_order=order).sort_values(["_order", "word"]).drop(columns="_order").reset_index(drop=True)


def rank_chart(changes: pd.DataFrame, depth: int, title: str):
    """A slope chart: each word's rank last night and tonight (rank 1 on top)."""
    import altair as alt

    rows = []
    for row in changes.itertuples():
        for when, rank in (("last night", row.rank_then), ("tonight", row.rank_now)):
            if pd.notna(rank):
                rows.append({"word": row.word, "when": when, "rank": int(rank), "status": row.status})
    data = pd.DataFrame(rows)
    colour = alt.Color(
        "status:N",
        scale=alt.Scale(
            domain=["entered", "left", "up", "down", "same"],
            range=["#2ca02c", "#d62728", "#1f77b4", "#ff7f0e", "#999999"],
        ),
    )
    deepest = int(data["rank"].max()) if len(data) else depth
    y = alt.Y("rank:Q", scale=alt.Scale(reverse=True, domain=[1, deepest]), title="rank")
    x = alt.X("when:N", sort=["last night", "tonight"], title=None)
    base = alt.Chart(data)
    lines = base.mark_line(opacity=0.6).encode(x=x, y=y, color=colour, detail="word:N")
    points = base.mark_point(filled=True).encode(x=x, y=y, color=colour, tooltip=["word", "when", "rank", "status"])
    labels = (
        base.transform_filter(alt.datum.when == "tonight")
        .mark_text(align="left", dx=6)
        .encode(x=x, y=y, text="word:N", color=colour)
    )
    return (lines + points + labels).properties(title=title, width=260, height=min(900, max(300, 16 * deepest)))


def _facts_html(ctx, night: dict, then: dict | None, new: pd.DataFrame, then_ids: set) -> str:

    now = ctx.summary
    labelled = new.dropna(subset=["label"])
    new_accuracy = (labelled["label"] == labelled["pred"]).mean() if len(labelled) else None
    replaced = int(new["doc_id"].isin(then_ids).sum())
    facts = [
        ("Night", night["date"]),
        ("Last night", night.get("previous_date") or "none (first night)"),
        ("Documents last night", _int(then["n_docs"]) if then else "0"),
        ("Documents tonight", _int(now["n_docs"])),
        ("Scored tonight", f"{len(new)} ({len(new) - replaced} new, {replaced} with changed text)"),
        ("Accuracy last night", percent(then["accuracy"]) if then else "n/a"),
        ("Accuracy tonight", percent(now["accuracy"])),
        ("Accuracy of tonight's documents", percent(new_accuracy)),
    ]
    before = dict(zip(then["classes"]["class"], then["classes"]["mean_prob"])) if then else {}
    for row in ctx.classes().itertuples():
        was = number(before[row.cls]) if row.cls in before else "n/a"
        facts.append((f"Mean P({ctx.label(row.cls)}) last night / tonight", f"{was} / {number(row.mean_prob)}"))
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts)
    return f"<table class='facts since'>{rows}</table>"


def _int(value) -> str:
    return "n/a" if value is None or pd.isna(value) else str(int(value))


def _rank(value, depth: int) -> str:
    return f"below {depth}" if pd.isna(value) else str(int(value))


def _changes_html(changes: pd.DataFrame, k: int, depth: int) -> str:
    if changes.empty:
        return "<p class='note'>No word reaches the top-k on either night.</p>"
    counts = changes["status"].value_counts()
    summary = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("entered", "left", "up", "down", "same"))
    rows = "".join(
        f"<tr class='{html.escape(r.status)}'><td>{html.escape(str(r.word))}</td><td>{html.escape(r.status)}</td>"
        f"<td>{_rank(r.rank_then, depth)}</td><td>{_rank(r.rank_now, depth)}</td></tr>"
        for r in changes.itertuples()
    )
    return (
        f"<h3>Top {k} words: {html.escape(summary)}</h3><table class='changes'><tr><th>word</th><th>change</th>"
        f"<th>rank last night</th><th>rank tonight</th></tr>{rows}</table>"
    )


def _new_docs_html(ctx, new: pd.DataFrame, then_ids: set) -> str:

    shown = new.head(NEW_SHOWN)
    rows = "".join(
        f"<tr><td>{html.escape(str(r.doc_id))}{' (changed)' if r.doc_id in then_ids else ''}</td>"
        f"<td>{html.escape(ctx.label(r.label) if pd.notna(r.label) else 'n/a')}</td>"
        f"<td>{html.escape(ctx.label(r.pred))}</td><td>{number(r.confidence, '.2f')}</td>"
        f"<td>{html.escape(r.excerpt)}</td></tr>"
        for r in shown.itertuples()
    )
    more = f" (the first {NEW_SHOWN} of {len(new)} by id)" if len(new) > NEW_SHOWN else ""
    return (
        f"<h3>Documents scored tonight{more}</h3><table class='new-docs'><tr><th>id</th><th>true</th>"
        f"<th>predicted</th><th>P(predicted)</th><th>text</th></tr>{rows}</table>"
    )
