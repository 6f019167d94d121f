"""Exit status for cron and CI: non-zero when every document failed or too many did, in one sentence;
and the run's stderr carries our lines only (Ray's and the warnings' go to the run's log file)."""

from __future__ import annotations

import shutil
import time

import pandas as pd
import pytest

from xai_ray import cli
from xai_ray.cli.flags import EXIT_ERRORS, error_verdict

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_verdict_counts_documents_hand_worked():
    assert error_verdict({"docs": 10, "errors": 0}, None) is None
    assert error_verdict({"docs": 9, "errors": 1}, None) is None  # some failed: fine without a limit
    assert error_verdict({"docs": 0, "errors": 3}, None) == "every document failed: 0 of 3 scored, 3 in errors"
    assert error_verdict({"docs": 0, "errors": 3}, 1.0) is not None  # all failed fails whatever the share
    assert error_verdict({"docs": 8, "errors": 2}, 0.2) is None  # 2/10 = 20 %: not more than 20 %
    assert error_verdict({"docs": 7, "errors": 3}, 0.2) == (
        "3 of 10 documents failed (30.0%), more than --max-error-share 20.0%; 7 scored"
    )


def _corpus(path, texts):
    pd.DataFrame(
        {"id": [f"d{i}" for i in range(len(texts))], "text": texts, "label": [i % 2 for i in range(len(texts))]}
    ).to_parquet(path)
    return str(path)


def _run(tmp_path, data, model, *extra) -> list[str]:
    return [
        "run",
        "--data",
        data,
        "--model",
        model,
        "--store",
        str(tmp_path / "store"),
        "--max-length",
        "32",
        "--batch-size",
        "4",
        "--no-report",
        "--actors",
        "1",
        *extra,
    ]


def test_every_document_failed_exits_3_with_the_counts(ray_cluster, tmp_path, tiny_bert_dir, capsys):
    data = _corpus(tmp_path / "bad.parquet", ["", "   ", "\n"])
    assert cli.main(_run(tmp_path, data, tiny_bert_dir)) == EXIT_ERRORS
    err = capsys.readouterr().err
    assert "xai-ray: every document failed: 0 of 3 scored, 3 in errors" in err


def test_error_share_over_the_limit_exits_3_and_under_it_0(ray_cluster, tmp_path, tiny_bert_dir, capsys):
    data = _corpus(tmp_path / "some.parquet", ["the film was good", "", "bad movie", "i loved the story"])
    assert cli.main(_run(tmp_path, data, tiny_bert_dir, "--max-error-share", "0.2")) == EXIT_ERRORS
    assert "1 of 4 documents failed (25.0%), more than --max-error-share 20.0%; 3 scored" in capsys.readouterr().err
    assert cli.main(_run(tmp_path, data, tiny_bert_dir, "--set", "max_error_share=0.25")) == 0
    assert cli.main(_run(tmp_path, data, tiny_bert_dir)) == 0  # no limit: only "all failed" fails


def test_a_command_whose_corpus_is_all_rejected_exits_3_every_time(tmp_path, tiny_bert_dir):
    # the command lets Ray go on a thread before its summary; a handle on Ray's objects freed while
    # that thread shut Ray down ended the process with status 1 (most runs of a streamed corpus
    # without a report, whose summary is over quickly). Three runs, each must say why and exit 3.
    import subprocess
    import sys

    data = tmp_path / "numbers.parquet"
    pd.DataFrame({"id": ["a", "b"], "text": [1, 2], "label": [0, 1]}).to_parquet(data)  # no text to score
    for attempt in range(3):
        args = _run(tmp_path, str(data), tiny_bert_dir, "--set", "driver_rows=0", "--run-id", f"all-rejected-{attempt}")
        done = subprocess.run([sys.executable, "-m", "xai_ray.cli", *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == EXIT_ERRORS, (attempt, done.stderr[-2000:])
        assert "every document failed: 0 of 2 scored, 2 in errors" in done.stderr


def test_a_corpus_without_rows_is_refused_in_one_sentence_with_nothing_published(
    ray_cluster, tmp_path, tiny_bert_dir, capsys
):
    """A header-only CSV, a Parquet file of no rows and an empty JSON Lines file published an empty
    run with exit 0, where an empty CSV or Parquet file was refused."""
    empty = {
        "none.parquet": lambda p: pd.DataFrame({"id": [], "text": [], "label": []}).to_parquet(p),
        "none.csv": lambda p: p.write_text("id,text,label\n"),
        "none.jsonl": lambda p: p.write_text(""),
    }
    for name, write in empty.items():
        write(tmp_path / name)
        assert cli.main(_run(tmp_path, str(tmp_path / name), tiny_bert_dir, "--run-id", "e")) == 2, name
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]  # (Ray's own processes may log to the test's stderr before it)
        assert last.startswith("xai-ray: ") and "holds no rows" in last and "Traceback" not in err, err
        assert not (tmp_path / "store").exists()  # nor the store folder the run made for it


def test_ray_failing_under_a_run_is_one_sentence_with_the_resume_hint(ray_cluster):
    """The raylet killed mid-run gave ActorDiedError's traceback and exit 1: now one sentence. A
    task's own error (RayTaskError) is a fault of its code and keeps its traceback."""
    from xai_ray.cli.main import ray_failure

    @ray_cluster.remote
    class Counter:
        def one(self) -> int:
            return 1

        def fail(self) -> None:
            raise ValueError("a bug")

    counter = Counter.remote()
    with pytest.raises(ValueError) as caught:  # Ray raises it as a RayTaskError that is also a ValueError
        ray_cluster.get(counter.fail.remote())
    assert ray_failure(caught.value, "run") is None
    ray_cluster.kill(counter)
    # ray.kill is asynchronous: a call sent at once may still be answered (CI saw one), so ask until
    # the actor is gone
    died = None
    for _ in range(100):
        try:
            ray_cluster.get(counter.one.remote(), timeout=30)
        except ray_cluster.exceptions.RayActorError as error:
            died = error
            break
        time.sleep(0.1)
    assert died is not None, "the killed actor still answered after 100 calls"
    said = ray_failure(died, "run")
    assert said.startswith("xai-ray: Ray failed under the run command (ActorDiedError: ")
    assert "`xai-ray run --resume RUN_ID --store STORE`" in said and "\n" not in said
    assert "--resume" not in ray_failure(died, "sql")
    assert ray_failure(ValueError("x"), "run") is None


def test_a_disk_full_after_publishing_says_the_run_is_whole(ray_cluster, tmp_path, tiny_bert_dir, capsys, monkeypatch):
    """The disk filled while the aggregates were written, after the run was published: the command
    sent the user to `--resume`, which then refused ("already complete; nothing to resume"). Now
    the run is said to be whole, and `--resume` writes its aggregates and report, scoring nothing."""
    import errno

    from xai_ray import pipeline

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pipeline, "aggregate", full)  # the disk filling up at that stage
    data = _corpus(tmp_path / "some.parquet", ["the film was good", "bad movie"])
    with_report = [arg for arg in _run(tmp_path, data, tiny_bert_dir) if arg != "--no-report"]
    assert cli.main([*with_report, "--run-id", "r"]) == 2
    err = capsys.readouterr().err
    assert "xai-ray: run 'r' is published with all its documents, but its aggregates could not be written" in err
    assert "no space left on device" in err
    assert f"`xai-ray run --resume r --store {tmp_path / 'store'}` writes what it lacks" in err
    run_dir = tmp_path / "store" / "runs" / "run_id=r"
    assert (run_dir / "manifest.json").is_file()
    assert not (run_dir / "aggregates").exists() and not (run_dir / "report.html").exists()
    manifest = (run_dir / "manifest.json").read_bytes()

    monkeypatch.undo()  # the disk mended for the aggregates, not yet for the report
    from xai_ray.report import outputs

    monkeypatch.setattr(outputs, "write_atomically", full)
    assert cli.main(["run", "--resume", "r", "--store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err  # no "--out", which the user never gave
    assert "but its report could not be written (cannot write the run's report" in err and "--out" not in err
    monkeypatch.undo()
    (run_dir / "aggregates" / "word_totals.parquet").write_bytes(b"PAR1" * 10)  # cut short by the disk
    assert cli.main(["run", "--resume", "r", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "run r: already published with 2 documents and 0 errors; its aggregates and report written now" in out
    assert (run_dir / "aggregates" / "word_totals.parquet").is_file() and (run_dir / "report.html").is_file()
    assert (run_dir / "manifest.json").read_bytes() == manifest  # nothing scored or published again
    (run_dir / "aggregates" / "report_topk_all.parquet").unlink()  # a stage stopped part way: one file missing
    assert cli.main(["run", "--resume", "r", "--store", str(tmp_path / "store")]) == 0
    assert "its aggregates written now" in capsys.readouterr().out
    assert (run_dir / "aggregates" / "report_topk_all.parquet").is_file()
    # a damaged run is refused, not aggregated as it is (a sync tool's copy of its errors)
    (run_dir / "report.html").unlink()
    docs = sorted((run_dir / "docs").glob("part-*.parquet"))[0]
    shutil.copy(docs, run_dir / "docs" / "part-0-DESKTOP1.parquet")
    shutil.rmtree(run_dir / "_parts")  # copied without its records: every file under a part's name is read
    assert cli.main(["run", "--resume", "r", "--store", str(tmp_path / "store")]) == 2
    assert "has no part records (_parts)" in capsys.readouterr().err
    assert not (run_dir / "report.html").exists()
    (run_dir / "docs" / "part-0-DESKTOP1.parquet").unlink()
    kept = {f: f.stat().st_mtime_ns for f in (run_dir / "aggregates").iterdir()}
    assert cli.main(["run", "--resume", "r", "--store", str(tmp_path / "store")]) == 0
    assert "its report written now" in capsys.readouterr().out
    assert {f: f.stat().st_mtime_ns for f in (run_dir / "aggregates").iterdir()} == kept  # the report alone written
    # a run that lacks nothing still says so
    assert cli.main(["run", "--resume", "r", "--store", str(tmp_path / "store")]) == 2
    assert "is already complete; nothing to resume" in capsys.readouterr().err
