"""User SQL against a real store: hostile statements generated from a small grammar leave every
file of the store byte-identical; reads wrapped in EXPLAIN / WITH / PIVOT run; the sandbox has
no temp folder; limits and the timeout hold; rows stream, and `| head` ends quietly."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_faults import publish_small_store

from xai_ray import cli
from xai_ray.query.connection import Limits, QueryError, open_store
from xai_ray.query.user_sql import run_sql

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory, scorer_factory):
    scorer = scorer_factory("bert")
    return publish_small_store(tmp_path_factory.mktemp("guarded"), scorer)


def _hashes(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


# The grammar: every wrapper a read may come in, around every statement that writes or loosens
# the sandbox, aimed at the store's own files (a run's parts, its manifest, its part records, a
# new run) and at places outside it (the temp folder, the working directory).
PREFIXES = [
    "",
    "explain ",
    "explain analyze ",
    "EXPLAIN (ANALYZE, FORMAT json) ",
    "/* hi */ explain -- x\n analyze ",
    "with t as (select 1) ",
    "select 1; ",
    "pivot docs on label using count(*); ",
]
BODIES = [
    "copy (select * from docs limit 1) to '{t}' (format parquet)",
    "copy (select 1 as a) to '{t}' (format csv, use_tmp_file false)",
    "copy (pivot docs on label using count(*)) to '{t}'",
    "export database '{t}'",
    "attach '{t}' as other",
    "set variable files_docs = ['{t}']",
    "insert into docs select * from read_parquet('{t}')",
    "create table x as select * from read_text('{t}')",
]
TARGETS = [
    "runs/run_id=r/docs/part-0.parquet",
    "runs/run_id=r/manifest.json",
    "runs/run_id=r/_parts/part-0.json",
    "runs/run_id=fake/manifest.json",
    "runs/run_id=r/tokens/method=raw/layer=1/part-0.parquet",
    "@cwd/.tmp/x.parquet",
    "@cwd/out.csv",
]


def _statements(store: Path, cwd: Path) -> list[str]:
    def where(target: str) -> str:
        return str(cwd / target[5:]) if target.startswith("@cwd/") else str(store / target)

    return [
        prefix + body.format(t=where(target)) for prefix, body, target in itertools.product(PREFIXES, BODIES, TARGETS)
    ]


def test_generated_hostile_statements_change_no_file_of_the_store(store, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # DuckDB's default temp folder would be ./.tmp
    assert (store / "runs/run_id=r/docs/part-0.parquet").is_file()  # the targets are real files
    before = _hashes(store)
    statements = _statements(store, tmp_path)
    assert len(statements) >= 100
    for statement in statements:
        status = cli.main(["sql", "--store", str(store), statement])
        err = capsys.readouterr().err
        assert status == 2 and err.startswith("xai-ray: ") and len(err.splitlines()) == 1, (statement, err)
    assert _hashes(store) == before  # same files, same bytes, none added
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "query, expected",
    [
        ("explain analyze copy (select 1) to 'x.parquet'", "refused EXPLAIN of a COPY statement"),
        ("explain (analyze) insert into docs select * from docs", "refused EXPLAIN of an INSERT statement"),
        (
            "with t as (pivot docs on label using count(*)) insert into docs select * from t",
            "refused a MULTI statement",
        ),
        ("select 1; call checkpoint()", "refused a CALL statement"),
    ],
)
def test_a_wrapper_around_a_write_is_refused_by_name(store, query, expected):
    with pytest.raises(QueryError, match=expected):
        run_sql(open_store(store), query)


def test_reads_in_every_wrapper_run(store):
    con = open_store(store)
    labels = pd.DataFrame({"label": [i % 2 for i in range(8)]})  # scorer_rows labels: 0, 1, 0, 1, ...
    counts = labels.value_counts().to_dict()
    pivoted = run_sql(con, "pivot (select label from docs) on label using count(*)")
    assert pivoted[["0", "1"]].iloc[0].tolist() == [counts[(0,)], counts[(1,)]]
    per_doc = run_sql(con, "with t as (from docs) pivot t on label using count(*)")  # one row per document
    assert len(per_doc) == 8 and per_doc[["0", "1"]].sum().tolist() == [counts[(0,)], counts[(1,)]]
    for query in ["explain analyze select count(*) from docs", "explain analyze pivot docs on label using count(*)"]:
        assert "Total Time" in run_sql(con, query).explain_value.iloc[0]  # it ran: a profile
    assert run_sql(con, "summarize docs").column_name.tolist()[0] == "doc_id"
    assert run_sql(con, "select 1 as a; select count(*) as n from docs").n.tolist() == [8]


def test_the_sandbox_has_no_temp_folder_and_its_limits_are_set(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    con = open_store(store, limits=Limits(memory_limit="300MB", threads=1, timeout_s=5))
    settings = dict(
        run_sql(
            con,
            "select name, value from duckdb_settings() where name in "
            "('temp_directory', 'threads', 'memory_limit', 'enable_external_access')",
        ).values
    )
    assert (
        settings["temp_directory"] == ""
        and settings["threads"] == "1"
        and settings["enable_external_access"] == "false"
    )
    assert settings["memory_limit"].startswith(("286", "300"))  # 300 MB, shown in MiB by DuckDB
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "spill.csv").write_text("a\n1\n")
    for query in [
        "select * from read_csv('.tmp/spill.csv')",
        f"select * from read_csv('{tmp_path}/.tmp/spill.csv')",
        f"select * from read_text('{store}/runs/run_id=r/manifest.json')",
        "set temp_directory = '.tmp'",
    ]:
        with pytest.raises(QueryError):
            run_sql(con, query)
    with pytest.raises(QueryError, match="--memory-limit must be a size"):
        open_store(store, limits=Limits(memory_limit="1GB'; set x='1"))


def test_a_query_past_the_timeout_is_interrupted(store, capsys):
    status = cli.main(
        [
            "sql",
            "--store",
            str(store),
            "--timeout",
            "1",
            "select count(*) from range(100000) a, range(100000) b, range(1000) c",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and err.strip() == "xai-ray: the query ran past --timeout 1 s and was stopped"


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "xai_ray.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, **kwargs
    )


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_rows_stream_and_a_closed_pipe_ends_quietly(store, fmt):
    """10^10 rows: a first row can arrive only if rows are streamed (materialised, the query would
    run into its timeout first); the reader then goes away, as `| head -2` does."""
    process = _cli(
        "sql",
        "--store",
        str(store),
        "--format",
        fmt,
        "--timeout",
        "120",
        "select a.range as a, b.range as b from range(100000) a, range(100000) b",
    )
    first = [process.stdout.readline() for _ in range(2)]
    process.stdout.close()
    err = process.stderr.read().decode()
    status = process.wait(timeout=120)
    assert first[0].split() in ([b"a,b"], [b"["], [b"a", b"b"]) and first[1].strip()
    assert status in (141, 0) and "Traceback" not in err and "BrokenPipe" not in err, err


def test_topk_into_a_closed_pipe_ends_quietly(store):
    process = _cli("topk", "--store", str(store), "--method", "raw", "--layer", "1", "--format", "csv")
    process.stdout.close()  # gone before the first write: the write must fail
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and "Traceback" not in err, err


def test_a_query_over_the_memory_limit_is_one_sentence(store, capsys):
    query = "select count(distinct range) from range(20000000)"  # a hash table of 20 M keys: far over 20 MB
    status = cli.main(["sql", "--store", str(store), "--memory-limit", "20MB", query])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("xai-ray: the query needs more memory than --memory-limit allows (now 19.0 MiB)")
