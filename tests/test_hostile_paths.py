"""Hostile paths, generated: every kind of thing an output path can be x every writer (``report
--out``, ``explain --out``, ``Explanation.save``, chart files), and symbolic links planted in a store
or an input folder x every reader. A target that is not a regular file is refused in one sentence
and left as it is; a link is never followed out of a store or an input folder; the store and
everything outside it stay byte-identical, and a FIFO planted outside is never even opened."""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from test_charts import DOCS, SCORES, WORDS_OF, write_run  # the tiny hand-written store of the SQL tests

from xai_ray import cli
from xai_ray.api import Explanation
from xai_ray.data.corpus import read_corpus
from xai_ray.data.sources import plan
from xai_ray.query.connection import QueryError, open_store, open_union
from xai_ray.report.outputs import OutputError
from xai_ray.store import StoreError, remote
from xai_ray.store.aggregates import read_aggregate, write_aggregate
from xai_ray.store.files import replacing, write_atomically
from xai_ray.store.writer import check_store

ROOT = Path(__file__).resolve().parents[1]
SECRET = "SECRET-OUTSIDE"  # in every file outside: it must never show up in what a reader returns
WORDS = {
    key: [(d, i, WORDS_OF[d][i], s) for d, scores in per.items() for i, s in enumerate(scores)]
    for key, per in SCORES.items()
}


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry below ``folder`` (hidden ones too) by what it is, links by their target, never followed."""
    seen = {}
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent, name)
            mode = os.lstat(path).st_mode
            relative = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(mode):
                seen[relative] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                seen[relative] = ("file", path.read_bytes())
            else:
                seen[relative] = (stat.S_IFMT(mode),)
    return seen


@contextmanager
def watched_fifo(path: Path):
    """A FIFO whose every opening is counted: a writer end opens without blocking only while a
    reader has it open, and closing it gives that reader end-of-file, so nothing hangs."""
    os.mkfifo(path)
    opened, done = [], threading.Event()

    def watch():
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                opened.append(time.time())
            except OSError:
                time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield opened
    finally:
        done.set()
        watcher.join()


def one_sentence(argv, capsys) -> str:
    status = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("xai-ray: "), (argv, err)
    return err


# ------------------------------------------------------------------ output paths x writers


# kind -> (make it at ``out`` in ``tmp``, what the refusal says; None: the target is written)
def _null_device(out, tmp):
    try:  # a device node of our own, beside the test's other files (root, or CAP_MKNOD, only)
        os.mknod(out, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot make a device node here; /dev/null itself is the next test's")


def _socket(out, tmp):
    server = socket.socket(socket.AF_UNIX)
    server.bind(out.name)  # relative: a socket's path must fit in 108 bytes (the test runs in tmp)
    return server


KINDS = {
    "missing": (lambda out, tmp: None, None),
    "regular": (lambda out, tmp: out.write_text("old page"), None),
    "folder": (lambda out, tmp: (out.mkdir(), (out / "keep.txt").write_text("mine")), "is a folder"),
    "fifo": (lambda out, tmp: os.mkfifo(out), "is a FIFO, not a regular file"),
    "character device": (_null_device, "is a character device, not a regular file"),
    "socket": (_socket, "is a socket, not a regular file"),
    "link to a file": (lambda out, tmp: out.symlink_to(tmp / "victim.txt"), "is a symbolic link"),
    "link to /dev/null": (lambda out, tmp: out.symlink_to("/dev/null"), "is a symbolic link"),
    "dangling link": (lambda out, tmp: out.symlink_to(tmp / "nowhere.html"), "is a symbolic link"),
    "link to a folder": (lambda out, tmp: out.symlink_to(tmp), "is a symbolic link"),
}
WRITERS = ["report", "explain", "save"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("paths-store")
    write_run(root, "r1", DOCS, WORDS)
    return root


def _write(writer, out, store, model, capsys):
    """Run ``writer`` onto ``out``: (exit status, its one sentence of error or '')."""
    if writer == "save":
        try:
            Explanation("a good film", 1, [0.2, 0.8], pd.DataFrame(), page="<html>page</html>").save(out)
            return 0, ""
        except OutputError as err:
            return 2, str(err)
    argv = ["report", "--store", store] if writer == "report" else ["explain", "a good film", "--model", model]
    status = cli.main([*map(str, argv), "--out", str(out)])
    err = capsys.readouterr().err
    assert len(err.splitlines()) <= 1 and "Traceback" not in err, err
    return status, err


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_out_that_is_not_a_regular_file_is_refused_and_left_as_it_is(
    kind, writer, store, tiny_bert_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "victim.txt").write_text(SECRET)
    out = tmp_path / "out.html"
    make, refusal = KINDS[kind]
    made = make(out, tmp_path)
    before, store_before = snapshot(tmp_path), snapshot(store)
    status, err = _write(writer, out, store, tiny_bert_dir, capsys)
    after = snapshot(tmp_path)
    if refusal is None:
        assert status == 0, err
        assert stat.S_ISREG(os.lstat(out).st_mode) and "<html" in out.read_text()
        assert {k: v for k, v in after.items() if k != "out.html"} == {
            k: v for k, v in before.items() if k != "out.html"
        }
    else:
        assert status == 2 and f"{str(out)!r} {refusal}" in err, err
        assert after == before  # the thing itself, its contents, the link's target: all as they were
    assert (tmp_path / "victim.txt").read_text() == SECRET and not (tmp_path / "nowhere.html").exists()
    assert snapshot(store) == store_before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if isinstance(made, socket.socket):
        made.close()


def _cli_onto_dev_null(argv: list) -> tuple[int, str]:
    """``xai-ray ARGV --out /dev/null``: (exit status, stderr). As root it runs where /dev/null is a
    mount point of its own (a private mount namespace), so a regression cannot replace the machine's
    /dev/null (renaming onto a mount point fails); anyone else may not replace it at all."""
    command = [sys.executable, "-m", "xai_ray.cli", *map(str, argv), "--out", "/dev/null"]
    if os.geteuid() == 0:
        if not shutil.which("unshare"):
            pytest.skip("as root, /dev/null is only put at stake inside a mount namespace (needs unshare)")
        command = ["unshare", "-m", "sh", "-c", 'mount --bind /dev/null /dev/null && exec "$@"', "sh", *command]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.returncode, done.stderr


@pytest.mark.parametrize("writer", ["report", "explain"])
def test_dev_null_as_out_is_refused_before_any_work(writer, store, tiny_bert_dir):
    device = os.stat("/dev/null")
    argv = ["report", "--store", store] if writer == "report" else ["explain", "a good film", "--model", tiny_bert_dir]
    status, err = _cli_onto_dev_null(argv)
    assert status == 2 and err.splitlines() == [
        "xai-ray: --out '/dev/null' is a character device, not a regular file; name a new file or a regular "
        "file to replace"
    ], err
    after = os.stat("/dev/null")  # never written, never replaced: the same device node
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (device.st_ino, device.st_rdev)


PLANTED = {
    "link to a file": lambda path, tmp: path.symlink_to(tmp / "victim.txt"),
    "link to /dev/null": lambda path, tmp: path.symlink_to("/dev/null"),
    "fifo": lambda path, tmp: os.mkfifo(path),
}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("planted", list(PLANTED))
def test_a_thing_planted_at_the_old_temporary_name_is_never_touched(
    planted, writer, store, tiny_bert_dir, tmp_path, capsys
):
    (tmp_path / "victim.txt").write_text(SECRET)
    out = tmp_path / "out.html"
    PLANTED[planted](tmp_path / "out.html.tmp", tmp_path)  # the fixed name the writers used before
    before = snapshot(tmp_path)
    status, err = _write(writer, out, store, tiny_bert_dir, capsys)
    assert status == 0, err
    after = snapshot(tmp_path)
    assert after.pop("out.html")[0] == "file" and after == before


def test_temporary_files_are_new_unguessable_and_gone_afterwards(tmp_path):
    target = tmp_path / "page.html"
    names = []
    for _ in range(2):
        with replacing(target) as handle:
            names += [p.name for p in tmp_path.iterdir() if p.name != "page.html"]
            handle.write(b"page")
    assert len(set(names)) == 2 and all(re.fullmatch(r"\.page\.html\.[0-9a-f]{16}\.tmp", n) for n in names), names
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # what a plain write would give it
    with pytest.raises(RuntimeError), replacing(target) as handle:
        handle.write(b"half")
        raise RuntimeError("the write failed")
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"] and target.read_bytes() == b"page"
    long_name = tmp_path / ("p" * 250 + ".html")  # fits in 255 bytes; its temporary's name is cut to fit too
    assert write_atomically(long_name, "x").read_text() == "x"


def test_chart_files_are_never_written_through_a_planted_link(store, tmp_path, capsys):
    charts = tmp_path / "charts"
    assert cli.main(["report", "--store", str(store), "--out", str(tmp_path / "r.html"), "--format", "svg"]) == 0
    first = sorted((tmp_path / "r-charts").iterdir())[0].name  # the names are fixed: learn the first one
    charts.mkdir()
    (tmp_path / "victim.txt").write_text(SECRET)
    (charts / first).symlink_to(tmp_path / "victim.txt")
    before = snapshot(tmp_path)
    argv = ["report", "--store", store, "--out", tmp_path / "r2.html", "--format", "svg", "--charts-dir", charts]
    capsys.readouterr()
    status = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err  # the report's progress lines, then one sentence
    assert status == 2 and "Traceback" not in err, err
    assert f"chart file {str(charts / first)!r} is a symbolic link" in err.splitlines()[-1]
    after = snapshot(tmp_path)
    assert (tmp_path / "victim.txt").read_text() == SECRET and after.pop("r2.html")[0] == "file" and after == before
    err = one_sentence([*argv[:-1], tmp_path / "victim.txt"], capsys)  # refused before the work
    assert "--charts-dir" in err and "is not a folder" in err


# ------------------------------------------------------------------ links in a store x readers


def _outside(tmp: Path) -> Path:
    """Things outside the store a link may point at, each holding SECRET."""
    outside = tmp / "outside"
    write_run(
        outside, "evil", [{"doc_id": SECRET, "pred": 1, "text": SECRET}], {("raw", 1): [(SECRET, 0, SECRET, 1.0)]}
    )
    (outside / "secret.txt").write_text(SECRET)
    write_aggregate(outside, "evil", "report_topk_all", {"k": 1}, pd.DataFrame({"word": [SECRET]}))
    return outside


RUN = "runs/run_id=r1"
EVIL = "runs/run_id=evil"
LINKS = {  # a name in the store -> what it points at, outside the store
    "part to a Parquet file": (f"{RUN}/docs/part-9.parquet", f"{EVIL}/docs/part-0.parquet"),
    "part to a text file": (f"{RUN}/docs/part-8.parquet", "secret.txt"),
    "part to a FIFO": (f"{RUN}/docs/part-7.parquet", "fifo"),
    "table folder": (f"{RUN}/words/method=raw/layer=9", f"{EVIL}/words/method=raw/layer=1"),
    "run folder": (EVIL, EVIL),
    "manifest": ("runs/run_id=m/manifest.json", f"{EVIL}/manifest.json"),
    "aggregate": (f"{RUN}/aggregates/report_topk_all.parquet", f"{EVIL}/aggregates/report_topk_all.parquet"),
}


def _sql(store, query, capsys):
    status = cli.main(["sql", "--store", str(store), "--format", "csv", query])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _read_everything(store: Path, link: Path, capsys, tmp: Path) -> str:
    """What every reader of a store returns, together: no SECRET may be in it."""
    assert _sql(store, "select run_id from runs", capsys) == (0, "run_id\nr1\n")  # no linked run or manifest
    seen = []
    for query in ["select * from docs", "select * from words", "select run_id, manifest from runs"]:
        status, text = _sql(store, query, capsys)
        assert status == 0, text
        seen.append(text)
    for reader in ("read_text", "read_blob", "read_parquet"):  # the link by name: not a file of the store
        status, text = _sql(store, f"select * from {reader}('{link}')", capsys)
        assert status == 2 and len(text.splitlines()) == 1, text
        seen.append(text.replace(str(link), ""))
    con = open_union(store, ["r1"], "u")
    seen += [con.sql("select * from docs").df().to_csv(), con.sql("select * from words").df().to_csv()]
    assert read_aggregate(store, "r1", "report_topk_all", {"k": 1}) is None  # a linked aggregate is none
    assert cli.main(["report", "--store", str(store), "--out", str(tmp / "r.html")]) == 0
    seen.append((tmp / "r.html").read_text())
    remote.push_run(store, f"file://{tmp}/bucket", "r1")
    seen += [p.read_bytes().decode("latin-1") for p in (tmp / "bucket").rglob("*") if p.is_file()]
    return "\n".join(seen)


@pytest.mark.parametrize("name", list(LINKS))
def test_a_link_inside_a_store_is_never_followed_out_of_it(name, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XAI_RAY_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "store"
    write_run(store, "r1", DOCS, WORDS)
    outside = _outside(tmp_path)
    where, target = LINKS[name]
    link = store / where
    link.parent.mkdir(parents=True, exist_ok=True)
    with watched_fifo(outside / "fifo") as opened:
        link.symlink_to(outside / target)
        store_before, outside_before = snapshot(store), snapshot(outside)
        seen = _read_everything(store, link, capsys, tmp_path)
    assert SECRET not in seen
    assert opened == []  # the FIFO outside was never opened, by DuckDB or by Python
    assert snapshot(store) == store_before and snapshot(outside) == outside_before
    assert open_store(store).sql("select count(*) from docs").fetchall()[0][0] == len(DOCS)
    with pytest.raises(QueryError, match="no run 'evil'"):
        open_union(store, ["evil"], "u")


# ------------------------------------------------------------------ links in an input folder x readers

LINKED_INPUTS = {  # a name in the input folder -> what it points at, outside it
    "review to a text file": ("aclImdb/test/pos/3_9.txt", "secret/9_9.txt"),
    "review to a FIFO": ("aclImdb/test/pos/4_9.txt", "fifo"),
    "class folder": ("aclImdb/test/neg", "secret"),
    "CSV to a CSV": ("folder/b.csv", "secret.csv"),
    "CSV to a FIFO": ("folder/c.csv", "fifo"),
}


@pytest.mark.parametrize("name", list(LINKED_INPUTS))
def test_a_link_inside_an_input_folder_is_skipped(name, tmp_path):
    data = tmp_path / "data"
    for folder, review in (("pos", "1_8.txt"), ("neg", "2_2.txt")):
        (data / "aclImdb" / "test" / folder).mkdir(parents=True)
        (data / "aclImdb" / "test" / folder / review).write_text(f"a {folder} review")
    (data / "folder").mkdir()
    pd.DataFrame({"id": ["a"], "text": ["a fine film"], "label": [1]}).to_csv(data / "folder" / "a.csv", index=False)
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "9_9.txt").write_text(SECRET)
    pd.DataFrame({"id": [SECRET], "text": [SECRET], "label": [1]}).to_csv(outside / "secret.csv", index=False)
    where, target = LINKED_INPUTS[name]
    source = data / where.split("/")[0]
    with watched_fifo(outside / "fifo") as opened:
        if (data / where).exists():
            shutil.rmtree(data / where)
        (data / where).symlink_to(outside / target)
        before, outside_before = snapshot(data), snapshot(outside)
        pieces = plan(str(source)).pieces
        frame = read_corpus(str(source))
    expected = ["a"] if source.name == "folder" else ["test_neg_2", "test_pos_1"]
    if name == "class folder":
        expected = ["test_pos_1"]
    assert sorted(frame.doc_id) == expected and SECRET not in frame.to_csv()
    assert sum(piece.rows for piece in pieces if piece.rows) in (0, len(expected))
    assert opened == [] and snapshot(data) == before and snapshot(outside) == outside_before


def test_a_page_written_over_the_stores_own_files_is_refused(store, capsys):
    """`report --out` onto a run's Parquet part or manifest exited 0 and the run was lost (every later
    query refused it as damaged). Inside a store only a page's own places take a page."""
    run = store / "runs" / "run_id=r1"
    before = snapshot(store)
    for target in (next((run / "docs").glob("*.parquet")), run / "manifest.json", store / "logs" / "r1.log"):
        assert cli.main(["report", "--store", str(store), "--out", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"{str(target)!r} is inside store" in err and len(err.splitlines()) == 1, err
    assert snapshot(store) == before
    assert cli.main(["report", "--store", str(store), "--out", str(run / "report.html")]) == 0  # its own page
    assert "<html" in (run / "report.html").read_text()
    (run / "report.html").unlink()
    assert cli.main(["report", "--store", str(store), "--out", str(store / "mine.html")]) == 0  # beside the store's own
    (store / "mine.html").unlink()


def test_a_page_is_never_written_over_another_stores_files(store, tmp_path, capsys):
    """Only --store's own files were protected: `report --store a --out b/runs/.../docs/part-0.parquet`
    replaced store b's part with the page, and `explain --out` could do the same."""
    other = tmp_path / "other"
    write_run(other, "r2", DOCS, WORDS)
    run = other / "runs" / "run_id=r2"
    before = snapshot(other)
    for target in (next((run / "docs").glob("*.parquet")), run / "manifest.json"):
        assert cli.main(["report", "--store", str(store), "--out", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"{str(target)!r} is inside store {str(other)!r}" in err and len(err.splitlines()) == 1, err
        with pytest.raises(OutputError, match="is inside store"):
            Explanation("a good film", 1, [0.2, 0.8], pd.DataFrame(), page="<html>page</html>").save(target)
    assert snapshot(other) == before
    assert cli.main(["report", "--store", str(store), "--out", str(tmp_path / "beside.html")]) == 0


def test_chart_files_are_never_written_among_the_stores_own_files(store, tmp_path, capsys):
    """`--charts-dir` skipped the check `--out` makes: chart images landed in `runs/` and in a
    run's Parquet `docs/` folder; with `--out` on a run's own report.html the default folder
    (`report-charts/`) was inside the run too."""
    from xai_ray.report.page import export_charts

    run = store / "runs" / "run_id=r1"
    before = snapshot(store)
    page = str(tmp_path / "r.html")
    for folder in (store / "runs", run / "docs", run / "new-charts"):
        argv = ["report", "--store", str(store), "--format", "svg", "--charts-dir", str(folder), "--out", page]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert f"--charts-dir {str(folder)!r} is inside store" in err and len(err.splitlines()) == 1, err
        with pytest.raises(OutputError, match="is inside store"):
            export_charts(store, None, folder, fmt="svg")
    own = ["report", "--store", str(store), "--format", "svg", "--out", str(run / "report.html")]
    assert cli.main(own) == 2 and "report-charts' is inside store" in capsys.readouterr().err
    assert snapshot(store) == before
    assert not (tmp_path / "r.html").exists()  # refused before the page was written


def test_bidirectional_overrides_reach_no_page(tmp_path):
    """A class name or review holding U+202E reversed the text after it in the report (spoofing);
    pages show each override, embedding and isolate as U+FFFD."""
    from xai_ray.api import iframe
    from xai_ray.report.outputs import write_page

    page = "<p>Mean P(\u202epos) \u2066x\u2069 \u05e9\u05dc\u05d5\u05dd caf\u00e9</p>"
    text = write_page(tmp_path / "p.html", page).read_text()
    assert text == "<p>Mean P(\ufffdpos) \ufffdx\ufffd \u05e9\u05dc\u05d5\u05dd caf\u00e9</p>"  # Hebrew kept
    assert "\u202e" not in iframe(page, 100) and "\u2066" not in iframe(page, 100)


def test_bidirectional_overrides_reach_no_chart(tmp_path, capsys):
    """A chart's spec went into the page as JSON, which writes U+202E as the escape \\u202e: the
    page's replacement never saw it, and Vega drew it back in titles, axes and the explorer."""
    import json

    from xai_ray.report.outputs import script_json

    spoofed = {"title": "Review rtl\u202eevil", "data": ["pos\u2067itive", "a \\u202e typed", "\\\u202e"]}
    written = script_json(spoofed)
    assert json.loads(written) == {
        "title": "Review rtl\ufffdevil",
        "data": ["pos\ufffditive", "a \\u202e typed", "\\\ufffd"],  # a backslash and "u202e" typed stay
    }
    store = tmp_path / "store"
    rows = [{**d, "doc_id": d["doc_id"] + "\u202e"} for d in DOCS]  # in ids, the words and their charts
    spoofed_words = {key: [(d + "\u202e", i, w + "\u2066", s) for d, i, w, s in value] for key, value in WORDS.items()}
    write_run(store, "r1", rows, spoofed_words)
    assert cli.main(["report", "--store", str(store), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "\u202e" not in page and "\\u202e" not in page.lower() and "\\u2066" not in page.lower()
    assert "\\ufffd" in page  # the charts' data still show that something was there


def test_charts_dir_and_out_naming_one_path_is_refused_before_the_page(store, tmp_path, monkeypatch, capsys):
    """`--format svg --charts-dir x.html --out x.html` wrote the page, then failed on the folder."""
    monkeypatch.chdir(tmp_path)
    argv = ["report", "--store", str(store), "--out", "x.html", "--format", "svg", "--charts-dir", "x.html"]
    assert cli.main(argv) == 2
    assert "both name 'x.html'" in capsys.readouterr().err and not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("folder", ["label=7", "run_id=evil", "dt=2024-01-01"])
def test_a_store_below_a_key_value_folder_is_refused_not_misread(folder, tmp_path, capsys):
    # DuckDB's hive partitioning reads every key=value folder of a part's path as a column: under
    # these a store's documents read label 7, or run "evil", or gained a dt column
    root = tmp_path / folder / "store"
    write_run(root, "r1", DOCS, WORDS)
    for opening in (lambda: open_store(root), lambda: open_union(root, ["r1"], "u")):
        with pytest.raises(StoreError, match=re.escape(f"lies below a folder named '{folder}'")):
            opening()
    assert cli.main(["sql", "--store", str(root), "select label from docs"]) == 2
    assert f"lies below a folder named '{folder}'" in capsys.readouterr().err
    with pytest.raises(StoreError, match="without '=' in their names"):
        check_store(tmp_path / folder / "new-store")  # a run refuses it before writing anything
    assert not (tmp_path / folder / "new-store").exists()
    # the same store moved out from under the folder reads its own labels
    moved = tmp_path / "plain" / "store"
    shutil.move(root, moved)
    labels = {d["doc_id"]: d.get("label") for d in DOCS}
    assert dict(open_store(moved).execute("select doc_id, label from docs").fetchall()) == labels


def test_a_new_store_through_a_link_to_a_key_value_folder_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "lake" / "dt=2024-01-01").mkdir(parents=True)
    (tmp_path / "lk").symlink_to(tmp_path / "lake" / "dt=2024-01-01")
    with pytest.raises(StoreError, match="lies below a folder named 'dt=2024-01-01'"):
        check_store(tmp_path / "lk" / "store")
    assert list((tmp_path / "lake" / "dt=2024-01-01").iterdir()) == []
