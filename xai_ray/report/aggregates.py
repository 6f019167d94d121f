"""The pipeline's aggregate stage: the corpus-wide aggregates a report reads, as data.

``planned(ctx)`` lists them as (named query, parameters), from the report definition and the
run alone; ``keep_aggregates`` runs those queries once (plus the faithfulness summary, a
statistic over one more query) and keeps their small results beside the run
(``store.aggregates``). Nothing here builds a section or a chart (a test checks that keeping
aggregates imports no chart library); a report with other parameters recomputes what it needs
from the views.
"""

from __future__ import annotations

from pathlib import Path

from xai_ray.query.connection import run_named
from xai_ray.query.intervals import SUMMARY, SUMMARY_PARAMS, faithfulness_summary
from xai_ray.report import leaderboard
from xai_ray.report.context import KEPT, Context, context, has_relation, kept_tag
from xai_ray.report.definition import load_definition
from xai_ray.store.aggregates import is_kept, write_aggregate

# The sections that read each kept query; a query is planned only when one of them is in the definition.
READERS = {
    "report_topk_all": ("headline", "per_method", "per_class", "layers"),
    "report_contrast": ("contrast",),
    "report_agreement": ("agreement",),
    "report_leaderboard": ("faithfulness",),
}
assert set(READERS) == set(KEPT)


def planned(ctx: Context) -> list[tuple[str, dict]]:
    """The named queries (and their parameters) that this run's report reads over every word."""
    sections = set(ctx.definition["sections"])
    params = {
        "report_topk_all": ctx.topk_params(),
        "report_contrast": ctx.contrast_params(),
        "report_agreement": ctx.agreement_params(),
        "report_leaderboard": leaderboard.PARAMS,
    }
    plan = [(name, params[name]) for name in KEPT if sections & set(READERS[name])]
    if len(ctx.methods) < 2:  # the agreement section compares methods
        plan = [(name, p) for name, p in plan if name != "report_agreement"]
    if not ctx.binary:  # the contrast section is for two classes only
        plan = [(name, p) for name, p in plan if name != "report_contrast"]
    if not _evaluated(ctx):  # the faithfulness section reads the leaderboard of evaluated runs only
        plan = [(name, p) for name, p in plan if name != "report_leaderboard"]
    return plan


def _evaluated(ctx: Context) -> bool:
    if not has_relation(ctx.con, "faithfulness"):
        return False
    return bool(run_named(ctx.con, "run_faithfulness_count", run_id=ctx.run_id).n_rows.iloc[0])


def keep_aggregates(store: str | Path, run_id: str, definition: str | Path | dict | None = None) -> list[Path]:
    """Run the planned aggregates of the default (or given) report definition once and keep them
    beside the run; returns the files written."""
    if not isinstance(definition, dict):
        definition = load_definition(definition)
    ctx = context(store, run_id, definition, None)
    kept = []
    for name, params in planned(ctx):  # computed again, not read: faithfulness may have been added since
        source = ctx.source(name)
        frame = run_named(ctx.con, source, run_id=ctx.run_id, **params)
        kept.append(write_aggregate(store, ctx.run_id, name, kept_tag(source, params), frame))
    if "faithfulness" in definition["sections"] and has_relation(ctx.con, "faithfulness"):
        summary = faithfulness_summary(run_named(ctx.con, "report_faithfulness", run_id=ctx.run_id))
        if not summary.empty:  # a run without --evaluate keeps nothing
            kept.append(write_aggregate(store, ctx.run_id, SUMMARY, SUMMARY_PARAMS, summary))
    return kept


def missing_aggregates(store: str | Path, run_id: str) -> list[str]:
    """The aggregates ``keep_aggregates`` would keep for the run (default definition) that it does
    not keep whole with those parameters: a run whose aggregate stage stopped part way (a full
    disk), or whose kept files were computed otherwise or copied in from another run."""
    ctx = context(store, run_id, load_definition(None), None)
    return [
        name
        for name, params in planned(ctx)
        if not is_kept(store, ctx.run_id, name, kept_tag(ctx.source(name), params))
    ]
