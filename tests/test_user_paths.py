"""Every path a user names that the system refuses (a run id too long for a folder name, a store
that is a file or on a read-only file system, an --out that is a folder) ends in one sentence,
exit status 2, and nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from xai_ray import cli

ROOT = Path(__file__).resolve().parents[1]


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def _one_sentence(argv, capsys) -> str:
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("xai-ray: "), (argv, err)
    return err


@pytest.fixture()
def corpus(tmp_path):
    source = tmp_path / "c.csv"
    pd.DataFrame({"id": ["a", "b"], "text": ["good film", "bad film"], "label": [1, 0]}).to_csv(source, index=False)
    return source


def test_a_run_id_too_long_for_a_folder_name(tmp_path, corpus, tiny_bert_dir, capsys):
    store = tmp_path / "store"
    err = _one_sentence(
        [
            "run",
            "--data",
            str(corpus),
            "--model",
            tiny_bert_dir,
            "--store",
            str(store),
            "--run-id",
            "r" * 300,
            "--no-report",
        ],
        capsys,
    )
    assert "run_id is 300 bytes long; at most 200" in err
    assert not store.exists()


def test_a_store_that_is_a_file(tmp_path, corpus, tiny_bert_dir, capsys):
    store = tmp_path / "store"
    store.write_text("not a folder")
    err = _one_sentence(
        ["run", "--data", str(corpus), "--model", tiny_bert_dir, "--store", str(store), "--no-report"], capsys
    )
    assert "is a file, not a folder" in err and store.read_text() == "not a folder"
    for command in (["sql", "select 1"], ["topk"], ["report", "--out", str(tmp_path / "r.html")]):
        err = _one_sentence([command[0], "--store", str(store), *command[1:]], capsys)
        assert "is not a folder" in err
    assert _files(tmp_path) == ["c.csv", "store"]


def _read_only_mount(tmp_path: Path) -> Path | None:
    folder = tmp_path / "ro"
    folder.mkdir()
    probe = (
        subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {folder}"], capture_output=True)
        if shutil.which("unshare")
        else None
    )
    return folder if probe is not None and probe.returncode == 0 else None


def test_a_store_on_a_read_only_file_system(tmp_path, corpus, tiny_bert_dir):
    folder = _read_only_mount(tmp_path)
    if folder is None:
        pytest.skip("cannot mount a read-only file system here (needs root and unshare)")
    store = folder / "store"
    command = [
        sys.executable,
        "-m",
        "xai_ray.cli",
        "run",
        "--data",
        str(corpus),
        "--model",
        tiny_bert_dir,
        "--store",
        str(store),
        "--no-report",
    ]
    script = f'mount -t tmpfs -o ro tmpfs {folder} && exec "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("xai-ray:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines == [f"xai-ray: cannot write into store {str(store)!r}: read-only file system"]


def test_report_and_explain_out_that_is_a_folder(tmp_path, tiny_bert_dir, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    err = _one_sentence(["report", "--store", str(tmp_path), "--out", str(out)], capsys)
    assert f"--out {str(out)!r} is a folder" in err
    err = _one_sentence(["explain", "a good film", "--model", tiny_bert_dir, "--out", str(out)], capsys)
    assert f"--out {str(out)!r} is a folder" in err
    assert _files(tmp_path) == ["out", "out/keep.txt"]  # no .tmp anywhere


def test_an_out_name_too_long_leaves_no_temporary_file(tmp_path, tiny_bert_dir, capsys):
    out = tmp_path / ("p" * 252 + ".html")  # fits, but its temporary name (+ ".tmp") does not
    err = _one_sentence(["explain", "a good film", "--model", tiny_bert_dir, "--out", str(out)], capsys)
    assert "file name too long" in err
    assert _files(tmp_path) == []


def test_a_broken_manifest_is_one_sentence(tmp_path, capsys):
    run = tmp_path / "store" / "runs" / "run_id=r"
    run.mkdir(parents=True)
    for text in ("{truncated", "[1, 2]"):
        (run / "manifest.json").write_text(text)
        for argv in (["sql", "select 1"], ["topk"], ["report", "--out", str(tmp_path / "r.html")]):
            err = _one_sentence([argv[0], "--store", str(tmp_path / "store"), *argv[1:]], capsys)
            assert "manifest" in err and ("cannot be read" in err or "is not a JSON object" in err), err
            assert "process failed" not in err  # sql's child says the sentence itself
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    "manifest,words",
    [
        ({"run_id": 5}, "its run_id is 5"),
        ({"run_id": "r", "config": []}, "its config is []"),
        ({"run_id": "r", "config": {"methods": [1]}}, "its config.methods is 1"),
        ({"run_id": "r", "counts": {"docs": True}}, "its counts.docs is True"),
        ({"run_id": "r", "model": {"n_layers": "six"}}, "its model.n_layers is 'six'"),
    ],
)
def test_a_manifest_of_another_shape_is_one_sentence(tmp_path, capsys, manifest, words):
    run = tmp_path / "store" / "runs" / "run_id=r"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps(manifest))
    for argv in (["sql", "select 1"], ["topk"], ["report", "--out", str(tmp_path / "r.html")]):
        err = _one_sentence([argv[0], "--store", str(tmp_path / "store"), *argv[1:]], capsys)
        assert words in err and "restore it or move the run folder out of the store" in err, err
        assert "process failed" not in err


@pytest.mark.parametrize("problem", ["missing", "no-text-column"])
def test_a_source_that_cannot_be_read_stops_the_command_before_ray_starts(tmp_path, tiny_bert_dir, problem):
    # the command overlaps the model's description with Ray's start: the corpus is planned first
    data = tmp_path / "c.csv"
    if problem == "no-text-column":
        data.write_text("id,review,label\na,a good film,1\n")
    store = tmp_path / "store"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "xai_ray.cli", "-v", "run", "--data", str(data), "--model", tiny_bert_dir]
        + ["--store", str(store)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines[-1].startswith("xai-ray: "), done.stderr[-2000:]
    assert ("does not exist" if problem == "missing" else "has no text column 'text'") in lines[-1]
    assert not [line for line in lines if "scoring actor" in line or "Ray" in line], lines  # none started
    assert not store.exists()


def test_a_run_is_named_by_its_folder_whatever_its_manifest_says(tmp_path):
    # a run folder renamed by hand, or a manifest without the id: every view reads the folder's
    from xai_ray.query.connection import open_store

    for folder, manifest in (("r", {}), ("moved", {"run_id": "first"})):
        (tmp_path / "store" / "runs" / f"run_id={folder}").mkdir(parents=True)
        (tmp_path / "store" / "runs" / f"run_id={folder}" / "manifest.json").write_text(json.dumps(manifest))
    con = open_store(tmp_path / "store")
    assert sorted(r for (r,) in con.execute("select run_id from runs").fetchall()) == ["moved", "r"]


def test_a_ray_address_where_nothing_answers_is_one_sentence_not_a_silent_wait(
    tmp_path, tiny_bert_dir, monkeypatch, capsys
):
    """`RAY_ADDRESS=HOST:PORT xai-ray run` with no head there printed nothing for minutes (ray.init
    retrying) until a timeout killed it."""
    data = tmp_path / "reviews.parquet"
    pd.DataFrame({"id": ["a"], "text": ["a good film"], "label": [1]}).to_parquet(data)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # a port nothing listens on
    import xai_ray

    xai_ray.shutdown()  # a local Ray an earlier test left up would be used instead of joining
    status = cli.main(["run", "--data", str(data), "--model", tiny_bert_dir, "--store", str(tmp_path / "store")])
    assert status == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert said[-1].startswith("xai-ray: nothing answers at RAY_ADDRESS=127.0.0.1:1"), said


def test_a_rerun_of_a_published_run_id_leaves_that_runs_log_alone(tmp_path, capsys):
    """A second `run --run-id ID` of a published run was refused only after its log had been opened:
    it appended its lines to the published run's log, or, refused earlier (a bad --model), deleted
    that log with its own."""
    from xai_ray.store import layout

    store = tmp_path / "store"
    layout.run_dir(store, "done").mkdir(parents=True)  # a published run's folder
    log = layout.run_log(store, "done")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("the published run's log\n")
    for model in ("minilm", str(tmp_path / "no-such-model")):
        status = cli.main(
            ["run", "--data", str(tmp_path / "x.csv"), "--model", model, "--store", str(store), "--run-id", "done"]
        )
        assert status == 2 and "run 'done' already exists" in capsys.readouterr().err
        assert log.read_text() == "the published run's log\n"
