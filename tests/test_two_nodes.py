"""A job on a local two-node Ray cluster: a head (``ray start --head``) and a second node joining it
(``ray start --address``), both on loopback, each with one CPU. The run's parts are written by Ray
workers on both nodes (each part's record names the node that wrote it) and the published run
holds every document exactly once: checked against the corpus, not against what the run says."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_cluster import _free_port, _kill_leftovers

from xai_ray.query.connection import open_store

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ray]
N_DOCS = 24


def _ray_start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen(
        ["ray", "start", "--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1", *args],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _nodes(address: str, env: dict) -> list[str]:
    """The ids of the cluster's live nodes, asked from a driver of its own."""
    script = (
        f"import json, ray; ray.init(address={address!r}, logging_level='ERROR'); "
        "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive']]))"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head and a second node (token-authenticated, one CPU each); stopped by SIGTERM to the two
    ``ray start --block`` processes, leftovers (found by the temp dirs) killed by pid."""
    token = tmp_path_factory.mktemp("auth") / "token"
    token.write_text(secrets.token_hex(16))
    temps = [Path(tempfile.mkdtemp(prefix="xr2-", dir="/tmp")) for _ in range(2)]  # short: socket paths
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER: a local Ray started earlier in this process (runtime._loopback_only)
    # switched clusters off for its children; a second node needs them on.
    leave_out = {"RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env = {k: v for k, v in os.environ.items() if k not in leave_out}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), RAY_USAGE_STATS_ENABLED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])  # this checkout's xai_ray
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    address = f"127.0.0.1:{_free_port()}"
    head = _ray_start(
        ["--head", "--port", address.split(":")[1], "--include-dashboard", "false", "--temp-dir", str(temps[0])],
        env,
        temps[0] / "start.log",
    )
    started = [head]
    try:
        deadline = time.monotonic() + 120
        second = None
        while True:
            assert head.poll() is None, (temps[0] / "start.log").read_text()[-3000:]
            if (
                second is None
                and subprocess.run(
                    ["ray", "status", "--address", address], env=env, capture_output=True, timeout=60
                ).returncode
                == 0
            ):
                second = _ray_start(["--address", address, "--temp-dir", str(temps[1])], env, temps[1] / "start.log")
                started.append(second)
            if second is not None:
                assert second.poll() is None, (temps[1] / "start.log").read_text()[-3000:]
                if len(_nodes(address, env)) == 2:
                    break
            assert time.monotonic() < deadline, "the two-node cluster did not come up"
            time.sleep(2)
        yield {"address": address, "env": env}
    finally:
        for process in reversed(started):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        for temp in temps:
            _kill_leftovers(str(temp))
            shutil.rmtree(temp, ignore_errors=True)


def test_workers_on_both_nodes_write_parts_and_every_document_is_published_once(two_nodes, tiny_bert_dir, tmp_path):
    rng = np.random.default_rng(5)
    words = ["the", "film", "was", "good", "bad", "not", "very", "great", "plot", "boring", "story", "acting"]
    ids = [f"n{i:02d}" for i in range(N_DOCS)]
    texts = [" ".join(rng.choice(words, size=rng.integers(4, 14))) for _ in range(N_DOCS)]
    labels = rng.integers(0, 2, N_DOCS)
    data = tmp_path / "corpus.parquet"
    pd.DataFrame({"id": ids, "text": texts, "label": labels}).to_parquet(data)
    store = tmp_path / "store"
    command = [
        *(sys.executable, "-m", "xai_ray.cli", "run", "--data", str(data), "--model", tiny_bert_dir),
        *("--store", str(store), "--run-id", "two-nodes", "--actors", "2", "--batch-size", "2"),
        *("--max-length", "32", "--methods", "raw,rollout", "--no-report", "--set", "part_rows=64"),  # 2 reviews a part
        *("--set", "shared_store=true"),  # both nodes see this machine's disk
        *("--set", "driver_rows=0"),  # streamed: workers write the parts (a small corpus's driver writes them all)
    ]
    env = {**two_nodes["env"], "RAY_ADDRESS": two_nodes["address"]}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run = store / "runs" / "run_id=two-nodes"
    records = [json.loads(p.read_text()) for p in sorted((run / "_parts").glob("part-*.json"))]
    scored = [r for r in records if r["doc_ids"]]
    writers = {r["node"] for r in scored}
    assert writers == set(_nodes(two_nodes["address"], two_nodes["env"])), writers  # both nodes wrote parts
    by_node = {node: sum(len(r["doc_ids"]) for r in scored if r["node"] == node) for node in writers}
    assert all(n > 0 for n in by_node.values()) and sum(by_node.values()) == N_DOCS
    held = [doc_id for r in scored for doc_id in r["doc_ids"]]
    assert sorted(held) == ids  # no part holds a document another part holds

    con = open_store(store)
    docs = con.execute("select doc_id, text from docs where run_id = 'two-nodes' order by doc_id").df()
    assert docs.doc_id.tolist() == ids and docs.text.tolist() == [t for _, t in sorted(zip(ids, texts))]
    tokens = con.execute(
        "select doc_id, method, layer, count(*) as n, count(distinct position) as k from tokens "
        "where run_id = 'two-nodes' group by all"
    ).df()
    assert len(tokens) == N_DOCS * 2 * 2 and (tokens.n == tokens.k).all()  # each token once per slice
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["counts"]["docs"] == N_DOCS and manifest["counts"]["duplicates"] == 0
    assert sorted(manifest["nodes"]) == sorted(writers)
