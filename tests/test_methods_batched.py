"""The methods' batched form (``Method.batch``: (B, L, N, N) in, (B, L, N) out, padding masked)
against independent per-document computations in float64, and the batch's word sums
(``words.merge_batch``) against the per-document ``merge_scores`` and ``normalise``.

Float32 tolerance: a score is a chain of at most L vector-matrix products over n terms in [0, 1]
whose rows sum to 1 (or to 1 + a gradient-sized term), so each product adds at most n * 2^-24 of
rounding relative to 1 (Higham's bound for a sum of n terms), L * n * 2^-24 in all: 1.1e-5 at
L = 4, n = 48. Compared in float64, the same math agrees to rounding (1e-12).
"""

import numpy as np
import pytest
import torch

from xai_ray.methods import AttentionOptions, get_method
from xai_ray.words import merge_batch, merge_scores, normalise

LENGTHS = [11, 48, 1, 30]
N_LAYERS = 4
FLOAT32_BOUND = N_LAYERS * max(LENGTHS) * 2.0**-24


def padded_batch(seed: int, stochastic: bool = True) -> torch.Tensor:
    """(B, L, N, N) float64 right-padded matrices: real rows sum to 1 (``stochastic``) or hold
    non-negative gradient-sized values; padding rows and columns are 0."""
    rng = np.random.default_rng(seed)
    n = max(LENGTHS)
    out = np.zeros((len(LENGTHS), N_LAYERS, n, n))
    for b, m in enumerate(LENGTHS):
        x = rng.random((N_LAYERS, m, m)) + 0.05
        out[b, :, :m, :m] = x / x.sum(-1, keepdims=True) if stochastic else 0.1 * x
    return torch.from_numpy(out)


def reference(name: str, doc: np.ndarray, options: AttentionOptions) -> np.ndarray:
    """One document's (L, n) scores by full matrix products (independent of the [CLS]-row chain)."""
    n_layers, n, _ = doc.shape
    start = options.start_layer - 1
    out = np.full((n_layers, n), np.nan)
    if name == "raw":
        return doc[:, 0, :].copy()
    if name == "attn_x_grad":
        rows = doc[:, 0, :]
        return rows / rows.sum(-1, keepdims=True)
    rolled = np.eye(n)
    for layer in range(start, n_layers):
        if name == "rollout":
            mixed = 0.5 * doc[layer] + 0.5 * np.eye(n) if options.residual == "half" else doc[layer]
        else:  # grad_rollout: R_l = (I + Abar_l) R_(l-1)
            mixed = np.eye(n) + doc[layer]
        rolled = mixed @ rolled
        out[layer] = rolled[0] if name == "rollout" else rolled[0] / rolled[0].sum()
    return out


CASES = [
    ("raw", AttentionOptions()),
    ("rollout", AttentionOptions()),
    ("rollout", AttentionOptions(residual="none", start_layer=2)),
    ("grad_rollout", AttentionOptions()),
    ("grad_rollout", AttentionOptions(start_layer=3)),
    ("attn_x_grad", AttentionOptions()),
]


@pytest.mark.parametrize("name,options", CASES)
def test_batched_methods_equal_per_document_full_products(name, options):
    matrices = padded_batch(1, stochastic=name in ("raw", "rollout"))
    method = get_method(name, options)
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, FLOAT32_BOUND)):
        got = method.batch(matrices.to(dtype), torch.tensor(LENGTHS)).double().numpy()  # (B, L, N)
        assert got.shape == (len(LENGTHS), N_LAYERS, max(LENGTHS))
        for b, n in enumerate(LENGTHS):
            expected = reference(name, matrices[b, :, :n, :n].numpy(), options)
            np.testing.assert_allclose(got[b, :, :n], expected, atol=tolerance, rtol=0)
            defined = ~np.isnan(expected[:, 0])
            assert (got[b][defined][:, n:] == 0).all(), "padding columns must be exactly 0"
            assert np.isnan(got[b][~defined]).all(), "layers below start_layer must be NaN"


@pytest.mark.parametrize("name,options", CASES)
def test_a_document_scores_the_same_alone_and_in_a_padded_batch(name, options):
    matrices = padded_batch(2, stochastic=name in ("raw", "rollout")).float()
    method = get_method(name, options)
    together = method.batch(matrices, torch.tensor(LENGTHS))
    for b, n in enumerate(LENGTHS):
        alone = method.batch(matrices[b : b + 1, :, :n, :n].contiguous(), torch.tensor([n]))[0]
        np.testing.assert_allclose(together[b, :, :n].numpy(), alone.numpy(), atol=FLOAT32_BOUND, rtol=0)


def test_attribute_is_the_batch_of_one_in_float64():
    doc = padded_batch(3)[1].numpy()  # (L, 48, 48), no padding
    got = get_method("rollout").attribute(doc)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference("rollout", doc, AttentionOptions()), atol=1e-12)


def test_token_attributions_in_a_batch_are_signed_shares_at_the_last_layer():
    values = torch.tensor([[0.5, -1.5, 2.0, 0.0], [1.0, 3.0, 0.0, 0.0]], dtype=torch.float64)  # (B, N)
    method = get_method("input_x_gradient")
    got = method.scores({method.needs: values}, torch.tensor([3, 2]), 3).numpy()  # (B, L, N)
    assert np.isnan(got[:, :2]).all()
    np.testing.assert_allclose(got[0, 2], [0.125, -0.375, 0.5, 0.0], atol=1e-15)
    np.testing.assert_allclose(got[1, 2], [0.25, 0.75, 0.0, 0.0], atol=1e-15)


def test_flow_is_the_host_stage_and_matches_its_per_document_form():
    method = get_method("flow")
    assert method.host_stage and not any(get_method(m).host_stage for m in ("raw", "rollout", "grad_rollout"))
    matrices = padded_batch(4)[:, :2, :12, :12].contiguous()  # small: flow is exact max-flow
    lengths = [min(n, 12) for n in LENGTHS]
    for b, n in enumerate(lengths):
        matrices[b, :, n:, :] = 0
        matrices[b, :, :, n:] = 0
        matrices[b, :, :n, :n] /= matrices[b, :, :n, :n].sum(-1, keepdim=True)  # rows sum to 1 again
    got = method.batch(matrices, torch.tensor(lengths)).numpy()
    for b, n in enumerate(lengths):
        doc = matrices[b, :, :n, :n].numpy()
        np.testing.assert_allclose(got[b, :, :n], method.attribute(doc), atol=1e-12)
        assert (got[b, :, n:] == 0).all()


@pytest.mark.parametrize("signed", [False, True])
def test_merge_batch_equals_the_per_document_merge_and_normalise(signed):
    rng = np.random.default_rng(5)
    indexes = [np.array([-1, 0, 0, 1, 2, 2, 2, -1]), np.array([-1, 0, 1, -1]), np.array([-1, 1, 0, 0, -1])]
    n_words = [3, 2, 2]
    width = max(len(x) for x in indexes)
    scores = rng.normal(size=(3, 2, width)) if signed else rng.random((3, 2, width))
    scores[2, 0] = np.nan  # a layer the method leaves undefined
    padded_index = np.full((3, width), -1)
    for d, index in enumerate(indexes):
        padded_index[d, : len(index)] = index
        scores[d, :, len(index) :] = 0.0
    sums, spread = merge_batch(torch.from_numpy(scores), torch.from_numpy(padded_index), max(n_words), signed)
    for d, (index, count) in enumerate(zip(indexes, n_words)):
        expected = merge_scores(scores[d, :, : len(index)], index, count)  # (L, W)
        np.testing.assert_allclose(sums[d, :, :count].numpy(), expected, atol=1e-15)
        np.testing.assert_allclose(spread[d, :, :count].numpy(), normalise(expected, signed), atol=1e-15)
        assert (sums[d, 1, count:] == 0).all()
    assert np.isnan(spread[2, 0].numpy()).all() and not np.isnan(spread[2, 1].numpy()).any()
