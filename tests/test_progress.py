"""Progress: lines at most every interval with an ETA, a final line, quiet; warnings into the log file."""

from __future__ import annotations

import io
import logging
import time
import warnings

from xai_ray import progress
from xai_ray.progress import Progress, eta, format_seconds


def test_eta_is_the_remaining_count_at_the_mean_rate():
    assert eta(0, 10, 5.0) is None
    assert eta(4, 10, 8.0) == 12.0  # 2 s per item, 6 items left
    assert eta(10, 10, 3.0) == 0.0
    assert [format_seconds(s) for s in (0, 59.4, 75, 3720)] == ["0 s", "59 s", "1 min 15 s", "1 h 02 min"]


def test_lines_come_at_most_every_interval_and_once_at_the_end():
    progress.configure(bars=False)
    try:
        out = io.StringIO()
        bar = Progress(100, "scoring", "documents", every=3600, stream=out)
        for _ in range(100):
            bar.update(1)
        assert out.getvalue() == ""  # the interval has not passed: nothing yet
        bar.close()
        assert len(bar.lines) == 1 and bar.lines[0].startswith("scoring: 100/100 documents (100%)")
        assert "ETA" not in bar.lines[0]  # nothing left

        out = io.StringIO()
        bar = Progress(10, "scoring", "documents", every=0.0, stream=out)
        time.sleep(0.01)
        bar.update(4)
        assert "scoring: 4/10 documents (40%)" in bar.lines[0] and ", ETA " in bar.lines[0]
        bar.close()  # nothing new since that line: no second copy of it
        assert out.getvalue().count("\n") == 1 and out.getvalue().startswith("xai-ray: scoring: 4/10")
    finally:
        progress.configure()


def test_quiet_writes_nothing():
    progress.configure(quiet=True)
    try:
        out = io.StringIO()
        with Progress(5, "report", "sections", every=0.0, stream=out) as bar:
            bar.update(5)
        assert out.getvalue() == "" and bar.lines == []
    finally:
        progress.configure()


def test_bars_on_a_terminal_draw_with_tqdm():
    progress.configure(bars=True)
    try:
        out = io.StringIO()
        with Progress(4, "evaluating", "documents", stream=out) as bar:
            bar.update(4)
        assert "evaluating" in out.getvalue() and "4/4" in out.getvalue()
    finally:
        progress.configure()


def test_warnings_and_library_loggers_go_to_the_log_file_not_the_terminal(tmp_path, capsys):
    path = progress.route_noise(tmp_path / "logs" / "run.log")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default", DeprecationWarning)
            warnings.warn("old api, use the new one", DeprecationWarning, stacklevel=1)
        logging.getLogger("ray").warning("ray says something")
        logging.getLogger("setuptools").warning("setuptools says something")
        for handler in logging.getLogger("ray").handlers:
            handler.flush()
        text = path.read_text()
        assert "DeprecationWarning: old api, use the new one" in text  # kept, not silenced
        assert "ray says something" in text and "setuptools says something" in text
        captured = capsys.readouterr()
        assert "old api" not in captured.err and "ray says" not in captured.err
    finally:
        logging.captureWarnings(False)


def test_a_heartbeat_writes_a_line_before_anything_is_done_into_the_log_too(tmp_path):
    log_file = progress.route_noise(tmp_path / "run.log")
    progress.configure(bars=False)
    try:
        out = io.StringIO()
        bar = Progress(8, "scoring", "documents", every=0.2, stream=out, heartbeat=True, waiting="actors starting")
        time.sleep(0.7)  # nothing arrives: the heartbeat speaks for it
        assert len(bar.lines) >= 2, bar.lines
        assert bar.lines[0].startswith("scoring: 0/8 documents (0%)") and bar.lines[0].endswith("; actors starting")
        bar.update(8)
        bar.close()
        n = len(bar.lines)
        time.sleep(0.5)
        assert len(bar.lines) == n  # closed: the heartbeat stopped
        assert bar.lines[-1].startswith("scoring: 8/8 documents (100%)") and "actors starting" not in bar.lines[-1]
        logged = log_file.read_text()
        assert logged.count("xai_ray.progress: scoring: 0/8 documents") >= 2 and "scoring: 8/8" in logged
    finally:
        progress.configure()


def test_quiet_and_bars_still_log_progress_lines(tmp_path):
    log_file = progress.route_noise(tmp_path / "run.log")
    for quiet, bars in ((True, None), (False, True)):
        progress.configure(quiet=quiet, bars=bars)
        try:
            out = io.StringIO()
            bar = Progress(3, f"quiet={quiet}", "documents", every=0.1, stream=out, heartbeat=True)
            time.sleep(0.35)
            bar.update(3)
            bar.close()
            assert bar.lines == [] and ("xai-ray:" not in out.getvalue())  # nothing as lines on the terminal
        finally:
            progress.configure()
    logged = log_file.read_text()
    assert "quiet=True: 0/3 documents" in logged and "quiet=True: 3/3 documents (100%)" in logged
    assert "quiet=False: 0/3 documents" in logged and "quiet=False: 3/3 documents (100%)" in logged


def test_a_bad_progress_interval_in_the_environment_falls_back_with_a_warning():
    """``XAI_RAY_PROGRESS_EVERY_S=abc`` made every command fail at import, ``--help`` included."""
    import subprocess
    import sys

    for text, expected in (("abc", 30.0), ("-5", 30.0), ("nan", 30.0), ("2.5", 2.5)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert progress._every_s(text) == expected
        assert bool(caught) == (expected == 30.0), text
    env = {**__import__("os").environ, "XAI_RAY_PROGRESS_EVERY_S": "abc"}
    done = subprocess.run([sys.executable, "-m", "xai_ray.cli", "--help"], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "usage: xai-ray" in done.stdout
    assert "XAI_RAY_PROGRESS_EVERY_S='abc'" in done.stderr


def test_quiet_from_the_environment_reads_false_as_false(monkeypatch):
    for text, quiet in (("1", True), ("true", True), ("false", False), ("0", False), ("", False), ("no", False)):
        monkeypatch.setenv("XAI_RAY_QUIET", text)
        assert progress.is_quiet() == quiet, text
