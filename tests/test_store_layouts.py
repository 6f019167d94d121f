"""Store layouts 1, 2 and 3: one run's rows written in each give the same rows in every view.

Real scorer rows of the tiny BERT (an error row among them, rollout from layer 2 in one batch and
from layer 1 in the other, so a part holds a slice for some of its documents only) are written by
``RunWriter`` in layout 1 (a file per method x layer), layout 2 (a row per token and word, a
column per method x layer) and layout 3 (a row per token, each word on its first token, its raw
score and share derived where they are implied), side by side in one store; each view, the union
of runs (nightly) and the manifests' counts are compared row for row. A manifest of an unknown
layout is refused in one sentence; a run staged in layout 1 resumes in layout 1.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from xai_ray.cli.main import main
from xai_ray.query.connection import TABLES, open_store, open_union
from xai_ray.query.limits import QueryError
from xai_ray.store import StoreError, layout
from xai_ray.store.writer import RunWriter

METHODS = ["raw", "rollout"]
TEXTS = ["the film was good", "bad movie", "i loved the story, wasn't it", None, "not very boring", "great acting!"]


@pytest.fixture(scope="module")
def batches(scorer_factory) -> list[pa.Table]:
    """Two batches of scorer rows: rollout from layer 2 in the first, from layer 1 in the second."""
    ids = [f"d{i}" for i in range(len(TEXTS))]
    labels = [0, 1, None, 1, 0, 1]
    first = scorer_factory("bert", start_layer=2, evaluate=True)
    second = scorer_factory("bert", evaluate=True)
    return [
        first({"doc_id": ids[:3], "text": TEXTS[:3], "label": labels[:3]}),
        second({"doc_id": ids[3:], "text": TEXTS[3:], "label": labels[3:]}),
    ]


def write(store, run_id: str, batches, layout_version: int, created_at: str) -> dict:
    writer = RunWriter(store, run_id, METHODS, layout=layout_version)
    for batch in batches:
        writer.write(batch)
        writer.commit()  # one part per batch
    writer.publish({"created_at": created_at, "config": {"methods": METHODS}})
    return json.loads(layout.manifest_path(store, run_id).read_text())


@pytest.fixture(scope="module")
def store(tmp_path_factory, batches):
    root = tmp_path_factory.mktemp("layouts")
    write(root, "one", batches, 1, "2026-01-01T00:00:00")
    write(root, "two", batches, 2, "2026-01-02T00:00:00")
    write(root, "three", batches, 3, "2026-01-03T00:00:00")
    return root


def rows(con, view: str, run_id: str, drop=("run_id",)) -> list[tuple]:
    return con.execute(
        f"select * exclude ({', '.join(drop)}) from {view} where run_id = ? order by all", [run_id]
    ).fetchall()


def test_every_view_returns_the_same_rows_in_every_layout(store):
    con = open_store(store)
    assert sorted(p.name for p in layout.run_dir(store, "two").iterdir() if p.is_dir()) == [
        "_parts", "docs", "errors", "faithfulness", "token_scores", "word_scores",
    ]  # fmt: skip
    assert sorted(p.name for p in layout.run_dir(store, "three").iterdir() if p.is_dir()) == [
        "_parts", "docs", "errors", "faithfulness", "token_scores",
    ]  # fmt: skip
    assert (layout.run_dir(store, "one") / "tokens" / "method=rollout" / "layer=2").is_dir()
    for view in TABLES:
        old = rows(con, view, "one")
        assert rows(con, view, "two") == old, view
        assert rows(con, view, "three") == old, view
        if view not in ("heads", "head_similarity"):  # gathered only with --heads
            assert old, view
    layers = con.execute("select method, layer, count(distinct doc_id) from tokens where run_id = 'two' group by all")
    assert ("rollout", 1, 2) in layers.fetchall()  # rollout's layer 1: the second batch's two scored documents
    nan = con.execute("select count(*) from tokens where run_id = 'two' and isnan(score)").fetchone()[0]
    assert nan == 0
    first, second, third = (json.loads(layout.manifest_path(store, r).read_text()) for r in ("one", "two", "three"))
    assert first["counts"] == second["counts"] == third["counts"] and second["counts"]["tokens"] > 0
    assert "store_layout" not in first and second["store_layout"] == 2 and third["store_layout"] == 3
    assert second["slices"] == third["slices"] == ["raw:1", "raw:2", "rollout:1", "rollout:2"]
    assert third["shares"] == [] and "shares" not in second  # every share derived from its raw score


def test_a_slice_reads_only_the_parts_whose_records_hold_it_and_a_run_without_records_reads_the_same(store, tmp_path):
    import shutil

    from xai_ray.query.views import SOURCES, folder_files, run_layouts, view_sql

    runs = run_layouts([layout.run_dir(store, r) for r in ("two", "three")])
    files = {s.name: folder_files(store, runs, s) for s in SOURCES["tokens"]}
    select, bound = view_sql("tokens", runs, files, lambda name: f"@files@ @by_name@ {name}")
    assert "true" not in select  # every file described by its part's record: no union_by_name
    for source in ("token_scores", "token_rows"):  # layout 2's run, layout 3's
        by_slice = {name.split("_")[3]: found for name, found in bound.items() if name.startswith(f"files_{source}_")}
        assert len(by_slice["3"]) == 2  # rollout:2 (the 4th slice): both parts
        assert by_slice["2"] == by_slice["3"][1:]  # rollout:1: the second batch's part only
    copied = tmp_path / "copied"
    shutil.copytree(store, copied)
    for run_id in ("two", "three"):
        shutil.rmtree(layout.run_dir(copied, run_id) / "_parts")  # a run copied without its records
    con, before = open_store(copied), open_store(store)
    for view in ("tokens", "words"):
        for run_id in ("two", "three"):
            assert rows(con, view, run_id) == rows(before, view, run_id), (view, run_id)


def test_the_views_keep_their_columns_and_types(store):
    con = open_store(store)
    expected = {
        "tokens": "doc_id VARCHAR, position INTEGER, token VARCHAR, word_id INTEGER, score FLOAT, layer INTEGER, "
        "method VARCHAR, run_id VARCHAR",
        "words": "doc_id VARCHAR, word_id INTEGER, word VARCHAR, score FLOAT, raw_score FLOAT, lift FLOAT, "
        "span_id INTEGER, joined VARCHAR, layer INTEGER, method VARCHAR, run_id VARCHAR",
    }
    for view, columns in expected.items():
        described = con.execute(f"select * from {view} limit 0").description
        assert ", ".join(f"{d[0]} {d[1]}" for d in described) == columns


def test_a_union_of_runs_in_every_layout_reads_each_document_once(store):
    union = open_union(store, ["one", "two", "three"], "all")
    con = open_store(store)
    for view in ("tokens", "words", "docs"):
        got = union.execute(f"select * exclude (run_id, source_run_id) from {view} order by all").fetchall()
        assert got == rows(con, view, "three"), view
    sources = union.execute("select distinct source_run_id from words").fetchall()
    assert sources == [("three",)]


def test_a_run_of_an_unknown_layout_is_refused_in_one_sentence(tmp_path, batches, capsys):
    write(tmp_path, "later", batches[:1], 2, "2026-01-01T00:00:00")
    path = layout.manifest_path(tmp_path, "later")
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "store_layout": 4}))
    with pytest.raises(StoreError, match=r"^run 'later' was written in store layout 4, which this version"):
        open_store(tmp_path)
    assert main(["sql", "select count(*) from words", "--store", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "store layout 4" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    path.write_text(json.dumps({**manifest, "slices": ["raw:1", 'x" from docs; --']}))
    with pytest.raises(QueryError, match="that is not METHOD:LAYER"):
        open_store(tmp_path)


def test_a_run_staged_in_layout_1_is_finished_in_layout_1(tmp_path, batches):
    writer = RunWriter(tmp_path, "r", METHODS, layout=1)
    writer.write(batches[0])
    writer.commit()
    writer.abort(keep_parts=True)  # killed after one part; the new version resumes it
    resumed = RunWriter(tmp_path, "r", METHODS)
    assert resumed.layout == 1
    resumed.write(batches[1])
    resumed.publish({"created_at": "2026-01-01T00:00:00"})
    write(tmp_path, "fresh", batches, 3, "2026-01-02T00:00:00")
    con = open_store(tmp_path)
    assert not (layout.run_dir(tmp_path, "r") / "token_scores").exists()
    for view in ("tokens", "words", "docs", "errors"):
        assert rows(con, view, "r") == rows(con, view, "fresh"), view


def test_the_run_config_chooses_the_layout_a_new_run_is_written_in(tmp_path, batches):
    from xai_ray.config import RunConfig
    from xai_ray.pipeline.writing import open_writer

    for version in (2, 3):
        cfg = RunConfig(store=str(tmp_path), methods=tuple(METHODS), store_layout=version)
        writer = open_writer(cfg, f"r{version}")
        assert writer.layout == version
        for batch in batches:
            writer.write(batch)
        writer.publish({"created_at": f"2026-01-0{version}", "config": {"methods": METHODS}})
        assert json.loads(layout.manifest_path(tmp_path, f"r{version}").read_text())["store_layout"] == version
    con = open_store(tmp_path)
    for view in ("tokens", "words"):
        assert rows(con, view, "r2") == rows(con, view, "r3") != []


def test_a_resume_told_another_layout_records_the_layout_its_parts_are_written_in(tmp_path, batches):
    """`--resume RUN --set store_layout=2` on a layout-3 run wrote layout 3 and recorded 2."""
    import yaml

    from xai_ray.config import RunConfig
    from xai_ray.pipeline.writing import open_writer

    cfg = RunConfig(store=str(tmp_path), methods=tuple(METHODS), store_layout=3)
    first = open_writer(cfg, "r")
    first.write(batches[0])
    first.commit()
    first.abort(keep_parts=True)
    resumed = open_writer(RunConfig(store=str(tmp_path), methods=tuple(METHODS), store_layout=2), "r")
    assert resumed.layout == 3
    assert yaml.safe_load(layout.staged_config(tmp_path, "r").read_text())["store_layout"] == 3


def test_the_kept_word_totals_are_the_same_in_every_layout_and_either_way_of_summing(store):
    """Layout 3 sums several slices in one scan of its parts; layout 2, and layout 3 slice by slice,
    through the words view. Rollout at layer 1 is held by the second part only."""
    from xai_ray.query.word_totals import SUMS, word_totals

    con = open_store(store)
    keys = ["method", "layer", "pred", "word"]
    frames = {
        (run_id, wide): word_totals(con, store, run_id, wide=wide).sort_values(keys, ignore_index=True)
        for run_id, wide in (("two", False), ("three", False), ("three", True))
    }
    reference = frames[("two", False)]
    assert len(reference) > 0 and set(reference["method"]) == set(METHODS)
    rollout_1 = reference[(reference["method"] == "rollout") & (reference["layer"] == 1)]
    assert 0 < rollout_1["documents"].max() <= 3  # the second batch's documents only
    for key, frame in frames.items():
        assert frame.drop(columns=list(SUMS)).equals(reference.drop(columns=list(SUMS))), key
        np.testing.assert_allclose(frame[list(SUMS)], reference[list(SUMS)], rtol=1e-9, err_msg=str(key))


def test_word_totals_leave_out_a_slice_or_share_the_manifest_lists_but_no_part_holds(store, tmp_path):
    """A hand-edited manifest (or a removed part) may list what no part holds: the words view has
    no rows of it, and the one-scan sum must not ask for its missing columns."""
    import shutil

    from xai_ray.query.word_totals import SUMS, word_totals

    copied = tmp_path / "edited"
    shutil.copytree(store, copied)
    path = layout.manifest_path(copied, "three")
    manifest = json.loads(path.read_text())
    manifest["slices"] = [*manifest["slices"], "raw:9"]
    manifest["shares"] = ["rollout:1"]
    path.write_text(json.dumps(manifest))
    con = open_store(copied)
    keys = ["method", "layer", "pred", "word"]
    wide = word_totals(con, copied, "three").sort_values(keys, ignore_index=True)
    by_slice = word_totals(con, copied, "three", wide=False).sort_values(keys, ignore_index=True)
    assert len(wide) > 0 and 9 not in set(wide["layer"])
    exact = wide.drop(columns=list(SUMS)).values.tolist()
    assert exact == by_slice.drop(columns=list(SUMS)).values.tolist()  # the empty slice's frame moves dtypes
    np.testing.assert_allclose(wide[list(SUMS)], by_slice[list(SUMS)], rtol=1e-9)


def test_a_run_of_the_first_versions_reads_beside_new_runs_with_null_units(store, tmp_path, capsys, caplog):
    """The first versions wrote layout-1 words without lift, span_id and joined: the views read
    them as null there (the union of layouts failed on every query, docs' included)."""
    import shutil

    import pyarrow.parquet as pq

    copied = tmp_path / "old"
    shutil.copytree(store, copied)
    shutil.rmtree(layout.run_dir(copied, "one") / "_parts")  # they had no part records either
    for path in (layout.run_dir(copied, "one") / "words").rglob("*.parquet"):
        pq.write_table(pq.read_table(path).drop_columns(["lift", "span_id", "joined"]), path)
    con = open_store(copied)
    assert con.execute("select count(distinct run_id) from docs").fetchone() == (3,)
    units = ("lift", "span_id", "joined")
    old = rows(con, "words", "one", drop=("run_id", *units))
    assert old == rows(con, "words", "three", drop=("run_id", *units)) and len(old) > 0
    held = con.execute(
        "select count(*), count(lift), count(span_id), count(joined) from words where run_id = 'one'"
    ).fetchone()
    assert held == (len(old), 0, 0, 0)
    assert (
        main(
            [
                "topk",
                "--store",
                str(copied),
                "--run",
                "one",
                "--stat",
                "share",
                "--k",
                "3",
                "--method",
                "raw",
                "--layer",
                "2",
            ]
        )
        == 0
    )
    assert "rank" in capsys.readouterr().out
    # by lift (the default) its top words were empty without a word
    assert main(["topk", "--store", str(copied), "--run", "one", "--k", "3", "--method", "raw", "--layer", "2"]) == 2
    assert "stored no lift: use --stat share" in capsys.readouterr().err
    # its report ranks its top words by share (by lift they were left out, four sections without a word)
    manifest_path = layout.manifest_path(copied, "one")
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "model": {"n_layers": 2}}))
    out = tmp_path / "one.html"
    with caplog.at_level("WARNING", logger="xai_ray"):
        assert main(["report", "--store", str(copied), "--run", "one", "--out", str(out)]) == 0
    assert "ranked by share" in caplog.text
    assert "<section id='headline'>" in out.read_text()


def test_a_copied_part_of_a_run_without_records_is_refused_in_layout_3(batches, tmp_path):
    """Without part records every file under a part's name is read; a copy of a part is caught by
    the token and word rows the footers count, where the rows' range alone let a small one by."""
    import shutil

    copied = tmp_path / "copied"
    whole = batches[1]  # one scorer batch written as two parts with the same slices
    write(copied, "u", [whole.slice(0, 1), whole.slice(1)], 3, "2026-01-04T00:00:00")
    run = layout.run_dir(copied, "u")
    before = rows(open_store(copied), "words", "u")
    shutil.rmtree(run / "_parts")
    assert rows(open_store(copied), "words", "u") == before and len(before) > 0
    parts = sorted((run / "token_scores").glob("part-*.parquet"))
    shutil.copy(parts[0], run / "token_scores" / "part-9.parquet")
    with pytest.raises(QueryError, match=r"token_scores files hold \d+ token rows where its manifest's counts give"):
        open_store(copied).execute("select count(*) from words").fetchall()


def test_a_layer_1_run_without_records_missing_a_slice_is_refused(store, tmp_path):
    """A layer-1 run copied without ``_parts`` and without one slice's folder read that slice as
    no rows; its manifest counts every row, and the footers say how many are there."""
    import shutil

    copied = tmp_path / "copied"
    shutil.copytree(store, copied)
    run = layout.run_dir(copied, "one")
    shutil.rmtree(run / "_parts")
    assert rows(open_store(copied), "tokens", "one") == rows(open_store(store), "tokens", "one")
    shutil.rmtree(run / "tokens" / "method=raw" / "layer=2")
    with pytest.raises(QueryError, match=r"its tokens files hold \d+ rows where its manifest's counts give \d+"):
        open_store(copied).execute("select count(*) from tokens").fetchall()


def test_a_layer_1_run_is_asked_its_words_for_the_layers_a_method_holds(tmp_path, batches, capsys):
    """A layout-1 manifest lists no slices: rollout from layer 2 held nothing at layer 1, and
    `topk --layer 1` led with it (or was told --method rollout) and printed "(no rows)"."""
    write(tmp_path, "one", [batches[0]], 1, "2026-01-01T00:00:00")  # rollout from layer 2
    common = ["topk", "--store", str(tmp_path), "--run", "one", "--layer", "1", "--k", "2"]
    assert main([*common, "--method", "rollout"]) == 2
    assert "holds no words of method 'rollout' at layer 1" in capsys.readouterr().err
    assert main(common) == 0
    said = capsys.readouterr()
    assert "method raw:" in said.err and "(no rows)" not in said.out
