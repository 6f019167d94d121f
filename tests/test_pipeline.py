"""End to end on real data: real IMDB reviews, the real pretrained MiniLM weights, a real local Ray.

Run inside a loopback-only network namespace (see .ci/run): Ray binds to the machine's address.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from store_reading import read_slice

from xai_ray import cli, pipeline
from xai_ray.config import resolve
from xai_ray.data.corpus import read_corpus
from xai_ray.query.connection import open_store
from xai_ray.query.top_words import topk
from xai_ray.scoring.actor import Scorer

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"
N_REVIEWS = 200
pytestmark = [pytest.mark.slow, pytest.mark.ray]


@pytest.fixture(scope="module")
def imdb_store(ray_cluster, tmp_path_factory):
    """One real run: 200 IMDB train reviews, MiniLM, raw + rollout, 2 actors, via the CLI."""
    store = tmp_path_factory.mktemp("store")
    status = cli.main(
        [
            "run",
            "--data",
            str(IMDB),
            "--limit",
            str(N_REVIEWS),
            "--model",
            "minilm",
            "--max-length",
            "128",
            "--actors",
            "2",
            "--store",
            str(store),
            "--run-id",
            "imdb200",
            "--set",
            "batch_size=32",
        ]
    )
    assert status == 0
    return store


def _cfg(store, **extra):
    flags = {
        "data": str(IMDB),
        "limit": 12,
        "model": "minilm",
        "max_length": 64,
        "actors": 2,
        "store": str(store),
        "batch_size": 4,
    }
    sets = [f"{key}={value}" for key, value in extra.items()]
    return resolve(None, flags, sets)


def test_ray_pipeline_equals_direct_scorer(ray_cluster, tmp_path):
    cfg = _cfg(tmp_path, driver_rows=0)
    corpus = read_corpus(cfg.data, cfg.split, limit=cfg.limit, seed=cfg.seed)
    screened = pipeline.screen(pipeline.read(cfg))  # streamed from the file by Ray workers
    through_ray = pipeline.score(screened, cfg).to_pandas().set_index("doc_id")
    direct = (
        Scorer({**cfg.to_dict(), "gpus_per_actor": 0})(
            {"doc_id": corpus.doc_id.values, "text": corpus.text.values, "label": corpus.label.values}
        )
        .to_pandas()
        .set_index("doc_id")
    )
    assert sorted(through_ray.index) == sorted(direct.index) == sorted(corpus.doc_id)
    for doc_id in direct.index:
        for column in ("scores_raw", "scores_rollout", "word_scores_rollout", "probs"):
            np.testing.assert_allclose(through_ray.at[doc_id, column], direct.at[doc_id, column], atol=1e-5)
        assert list(through_ray.at[doc_id, "words"]) == list(direct.at[doc_id, "words"])


def test_run_publishes_every_document_once_with_manifest(imdb_store):
    run = imdb_store / "runs" / "run_id=imdb200"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["counts"]["docs"] + manifest["counts"]["errors"] == N_REVIEWS
    assert manifest["config"]["model"] == "minilm" and manifest["config"]["max_length"] == 128
    assert manifest["versions"]["torch"] and manifest["versions"]["ray"]
    assert len(manifest["model"]["fingerprint"]) == 64
    assert (run / "config.yaml").is_file()
    docs = pq.read_table(run / "docs").to_pandas()
    assert docs.doc_id.is_unique and len(docs) == manifest["counts"]["docs"]
    expected = read_corpus(str(IMDB), split="train", limit=N_REVIEWS)
    assert set(docs.doc_id) == set(expected.doc_id)
    assert not (imdb_store / "_staging" / "run_id=imdb200").exists()


def test_words_sum_to_one_per_document_method_layer(imdb_store):
    con = open_store(imdb_store)
    sums = con.execute("select doc_id, method, layer, sum(score) as s, count(*) as n from words group by all").df()
    assert len(sums) == N_REVIEWS * 2 * 6
    np.testing.assert_allclose(sums.s, 1.0, atol=1e-4)


def per_document(words: pd.DataFrame, stat: str) -> pd.DataFrame:
    """Independent reference of the per-document word values: pieces of a joined contraction summed
    (span_id), lift = the unit's share x the document's words / the unit's words (1 = an even
    spread), then the mean over a word's units in the document."""
    units = (
        words.groupby(["doc_id", "span_id"])
        .agg(word=("joined", "first"), share=("score", "sum"), pieces=("score", "size"))
        .reset_index()
    )
    units["word"] = units.word.str.lower()
    units["lift"] = units.share * units.doc_id.map(words.groupby("doc_id").size()) / units.pieces
    return units.groupby(["word", "doc_id"]).agg(value=(stat, "mean"), occurrences=(stat, "size")).reset_index()


def test_topk_equals_independent_pandas_aggregation(imdb_store):
    """Golden values: read the words Parquet files directly and aggregate with pandas and scipy."""
    stats = pytest.importorskip("scipy.stats")
    run = imdb_store / "runs" / "run_id=imdb200"
    words = read_slice(run, "words", "rollout", 6)
    per_doc = per_document(words, "lift")
    grouped = (
        per_doc.groupby("word")
        .agg(
            mean_score=("value", "mean"),
            sd=("value", "std"),
            occurrences=("occurrences", "sum"),
            documents=("doc_id", "size"),
        )
        .reset_index()
    )
    min_docs = max(2, min(50, N_REVIEWS // 50))  # the default support: one review in 50, at least 2
    grouped = grouped[grouped.documents >= min_docs]
    expected = grouped.sort_values(["mean_score", "word"], ascending=[False, True]).head(15)

    got = topk(open_store(imdb_store), "imdb200", "rollout", 6, k=15)
    assert got.word.tolist() == expected.word.tolist()
    np.testing.assert_allclose(got.mean_score, expected.mean_score, rtol=1e-5)
    np.testing.assert_allclose(got.sd, expected.sd, rtol=1e-4)
    assert got.occurrences.tolist() == expected.occurrences.tolist()
    assert got.documents.tolist() == expected.documents.tolist()
    half = stats.t.ppf(0.975, expected.documents - 1) * expected.sd / np.sqrt(expected.documents)
    np.testing.assert_allclose(got.ci_high - got.mean_score, half, rtol=2e-3)


def test_topk_by_predicted_class_partitions_documents(imdb_store):
    con = open_store(imdb_store)
    got = topk(con, "imdb200", "raw", 3, k=5, min_docs=3, by="pred", stat="share")
    docs = pq.read_table(imdb_store / "runs" / "run_id=imdb200" / "docs").to_pandas()
    words = read_slice(imdb_store / "runs" / "run_id=imdb200", "words", "raw", 3)
    per_doc = per_document(words, "share").merge(docs[["doc_id", "pred"]], on="doc_id")
    for group, rows in got.groupby("group"):
        mine = per_doc[per_doc.pred == int(group)].groupby("word").value.agg(["mean", "size"]).reset_index()
        top = mine[mine["size"] >= 3].sort_values(["mean", "word"], ascending=[False, True]).head(5)
        assert rows.word.tolist() == top.word.tolist()
        np.testing.assert_allclose(rows.mean_score.values, top["mean"].values, rtol=1e-5)


def test_cli_topk_sql_and_report(imdb_store, tmp_path, capsys):
    assert cli.main(["topk", "--store", str(imdb_store), "--k", "5", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and rows[0]["rank"] == 1

    assert (
        cli.main(
            [
                "sql",
                "--store",
                str(imdb_store),
                "--format",
                "csv",
                "select count(*) as n from docs where run_id = 'imdb200'",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(N_REVIEWS)

    out = tmp_path / "report.html"
    assert cli.main(["report", "--store", str(imdb_store), "--out", str(out)]) == 0
    page = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", page)
    assert "vegaEmbed" in page and page.count("class='chart'") >= 6
    assert "Top 20 important words across all samples" in page
    assert "Overall accuracy" in page


def test_sql_refuses_writes_and_outside_files(imdb_store, tmp_path, capsys):
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    for query in (
        f"select * from read_csv('{outside}')",
        f"copy docs to '{tmp_path / 'x.csv'}'",
        "install httpfs",
        "set enable_external_access = true",
        f"attach '{tmp_path / 'x.db'}'",
    ):
        assert cli.main(["sql", "--store", str(imdb_store), query]) == 2
        assert "xai-ray:" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "x.db").exists()


def test_flow_as_its_own_cpu_stage_equals_flow_in_the_actor(ray_cluster, tmp_path):
    """What GPU runs do (flow deferred to a CPU stage), forced on CPU: the rows must not change."""
    cfg = _cfg(tmp_path, limit=6, actors=1, methods="raw,rollout,flow", defer_flow=True)
    corpus = read_corpus(cfg.data, cfg.split, limit=cfg.limit, seed=cfg.seed)
    staged = pipeline.score(corpus, cfg).to_pandas().set_index("doc_id")
    assert "attention" not in staged.columns
    direct = (
        Scorer({**cfg.to_dict(), "gpus_per_actor": 0, "deferred_methods": []})(
            {"doc_id": corpus.doc_id.values, "text": corpus.text.values, "label": corpus.label.values}
        )
        .to_pandas()
        .set_index("doc_id")
    )
    assert sorted(staged.index) == sorted(direct.index)
    for doc_id in direct.index:
        assert pd.isna(staged.at[doc_id, "error"])
        for column in ("scores_flow", "word_scores_flow", "scores_rollout"):
            np.testing.assert_allclose(staged.at[doc_id, column], direct.at[doc_id, column], atol=1e-6)
