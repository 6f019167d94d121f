"""A notebook keeps Ray and its scoring actors warm: the second ``xai_ray.run`` with the same model
scores on the same actor processes, another model gets new ones, ``xai_ray.shutdown()`` ends them.
And a run's log shows progress lines before its first batch is done."""

from __future__ import annotations

import re

import pandas as pd
import pytest

import xai_ray
from xai_ray import progress
from xai_ray.pipeline import pool

pytestmark = [pytest.mark.slow, pytest.mark.ray]

TEXTS = [f"review {i}: the plot was {'good' if i % 2 else 'boring'} and the acting {i}" for i in range(12)]


def scorer_actors(ray) -> dict[str, int]:
    """The live pool actors in Ray's actor table: id -> process id."""
    actors = ray._private.state.actors().values()
    return {a["ActorID"]: a["Pid"] for a in actors if a["ActorClassName"] == pool.HOST and a["State"] == "ALIVE"}


def notebook_run(data, model, store, run_id):
    return xai_ray.run(
        data=data,
        model=model,
        methods=["raw", "rollout"],
        store=store,
        max_length=32,
        batch_size=4,
        actors=2,
        report=False,
        run_id=run_id,
    )


def test_the_second_run_reuses_the_warm_actors(ray_cluster, tiny_bert_dir, tiny_distilbert_dir, tmp_path, monkeypatch):
    xai_ray.shutdown()  # a Ray an earlier module's notebook run started (the fixture joined it) ends here
    if not ray_cluster.is_initialized():  # this module's Ray is then started as a user's ray.init is
        ray_cluster.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    data = tmp_path / "reviews.parquet"
    pd.DataFrame({"id": [f"r{i}" for i in range(12)], "text": TEXTS, "label": [i % 2 for i in range(12)]}).to_parquet(
        data
    )
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.25)  # the heartbeat's 30 s, shortened
    first = notebook_run(data, tiny_bert_dir, tmp_path / "store", "first")
    warm = scorer_actors(ray_cluster)
    assert len(warm) == 2 and sorted(warm.values()) == sorted(pool.current().pids())

    # Progress came before the first batch was done: lines with 0 documents, then the final count.
    logged = (tmp_path / "store" / "logs" / "first.log").read_text()
    lines = re.findall(r"scoring: (\d+)/12 documents.*", logged)
    assert lines[0] == "0" and lines[-1] == "12", lines
    assert "waiting for the first batch" in logged

    second = notebook_run(data, tiny_bert_dir, tmp_path / "store", "second")
    assert scorer_actors(ray_cluster) == warm  # same actors, same processes: nothing started again
    # Each manifest says where the actors' start went, and whether they were started for this run.
    started, reused = first.manifest["timings"]["actor_start"], second.manifest["timings"]["actor_start"]
    assert (started["actors"], started["warm"], reused["warm"]) == (2, False, True)
    assert started["imports"] > 0 and started["model"] > 0 and started["process"] >= 0
    assert started["device"] < started["model"]  # no CUDA context on a CPU actor
    assert {k: reused[k] for k in ("imports", "model")} == {k: started[k] for k in ("imports", "model")}
    assert first.counts["docs"] == second.counts["docs"] == 12
    assert first.docs()[["doc_id", "pred"]].equals(second.docs()[["doc_id", "pred"]])  # same scores

    other = notebook_run(data, tiny_distilbert_dir, tmp_path / "store", "other-model")
    assert other.counts["docs"] == 12
    fresh = scorer_actors(ray_cluster)
    assert len(fresh) == 2 and not set(fresh) & set(warm)  # another model: the old pool released

    # The same folder, fine-tuned again in place (here: another model's files copied over it): new
    # actors, and the run's scores are the new weights' (they kept the old ones before).
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    before = notebook_run(data, str(folder), tmp_path / "store", "before")
    held = scorer_actors(ray_cluster)
    for item in folder.iterdir():
        item.unlink()
    shutil.copytree(tiny_distilbert_dir, folder, dirs_exist_ok=True)
    after = notebook_run(data, str(folder), tmp_path / "store", "after")
    assert not set(scorer_actors(ray_cluster)) & set(held)
    assert after.manifest["model"]["fingerprint"] == other.manifest["model"]["fingerprint"]
    assert after.manifest["model"]["fingerprint"] != before.manifest["model"]["fingerprint"]
    assert after.docs()[["doc_id", "pred"]].equals(other.docs()[["doc_id", "pred"]])

    xai_ray.shutdown()
    assert pool.current() is None and not scorer_actors(ray_cluster)
    assert ray_cluster.is_initialized()  # the Ray this module started (as a user's ray.init) stays up


def test_the_command_line_lets_ray_go_before_its_summary_and_report(tiny_bert_dir, tmp_path):
    """`xai-ray run` ends with its run: Ray (actors, workers, the local head) shuts down on a thread
    while the summary and the report are made, and the command still exits with nothing left."""
    import subprocess
    import sys

    data = tmp_path / "reviews.parquet"
    pd.DataFrame({"id": [f"r{i}" for i in range(12)], "text": TEXTS, "label": [i % 2 for i in range(12)]}).to_parquet(
        data
    )
    store = tmp_path / "store"
    args = ["run", "--data", str(data), "--model", tiny_bert_dir, "--store", str(store), "--run-id", "cli"]
    args += ["--max-length", "32", "--batch-size", "4", "--actors", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "xai_ray.cli", "-v", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    released = err.index("letting Ray go")
    assert released < err.index("INFO run cli: {")  # before the summary is computed
    assert "report: " in done.stdout and (store / "runs" / "run_id=cli" / "report.html").is_file()


def test_relative_paths_after_a_change_of_folder(
    ray_cluster, tiny_bert_dir, tiny_distilbert_dir, tmp_path, monkeypatch
):
    """After ``os.chdir`` (a notebook's ``%cd``) a run's relative corpus and model were read by Ray's
    workers and actors in the folder Ray started in: another folder's reviews and weights, under
    this folder's model description. And ``xai_ray.shutdown`` ends the Ray that xai_ray started."""
    import shutil

    ray_cluster.shutdown()  # xai_ray starts Ray itself this time
    for name, model, n in (("a", tiny_bert_dir, 4), ("b", tiny_distilbert_dir, 6)):
        (tmp_path / name).mkdir()
        shutil.copytree(model, tmp_path / name / "m")
        frame = pd.DataFrame(
            {"id": [f"{name}{i}" for i in range(n)], "text": TEXTS[:n], "label": [i % 2 for i in range(n)]}
        )
        frame.to_parquet(tmp_path / name / "c.parquet")
    monkeypatch.chdir(tmp_path / "a")
    notebook_run("c.parquet", "m", tmp_path / "store", "in-a")
    monkeypatch.chdir(tmp_path / "b")
    relative = notebook_run("c.parquet", "m", tmp_path / "store", "in-b")
    absolute = notebook_run(str(tmp_path / "b" / "c.parquet"), str(tmp_path / "b" / "m"), tmp_path / "store", "abs")
    assert sorted(relative.docs().doc_id) == [f"b{i}" for i in range(6)]
    assert relative.manifest["config"]["data"] == str(tmp_path / "b" / "c.parquet")
    assert relative.manifest["model"]["fingerprint"] == absolute.manifest["model"]["fingerprint"]
    same = ["doc_id", "pred"]
    assert (
        relative.docs()[same]
        .sort_values("doc_id")
        .reset_index(drop=True)
        .equals(absolute.docs()[same].sort_values("doc_id").reset_index(drop=True))
    )
    assert relative.words("raw", 1)["score"].sum() == pytest.approx(absolute.words("raw", 1)["score"].sum(), rel=1e-6)
    xai_ray.shutdown()
    assert not ray_cluster.is_initialized()  # the Ray xai_ray started is gone with its actors
    # ours ended behind xai_ray's back and the user's own started: xai_ray.shutdown leaves that one up
    from xai_ray import runtime

    runtime.ensure_ray()
    ray_cluster.shutdown()
    ray_cluster.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    xai_ray.shutdown()
    assert ray_cluster.is_initialized()


def test_actors_past_what_one_machines_cpus_hold_are_capped(ray_cluster, caplog):
    """On one machine the actors hold no CPU in Ray's books: `--actors 100` on 2 CPUs started 100
    processes (11 GB) and scored nothing in minutes. CPU actors are capped there, and it is said."""
    cpus = ray_cluster.cluster_resources()["CPU"]  # the Ray this module's tests run on (1 or 2 CPUs)
    n = int(cpus)
    assert pool.actor_count(100, 0.0, 1) == n
    said = f"actors 100: this machine has {cpus:g} CPU(s), for scoring actors of 1 CPU(s) each; starting {n}"
    assert caplog.text.count(said) == 1
    assert pool.actor_count(100, 0.0, 1) == n and caplog.text.count(said) == 1  # said once
    assert pool.actor_count(None, 0.0, 1) == n and pool.actor_count(1, 0.0, 1) == 1
    assert pool.actor_count(2 * n, 0.0, 0.5) == 2 * n and pool.actor_count(2 * n + 1, 0.0, 0.5) == 2 * n  # half a CPU
    assert pool.actor_count(3, 0.0, 4 * n) == 1  # more CPUs an actor than the machine has: one
    assert pool.actor_count(3, 0.25, 1) == 3  # GPU actors ask for their share of a GPU: Ray places them
