"""The notebook connection and `xai-ray sql` under hostile use, cases generated per class: every way
into what `open_store` returns x statements that write, attach, set, define or load (refused in one
sentence, the store byte-identical, nothing written beside it); queries built to outgrow DuckDB's
memory limit, the output or the clock x limits (each ends within its limit with one sentence, the
caller's and the query process's memory bounded); limits out of range x flags and keywords."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from test_faults import publish_small_store
from test_sql_guard import _hashes

import xai_ray
from xai_ray import cli
from xai_ray.query.limits import Limits, QueryError, process_cap

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024**2


@pytest.fixture(scope="module")
def store(tmp_path_factory, scorer_factory):
    scorer = scorer_factory("bert")
    return publish_small_store(tmp_path_factory.mktemp("hostile"), scorer)


@pytest.fixture
def unchanged(store, tmp_path, monkeypatch):
    """The store's files, byte for byte, and an empty working folder, before and after the test."""
    monkeypatch.chdir(tmp_path)
    before = _hashes(store)
    yield
    assert _hashes(store) == before
    assert list(tmp_path.iterdir()) == []


# What a connection might be asked to run: each writes, attaches, sets, defines or loads, aimed at
# a part of the store (PART) or at the working folder.
PART = "runs/run_id=r/docs/part-0.parquet"
STATEMENTS = [
    "copy (select 1 as a) to '{part}' (format parquet)",
    "copy (select * from docs) to '{part}' (format parquet, use_tmp_file false)",
    "copy docs to 'out.csv'",
    "export database 'db'",
    "attach 'x.db' as x",
    "attach ':memory:' as m",
    "detach memory",
    "set variable files_docs = ['{part}']",
    "set memory_limit = '100GB'",
    "set threads = 100000",
    "reset threads",
    "set enable_external_access = true",
    "create macro m(a) as a + 1",
    "create or replace view docs as select 1 as doc_id",
    "create table t as select * from docs",
    "insert into docs select * from docs",
    "update extensions",
    "UPDATE EXTENSIONS (httpfs)",
    "install httpfs",
    "load httpfs",
    "pragma enable_profiling",
    "call checkpoint()",
    "checkpoint",
    "use memory",
    "prepare p as select 1",
    "explain analyze copy (select 1) to '{part}'",
    "select 1; create macro m(a) as a",
    "with t as (select 1) insert into docs select * from docs",
]
WAYS = ["sql", "df", "arrow"]


@pytest.mark.parametrize("way, statement", list(itertools.product(WAYS, STATEMENTS)))
def test_every_way_in_refuses_every_statement_that_does_more_than_read(store, unchanged, way, statement):
    con = xai_ray.open_store(store)
    with pytest.raises(QueryError) as refused:
        getattr(con, way)(statement.format(part=store / PART))
    message = str(refused.value)
    assert "refused" in message and "\n" not in message, message


# DuckDB's own ways to run SQL or reach files, on a connection or on a relation: none is there.
DUCKDB_WAYS = [
    "execute",
    "query",
    "cursor",
    "create_view",
    "register",
    "from_arrow",
    "read_parquet",
    "install_extension",
    "load_extension",
    "to_parquet",
    "write_csv",
    "interrupt",
    "_con",
]


@pytest.mark.parametrize("name", DUCKDB_WAYS)
def test_no_duckdb_way_is_exposed(store, name):
    con = xai_ray.open_store(store)
    with pytest.raises(AttributeError, match="read-only connection has no"):
        getattr(con, name)


def test_the_connection_and_its_results_hold_no_duckdb_object(store):
    con = xai_ray.open_store(store)
    frame, table = con.sql("select * from docs"), con.arrow("select * from words")
    assert type(frame) is pd.DataFrame and type(table) is pa.Table and len(frame) == 8
    seen, todo = set(), [con, frame, table]
    for _ in range(4):  # four levels of everything they refer to
        nxt = []
        for obj in todo:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            assert not type(obj).__module__.startswith(("duckdb", "_duckdb")), type(obj)
            nxt += gc.get_referents(obj)
        todo = nxt
    assert con.tables() == [
        "docs",
        "errors",
        "faithfulness",
        "head_similarity",
        "heads",
        "runs",
        "tokens",
        "words",
    ]


def test_reads_bind_parameters_and_a_closed_connection_refuses(store, unchanged):
    with xai_ray.open_store(store) as con:
        assert con.sql("select count(*) as n from docs where label = $l", {"l": 1}).n.tolist() == [4]
        assert con.sql("select count(*) as n from docs where doc_id = ?", ["d3"]).n.tolist() == [1]
        assert con.sql("select * from docs where doc_id = ?", ["d0' or '1'='1"]).empty  # a value stays a value
        with pytest.raises(QueryError, match="parameters must be strings"):
            con.sql("select ?", [object()])
    with pytest.raises(QueryError, match="closed"):
        con.sql("select 1")


def test_a_result_pandas_cannot_hold_is_one_sentence_and_arrow_takes_it(store):
    """A union column came back as pyarrow's ArrowNotImplementedError from ``.sql``."""
    con = xai_ray.open_store(store)
    with pytest.raises(QueryError, match=r"the result has a column pandas cannot hold .*take the rows as Arrow"):
        con.sql("select union_value(k := 1) as u")
    assert con.arrow("select union_value(k := 1) as u").num_rows == 1


# Reads the guard lets through: the sandbox in the query's process stops each at the store's edge.
OUTSIDE = [
    "select * from read_text('{store}/runs/run_id=r/manifest.json')",
    "select * from read_csv('/etc/passwd')",
    "select * from glob('{store}/*')",
    "select * from read_parquet('{store}/**/*.parquet')",
    "select * from duckdb_secrets()",
]


@pytest.mark.parametrize("query", OUTSIDE)
def test_reads_outside_the_store_are_refused_in_the_query_process(store, unchanged, query):
    with pytest.raises(QueryError, match="^(Permission|Parser|Catalog|IO) Error: [^\n]*$"):
        xai_ray.open_store(store, timeout=30).sql(query.format(store=store))


# Queries that outgrow DuckDB's memory limit (a list from range, a long string, an aggregate
# string), the output (rows, one row) or the clock (a cross join, endless recursion).
BUSTERS = [
    "select unnest(range(50000000))",
    "select unnest(range(1000000000))",
    "select repeat('x', 2147483647)",
    "select list(range) from range(50000000)",
    "select string_agg('0123456789', '') from range(100000000)",
    "select repeat('x', 100000000)",
    "select * from range(100000000)",
    "select count(*) from range(100000) a, range(100000) b, range(1000) c",
    "with recursive t(n) as (select 1 union all select n + 1 from t) select count(*) from t",
]
LIMITS = [Limits(memory_limit="64MB", timeout_s=4, max_output="8MB"), Limits(memory_limit="256MB", timeout_s=2)]
# The command, then its own peak memory (VmHWM: ru_maxrss would carry pytest's from before the
# exec) and its query process's (ru_maxrss, KiB: that process starts as a fork of the command).
DRIVER = (
    "import resource, sys; from xai_ray import cli; status = cli.main(sys.argv[1:]); "
    "hwm = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')][0]; "
    "print(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(status)"
)


@pytest.mark.slow  # two interpreters and a query that runs into its limit: 2-6 s each
@pytest.mark.parametrize("query, limits", list(itertools.product(BUSTERS, LIMITS)))
def test_a_query_past_a_limit_ends_within_it_in_one_sentence(store, unchanged, query, limits):
    flags = ["--memory-limit", limits.memory_limit, "--timeout", f"{limits.timeout_s:g}"]
    flags += ["--max-output", limits.max_output, "--format", "csv"]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, "sql", "--store", str(store), *flags, query],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    seconds = time.monotonic() - started
    *said, usage = done.stderr.decode().splitlines()
    own_kib, query_kib = map(int, usage.split())
    assert done.returncode == 2 and len(said) == 1 and said[0].startswith("xai-ray: "), done.stderr
    assert seconds < limits.timeout_s + 15  # its timeout, plus starting two interpreters on a busy machine
    assert len(done.stdout) <= limits.output_bytes + MiB  # at most the batches under --max-output
    assert own_kib * 1024 < 500 * MiB, own_kib  # the command holds a batch at a time
    assert query_kib * 1024 < process_cap(limits) + 400 * MiB, query_kib  # interpreter + views + the cap


@pytest.mark.slow
def test_the_notebook_connection_has_the_same_limits(store, unchanged):
    con = xai_ray.open_store(store, timeout=2, memory_limit="64MB")
    rss = _rss()
    for query in BUSTERS[:4]:
        with pytest.raises(QueryError, match="memory|--timeout|--max-output|a row may hold") as stopped:
            con.sql(query)
        assert "\n" not in str(stopped.value)
    started = time.monotonic()
    with pytest.raises(QueryError, match="^the query ran past --timeout 2 s and was stopped$"):
        con.sql(BUSTERS[-1])
    assert time.monotonic() - started < 10
    assert _rss() - rss < 100 * MiB  # the kernel's own memory: the rows never reached it


def _rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


BAD_FLAGS = [
    ("--timeout", "inf"),
    ("--timeout", "nan"),
    ("--timeout", "-1"),
    ("--timeout", "0"),
    ("--timeout", "1e9"),
    ("--threads", "0"),
    ("--threads", "-3"),
    ("--threads", "100000"),
    ("--memory-limit", "1B"),
    ("--memory-limit", "1000TB"),
    ("--memory-limit", "lots"),
    ("--memory-limit", "1GB'; set x='1"),
    ("--max-output", "10B"),
    ("--max-output", "-1GB"),
]


@pytest.mark.parametrize(
    "command, flag, value",
    [
        (command, *bad)
        for command in ("sql", "topk")
        for bad in BAD_FLAGS
        if command == "sql" or bad[0] != "--max-output"
    ],
)
def test_a_limit_out_of_range_is_one_sentence_naming_its_flag(store, capsys, command, flag, value):
    args = ["--store", str(store), f"{flag}={value}"] + (["select 1"] if command == "sql" else [])
    status = cli.main([command, *args])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith(f"xai-ray: {flag} must be"), err


@pytest.mark.parametrize(
    "keywords",
    [
        {"timeout": float("inf")},
        {"timeout": True},
        {"threads": 10**5},
        {"threads": 2.5},
        {"memory_limit": 2**30},
        {"memory_limit": "1B"},
        {"max_output": "1KB"},
    ],
)
def test_open_store_refuses_limits_out_of_range(store, keywords):
    with pytest.raises(QueryError, match="^--[a-z-]+ must be [^\n]*$"):
        xai_ray.open_store(store, **keywords)


def test_the_timeout_counts_the_query_not_the_start(store):
    """`--timeout 1` stopped even `select 1`: its clock started with the child process, whose start
    and the store's views took about 3 s on a busy machine. It now starts when the query does."""
    con = xai_ray.open_store(store, timeout=1)  # the least the flags allow
    for _ in range(3):
        assert con.sql("select 42 as answer").answer.tolist() == [42]
    with pytest.raises(QueryError, match=r"^the query ran past --timeout 1 s and was stopped$"):
        con.sql("select count(*) from range(10000000000) a, range(1000) b")
