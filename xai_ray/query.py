"""DuckDB over the store: views ``runs``, ``docs``, ``tokens``, ``words``, ``errors``, ``faithfulness``,
``heads``, ``head_similarity``, and named queries.

The connection is in memory and sandboxed once the views exist: it can read only the store's
folder, cannot write files, attach databases or install extensions, and its settings are locked.
Queries live one per file in ``xai_ray/sql``; every value is bound as a parameter.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from xai_ray import store as store_layout

SQL_DIR = Path(__file__).parent / "sql"
TABLES = ("docs", "errors", "tokens", "words", "faithfulness", "heads", "head_similarity")
PARTITIONS = {
    "docs": {"run_id": pa.string()},
    "errors": {"run_id": pa.string()},
    "tokens": {"run_id": pa.string(), "method": pa.string(), "layer": pa.int32()},
    "words": {"run_id": pa.string(), "method": pa.string(), "layer": pa.int32()},
    "faithfulness": {"run_id": pa.string()},
    "heads": {"run_id": pa.string()},
    "head_similarity": {"run_id": pa.string()},
}
SCHEMAS = {"docs": store_layout.DOCS, "errors": store_layout.ERRORS,
           "tokens": store_layout.TOKENS, "words": store_layout.WORDS,
           "faithfulness": store_layout.FAITHFULNESS,
           "heads": store_layout.HEADS, "head_similarity": store_layout.HEAD_SIMILARITY}


class QueryError(ValueError):
    """A query cannot run as asked; the message says why."""


def sql_text(name: str) -> str:
    path = SQL_DIR / f"{name}.sql"
    if not path.is_file():
        raise QueryError(f"no named query {name!r}")
    return path.read_text()


def open_store(store: str | Path, sandbox: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the store's views, locked down unless ``sandbox=False``."""
    root = Path(store).resolve()
    if not root.is_dir():
        raise QueryError(f"store {str(store)!r} does not exist; run `xai-ray run --store {store}` first")
    con = duckdb.connect(":memory:")
    runs = [store_layout.run_dir(root, run_id) for run_id in store_layout.list_runs(root)]
    for table in TABLES:
        files = sorted(str(f) for run in runs for f in (run / table).rglob("*.parquet"))
        if files:
            con.execute(f"SET VARIABLE files_{table} = ?", [files])
            con.execute(f"create view {table} as {sql_text(f'view_{table}')}")
        else:
            con.from_arrow(_empty(table)).create_view(table)
    con.from_arrow(_runs_table(runs)).create_view("runs")
    if sandbox:
        con.execute("SET allowed_directories = ?", [[str(root)]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


def _empty(table: str) -> pa.Table:
    schema = SCHEMAS[table]
    for name, kind in PARTITIONS[table].items():
        schema = schema.append(pa.field(name, kind))
    return schema.empty_table()


def _runs_table(run_dirs: list[Path]) -> pa.Table:
    rows = []
    for folder in run_dirs:
        manifest = json.loads((folder / "manifest.json").read_text())
        config = manifest.get("config", {})
        counts = manifest.get("counts", {})
        rows.append({
            "run_id": manifest["run_id"],
            "created_at": manifest.get("created_at"),
            "model": config.get("model"),
            "model_fingerprint": manifest.get("model", {}).get("fingerprint"),
            "data": config.get("data"),
            "methods": ",".join(config.get("methods", [])),
            "n_layers": manifest.get("model", {}).get("n_layers"),
            "n_docs": counts.get("docs"),
            "n_errors": counts.get("errors"),
            "seconds": manifest.get("timings", {}).get("total_s"),
            "manifest": json.dumps(manifest, sort_keys=True),
        })
    schema = pa.schema([
        ("run_id", pa.string()), ("created_at", pa.string()), ("model", pa.string()),
        ("model_fingerprint", pa.string()), ("data", pa.string()), ("methods", pa.string()),
        ("n_layers", pa.int32()), ("n_docs", pa.int64()), ("n_errors", pa.int64()),
        ("seconds", pa.float64()), ("manifest", pa.string()),
    ])
    return pa.Table.from_pylist(rows, schema=schema)


def run_named(con, name: str, **params):
    """Run ``sql/<name>.sql`` with bound parameters; returns a pandas DataFrame."""
    return con.execute(sql_text(name), params).df()


# The sandbox keeps reads inside the store, but DuckDB lets COPY/EXPORT/ATTACH write into an allowed
# directory: user SQL is therefore held to statements that only read.
READ_ONLY_STATEMENTS = ("SELECT", "EXPLAIN")


def run_sql(con, text: str):
    try:
        for statement in con.extract_statements(text):
            kind = statement.type.name
            if kind not in READ_ONLY_STATEMENTS:
                raise QueryError(f"xai-ray sql runs read-only queries (select, with, from, describe, show, "
                                 f"summarize, explain); refused a {kind} statement")
        return con.execute(text).df()
    except duckdb.Error as err:
        raise QueryError(str(err).splitlines()[0]) from None


def pick_run(con, run_id: str | None) -> dict:
    """The named run (or the newest one) as a dict of its ``runs`` row."""
    runs = con.execute("select * from runs order by created_at").df()
    if runs.empty:
        raise QueryError("the store has no published runs yet")
    if run_id is None:
        return runs.iloc[-1].to_dict()
    chosen = runs[runs.run_id == run_id]
    if chosen.empty:
        raise QueryError(f"no run {run_id!r} in the store; runs: {', '.join(runs.run_id)}")
    return chosen.iloc[0].to_dict()


def topk(con, run_id: str | None = None, method: str = "rollout", layer: int | None = None, k: int = 20,
         min_count: int = 1, by: str = "all"):
    """Top-k words by mean normalised score; ``layer`` defaults to the model's last layer."""
    run = pick_run(con, run_id)
    if method not in run["methods"].split(","):
        raise QueryError(f"run {run['run_id']!r} has no method {method!r}; it has {run['methods']}")
    if by not in ("all", "label", "pred", "correct"):
        raise QueryError(f"--by must be all, label, pred or correct; got {by!r}")
    layer = int(run["n_layers"]) if layer is None else int(layer)
    params = {"run_id": run["run_id"], "method": method, "layer": layer, "min_count": int(min_count), "k": int(k)}
    if by == "all":
        return run_named(con, "topk", **params)
    return run_named(con, "topk_grouped", by=by, **params)


def open_union(store: str | Path, run_ids: list[str], label: str, sandbox: bool = True) -> duckdb.DuckDBPyConnection:
    """The views of several published runs seen as one run named ``label`` (a nightly corpus).

    Each document appears once, in the version of the latest run that scored it (``run_ids`` in
    order, oldest first); ``source_run_id`` names that run. ``runs`` holds one row: the newest
    run's manifest with the runs' counts summed and their ids under ``runs``.
    """
    root = Path(store).resolve()
    if not run_ids:
        raise QueryError("no runs to combine")
    published = set(store_layout.list_runs(root))
    missing = [run_id for run_id in run_ids if run_id not in published]
    if missing:
        raise QueryError(f"no run {missing[0]!r} in the store")
    runs = [store_layout.run_dir(root, run_id) for run_id in run_ids]
    con = duckdb.connect(":memory:")
    con.execute("SET VARIABLE union_label = ?", [label])
    con.execute("SET VARIABLE union_runs = ?", [list(run_ids)])
    for table in ("docs", "errors", "tokens", "words", "faithfulness"):  # docs first: the others read it
        files = sorted(str(f) for run in runs for f in (run / table).rglob("*.parquet"))
        if files:
            con.execute(f"SET VARIABLE files_{table} = ?", [files])
            con.execute(f"create view {table} as {sql_text(f'union_{table}')}")
        else:
            con.from_arrow(_empty(table).append_column("source_run_id", pa.array([], pa.string()))).create_view(table)
    for table in ("heads", "head_similarity"):
        # Means over one run's reviews: they do not add up across runs, so a union shows none
        # (each night's run keeps its own in the store's views).
        con.from_arrow(_empty(table)).create_view(table)
    con.from_arrow(_union_runs_row(runs, label)).create_view("runs")
    if sandbox:
        con.execute("SET allowed_directories = ?", [[str(root)]])
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
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
    manifest.update(run_id=label, counts=counts, runs=[row["run_id"] for row in rows], timings={
        "score_and_write_s": round(score_s, 3), "total_s": round(sum(t.get("total_s") or 0 for t in timings), 3),
        "docs_per_s": round(counts.get("docs", 0) / score_s, 3) if score_s else None})
    newest.update(run_id=label, n_docs=sum(r["n_docs"] or 0 for r in rows),
                  n_errors=sum(r["n_errors"] or 0 for r in rows), seconds=sum(r["seconds"] or 0 for r in rows),
                  manifest=json.dumps(manifest, sort_keys=True))
    return pa.Table.from_pylist([newest], schema=_runs_table([]).schema)
