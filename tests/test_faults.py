"""Faults without Ray: a writer killed at every rename, retried deliveries, out-of-memory halving,
failing documents and batches, megabyte texts (bad input is in test_bad_input.py).

The killed-writer test stands in for a killed driver at every point where files change: whatever
the moment, reopening the run keeps whole committed parts only and finishing it leaves every
document exactly once in docs, tokens and words.
"""

from __future__ import annotations

import gc
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from xai_ray import cli
from xai_ray.config import ConfigError
from xai_ray.query.connection import QueryError, open_store
from xai_ray.store import StoreError, files
from xai_ray.store.layout import run_dir, staging_dir
from xai_ray.store.scores_v3 import row_runs
from xai_ray.store.writer import RunWriter

METHODS = ["raw", "rollout"]
TEXTS = [
    "the film was good",
    "bad movie",
    "i loved the story",
    "not very boring",
    "the plot is fine",
    "great acting and a great plot",
    "it was playing",
    "unbelievable film",
]


def scorer_rows(scorer, texts, first=0):
    ids = [f"d{first + i}" for i in range(len(texts))]
    return scorer({"doc_id": ids, "text": list(texts), "label": [i % 2 for i in range(len(texts))]})


def publish_small_store(root, scorer):
    """A published run ``r`` of the eight TEXTS in four parts: the store the SQL tests read."""
    writer = RunWriter(root, "r", METHODS)
    for first in range(0, 8, 2):
        writer.write(scorer_rows(scorer, TEXTS[first : first + 2], first=first))
    writer.publish({"created_at": "2026-01-01T00:00:00", "config": {"methods": METHODS}})
    return root


@pytest.fixture(scope="module")
def batches(scorer_factory):
    """Four batches of real scorer rows (tiny BERT): eight documents and one error row."""
    scorer = scorer_factory("bert")
    out = [scorer_rows(scorer, TEXTS[i : i + 2], first=i) for i in range(0, 8, 2)]
    out.append(scorer({"doc_id": ["bad"], "text": [None], "label": [0]}))
    return out


def expected_counts(batches):
    """Per document: tokens per method/layer slice and words, from the scorer rows themselves."""
    rows = [r for b in batches for r in b.to_pylist() if not r["error"]]
    return {r["doc_id"]: (r["n_tokens"], len(r["words"])) for r in rows}, rows[0]["n_layers"]


def assert_exactly_once(store, run_id, batches):
    """Every scored document once in docs, its every token once per slice, its every word once per slice."""
    counts, n_layers = expected_counts(batches)
    con = open_store(store)
    docs = con.execute("select doc_id from docs where run_id = $r", {"r": run_id}).df()
    assert sorted(docs.doc_id) == sorted(counts)
    errors = con.execute("select doc_id, stage from errors where run_id = $r", {"r": run_id}).df()
    assert errors.doc_id.tolist() == ["bad"] and errors.stage.tolist() == ["score"]
    for table, column in (("tokens", "position"), ("words", "word_id")):
        got = con.execute(
            f"select doc_id, method, layer, count(*) as n, count(distinct {column}) as k "
            f"from {table} where run_id = $r group by all",
            {"r": run_id},
        ).df()
        assert len(got) == len(counts) * len(METHODS) * n_layers, table
        for row in got.itertuples():
            want = counts[row.doc_id][0 if table == "tokens" else 1]
            assert row.n == row.k == want, (table, row)
    return con


def test_a_writer_killed_at_every_rename_resumes_to_exactly_once(tmp_path, batches, monkeypatch):
    real_replace = os.replace
    calls = []

    def counting(src, dst):
        calls.append(dst)
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", counting)
    clean = RunWriter(tmp_path / "clean", "r", METHODS, part_rows=1)
    for batch in batches:
        clean.write(batch)
    clean.publish({"created_at": "x"})
    n_points = len(calls)
    # every part's files and its record, then the identity and the manifest
    assert n_points == sum(len(record["files"]) + 1 for record in clean.stage.records) + 2 > 15

    class Killed(BaseException):
        pass

    for kill_at in range(n_points):
        store = tmp_path / f"kill{kill_at}"
        seen = []

        def dying(src, dst, kill_at=kill_at, seen=seen):
            seen.append(dst)
            if len(seen) > kill_at:
                raise Killed  # the process dies here: no cleanup runs
            return real_replace(src, dst)

        monkeypatch.setattr(files.os, "replace", dying)
        opened = []
        with pytest.raises(Killed):
            opened.append(RunWriter(store, "r", METHODS, part_rows=1))
            for batch in batches:
                opened[0].write(batch)
            opened[0].publish({"created_at": "x"})
        if opened:
            opened[0].stage.close()  # a killed process's flock goes with it
        gc.collect()  # (and so does the lock of a writer killed while opening)
        monkeypatch.setattr(files.os, "replace", real_replace)

        resumed = RunWriter(store, "r", METHODS, part_rows=1)
        assert not list(staging_dir(store, "r").rglob("*.tmp"))
        for batch in batches:  # what the pipeline does: skip the documents already committed
            mask = [doc_id not in resumed.done_ids for doc_id in batch.column("doc_id").to_pylist()]
            if any(mask):
                resumed.write(batch.filter(mask))
        resumed.publish({"created_at": "x"})
        assert resumed.counts["duplicates"] == 0
        assert_exactly_once(store, "r", batches)


def test_a_retried_delivery_is_dropped_and_counted(tmp_path, batches):
    writer = RunWriter(tmp_path, "r", METHODS)
    for batch in batches + batches[1:3]:  # two batches delivered twice, as a retried Ray task can
        writer.write(batch)
    writer.publish({"created_at": "x"})
    assert writer.counts["duplicates"] == batches[1].num_rows + batches[2].num_rows
    assert_exactly_once(tmp_path, "r", batches)
    manifest = json.loads((run_dir(tmp_path, "r") / "manifest.json").read_text())
    assert manifest["counts"]["duplicates"] == 4 and manifest["counts"]["docs"] == 8


def test_parts_are_committed_durably_and_reused(tmp_path, batches):
    writer = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    writer.write(batches[0])
    writer.write(batches[1])
    with pytest.raises(StoreError, match="another process is writing"):
        RunWriter(tmp_path, "r", METHODS)
    writer.abort(keep_parts=True)
    folder = staging_dir(tmp_path, "r")
    assert sorted(p.name for p in (folder / "docs").iterdir()) == ["part-0.parquet", "part-1.parquet"]
    assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
    again = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    assert again.done_ids == {"d0", "d1", "d2", "d3"} and again.reused["parts"] == 2
    assert again.counts["docs"] == 4
    for batch in batches[2:]:
        again.write(batch)
    target = again.publish({"created_at": "x"})
    assert sorted(p.name for p in (target / "docs").iterdir())[:3] == [
        "part-0.parquet",
        "part-1.parquet",
        "part-2.parquet",
    ]
    assert not folder.exists() and not (target / ".lock").exists()
    assert_exactly_once(tmp_path, "r", batches)


def test_a_damaged_part_of_an_unfinished_run_is_scored_again(tmp_path, batches):
    """A part whose file is gone, or whose record is cut short, counted as committed: a resume then
    skipped its documents, and the published run held them nowhere (neither docs nor errors)."""
    writer = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    for batch in batches[:3]:
        writer.write(batch)
    writer.abort(keep_parts=True)
    folder = staging_dir(tmp_path, "r")
    (folder / "docs" / "part-1.parquet").unlink()  # a file gone
    record = folder / "_parts" / "part-2.json"
    record.write_bytes(record.read_bytes()[:50])  # a record cut short

    again = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    assert again.done_ids == {"d0", "d1"} and again.reused["parts"] == 1
    assert sorted(p.name for p in (folder / "token_scores").iterdir()) == ["part-0.parquet"]  # the rest swept
    for batch in batches:
        mask = [doc_id not in again.done_ids for doc_id in batch.column("doc_id").to_pylist()]
        again.write(batch.filter(mask))
    again.publish({"created_at": "x"})
    assert_exactly_once(tmp_path, "r", batches)


def test_a_published_run_missing_a_part_file_is_refused_not_read_short(tmp_path, batches):
    writer = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x"})
    (run / "docs" / "part-1.parquet").unlink()
    with pytest.raises(QueryError, match=r"run 'r' is damaged: docs/part-1.parquet, which _parts/part-1.json lists"):
        open_store(tmp_path)
    (run / "token_scores" / "part-2.parquet").write_bytes(b"PAR1 cut short")  # no closing magic bytes
    (run / "_parts" / "part-1.json").unlink()  # (its part no longer counts)
    with pytest.raises(QueryError, match=r"token_scores/part-2.parquet, which _parts/part-2.json lists"):
        open_store(tmp_path)


def test_a_published_run_whose_record_is_damaged_deleted_or_whose_part_is_a_link_is_refused(tmp_path, batches):
    """Each of these left the part's rows out of every view without a word (its files then
    looked like stray copies, or the link was skipped), while topk's kept totals still counted
    them: the views refuse the run, naming what is wrong."""
    import shutil

    writer = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x"})
    count = "select (select count(*) from docs), (select count(distinct doc_id) from words)"
    whole = open_store(tmp_path).execute(count).fetchone()
    assert whole[0] > 0 and whole[1] == whole[0]
    record = run / "_parts" / "part-1.json"
    kept = record.read_bytes()
    held = json.loads(kept)["counts"]["docs"]
    assert held > 0

    record.write_bytes(kept[:40])  # cut short
    with pytest.raises(QueryError, match=r"run 'r' is damaged: _parts/part-1.json is not a part record"):
        open_store(tmp_path)
    record.write_text(json.dumps({"files": [], "doc_ids": []}))  # edited: no part key
    with pytest.raises(QueryError, match=r"_parts/part-1.json is not a part record"):
        open_store(tmp_path)
    record.unlink()  # deleted
    with pytest.raises(
        QueryError, match=rf"the part records in _parts hold {whole[0] - held} of the {whole[0]} documents"
    ):
        open_store(tmp_path)
    record.write_bytes(kept)
    assert open_store(tmp_path).execute(count).fetchone() == whole  # restored: read whole again

    part = run / "docs" / "part-1.parquet"
    outside = tmp_path / "elsewhere.parquet"
    shutil.move(part, outside)
    part.symlink_to(outside)  # as git-annex and DVC keep files
    with pytest.raises(QueryError, match=r"docs/part-1.parquet, which _parts/part-1.json lists, is a symbolic link"):
        open_store(tmp_path)


@pytest.mark.parametrize("claimed", [1, 2])
def test_a_manifest_edited_to_another_layout_is_refused_not_read_empty(tmp_path, batches, claimed):
    """A layout-3 run whose manifest was edited to say layout 1 or 2 gave empty ``words`` (and
    ``tokens``) views without a word: its parts' records say how they were written."""
    writer = RunWriter(tmp_path, "r", METHODS)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x"})
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["store_layout"] == 3
    (run / "manifest.json").write_text(json.dumps({**manifest, "store_layout": claimed}))
    with pytest.raises(
        QueryError,
        match=rf"says store layout {claimed} in its manifest, but _parts/part-0.json was written in layout 3",
    ):
        open_store(tmp_path)


def test_a_layout_2_run_whose_read_errors_were_written_in_layout_3_stays_readable(tmp_path, batches):
    """Before 2026-11-27 a layout-2 run's read errors went into a part recorded as layout 3, and the
    views refused the run (and with it the store); a part of errors reads alike in every layout."""
    from xai_ray.store.parts import PartWriter

    writer = RunWriter(tmp_path, "r", METHODS, layout=2)
    for batch in batches:
        writer.write(batch)
    writer.collect(PartWriter(tmp_path, "r", [], layout=3).write_errors(["bad1"], "read", ["empty"], key="read"))
    writer.publish({"created_at": "x"})
    errors = open_store(tmp_path).execute("select doc_id, stage from errors where stage = 'read'").fetchall()
    assert errors == [("bad1", "read")]


def test_a_part_damaged_inside_is_one_sentence_in_every_command(tmp_path, batches, capsys):
    """A file that keeps its closing magic bytes but whose insides are damaged passes the views'
    check and fails when DuckDB reads it: `sql`, `topk` and `report` say so in one line."""
    from xai_ray import cli

    writer = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x", "config": {"methods": METHODS}})
    part = run / "token_scores" / "part-1.parquet"
    part.write_bytes(b"PAR1" + b"\x5a" * (part.stat().st_size - 8) + b"PAR1")
    for argv in (
        ["sql", "--store", str(tmp_path), "select sum(score) from tokens"],
        ["topk", "--store", str(tmp_path), "--method", "rollout", "--layer", "2", "--k", "3"],
    ):
        assert cli.main(argv) == 2, argv
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and said[0].startswith("xai-ray: ") and "part-1.parquet" in said[0], said


def test_a_page_damaged_inside_a_part_whose_footer_reads_is_named_by_sql(tmp_path, batches, capsys):
    """Bytes overwritten inside a part, its footer whole: DuckDB's error ("don't know what type:")
    named nothing; `sql` now reads the store's files to name the damaged one."""
    from xai_ray import cli

    writer = RunWriter(tmp_path, "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x", "config": {"methods": METHODS}})
    part = run / "token_scores" / "part-1.parquet"
    group = pq.ParquetFile(part).metadata.row_group(0)
    chunk = next(  # a score column's pages: not the ids the views' checks read
        column
        for column in (group.column(j) for j in range(group.num_columns))
        if column.path_in_schema == "score:rollout:2"
    )
    start, size = chunk.data_page_offset, chunk.total_compressed_size
    data = bytearray(part.read_bytes())
    data[start : start + size] = np.random.default_rng(0).integers(0, 256, size, np.uint8).tobytes()
    part.write_bytes(bytes(data))
    assert cli.main(["sql", "--store", str(tmp_path), "select sum(score) from tokens"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("xai-ray: "), said
    assert "runs/run_id=r/token_scores/part-1.parquet is damaged" in said[0], said


def publish_batches(root, batches, **manifest):
    """The run ``r`` of ``batches``, published in one part per writer flush; its folder."""
    writer = RunWriter(root, "r", METHODS)
    for batch in batches:
        writer.write(batch)
    return writer.publish({"created_at": "x", **manifest})


def test_a_stray_copy_of_a_part_is_not_read_as_more_rows(tmp_path, batches):
    """A file manager's "part-0 (copy).parquet" beside the parts: no record names it, so the views
    leave it out (it counted every document and token of that part twice); a run copied without
    its records is read whole, and refused when its docs files hold more than its manifest counts."""
    import shutil

    run = publish_batches(tmp_path, batches)
    count = "select (select count(*) from docs), (select count(*) from tokens), (select count(*) from words)"
    before = open_store(tmp_path).execute(count).fetchone()
    for folder in ("docs", "token_scores"):
        shutil.copy(run / folder / "part-0.parquet", run / folder / "part-0 (copy).parquet")
    assert open_store(tmp_path).execute(count).fetchone() == before
    for folder in ("docs", "token_scores"):  # a copy under a name a writer gives, with no record
        shutil.copy(run / folder / "part-0.parquet", run / folder / "part-1.parquet")
    assert open_store(tmp_path).execute(count).fetchone() == before
    records = tmp_path / "records"
    shutil.copytree(run / "_parts", records)
    shutil.rmtree(run / "_parts")  # no records: every file under a part's name is the run's
    with pytest.raises(QueryError, match=r"run 'r' has no part records \(_parts\).* hold \d+ documents where"):
        open_store(tmp_path)  # it read every document of part-0 twice
    for folder in ("docs", "token_scores"):
        (run / folder / "part-1.parquet").unlink()
    assert open_store(tmp_path).execute(count).fetchone() == before  # without the copy: read whole again
    shutil.copytree(records, run / "_parts")
    first = sorted((run / "_parts").glob("part-*.json"))[0]
    shutil.copy(first, run / "_parts" / "part-copied.json")  # a record copied in: its documents counted twice
    with pytest.raises(QueryError, match=r"the part records in _parts hold \d+ documents where its manifest counts"):
        open_store(tmp_path)


def test_copies_and_losses_in_any_table_are_refused_against_the_manifest(tmp_path, batches):
    """A sync tool's copy (``part-0-DESKTOP1.parquet``) of a table no part record names (errors,
    heads, ...) was read as more rows; in a run without records a scores part missing or copied read
    the run short or twice, and a pipe among its docs parts hung every reader."""
    import os
    import shutil

    run = publish_batches(tmp_path, batches)
    count = "select (select count(*) from docs), (select count(*) from errors), (select count(*) from tokens)"
    before = open_store(tmp_path).execute(count).fetchone()
    error_file = sorted((run / "errors").glob("part-*.parquet"))[0]
    shutil.copy(error_file, run / "errors" / "part-0-DESKTOP1.parquet")
    with pytest.raises(
        QueryError, match=r"run 'r' is damaged: its errors files hold 2 rows where its manifest counts 1 \(a copy"
    ):
        open_store(tmp_path)
    (run / "errors" / "part-0-DESKTOP1.parquet").unlink()
    shutil.move(error_file, tmp_path / "kept.parquet")
    with pytest.raises(QueryError, match=r"errors/part-0.parquet, which _parts/part-0.json lists, is missing"):
        open_store(tmp_path)
    shutil.move(tmp_path / "kept.parquet", error_file)

    shutil.rmtree(run / "_parts")  # a copy of the run without its records: read whole
    assert open_store(tmp_path).execute(count).fetchone() == before
    scores = sorted((run / "token_scores").glob("part-*.parquet"))
    shutil.copy(scores[0], run / "token_scores" / "part-0-DESKTOP1.parquet")
    with pytest.raises(QueryError, match=r"has no part records \(_parts\).* token_scores files hold \d+ rows where"):
        open_store(tmp_path)
    (run / "token_scores" / "part-0-DESKTOP1.parquet").unlink()
    shutil.move(scores[-1], tmp_path / "kept.parquet")
    with pytest.raises(QueryError, match=r"token_scores files hold \d+ rows where its manifest's counts give"):
        open_store(tmp_path)
    shutil.move(tmp_path / "kept.parquet", scores[-1])
    os.mkfifo(run / "docs" / "part-9.parquet")  # never opened: it held every reader up
    assert open_store(tmp_path).execute(count).fetchone() == before
    docs = sorted((run / "docs").glob("part-[0-8]*.parquet"))[0]
    shutil.move(docs, tmp_path / "docs.parquet")
    docs.symlink_to(tmp_path / "docs.parquet")  # a link is never followed: its documents are not the run's
    with pytest.raises(QueryError, match=r"has no part records .* its docs files hold \d+ documents where"):
        open_store(tmp_path)


def test_a_run_folder_without_its_manifest_is_said_to_be_left_out(tmp_path, batches, caplog):
    """A run folder whose manifest is gone (rsync copies it after the tables) was left out of every
    answer without a word; ``--run`` said there was no such run, and the nightly union dropped it."""
    import shutil

    from xai_ray.ops.nightly import _refuse_unlisted_nights
    from xai_ray.store import StoreError

    run = publish_batches(tmp_path, batches)
    night = tmp_path / "runs" / "run_id=nightly-2026-01-02"
    shutil.copytree(run, night)
    (night / "manifest.json").unlink()
    with caplog.at_level("WARNING", logger="xai_ray"):
        assert open_store(tmp_path).execute("select count(distinct run_id) from docs").fetchone() == (1,)
    assert "run 'nightly-2026-01-02' is left out of every query: its folder's manifest.json is missing" in caplog.text
    with pytest.raises(QueryError, match="run 'nightly-2026-01-02' is not read: its folder's manifest.json is missing"):
        open_store(tmp_path, run="nightly-2026-01-02")
    with pytest.raises(StoreError, match="nightly run 'nightly-2026-01-02' is not read: .* would leave its documents"):
        _refuse_unlisted_nights(tmp_path)
    (run / "manifest.json").rename(tmp_path / "m.json")
    (run / "manifest.json").symlink_to(tmp_path / "m.json")
    with pytest.raises(QueryError, match="run 'r' is not read: its folder's manifest.json is a symbolic link"):
        open_store(tmp_path, run="r")


def test_a_damaged_kept_aggregate_is_computed_again(tmp_path):
    """A kept aggregate is a cache of the run: one cut short reads as never kept (the report
    computes it again) instead of a pyarrow traceback."""
    import pandas as pd

    from xai_ray.store.aggregates import read_aggregate, write_aggregate

    (tmp_path / "runs" / "run_id=r").mkdir(parents=True)
    (tmp_path / "runs" / "run_id=r" / "manifest.json").write_text('{"created_at": "2026-01-01T00:00:00+00:00"}')
    kept = write_aggregate(tmp_path, "r", "report_topk_all", {"k": 3}, pd.DataFrame({"word": ["a"], "n": [1]}))
    assert read_aggregate(tmp_path, "r", "report_topk_all", {"k": 3}).to_dict("list") == {"word": ["a"], "n": [1]}
    kept.write_bytes(kept.read_bytes()[:40])
    assert read_aggregate(tmp_path, "r", "report_topk_all", {"k": 3}) is None


def test_a_part_whose_columns_are_not_its_records_is_one_sentence_in_sql(tmp_path, batches, capsys):
    """The views could not bind (a score column its record lists is gone): a sentence naming the
    part and the column, not the last line of a traceback."""
    from xai_ray import cli

    run = publish_batches(tmp_path, batches, config={"methods": METHODS})
    part = run / "token_scores" / "part-0.parquet"
    table = pq.read_table(part)
    dropped = next(name for name in table.column_names if name.startswith("score:"))
    pq.write_table(table.drop_columns([dropped]), part)
    assert cli.main(["sql", "--store", str(tmp_path), "select count(*) from docs"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("xai-ray: run 'r' is damaged: token_scores/part-0.parquet"), said
    assert f"it lacks the column {dropped!r} of a slice the record lists" in said[0]


def test_a_file_or_run_folder_named_in_other_bytes_than_utf8_is_left_out(tmp_path, batches):
    """DuckDB cannot be handed such a name, and every query on the store failed naming none."""
    import os
    import shutil

    run = publish_batches(tmp_path, batches)
    count = "select (select count(*) from runs), (select count(*) from docs)"
    before = open_store(tmp_path).execute(count).fetchone()
    runs = os.fsencode(tmp_path / "runs")
    shutil.copytree(run, os.fsdecode(runs + b"/run_id=\xff"))
    shutil.copy(run / "docs" / "part-0.parquet", os.fsdecode(os.fsencode(run / "docs") + b"/\xfe.parquet"))
    assert open_store(tmp_path).execute(count).fetchone() == before


def test_a_resume_with_other_settings_is_refused(tmp_path, batches):
    writer = RunWriter(tmp_path, "r", METHODS, identity={"methods": METHODS, "max_length": 32}, part_rows=1)
    writer.write(batches[0])
    writer.abort(keep_parts=True)
    with pytest.raises(StoreError, match=r"other settings \(max_length\)"):
        RunWriter(tmp_path, "r", METHODS, identity={"methods": METHODS, "max_length": 64})
    writer = RunWriter(tmp_path, "r", METHODS, identity={"methods": METHODS, "max_length": 32})
    writer.abort()  # the old meaning: nothing of the run is kept
    assert not staging_dir(tmp_path, "r").exists()


def test_large_row_groups_survive_parts(tmp_path, batches):
    writer = RunWriter(tmp_path, "r", METHODS)  # default part size: everything in one part
    for batch in batches:
        writer.write(batch)
    target = writer.publish({"created_at": "x"})
    files = list((target / "token_scores").rglob("*.parquet"))
    assert len(files) == 1  # one part, however many batches
    # one row group per kind of row (store.scores_v3.row_runs), not one per batch written
    table = pq.read_table(files[0])
    kinds = sum(1 for rows in row_runs(table) if rows)
    assert len(batches) > 1 and pq.ParquetFile(files[0]).metadata.num_row_groups == kinds <= 3


# --------------------------------------------------------------------------- scorer faults


def _comparable(table):
    return {r["doc_id"]: r for r in table.to_pylist()}


def test_out_of_memory_halves_the_group_and_loses_nothing(scorer_factory, monkeypatch):
    import xai_ray.model.capture as capture
    import xai_ray.scoring.actor as actor

    monkeypatch.setattr(actor, "CPU_PADDING", None)  # groups as a GPU's: cut by the token budget alone
    scorer = scorer_factory("bert", max_tokens_per_batch=10**9)  # an absurd budget: one group of 8
    ids = [f"d{i}" for i in range(len(TEXTS))]
    batch = {"doc_id": ids, "text": TEXTS, "label": [0] * len(TEXTS)}
    before = _comparable(scorer(batch))
    real = capture.forward_with_attention
    sizes = []

    def small_memory(model, inputs, *args, **kwargs):
        sizes.append(inputs["input_ids"].shape[0])
        if inputs["input_ids"].shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        return real(model, inputs, *args, **kwargs)

    monkeypatch.setattr(capture, "forward_with_attention", small_memory)
    splits, fallbacks = scorer.splits, scorer.fallbacks
    after = _comparable(scorer(batch))
    assert sizes[0] == 8 and sorted(set(sizes)) == [2, 4, 8]  # 8 -> 4+4 -> 2+2+2+2
    assert scorer.splits - splits == 3 and scorer.fallbacks == fallbacks
    assert sorted(after) == sorted(ids) and all(r["error"] is None for r in after.values())
    for doc_id, row in before.items():
        np.testing.assert_allclose(after[doc_id]["scores_rollout"], row["scores_rollout"], atol=1e-5)


def test_a_document_that_runs_out_of_memory_alone_is_an_error_row(scorer_factory, monkeypatch):
    import xai_ray.model.capture as capture

    scorer = scorer_factory("bert", max_tokens_per_batch=10**9)
    real = capture.forward_with_attention
    longest = max(len(scorer.tokenizer(t)["input_ids"]) for t in TEXTS)

    def oom_on_long(model, inputs, *args, **kwargs):
        if inputs["input_ids"].shape[1] >= longest:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
        return real(model, inputs, *args, **kwargs)

    monkeypatch.setattr(capture, "forward_with_attention", oom_on_long)
    rows = _comparable(scorer({"doc_id": ["long", "short"], "text": [TEXTS[5], TEXTS[1]], "label": [0, 1]}))
    assert "can't allocate memory" in rows["long"]["error"] and rows["long"]["scores_raw"] is None
    assert rows["short"]["error"] is None and rows["short"]["words"] == ["bad", "movie"]


def test_an_exception_for_one_document_keeps_the_rest_of_the_batch(scorer_factory, monkeypatch):
    import xai_ray.model.capture as capture

    scorer = scorer_factory("bert")
    poison = scorer.tokenizer.convert_tokens_to_ids("boring")
    real = capture.forward_with_attention

    def fails_on_boring(model, inputs, *args, **kwargs):
        if (inputs["input_ids"] == poison).any():
            raise ValueError("a bug in a method")
        return real(model, inputs, *args, **kwargs)

    monkeypatch.setattr(capture, "forward_with_attention", fails_on_boring)
    rows = _comparable(scorer_rows(scorer, TEXTS))
    assert rows["d3"]["error"] == "scoring failed: ValueError: a bug in a method"
    assert all(rows[f"d{i}"]["error"] is None for i in range(8) if i != 3)


def test_a_failure_outside_any_document_becomes_error_rows_not_an_exception(scorer_factory, monkeypatch):
    scorer = scorer_factory("bert")
    monkeypatch.setattr(scorer, "_groups", lambda *a: 1 / 0)
    rows = scorer_rows(scorer, TEXTS[:3]).to_pylist()
    assert [r["doc_id"] for r in rows] == ["d0", "d1", "d2"]
    assert all(r["error"] == "batch failed: ZeroDivisionError: division by zero" for r in rows)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_a_one_megabyte_text_is_cut_truncated_and_flagged(family, scorer_factory):
    import time

    scorer = scorer_factory(family)
    sentence = "the film was good and the plot was fine. "
    huge = sentence * (2**20 // len(sentence) + 1)
    assert len(huge) > 2**20
    started = time.perf_counter()
    rows = _comparable(scorer({"doc_id": ["huge", "short"], "text": [huge, sentence * 20], "label": [1, 0]}))
    assert time.perf_counter() - started < 10
    big, short = rows["huge"], rows["short"]
    assert big["error"] is None and big["truncated"] is True and big["n_tokens"] == 32
    assert big["tokens"] == short["tokens"] and big["words"] == short["words"]  # the same first 32 tokens
    np.testing.assert_allclose(big["scores_rollout"], short["scores_rollout"], atol=1e-5)
    assert big["text"] == huge  # the document keeps its whole text


def test_a_long_text_of_mostly_whitespace_is_not_cut_short(scorer_factory):
    scorer = scorer_factory("bert")
    text = "good" + " " * 200_000 + "bad film"
    row = scorer({"doc_id": ["w"], "text": [text], "label": [0]}).to_pylist()[0]
    assert row["words"] == ["good", "bad", "film"] and row["truncated"] is False


@pytest.mark.parametrize("start", [0, 1, 40, 75, 150])
def test_the_character_cut_of_a_long_text_keeps_the_whole_texts_tokens(start):
    """A long review is cut before the tokenizer sees it (recovery.prefix_for_tokenizer). Cut inside
    a run without whitespace, the run's last piece became another word: 150 letters are one [UNK]
    to WordPiece, their first 76 are pieces, and the kept tokens reached it. The cut now keeps the
    tokens the whole text gives, wherever the run starts."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    from xai_ray.model.recovery import prefix_for_tokenizer

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "ab", "##ab", ".", "x"])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    # three words, then a run of 150-letter words joined by full stops: [UNK] . [UNK] . ...
    text = "x x " + "x" * start + " " + ("ab" * 75 + ".") * 140
    whole = tokenizer(text, truncation=True, max_length=32)["input_ids"]
    cut = prefix_for_tokenizer(tokenizer, text, 32)
    assert len(cut) < len(text)  # still a cut: the tokenizer does not see all of it
    assert tokenizer(cut, truncation=True, max_length=32)["input_ids"] == whole
    assert text.startswith(cut)


def test_a_text_the_tokenizer_drops_whole_is_an_error_row(scorer_factory):
    """BERT's normaliser drops U+FFFD: a review of only U+FFFD passed the screening (a symbol) and
    was stored as a prediction from [CLS] [SEP] alone, with no word, counted in accuracy."""
    from xai_ray.scoring.actor import NO_TOKENS

    scorer = scorer_factory("bert")
    texts = ["\ufffd", "\ufffd\ufffd \ufffd", "good film \ufffd"]
    rows = {r["doc_id"]: r for r in scorer({"doc_id": ["a", "b", "c"], "text": texts, "label": [1, 0, 1]}).to_pylist()}
    assert rows["a"]["error"] == rows["b"]["error"] == NO_TOKENS
    assert rows["c"]["error"] is None and rows["c"]["words"] == ["good", "film"]


def test_an_invisible_tail_is_not_truncation(scorer_factory):
    scorer = scorer_factory("bert")
    rows = _comparable(
        scorer({"doc_id": ["zw", "ctl"], "text": ["good film \u200b\u200b", "bad movie \x00\x07"], "label": [1, 0]})
    )
    assert rows["zw"]["truncated"] is False and rows["ctl"]["truncated"] is False


def test_the_deferred_flow_stage_never_fails_a_batch(scorer_factory, monkeypatch):
    from xai_ray.scoring.deferred import DeferredMethods

    config = {"model": "unused", "max_length": 32, "methods": ["raw", "flow"], "deferred_methods": ["flow"]}
    scorer = scorer_factory("bert", methods=("raw", "flow"), deferred_methods=("flow",))
    batch = scorer_rows(scorer, TEXTS[:3])
    stage = DeferredMethods(config)
    good = stage(batch).to_pylist()
    assert all(r["error"] is None and r["scores_flow"] is not None for r in good)
    monkeypatch.setattr(stage, "_add_methods", lambda table: 1 / 0)
    failed = stage(batch).to_pylist()
    assert sorted(r["doc_id"] for r in failed) == ["d0", "d1", "d2"]  # the scorer sorts by length
    assert all(r["error"] == "flow failed: ZeroDivisionError: division by zero" for r in failed)


@pytest.mark.parametrize("name", ["proj [v1]", "st*ar", "what?"])
def test_a_store_path_with_glob_characters_reads_its_own_files(tmp_path, batches, name):
    """DuckDB takes a path holding [, * or ? as a pattern: the views of a store at "proj [v1]"
    read the files of the store "proj v" beside it (the same run id), or failed on them."""
    ours, beside = tmp_path / name, tmp_path / name.replace("[v1]", "v").replace("*", "").replace("?", "")
    for store, chosen in ((ours, batches[:2]), (beside, batches[2:4])):
        writer = RunWriter(store, "r", METHODS)
        for batch in chosen:
            writer.write(batch)
        writer.publish({"created_at": "x"})
    con = open_store(ours)
    assert sorted(con.execute("select doc_id from docs").df().doc_id) == ["d0", "d1", "d2", "d3"]
    assert con.execute("select count(distinct doc_id) from tokens").fetchone() == (4,)


def test_a_run_that_scored_nothing_leaves_the_next_runs_topk_alone(tmp_path, batches):
    """A run whose every row failed kept word totals with null-typed text columns; as the store's
    first run it made `topk`, `report` and every later run's summary fail on a cast error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from xai_ray.query.top_words import topk
    from xai_ray.query.word_totals import keep_word_totals

    for run_id, chosen in (("a-empty", batches[4:]), ("b-full", batches[:4])):
        writer = RunWriter(tmp_path, run_id, METHODS)
        for batch in chosen:
            writer.write(batch)
        writer.publish({"created_at": run_id, "config": {"methods": METHODS}})
        kept = keep_word_totals(tmp_path, run_id)
    empty = pq.read_schema(run_dir(tmp_path, "a-empty") / "aggregates" / "word_totals.parquet")
    assert empty.field("word").type == pa.large_string() and empty.field("method").type == pa.large_string()
    assert pq.read_metadata(kept).num_rows > 0
    top = topk(open_store(tmp_path), "b-full", "rollout", 2, k=3, min_docs=1)
    assert len(top) == 3 and top["word"].notna().all()


def test_evaluate_of_a_run_whose_model_folder_is_gone_is_one_sentence(tmp_path, batches, tiny_bert_dir, capsys):
    """The actors met the missing folder, each with Ray's tracebacks and retries, and the command
    ended with a traceback: the folder is now checked before Ray starts."""
    import shutil

    from xai_ray import cli
    from xai_ray.config import resolve

    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    cfg = resolve(None, {"model": str(folder), "data": "reviews.parquet", "store": str(tmp_path / "store")})
    writer = RunWriter(tmp_path / "store", "r", METHODS)
    for batch in batches:
        writer.write(batch)
    writer.publish({"created_at": "x", "config": {**cfg.to_dict(), "methods": METHODS}})
    shutil.rmtree(folder)
    assert cli.main(["evaluate", "--store", str(tmp_path / "store"), "--run", "r"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and str(folder) in said[0] and "xai-ray: " in said[0], said


def test_evaluate_of_a_run_already_evaluated_is_refused_before_scoring_again(tmp_path, batches, capsys):
    """The count of faithfulness rows said "not evaluated" for a run whose evaluation found no
    rows, so every document was scored again before the writer refused: asked first now."""
    from xai_ray import cli

    run = publish_batches(tmp_path, batches, config={"model": str(tmp_path / "no-model"), "methods": METHODS})
    (run / "faithfulness").mkdir()  # what an evaluation that found nothing left
    assert cli.main(["evaluate", "--store", str(tmp_path), "--run", "r"]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    # refused before the model is looked at (the folder named does not exist) and before Ray
    assert said == ["xai-ray: run 'r' already has faithfulness metrics"], said


@pytest.mark.parametrize("edit", ["a slice dropped", "a layer written 01"])
def test_a_manifest_that_lists_fewer_slices_than_its_parts_hold_is_refused(tmp_path, batches, edit):
    """The views make one branch per slice the manifest lists: a slice it no longer lists (or
    lists as raw:01) lost its rows from tokens and words without a word."""
    run = publish_batches(tmp_path, batches)
    manifest = json.loads((run / "manifest.json").read_text())
    first = manifest["slices"][0]
    method, layer = first.split(":")
    listed = manifest["slices"][1:] if edit == "a slice dropped" else [f"{method}:0{layer}", *manifest["slices"][1:]]
    (run / "manifest.json").write_text(json.dumps({**manifest, "slices": listed}))
    with pytest.raises(QueryError, match=rf"does not list '{first}' under 'slices', which its parts' records hold"):
        open_store(tmp_path)


def test_copies_beside_or_below_the_whole_run_tables_are_not_read_as_more_rows(tmp_path, batches):
    """The part records guard docs and the scores; heads, head_similarity, errors and faithfulness
    counted a file manager's "part-whole (copy).parquet" and a copy kept in a folder below
    (heads/old/) as more rows: a file is the run's only under a name a writer gives it, in its
    table's own folder."""
    import shutil

    from xai_ray.methods.head_summary import HeadTotals

    writer = RunWriter(tmp_path, "r", METHODS, totals=HeadTotals)
    for batch in batches:
        writer.write(batch)
    writer.commit()
    writer.write_whole("heads", writer.totals.heads_table())
    run = writer.publish({"created_at": "x"})
    tables = ("docs", "errors", "heads", "tokens", "words")
    count = "select " + ", ".join(f"(select count(*) from {t})" for t in tables)
    before = open_store(tmp_path).execute(count).fetchone()
    assert before[2] > 0  # the heads table has rows to count twice
    for folder in ("heads", "errors", "docs"):
        part = next((run / folder).glob("part-*.parquet"))
        shutil.copy(part, part.with_name(part.stem + " (copy).parquet"))
        shutil.copy(part, part.with_name(part.stem + " copy.parquet"))
        (run / folder / "old").mkdir()
        shutil.copy(part, run / folder / "old" / part.name)
    assert open_store(tmp_path).execute(count).fetchone() == before
    shutil.rmtree(run / "_parts")  # a run copied without its records: still only its own files
    assert open_store(tmp_path).execute(count).fetchone() == before


def test_a_part_replaced_by_another_parquet_file_is_refused(tmp_path, batches):
    """Another valid Parquet file copied over a part kept its magic bytes, so the views read it as
    the part: the heads table as documents (16 foreign columns in docs), another run's scores as
    this run's (rows twice). A part's footer must hold its record's documents and slices."""
    import shutil

    writer = RunWriter(tmp_path / "a", "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x"})
    other = RunWriter(tmp_path / "b", "r", ["raw"], part_rows=1)  # other slices
    for batch in batches[:1]:
        other.write(batch.drop_columns([c for c in batch.column_names if c.endswith("_rollout")]))
    elsewhere = other.publish({"created_at": "x"})
    store = tmp_path / "a"
    whole = open_store(store).execute("select count(*) from docs").fetchone()
    for folder, source, words in (
        ("docs", run / "docs" / "part-0.parquet", "which the record does not list"),  # another part's docs
        ("docs", run / "token_scores" / "part-2.parquet", "rows where the record counts"),  # another table
        (
            "token_scores",
            run / "token_scores" / "part-0.parquet",
            "(rows where the record counts|which the record does not)",
        ),
        ("token_scores", elsewhere / "token_scores" / "part-0.parquet", "lacks the column 'score:rollout"),
    ):
        target = run / folder / "part-2.parquet"
        kept = target.read_bytes()
        shutil.copy(source, target)
        with pytest.raises(QueryError, match=rf"{folder}/part-2.parquet, which _parts/part-2.json lists, .*{words}"):
            open_store(store)
        target.write_bytes(kept)
    assert open_store(store).execute("select count(*) from docs").fetchone() == whole


def test_a_part_file_of_another_size_than_written_is_refused_published_and_dropped_staged(tmp_path, batches):
    """A sibling part copied over another (its ids inside the record's range, as many rows) passed
    every check and was published: documents lost and doubled. Each file's size is recorded; here
    the same rows written again under another compression stand for a file that is not the one
    its part wrote."""

    def rewrite(path):
        pq.write_table(pq.read_table(path), path, compression="none")

    writer = RunWriter(tmp_path / "a", "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x"})
    rewrite(run / "docs" / "part-2.parquet")
    with pytest.raises(QueryError, match=r"docs/part-2.parquet, which _parts/part-2.json lists, is not the file its"):
        open_store(tmp_path / "a")

    staged = RunWriter(tmp_path / "b", "s", METHODS, part_rows=1)
    for batch in batches[:3]:
        staged.write(batch)
    staged.commit()
    staged.abort(keep_parts=True)  # killed; then a file of its second part is replaced
    folder = staging_dir(tmp_path / "b", "s")
    record = json.loads((folder / "_parts" / "part-1.json").read_text())
    rewrite(folder / record["files"][0])
    resumed = RunWriter(tmp_path / "b", "s", METHODS, part_rows=1)
    assert not set(record["doc_ids"]) & resumed.done_ids  # the part is dropped: its documents scored again
    assert resumed.done_ids  # the others are kept


@pytest.mark.parametrize("damage", ["garbage", "[1]", "{}"])
def test_a_damaged_staged_identity_or_config_is_one_sentence_not_a_traceback(tmp_path, batches, damage):
    """identity.json holding garbage was a JSONDecodeError's traceback, a list an AttributeError's, and
    {} compared no key (any change accepted); an empty config.yaml resumed with every default."""
    from xai_ray.pipeline import resume_config

    writer = RunWriter(tmp_path, "r", METHODS, identity={"methods": METHODS})
    writer.write(batches[0])
    writer.commit()
    writer.abort(keep_parts=True)
    folder = staging_dir(tmp_path, "r")
    (folder / "identity.json").write_text(damage)
    with pytest.raises(StoreError, match=r"cannot be resumed: .*identity.json is damaged"):
        RunWriter(tmp_path, "r", METHODS, identity={"methods": METHODS})
    (folder / "config.yaml").write_text("" if damage == "garbage" else damage)
    with pytest.raises(StoreError, match="has no settings to resume with: .*config.yaml is empty or not a YAML"):
        resume_config(str(tmp_path), "r")
    (folder / "config.yaml").write_text("methods: [raw\n")  # not YAML: read_yaml's own sentence, its place
    with pytest.raises(ConfigError, match=r"is not valid YAML: .*\(line 2, column 1\)"):
        resume_config(str(tmp_path), "r")


def test_a_scores_or_errors_part_replaced_by_one_of_other_rows_over_the_same_documents_is_refused(tmp_path, batches):
    """A part swapped for another run's over the same documents kept every id in range: its rows
    (fewer tokens, other errors) were read as this run's without a word."""
    import shutil

    writer = RunWriter(tmp_path / "a", "r", METHODS, part_rows=1)
    for batch in batches:
        writer.write(batch)
    run = writer.publish({"created_at": "x"})
    other = RunWriter(tmp_path / "b", "r", METHODS, part_rows=1)
    other.write(batches[2].slice(0, 1))  # the first of part 2's two documents: its tokens only
    two_errors = pa.concat_tables([batches[4], batches[4].set_column(0, "doc_id", pa.array(["bad2"]))])
    other.write(two_errors)
    elsewhere = other.publish({"created_at": "x"})
    store = tmp_path / "a"
    errors_part = next(p for p in (run / "errors").glob("part-*.parquet") if pq.read_metadata(p).num_rows)
    other_errors = next(p for p in (elsewhere / "errors").glob("part-*.parquet") if pq.read_metadata(p).num_rows)
    for target, source, words in (
        (run / "token_scores" / "part-2.parquet", elsewhere / "token_scores" / "part-0.parquet", "rows where"),
        (errors_part, other_errors, "2 rows where the record counts 1"),
    ):
        kept = target.read_bytes()
        shutil.copy(source, target)
        with pytest.raises(QueryError, match=rf"{target.parent.name}/{target.name}, which .* lists, .*{words}"):
            open_store(store)
        target.write_bytes(kept)
    assert open_store(store).execute("select count(*) from errors").fetchone() == (1,)


def test_a_recorded_part_below_a_linked_table_folder_is_refused_not_read_short(tmp_path, batches):
    import shutil

    run = publish_batches(tmp_path / "s", batches)
    shutil.move(run / "token_scores", tmp_path / "kept")
    (run / "token_scores").symlink_to(tmp_path / "kept")
    with pytest.raises(QueryError, match=r"token_scores/part-0.parquet, which _parts/part-0.json lists, is a symbolic"):
        open_store(tmp_path / "s")


def test_a_damaged_run_stops_neither_a_command_about_another_run_nor_that_runs_aggregates(tmp_path, batches, capsys):
    """Every view holds every run, so one damaged run refuses them all; a stage or command about
    one run opens only it (the aggregate stage of a new run used to fail after all its scoring)."""
    from xai_ray.pipeline import aggregate

    store = tmp_path / "s"
    n_layers = batches[0].column("n_layers")[0].as_py()
    model = {"n_layers": n_layers, "labels": {"0": "neg", "1": "pos"}}
    publish_batches(store, batches, model=model, config={"methods": METHODS})
    damaged = RunWriter(store, "old", METHODS)
    damaged.write(batches[0])
    part = next((damaged.publish({"created_at": "w"}) / "docs").glob("part-*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    with pytest.raises(QueryError, match="run 'old' is damaged"):
        open_store(store)
    assert open_store(store, run="r").execute("select count(distinct run_id) from docs").fetchone() == (1,)
    assert aggregate(store, "r", k=3)["method"] in METHODS
    assert (
        cli.main(["topk", "--store", str(store), "--run", "r", "--method", "raw", "--k", "2", "--format", "csv"]) == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 3  # a header and two words
    with pytest.raises(QueryError, match=r"no run 'gone' in the store; runs: "):
        open_store(store, run="gone")


def test_a_run_folder_renamed_to_a_name_the_engine_decodes_is_refused(tmp_path, batches):
    # DuckDB reads the run from the folder's name and decodes %2d as '-': the views said run
    # 'exp-1' where runs said 'exp%2d1', and topk found no rows
    run = publish_batches(tmp_path / "s", batches)
    run.rename(run.parent / "run_id=exp%2d1")
    with pytest.raises(StoreError, match=r"run_id=exp%2d1' holds a name no run is given"):
        open_store(tmp_path / "s")
