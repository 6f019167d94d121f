"""Gradient methods (grad_rollout, attn_x_grad, input_x_gradient, integrated_gradients) against
hand-worked matrices and plain autograd written here (eager attention, output_attentions,
retain_grad), on the tiny BERT, DistilBERT and RoBERTa models of conftest; lrp (tests/test_lrp.py)
joins them through the scorer: alone against in a batch, and in windows."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import FAMILIES, build_tiny_model

from xai_ray.methods import AttentionOptions, get_method
from xai_ray.methods.grad_rollout import gradient_rollout, gradient_weighted_heads
from xai_ray.methods.integrated_gradients import completeness_error, path_points
from xai_ray.model.attention_gradients import attention_gradients
from xai_ray.model.gradients import input_x_gradient, integrated_gradients
from xai_ray.model.loading import load_model

TEXTS = [
    "the film was good and the acting was wonderful!",
    "not very good, not very bad.",
    "i loved the story",
    "this movie is boring",
]

# Two hand-made layers of gradient-weighted attention Abar (non-negative, rows need not sum to 1).
ABAR1 = np.array([[0.2, 0.4, 0.0], [0.0, 0.5, 0.0], [0.1, 0.0, 0.3]])
ABAR2 = np.array([[0.0, 0.5, 0.5], [0.2, 0.0, 0.0], [0.0, 0.0, 0.0]])
# By hand: R_1 = I + Abar1 = [[1.2, 0.4, 0], [0, 1.5, 0], [0.1, 0, 1.3]], R_1[0] = [1.2, 0.4, 0] (sum 1.6)
# R_2[0] = R_1[0] + Abar2[0] @ R_1 = [1.2, 0.4, 0] + 0.5 * [0, 1.5, 0] + 0.5 * [0.1, 0, 1.3]
#        = [1.2, 0.4, 0] + [0.05, 0.75, 0.65] = [1.25, 1.15, 0.65] (sum 3.05)
R1_CLS = [1.2, 0.4, 0.0]
R2_CLS = [1.25, 1.15, 0.65]


def test_gradient_weighted_heads_hand_worked():
    # head 1: A * G = [[1, -1], [0.25, 3]] -> clamp [[1, 0], [0.25, 3]]
    # head 2: A * G = [[-1, 0], [1, 1]]    -> clamp [[0, 0], [1, 1]]; the mean of the two:
    attention = np.array([[[0.5, 0.5], [0.25, 0.75]], [[1.0, 0.0], [0.5, 0.5]]])
    gradient = np.array([[[2.0, -2.0], [1.0, 4.0]], [[-1.0, 3.0], [2.0, 2.0]]])
    expected = [[0.5, 0.0], [0.625, 2.0]]
    np.testing.assert_allclose(gradient_weighted_heads(attention, gradient), expected, atol=1e-15)
    as_torch = gradient_weighted_heads(torch.from_numpy(attention), torch.from_numpy(gradient))
    np.testing.assert_allclose(as_torch.numpy(), expected, atol=1e-15)


def test_grad_rollout_two_layers_hand_worked():
    layers = np.stack([ABAR1, ABAR2])
    np.testing.assert_allclose(gradient_rollout(layers), R2_CLS, atol=1e-12)
    np.testing.assert_allclose(gradient_rollout(layers, per_layer=True), [R1_CLS, R2_CLS], atol=1e-12)
    scores = get_method("grad_rollout").attribute(layers)  # shares of each layer's row
    np.testing.assert_allclose(scores, [[0.75, 0.25, 0.0], [1.25 / 3.05, 1.15 / 3.05, 0.65 / 3.05]], atol=1e-12)


def test_grad_rollout_from_start_layer_restarts_at_identity():
    # start_layer=2: R_2 = I + Abar2, [CLS] row [1, 0.5, 0.5] (sum 2); layer 1 undefined
    scores = get_method("grad_rollout", AttentionOptions(start_layer=2)).attribute(np.stack([ABAR1, ABAR2]))
    assert np.isnan(scores[0]).all()
    np.testing.assert_allclose(scores[1], [0.5, 0.25, 0.25], atol=1e-12)


def test_attn_x_grad_is_each_layers_cls_row_as_shares():
    scores = get_method("attn_x_grad").attribute(np.stack([ABAR1, ABAR2, np.zeros((3, 3))]))
    # Abar1[0] = [0.2, 0.4, 0] -> [1/3, 2/3, 0]; Abar2[0] = [0, 0.5, 0.5]; a row of zeros stays 0
    np.testing.assert_allclose(scores, [[1 / 3, 2 / 3, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]], atol=1e-12)


@pytest.mark.parametrize("name", ["input_x_gradient", "integrated_gradients"])
def test_token_attributions_sit_at_the_last_layer_as_signed_shares(name):
    method = get_method(name)
    scores = method.explain({method.needs: np.array([0.5, -1.5, 2.0])}, n_layers=3)
    assert scores.shape == (3, 3) and np.isnan(scores[:2]).all()
    np.testing.assert_allclose(scores[2], [0.125, -0.375, 0.5], atol=1e-15)  # divided by |0.5|+|-1.5|+|2| = 4


# --------------------------------------------------------------------------- plain autograd references


def plain_attention_gradients(model, encoding, target: int) -> list[np.ndarray]:
    """One document, no padding: eager attention, output_attentions, retain_grad, backward of the
    target logit; per layer mean over heads of clamp(grad * A, 0)."""
    model.zero_grad()
    outputs = model(**encoding, output_attentions=True)
    for attention in outputs.attentions:
        attention.retain_grad()
    outputs.logits[0, target].backward()
    return [(a.grad[0] * a[0]).clamp(min=0).mean(dim=0).detach().double().numpy() for a in outputs.attentions]


def plain_grad_rollout(weighted: list[np.ndarray]) -> np.ndarray:
    """R = I; R <- R + Abar_l @ R with full matrices; every layer's [CLS] row over its sum."""
    relevance = np.eye(weighted[0].shape[0])
    rows = []
    for layer in weighted:
        relevance = relevance + layer @ relevance
        rows.append(relevance[0] / relevance[0].sum())
    return np.array(rows)


@pytest.fixture(scope="module")
def models(tiny_model_factory):
    """family -> (eager reference model in float64, the pipeline's model loaded with the xai_capture
    attention, tokenizer). The references run in float64, so the float32 passes are compared with
    the exact values: they agree to about 1e-5 relative (float32 rounding through 2-3 layers)."""
    out = {}
    for family in FAMILIES:
        eager, tokenizer = build_tiny_model(family)
        loaded = load_model(tiny_model_factory(family))
        out[family] = (eager.double(), loaded.model, loaded.tokenizer)
    return out


def encode(tokenizer, texts):
    tokenizer.padding_side = "right"
    return dict(tokenizer(texts, padding=True, return_tensors="pt"))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("which", ["capture", "eager"])
def test_attention_gradients_match_plain_autograd(models, family, which):
    eager, captured, tokenizer = models[family]
    model = captured if which == "capture" else copy.deepcopy(eager).float()
    encoding = encode(tokenizer, TEXTS)
    targets = [0, 1, 1, 0]
    logits, weighted = attention_gradients(model, encoding, targets)  # (B, L, N, N)
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    for b, n in enumerate(lengths):
        alone = {k: v[b : b + 1, :n] for k, v in encoding.items()}
        reference = plain_attention_gradients(eager, alone, targets[b])  # L x (n, n)
        got = weighted[b, :, :n, :n].double().numpy()
        scale = max(np.abs(r).max() for r in reference)
        assert scale > 0, "the reference gradients vanish: the test would prove nothing"
        np.testing.assert_allclose(got, np.stack(reference), atol=3e-5 * scale)
        assert weighted[b, :, n:, :].abs().sum() == 0 and weighted[b, :, :, n:].abs().sum() == 0  # padding
        np.testing.assert_allclose(get_method("grad_rollout").attribute(got), plain_grad_rollout(reference), atol=5e-5)
        expected_rows = np.stack([r[0] / r[0].sum() if r[0].sum() > 0 else r[0] for r in reference])
        # The gradients above agree to 3e-5 x scale; dividing the [CLS] row by its sum carries that
        # error over as 3e-5 x scale / |row sum| (float32 rounding differs across CPUs and kernels).
        carried = max(3e-5 * scale / max(abs(r[0].sum()), 1e-12) for r in reference)
        np.testing.assert_allclose(get_method("attn_x_grad").attribute(got), expected_rows, atol=max(5e-5, carried))
        with torch.no_grad():
            np.testing.assert_allclose(logits[b].numpy(), eager(**alone).logits[0].numpy(), rtol=2e-5, atol=1e-5)


def test_attention_gradients_leave_the_model_as_it_was(models):
    _, model, tokenizer = models["bert"]
    before = [p.requires_grad for p in model.parameters()]
    attention_gradients(model, encode(tokenizer, TEXTS[:2]), [0, 1])
    assert [p.requires_grad for p in model.parameters()] == before
    assert all(p.grad is None for p in model.parameters())


def plain_input_x_gradient(model, encoding, target: int) -> np.ndarray:
    model.zero_grad()
    embeddings = model.get_input_embeddings()(encoding["input_ids"]).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeddings, attention_mask=encoding["attention_mask"]).logits
    torch.log_softmax(logits, dim=-1)[0, target].backward()
    return (embeddings * embeddings.grad).sum(dim=-1)[0].detach().double().numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_input_x_gradient_of_a_chosen_class_matches_plain_autograd(models, family):
    eager, model, tokenizer = models[family]
    encoding = encode(tokenizer, TEXTS)
    targets = [1, 0, 1, 1]
    scores, _ = input_x_gradient(model, encoding["input_ids"], encoding["attention_mask"], targets)
    for b, n in enumerate(encoding["attention_mask"].sum(dim=1).tolist()):
        alone = {k: v[b : b + 1, :n] for k, v in encoding.items()}
        reference = plain_input_x_gradient(eager, alone, targets[b])  # float64
        np.testing.assert_allclose(scores[b, :n], reference, atol=1e-5 * np.abs(reference).max(), rtol=1e-4)
        assert not scores[b, n:].any()


def plain_integrated_gradients(model, encoding, target: int, n_steps: int) -> np.ndarray:
    """One point at a time, Gauss-Legendre nodes from numpy mapped onto [0, 1], zero baseline."""
    embeddings = model.get_input_embeddings()(encoding["input_ids"]).detach()
    total = torch.zeros_like(embeddings)
    nodes, weights = np.polynomial.legendre.leggauss(n_steps)
    for node, weight in zip(nodes, weights):
        point = (float(node + 1) / 2 * embeddings).requires_grad_(True)
        logits = model(inputs_embeds=point, attention_mask=encoding["attention_mask"]).logits
        torch.log_softmax(logits, dim=-1)[0, target].backward()
        total += point.grad * float(weight) / 2
    return (embeddings * total).sum(dim=-1)[0].double().numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_integrated_gradients_match_a_plain_loop(models, family):
    eager, model, tokenizer = models[family]
    encoding = encode(tokenizer, TEXTS[:3])
    targets = [0, 1, 0]
    found, _, _ = integrated_gradients(
        model, encoding["input_ids"], encoding["attention_mask"], targets, n_steps=5, rows_per_pass=4
    )
    for b, n in enumerate(encoding["attention_mask"].sum(dim=1).tolist()):
        alone = {k: v[b : b + 1, :n] for k, v in encoding.items()}
        reference = plain_integrated_gradients(eager, alone, targets[b], 5)  # float64
        np.testing.assert_allclose(found[b, :n], reference, atol=1e-5 * np.abs(reference).max(), rtol=1e-4)


@pytest.mark.parametrize("rule", ["gausslegendre", "midpoint"])
@pytest.mark.parametrize("family", FAMILIES)
def test_integrated_gradients_completeness_tightens_with_steps(models, family, rule):
    """Completeness: sum of attributions = f(x) - f(baseline). The tolerance: with 256 points,
    within 1% (midpoint) or 2.5% (Gauss-Legendre) of |f(x) - f(baseline)| plus 1e-3 (these tiny
    models' sharp attention makes f far less smooth along the path than a trained model's, and
    Gauss-Legendre's nodes crowd the ends of the path, away from a sharp turn in its middle), and
    the total error over the documents falls at every step count."""
    _, model, tokenizer = models[family]
    encoding = encode(tokenizer, TEXTS)
    targets = [0, 1, 1, 0]
    errors = {}
    for steps in (2, 8, 64, 256):
        found, f_input, f_baseline = integrated_gradients(
            model, encoding["input_ids"], encoding["attention_mask"], targets, steps, rows_per_pass=256, rule=rule
        )
        errors[steps] = np.array([completeness_error(found[b], f_input[b], f_baseline[b]) for b in range(len(TEXTS))])
    gap = np.abs(f_input - f_baseline)
    assert gap.max() > 0.1, "f(x) = f(baseline): completeness would hold trivially"
    assert (errors[256] <= {"midpoint": 0.01, "gausslegendre": 0.025}[rule] * gap + 1e-3).all(), (errors, gap)
    totals = [errors[steps].sum() for steps in (2, 8, 64, 256)]
    assert totals == sorted(totals, reverse=True) and totals[-1] < totals[0] / 100, totals


@pytest.mark.parametrize("family", FAMILIES)
def test_a_refined_path_meets_its_tolerance_and_nears_many_nodes(models, family):
    """With a tolerance, an interval of the path whose attributions miss f(b) - f(a) by more than
    tolerance x its length is split, the worst first, until a document's errors add up to at most
    the tolerance or its splits run out. 3 nodes over the whole path miss by 0.03 to 12 on these
    sharp tiny models; refined, no document misses by more than before, the misses fall 50-fold,
    and on BERT and RoBERTa every document is within the tolerance (DistilBERT's path is sharp
    enough that 256 plain nodes still miss by 0.02). The refined attributions near the plain
    loop's at 64 nodes (float64, one point at a time)."""
    eager, model, tokenizer = models[family]
    encoding = encode(tokenizer, TEXTS)
    ids, mask, targets = encoding["input_ids"], encoding["attention_mask"], [0, 1, 1, 0]

    def errors(found, f_input, f_baseline):
        return np.array([completeness_error(found[b], f_input[b], f_baseline[b]) for b in range(len(TEXTS))])

    coarse = integrated_gradients(model, ids, mask, targets, 3)
    refined = integrated_gradients(model, ids, mask, targets, 3, rows_per_pass=7, tolerance=0.01, max_splits=16)
    assert errors(*coarse).sum() > 1.0, errors(*coarse)  # else refining proves nothing
    assert (errors(*refined) <= errors(*coarse) + 1e-6).all()
    assert errors(*refined).sum() < errors(*coarse).sum() / 50, (errors(*refined), errors(*coarse))
    np.testing.assert_allclose(refined[1], coarse[1], rtol=1e-5)  # f(input), f(baseline): other batches only
    np.testing.assert_allclose(refined[2], coarse[2], rtol=1e-5)
    if family == "distilbert":
        return
    assert (errors(*refined) <= 0.01).all(), errors(*refined)
    for b, n in enumerate(mask.sum(dim=1).tolist()):
        alone = {k: v[b : b + 1, :n] for k, v in encoding.items()}
        reference = plain_integrated_gradients(eager, alone, targets[b], 64)  # float64
        coarse_gap = np.abs(coarse[0][b, :n] - reference).max()
        assert np.abs(refined[0][b, :n] - reference).max() <= max(coarse_gap, 0.02 * np.abs(reference).max())
        # the tolerance bounds the sum over tokens; a token's own error may be larger, in part cancelled
        np.testing.assert_allclose(refined[0][b, :n], reference, atol=0.05 * np.abs(reference).max())
        assert not refined[0][b, n:].any()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_refined_path_is_the_plain_one_where_nothing_needs_refining(models, family):
    """A tolerance no interval exceeds splits nothing: the same nodes, the same attributions."""
    _, model, tokenizer = models[family]
    encoding = encode(tokenizer, TEXTS)
    ids, mask, targets = encoding["input_ids"], encoding["attention_mask"], [1, 0, 1, 0]
    plain = integrated_gradients(model, ids, mask, targets, 6)
    loose = integrated_gradients(model, ids, mask, targets, 6, tolerance=1e9)
    np.testing.assert_allclose(loose[0], plain[0], rtol=1e-6, atol=1e-7)


def test_path_points_are_gauss_legendre_by_default():
    alphas, weights = path_points(2)  # nodes 1/2 -+ 1/(2 sqrt 3), weights 1/2: exact to degree 3
    np.testing.assert_allclose(alphas, [0.5 - 0.5 / np.sqrt(3), 0.5 + 0.5 / np.sqrt(3)])
    np.testing.assert_allclose(weights, [0.5, 0.5])
    alphas, weights = path_points(3)
    assert np.sum(weights * alphas**5) == pytest.approx(1 / 6)  # integral of a^5 on [0, 1], exactly
    alphas, weights = path_points(4, "midpoint")
    np.testing.assert_allclose(alphas, [0.125, 0.375, 0.625, 0.875])
    np.testing.assert_allclose(weights, [0.25] * 4)
    assert abs(np.sum(weights * alphas**5) - 1 / 6) > 1e-3  # the midpoint rule is not exact there
    with pytest.raises(ValueError, match="at least 1 step"):
        path_points(0)
    with pytest.raises(ValueError, match="one of gausslegendre, midpoint"):
        path_points(3, "trapezoid")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_document_scores_the_same_alone_and_in_a_batch(models, family):
    """Up to float32 rounding (padding changes the order of sums in the layers around attention)."""
    _, model, tokenizer = models[family]
    batch = encode(tokenizer, TEXTS)
    targets = [1, 0, 1, 0]
    _, weighted = attention_gradients(model, batch, targets)
    ixg, _ = input_x_gradient(model, batch["input_ids"], batch["attention_mask"], targets)
    ig, _, _ = integrated_gradients(model, batch["input_ids"], batch["attention_mask"], targets, 4, rows_per_pass=5)
    for b in range(len(TEXTS)):
        alone = encode(tokenizer, TEXTS[b : b + 1])
        n = alone["input_ids"].shape[1]
        _, weighted_alone = attention_gradients(model, alone, targets[b : b + 1])
        np.testing.assert_allclose(weighted[b, :, :n, :n].numpy(), weighted_alone[0].numpy(), rtol=1e-4, atol=1e-6)
        ixg_alone, _ = input_x_gradient(model, alone["input_ids"], alone["attention_mask"], targets[b : b + 1])
        np.testing.assert_allclose(ixg[b, :n], ixg_alone[0], rtol=1e-4, atol=1e-5)
        ig_alone, _, _ = integrated_gradients(model, alone["input_ids"], alone["attention_mask"], targets[b : b + 1], 4)
        np.testing.assert_allclose(ig[b, :n], ig_alone[0], rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- through the scorer

GRADIENT_METHODS = ("grad_rollout", "attn_x_grad", "input_x_gradient", "integrated_gradients", "lrp")


def scored(scorer, texts, labels=None) -> dict:
    table = scorer(
        {"doc_id": [str(i) for i in range(len(texts))], "text": texts, "label": labels or [None] * len(texts)}
    )
    return {row["doc_id"]: row for row in table.to_pylist()}


@pytest.mark.parametrize("family", FAMILIES)
def test_scorer_rows_are_the_same_alone_and_in_a_batch(scorer_factory, family):
    scorer = scorer_factory(family, methods=GRADIENT_METHODS, ig_steps=4)
    together = scored(scorer, TEXTS)
    for i, text in enumerate(TEXTS):
        alone = scored(scorer, [text])["0"]
        for method in GRADIENT_METHODS:
            np.testing.assert_allclose(
                np.asarray(alone[f"scores_{method}"]), together[str(i)][f"scores_{method}"], rtol=1e-4, atol=1e-6
            )
        assert alone["target"] == together[str(i)]["target"] == alone["pred"]
        words = np.asarray(alone["word_scores_input_x_gradient"], dtype=np.float64).reshape(alone["n_layers"], -1)
        assert np.isnan(words[:-1]).all() and np.abs(words[-1]).sum() == pytest.approx(1.0, abs=1e-5)


def test_a_review_that_fits_one_window_scores_as_without_windows(scorer_factory):
    head = scored(scorer_factory("bert", methods=GRADIENT_METHODS, ig_steps=4, long_text="head"), TEXTS)
    window = scored(scorer_factory("bert", methods=GRADIENT_METHODS, ig_steps=4, long_text="window"), TEXTS)
    for doc_id, row in head.items():
        for method in GRADIENT_METHODS:
            np.testing.assert_allclose(window[doc_id][f"scores_{method}"], row[f"scores_{method}"], atol=1e-6)
        assert window[doc_id]["ig_completeness_error"] == pytest.approx(row["ig_completeness_error"], abs=1e-6)


def test_a_long_review_in_windows_gets_every_gradient_method(scorer_factory):
    scorer = scorer_factory("bert", methods=GRADIENT_METHODS, ig_steps=4, long_text="window", max_length=12)
    row = scored(scorer, [" ".join(TEXTS * 2)], [1])["0"]
    assert row["error"] is None and row["n_tokens"] > 12 and row["target"] == row["pred"]
    n_layers, n = row["n_layers"], row["n_tokens"]
    for method in GRADIENT_METHODS:
        scores = np.asarray(row[f"scores_{method}"], dtype=np.float64).reshape(n_layers, n)
        assert np.isfinite(scores[-1]).all(), method  # every token of the review has a score at the last layer


@pytest.mark.gpu
def test_gradient_passes_on_the_gpu_equal_the_cpu(tiny_model_factory):
    """fp32 passes on CUDA (the scorer's bf16 autocast is switched off inside them) against the CPU."""
    model = tiny_model_factory("roberta")  # a fixed target: bf16 may flip a prediction near the boundary
    config = {"model": model, "max_length": 32, "methods": GRADIENT_METHODS, "ig_steps": 8, "target": 0}
    from xai_ray.scoring.actor import Scorer

    on_cpu = scored(Scorer({**config, "gpus_per_actor": 0}), TEXTS)
    on_gpu = scored(Scorer({**config, "gpus_per_actor": 1}), TEXTS)
    for doc_id, row in on_cpu.items():
        assert on_gpu[doc_id]["error"] is None and on_gpu[doc_id]["target"] == row["target"] == 0
        for method in GRADIENT_METHODS:
            np.testing.assert_allclose(on_gpu[doc_id][f"scores_{method}"], row[f"scores_{method}"], atol=2e-3)
