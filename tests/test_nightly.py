"""The nightly job on a real local Ray with a tiny model: two nights with documents added and
changed in between, a re-run, a night with nothing new, a killed run completed by the next one,
and an overlapping run refused. Expected values come from the Parquet files and the corpus,
read with pandas here."""

from __future__ import annotations

import fcntl
import html
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import unicodedata
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from store_reading import read_slice

from xai_ray import cli
from xai_ray.config import resolve
from xai_ray.ops.nightly import NightlyError, run_nightly
from xai_ray.query.connection import open_store

pytestmark = [pytest.mark.slow, pytest.mark.ray]
WORDS = [
    "the",
    "film",
    "was",
    "good",
    "bad",
    "not",
    "very",
    "and",
    "i",
    "loved",
    "great",
    "plot",
    "acting",
    "fine",
    "story",
    "this",
    "boring",
    "movie",
    "is",
    "it",
    "wonderful",
]
N1, N_ADDED, N_CHANGED = 24, 6, 2


def sentences(rng, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=rng.integers(6, 16))) + "." for _ in range(n)]


def write_corpus(folder: Path, name: str, ids: list[str], texts: list[str], labels) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": ids, "text": texts, "label": labels}).to_parquet(folder / name)


def config(tiny_bert_dir, data: Path, store):
    return resolve(
        None,
        {
            "data": str(data),
            "model": tiny_bert_dir,
            "methods": "raw,rollout",
            "max_length": 32,
            "store": str(store),
            "batch_size": 8,
            "actors": 1,
        },
    )


@pytest.fixture(scope="module")
def two_nights(ray_cluster, tiny_bert_dir, tmp_path_factory):
    """Night 1 scores 24 documents; then 6 are added and 2 change their text; night 2."""
    root = tmp_path_factory.mktemp("nightly")
    data, store = root / "incoming", root / "store"
    rng = np.random.default_rng(0)
    ids = [f"d{i:03d}" for i in range(N1)]
    texts, labels = sentences(rng, N1), rng.integers(0, 2, N1)
    write_corpus(data, "day1.parquet", ids, texts, labels)
    cfg = config(tiny_bert_dir, data, store)
    first = run_nightly(cfg, "2026-01-01")
    changed = dict(zip(ids[:N_CHANGED], sentences(rng, N_CHANGED)))
    write_corpus(data, "day1.parquet", ids, [changed.get(i, t) for i, t in zip(ids, texts)], labels)
    added = [f"e{i:03d}" for i in range(N_ADDED)]
    write_corpus(data, "day2.parquet", added, sentences(rng, N_ADDED), rng.integers(0, 2, N_ADDED))
    second = run_nightly(cfg, "2026-01-02")
    return {
        "cfg": cfg,
        "store": store,
        "data": data,
        "first": first,
        "second": second,
        "changed": sorted(changed),
        "added": added,
    }


def run_table(store: Path, run_id: str, table: str, sub: str = "") -> pd.DataFrame:
    return pq.read_table(store / "runs" / f"run_id={run_id}" / table / sub).to_pandas()


def facts(page: str) -> dict[str, str]:
    section = re.search(r"<section id='since_last_night'>(.*?)</section>", page, re.S).group(1)
    return {
        html.unescape(k): html.unescape(v) for k, v in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", section)
    }


def changes(page: str) -> dict[str, str]:
    section = re.search(r"<section id='since_last_night'>(.*?)</section>", page, re.S).group(1)
    return {html.unescape(word): status for status, word in re.findall(r"<tr class='(\w+)'><td>(.*?)</td>", section)}


def test_first_night_scores_everything(two_nights):
    first = two_nights["first"]
    assert first.scored == N1 and first.runs == ["nightly-2026-01-01"]
    docs = run_table(two_nights["store"], "nightly-2026-01-01", "docs")
    assert sorted(docs.doc_id) == [f"d{i:03d}" for i in range(N1)]
    assert first.report == two_nights["store"] / "reports" / "2026-01-01" / "report.html"
    assert facts(first.report.read_text())["Last night"] == "none (first night)"
    # the summary says how the lead method's top words lean toward each predicted class
    lean = json.loads((first.report.parent / "nightly.json").read_text())["lean"]
    assert lean["layer"] >= 1 and lean["classes"] and {c["class"] for c in lean["classes"]} <= {0, 1}
    assert (lean["said"] != "") == any(c["flagged"] for c in lean["classes"])
    assert not lean["said"] or lean["said"] in first.message  # and so in the printed line


def test_second_night_scores_only_new_and_changed_documents(two_nights):
    second, store = two_nights["second"], two_nights["store"]
    expected = sorted(two_nights["changed"] + two_nights["added"])
    assert second.scored == len(expected) and second.runs == ["nightly-2026-01-01", "nightly-2026-01-02"]
    assert sorted(run_table(store, "nightly-2026-01-02", "docs").doc_id) == expected
    # the store's latest version of every document is the corpus's current text
    corpus = pd.concat([pd.read_parquet(f) for f in sorted(two_nights["data"].glob("*.parquet"))])
    union = pd.concat([run_table(store, r, "docs").assign(run=r) for r in second.runs])
    latest = union.sort_values("run").drop_duplicates("doc_id", keep="last").set_index("doc_id")
    assert sorted(latest.index) == sorted(corpus.id)
    assert all(latest.at[i, "text"] == t for i, t in zip(corpus.id, corpus.text))
    assert os.readlink(store / "reports" / "latest") == "2026-01-02"
    record = json.loads((store / "reports" / "2026-01-02" / "nightly.json").read_text())
    assert record["runs"] == second.runs and record["scored"] == len(expected) and record["versions"]["ray"]
    assert record["key"]["methods"] == ["raw", "rollout"] and len(record["key"]["fingerprint"]) == 64


def test_report_shows_what_changed_since_last_night(two_nights):
    store, second = two_nights["store"], two_nights["second"]
    page = second.report.read_text()
    shown = facts(page)
    night1 = run_table(store, "nightly-2026-01-01", "docs")
    night2 = run_table(store, "nightly-2026-01-02", "docs")
    now = pd.concat([night1[~night1.doc_id.isin(night2.doc_id)], night2])
    assert shown["Documents last night"] == str(N1) and shown["Documents tonight"] == str(len(now))
    assert shown["Scored tonight"] == f"{N_ADDED + N_CHANGED} ({N_ADDED} new, {N_CHANGED} with changed text)"
    assert shown["Accuracy last night"] == f"{(night1.label == night1.pred).mean():.1%}"
    assert shown["Accuracy tonight"] == f"{(now.label == now.pred).mean():.1%}"
    assert shown["Accuracy of tonight's documents"] == f"{(night2.label == night2.pred).mean():.1%}"
    # top-20 words (rollout, last layer) of both states, recomputed from the words files: lift = share x
    # the review's words (no contractions here), the mean per review, then over reviews; words in at least
    # one review in 50 (at least 2), the same threshold both nights; punctuation left out (the report's default)
    min_docs = max(2, min(50, len(now) // 50))

    def top(frames) -> list[str]:
        words = pd.concat(frames).assign(word=lambda f: f.word.str.lower(), score=lambda f: f.score.astype(float))
        words["lift"] = words.score * words.groupby("doc_id").word.transform("size")
        per_doc = words.groupby(["word", "doc_id"]).lift.mean().reset_index()
        stats = per_doc.groupby("word").lift.agg(["mean", "size"]).reset_index()
        punct = stats.word.map(lambda w: all(unicodedata.category(c)[0] in "PS" for c in w))
        stats = stats[(stats["size"] >= min_docs) & ~punct].sort_values(["mean", "word"], ascending=[False, True])
        return stats.word.head(20).tolist()

    words1 = read_slice(store / "runs" / "run_id=nightly-2026-01-01", "words", "rollout", 2)
    words2 = read_slice(store / "runs" / "run_id=nightly-2026-01-02", "words", "rollout", 2)
    then, now_top = top([words1]), top([words1[~words1.doc_id.isin(night2.doc_id)], words2])
    got = changes(page)
    assert {w for w, s in got.items() if s == "entered"} == set(now_top) - set(then)
    assert {w for w, s in got.items() if s == "left"} == set(then) - set(now_top)
    for word in set(then) & set(now_top):
        move = np.sign(then.index(word) - now_top.index(word))
        assert got[word] == {1: "up", -1: "down", 0: "same"}[move]
    assert "Documents scored tonight" in page and "e000" in page


def test_rerun_and_quiet_night_score_nothing(two_nights, capsys):
    store, cfg = two_nights["store"], two_nights["cfg"]
    con = open_store(store)
    before = con.execute("select (select count(*) from docs), (select count(*) from words)").fetchone()
    again = run_nightly(cfg, "2026-01-02")
    assert again.scored == 0 and "already scored" in again.message
    quiet = run_nightly(cfg, "2026-01-03")
    assert quiet.scored == 0 and "no new or changed documents" in quiet.message
    assert quiet.runs == ["nightly-2026-01-01", "nightly-2026-01-02"]
    con = open_store(store)
    assert con.execute("select (select count(*) from docs), (select count(*) from words)").fetchone() == before
    assert sorted(con.execute("select run_id from runs").df().run_id) == ["nightly-2026-01-01", "nightly-2026-01-02"]
    page = quiet.report.read_text()
    assert facts(page)["Scored tonight"] == "0 (0 new, 0 with changed text)"
    assert facts(page)["Last night"] == "2026-01-02"
    assert os.readlink(store / "reports" / "latest") == "2026-01-03"
    # rebuilding an older night leaves latest on the newest
    run_nightly(cfg, "2026-01-02")
    assert os.readlink(store / "reports" / "latest") == "2026-01-03"


def test_overlapping_run_is_refused(two_nights, capsys, tmp_path):
    store, cfg = two_nights["store"], two_nights["cfg"]
    with open(store / ".nightly.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(NightlyError, match="another nightly run is writing store"):
            run_nightly(cfg, "2026-01-04")
        path = tmp_path / "nightly.yaml"
        path.write_text(yaml.safe_dump({k: v for k, v in cfg.to_dict().items() if k != "extra"}))
        assert cli.main(["nightly", str(path), "--date", "2026-01-04"]) == 2
        assert "another nightly run is writing store" in capsys.readouterr().err
    assert not (store / "reports" / "2026-01-04").exists()


def test_killed_run_is_completed_by_the_next(ray_cluster, tiny_bert_dir, tmp_path):
    """SIGKILL while the actors score: nothing is published; the next run scores it all, once."""
    data, store = tmp_path / "incoming", tmp_path / "store"
    rng = np.random.default_rng(1)
    ids = [f"k{i:03d}" for i in range(40)]
    write_corpus(data, "day.parquet", ids, sentences(rng, 40), rng.integers(0, 2, 40))
    cfg = config(tiny_bert_dir, data, store)
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump({**{k: v for k, v in cfg.to_dict().items() if k != "extra"}, "batch_size": 2}))
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    child = subprocess.Popen(
        [sys.executable, "-m", "xai_ray.cli", "nightly", str(path), "--date", "2026-02-01"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    seen, deadline = "", time.monotonic() + 120
    try:
        while "scoring 40 documents" not in seen and time.monotonic() < deadline and child.poll() is None:
            if select.select([child.stderr], [], [], 1.0)[0]:
                seen += child.stderr.readline()
        assert "scoring 40 documents" in seen, seen[-2000:]
        # killed at once: the driver hands a small corpus's batches to warm actors itself, and 40
        # tiny reviews are scored and published well within the half second this test once waited
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert not (store / "runs" / "run_id=nightly-2026-02-01").exists()
    assert (store / "_staging" / "run_id=nightly-2026-02-01").exists()

    done = run_nightly(cfg, "2026-02-01")
    assert done.scored == 40 and done.runs == ["nightly-2026-02-01"]
    docs = open_store(store).execute("select doc_id from docs").df()
    assert sorted(docs.doc_id) == ids  # every document once
    assert not (store / "_staging" / "run_id=nightly-2026-02-01").exists()


def test_a_quiet_night_prints_its_result_and_nothing_else(ray_cluster, tiny_bert_dir, tmp_path):
    """``-q``: the two result lines on stdout, nothing on stderr (weight loading, Ray's executor lines
    and warnings go to the night's log file)."""
    data, store = tmp_path / "incoming", tmp_path / "store"
    rng = np.random.default_rng(2)
    write_corpus(data, "day.parquet", [f"q{i}" for i in range(6)], sentences(rng, 6), rng.integers(0, 2, 6))
    path = tmp_path / "nightly.yaml"
    cfg = config(tiny_bert_dir, data, store)
    path.write_text(yaml.safe_dump({k: v for k, v in cfg.to_dict().items() if k != "extra"}))
    env = {**os.environ, "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}

    def night(date: str) -> tuple[list[str], str]:  # (stdout's lines, the night's log) of `-q nightly`
        command = [sys.executable, "-m", "xai_ray.cli", "-q", "nightly", str(path), "--date", date]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
        return done.stdout.splitlines(), (store / "logs" / f"nightly-{date}.log").read_text()

    lines, log = night("2026-03-01")
    assert len(lines) == 2 and lines[0].startswith("nightly 2026-03-01: scored 6") and lines[1].startswith("report: ")
    assert "INFO xai_ray: nightly: scoring 6 new or changed documents of 6" in log  # -q quiets the terminal only
    # a night whose only new rows cannot be scored says how many, and its log says why
    write_corpus(data, "bad.parquet", ["new1", "new2"], ["", "   "], [0, 1])
    lines, log = night("2026-03-02")
    assert "nothing to score; 2 row(s) cannot be scored" in lines[0]
    assert "new1 cannot be scored: text is empty or whitespace only" in log and "new2 cannot be scored" in log


@pytest.mark.browser
def test_nightly_report_renders_in_headless_chromium(two_nights, tmp_path, chromium):
    page = two_nights["second"].report
    base = chromium(tmp_path)
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line and "source: file://" in line] == []
    since = re.search(r'<section id="since_last_night">(.*?)</section>', dom.stdout, re.S).group(1)
    assert "<svg" in since and "<path" in since  # the rank slope chart rendered
    charts = re.split(r'<div class="chart[^"]*" id="chart-\d+"', dom.stdout)[1:]
    assert len(charts) == page.read_text().count("class='chart'")
    assert all("<svg" in chart.split("</section>")[0] for chart in charts)
    if os.environ.get("XAI_RAY_REPORT_SHOT"):  # keep a screenshot to look at
        subprocess.run(
            [*base, "--window-size=1300,2600", f"--screenshot={os.environ['XAI_RAY_REPORT_SHOT']}", page.as_uri()],
            capture_output=True,
            timeout=120,
        )


def test_nightly_into_an_object_store_uri(ray_cluster, tiny_bert_dir, tmp_path, monkeypatch):
    """file:// goes through pyarrow.fs like s3://: the run, tonight's report and latest are uploaded."""
    monkeypatch.setenv("XAI_RAY_CACHE", str(tmp_path / "cache"))
    data, bucket = tmp_path / "incoming", tmp_path / "bucket"
    rng = np.random.default_rng(2)
    write_corpus(data, "day.parquet", [f"u{i}" for i in range(6)], sentences(rng, 6), rng.integers(0, 2, 6))
    cfg = config(tiny_bert_dir, data, f"file://{bucket}/xai")
    result = run_nightly(cfg, "2026-03-01")
    assert result.scored == 6
    run = bucket / "xai" / "runs" / "run_id=nightly-2026-03-01"
    manifest = yaml.safe_load((run / "manifest.json").read_text())
    assert manifest["counts"]["docs"] == 6 and manifest["config"]["extra"]["store_uri"] == f"file://{bucket}/xai"
    assert (bucket / "xai" / "reports" / "2026-03-01" / "report.html").read_text() == result.report.read_text()
    assert "url=../2026-03-01/report.html" in (bucket / "xai" / "reports" / "latest" / "report.html").read_text()
    monkeypatch.setenv("XAI_RAY_CACHE", str(tmp_path / "cache-2"))  # another machine, the same night again
    again = run_nightly(cfg, "2026-03-01")
    assert again.scored == 0 and "already scored" in again.message

    # a second night, then the first rebuilt: the bucket's latest stays on the newest, as the mirror's
    write_corpus(data, "day2.parquet", ["v0", "v1"], sentences(rng, 2), [0, 1])
    assert run_nightly(cfg, "2026-03-02").scored == 2
    assert run_nightly(cfg, "2026-03-01").scored == 0
    assert "url=../2026-03-02/report.html" in (bucket / "xai" / "reports" / "latest" / "report.html").read_text()

    # the night's upload cut short before its manifest: the night's rerun finishes it
    (bucket / "xai" / "runs" / "run_id=nightly-2026-03-02" / "manifest.json").unlink()
    finished = run_nightly(cfg, "2026-03-02")
    assert "is done now" in finished.message and finished.counts["docs"] == 2
    assert (bucket / "xai" / "runs" / "run_id=nightly-2026-03-02" / "manifest.json").is_file()


def test_run_and_nightly_keep_and_reject_the_same_rows_of_a_hostile_corpus(ray_cluster, tiny_bert_dir, tmp_path):
    """One publishing path: a corpus with a duplicate id (two texts), an empty text, a null text and a
    label outside the model's classes gives `run` and the first `nightly` the same docs and errors."""
    data = tmp_path / "incoming"
    ids = ["a", "b", "dup", "c", "dup", "empty", "null", "bad-label"]
    texts = [
        "the film was good.",
        "bad plot.",
        "first version kept.",
        "very boring movie.",
        "second version.",
        "   ",
        None,
        "fine story.",
    ]
    labels = [1, 0, 1, 0, 0, 1, 0, 7]
    write_corpus(data, "day1.parquet", ids, texts, labels)
    by_run, by_night = tmp_path / "run-store", tmp_path / "night-store"
    from xai_ray import pipeline

    pipeline.run(config(tiny_bert_dir, data, by_run))
    run_nightly(config(tiny_bert_dir, data, by_night), "2026-03-01")

    def tables(store: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
        con = open_store(store)
        docs = con.execute("select doc_id, text, label from docs order by doc_id").df()
        errors = con.execute("select doc_id, stage, reason from errors order by doc_id, reason").df()
        return docs, errors

    run_docs, run_errors = tables(by_run)
    night_docs, night_errors = tables(by_night)
    # Expected from the corpus itself: the first of the two "dup" rows is kept, the other four rows rejected.
    assert run_docs.doc_id.tolist() == ["a", "b", "c", "dup"]
    assert run_docs.set_index("doc_id").loc["dup", "text"] == "first version kept."
    assert sorted(run_errors.doc_id) == ["bad-label", "dup", "empty", "null"]
    pd.testing.assert_frame_equal(night_docs, run_docs)
    pd.testing.assert_frame_equal(night_errors, run_errors)
    assert len(run_docs) + len(run_errors) == len(ids)  # every input row once, in docs or in errors


def test_a_second_configuration_in_one_store_is_refused(ray_cluster, tiny_bert_dir, tmp_path):
    # the union, "since last night" and `latest` would mix the two: one configuration per store
    from dataclasses import replace

    data, store = tmp_path / "incoming", tmp_path / "store"
    rng = np.random.default_rng(3)
    write_corpus(data, "day.parquet", [f"k{i}" for i in range(4)], sentences(rng, 4), rng.integers(0, 2, 4))
    cfg = config(tiny_bert_dir, data, store)
    run_nightly(cfg, "2026-04-01")
    other = replace(cfg, methods=("raw",))
    for date in ("2026-04-02", "2026-04-01"):  # a later night, and the same night again
        with pytest.raises(NightlyError, match="holds nightly runs of another configuration") as refused:
            run_nightly(other, date)
        assert "which differs in methods: here ['raw'], there ['raw', 'rollout']" in str(refused.value)
    assert sorted(p.name for p in (store / "runs").iterdir()) == ["run_id=nightly-2026-04-01"]
    assert run_nightly(cfg, "2026-04-02").scored == 0  # the first configuration goes on


def test_backfill_a_reserved_run_id_and_loose_dates(ray_cluster, tiny_bert_dir, tmp_path):
    """An earlier night run after a later one scored every document again (its known documents
    were only the nights before it); `run` took a `nightly-` id, whose run then blocked every later
    night as "another configuration"; `--date` took 20260305 and 2026-W10-1 as other nights."""
    from xai_ray.config import ConfigError
    from xai_ray.ops.nightly import parse_date
    from xai_ray.pipeline import run

    data, store = tmp_path / "incoming", tmp_path / "store"
    rng = np.random.default_rng(1)
    write_corpus(data, "a.parquet", [f"b{i}" for i in range(6)], sentences(rng, 6), rng.integers(0, 2, 6))
    cfg = config(tiny_bert_dir, data, store)
    assert run_nightly(cfg, "2026-02-10").scored == 6
    assert run_nightly(cfg, "2026-02-10").counts["docs"] == 6  # a rerun exits as the night's run did
    with pytest.raises(NightlyError, match="comes before the store's first night"):
        run_nightly(cfg, "2026-02-05")
    assert not (store / "runs" / "run_id=nightly-2026-02-05").exists()
    with pytest.raises(ConfigError, match="the nightly job's"):
        run(replace(cfg, run_id="nightly-2026-02-11"))
    assert not (store / "runs" / "run_id=nightly-2026-02-11").exists()
    assert run_nightly(cfg, "2026-02-11").message.startswith("no new or changed documents")
    for text in ("20260305", "2026-W10-1", "2026-3-1"):
        with pytest.raises(ConfigError, match="YYYY-MM-DD"):
            parse_date(text)
    # a night to come: its documents would be known to every night before it, and latest stuck on it
    from datetime import date, timedelta

    assert parse_date((date.today() + timedelta(days=1)).isoformat())  # a submitter east of its cluster
    with pytest.raises(ConfigError, match="is a night still to come"):
        parse_date((date.today() + timedelta(days=2)).isoformat())
    with pytest.raises(NightlyError, match="would score the same 3 documents"):
        run_nightly(replace(cfg, limit=3), "2026-02-12")


def test_last_night_is_a_night_whose_runs_are_still_here(tmp_path):
    """Night 21's run deleted by hand: night 22's "Since last night" said "last night 2026-11-21"
    over night 20's documents (12, where night 21's own report said 18). Last night is now the
    newest night whose recorded runs are all still in the store; a quiet night (no run of its own)
    still counts."""
    from xai_ray.ops.nightly import _previous_night

    def night(date: str, runs: list[str]) -> None:
        folder = tmp_path / "reports" / date
        folder.mkdir(parents=True)
        (folder / "nightly.json").write_text(json.dumps({"date": date, "runs": runs}))

    night("2026-11-20", ["nightly-2026-11-20"])
    night("2026-11-21", ["nightly-2026-11-20", "nightly-2026-11-21"])
    night("2026-11-23", ["nightly-2026-11-20", "nightly-2026-11-21"])  # quiet: nothing new
    every = ["nightly-2026-11-20", "nightly-2026-11-21"]
    assert _previous_night(tmp_path, "2026-11-22", every) == "2026-11-21"
    assert _previous_night(tmp_path, "2026-11-24", every) == "2026-11-23"  # the quiet night
    assert _previous_night(tmp_path, "2026-11-22", ["nightly-2026-11-20"]) == "2026-11-20"  # 21's run deleted
    assert _previous_night(tmp_path, "2026-11-24", ["nightly-2026-11-20"]) == "2026-11-20"
    assert _previous_night(tmp_path, "2026-11-20", []) is None
    # a later night's run published without its report (stopped between the two): its night
    every = [*every, "nightly-2026-11-24"]
    assert _previous_night(tmp_path, "2026-11-25", every) == "2026-11-24"
    # nights 20, 21 and 24 with runs, 21's deleted: the union of 20 and 24 is night 24's numbers
    assert _previous_night(tmp_path, "2026-11-25", ["nightly-2026-11-20", "nightly-2026-11-24"]) == "2026-11-24"
