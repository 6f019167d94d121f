"""Store URIs through pyarrow.fs for real, with ``file://`` URIs (the same code path as s3:// and
gs://, no cloud needed): upload with the manifest last, a fresh machine's mirror pulls only
published runs, and the CLI reads a store given as a URI."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from xai_ray import cli, pipeline
from xai_ray.config import resolve
from xai_ray.scoring.actor import Scorer
from xai_ray.store import StoreError, remote

TEXTS = [
    "the film was good",
    "the movie was bad and boring",
    "a great plot and fine acting",
    "not very good, not very bad.",
    "i loved the story",
]


def test_is_uri():
    assert remote.is_uri("s3://bucket/xai") and remote.is_uri("gs://b/x") and remote.is_uri("file:///tmp/s")
    assert not remote.is_uri("store") and not remote.is_uri("/tmp/store") and not remote.is_uri("C://x")


@pytest.fixture()
def published(tmp_path, tiny_bert_dir, monkeypatch):
    """A run written in this machine's mirror (stages without Ray) and uploaded to a file:// store."""
    monkeypatch.setenv("XAI_RAY_CACHE", str(tmp_path / "cache-a"))
    bucket = tmp_path / "bucket"
    uri = f"file://{bucket}/xai"
    local = remote.pull(uri)
    cfg = resolve(None, {"model": tiny_bert_dir, "max_length": 32, "store": str(local), "methods": "raw,rollout"})
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})(
        {"doc_id": [f"t{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0, 1]}
    )
    pipeline.write([rows], cfg, "r1", n_input=len(TEXTS))
    remote.push_run(local, uri, "r1")
    return {"uri": uri, "bucket": bucket / "xai", "local": local}


def test_upload_then_a_fresh_mirror_reads_the_run(published, tmp_path, monkeypatch, capsys):
    run = published["bucket"] / "runs" / "run_id=r1"
    assert json.loads((run / "manifest.json").read_text())["counts"]["docs"] == len(TEXTS)
    uploaded = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    written = sorted(
        p.relative_to(published["local"] / "runs" / "run_id=r1").as_posix()
        for p in (published["local"] / "runs" / "run_id=r1").rglob("*")
        if p.is_file()
    )
    assert uploaded == written and "docs/part-0.parquet" in uploaded

    # a half-uploaded run (no manifest yet) stays invisible to readers
    shutil.copytree(run / "docs", published["bucket"] / "runs" / "run_id=partial" / "docs")

    monkeypatch.setenv("XAI_RAY_CACHE", str(tmp_path / "cache-b"))  # another machine
    assert (
        cli.main(
            [
                "sql",
                "--store",
                published["uri"],
                "--format",
                "csv",
                "select run_id, count(*) as n from docs group by run_id",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().splitlines() == ["run_id,n", f"r1,{len(TEXTS)}"]
    mirror = remote.cache_dir(published["uri"])
    assert mirror.is_relative_to(tmp_path / "cache-b") and not (mirror / "runs" / "run_id=partial").exists()
    original = pq.read_table(run / "token_scores").to_pandas()
    pulled = pq.read_table(mirror / "runs" / "run_id=r1" / "token_scores").to_pandas()
    assert original.equals(pulled)

    assert cli.main(["topk", "--store", published["uri"], "--method", "rollout", "--k", "3", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3
    out = tmp_path / "report.html"
    assert cli.main(["report", "--store", published["uri"], "--out", str(out)]) == 0
    assert "Run summary" in out.read_text()


def test_a_published_run_is_never_overwritten(published):
    with pytest.raises(StoreError, match="already exists in store"):
        remote.push_run(published["local"], published["uri"], "r1")


def test_an_unopenable_uri_is_one_sentence(capsys):
    assert cli.main(["sql", "--store", "nosuchscheme://bucket/x", "select 1"]) == 2
    assert "cannot open store 'nosuchscheme://bucket/x'" in capsys.readouterr().err


def test_a_run_published_in_the_mirror_but_never_uploaded_is_uploaded_by_a_resume(published, tiny_bert_dir, capsys):
    """Killed between the mirror's publish and the upload, a run was lost for good: `--resume` said
    there was nothing to resume, a rerun said it "already exists" (in the mirror only), and other
    machines never saw it. Both now upload it, as it is; a run the bucket holds is still refused."""
    local, uri = published["local"], published["uri"]
    cfg = resolve(None, {"model": tiny_bert_dir, "max_length": 32, "store": str(local), "methods": "raw,rollout"})
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})({"doc_id": ["u0"], "text": [TEXTS[0]], "label": [1]})
    pipeline.write([rows], cfg, "r2", n_input=1)  # published in the mirror; the upload never ran
    assert not remote.has_run(uri, "r2")
    assert cli.main(["run", "--resume", "r2", "--store", uri]) == 0
    assert remote.has_run(uri, "r2")
    assert (published["bucket"] / "runs" / "run_id=r2" / "manifest.json").is_file()
    capsys.readouterr()
    assert cli.main(["run", "--resume", "r2", "--store", uri]) == 2
    assert "already complete" in capsys.readouterr().err
    pipeline.write([rows], cfg, "r3", n_input=1)
    result = pipeline.run(resolve(None, {"model": tiny_bert_dir, "store": uri, "run_id": "r3", "data": "x.csv"}))
    assert result.run_id == "r3" and remote.has_run(uri, "r3")


def test_an_upload_clears_what_an_earlier_upload_cut_short_left(published):
    """Machine A died mid-upload (no manifest); machine B's upload of the run put its parts beside
    A's, and every reader counted both: 28 rows for 15 documents."""
    run = published["bucket"] / "runs" / "run_id=r1"
    (run / "manifest.json").unlink()  # as if the upload had stopped before it
    stale = run / "docs" / "part-stale.parquet"
    shutil.copy(run / "docs" / "part-0.parquet", stale)
    (run / "_parts" / "part-stale.json").write_text("{}")
    remote.push_run(published["local"], published["uri"], "r1")
    assert not stale.exists() and not (run / "_parts" / "part-stale.json").exists()
    assert json.loads((run / "manifest.json").read_text())["counts"]["docs"] == len(TEXTS)
