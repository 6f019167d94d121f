"""Faults without Ray: a writer killed at every rename, retried deliveries, OOM halving, failing
documents, hostile and broken input, the SQL sandbox and model safety flags.

The killed-writer test stands in for a killed driver at every point where files change: whatever
the moment, reopening the run keeps whole committed parts only and finishing it leaves every
document exactly once in docs, tokens and words.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from xai_ray import cli, staging
from xai_ray.corpus import read_corpus
from xai_ray.query import QueryError, open_store, run_sql
from xai_ray.screening import screen
from xai_ray.store import RunWriter, StoreError, run_dir, staging_dir

METHODS = ["raw", "rollout"]
TEXTS = ["the film was good", "bad movie", "i loved the story", "not very boring", "the plot is fine",
         "great acting and a great plot", "it was playing", "unbelievable film"]


def scorer_rows(scorer, texts, first=0):
    ids = [f"d{first + i}" for i in range(len(texts))]
    return scorer({"doc_id": ids, "text": list(texts), "label": [i % 2 for i in range(len(texts))]})


@pytest.fixture(scope="module")
def batches(scorer_factory):
    """Four batches of real scorer rows (tiny BERT): eight documents and one error row."""
    scorer = scorer_factory("bert")
    out = [scorer_rows(scorer, TEXTS[i:i + 2], first=i) for i in range(0, 8, 2)]
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
        got = con.execute(f"select doc_id, method, layer, count(*) as n, count(distinct {column}) as k "
                          f"from {table} where run_id = $r group by all", {"r": run_id}).df()
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

    monkeypatch.setattr(staging.os, "replace", counting)
    clean = RunWriter(tmp_path / "clean", "r", METHODS, part_rows=1)
    for batch in batches:
        clean.write(batch)
    clean.publish({"created_at": "x"})
    n_points = len(calls)
    assert n_points > 20  # every part's files, every record, the manifest

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

        monkeypatch.setattr(staging.os, "replace", dying)
        opened = []
        with pytest.raises(Killed):
            opened.append(RunWriter(store, "r", METHODS, part_rows=1))
            for batch in batches:
                opened[0].write(batch)
            opened[0].publish({"created_at": "x"})
        if opened:
            opened[0].stage.close()  # a killed process's flock goes with it
        gc.collect()  # (and so does the lock of a writer killed while opening)
        monkeypatch.setattr(staging.os, "replace", real_replace)

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
    assert sorted(p.name for p in (target / "docs").iterdir())[:3] == ["part-0.parquet", "part-1.parquet",
                                                                      "part-2.parquet"]
    assert not folder.exists() and not (target / ".lock").exists()
    assert_exactly_once(tmp_path, "r", batches)


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
    files = list((target / "tokens").rglob("*.parquet"))
    assert files and all(pq.ParquetFile(f).metadata.num_row_groups == 1 for f in files)


# --------------------------------------------------------------------------- scorer faults


def _comparable(table):
    return {r["doc_id"]: r for r in table.to_pylist()}


def test_out_of_memory_halves_the_group_and_loses_nothing(scorer_factory, monkeypatch):
    import xai_ray.capture as capture

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
    import xai_ray.capture as capture

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
    import xai_ray.capture as capture

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


# --------------------------------------------------------------------------- bad input


def test_screening_quarantines_bad_rows_and_keeps_the_first_duplicate():
    from xai_ray.corpus import INVALID_UTF8

    corpus = pd.DataFrame({
        "doc_id": ["a", "b", "c", "d", "e", "a", None, "f", "g", "h", "i", "j"],
        "text": ["good", None, "", " \n\t ", 42, "again", "no id", "bad " + INVALID_UTF8 + "bytes", "fine",
                 "fine", "x", ["a", "list"]],
        "label": pd.array([1, 0, 0, 0, 0, 1, 0, 1, 7, -1, None, 0], dtype="Int64"),
    })
    kept, rejected = screen(corpus, {0: "negative", 1: "positive"})
    assert kept.doc_id.tolist() == ["a", "i"]
    assert kept.text.tolist() == ["good", "x"] and pd.isna(kept.label.iloc[1])
    reasons = dict(zip(rejected.doc_id, rejected.reason))
    assert set(rejected.stage) == {"read"} and len(rejected) == 10
    assert reasons["b"] == "text is null"
    assert reasons["c"] == reasons["d"] == "text is empty or whitespace only"
    assert reasons["e"] == "text is int, not a string"
    assert reasons["j"] == "text is list, not a string"
    assert reasons["row-6"].startswith("doc_id is missing")
    assert "not valid UTF-8" in reasons["f"] and "character 4" in reasons["f"]
    assert reasons["g"].startswith("label 7 is not one of the model's classes (0, 1)")
    assert reasons["h"].startswith("label -1 is not one")
    dup = rejected[rejected.doc_id == "a"].reason.tolist()
    assert dup == ["duplicate doc_id: row 5 repeats the id of row 0, which is kept"]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_invalid_utf8_rows_are_quarantined_and_the_rest_read_exactly(tmp_path, kind):
    if kind == "csv":
        raw = ("\ufeffid,text,label\n".encode() + b'a,"caf\xc3\xa9, fine",1\n' + b'b,"bad \xff\xfe bytes",0\n'
               + b'c\xff,ok,1\n' + "d,\"emoji \U0001f600 ok\",0\n".encode())
    else:
        raw = (b'{"id": "a", "text": "caf\xc3\xa9, fine", "label": 1}\n'
               b'{"id": "b", "text": "bad \xff\xfe bytes", "label": 0}\n'
               b'{"id": "c\xff", "text": "ok", "label": 1}\n'
               + '{"id": "d", "text": "emoji \U0001f600 ok", "label": 0}\n'.encode())
    source = tmp_path / f"c.{kind}"
    source.write_bytes(raw)
    kept, rejected = screen(read_corpus(str(source)), [0, 1])
    assert kept.doc_id.tolist() == ["a", "c\ufffd", "d"]
    assert kept.text.tolist() == ["café, fine", "ok", "emoji \U0001f600 ok"]
    assert rejected.doc_id.tolist() == ["b"] and "not valid UTF-8" in rejected.reason[0]


def _run(argv, capsys):
    status = cli.main(argv)
    err = capsys.readouterr().err
    return status, err


@pytest.fixture()
def corpus_csv(tmp_path):
    source = tmp_path / "c.csv"
    pd.DataFrame({"id": ["a", "b"], "review": ["good", "bad"], "label": [1, 0]}).to_csv(source, index=False)
    return source


def test_job_level_problems_are_one_sentence_and_exit_2(tmp_path, tiny_bert_dir, corpus_csv, capsys,
                                                       monkeypatch):
    from transformers import GPT2Config, ResNetConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    good = tmp_path / "good.parquet"
    pd.DataFrame({"id": [str(i) for i in range(200)], "text": ["the film was good"] * 200,
                  "label": [0, 1] * 100}).to_parquet(good)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(os.urandom(4096))
    GPT2Config(n_layer=1, n_head=1, n_embd=8).save_pretrained(tmp_path / "gpt2")
    ResNetConfig().save_pretrained(tmp_path / "resnet")
    remote = tmp_path / "remote"
    remote.mkdir()
    (remote / "config.json").write_text(json.dumps({
        "model_type": "bert", "auto_map": {"AutoModelForSequenceClassification": "modeling_evil.Evil"}}))
    base = ["run", "--store", str(tmp_path / "store"), "--model", tiny_bert_dir]
    cases = [
        (["--data", str(truncated)], "truncated.parquet' cannot be read"),
        (["--data", str(corrupt)], "corrupt.parquet' cannot be read"),
        (["--data", str(corpus_csv)], "no text column 'text' (columns: id, review, label)"),
        (["--data", str(good), "--methods", "raw,rolout"], "unknown method 'rolout'"),
        (["--data", str(good), "--model", str(tmp_path / "gpt2")], "not an encoder classifier"),
        (["--data", str(good), "--model", str(tmp_path / "resnet")], "has type 'resnet'; supported encoder families"),
        (["--data", str(good), "--model", str(remote)], "ships its own code"),
        (["--data", str(good), "--run-id", "../escape"], "run_id '../escape' may hold only"),
        (["--resume", "nothing-here"], "has no unfinished run 'nothing-here'"),
    ]
    for extra, message in cases:
        status, err = _run(base + extra, capsys)
        assert status == 2, (extra, err)
        assert message in err, (extra, err)
        lines = [line for line in err.splitlines() if line.startswith("xai-ray:")]
        assert len(lines) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "store" / "runs").exists()  # all refused before anything was scored


def test_the_command_line_prints_no_traceback(tmp_path):
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1" + os.urandom(100))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "xai_ray.cli", "run", "--data", str(corrupt), "--model", "minilm",
                           "--store", str(tmp_path / "s")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("xai-ray: ") and "cannot be read" in lines[-1]
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- models


def test_pickled_weights_load_only_with_the_flag(tmp_path):
    from conftest import build_tiny_model

    from xai_ray.model import ModelError, describe_model, load_model

    model, tokenizer = build_tiny_model("bert")
    folder = tmp_path / "pickled"
    model.save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # the pickled format
    tokenizer.save_pretrained(folder)
    assert (folder / "pytorch_model.bin").is_file() and not list(folder.glob("*.safetensors"))
    with pytest.raises(ModelError, match="no .safetensors weights.*allow_pickle=true"):
        load_model(str(folder))
    loaded = load_model(str(folder), allow_pickle=True)
    torch.testing.assert_close(loaded.model.state_dict()["classifier.weight"], model.state_dict()["classifier.weight"])
    assert loaded.info["allow_pickle"] is True and loaded.info["trust_remote_code"] is False
    described = describe_model(str(folder), allow_pickle=True)
    assert described["allow_pickle"] is True and described["trust_remote_code"] is False


# --------------------------------------------------------------------------- the SQL sandbox


@pytest.fixture(scope="module")
def small_store(tmp_path_factory, batches):
    store = tmp_path_factory.mktemp("sandbox")
    writer = RunWriter(store, "r", METHODS)
    for batch in batches:
        writer.write(batch)
    writer.publish({"created_at": "x"})
    return store


def test_sql_refuses_every_way_out_of_the_store(small_store, tmp_path, capsys):
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    inside = small_store / "runs" / "run_id=r" / "docs"
    part = next(inside.glob("*.parquet"))
    before = part.read_bytes()
    refused = [
        f"select * from read_csv('{outside}')",  # reading other files
        "select * from read_text('/etc/passwd')",
        "select * from read_blob('" + str(small_store) + "/../../../etc/passwd')",
        "select * from glob('/etc/*')",
        f"copy docs to '{tmp_path / 'x.csv'}'",  # writing, outside the store and inside it
        f"copy (select 1 as a) to '{inside / 'evil.parquet'}'",
        f"copy (select 1 as a) to '{part}'",
        f"export database '{small_store / 'dump'}'",
        "select 1; copy (select 1) to 'y.csv'",
        "create table t as select 1",
        f"attach '{tmp_path / 'x.db'}'",  # other databases
        "install httpfs",  # extensions
        "load httpfs",
        "set enable_external_access = true",  # loosening the sandbox
        "set allowed_directories = ['/']",
        "reset allowed_directories",
        "call checkpoint()",
    ]
    for query in refused:
        status, err = _run(["sql", "--store", str(small_store), query], capsys)
        assert status == 2 and err.startswith("xai-ray: ") and "Traceback" not in err, (query, err)
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.db").exists()
    assert not (inside / "evil.parquet").exists() and not (small_store / "dump").exists()
    assert part.read_bytes() == before
    con = open_store(small_store)
    assert run_sql(con, "select count(*) as n from docs").n.tolist() == [8]
    assert run_sql(con, "describe docs").column_name.tolist()[0] == "doc_id"
    with pytest.raises(QueryError, match="refused a COPY statement"):
        run_sql(con, "copy docs to 'z.csv'")


# --------------------------------------------------------------------------- generated texts

# Control characters, emoji (with skin tones and ZWJ sequences), combining marks, right-to-left
# scripts, zero-width and format characters, mixed with words the tiny vocabularies know.
HOSTILE_PIECES = ["\x00", "\x07", "\x1b[31m", "\r\n", "\t", "\u0085", "\u2028", "\U0001f600", "\U0001f44d\U0001f3fd",
                  "\U0001f468\u200d\U0001f469\u200d\U0001f467", "e\u0301", "\u0303\u0303", "\u05e9\u05dc\u05d5\u05dd",
                  "\u0645\u0631\u062d\u0628\u0627", "\u202e", "\u200b", "\u200d", "\ufeff", "\u2060", "<br />",
                  "<script>alert(1)</script>", "film", "good", "the", "bad", " ", "!!!", "\ufffd", "\U00010000"]


def _texts():
    from hypothesis import strategies as st

    piece = st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(min_size=1, max_size=8))
    return st.lists(st.lists(piece, min_size=1, max_size=12).map("".join), min_size=1, max_size=4)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_generated_hostile_texts_score_finite_and_sum_to_one(family, scorer_factory):
    from hypothesis import HealthCheck, given, settings

    from xai_ray.screening import text_problem

    scorer = scorer_factory(family)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(_texts())
    def check(texts):
        rows = scorer({"doc_id": [f"g{i}" for i in range(len(texts))], "text": texts,
                       "label": [0] * len(texts)}).to_pylist()
        assert sorted(r["doc_id"] for r in rows) == sorted(f"g{i}" for i in range(len(texts)))
        for row in rows:
            text = texts[int(row["doc_id"][1:])]
            if text_problem(text):
                assert row["error"] == text_problem(text)
                continue
            assert row["error"] is None, row["error"]
            n_layers, n, n_words = row["n_layers"], row["n_tokens"], len(row["words"])
            assert len(row["tokens"]) == len(row["word_index"]) == n
            for method in METHODS:
                scores = np.asarray(row[f"scores_{method}"]).reshape(n_layers, n)
                assert np.isfinite(scores).all()
                words = np.asarray(row[f"word_scores_{method}"], dtype=np.float64).reshape(n_layers, n_words)
                assert np.isfinite(words).all()
                if n_words:
                    np.testing.assert_allclose(words.sum(axis=1), 1.0, atol=1e-5)

    check()


def test_csv_fields_are_read_as_written(tmp_path):
    source = tmp_path / "c.csv"
    source.write_text('id,text,label\n007,NA,1\nnull,None,\nNaN,"",0\n')
    corpus = read_corpus(str(source))
    assert corpus.doc_id.tolist() == ["007", "null", "NaN"]
    assert corpus.text.tolist() == ["NA", "None", ""]  # a review may say "NA"; an empty field is empty
    assert corpus.label.tolist()[0] == 1 and pd.isna(corpus.label[1]) and corpus.label[2] == 0


def test_an_invisible_tail_is_not_truncation(scorer_factory):
    scorer = scorer_factory("bert")
    rows = _comparable(scorer({"doc_id": ["zw", "ctl"], "text": ["good film \u200b\u200b", "bad movie \x00\x07"],
                               "label": [1, 0]}))
    assert rows["zw"]["truncated"] is False and rows["ctl"]["truncated"] is False


def test_the_deferred_flow_stage_never_fails_a_batch(scorer_factory, monkeypatch):
    from xai_ray.scoring import DeferredMethods

    config = {"model": "unused", "max_length": 32, "methods": ["raw", "flow"], "deferred_methods": ["flow"]}
    scorer = scorer_factory("bert", methods=("raw", "flow"), deferred_methods=("flow",))
    batch = scorer_rows(scorer, TEXTS[:3])
    stage = DeferredMethods(config)
    good = stage(batch).to_pylist()
    assert all(r["error"] is None and r["scores_flow"] is not None for r in good)
    monkeypatch.setattr(stage, "_add_methods", lambda table: 1 / 0)
    failed = stage(batch).to_pylist()
    assert [r["doc_id"] for r in failed] == ["d0", "d1", "d2"]
    assert all(r["error"] == "flow failed: ZeroDivisionError: division by zero" for r in failed)
