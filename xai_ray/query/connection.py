"""DuckDB over the store: views ``runs``, ``docs``, ``tokens``, ``words``, ``errors``, ``faithfulness``,
``heads``, ``head_similarity``, and named queries.

The connection is in memory and sandboxed once the views exist: it can open only the store's own
Parquet files (each by its exact path: not the manifests, not a new file, not DuckDB's temp folder,
which it does not get), cannot attach databases or install extensions, and its settings are
locked. User SQL (``user_sql``) also passes the statement guard (``guard``), runs in a child
process of its own under a memory cap, a thread count and a timeout (``isolated``, ``limits``),
and streams its rows in record batches; the top words are ``top_words``'.
Queries live one per file in ``xai_ray/query/sql``; every value is bound as a parameter.

Why files and not Arrow datasets: serving the views over ``pyarrow.dataset`` objects would leave
the connection no file access at all, but it would trade DuckDB's own Parquet reader (parallel,
row-group pruning) for a Python-side scan on every query of every job; the exact-path sandbox
gives the same reach (the store's Parquet parts, read only) with the native reader kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import duckdb
import pyarrow as pa

from xai_ray.query.limits import Limits, QueryError
from xai_ray.query.run_files import recorded
from xai_ray.query.views import SOURCES, folder_files, run_layouts, view_sql
from xai_ray.store import StoreError
from xai_ray.store import layout as store_layout
from xai_ray.store.aggregates import kept_rows, run_mark
from xai_ray.store.schemas import RUNS
from xai_ray.store.schemas import TABLES as SCHEMAS

log = logging.getLogger("xai_ray")
SQL_DIR = Path(__file__).parent / "sql"
WORD_TOTALS = "word_totals"  # the aggregate stage's per-word sums (top_words.keep_word_totals)
TABLES = ("docs", "errors", "tokens", "words", "faithfulness", "heads", "head_similarity")
# The columns a view adds to its parts' own, in the order the views give them (an empty store's
# views too: its reference page described them in another order than a store with runs)
PARTITIONS = {
    "docs": {"run_id": pa.string()},
    "errors": {"run_id": pa.string()},
    "tokens": {"layer": pa.int32(), "method": pa.string(), "run_id": pa.string()},
    "words": {"layer": pa.int32(), "method": pa.string(), "run_id": pa.string()},
    "faithfulness": {"run_id": pa.string()},
    "heads": {"run_id": pa.string()},
    "head_similarity": {"run_id": pa.string()},
}


def sql_text(name: str) -> str:
    path = SQL_DIR / f"{name}.sql"
    if not path.is_file():
        raise QueryError(f"no named query {name!r}")
    return path.read_text()


def open_store(
    store: str | Path, sandbox: bool = True, limits: Limits | None = None, run: str | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the store's views, locked down unless ``sandbox=False``.
    ``run``: the views hold only that run (a stage or command about one run: another run of the
    store that is damaged does not stop it), else every run."""
    root = Path(store).resolve()
    if not root.is_dir():
        raise QueryError(
            f"store {str(store)!r} does not exist or is not a folder; run `xai-ray run --store {store}` first"
        )
    store_layout.check_folders(root)
    con = duckdb.connect(":memory:")
    con.execute(sql_text("macro_counted_word"))  # which words count, one definition for every top-k query
    con.execute(sql_text("macro_word_key"))  # what a word is to them (lower case, NFC, one apostrophe)
    published = store_layout.list_runs(root)
    unlisted = {store_layout.run_id_of(folder): folder for folder in store_layout.unlisted_runs(root)}
    if run is not None and run in unlisted:
        raise QueryError(f"run {run!r} is not read: {store_layout.unlisted_why(unlisted[run])}")
    if run is not None and run not in published:
        raise QueryError(f"no run {run!r} in the store; runs: {', '.join(published) or 'none yet'}")
    for run_id, folder in unlisted.items():  # said once a process: the answers leave these runs out
        if run is None and folder not in _WARNED:
            _WARNED.add(folder)
            log.warning("run %r is left out of every query: %s", run_id, store_layout.unlisted_why(folder))
    runs = [store_layout.run_dir(root, run_id) for run_id in published if run is None or run_id == run]
    readable = _create_views(con, root, runs, TABLES, "view")
    runs_table = _runs_table(runs)
    con.from_arrow(runs_table).create_view("runs")
    # A run that scored nothing keeps an empty file; one kept by an earlier version holds null-typed
    # columns that no other run's file can be read beside, or sums of another definition of a word
    # (its tag), or was copied in from another run (its mark): left out (topk and the report then
    # take their slow path, and `xai-ray run --resume` keeps them again).
    tag, totals = word_totals_tag(), []
    for run_id, created_at in zip(*runs_table.select(["run_id", "created_at"]).to_pydict().values()):
        path = store_layout.aggregate_file(root, run_id, WORD_TOTALS)
        if path.is_file() and store_layout.inside(root, path) and kept_rows(path, tag, run_mark(run_id, created_at)):
            totals.append(str(path))
    totals.sort()
    if totals:  # the runs' kept word totals (keep_word_totals): topk's fast path
        readable += totals
        con.execute("SET VARIABLE files_word_totals = ?", [as_written(totals)])
        con.execute(f"create view word_totals as {sql_text('view_word_totals')}")
    if sandbox:
        lock_down(con, readable, limits)
    return con


_WARNED: set[Path] = set()


def word_totals_tag() -> dict:
    """What kept word totals are tagged with: a digest of the queries that define them and of what
    a word is (``word_key``), so totals kept by a version that counted words otherwise are not read."""
    text = "".join(sql_text(name) for name in (WORD_TOTALS, f"{WORD_TOTALS}_wide", "macro_word_key"))
    return {"query": WORD_TOTALS, "sql": hashlib.sha256(text.encode()).hexdigest()[:16]}


def as_written(paths: list[str]) -> list[str]:
    """``paths`` for DuckDB's file readers, which take a path holding ``*``, ``?`` or ``[`` as a
    pattern: a store at "proj [v1]" read the files of a store beside it at "proj v". Each such
    character is written as a class of itself (``[[]``), which matches only it."""
    return ["".join(f"[{c}]" if c in "*?[" else c for c in path) for path in paths]


def _create_views(con, root: Path, runs: list[Path], tables, prefix: str) -> list[str]:
    """Create the views ``tables`` over ``runs`` from ``sql/<prefix>_<table>.sql``; returns the
    files they read. ``tokens`` and ``words`` read runs of either store layout (``views``)."""
    con.execute("SET parquet_metadata_cache = true")  # each slice of a view reads the same files' footers
    layouts = run_layouts(runs)
    readable = []
    for table in tables:
        if table in SOURCES:
            files = {source.name: folder_files(root, layouts, source) for source in SOURCES[table]}
        else:
            files = {table: _files(root, layouts, table)}
        for name, found in files.items():
            readable += found
            if found and table not in SOURCES:
                con.execute(f"SET VARIABLE files_{name} = ?", [as_written(found)])
        if table in SOURCES:
            select, bound = view_sql(table, layouts, files, sql_text)
            for variable, found in bound.items():
                con.execute(f"SET VARIABLE {variable} = ?", [as_written(found)])
            if select is not None and prefix == "union":
                select = sql_text(f"union_{table}").replace("@parts@", select)
        else:
            select = sql_text(f"{prefix}_{table}") if files[table] else None
        if select is not None:
            con.execute(f"create view {table} as {select}")
        else:
            empty = _empty(table)
            if prefix == "union":
                empty = empty.append_column("source_run_id", pa.array([], pa.string()))
            con.from_arrow(empty).create_view(table)
    return list(dict.fromkeys(readable))  # layout 3's table serves both tokens and words


def _files(root: Path, runs: dict[Path, dict], folder: str) -> list[str]:
    return sorted(
        str(f)
        for run, info in runs.items()
        for f in store_layout.store_files(root, run / folder, "*.parquet")
        if recorded(run, info, f)
    )


def lock_down(con, readable: list[str], limits: Limits | None = None) -> None:
    """Allow opening exactly the files ``readable`` and nothing else, then lock the settings.

    DuckDB lets SQL read and write its temp folder even with external access off, so the
    connection gets none (a query over ``memory_limit`` then fails instead of spilling).
    """
    con.execute("SET temp_directory = ''")
    try:
        con.execute("SET enable_progress_bar = false")  # it would draw on the terminal among printed rows
    except duckdb.InvalidInputException:
        pass  # a Jupyter kernel without ipywidgets refuses to change it at all (and then draws no bar)
    if limits is not None:
        con.execute(f"SET memory_limit = '{limits.memory_bytes}B'")  # SET takes no parameters; checked by Limits
        con.execute(f"SET threads = {int(limits.threads)}")
    con.execute("SET allowed_directories = []")
    # Each file as DuckDB is asked for it (``as_written``) and as it is found: both are checked.
    con.execute("SET allowed_paths = ?", [list(dict.fromkeys(readable + as_written(readable)))])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _empty(table: str) -> pa.Table:
    schema = SCHEMAS[table]
    for name, kind in PARTITIONS[table].items():
        schema = schema.append(pa.field(name, kind))
    return schema.empty_table()


def _runs_table(run_dirs: list[Path]) -> pa.Table:
    return pa.Table.from_pylist([_run_row(folder) for folder in run_dirs], schema=RUNS)


def _run_row(folder: Path) -> dict:
    """A published run's ``runs`` row from its manifest; a manifest of another shape (another
    program's, or edited by hand) is one sentence naming what is wrong, never misread."""
    path = folder / store_layout.MANIFEST
    manifest = store_layout.read_manifest(path)

    def checked(value, kinds: tuple, name: str):
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise StoreError(
                f"manifest {str(path)!r} is not a run's manifest: its {name} is {value!r}; restore it or move "
                "the run folder out of the store"
            )
        return value

    def field(where: dict, key: str, kinds: tuple, name: str):
        return checked(where.get(key), kinds, name)

    parts = {key: field(manifest, key, (dict,), key) or {} for key in ("config", "counts", "model", "timings")}
    config, counts, model = parts["config"], parts["counts"], parts["model"]
    field(manifest, "run_id", (str,), "run_id")  # checked, but the run is named by its folder, as every view names it
    methods = [
        checked(m, (str,), "config.methods") or "" for m in field(config, "methods", (list,), "config.methods") or []
    ]
    return {
        "run_id": folder.name.split("=", 1)[1],
        "created_at": field(manifest, "created_at", (str,), "created_at"),
        "model": field(config, "model", (str,), "config.model"),
        "model_fingerprint": field(model, "fingerprint", (str,), "model.fingerprint"),
        "data": field(config, "data", (str,), "config.data"),
        "methods": ",".join(methods),
        "n_layers": field(model, "n_layers", (int,), "model.n_layers"),
        "n_docs": field(counts, "docs", (int,), "counts.docs"),
        "n_errors": field(counts, "errors", (int,), "counts.errors"),
        "seconds": field(parts["timings"], "total_s", (int, float), "timings.total_s"),
        "manifest": json.dumps(manifest, sort_keys=True),
    }


def run_named(con, name: str, **params):
    """Run ``sql/<name>.sql`` with bound parameters; returns a pandas DataFrame."""
    return con.execute(sql_text(name), params).df()


def pick_run(con, run_id: str | None) -> dict:
    """The named run (or the newest one) as a dict of its ``runs`` row."""
    runs = run_named(con, "runs_by_age")
    if runs.empty:
        raise QueryError("the store has no published runs yet")
    chosen = runs.iloc[[-1]] if run_id is None else runs[runs.run_id == run_id]
    if chosen.empty:
        raise QueryError(f"no run {run_id!r} in the store; runs: {', '.join(runs.run_id)}")
    # a value the run lacks is None, as in its manifest: pandas reads a text column's missing ones as NaN
    return {key: None if _missing(value) else value for key, value in chosen.iloc[0].to_dict().items()}


def _missing(value) -> bool:
    import pandas as pd

    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def open_union(store: str | Path, run_ids: list[str], label: str, sandbox: bool = True) -> duckdb.DuckDBPyConnection:
    """The views of several published runs seen as one run named ``label`` (a nightly corpus).

    Each document appears once, in the version of the latest run that scored it (``run_ids`` in
    order, oldest first); ``source_run_id`` names that run. ``runs`` holds one row: the newest
    run's manifest with the runs' counts summed and their ids under ``runs``.
    """
    root = Path(store).resolve()
    store_layout.check_folders(root)
    if not run_ids:
        raise QueryError("no runs to combine")
    published = set(store_layout.list_runs(root))
    missing = [run_id for run_id in run_ids if run_id not in published]
    if missing:
        raise QueryError(f"no run {missing[0]!r} in the store")
    runs = [store_layout.run_dir(root, run_id) for run_id in run_ids]
    con = duckdb.connect(":memory:")
    con.execute(sql_text("macro_counted_word"))  # which words count, one definition for every top-k query
    con.execute(sql_text("macro_word_key"))  # what a word is to them (lower case, NFC, one apostrophe)
    con.execute("SET VARIABLE union_label = ?", [label])
    con.execute("SET VARIABLE union_runs = ?", [list(run_ids)])
    _create_views(con, root, runs, ("docs", "errors", "tokens", "words", "faithfulness"), "union")  # docs first
    for table in ("heads", "head_similarity"):
        # Means over one run's reviews: they do not add up across runs, so a union shows none
        # (each night's run keeps its own in the store's views).
        con.from_arrow(_empty(table)).create_view(table)
    con.from_arrow(_union_runs_row(runs, label)).create_view("runs")
    if sandbox:
        lock_down(con, [str(f) for run in runs for f in store_layout.store_files(root, run, "*.parquet")])
    return con


def _union_runs_row(run_dirs: list[Path], label: str) -> pa.Table:
    rows = _runs_table(run_dirs).to_pylist()
    newest = dict(rows[-1])
    manifest = json.loads(newest["manifest"])
    counts: dict = {}
    for row in rows:
        for key, value in json.loads(row["manifest"]).get("counts", {}).items():
            counts[key] = counts.get(key, 0) + (value or 0)
    timings = [json.loads(row["manifest"]).get("timings", {}) for row in rows]
    score_s = sum(t.get("score_and_write_s") or 0 for t in timings)
    manifest.update(
        run_id=label,
        counts=counts,
        runs=[row["run_id"] for row in rows],
        timings={
            "score_and_write_s": round(score_s, 3),
            "total_s": round(sum(t.get("total_s") or 0 for t in timings), 3),
            "docs_per_s": round(counts.get("docs", 0) / score_s, 3) if score_s else None,
        },
    )
    newest.update(
        run_id=label,
        n_docs=sum(r["n_docs"] or 0 for r in rows),
        n_errors=sum(r["n_errors"] or 0 for r in rows),
        seconds=sum(r["seconds"] or 0 for r in rows),
        manifest=json.dumps(manifest, sort_keys=True),
    )
    return pa.Table.from_pylist([newest], schema=RUNS)
