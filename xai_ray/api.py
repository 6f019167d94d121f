"""The notebook API: ``xai_ray.run``, ``open_store``, ``explain`` and the report's charts.

Each call goes through what the command line runs (``config.resolve`` -> ``pipeline.run``;
``query.isolated``; ``report.explain.explain_page``; the report's own section
builders), so a notebook and ``xai-ray run`` publish the same runs into the same stores. Results
come back as pandas DataFrames and as objects that render themselves inline (``_repr_html_``).

Over 300 lines on purpose: the whole notebook API in one file, readable in one sitting.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from xai_ray.config import ConfigError
from xai_ray.keys import Rule, check

REPORT_CHARTS = ("summary", "headline", "explorer", "per_method", "per_class", "contrast", "layers", "agreement")


def run(
    data: str,
    model: str = "minilm",
    methods="raw,rollout",
    store: str = "store",
    *,
    config: str | None = None,
    quiet: bool = False,
    **keys,
) -> Run:
    """Score ``data`` with ``model`` and publish one run into ``store``, as ``xai-ray run`` does.

    ``keys`` are any config keys (``limit=200``, ``max_length=256``, ``long_text="window"``,
    ``report=False``...; ``xai-ray run --help-config`` lists them); ``config`` a YAML file beneath them.
    """
    from xai_ray import config as config_module
    from xai_ray import pipeline, progress
    from xai_ray.store import remote

    for name, value in (("data", data), ("model", model), ("store", store)):
        if not isinstance(value, (str, Path)):
            raise ConfigError(f"{name} must be a path or a name (text), got {type(value).__name__} {value!r}")
    progress.configure(quiet=check("quiet", quiet, "bool"))  # "false" is no boolean (it is true in an if)
    nulls = {k: None for k, v in keys.items() if v is None}  # said, not left out: the config takes them below
    flags = {"data": str(data), "model": str(model), "methods": _names(methods), "store": str(store), **keys}
    cfg = config_module.resolve(config, flags, given_as=KEYWORDS)
    if nulls:
        cfg = _with_nulls(cfg, nulls)
    # Ray and the scoring actors stay up after the run: the next run with this model starts scoring
    # at once (xai_ray.shutdown() releases them)
    result = pipeline.run(cfg)  # the command's own path (a URI store goes through its mirror)
    done = Run(store=remote.local_store(cfg.store), run_id=result.run_id, manifest=result.manifest, page=result.report)
    verdict = config_module.error_verdict(result.manifest.get("counts", {}), cfg.max_error_share)
    if verdict:  # the command exits 3 here: the run is published, and reachable from the error
        raise RunFailed(f"run {done.run_id}: {verdict}", done)
    return done


KEYWORDS = "the keywords of xai_ray.run"  # where an unknown key was given, as an error names it
NO_COLUMN = "none"  # a column no corpus has: ``--set label_column=none`` (unlabelled), ``id_column`` (rows numbered)


def _with_nulls(cfg, nulls: dict):
    """``cfg`` with the keys a notebook gave as None: a column key names no column (``label_column=None``:
    an unlabelled run, as ``--set label_column=none``); any other key takes null where its type allows,
    and says so where not. They were left out before, leaving the default (the ``label`` column)."""
    from dataclasses import replace

    from xai_ray.config import FIELD_NAMES

    unknown = sorted(k for k in nulls if k not in FIELD_NAMES)
    if unknown:  # as resolve names a key it does not know (it never saw these: None is "not given" there)
        raise ConfigError(f"unknown config key {unknown[0]!r} in {KEYWORDS}")
    columns = {k: NO_COLUMN for k in nulls if k in ("label_column", "id_column")}
    return replace(cfg, **{**nulls, **columns})


FLAG = re.compile(r"--([a-z][a-z-]*)")  # a command-line flag named in a message: a keyword here


class RunFailed(RuntimeError):
    """A run published with more failed documents than ``max_error_share`` allows (or with every
    one failed), as ``xai-ray run`` exits 3: ``.run`` is the published ``Run``, its ``errors`` say why."""

    def __init__(self, message: str, run: Run) -> None:
        super().__init__(message)
        self.run = run


def _names(methods) -> str:
    """``methods`` as the config reads it: comma-separated text, or a list of names joined."""
    if isinstance(methods, str):
        return methods
    if isinstance(methods, (list, tuple)) and all(isinstance(name, str) for name in methods):
        return ",".join(methods)
    raise ConfigError(f"methods must be comma-separated text or a list of method names, got {methods!r}")


def shutdown() -> None:
    """Release what ``run`` keeps for the kernel's life: the warm scoring actors (a second run with
    the same model scores at once on them) and the local Ray it started. Done at exit too. A Ray
    the notebook started itself (``ray.init``) stays up: only our actors leave it."""
    from xai_ray import runtime
    from xai_ray.pipeline import pool

    pool.release()
    runtime.shutdown_own_ray()


def open_store(
    path: str = "store", *, timeout: float = 60.0, memory_limit: str = "2GB", threads: int = 2, max_output: str = "1GB"
) -> ReadOnlyConnection:
    """The store's views (runs, docs, tokens, words, errors, faithfulness, heads, head_similarity) for
    read-only SQL, run as ``xai-ray sql`` runs it: the same guard, sandbox, process and limits
    (``timeout`` seconds, ``memory_limit``, ``threads``, ``max_output``: its flags)."""
    from xai_ray.query.limits import Limits
    from xai_ray.store import remote

    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"open_store takes a store's folder or URI, got {type(path).__name__} {path!r}")
    limits = Limits(memory_limit=memory_limit, threads=threads, timeout_s=timeout, max_output=max_output)
    return ReadOnlyConnection(remote.local_store(path), limits)


class ReadOnlyConnection:
    """Read-only SQL over a store, with no DuckDB object inside to reach: each query runs as
    ``xai-ray sql`` runs it (``query.isolated``: statement guard, sandboxed connection, a child
    process under the memory cap, killed at the timeout) and comes back as a DataFrame or an Arrow
    table."""

    def __init__(self, store, limits) -> None:
        self.store = store
        self.limits = limits
        self.closed = False

    def sql(self, query: str, params=None) -> pd.DataFrame:
        """The rows of a read-only query as a DataFrame; ``params`` (a list, or a dict for ``$name``)
        are bound to it."""
        import pyarrow as pa

        from xai_ray.query.connection import QueryError

        table = self.arrow(query, params)
        try:
            return table.to_pandas()
        except (pa.ArrowException, TypeError, ValueError) as err:  # a type pandas has no column for (a union)
            raise QueryError(
                f"the result has a column pandas cannot hold ({str(err).splitlines()[0][:160]}); cast it in the query, "
                "or take the rows as Arrow with .arrow(query)"
            ) from None

    df = sql

    def arrow(self, query: str, params=None):
        """The rows of a read-only query as a ``pyarrow.Table``."""
        from xai_ray.query import isolated
        from xai_ray.query.connection import QueryError

        if self.closed:
            raise QueryError("the store's connection is closed; open it again with xai_ray.open_store")
        return isolated.run(self.store, query, self.limits, params)

    def tables(self) -> list[str]:
        """The views a query can read."""
        return self.sql("select view_name from duckdb_views() where not internal order by view_name").view_name.tolist()

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> ReadOnlyConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        limits = self.limits
        return (
            f"<xai-ray store {str(self.store)!r}, read-only: timeout {limits.timeout_s:g} s, memory "
            f"{limits.memory_limit}, {limits.threads} threads, output {limits.max_output}>"
        )

    def __getattr__(self, name: str):
        raise AttributeError(
            f"the store's read-only connection has no {name!r}; queries: .sql, .df (DataFrames), .arrow, .tables"
        )


@dataclass
class Run:
    """A published run: its tables as DataFrames, its report, its charts."""

    store: str
    run_id: str
    manifest: dict = field(default_factory=dict, repr=False)
    page: Path | None = None
    _con: object = field(default=None, repr=False)
    _db: object = field(default=None, repr=False)

    @classmethod
    def load(cls, store: str = "store", run_id: str | None = None) -> Run:
        """A run already in a store (default: the newest)."""
        from xai_ray.query import connection as query
        from xai_ray.store import remote

        local = remote.local_store(store)
        row = query.pick_run(query.open_store(local, run=run_id), run_id)
        return cls(store=local, run_id=row["run_id"], manifest=json.loads(row["manifest"]))

    @property
    def con(self) -> ReadOnlyConnection:
        """The store's read-only connection for SQL of your own (``open_store``)."""
        if self._con is None:
            self._con = open_store(self.store)
        return self._con

    def _database(self):
        # The run's own queries (fixed text, bound values) on the sandboxed connection, in process,
        # each through the statement guard: the sandbox alone lets COPY replace a store's file.
        if self._db is None:
            from xai_ray.query import connection as query
            from xai_ray.query.guarded import GuardedReader

            self._db = GuardedReader(query.open_store(self.store, run=self.run_id))
        return self._db

    @property
    def counts(self) -> dict:
        return dict(self.manifest.get("counts", {}))

    def _select(self, table: str, **where) -> pd.DataFrame:
        clauses = ["run_id = $run_id"] + [f"{key} = ${key}" for key, value in where.items() if value is not None]
        params = {"run_id": self.run_id, **{k: v for k, v in where.items() if v is not None}}
        # table and column names are ours (fixed above), values are bound
        return self._database().execute(f"select * from {table} where {' and '.join(clauses)}", params).df()

    def docs(self) -> pd.DataFrame:
        """One row per scored document: doc_id, label, pred, prob_pos, probs, n_tokens, n_words, truncated, text."""
        return self._select("docs").sort_values("doc_id", ignore_index=True)

    def words(self, method: str | None = None, layer: int | None = None, doc_id: str | None = None) -> pd.DataFrame:
        """One row per document x method x layer x word (``score`` sums to 1 per document, method, layer).
        ``doc_id``: a document's id as stored (text; a whole number is taken as its digits)."""
        method = check("method", method, "str | None")
        layer = check("layer", layer, "int | None", Rule(lo=1))
        doc_id = check("doc_id", doc_id, "str | None")
        self._has_method(method)  # else an empty frame, where topk refuses
        self._has_layer(layer)
        frame = self._select("words", method=method, layer=layer, doc_id=doc_id)
        return frame.sort_values(["doc_id", "method", "layer", "word_id"], ignore_index=True)

    def errors(self) -> pd.DataFrame:
        """The documents that could not be scored, with the stage and the reason."""
        return self._select("errors")

    def topk(
        self,
        method: str | None = None,
        layer: int | None = None,
        k: int = 20,
        min_count: int = 1,
        by: str = "all",
        *,
        stat: str = "lift",
        min_docs: int | None = None,
        exclude=None,
    ) -> pd.DataFrame:
        """Top-k words as ``xai-ray topk`` ranks them: mean per-review ``stat`` (``lift`` by default,
        ``share`` the older one), at least ``min_docs`` reviews (default scaled with the run), each row
        with its 95% interval; ``exclude``: "punct,stop". Method: by default the one the run's own
        leaderboard ranks best, as for ``xai-ray topk`` and the report."""
        from xai_ray.query.limits import QueryError
        from xai_ray.query.top_words import topk
        from xai_ray.report.leaderboard import lead_method

        # this call's own names in its messages (topk's say --k, as the command line's flags)
        method, layer = check("method", method, "str | None"), check("layer", layer, "int | None", Rule(lo=1))
        k, min_count = check("k", k, "int", Rule(lo=1)), check("min_count", min_count, "int", Rule(lo=1))
        by, stat = check("by", by, "str"), check("stat", stat, "str")
        min_docs = check("min_docs", min_docs, "int | None", Rule(lo=1))
        if not (
            exclude is None
            or isinstance(exclude, str)
            or (isinstance(exclude, (list, tuple)) and all(isinstance(x, str) for x in exclude))
        ):
            raise ConfigError(f"exclude takes 'punct', 'stop', 'punct,stop', a list of them or None; got {exclude!r}")
        if method is None:
            methods = self.manifest.get("config", {}).get("methods") or ["rollout"]
            method, _ = lead_method(self._database(), self.run_id, methods, layer)
        try:
            return topk(
                self._database(),
                self.run_id,
                method,
                layer,
                k,
                min_count,
                by,
                stat=stat,
                min_docs=min_docs,
                exclude=exclude,
            )
        except QueryError as err:  # its checks name the command line's flags: here, this call's keywords
            raise QueryError(FLAG.sub(lambda flag: flag[1].replace("-", "_"), str(err))) from None

    def _has_layer(self, layer: int | None) -> None:
        n_layers = (self.manifest.get("model") or {}).get("n_layers")
        if layer is not None and isinstance(n_layers, int) and layer > n_layers:
            raise ConfigError(f"layer must be between 1 and {n_layers} (the model's layers), got {layer}")

    def _has_method(self, method: str | None) -> None:
        methods = self.manifest.get("config", {}).get("methods") or []
        if method is not None and methods and method not in methods:
            raise ConfigError(f"run {self.run_id!r} has no method {method!r}; it has {','.join(methods)}")

    def report(self, out: str | Path | None = None) -> Page:
        """The run's HTML report (``xai-ray report``), written to ``out`` (default: the run's report.html)."""
        from xai_ray.report.page import build_report
        from xai_ray.store.layout import run_dir

        out = Path(out) if out is not None else run_dir(self.store, self.run_id) / "report.html"
        return Page(build_report(self.store, self.run_id, out))

    def chart(self, name: str):
        """One of the report's charts (``REPORT_CHARTS``) as an ``alt.Chart``."""
        return report_chart(name, self.store, self.run_id)

    def _repr_html_(self) -> str:
        counts = self.counts
        return (
            f"<p><b>xai-ray run {html.escape(self.run_id)}</b>: {counts.get('docs', 0)} documents scored, "
            f"{counts.get('errors', 0)} errors; store {html.escape(str(self.store))}</p>"
        )


def report_chart(
    name: str, store: str = "store", run_id: str | None = None, k: int | None = None, definition: str | None = None
):
    """A chart of the report, built by the report's own section builder: ``summary`` (confusion matrix),
    ``headline``, ``explorer``, ``per_method``, ``per_class``, ``contrast``, ``layers``, ``agreement``.
    Sections with several charts come back stacked (``alt.vconcat``)."""
    import altair as alt

    from xai_ray.report.blocks import Fragment
    from xai_ray.report.context import context
    from xai_ray.report.definition import MAX_K, load_definition
    from xai_ray.report.sections import BUILDERS
    from xai_ray.store import remote

    if name not in BUILDERS:
        raise ConfigError(f"no report chart {name!r}; charts: {', '.join(sorted(BUILDERS))}")
    k = check("k", k, "int | None", Rule(lo=1, hi=MAX_K))  # as `report --k`: -5 and 0 drew nothing or 20
    ctx = context(remote.local_store(store), run_id, load_definition(definition), k)
    section = BUILDERS[name](ctx)
    charts = [item for item in (section.items if section else []) if not isinstance(item, Fragment)]
    if not charts:
        raise ConfigError(f"run {ctx.run_id!r} has no data for the {name!r} chart")
    return charts[0] if len(charts) == 1 else alt.vconcat(*charts)


def topk_chart(store: str = "store", run_id: str | None = None, k: int | None = None):
    """The report's headline: top-k words across all reviews (main method, last layer)."""
    return report_chart("headline", store, run_id, k)


def confusion_chart(store: str = "store", run_id: str | None = None):
    return report_chart("summary", store, run_id)


def contrast_chart(store: str = "store", run_id: str | None = None, k: int | None = None):
    """Words weighed more in positive than in negative predictions, and the reverse."""
    return report_chart("contrast", store, run_id, k)


def layers_chart(store: str = "store", run_id: str | None = None):
    """Per-layer [CLS] curves and layer x word heatmaps of the report's example reviews."""
    return report_chart("layers", store, run_id)


def agreement_chart(store: str = "store", run_id: str | None = None):
    """Per-review rank agreement between methods."""
    return report_chart("agreement", store, run_id)


@dataclass
class Page:
    """An HTML file shown inline in a notebook (sandboxed iframe, no network needed)."""

    path: Path
    height: int = 700

    def _repr_html_(self) -> str:
        return iframe(Path(self.path).read_text(encoding="utf-8"), self.height)


def iframe(page: str, height: int) -> str:
    from xai_ray.report.outputs import BIDI_CONTROLS

    page = page.translate(BIDI_CONTROLS)  # as a written page: no override turns the text around
    # srcdoc takes the whole page as an attribute: escaped, so the review's text stays text
    return (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:{int(height)}px;'
        'border:1px solid #ddd" sandbox="allow-scripts"></iframe>'
    )


@dataclass
class Explanation:
    """One review explained: ``scores`` per method, layer and word; ``_repr_html_`` the explain page."""

    text: str
    pred: int
    probs: list
    scores: pd.DataFrame
    page: str = field(repr=False)
    height: int = 900

    def save(self, out: str | Path) -> Path:
        """Write the page to ``out`` as ``xai-ray explain --out`` does (a regular file or a new one)."""
        from xai_ray.report.outputs import write_page

        return write_page(out, self.page, option="out")

    def _repr_html_(self) -> str:
        return iframe(self.page, self.height)


# What of a run's settings a page is scored with beyond model, methods and max_length
# (``report.explain.page_options``): every other keyword is refused.
EXPLAIN_OPTIONS = ("residual", "head_fusion", "discard_ratio", "start_layer", "target", "ig_steps", "ig_tolerance")
EXPLAIN_OPTIONS += ("long_text", "window_stride", "allow_pickle", "trust_remote_code")


def explain(
    text: str, model: str = "minilm", methods="raw,rollout,flow", max_length: int | None = None, **options
) -> Explanation:
    """Explain one review as ``xai-ray explain`` does (same checks, same page), without Ray."""
    import xai_ray.report.explain as explain_module
    from xai_ray import config as config_module

    if not isinstance(text, str):
        raise ConfigError(f"the text to explain must be a string, got {type(text).__name__}")
    unused = sorted(set(options) - set(EXPLAIN_OPTIONS))
    if unused:  # store=, evaluate=, data= ... were taken by the config and dropped without a word
        raise ConfigError(
            f"explain scores one text and does not take {', '.join(unused)}; it takes {', '.join(EXPLAIN_OPTIONS)}"
            " (a stored review: xai-ray explain --store STORE --doc-id ID)"
        )
    length = explain_module.DEFAULT_MAX_LENGTH if max_length is None else max_length
    model = str(model) if isinstance(model, Path) else model  # as run takes it
    cfg = config_module.resolve(None, {"model": model, "methods": _names(methods), "max_length": length, **options})
    options = explain_module.page_options(cfg)  # the cut, the class explained and the safety flags too
    page, row = explain_module.explain_page(text, cfg.model, cfg.max_length, cfg.methods, options)
    return Explanation(
        text=text,
        pred=row["pred"],
        probs=list(row["probs"]),
        page=page,
        scores=explain_module.scores_frame(row, cfg.methods),
    )
