"""lrp (conservative relevance propagation, Ali et al. 2022) against computations written here:
conservation to the logit on models with zero biases, a hand-written float64 forward of a
one-layer BERT with the same terms held constant, batch against alone with inert padding, and a
Ray run that stores it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import FAMILIES, build_tiny_model, build_wordpiece_tokenizer

from xai_ray.methods import get_method
from xai_ray.model.loading import load_model
from xai_ray.model.relevance import relevance

TEXTS = [
    "the film was good and the acting was wonderful!",
    "not very good, not very bad.",
    "i loved the story",
    "this movie is boring",
]


def encode(tokenizer, texts):
    tokenizer.padding_side = "right"
    return dict(tokenizer(texts, padding=True, return_tensors="pt"))


@pytest.fixture(scope="module")
def loaded(tiny_model_factory):
    """family -> (the pipeline's model in float64, loaded with the xai_capture attention, tokenizer)."""
    out = {}
    for family in FAMILIES:
        found = load_model(tiny_model_factory(family))
        out[family] = (found.model.double(), found.tokenizer)
    return out


def with_biases(model, scale: float):
    """A copy of ``model`` with every bias (layer norms' beta included) drawn from N(0, scale^2)."""
    import copy

    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, parameter in changed.named_parameters():
            if name.endswith("bias"):
                parameter.copy_(scale * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return changed


# RoBERTa's head applies torch.tanh as a bare function: its identity rule comes from hooks on the
# head's two linear layers (its relevances missed the logit by about the logit's size without them)
@pytest.mark.parametrize("family", FAMILIES)
def test_relevance_adds_up_to_the_logit_without_biases(loaded, family):
    model, tokenizer = loaded[family]
    bare = with_biases(model, 0.0)
    encoding = encode(tokenizer, TEXTS)
    for target in (0, 1):
        scores, explained = relevance(bare, encoding, [target] * len(TEXTS))  # (B, N), (B,)
        with torch.no_grad():
            logits = bare(**encoding).logits[:, target]  # (B,): the plain forward, nothing detached
        np.testing.assert_allclose(explained.numpy(), logits.numpy(), rtol=1e-12)
        assert logits.abs().min() > 1e-3, "a vanishing logit would make the check empty"
        np.testing.assert_allclose(scores.sum(dim=1).numpy(), logits.numpy(), rtol=1e-10, atol=1e-12)
        assert (scores > 0).any() and (scores < 0).any()  # signed: some tokens speak against the class


def test_with_biases_the_relevance_falls_short_of_the_logit(loaded):
    """Biases take a share: the sum differs from the logit (the check above is not automatic)."""
    model, tokenizer = loaded["bert"]
    scores, explained = relevance(with_biases(model, 0.5), encode(tokenizer, TEXTS), [1] * len(TEXTS))
    assert (scores.sum(dim=1) - explained).abs().min() > 1e-3


def gelu(z):
    return 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))


def norm(x, weight, bias, eps):
    """Layer norm over the last axis with sigma held constant."""
    centred = x - x.mean(dim=-1, keepdim=True)
    sigma = torch.sqrt((centred**2).mean(dim=-1, keepdim=True) + eps).detach()
    return centred / sigma * weight + bias


def hand_relevance(model, ids: list[int], target: int) -> tuple[np.ndarray, float]:
    """One document through a one-layer BERT classifier written out in float64, the attention
    probabilities, 1/sigma and the GELU and tanh ratios detached; (n,) relevance and the logit."""
    w = {k: v.detach().double() for k, v in model.state_dict().items()}
    config = model.config
    heads, eps = config.num_attention_heads, config.layer_norm_eps
    size = config.hidden_size // heads
    n = len(ids)
    x = w["bert.embeddings.word_embeddings.weight"][ids] + w["bert.embeddings.position_embeddings.weight"][:n]
    x = (x + w["bert.embeddings.token_type_embeddings.weight"][0]).requires_grad_(True)  # (n, D)
    e = "bert.embeddings.LayerNorm."
    h0 = norm(x, w[e + "weight"], w[e + "bias"], eps)  # (n, D)
    a = "bert.encoder.layer.0.attention."

    def split(name):  # (n, D) -> (H, n, size)
        projected = h0 @ w[a + f"self.{name}.weight"].T + w[a + f"self.{name}.bias"]  # (n, D)
        return projected.reshape(n, heads, size).transpose(0, 1)

    q, k, v = split("query"), split("key"), split("value")
    probabilities = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(size), dim=-1).detach()  # (H, n, n)
    context = (probabilities @ v).transpose(0, 1).reshape(n, heads * size)  # (n, D)
    attended = context @ w[a + "output.dense.weight"].T + w[a + "output.dense.bias"] + h0
    h1 = norm(attended, w[a + "output.LayerNorm.weight"], w[a + "output.LayerNorm.bias"], eps)  # (n, D)
    f = "bert.encoder.layer.0."
    z = h1 @ w[f + "intermediate.dense.weight"].T + w[f + "intermediate.dense.bias"]  # (n, I)
    hidden = z * (gelu(z) / z).detach()
    out = hidden @ w[f + "output.dense.weight"].T + w[f + "output.dense.bias"] + h1
    h2 = norm(out, w[f + "output.LayerNorm.weight"], w[f + "output.LayerNorm.bias"], eps)  # (n, D)
    p = h2[0] @ w["bert.pooler.dense.weight"].T + w["bert.pooler.dense.bias"]  # (D,): [CLS]
    pooled = p * (torch.tanh(p) / p).detach()
    logit = (pooled @ w["classifier.weight"].T + w["classifier.bias"])[target]
    (gradient,) = torch.autograd.grad(logit, x)
    return (x * gradient).sum(dim=-1).detach().numpy(), float(logit.detach())


@pytest.fixture(scope="module")
def one_layer_bert(tmp_path_factory):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(3)
    tokenizer = build_wordpiece_tokenizer()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=12,
        num_hidden_layers=1,
        num_attention_heads=3,
        intermediate_size=20,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.5,
    )
    folder = tmp_path_factory.mktemp("one-layer-bert")
    BertForSequenceClassification(config).eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    found = load_model(str(folder))
    return with_biases(found.model.double(), 0.3), found.tokenizer  # biases too: the hand forward adds them


def test_one_layer_bert_matches_a_hand_written_forward(one_layer_bert):
    model, tokenizer = one_layer_bert
    encoding = encode(tokenizer, TEXTS)
    targets = [1, 0, 0, 1]
    scores, explained = relevance(model, encoding, targets)
    for b, n in enumerate(encoding["attention_mask"].sum(dim=1).tolist()):
        expected, logit = hand_relevance(model, encoding["input_ids"][b, :n].tolist(), targets[b])
        assert np.abs(expected).max() > 1e-3
        assert float(explained[b]) == pytest.approx(logit, rel=1e-12)
        np.testing.assert_allclose(scores[b, :n].numpy(), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_batch_scores_as_each_document_alone_and_padding_is_inert(loaded, family):
    model, tokenizer = loaded[family]
    encoding = encode(tokenizer, TEXTS)
    targets = [1, 0, 1, 0]
    scores, _ = relevance(model, encoding, targets)
    mask = encoding["attention_mask"].bool()
    assert (scores[~mask] == 0).all()
    other = dict(encoding, input_ids=encoding["input_ids"].masked_fill(~mask, 7))  # padding ids changed
    changed, _ = relevance(model, other, targets)
    np.testing.assert_allclose(changed.numpy(), scores.numpy(), rtol=1e-10, atol=1e-13)
    for b, n in enumerate(mask.sum(dim=1).tolist()):
        alone, _ = relevance(model, {k: v[b : b + 1, :n] for k, v in encoding.items()}, targets[b : b + 1])
        np.testing.assert_allclose(scores[b, :n].numpy(), alone[0].numpy(), rtol=1e-10, atol=1e-13)


def test_the_model_is_left_as_it_was(loaded):
    model, tokenizer = loaded["bert"]
    encoding = encode(tokenizer, TEXTS[:2])
    with torch.no_grad():
        before = model(**encoding).logits
    relevance(model, encoding, [0, 1])
    assert all(not m._forward_hooks for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad():
        np.testing.assert_array_equal(model(**encoding).logits.numpy(), before.numpy())


def test_an_eager_model_is_refused_in_one_sentence():
    model, tokenizer = build_tiny_model("bert")
    with pytest.raises(RuntimeError, match=r"^lrp needs the model loaded with the xai_capture attention"):
        relevance(model, encode(tokenizer, TEXTS[:1]), [1])


def test_lrp_is_a_signed_token_attribution_of_the_logit():
    method = get_method("lrp")
    assert method.signed and method.class_specific and method.objective == "logit"
    scores = method.explain({method.needs: np.array([1.0, -3.0, 0.0, 4.0])}, n_layers=2)
    assert np.isnan(scores[0]).all()
    np.testing.assert_allclose(scores[1], [0.125, -0.375, 0.0, 0.5], atol=1e-15)  # over |1|+|-3|+|4| = 8


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_run_stores_lrp(tmp_path, tiny_bert_dir):
    ray = pytest.importorskip("ray")
    from xai_ray import cli
    from xai_ray.query.connection import open_store

    texts = ["the film was good", "a bad plot and boring acting", "i loved the story !", "boring"]
    pd.DataFrame({"id": [f"t{i}" for i in range(4)], "text": texts}).to_parquet(tmp_path / "corpus.parquet")
    argv = ["run", "--data", str(tmp_path / "corpus.parquet"), "--model", tiny_bert_dir, "--actors", "1"]
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        status = cli.main([*argv, "--store", str(tmp_path / "store"), "--run-id", "lrp", "--set", "methods=raw,lrp"])
    finally:
        ray.shutdown()
    assert status == 0
    con = open_store(tmp_path / "store")
    layers = con.execute("select method, list(distinct layer order by layer) from tokens group by method").fetchall()
    assert dict(layers) == {"raw": [1, 2], "lrp": [2]}  # no layers: stored under the last one
    sums = con.execute("select doc_id, sum(abs(score)) from tokens where method = 'lrp' group by doc_id").fetchall()
    assert len(sums) == 4 and all(total == pytest.approx(1.0, abs=1e-5) for _, total in sums)
    assert con.execute("select min(score) from tokens where method = 'lrp'").fetchone()[0] < 0  # signed
    manifest = json.loads((tmp_path / "store" / "runs" / "run_id=lrp" / "manifest.json").read_text())
    assert manifest["target"]["objectives"]["lrp"] == "logit"
    assert manifest["timings"]["actor_seconds"]["lrp pass"] > 0
