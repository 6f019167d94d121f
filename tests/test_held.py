"""A small corpus read and screened by the driver (``data.held``) against the streaming path: the
rule that picks it, the same screening outcome, and the same stored ``docs`` and ``errors`` rows
of a whole run (a fresh one and a resumed one)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from test_stream import _folder, _hostile_csv, _jsonl

from xai_ray import pipeline
from xai_ray.config import resolve
from xai_ray.data import held, stream
from xai_ray.data.head_docs import HeadDocs
from xai_ray.data.screening import DUPLICATE, REJECTED
from xai_ray.data.sources import Piece, SourcePlan, plan
from xai_ray.query.connection import open_store

CLASSES = [0, 1]
IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"


def test_the_driver_reads_when_the_selected_rows_are_known_and_few(tmp_path, monkeypatch):
    parquet = tmp_path / "p.parquet"
    pd.DataFrame({"text": [f"review {i}" for i in range(50)], "label": [i % 2 for i in range(50)]}).to_parquet(parquet)
    counted = plan(str(parquet), "train")  # 50 rows, from the footer
    assert held.reads_here(counted, None, 50) and not held.reads_here(counted, None, 49)
    assert held.reads_here(counted, 30, 30) and not held.reads_here(counted, 31, 30)
    assert held.reads_here(counted, 10_000, 50)  # a limit above the source selects the source
    assert not held.reads_here(counted, 5, 0)  # 0: always streamed
    csv = _hostile_csv(tmp_path)  # rows unknown until read: only a limit bounds them
    assert not held.reads_here(plan(str(csv), "train"), None, 1000)
    assert held.reads_here(plan(str(csv), "train"), 1000, 1000)
    monkeypatch.setattr(held, "DRIVER_BYTES", parquet.stat().st_size - 1)  # files too large to read here
    assert not held.reads_here(counted, 5, 1000)
    hub = SourcePlan("stanfordnlp/imdb", "test", "text", "label", "id", True, (Piece(0, "hub", "x"),), True)
    assert not held.reads_here(hub, 5, 1000)


@pytest.mark.skipif(not IMDB.is_file(), reason="needs the IMDB parquet in ../shared/data")
def test_the_readme_job_is_read_by_the_driver_and_the_whole_corpus_is_streamed():
    readme = resolve(None, {"data": str(IMDB), "limit": 200, "model": "minilm"})
    assert pipeline.read(readme).driver
    assert not pipeline.read(resolve(None, {"data": str(IMDB), "model": "minilm"})).driver  # 25,000 rows


@pytest.mark.ray
@pytest.mark.parametrize("kind,limit", [("csv", 9), ("jsonl", 50), ("folder", None), ("folder", 17)])
def test_the_driver_screens_as_the_workers_do(ray_cluster, tmp_path, kind, limit):
    source = {"csv": _hostile_csv, "jsonl": _jsonl, "folder": _folder}[kind](tmp_path)
    found = plan(str(source), "train")
    known = pa.table({"doc_id": ["ok2", "r3"], "text_sha256": [hashlib.sha256(b"review number 3").hexdigest()] * 2})
    done = {"ok1", "r5", "007"}
    streamed = stream.screen(stream.Corpus(found, limit=limit), CLASSES, done=done, known=known)
    here = held.screen(stream.Corpus(found, limit=limit, driver=True), CLASSES, done=done, known=known)
    assert here.counts == streamed.counts
    judged = pa.concat_tables([ray_cluster.get(r) for r in streamed.verdicts]).sort_by("pos")
    assert here.side.to_pylist() == judged.to_pylist()  # every verdict, reason and stored id
    bad = here.side.to_pandas().query(f"verdict in ({REJECTED}, {DUPLICATE})")
    assert here.rejected().values.tolist() == bad[["doc_id", "reason"]].values.tolist()
    sample = np.unique([0, min(2, here.counts["kept"] - 1), here.counts["kept"] - 1])
    marked = HeadDocs(sample, np.union1d(sample, np.arange(1, here.counts["kept"], 2)))
    todo = here.todo(marked)
    lengths = [len(t) for t in todo.column("text").to_pylist()]
    assert lengths == sorted(lengths, reverse=True)  # longest first
    by_id = todo.to_pandas().sort_values("doc_id").reset_index(drop=True)
    expected = streamed.todo(4, marked).to_pandas().sort_values("doc_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(by_id, expected, check_dtype=False)  # string dtypes: pandas vs Ray Data


def _bad_rows_parquet(folder: Path) -> Path:
    """Thirty rows: duplicate ids (of a kept row and of a bad row), a missing id, null, empty and
    blank texts, labels outside the classes (7) and not numbers (joy)."""
    ids = [f"d{i:02d}" for i in range(30)]
    texts = [f"review {i} " + "quite long " * (i % 5) for i in range(30)]
    labels = [str(i % 2) for i in range(30)]
    ids[4], ids[9], ids[20] = "d01", None, "d03"  # d01 repeats a kept row; d03's first row is bad
    texts[3], texts[6], texts[12] = "", " \t ", None
    labels[7], labels[15] = "7", "joy"
    path = folder / "bad.parquet"
    pd.DataFrame({"id": ids, "text": texts, "label": labels}).to_parquet(path, row_group_size=8)
    return path


def _run_cfg(source, model, store, run_id: str, driver_rows: int, limit: int | None = None):
    flags = {"data": str(source), "model": model, "store": str(store), "run_id": run_id, "actors": 2, "limit": limit}
    return resolve(None, flags, ["max_length=32", "batch_size=4", f"driver_rows={driver_rows}", "report=false"])


def _stored(store, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    con = open_store(store)
    docs = con.execute("select * exclude (run_id) from docs where run_id = ? order by doc_id", [run_id]).df()
    errors = con.execute("select * exclude (run_id) from errors where run_id = ? order by doc_id, reason", [run_id])
    return docs, errors.df()


@pytest.mark.ray
@pytest.mark.slow
def test_both_paths_store_the_same_docs_and_errors(ray_cluster, tmp_path, tiny_bert_dir):
    source = _bad_rows_parquet(tmp_path)
    streamed = pipeline.run(_run_cfg(source, tiny_bert_dir, tmp_path / "s", "streamed", 0, limit=26))
    here = pipeline.run(_run_cfg(source, tiny_bert_dir, tmp_path / "h", "here", 1000, limit=26))
    docs, errors = _stored(tmp_path / "s", "streamed")
    held_docs, held_errors = _stored(tmp_path / "h", "here")
    assert len(errors) >= 5 and len(docs) + len(errors) == 26  # the bad rows the sample kept, once each
    pd.testing.assert_frame_equal(held_errors, errors)
    pd.testing.assert_frame_equal(held_docs, docs)
    assert here.manifest["counts"] == streamed.manifest["counts"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_resumed_small_run_scores_only_what_its_parts_lack(ray_cluster, tmp_path, tiny_bert_dir):
    source = _bad_rows_parquet(tmp_path)
    pipeline.run(_run_cfg(source, tiny_bert_dir, tmp_path / "s", "once", 0))
    cfg = _run_cfg(source, tiny_bert_dir, tmp_path / "h", "again", 1000)
    writer = pipeline.open_writer(cfg, "again")  # a first attempt killed after one batch was committed
    first = pipeline.screen(pipeline.read(cfg), CLASSES)
    assert isinstance(first, held.Held)
    batch = next(iter(pipeline.score(first, cfg)))
    writer.write(batch)
    writer.commit()
    writer.abort(keep_parts=True)
    result = pipeline.run(cfg)
    assert result.manifest["resumed"]["parts"] == 1
    assert result.manifest["resumed"]["docs_scored_now"] == first.counts["todo"] - batch.num_rows
    once, resumed = _stored(tmp_path / "s", "once"), _stored(tmp_path / "h", "again")
    pd.testing.assert_frame_equal(resumed[1], once[1])  # every bad row once
    pd.testing.assert_frame_equal(resumed[0], once[0])  # every document once, as one run scores it


@pytest.mark.ray
@pytest.mark.slow
def test_a_command_whose_corpus_the_driver_reads_never_imports_ray_data(tmp_path, tiny_bert_dir):
    """Ray Data costs most of a second to import, before the actors could start (bench/README.md,
    startup.py); a run the driver reads and hands out itself has no use for it. The streamed run
    of the same corpus does import it (the check can fail)."""
    import subprocess
    import sys

    source = _bad_rows_parquet(tmp_path)
    code = (
        "import sys\nfrom xai_ray.cli import main\ncode = main(sys.argv[1:])\nprint('ray.data' in sys.modules, code)\n"
    )
    seen = []
    for rows in (1000, 0):
        args = ["run", "--data", str(source), "--model", tiny_bert_dir, "--store", str(tmp_path / "store")]
        args += ["--no-report", "-q", "--set", f"driver_rows={rows}", "--run-id", f"rows-{rows}"]
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        seen.append(done.stdout.split()[-2:])
    assert seen == [["False", "0"], ["True", "0"]]
