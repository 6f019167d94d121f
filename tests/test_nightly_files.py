"""The nightly job's own files in a store, without Ray: ``nightly.json`` is written all or nothing,
and ``reports/latest`` is swapped in by one rename; both at the paths ``store.layout`` names."""

from __future__ import annotations

import json
import os
import threading

from xai_ray.ops.nightly import point_latest, write_record
from xai_ray.store import layout

DATE = "2026-03-01"


def test_a_reader_never_meets_half_a_record(tmp_path):
    # Given a record of about a megabyte, rewritten over and over ...
    record = {"date": DATE, "runs": [f"nightly-{i:06d}" for i in range(60_000)]}
    path = write_record(tmp_path, DATE, {**record, "version": -1})
    assert path == layout.night_record(tmp_path, DATE) and path.name == "nightly.json"
    seen, broken, done = [], [], threading.Event()

    def read():
        while not done.is_set():
            text = path.read_text()
            try:
                seen.append(json.loads(text)["version"])
            except ValueError:
                broken.append(len(text))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for version in range(25):
            write_record(tmp_path, DATE, {**record, "version": version})
    finally:
        done.set()
        reader.join()
    # ... a reader reading all the while saw only whole records (a file truncated and then
    # written in place shows its readers an empty or cut file), and nothing is left behind.
    assert broken == [] and len(seen) > 0
    assert json.loads(path.read_text())["version"] == 24
    assert sorted(p.name for p in path.parent.iterdir()) == ["nightly.json"]


def test_latest_points_at_the_newest_night_through_a_swapped_link(tmp_path):
    def report(night: str) -> None:
        layout.night_report(tmp_path, night).parent.mkdir(parents=True)
        layout.night_report(tmp_path, night).write_text(f"<html>{night}</html>")

    report("2026-02-28")
    latest = point_latest(tmp_path, "2026-02-28")
    assert latest == layout.latest_reports(tmp_path) and os.readlink(latest) == "2026-02-28"
    report(DATE)
    assert point_latest(tmp_path, DATE) == latest and os.readlink(latest) == DATE
    assert point_latest(tmp_path, "2026-02-28") == latest and os.readlink(latest) == DATE  # a past night rebuilt
    assert not os.path.lexists(layout.latest_swap(tmp_path))  # the link made beside it was renamed over it
    assert (latest / "report.html").read_text() == f"<html>{DATE}</html>"
    # latest copied as a folder (a copy that followed the link): it gets the redirect page, and the
    # link made for the swap is not left beside it (it was, after every night)
    os.unlink(latest)
    latest.mkdir()
    report("2026-03-02")
    assert point_latest(tmp_path, "2026-03-02") == latest and latest.is_dir()
    assert "../2026-03-02/report.html" in (latest / "report.html").read_text()
    assert not os.path.lexists(layout.latest_swap(tmp_path))


def test_the_lock_and_the_log_are_never_opened_through_a_planted_link(tmp_path):
    """A nightly run truncated and wrote whatever file a planted ``STORE/.nightly.lock`` link named
    (a shared store's writer could empty any file the cron user may write); a run's log was
    appended through a link the same way. Both links are now refused and their targets untouched."""
    import pytest

    from xai_ray.ops.nightly import NightlyError, nightly_lock
    from xai_ray.progress import open_log

    store = tmp_path / "store"
    store.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, layout.nightly_lock(store))
    with pytest.raises(NightlyError, match="is a link"):
        with nightly_lock(store):
            pass
    log_file = tmp_path / "logs" / "nightly-2026-03-01.log"
    log_file.parent.mkdir()
    os.symlink(victim, log_file)
    with pytest.raises(OSError, match="a link, not a file"):
        open_log(log_file)
    assert victim.read_text() == "keep me\n"
    (store / layout.nightly_lock(store).name).unlink()
    with nightly_lock(store):  # a plain lock file still works
        assert "pid" in layout.nightly_lock(store).read_text()
