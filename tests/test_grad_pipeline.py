"""The gradient methods through the whole job: a Ray run of the tiny BERT writes them to tokens and
words (per layer where they have layers, at the last layer where they do not), docs records the
class explained and integrated gradients' completeness, topk ranks them, --evaluate measures them,
the report builds; and a target the model lacks stops the job in one sentence."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from xai_ray.config import ConfigError, resolve, resolve_target

METHODS = "raw,rollout,grad_rollout,attn_x_grad,input_x_gradient,integrated_gradients"
TEXTS = [
    "the film was good",
    "a bad plot and boring acting",
    "i loved the story !",
    "not very good , not bad",
    "the movie is fine",
    "wonderful acting and a great plot",
    "it was playing the story",
    "boring",
]


def test_target_option_is_checked():
    assert resolve(None, {}, []).target == "pred"
    assert resolve(None, {}, ["target=label"]).target == "label"
    assert resolve(None, {}, ["target=1"]).target == 1
    for bad in ("target=-1", "target=''", "target=true"):
        with pytest.raises(ConfigError, match="target"):
            resolve(None, {}, [bad])
    with pytest.raises(ConfigError, match="ig_steps"):
        resolve(None, {}, ["ig_steps=0"])
    assert resolve(None, {}, []).ig_tolerance == 0.01 and resolve(None, {}, ["ig_tolerance=0"]).ig_tolerance == 0.0
    for bad in ("ig_tolerance=-0.1", "ig_tolerance=false", "ig_tolerance=inf"):
        with pytest.raises(ConfigError, match="ig_tolerance"):
            resolve(None, {}, [bad])
    labels = {0: "negative", 1: "positive"}
    assert resolve_target("pred", labels) == "pred" and resolve_target("label", labels) == "label"
    assert resolve_target(1, labels) == 1 and resolve_target("1", labels) == 1
    assert resolve_target("Positive", labels) == 1 and resolve_target("negative", labels) == 0
    with pytest.raises(ConfigError, match=r"target 2 is not a class of this model.*0 \(negative\), 1 \(positive\)"):
        resolve_target(2, labels)
    with pytest.raises(ConfigError, match="target 'neutral' is not a class"):
        resolve_target("neutral", labels)


@pytest.fixture(scope="module")
def grad_store(tmp_path_factory, tiny_bert_dir):
    """One run through Ray: 8 short texts (one unlabelled), target=label, every gradient method, --evaluate."""
    ray = pytest.importorskip("ray")
    from xai_ray import cli

    root = tmp_path_factory.mktemp("grad")
    labels = pd.array([1, 0, 1, 0, 1, 1, None, 0], dtype="Int64")
    pd.DataFrame({"id": [f"t{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": labels}).to_parquet(
        root / "corpus.parquet"
    )
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        status = cli.main(
            [
                "run",
                "--data",
                str(root / "corpus.parquet"),
                "--model",
                tiny_bert_dir,
                "--methods",
                METHODS,
                "--max-length",
                "32",
                "--actors",
                "1",
                "--store",
                str(root / "store"),
                "--run-id",
                "grad",
                "--evaluate",
                "--set",
                "batch_size=3",
                "--set",
                "target=label",
                "--set",
                "ig_steps=16",
            ]
        )
    finally:
        ray.shutdown()
    assert status == 0
    return root / "store"


@pytest.mark.ray
@pytest.mark.slow
def test_a_run_stores_the_gradient_methods(grad_store):
    from xai_ray.query.connection import open_store

    con = open_store(grad_store)
    docs = con.execute("select * from docs").df().set_index("doc_id")
    assert len(docs) == 7 and "t6" not in docs.index  # the unlabelled review cannot be explained for its label
    errors = con.execute("select doc_id, stage, reason from errors").fetchall()
    assert errors == [
        ("t6", "score", "target=label, but the document has no label: its class-specific methods cannot run")
    ]
    assert (docs.target == docs.label).all()
    assert docs.ig_completeness_error.notna().all() and (docs.ig_delta.abs() > 0).all()
    layers = con.execute("select method, list(distinct layer order by layer) from tokens group by method").fetchall()
    assert dict(layers) == {
        "raw": [1, 2],
        "rollout": [1, 2],
        "grad_rollout": [1, 2],
        "attn_x_grad": [1, 2],
        "input_x_gradient": [2],  # no layers: stored under the last one
        "integrated_gradients": [2],
    }
    sums = con.execute(
        "select method, layer, doc_id, sum(abs(score)) as total from tokens group by all"
    ).df()  # every method and layer: its shares of each document
    np.testing.assert_allclose(sums.total, 1.0, atol=1e-5)
    words = con.execute(
        "select method, layer, doc_id, sum(abs(score)) as total, min(score) as low from words group by all"
    ).df()
    # 1 over the words; attn_x_grad may put all its positive mass on [CLS]/[SEP] (a one-word
    # review here), and then its words have nothing to share: 0
    nothing = words.total < 0.5
    assert set(words[nothing].method) <= {"attn_x_grad"}
    np.testing.assert_allclose(words[~nothing].total, 1.0, atol=1e-5)
    signed = words[words.method.isin(["input_x_gradient", "integrated_gradients"])]
    assert (signed.low < 0).any() and (words[~words.index.isin(signed.index)].low >= 0).all()
    manifest = json.loads((grad_store / "runs" / "run_id=grad" / "manifest.json").read_text())
    assert manifest["config"]["target"] == "label" and manifest["config"]["ig_steps"] == 16
    assert manifest["target"]["target"] == "label" and manifest["target"]["class"] is None
    assert manifest["target"]["objectives"]["grad_rollout"] == "logit"
    assert manifest["target"]["objectives"]["integrated_gradients"] == "log_probability"
    assert manifest["timings"]["actor_seconds"]["attention_gradients pass"] > 0


@pytest.mark.ray
@pytest.mark.slow
def test_topk_and_faithfulness_read_the_gradient_methods(grad_store):
    from xai_ray.query.connection import open_store
    from xai_ray.query.top_words import topk

    con = open_store(grad_store)
    for method in ("grad_rollout", "attn_x_grad", "input_x_gradient", "integrated_gradients"):
        top = topk(con, method=method, k=5, min_docs=2)  # the last layer by default
        assert len(top) > 0, method
        expected = con.execute(
            "select lower(word) as word, avg(lift) as value from ("
            "  select doc_id, lower(joined) as word, avg(lift) as lift from words"
            "  where method = $m and layer = 2 group by all) group by word having count(*) >= 2"
            " order by value desc, word limit 5",
            {"m": method},
        ).df()
        np.testing.assert_allclose(top["mean_score"].to_numpy()[: len(expected)], expected.value, rtol=1e-5)
    faithfulness = con.execute("select method, layer, count(*) from faithfulness group by all").fetchall()
    found = {(m, layer) for m, layer, _ in faithfulness}
    assert {("grad_rollout", 1), ("grad_rollout", 2), ("attn_x_grad", 2), ("integrated_gradients", 2)} <= found
    # target=label: the stored input_x_gradient explains the label, evaluated as itself at its layer,
    # beside the evaluation's baseline of the predicted class (no layer)
    assert ("input_x_gradient", None) in found and ("input_x_gradient", 2) in found
    page = (grad_store / "runs" / "run_id=grad" / "report.html").read_text()
    assert "grad_rollout" in page and "integrated_gradients" in page


@pytest.mark.ray
@pytest.mark.slow
def test_a_target_the_model_lacks_stops_the_job_in_one_sentence(tiny_bert_dir, tmp_path, capsys):
    from xai_ray import cli

    pd.DataFrame({"id": ["a"], "text": ["the film was good"], "label": [1]}).to_parquet(tmp_path / "c.parquet")
    argv = ["run", "--data", str(tmp_path / "c.parquet"), "--model", tiny_bert_dir, "--methods", "grad_rollout"]
    status = cli.main([*argv, "--store", str(tmp_path / "store"), "--set", "target=neutral"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert err[-1] == (
        "xai-ray: target 'neutral' is not a class of this model; "
        "use pred, label or one of its classes: 0 (negative), 1 (positive)"
    )
    assert not (tmp_path / "store" / "runs").exists() or not any((tmp_path / "store" / "runs").iterdir())


def test_nightly_knows_a_document_only_under_the_same_target(tiny_bert_dir):
    """The nightly key holds the target (and integrated gradients' steps) when a class-specific
    method runs, and reads back the same from the run's manifest, so known documents are found."""
    from xai_ray.ops.night_key import manifest_key, scoring_key, target_key

    assert target_key(("raw", "rollout"), "pred", 20) == {}  # runs of attention methods match older runs
    # a refined path gives other scores; a run saved before the tolerance existed never refined
    assert target_key(("integrated_gradients",), "pred", 20, 0.01) == {
        "target": "pred",
        "ig_steps": 20,
        "ig_tolerance": 0.01,
    }
    assert target_key(("integrated_gradients",), "pred", 20, 0.0) == {"target": "pred", "ig_steps": 20}
    older = {"config": {"model": tiny_bert_dir, "methods": ["integrated_gradients"]}, "model": {"fingerprint": "f"}}
    assert "ig_tolerance" not in manifest_key(older)
    for sets in (["methods=grad_rollout,raw", "target=label"], ["methods=integrated_gradients", "target=1"]):
        cfg = resolve(None, {"model": tiny_bert_dir}, sets)
        key = scoring_key(cfg)
        manifest = {
            "config": cfg.to_dict(),
            "model": {"fingerprint": key["fingerprint"]},
            "attention": cfg.attention_options,
        }
        assert manifest_key(json.loads(json.dumps(manifest))) == key
        assert key["target"] == cfg.target
        other = resolve(None, {"model": tiny_bert_dir}, [*sets, "target=pred"])
        assert scoring_key(other) != key
    assert "ig_steps" in scoring_key(resolve(None, {"model": tiny_bert_dir}, ["methods=integrated_gradients"]))
