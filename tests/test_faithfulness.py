"""Faithfulness metrics: hand-checked math on a toy predict function, a hand-built model in which
one token decides the class, an independent plain-loop re-computation on real reviews with real
MiniLM, the pipeline's faithfulness view through Ray, and the report section."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import build_wordpiece_tokenizer

from xai_ray.config import ConfigError, resolve
from xai_ray.report.definition import load_definition
from xai_ray.scoring import faithfulness as fm
from xai_ray.scoring.actor import Scorer

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"
HEADLINE = ["comprehensiveness_aopc", "sufficiency_aopc", "spearman_loo", "spearman_grad"]


# --------------------------------------------------------------------------- toy predict, by hand


WEIGHTS = {101: 0.0, 102: 0.0, 7: 2.0, 8: 1.0, 9: -1.0, 10: 0.5, 0: 0.0}  # 0: the mask id


def toy_predict(inputs):
    """p(class 1) = sigmoid(sum of the weights of the ids present - 0.5)."""
    out = []
    for ids in inputs:
        z = sum(WEIGHTS[int(i)] for i in ids) - 0.5
        p1 = 1 / (1 + math.exp(-z))
        out.append([1 - p1, p1])
    return np.asarray(out)


def sig(z):
    return 1 / (1 + math.exp(-z))


def test_metrics_by_hand_on_a_toy_predict_function():
    ids = np.array([101, 7, 8, 9, 10, 102])  # [CLS] a b c d [SEP]: weights 2, 1, -1, 0.5
    special = np.array([True, False, False, False, False, True])
    scores = np.array([9.0, 0.4, 0.3, 0.1, 0.2, 9.0])  # ranks a > b > d > c; specials never ranked
    gradient = np.array([0.0, 4.0, 3.0, 1.0, 2.0, 0.0])  # same order: rho 1
    rows = fm.evaluate_document(
        ids, special, [("m", 3, scores)], gradient, toy_predict, mask_id=0, fractions=(0.25, 0.5)
    )
    got = {metric: value for _, _, metric, value in rows}
    full = sig(2 + 1 - 1 + 0.5 - 0.5)  # 0.8808, class 1
    # 25 % of 4 tokens = 1 (a); 50 % = 2 (a, b)
    expected = {
        "comprehensiveness@0.25": full - sig(1 - 1 + 0.5 - 0.5),
        "comprehensiveness@0.50": full - sig(-1 + 0.5 - 0.5),
        "sufficiency@0.25": full - sig(2 - 0.5),
        "sufficiency@0.50": full - sig(3 - 0.5),
    }
    expected["comprehensiveness_aopc"] = (expected["comprehensiveness@0.25"] + expected["comprehensiveness@0.50"]) / 2
    expected["sufficiency_aopc"] = (expected["sufficiency@0.25"] + expected["sufficiency@0.50"]) / 2
    # leave-one-out drops: a -> full - sig(0), b -> full - sig(1), c -> full - sig(3), d -> full - sig(1.5):
    # importance order a > b > d > c, exactly the method's: rho = 1
    expected["spearman_loo"] = 1.0
    expected["spearman_grad"] = 1.0
    assert got.keys() == expected.keys()
    for metric, value in expected.items():
        assert got[metric] == pytest.approx(value, abs=1e-12), metric
    assert [(m, layer) for m, layer, _, _ in rows] == [("m", 3)] * len(expected)


def test_spearman_by_hand_with_ties_and_constants():
    # x ranks 1,2,3,4; y ranks 2,1,4,3: d = (1,1,1,1), rho = 1 - 6*4/(4*15) = 0.6
    assert fm.spearman([1, 2, 3, 4], [20, 10, 40, 30]) == pytest.approx(0.6)
    assert fm.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: y ranks (1.5, 1.5, 3, 4) against 1..4: pearson of centred ranks by hand
    a, b = np.array([-1.5, -0.5, 0.5, 1.5]), np.array([-1.0, -1.0, 0.5, 1.5])
    assert fm.spearman([1, 2, 3, 4], [5, 5, 6, 7]) == pytest.approx(
        (a * b).sum() / math.sqrt((a * a).sum() * (b * b).sum())
    )
    assert math.isnan(fm.spearman([1, 2, 3], [2, 2, 2]))
    assert math.isnan(fm.spearman([1.0], [3.0]))


def test_default_fractions_are_erasers_and_aopc_is_their_plain_mean():
    assert fm.FRACTIONS == (0.01, 0.05, 0.10, 0.20, 0.50)
    assert resolve(None, {}, []).evaluate_fractions == fm.FRACTIONS
    assert fm.aopc([0.1, 0.2, 0.3, 0.4, 0.5]) == pytest.approx(1.5 / 5)  # not 1.5 / 6 (|B| + 1)


def test_fraction_sizes_ranking_and_random_floor():
    assert [fm.n_top(30, f) for f in (0.05, 0.1, 0.2, 0.5)] == [2, 3, 6, 15]  # ceil; 0.1 * 30 is not 4
    assert [fm.n_top(3, f) for f in (0.05, 0.5, 1.0)] == [1, 2, 3]
    real = np.array([False, True, True, True, False])
    assert fm.rank_tokens(np.array([5.0, 1.0, 3.0, 1.0, 9.0]), real).tolist() == [2, 1, 3]  # ties by position
    first = fm.random_scores("doc-7", 12, seed=3)
    assert np.array_equal(first, fm.random_scores("doc-7", 12, seed=3))
    assert not np.array_equal(first, fm.random_scores("doc-8", 12, seed=3))
    assert not np.array_equal(first, fm.random_scores("doc-7", 12, seed=4))
    assert fm.metric_names((0.05, 0.5)) == [
        "comprehensiveness@0.05",
        "comprehensiveness@0.50",
        "sufficiency@0.05",
        "sufficiency@0.50",
        "comprehensiveness_aopc",
        "sufficiency_aopc",
        "spearman_loo",
        "spearman_grad",
    ]


def test_identical_perturbations_are_forwarded_once():
    seen = []

    def counting(inputs):
        seen.extend(tuple(x) for x in inputs)
        return toy_predict(inputs)

    ids, special = np.array([101, 7, 8, 102]), np.array([True, False, False, True])
    same = np.array([0.0, 0.9, 0.1, 0.0])
    fm.evaluate_document(ids, special, [("a", 1, same), ("a", 2, same)], None, counting, 0, (0.5, 1.0))
    assert len(seen) == len(set(seen))
    # full, 2 leave-one-out, without top 1, only top 1, without both, only both (= full)
    assert len(seen) == 1 + 2 + 2 + 1


def test_config_checks_evaluation_options():
    cfg = resolve(None, {"evaluate": True}, ["evaluate_fractions=[0.1, 0.3]"])
    assert cfg.evaluate and cfg.evaluate_fractions == (0.1, 0.3) and cfg.to_dict()["evaluate_fractions"] == [0.1, 0.3]
    assert resolve(None, {}, ["evaluate_fractions=0.05,0.5"]).evaluate_fractions == (0.05, 0.5)
    with pytest.raises(ConfigError, match="evaluate_fractions"):
        resolve(None, {}, ["evaluate_fractions=[0, 0.5]"])
    with pytest.raises(ConfigError, match="evaluate_fractions"):
        resolve(None, {}, ["evaluate_fractions=a,b"])
    with pytest.raises(ConfigError, match="evaluate_share"):
        resolve(None, {}, ["evaluate_share=0"])


# --------------------------------------------------------------------------- one token decides


def build_decider(folder: Path) -> str:
    """A 2-layer, 1-head BERT with hidden size 4 whose weights are set by hand so that the word
    "good" alone decides the class:

    embeddings: "good" = (2, 0, 0, -2), [CLS] = (0, 2, 0, -2), every other token 0; no position
    embeddings, type embedding (-1, 0, 0, 0) (other tokens then read as slightly "not good"). Both layers: [CLS]'s query (10 x dim 1) meets "good"'s key (10 x dim 0),
    so [CLS] attends to "good" with weight ~1 and to nothing else in particular. Layer 1 copies
    "good"'s dim 0 into dim 2 of [CLS] (value, output = identity); layer 2 and both FFNs add 0.
    Classifier: logit(positive) = 10 * tanh(dim 2 of [CLS]) - 2, logit(negative) = 0.
    """
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = build_wordpiece_tokenizer()
    vocab = tokenizer.get_vocab()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=4,
        num_hidden_layers=2,
        num_attention_heads=1,
        intermediate_size=4,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="eager",
    )
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.fill_(1.0 if "LayerNorm.weight" in name else 0.0)
        embeddings = model.bert.embeddings.word_embeddings.weight
        embeddings[vocab["good"]] = torch.tensor([2.0, 0, 0, -2])
        embeddings[vocab["[CLS]"]] = torch.tensor([0.0, 2, 0, -2])
        # Without an offset the embedding LayerNorm would be scale-invariant in each word vector,
        # and so every input x gradient exactly 0 (x . grad f(x) = 0 for such f).
        model.bert.embeddings.token_type_embeddings.weight[0] = torch.tensor([-1.0, 0, 0, 0])
        for i, layer in enumerate(model.bert.encoder.layer):
            layer.attention.self.query.weight[0, 1] = 10.0
            layer.attention.self.key.weight[0, 0] = 10.0
            layer.attention.self.value.weight[2, 0] = 1.0
            if i == 0:
                layer.attention.output.dense.weight.copy_(torch.eye(4))
        model.bert.pooler.dense.weight.copy_(torch.eye(4))
        model.classifier.weight[1, 2] = 10.0
        model.classifier.bias[1] = -2.0
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return str(folder)


DECIDED = {  # texts in the tiny vocabulary; "good" at the start, middle and end
    "mid": "the film was good and the plot was fine .",
    "start": "good acting , a boring story and a bad plot !",
    "end": "i loved the story of this movie and it was very good",
    "two": "good film",
}


@pytest.fixture(scope="module")
def decided(tmp_path_factory):
    folder = build_decider(tmp_path_factory.mktemp("decider"))
    scorer = Scorer({"model": folder, "max_length": 32, "methods": ["raw", "rollout", "flow"], "evaluate": True})
    rows = scorer({"doc_id": list(DECIDED), "text": list(DECIDED.values()), "label": [1] * len(DECIDED)}).to_pylist()
    return scorer, {row["doc_id"]: row for row in rows}


def test_the_decider_is_built_as_described(decided):
    scorer, rows = decided
    for doc_id, row in rows.items():
        assert row["error"] is None and row["evaluate_error"] is None
        assert row["pred"] == 1 and row["probs"][1] > 0.9, doc_id
    without = scorer({"doc_id": ["no"], "text": ["the film was bad"], "label": [0]}).to_pylist()[0]
    assert without["pred"] == 0 and without["probs"][1] < 0.2


def test_every_metric_points_at_the_deciding_token(decided):
    _, rows = decided
    for doc_id, row in rows.items():
        values = pd.DataFrame(row["faithfulness"])
        ranked = values[values.method != "random"]
        assert set(ranked.method) == {"raw", "rollout", "flow", "input_x_gradient"}
        assert set(values[values.method.isin(["raw", "rollout", "flow"])].layer) == {1, 2}
        assert values[values.method == "input_x_gradient"].layer.isna().all()
        by = ranked.set_index(["method", "layer", "metric"])["value"]
        for (method, layer), group in ranked.groupby(["method", "layer"], dropna=False):
            got = group.set_index("metric")["value"]
            # every share's top tokens hold "good": removing them flips the class, keeping them keeps it
            for f in fm.FRACTIONS:
                assert got[f"comprehensiveness@{f:.2f}"] > 0.7, (doc_id, method, layer, f)
                assert got[f"sufficiency@{f:.2f}"] < 0.02, (doc_id, method, layer, f)
            assert got["comprehensiveness_aopc"] > 0.7 and got["sufficiency_aopc"] < 0.02
        if doc_id == "two":  # two real tokens: every ranking, leave-one-out and the gradient put "good" first
            assert (ranked[ranked.metric.isin(["spearman_loo", "spearman_grad"])].value == 1.0).all()
        assert len(by) == len(ranked)


def test_random_floor_sits_below_the_methods(decided):
    _, rows = decided
    values = pd.concat([pd.DataFrame(row["faithfulness"]).assign(doc_id=d) for d, row in rows.items() if d != "two"])
    aopc = values[values.metric == "comprehensiveness_aopc"]
    floor = aopc[aopc.method == "random"].value.mean()
    assert (aopc[aopc.method != "random"].groupby(["method", "layer"], dropna=False).value.mean() > floor + 0.2).all()
    assert (aopc[aopc.method == "random"].value < 0.7).any()  # the floor really is random here


def test_a_failed_evaluation_is_an_error_row_and_the_scores_stay(decided, tmp_path, monkeypatch):
    from xai_ray import pipeline

    scorer, _ = decided
    bad = build_wordpiece_tokenizer().convert_tokens_to_ids("boring")
    honest = scorer.evaluator.predict

    def predict(inputs):
        if any(bad in ids for ids in inputs):
            raise RuntimeError("out of memory")
        return honest(inputs)

    monkeypatch.setattr(scorer.evaluator, "predict", predict)
    rows = scorer({"doc_id": ["ok", "hurt"], "text": ["the film was good", "a boring film"], "label": [1, 0]})
    cfg = resolve(None, {"store": str(tmp_path), "methods": "raw,rollout,flow", "evaluate": True})
    _, manifest = pipeline.write([rows], cfg, "e1", n_input=2, model={"n_layers": 2})
    from xai_ray.query.connection import open_store

    con = open_store(tmp_path)
    errors = con.execute("select doc_id, stage, reason from errors").fetchall()
    assert errors == [("hurt", "evaluate", "evaluation failed: RuntimeError: out of memory")]
    assert sorted(con.execute("select doc_id from docs").fetchall()) == [("hurt",), ("ok",)]
    assert con.execute("select distinct doc_id from faithfulness").fetchall() == [("ok",)]
    assert manifest["counts"]["evaluate_errors"] == 1 and manifest["counts"]["errors"] == 0


# --------------------------------------------------------------------------- independent recomputation


def independent_metrics(model, tokenizer, text, max_length, rankings, fractions):
    """Every metric by plain loops: one unpadded forward per perturbed input, scipy's Spearman,
    and the gradient from a hook on the word embeddings (the model fed ids, not embeddings)."""
    import torch
    from scipy.stats import spearmanr

    ids = tokenizer(text, truncation=True, max_length=max_length)["input_ids"]
    special = set(tokenizer.all_special_ids)
    real = [j for j, t in enumerate(ids) if t not in special]

    def prob(seq):
        with torch.no_grad():
            return torch.softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), -1).numpy()

    full = prob(ids)
    c = int(full.argmax())
    mask = tokenizer.mask_token_id
    loo = [full[c] - prob(ids[:j] + [mask] + ids[j + 1 :])[c] for j in real]
    captured = {}
    table = model.get_input_embeddings()
    hook = table.register_forward_hook(lambda m, i, out: captured.setdefault("e", out))
    try:
        logits = model(input_ids=torch.tensor([ids])).logits[0]
        embedded = captured["e"]
        (grad,) = torch.autograd.grad(logits[c] - torch.logsumexp(logits, 0), embedded)  # d log p_c
    finally:
        hook.remove()
    gradient = (embedded * grad).sum(-1)[0].detach().numpy()
    out = {}
    for method, layer, scores in rankings:
        order = sorted(real, key=lambda j: (-scores[j], j))
        for f in fractions:
            k = max(1, -(-round(f * 100) * len(real) // 100))  # ceil in integers
            top = set(order[:k])
            out[(method, layer, f"comprehensiveness@{f:.2f}")] = (
                full[c] - prob([t for j, t in enumerate(ids) if j not in top])[c]
            )
            out[(method, layer, f"sufficiency@{f:.2f}")] = (
                full[c] - prob([t for j, t in enumerate(ids) if j in top or j not in real])[c]
            )
        out[(method, layer, "comprehensiveness_aopc")] = np.mean(
            [out[(method, layer, f"comprehensiveness@{f:.2f}")] for f in fractions]
        )
        out[(method, layer, "sufficiency_aopc")] = np.mean(
            [out[(method, layer, f"sufficiency@{f:.2f}")] for f in fractions]
        )
        out[(method, layer, "spearman_loo")] = spearmanr([scores[j] for j in real], loo).statistic
        if method != "input_x_gradient":
            out[(method, layer, "spearman_grad")] = spearmanr([scores[j] for j in real], gradient[real]).statistic
    return out, gradient


@pytest.mark.slow
def test_metrics_equal_an_independent_computation_on_real_reviews():
    from xai_ray.model.loading import load_model

    reviews = pd.read_parquet(IMDB).iloc[[3, 17, 42]]
    max_length, fractions = 40, (0.01, 0.05, 0.1, 0.2, 0.5)  # the default: ERASER's scorer's thresholds
    scorer = Scorer(
        {
            "model": "minilm",
            "max_length": max_length,
            "methods": ["raw", "rollout", "flow"],
            "evaluate": True,
            "max_tokens_per_batch": 512,
        }
    )
    rows = scorer(
        {
            "doc_id": reviews["id"].astype(str).tolist(),
            "text": reviews["text"].tolist(),
            "label": reviews["label"].tolist(),
        }
    ).to_pylist()
    plain = load_model("minilm", attn_implementation="eager")  # same seeded head, no capture, no batching
    compared = 0
    for row in rows:
        n = row["n_tokens"]
        rankings = [
            (m, layer + 1, np.asarray(row[f"scores_{m}"], np.float64).reshape(-1, n)[layer])
            for m in ("raw", "rollout", "flow")
            for layer in range(6)
        ]
        _, gradient = independent_metrics(plain.model, plain.tokenizer, row["text"], max_length, [], fractions)
        rankings += [("input_x_gradient", None, gradient), ("random", None, fm.random_scores(row["doc_id"], n, 0))]
        expected, _ = independent_metrics(plain.model, plain.tokenizer, row["text"], max_length, rankings, fractions)
        got = {(m["method"], m["layer"], m["metric"]): m["value"] for m in row["faithfulness"]}
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            tolerance = 2e-3 if key[2].startswith("spearman") else 2e-5
            assert got[key] == pytest.approx(value, abs=tolerance), key
            compared += 1
    assert compared == 3 * (18 * 14 + 13 + 14)  # 14 metrics a ranking: 2 curves x 5 fractions, 2 AOPC, 2 rho
    assert all(dict(row["seconds"])["evaluate"] > 0 for row in rows)


# --------------------------------------------------------------------------- pipeline, view, report


@pytest.fixture(scope="module")
def evaluated_store(tmp_path_factory, tiny_bert_dir):
    """One run through Ray with --evaluate: 8 short texts, the tiny random BERT, raw/rollout/flow."""
    ray = pytest.importorskip("ray")
    from xai_ray import cli

    root = tmp_path_factory.mktemp("evaluated")
    texts = [
        "the film was good",
        "a bad plot and boring acting",
        "i loved the story !",
        "not very good , not bad",
        "the movie is fine",
        "wonderful acting and a great plot",
        "it was playing the story",
        "boring",
    ]
    pd.DataFrame({"id": [f"t{i}" for i in range(len(texts))], "text": texts, "label": [1, 0] * 4}).to_parquet(
        root / "corpus.parquet"
    )
    from xai_ray import runtime

    runtime.wait_for_release()  # a Ray an earlier test left going (the write stage's) is joined, as ray_cluster does
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        common = [
            "run",
            "--data",
            str(root / "corpus.parquet"),
            "--model",
            tiny_bert_dir,
            "--methods",
            "raw,rollout,flow",
            "--max-length",
            "32",
            "--actors",
            "2",
            "--store",
            str(root / "store"),
            "--set",
            "batch_size=2",
        ]
        assert cli.main([*common, "--run-id", "ev", "--evaluate"]) == 0
        # the same run published without --evaluate, then evaluated after the fact
        assert cli.main([*common, "--run-id", "later"]) == 0
        # a share that picks none of the 8 documents writes nothing (written, it would have refused
        # every later evaluation as "already has faithfulness metrics")
        assert cli.main(["evaluate", "--store", str(root / "store"), "--run", "later", "--share", "1e-9"]) == 2
        assert not (root / "store" / "runs" / "run_id=later" / "faithfulness").exists()
        assert cli.main(["evaluate", "--store", str(root / "store"), "--run", "later"]) == 0
        assert cli.main(["evaluate", "--store", str(root / "store"), "--run", "later"]) == 2  # only once
        assert cli.main([*common, "--run-id", "half"]) == 0  # evaluated later for a share of its documents
        assert cli.main(["evaluate", "--store", str(root / "store"), "--run", "half", "--share", "0.5"]) == 0
    finally:
        ray.shutdown()
    return root / "store"


@pytest.mark.ray
@pytest.mark.slow
def test_pipeline_writes_the_faithfulness_view(evaluated_store):
    from xai_ray.query.connection import open_store

    con = open_store(evaluated_store)
    frame = con.execute("select * from faithfulness where run_id = 'ev'").df()
    assert frame.doc_id.nunique() == 8
    per_doc = frame.groupby("doc_id").size()
    assert (per_doc == 3 * 2 * 14 + 13 + 14).all()  # 3 methods x 2 layers, gradient (no rho with itself), random
    assert set(frame.method) == {"raw", "rollout", "flow", "input_x_gradient", "random"}
    assert frame[frame.method.isin(["input_x_gradient", "random"])].layer.isna().all()
    assert set(frame.metric) == set(fm.metric_names())
    assert not frame.duplicated(["doc_id", "method", "layer", "metric"]).any()
    manifest = json.loads((evaluated_store / "runs" / "run_id=ev" / "manifest.json").read_text())
    assert manifest["counts"]["faithfulness"] == len(frame)
    assert manifest["timings"]["actor_seconds"]["evaluate"] > 0 and "gradient" in manifest["timings"]["actor_seconds"]
    assert manifest["config"]["evaluate"] is True
    empty = open_store(evaluated_store).execute("select count(*) from faithfulness where run_id = 'none'").fetchone()
    assert empty == (0,)


@pytest.mark.ray
@pytest.mark.slow
def test_evaluating_a_published_run_later_gives_the_same_metrics(evaluated_store):
    from xai_ray.query.connection import open_store

    con = open_store(evaluated_store)
    key = ["doc_id", "method", "layer", "metric"]
    at_run = con.execute("select * from faithfulness where run_id = 'ev'").df().fillna({"layer": 0}).set_index(key)
    later = con.execute("select * from faithfulness where run_id = 'later'").df().fillna({"layer": 0}).set_index(key)
    assert len(later) == len(at_run) == 8 * (3 * 2 * 14 + 13 + 14)
    joined = at_run.merge(later, left_index=True, right_index=True, suffixes=("_run", "_later"))
    np.testing.assert_allclose(joined.value_later, joined.value_run, atol=1e-6)
    manifest = json.loads((evaluated_store / "runs" / "run_id=later" / "manifest.json").read_text())
    assert manifest["config"]["evaluate"] is True and manifest["counts"]["faithfulness"] == len(later)
    assert manifest["timings"]["actor_seconds"]["evaluate"] > 0 and manifest["evaluated_at"]
    page = (evaluated_store / "runs" / "run_id=later" / "report.html").read_text()
    assert "<section id='faithfulness'>" in page  # the run's own report was rebuilt with the section


@pytest.mark.ray
@pytest.mark.slow
def test_evaluating_a_share_scores_and_counts_only_that_share(evaluated_store):
    """`evaluate --share 0.5` said "evaluating: 8/8 documents" and scored all 8 again, for the 4 or
    so it evaluated. The share is a stable hash of each id, computed here on its own."""
    import hashlib

    from xai_ray.query.connection import open_store

    def picked(doc_id: str) -> bool:
        return int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "little") / 2**64 < 0.5

    expected = sorted(d for d in (f"t{i}" for i in range(8)) if picked(d))
    assert 0 < len(expected) < 8
    con = open_store(evaluated_store)
    found = con.execute("select distinct doc_id from faithfulness where run_id = 'half' order by 1").df()
    assert found.doc_id.tolist() == expected
    log = (evaluated_store / "logs" / "half.log").read_text()
    assert f"evaluating run half: {len(expected)} of its 8 documents (evaluate_share 0.5)" in log


@pytest.mark.ray
@pytest.mark.slow
def test_report_section_from_the_evaluated_run(evaluated_store):
    from xai_ray.query.connection import open_store, run_named
    from xai_ray.query.intervals import RULE, faithfulness_summary
    from xai_ray.report.page import build_report

    page = (build_report(evaluated_store, "ev", evaluated_store.parent / "r.html")).read_text()
    assert "<section id='faithfulness'>" in page
    section = page.split("<section id='faithfulness'>")[1].split("</section>")[0]
    assert "random" in section and "input_x_gradient" in section and "comprehensiveness_aopc" in section
    values = run_named(open_store(evaluated_store), "report_faithfulness", run_id="ev")
    summary = faithfulness_summary(values)
    means = values.groupby(["method", values.layer.fillna(0), "metric"]).value.mean()  # pandas, independently
    for row in summary.itertuples():
        assert row.mean == pytest.approx(means[(row.method, 0 if pd.isna(row.layer) else row.layer, row.metric)])
        assert row.lo <= row.mean + 1e-12 and row.mean <= row.hi + 1e-12
    assert (summary.hi > summary.lo).any()
    assert RULE in section  # the rule is named where the intervals are shown


def test_charts_encode_layers_baselines_and_intervals():
    from xai_ray.report import charts_faithfulness as charts

    rows = []
    for method, layers in (("raw", [1, 2]), ("rollout", [1, 2]), ("input_x_gradient", [None]), ("random", [None])):
        for layer in layers:
            for metric in HEADLINE + ["comprehensiveness@0.05", "comprehensiveness@0.50"]:
                rows.append(
                    {
                        "method": method,
                        "layer": layer,
                        "metric": metric,
                        "mean": 0.3,
                        "lo": 0.2,
                        "hi": 0.4,
                        "n_docs": 10,
                    }
                )
    summary = pd.DataFrame(rows)
    spec = charts.by_layer(summary, HEADLINE, "t").to_dict()
    assert spec["facet"]["field"] == "metric" and spec["facet"]["sort"] == HEADLINE
    layers = spec["spec"]["layer"]
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in layers]
    assert marks == ["rect", "rule", "errorbar", "line"]
    assert [layer["transform"][0]["filter"] for layer in layers] == ["datum.baseline"] * 2 + ["!datum.baseline"] * 2
    assert layers[0]["encoding"]["y"]["field"] == "lo" and layers[0]["encoding"]["y2"]["field"] == "hi"
    assert layers[3]["encoding"]["x"]["field"] == "layer"
    data = spec["datasets"][spec["data"]["name"]]
    assert {d["metric"] for d in data} == set(HEADLINE)  # per-fraction rows are not in this chart
    assert [d["baseline"] for d in data if d["method"] == "random"] == [True] * 4
    curves = summary[summary.metric.str.contains("@")].assign(
        metric=lambda f: f.metric.str.split("@").str[0], fraction=lambda f: f.metric.str.split("@").str[1].astype(float)
    )
    spec = charts.by_fraction(curves, ["comprehensiveness", "sufficiency"], "t").to_dict()
    assert spec["facet"]["column"]["field"] == "metric"
    assert spec["spec"]["layer"][1]["encoding"]["x"]["field"] == "fraction"
    assert spec["spec"]["layer"][0]["encoding"]["y2"]["field"] == "hi"


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.browser
def test_faithfulness_section_renders_in_headless_chromium(evaluated_store, tmp_path, chromium):
    from xai_ray.report.page import build_report

    definition = {**load_definition(), "sections": ["summary", "faithfulness"]}
    page = build_report(evaluated_store, "ev", tmp_path / "f.html", definition=definition)
    dom = subprocess.run(
        [*chromium(tmp_path), "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line and "source: file://" in line]
    assert console == [], console
    section = dom.stdout.split('<section id="faithfulness">')[1].split("</section>")[0]
    charts = re.split(r'<div class="chart[^"]*" id="chart-\d+"', section)[1:]
    assert len(charts) == 3 and all("<svg" in chart and "<path" in chart for chart in charts)  # leaderboard first
    table = section.split('<table class="faithfulness">')[1].split("</table>")[0]
    assert table.count("<tr") == 1 + 3 * 2 + 2
    board = section.split('<table class="faithfulness leaderboard">')[1].split("</table>")[0]
    for method in ("raw", "rollout", "flow", "input_x_gradient", "random"):
        assert f"<td>{method}" in board


@pytest.mark.parametrize(("target", "own_rows"), [("pred", False), (0, True)])
def test_a_stored_input_x_gradient_is_evaluated_as_itself_when_it_explains_another_class(
    scorer_factory, target, own_rows
):
    """Of the predicted class it is the evaluation's baseline, evaluated once as that; of another
    class (target 0 here) its stored scores are evaluated at their layer beside the baseline."""
    scorer = scorer_factory("bert", methods=("input_x_gradient",), evaluate=True, target=target)
    table = scorer({"doc_id": ["a", "b"], "text": ["a good film", "a bad film"], "label": [1, 0]})
    rows = [r for faith in table.column("faithfulness").to_pylist() for r in faith or []]
    layers = {r["layer"] for r in rows if r["method"] == "input_x_gradient"}
    assert layers == ({None, 2} if own_rows else {None})
