"""Faults on a real local Ray cluster: a scoring actor killed mid-run, the driver killed mid-run and
resumed, and a hostile corpus end to end. Each run must hold every document exactly once.

Actors are found through the GCS actor table: Ray's state API (``ray.util.state``) is served by
the dashboard, which xai-ray does not start (nothing of ours listens beyond loopback).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from xai_ray import cli, pipeline, runtime
from xai_ray.config import resolve
from xai_ray.data.corpus import read_corpus
from xai_ray.query.connection import open_store

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"
SCORER_ACTOR = "ScorerHost"  # pipeline.pool.HOST
pytestmark = [pytest.mark.slow, pytest.mark.ray]


def scorer_actors() -> list[dict]:
    import ray._private.state

    return [a for a in ray._private.state.actors().values() if a["ActorClassName"] == SCORER_ACTOR]


def assert_every_document_once(store, run_id, doc_ids, n_errors=0):
    """docs: each id once; tokens and words: each (document, method, layer) has each position/word once."""
    con = open_store(store)
    docs = con.execute("select doc_id, n_tokens, n_words from docs where run_id = $r", {"r": run_id}).df()
    errors = con.execute("select doc_id from errors where run_id = $r", {"r": run_id}).df()
    assert docs.doc_id.is_unique and len(errors) == n_errors
    assert sorted(docs.doc_id.tolist() + errors.doc_id.tolist()) == sorted(doc_ids)
    methods_layers = con.execute("select distinct method, layer from words where run_id = $r", {"r": run_id}).df()
    for table, column, size in (("tokens", "position", "n_tokens"), ("words", "word_id", "n_words")):
        got = (
            con.execute(
                f"select doc_id, method, layer, count(*) as n, count(distinct {column}) as k, "
                f"min({column}) as lo, max({column}) as hi from {table} where run_id = $r group by all",
                {"r": run_id},
            )
            .df()
            .merge(docs, on="doc_id")
        )
        assert len(got) == len(docs) * len(methods_layers), table
        assert (got.n == got[size]).all() and (got.k == got[size]).all(), table
        assert (got.lo == 0).all() and (got.hi == got[size] - 1).all(), table
    return con


@pytest.mark.skipif(not IMDB.is_file(), reason="needs the IMDB parquet in ../shared/data")
def test_a_scoring_actor_killed_mid_run_loses_and_doubles_nothing(ray_cluster, tmp_path):
    cfg = resolve(
        None,
        {
            "data": str(IMDB),
            "limit": 64,
            "model": "minilm",
            "max_length": 96,
            "actors": 2,
            "store": str(tmp_path),
            "batch_size": 4,
            "run_id": "killed-actor",
        },
        ["part_rows=384", "driver_rows=0"],  # 4 documents a part: parts keep coming after the kill; streamed
    )
    corpus = read_corpus(cfg.data, cfg.split, limit=cfg.limit, seed=cfg.seed)
    screened = pipeline.screen(pipeline.read(cfg))
    killed, after_kill = [], []

    def kill_one_actor_after_the_first_part(records):
        for record in records:
            if killed:
                after_kill.append(len(record["doc_ids"]))
            yield record
            if not killed:
                alive = [a for a in scorer_actors() if a["State"] == "ALIVE"]
                os.kill(alive[0]["Pid"], signal.SIGKILL)
                killed.append(alive[0])

    parts = pipeline.write_parts(pipeline.score(screened, cfg), cfg, "killed-actor")
    records = kill_one_actor_after_the_first_part(parts)
    run_dir, manifest = pipeline.write(records, cfg, "killed-actor", n_input=screened.n_input, screened=screened)
    assert killed and sum(after_kill) > 0, "the actor must die while documents are still to come"
    restarted = [a for a in scorer_actors() if a["ActorID"] == killed[0]["ActorID"]]
    assert restarted and restarted[0]["NumRestarts"] >= 1
    assert manifest["counts"]["docs"] == len(corpus) and manifest["counts"]["errors"] == 0
    assert len(manifest["model"]["fingerprint"]) == 64
    assert_every_document_once(tmp_path, "killed-actor", corpus.doc_id.tolist())


@pytest.mark.skipif(not IMDB.is_file(), reason="needs the IMDB parquet in ../shared/data")
def test_a_driver_killed_mid_run_resumes_without_duplicates(ray_cluster, tmp_path, caplog):
    store, run_id, limit = tmp_path / "store", "killed-driver", 160
    command = [
        sys.executable,
        "-m",
        "xai_ray.cli",
        "run",
        "--data",
        str(IMDB),
        "--limit",
        str(limit),
        "--model",
        "minilm",
        "--max-length",
        "128",
        "--actors",
        "1",
        "--batch-size",
        "4",
        "--store",
        str(store),
        "--run-id",
        run_id,
        "--no-report",
        "--set",
        "part_rows=200",
    ]
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    parts = store / "_staging" / f"run_id={run_id}" / "_parts"
    try:
        deadline = time.monotonic() + 240
        while len(list(parts.glob("part-*.json"))) < 2:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no part was committed in time"
            time.sleep(0.2)
        os.kill(driver.pid, signal.SIGKILL)  # the driver dies without a chance to clean up
        driver.wait(timeout=30)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # the local Ray cluster that driver started
        except ProcessLookupError:
            pass
    assert not (store / "runs" / f"run_id={run_id}").exists()
    committed = sum(len(json.loads(p.read_text())["doc_ids"]) for p in parts.glob("part-*.json"))
    assert 0 < committed < limit

    caplog.set_level(logging.INFO, logger="xai_ray")
    assert cli.main(["run", "--resume", run_id, "--store", str(store)]) == 0
    manifest = json.loads((store / "runs" / f"run_id={run_id}" / "manifest.json").read_text())
    resumed = manifest["resumed"]
    note = (
        f"driver killed after {committed} committed documents; the resumed run reused {resumed['docs']} "
        f"in {resumed['parts']} part(s) and scored {resumed['docs_scored_now']} of {limit}"
    )
    logging.getLogger("xai_ray").info(note)
    print(note)
    assert resumed["docs"] >= committed and resumed["docs_scored_now"] == limit - resumed["docs"]
    assert f"resuming run {run_id}" in caplog.text
    assert manifest["counts"]["docs"] == limit and manifest["counts"]["duplicates"] == 0
    assert manifest["config"]["max_length"] == 128 and manifest["config"]["limit"] == limit  # its own settings
    assert len(manifest["model"]["fingerprint"]) == 64  # one model across both attempts
    expected = read_corpus(str(IMDB), limit=limit).doc_id.tolist()
    con = assert_every_document_once(store, run_id, expected)
    sums = con.execute(
        "select sum(score) as s from words where run_id = $r group by doc_id, method, layer", {"r": run_id}
    ).df()
    np.testing.assert_allclose(sums.s, 1.0, atol=1e-4)


# layout 2: its read errors' part was written in layout 3; 100000 tokens: the tiny model takes 64
@pytest.mark.parametrize(("store_layout", "asked", "took"), [(3, 32, 32), (2, 100_000, 64)])
def test_a_hostile_corpus_runs_to_the_end_with_every_row_accounted_for(
    ray_cluster, tmp_path, tiny_bert_dir, store_layout, asked, took
):
    huge = "the film was good and the plot was fine. " * 26_000  # about 1 MB
    # "null" is an id, not a missing value; a CSV's empty field is an empty text
    rows = [
        ("ok1", "the film was good", "1"),
        ("null", None, "0"),
        ("empty", "", "1"),
        ("blank", " \t ", "0"),
        ("huge", huge, "1"),
        ("ok2", "<script>alert('x')</script> bad movie", "0"),
        ("ok1", "a second row with the same id", "1"),
        ("label", "fine plot", "7"),
        ("emoji", "\U0001f600 great \u202e acting \u200b", "1"),
    ]
    lines = ["id,text,label"] + [f'{i},"{t}",{lab}' if t is not None else f"{i},,{lab}" for i, t, lab in rows]
    raw = "\n".join(lines).encode() + b'\nbytes,"bad \xff\xfe film",0\n'
    source = tmp_path / "hostile.csv"
    source.write_bytes(raw)
    store = tmp_path / "store"
    assert (
        cli.main(
            [
                "run",
                "--data",
                str(source),
                "--model",
                tiny_bert_dir,
                "--store",
                str(store),
                "--run-id",
                "hostile",
                "--actors",
                "1",
                "--max-length",
                str(asked),
                "--no-report",
                "--set",
                f"store_layout={store_layout}",
            ]
        )
        == 0
    )
    con = open_store(store)
    docs = con.execute("select doc_id, truncated, text from docs").df().set_index("doc_id")
    errors = con.execute("select doc_id, stage, reason from errors").df()
    assert sorted(docs.index) == ["emoji", "huge", "ok1", "ok2"]
    assert docs.at["huge", "truncated"] and not docs.at["ok1", "truncated"]
    assert docs.at["ok1", "text"] == "the film was good" and len(docs.at["huge", "text"]) == len(huge)
    assert sorted(errors.doc_id) == ["blank", "bytes", "empty", "label", "null", "ok1"]
    assert set(errors.stage) == {"read"}
    reasons = dict(zip(errors.doc_id, errors.reason))
    assert reasons["null"] == reasons["empty"] == reasons["blank"] == "text is empty or whitespace only"
    assert "not valid UTF-8" in reasons["bytes"] and reasons["label"].startswith("label 7 is not one")
    assert reasons["ok1"].startswith("duplicate doc_id: row 6 repeats the id of row 0")
    assert len(docs) + len(errors) == len(rows) + 1  # every input row, once
    manifest = json.loads((store / "runs" / "run_id=hostile" / "manifest.json").read_text())
    assert manifest["model"]["allow_pickle"] is False and manifest["model"]["trust_remote_code"] is False
    assert manifest["store_layout"] == store_layout
    assert manifest["config"]["max_length"] == asked and manifest["model"]["max_length"] == took
    assert manifest["counts"] == {**manifest["counts"], "docs": 4, "errors": 6, "duplicates": 0}
    words = con.execute("select doc_id, method, layer, sum(score) as s from words group by all").df()
    np.testing.assert_allclose(words.s, 1.0, atol=1e-5)
    assert_every_document_once(store, "hostile", docs.index.tolist() + errors.doc_id.tolist(), n_errors=6)


def test_the_pipeline_starts_ray_without_a_dashboard(ray_cluster, monkeypatch):
    calls = []
    monkeypatch.setattr(ray_cluster, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_cluster, "init", lambda **kwargs: calls.append(kwargs))
    runtime.ensure_ray()
    assert calls and calls[0]["include_dashboard"] is False


LISTENERS = """
import ipaddress, json, socket, struct, subprocess, ray, ray.data
from xai_ray.runtime import ensure_ray


def listening():  # every TCP socket in LISTEN state in this network namespace, from /proc
    found = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(name).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                raw = bytes.fromhex(local.split(":")[0])
                words = struct.unpack("<" + "I" * (len(raw) // 4), raw)
                found.add(str(ipaddress.ip_address(struct.pack(">" + "I" * len(words), *words))))
    return sorted(found)


ensure_ray()
ray.data.from_items([{"a": i} for i in range(4)]).map_batches(lambda b: b).take_all()
addresses = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
print(json.dumps({"node": ray.util.get_node_ip_address(), "listening": listening(), "addresses": addresses}))
ray.shutdown()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/unshare").exists(), reason="needs root and unshare")
def test_a_local_cluster_listens_on_loopback_only(tmp_path):
    """In a private network namespace that also has a routable-looking address (10.77.0.1, with a
    default route that loops back, so nothing can leave), every socket the pipeline's local Ray
    cluster listens on is bound to loopback."""
    setup = (
        "ip link set lo up && ip addr add 10.77.0.1/32 dev lo && ip route add default dev lo src 10.77.0.1"
        f' && exec {sys.executable} -c "$0"'
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        ["unshare", "-n", "bash", "-c", setup, LISTENERS],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "inet 10.77.0.1/32" in seen["addresses"]  # there was an address to listen on
    assert seen["node"] == "127.0.0.1" and seen["listening"]
    for address in map(ipaddress.ip_address, seen["listening"]):
        address = getattr(address, "ipv4_mapped", None) or address  # ::ffff:7f00:1 is 127.0.0.1
        assert address.is_loopback, seen["listening"]


@pytest.mark.skipif(not IMDB.is_file(), reason="needs the IMDB parquet in ../shared/data")
def test_a_run_sent_sigterm_says_so_keeps_its_parts_and_resumes(ray_cluster, tmp_path):
    """SIGTERM (`timeout`, systemd, `docker stop`) ended a run with exit 1 and no sentence (ray.init
    sets its own handler); it now stops as Ctrl-C does: one line, exit 143, its parts kept."""
    store, run_id, limit = tmp_path / "store", "terminated", 80
    command = [sys.executable, "-m", "xai_ray.cli", "run", "--data", str(IMDB), "--limit", str(limit)]
    command += ["--model", "minilm", "--max-length", "64", "--actors", "1", "--batch-size", "4"]
    command += ["--store", str(store), "--run-id", run_id, "--no-report", "--set", "part_rows=20"]
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    parts = store / "_staging" / f"run_id={run_id}" / "_parts"
    try:
        deadline = time.monotonic() + 240
        while not list(parts.glob("part-*.json")):
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no part was committed in time"
            time.sleep(0.2)
        os.kill(driver.pid, signal.SIGTERM)
        assert driver.wait(timeout=60) == 143, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # anything of its Ray left
        except ProcessLookupError:
            pass
    said = (tmp_path / "driver.log").read_text()
    assert "xai-ray: terminated (SIGTERM) (a run keeps its committed parts" in said, said[-2000:]
    assert f"`xai-ray run --resume {run_id} --store {store}` finishes it" in said  # its own id, not a placeholder
    assert "Traceback" not in said
    assert list(parts.glob("part-*.json")) and not (store / "runs" / f"run_id={run_id}").exists()
    assert cli.main(["run", "--resume", run_id, "--store", str(store), "--no-report"]) == 0
    assert_every_document_once(store, run_id, read_corpus(str(IMDB), limit=limit).doc_id.tolist())


@pytest.mark.ray
def test_sigterm_while_ray_starts_is_one_sentence(tmp_path):
    """SIGTERM in the seconds ray.init runs met Ray's own handler, `sys.exit(15)`: the command
    ended with exit 15 and no word. Now it is stopped as SIGTERM anywhere else stops it. The signal
    is sent the moment ray.init sets its handler (ray._private.utils.set_sigterm_handler)."""
    data = tmp_path / "c.csv"
    data.write_text("id,text,label\na,a fine film,1\nb,a dull film,0\n")
    script = tmp_path / "term.py"
    script.write_text(
        "import os, signal, sys\n"
        "import ray._private.utils as utils\n"
        "set_handler = utils.set_sigterm_handler\n"
        "def set_and_send(handler):\n"
        "    set_handler(handler)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "utils.set_sigterm_handler = set_and_send\n"
        "from xai_ray.cli.main import console\n"
        "sys.argv = ['xai-ray', *sys.argv[1:]]\n"
        "sys.exit(console())\n"
    )
    command = [sys.executable, str(script), "run", "--data", str(data), "--model", "minilm", "--max-length", "32"]
    command += ["--store", str(tmp_path / "store"), "--run-id", "t", "--no-report"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )
    try:
        said, _ = driver.communicate(timeout=120)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # anything of its Ray left
        except ProcessLookupError:
            pass
    assert driver.returncode == 143, said[-3000:]
    assert "xai-ray: terminated (SIGTERM) (a run keeps its committed parts" in said, said[-3000:]
    assert "`xai-ray run --resume t --store" in said and "Traceback" not in said
