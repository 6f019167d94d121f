"""Norm-based attention (``norm``) and its rollout (``norm_rollout``) on tiny BERT, DistilBERT and
RoBERTa models, against norms computed here in float64 from an eager model's attention weights and
its value projection, and a full-matrix rollout of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from xai_ray.config import ConfigError, RunConfig
from xai_ray.model import capture
from xai_ray.model.loading import load_model
from xai_ray.scoring.rows import rows_to_scores

FAMILIES = ["bert", "distilbert", "roberta"]
TEXTS = [
    "The acting was unbelievable, playing wonderfully!",
    "good",
    "I loved the film and the story, not very boring.",
    "bad movie",
]
# The value projection and the attention output projection of each layer, by module name.
VALUE = (".attention.self.value", ".attention.v_lin")
OUTPUT = (".attention.output.dense", ".attention.out_lin")


def hand_norm_matrices(folder: str, text: str) -> np.ndarray:
    """(L, n, n) || sum_h alpha^h_ij v^h_j W_O^h || of one unpadded text, float64."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation="eager").eval()
    values, hooks = [], []
    named = dict(model.named_modules())
    for name in [n for n in named if n.endswith(VALUE)]:  # in layer order
        hooks.append(named[name].register_forward_hook(lambda module, args, out: values.append(out[0].double())))
    weights = [named[n].weight.detach().double() for n in named if n.endswith(OUTPUT)]  # (D, H*d) each
    encoding = tokenizer(text, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        attentions = model(**encoding, output_attentions=True).attentions  # L x (1, H, n, n)
    for hook in hooks:
        hook.remove()
    assert len(values) == len(weights) == len(attentions) > 0
    layers = []
    for attention, value, weight in zip(attentions, values, weights):
        probs = attention[0].double()  # (H, n, n)
        heads, n, _ = probs.shape
        size = value.shape[-1] // heads
        vectors = torch.zeros(n, n, weight.shape[0], dtype=torch.float64)  # what row i receives from each j
        for h in range(heads):
            transformed = value[:, h * size : (h + 1) * size] @ weight[:, h * size : (h + 1) * size].T  # (n, D)
            vectors += probs[h][:, :, None] * transformed[None, :, :]
        layers.append(vectors.norm(dim=-1).numpy())
    return np.array(layers)


def hand_norms(folder: str, text: str) -> np.ndarray:
    """(L, n) [CLS]-row shares of the norms."""
    rows = hand_norm_matrices(folder, text)[:, 0, :]
    return rows / rows.sum(axis=1, keepdims=True)


def hand_norm_rollout(folder: str, text: str, residual: str = "half", start_layer: int = 1) -> np.ndarray:
    """(L, n) [CLS] rows of full-matrix products R_l = A_l R_(l-1), A = 0.5 N~ + 0.5 I (or N~),
    N~ the norms as row shares; NaN below start_layer."""
    norms = hand_norm_matrices(folder, text)
    out = np.full(norms.shape[:2], np.nan)
    rolled = np.eye(norms.shape[1])
    for layer in range(start_layer - 1, len(norms)):
        shares = norms[layer] / norms[layer].sum(axis=1, keepdims=True)
        A = shares if residual == "none" else 0.5 * shares + 0.5 * np.eye(len(shares))
        rolled = A @ rolled
        out[layer] = rolled[0]
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_norm_scores_match_the_hand_computation_inside_a_padded_batch(family, scorer_factory, tiny_model_factory):
    scorer = scorer_factory(family, methods=("raw", "norm"))
    table = scorer({"doc_id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0]})
    rows = {row["doc_id"]: row for row in table.to_pylist()}
    assert all(row["error"] is None for row in rows.values())
    for i, text in enumerate(TEXTS):
        expected = hand_norms(tiny_model_factory(family), text)
        got = rows_to_scores(rows[f"d{i}"], "norm")
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-5)
    # not raw attention under another name: the value norms reweight the columns
    longest = rows["d2"]
    assert np.abs(rows_to_scores(longest, "norm") - rows_to_scores(longest, "raw")).max() > 1e-3


@pytest.mark.parametrize(
    "family,options",
    [("bert", {}), ("distilbert", {}), ("roberta", {}), ("bert", {"residual": "none", "start_layer": 2})],
)
def test_norm_rollout_matches_a_full_matrix_rollout_of_the_hand_norms(family, options, scorer_factory):
    folder = scorer_factory(family).config.run.model
    scorer = scorer_factory(family, methods=("norm_rollout",), **options)
    table = scorer({"doc_id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0]})
    rows = {row["doc_id"]: row for row in table.to_pylist()}
    for i, text in enumerate(TEXTS):
        expected = hand_norm_rollout(folder, text, **options)
        np.testing.assert_allclose(rows_to_scores(rows[f"d{i}"], "norm_rollout"), expected, atol=1e-5)
        defined = expected[~np.isnan(expected).any(axis=1)]
        np.testing.assert_allclose(defined.sum(axis=1), 1.0, atol=1e-9)  # rows of row-stochastic products


@pytest.mark.parametrize("family", FAMILIES)
def test_norm_capture_is_the_same_alone_batched_and_per_document(family, scorer_factory):
    scorer = scorer_factory(family)
    encoding = scorer.tokenizer(TEXTS, truncation=True, max_length=32, padding=True, return_tensors="pt")
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    _, _, loop = capture.forward_with_attention(scorer.model, dict(encoding), batched=False, norms=True)
    _, _, batched = capture.forward_with_attention(scorer.model, dict(encoding), batched=True, norms=True)
    np.testing.assert_allclose(batched.numpy(), loop.numpy(), rtol=1e-4, atol=1e-5)
    for b, n in enumerate(lengths):
        for norms in (loop, batched):  # padding is inert: its rows and columns stay exactly 0
            assert float(norms[b, :, n:, :].abs().sum()) == 0 and float(norms[b, :, :, n:].abs().sum()) == 0
            assert float(norms[b, :, :n, :n].min()) >= 0 and float(norms[b, :, 0, :n].sum()) > 0
        alone = scorer.tokenizer([TEXTS[b]], truncation=True, max_length=32, return_tensors="pt")
        _, _, single = capture.forward_with_attention(scorer.model, dict(alone), batched=True, norms=True)
        np.testing.assert_allclose(batched[b, :, :n, :n].numpy(), single[0].numpy(), rtol=1e-4, atol=1e-5)


def test_norm_is_accepted_by_the_run_config_and_refused_on_an_eager_model(tiny_model_factory):
    assert RunConfig(model="m", methods=("raw", "norm")).methods == ("raw", "norm")
    with pytest.raises(ConfigError, match="known methods: .*norm"):
        RunConfig(model="m", methods=("raw", "norms"))
    eager = load_model(tiny_model_factory("bert"), attn_implementation="eager")
    encoding = eager.tokenizer(["good"], return_tensors="pt")
    with pytest.raises(RuntimeError, match="xai_capture"):
        capture.forward_with_attention(eager.model, dict(encoding), norms=True)


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_run_with_methods_raw_norm_stores_the_hand_computed_norms(tmp_path, tiny_distilbert_dir):
    ray = pytest.importorskip("ray")
    import pandas as pd

    from xai_ray import cli
    from xai_ray.query.connection import open_store

    pd.DataFrame({"id": [f"t{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0]}).to_parquet(
        tmp_path / "corpus.parquet"
    )
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        status = cli.main(
            ["run", "--data", str(tmp_path / "corpus.parquet"), "--model", tiny_distilbert_dir]
            + ["--max-length", "32", "--actors", "1", "--store", str(tmp_path / "store"), "--run-id", "norm"]
            + ["--set", "methods=raw,norm", "--set", "batch_size=3"]
        )
    finally:
        ray.shutdown()
    assert status == 0
    con = open_store(tmp_path / "store")
    assert dict(con.execute("select method, count(distinct doc_id) from tokens group by method").fetchall()) == {
        "raw": 4,
        "norm": 4,
    }
    words = con.execute("select doc_id, layer, sum(score) from words where method = 'norm' group by all").fetchall()
    np.testing.assert_allclose([total for _, _, total in words], 1.0, atol=1e-5)
    stored = con.execute(
        "select layer, position, score from tokens where method = 'norm' and doc_id = 't2' order by layer, position"
    ).fetchall()
    expected = hand_norms(tiny_distilbert_dir, TEXTS[2])
    got = np.zeros_like(expected)
    for layer, position, value in stored:
        got[layer - 1, position] = value
    assert len(stored) == expected.size
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_long_review_in_windows_gets_norm_shares_for_every_word(tiny_bert_dir):
    from xai_ray.scoring.actor import Scorer

    config = {"model": tiny_bert_dir, "max_length": 24, "methods": ["norm", "norm_rollout"], "long_text": "window"}
    scorer = Scorer(config)
    text = " ".join(["the acting was good but the plot was boring and long"] * 12)
    (row,) = scorer({"doc_id": ["long"], "text": [text], "label": [1]}).to_pylist()
    assert row["error"] is None and not row["truncated"] and row["n_tokens"] > 24
    n_words = len(row["words"])
    assert n_words == len(text.split())
    for method in ("norm", "norm_rollout"):
        shares = np.asarray(row[f"word_scores_{method}"]).reshape(row["n_layers"], n_words)
        np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-5)
        assert (shares > 0).all()  # every word reached from its window


def test_a_model_without_the_modules_norm_reads_is_refused_before_anything_starts(
    tiny_model_dir, tiny_bert_dir, tmp_path
):
    """ALBERT's shared layer exposes no output projection the capture knows: every review became an
    errors row in the actors. The structure is now read off the model built on the meta device."""
    import shutil

    from transformers import AlbertConfig, AlbertForSequenceClassification

    from xai_ray.methods import methods_need
    from xai_ray.model.files import ModelError
    from xai_ray.model.structure import check_structure

    needs = methods_need(["raw", "norm", "norm_rollout", "globenc"])
    check_structure(tiny_model_dir, needs)  # BERT, DistilBERT, RoBERTa: what the capture reads is there

    folder = tmp_path / "albert"
    config = AlbertConfig(
        vocab_size=200, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, num_labels=2,
    )  # fmt: skip
    AlbertForSequenceClassification(config).save_pretrained(folder)
    for name in Path(tiny_bert_dir).iterdir():
        if name.name != "config.json" and not name.name.endswith(".safetensors"):
            shutil.copy(name, folder / name.name)
    check_structure(str(folder), methods_need(["raw", "rollout"]))  # nothing norm-based asked: no check
    with pytest.raises(ModelError, match="albert.*norm method needs each attention layer's output projection"):
        check_structure(str(folder), methods_need(["raw", "norm"]))
    with pytest.raises(ModelError, match="globenc method needs"):
        check_structure(str(folder), methods_need(["globenc"]))
