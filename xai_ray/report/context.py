"""What every report section may use: the open store, the run, its summary, the definition's
parameters, and a cache of named queries (aggregates kept beside the run are read from there)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from xai_ray.config import ConfigError
from xai_ray.query import wordstats
from xai_ray.query.connection import open_store, pick_run, run_named, sql_text
from xai_ray.query.lean import flagged, lean, sentences
from xai_ray.query.top_words import has_word_totals, without_lift
from xai_ray.report.leaderboard import lead_method
from xai_ray.report.outputs import drawn
from xai_ray.store.aggregates import read_aggregate

# Queries that scan every word of a run: the pipeline's aggregate stage keeps their results
# beside the run (``report.aggregates``), so building the report costs the same for 200 reviews or 25,000.
KEPT = ("report_topk_all", "report_contrast", "report_agreement", "report_leaderboard")


def kept_tag(name: str, params: dict) -> dict:
    """What a kept aggregate is tagged with: its parameters and a digest of the query's text, so a
    result kept by another version of the query (other columns, another rule) is computed again."""
    return {**params, "sql": hashlib.sha256(sql_text(name).encode()).hexdigest()[:16]}


@dataclass
class Context:
    """What every builder may use: the open store, the run, its summary and the definition."""

    con: Any
    run: dict
    manifest: dict
    summary: dict
    definition: dict
    labels: dict[int, str]
    methods: list[str]
    main_method: str
    last_layer: int
    k: int
    min_count: int
    min_docs: int = 2
    stat: str = "lift"
    exclude: tuple = ("punct",)
    store: Any = None  # the store's folder: aggregates kept beside the run are read from there
    cache: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # what a caller hands its own sections (nightly: the night before)

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    def query(self, name: str, **params) -> pd.DataFrame:
        """A named query of this run; cached, so sections sharing an aggregate scan once."""
        key = (name, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items())))
        if key not in self.cache:
            kept, source = None, self.source(name)
            if self.store and name in KEPT:
                kept = read_aggregate(self.store, self.run_id, name, kept_tag(source, params))
            self.cache[key] = kept if kept is not None else run_named(self.con, source, run_id=self.run_id, **params)
        return self.cache[key]

    def source(self, name: str) -> str:
        """The named query that computes ``name`` for this run: the top words of every slice from
        the word totals the run's aggregate stage kept, where it kept them (a scan of every word
        otherwise)."""
        if name == "report_topk_all" and has_word_totals(self.con, self.run_id):
            return "report_topk_all_totals"
        return name

    def label(self, value) -> str:
        try:
            return self.labels.get(int(value), str(value))
        except (TypeError, ValueError):
            return str(value)

    @property
    def binary(self) -> bool:
        """Two classes: the only case where class 1 against class 0 means something (contrast, P(pos))."""
        return (len(self.labels) or len(self.classes())) == 2  # a manifest without labels: count the outputs

    def classes(self) -> pd.DataFrame:
        """Per class of the model (``sql/class_summary.sql``): cls, mean_prob, predicted, labelled, correct."""
        return self.query("class_summary").rename(columns={"class": "cls"})

    def word_params(self) -> dict:
        """The top-k parameters of this report (``wordstats.query_params``), shared by every word chart."""
        return wordstats.query_params(self.stat, self.min_docs, self.min_count, self.exclude)

    def topk_params(self) -> dict:
        return {"k": self.k, **self.word_params()}

    def contrast_params(self) -> dict:
        return {"method": self.main_method, "layer": self.last_layer, "k": self.k, **self.word_params()}

    def agreement_params(self) -> dict:
        spec = self.definition["agreement"]
        return {"layer": self.last_layer, "bins": int(spec["bins"]), "max_docs": int(spec["max_docs"])}

    def topk_all(self) -> pd.DataFrame:
        """Top words of every method and layer, over all reviews (group "all") and per predicted
        class (its name; a class named "all" is told apart from the overall group by its index)."""
        top = wordstats.add_interval(self.query("report_topk_all", **self.topk_params()))

        def group(value) -> str:
            name = value if value == "all" else self.label(value)
            return f"{name} (class {value})" if name == "all" and value != "all" else name

        return top.assign(group=top["group"].map(group))

    def lean(self) -> pd.DataFrame:
        """Per method, layer and predicted class: how the report's top words of that class lean
        toward it or against it (``query.lean``), ranked as the word charts rank them."""
        key = ("lean", ())  # the shape of ``query``'s keys: (name, parameters)
        if key not in self.cache:
            self.cache[key] = lean(self.con, self.run_id, **self.topk_params())
        return self.cache[key]

    def lean_note(self, method: str | None = None, layer: int | None = None) -> str:
        """A sentence per flagged (method, layer, class) of ``method`` at ``layer`` (None: all of
        them), to append to a section's note (a leading space); empty when none leans against its
        prediction."""
        frame = self.lean()
        if method is not None:
            frame = frame[frame["method"] == method]
        if layer is not None:
            frame = frame[frame["layer"] == layer]
        return "".join(f" Caution: {line}." for line in sentences(frame, self.label))

    def lean_summary(self) -> str:
        """Every flagged (method, layer, class) in one sentence, layers gathered per method and class."""
        frame = flagged(self.lean())
        if frame.empty:
            return ""
        parts = []
        for (method, pred), rows in frame.groupby(["method", "pred"], sort=True):
            layers = ", ".join(str(int(x)) for x in sorted(rows["layer"]))
            plural = "s" if len(rows) > 1 else ""
            parts.append(f"{method} at layer{plural} {layers} for class {self.label(pred)}")
        return (
            " Caution: the top words of these lean, on average, toward the other classes (more frequent in "
            "reviews predicted otherwise than in reviews predicted as the class): " + "; ".join(parts) + "."
        )

    def support_note(self) -> str:
        """How this report's words were chosen and ranked, in one sentence for section notes."""
        statistic = (
            "lift (share of the review's score x its words; 1 = an even spread)"
            if self.stat == "lift"
            else "share of the review's score"
        )
        left_out = f"; {' and '.join(self.exclude)} left out" if self.exclude else ""
        floor = f", at least {self.min_count} occurrences" if self.min_count > 1 else ""
        return (
            f"Words in at least {self.min_docs} reviews{floor}{left_out}, ranked by mean {statistic} per "
            "review; bars show the 95% interval over reviews (t interval on the per-review means)."
        )

    def examples(self) -> pd.DataFrame:
        spec = self.definition["examples"]
        return self.query("report_examples", min_tokens=int(spec["min_tokens"]), pick=spec["pick"])


def has_relation(con, name: str) -> bool:
    """Whether the store's connection has a view or table ``name`` (sections of later features)."""
    return bool(run_named(con, "relation_exists", relation=name).found.iloc[0])


def context(
    store: str | Path, run_id: str | None, definition: dict, k: int | None = None, con=None, extra: dict | None = None
) -> Context:
    """Open the store, pick the run and settle k, min_count and the main method. ``con``: an open
    connection to report on instead (e.g. ``query.open_union``: aggregates kept beside a run are
    then not used); ``extra``: data for sections that need more than the store (nightly changes)."""
    given = con is not None
    con = con if given else open_store(store, run=run_id)
    run = pick_run(con, run_id)
    manifest = json.loads(run["manifest"])
    summary = run_named(con, "summary", run_id=run["run_id"]).iloc[0].to_dict()
    methods = run["methods"].split(",")
    main = definition["main_method"]
    if main == "auto":  # the run's own leaderboard decides (report.leaderboard.lead_method)
        main, _ = lead_method(con, run["run_id"], methods)
    elif main not in methods:
        raise ConfigError(f"report definition: main_method {main!r} is not in the run's methods {methods}")
    min_docs = definition["min_docs"]
    if min_docs == "auto":  # the one default of CLI, summary, report and nightly
        min_docs = wordstats.default_min_docs(int(summary["n_docs"] or 0))
    min_count = 1 if definition["min_count"] == "auto" else definition["min_count"]  # support is min_docs now
    labels = class_names({int(key): value for key, value in manifest.get("model", {}).get("labels", {}).items()})
    return Context(
        con=con,
        run=run,
        manifest=manifest,
        summary=summary,
        definition=definition,
        labels=labels,
        methods=methods,
        main_method=main,
        last_layer=int(run["n_layers"]),
        k=int(k or definition["k"]),
        min_count=int(min_count),
        min_docs=int(min_docs),
        stat=_stat(con, run, main, definition["stat"]),
        exclude=wordstats.parse_exclude(definition["exclude"]),
        store=None if given else Path(store),
        extra=dict(extra or {}),
    )


def _stat(con, run, method: str, stat: str) -> str:
    """The definition's statistic, or share for a run that stored no lift (one of the first
    versions' layout-1 runs: its top words by lift were left out without a word)."""
    if stat == "lift" and pd.notna(run["n_layers"]) and without_lift(con, run["run_id"], method, int(run["n_layers"])):
        logging.getLogger("xai_ray").warning(
            "run %s was written by one of xai-ray's first versions, which stored no lift: its top words are "
            "ranked by share",
            run["run_id"],
        )
        return "share"
    return stat


def class_names(labels: dict[int, str]) -> dict[int, str]:
    """The model's class names as the report shows them: as a chart draws them (``outputs.drawn``),
    each told apart by its index where two would read the same (two classes named "good", or named
    apart only by a bidirectional control): the charts key on the name, and drew such classes as
    one cell of the confusion matrix and one panel of top words."""
    shown = {index: drawn(str(name)) for index, name in labels.items()}
    seen = Counter(shown.values())
    named = {index: f"{name} (class {index})" if seen[name] > 1 else name for index, name in shown.items()}
    if len(set(named.values())) < len(named):  # a suffix met another class's own name ("a (class 1)")
        named = {index: f"{name} (class {index})" for index, name in shown.items()}  # each index once
    return named
