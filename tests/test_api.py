"""The notebook API: xai_ray.run publishes a run as `xai-ray run` does and reads it back as DataFrames;
open_store is read-only; explain renders inline; the report's charts come back as Altair charts."""

from __future__ import annotations

import json

import altair as alt
import numpy as np
import pandas as pd
import pytest

import xai_ray
from xai_ray import cli
from xai_ray.config import ConfigError, resolve
from xai_ray.query.connection import QueryError

pytestmark = [pytest.mark.slow, pytest.mark.ray]

TEXTS = [
    "the film was good and the acting was unbelievable",
    "bad movie , not very good",
    "",
    "i loved the story and the plot",
    "this movie is boring",
    "the acting was wonderful !",
    "the plot was fine",
    "not very boring , very good",
]


@pytest.fixture(scope="module")
def api_run(ray_cluster, tiny_bert_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    data = folder / "reviews.parquet"
    pd.DataFrame(
        {"id": [f"r{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [i % 2 for i in range(len(TEXTS))]}
    ).to_parquet(data)
    run = xai_ray.run(
        data=data,
        model=tiny_bert_dir,
        methods=["raw", "rollout"],
        store=folder / "store",
        max_length=32,
        batch_size=4,
        actors=1,
        report=False,
        run_id="api-run",
    )
    return run, folder, data


def test_run_is_published_as_the_command_would(api_run, tiny_bert_dir, capsys):
    run, folder, data = api_run
    assert run.run_id == "api-run" and run.counts["docs"] == 7 and run.counts["errors"] == 1
    # the manifest holds the config the command line resolves from the same flags
    same = resolve(
        None,
        {
            "data": str(data),
            "model": tiny_bert_dir,
            "methods": "raw,rollout",
            "store": str(folder / "store"),
            "max_length": 32,
            "batch_size": 4,
            "actors": 1,
            "report": False,
            "run_id": "api-run",
        },
    ).to_dict()
    same["long_text"] = "head"  # auto, resolved for a folder that records nothing
    assert run.manifest["config"] == same
    assert (
        cli.main(
            [
                "sql",
                "--store",
                str(folder / "store"),
                "--format",
                "json",
                "select count(*) as n from docs where run_id = 'api-run'",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [{"n": 7}]


def test_docs_words_and_topk_as_dataframes(api_run):
    run, _, _ = api_run
    docs, errors = run.docs(), run.errors()
    assert len(docs) + len(errors) == len(TEXTS)
    assert set(docs.doc_id) == {f"r{i}" for i in range(len(TEXTS))} - {"r2"} and errors.doc_id.tolist() == ["r2"]
    words = run.words()
    sums = words.groupby(["doc_id", "method", "layer"]).score.sum()
    np.testing.assert_allclose(sums, 1.0, atol=1e-5)
    assert set(words.method) == {"raw", "rollout"} and set(words.layer) == {1, 2}
    # top-k against a pandas aggregation of the words frame: a word's share averaged within each
    # review first, then over the reviews it occurs in; at least 2 reviews
    last = run.words(method="rollout", layer=2).assign(word=lambda f: f.word.str.lower())
    per_doc = last.groupby(["word", "doc_id"]).score.mean().reset_index()
    grouped = per_doc.groupby("word").agg(mean_score=("score", "mean"), documents=("doc_id", "nunique")).reset_index()
    expected = grouped[grouped.documents >= 2].sort_values(["mean_score", "word"], ascending=[False, True]).head(5)
    top = run.topk(method="rollout", k=5, stat="share", min_docs=2)
    assert top.word.tolist() == expected.word.tolist()
    np.testing.assert_allclose(top.mean_score, expected.mean_score, rtol=1e-5)


def test_open_store_reads_and_refuses_writes(api_run, tmp_path):
    run, folder, _ = api_run
    con = xai_ray.open_store(folder / "store")
    assert con.sql("select count(*) as n from docs").n.tolist() == [7]
    assert con.sql("select count(*) as n from errors where run_id = $r", {"r": "api-run"}).n.tolist() == [1]
    for statement in (
        f"copy docs to '{folder / 'store' / 'x.csv'}'",
        "create table t as select 1",
        f"attach '{tmp_path / 'x.db'}'",
    ):
        with pytest.raises(QueryError, match="read-only"):
            con.sql(statement)
    with pytest.raises(QueryError, match="(?i)permission|not allowed|disabled"):
        con.sql(f"select * from read_csv('{tmp_path}/nothing.csv')")
    assert not (folder / "store" / "x.csv").exists()
    with pytest.raises(AttributeError, match="read-only"):
        con.cursor()


def test_report_and_charts_render(api_run):
    run, _, _ = api_run
    page = run.report()
    assert page.path.is_file() and page.path.name == "report.html"
    shown = page._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and "<script" not in shown  # the page is an escaped attribute
    chart = xai_ray.topk_chart(run.store, run.run_id, k=5)
    assert isinstance(chart, alt.TopLevelMixin)  # bars with their labels: a layered alt chart
    (rows,) = [d for d in chart.to_dict()["datasets"].values() if d and "word" in d[0]]
    bars = pd.DataFrame(rows)
    top = run.topk(k=5, exclude="punct")  # the report's word charts leave punctuation out
    assert bars.word.tolist() == top.word.tolist()  # the report's headline is the top-k of its main method
    assert isinstance(run.chart("agreement"), alt.TopLevelMixin)  # raw vs rollout per review
    with pytest.raises(ValueError, match="no report chart"):
        run.chart("nonsense")
    # k as `report --k` takes it: -5 said "no data", 0 drew 20 words, "x" a bare ValueError
    for k, says in ((-5, r"k must be in \[1, 1000\]"), (0, r"k must be in \[1, 1000\]"), ("x", "k must be an integer")):
        with pytest.raises(ConfigError, match=says):
            xai_ray.report_chart("headline", run.store, run.run_id, k=k)


def test_words_take_their_filters_as_typed_values(api_run):
    """``words(doc_id=5)`` raised DuckDB's ConversionException: ids are text, a whole number is its digits."""
    run, _, _ = api_run
    assert run.words(doc_id=5).empty  # no document "5", and no exception
    assert set(run.words(doc_id="r1").doc_id) == {"r1"}
    with pytest.raises(ConfigError, match="layer must be an integer"):
        run.words(layer="last")
    with pytest.raises(ConfigError, match="method must be a text"):
        run.words(method=["raw"])
    with pytest.raises(ConfigError, match="has no method 'nope'"):  # was an empty frame, where topk refuses
        run.words(method="nope")


@pytest.mark.parametrize(
    "given,says",
    [
        ({"exclude": 5}, "exclude takes 'punct', 'stop'"),  # was a bare TypeError
        ({"k": 0}, "k must be"),  # not "--k": a notebook passes k=
        ({"min_docs": 0}, "min_docs must be"),
        ({"min_count": "x"}, "min_count must be an integer"),
    ],
)
def test_topk_arguments_are_checked_under_their_own_names(api_run, given, says):
    run, _, _ = api_run
    with pytest.raises(ConfigError, match=says) as caught:
        run.topk(method="rollout", **given)
    assert "--" not in str(caught.value)


@pytest.mark.parametrize("given", [{"store": "somewhere"}, {"evaluate": True}, {"data": "x.parquet", "limit": 3}])
def test_explain_refuses_run_settings_it_would_drop(given):
    with pytest.raises(ConfigError, match="does not take") as caught:
        xai_ray.explain("a fine film", model="minilm", **given)
    assert all(key in str(caught.value) for key in given)


def test_explain_takes_what_a_page_is_scored_with():
    from xai_ray.api import EXPLAIN_OPTIONS
    from xai_ray.report.explain import page_options

    assert set(EXPLAIN_OPTIONS) == set(page_options(resolve(None, {})))


def test_a_notebooks_wrong_store_or_key_is_named_as_the_notebook_gave_it():
    """open_store(None) said "store 'None' does not exist ... `xai-ray run --store None`" at the
    first query; run(foo=1) named the key as "in flags", which a notebook never gave."""
    with pytest.raises(ConfigError, match="open_store takes a store's folder or URI, got NoneType None"):
        xai_ray.open_store(None)
    with pytest.raises(ConfigError, match="unknown config key 'foo' in the keywords of xai_ray.run"):
        xai_ray.run(data="x.csv", foo=1)


def test_explain_refuses_a_start_layer_past_the_models_last(tiny_bert_dir):
    """start_layer 3 on a 2-layer model left rollout without a score: the explanation came back
    with raw alone, no word of why. `run` refused it; explain, which scores without a run, now too."""
    with pytest.raises(ConfigError, match="start_layer is 3 but the model has 2 layers"):
        xai_ray.explain("a fine film", model=tiny_bert_dir, methods=["raw", "rollout"], start_layer=3, max_length=32)


def test_explain_renders_inline_with_word_scores(tiny_bert_dir):
    review = xai_ray.explain(
        "<b>The film</b> was unbelievable", model=tiny_bert_dir, methods=["raw", "rollout"], max_length=32
    )
    scores = review.scores
    assert set(scores.method) == {"raw", "rollout"} and set(scores.layer) == {1, 2}
    np.testing.assert_allclose(scores.groupby(["method", "layer"]).score.sum(), 1.0, atol=1e-5)
    # the tokenizer's words: < b > the film < / b > was unbelievable
    assert scores[(scores.method == "raw") & (scores.layer == 1)].word.tolist() == [
        "<",
        "b",
        ">",
        "The",
        "film",
        "<",
        "/",
        "b",
        ">",
        "was",
        "unbelievable",
    ]
    shown = review._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and "<b>The film</b>" not in shown
    assert abs(sum(review.probs) - 1) < 1e-5 and review.pred in (0, 1)


def test_arguments_of_the_wrong_kind_are_one_sentence_and_nothing_is_created(tmp_path, tiny_bert_dir, monkeypatch):

    monkeypatch.chdir(tmp_path)
    data = tmp_path / "c.csv"
    data.write_text("id,text,label\na,a good film,1\n")
    for kwargs, words in (
        ({"methods": 123}, "methods must be comma-separated text or a list of method names, got 123"),
        ({"store": None}, "store must be a path or a name (text), got NoneType None"),
        ({"methods": ["raw", 1]}, "a list of method names"),
        ({"quiet": "false"}, "quiet must be true or false, got 'false'"),  # the string was true in an if
        ({"max_length": None}, "max_length needs a value (integer); got null"),  # it was left out
    ):
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            xai_ray.run(str(data), tiny_bert_dir, **kwargs)
    for text in (123, ["a list"]):
        with pytest.raises(ConfigError, match="the text to explain must be a string"):
            xai_ray.explain(text, tiny_bert_dir)
    with pytest.raises(ConfigError, match="max_length"):
        xai_ray.explain("a good film", tiny_bert_dir, max_length=0)  # refused, not read as the default
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]


def test_a_run_over_its_error_budget_raises_with_the_published_run(ray_cluster, tiny_bert_dir, tmp_path):
    # as `xai-ray run` exits 3: every document failed, or more than max_error_share did
    data = tmp_path / "c.csv"
    data.write_text('id,text,label\na,a good film,1\nb,"   ",0\nc,,1\nd,a bad film,0\n')
    common = {"store": str(tmp_path / "store"), "max_length": 32, "actors": 1, "report": False, "quiet": True}
    with pytest.raises(xai_ray.RunFailed, match=r"2 of 4 documents failed \(50.0%\), more than") as failed:
        xai_ray.run(str(data), tiny_bert_dir, max_error_share=0.25, **common)
    assert sorted(failed.value.run.errors().doc_id) == ["b", "c"] and len(failed.value.run.docs()) == 2
    assert xai_ray.run(str(data), tiny_bert_dir, max_error_share=0.5, **common).run_id  # within: returned
    empty = tmp_path / "e.csv"
    empty.write_text('id,text,label\nb,"   ",0\n')
    with pytest.raises(xai_ray.RunFailed, match="every document failed: 0 of 1 scored"):
        xai_ray.run(str(empty), tiny_bert_dir, **common)
