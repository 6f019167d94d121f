"""Explanation methods and head fusion against hand-worked matrices and explicit loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import xai_ray
from xai_ray.methods import AttentionOptions, get_method, mix_residual
from xai_ray.methods.base import as_layers
from xai_ray.methods.rollout import attention_rollout
from xai_ray.model.capture import fuse_heads

# Three hand-made row-stochastic 3x3 layers (rows sum to 1).
A1 = np.array(
    [
        [0.5, 0.25, 0.25],
        [0.0, 1.0, 0.0],
        [0.5, 0.0, 0.5],
    ]
)
A2 = np.array(
    [
        [0.2, 0.8, 0.0],
        [0.5, 0.5, 0.0],
        [0.0, 0.0, 1.0],
    ]
)
A3 = np.array(
    [
        [0.5, 0.0, 0.5],
        [1 / 3, 1 / 3, 1 / 3],
        [0.5, 0.5, 0.0],
    ]
)

# Worked by hand, R_1 = A1, R_l = A_l @ R_(l-1), [CLS] row = row 0:
# R_1[0] = A1[0]                                           = [0.5, 0.25, 0.25]
# R_2[0] = A2[0] @ A1 = 0.2*A1[0] + 0.8*A1[1] + 0.0*A1[2]
#        = [0.1, 0.05, 0.05] + [0, 0.8, 0]                  = [0.1, 0.85, 0.05]
# (A2 @ A1)[2] = A2[2] @ A1 = A1[2]                          = [0.5, 0.0, 0.5]
# R_3[0] = A3[0] @ (A2 @ A1) = 0.5*(A2A1)[0] + 0.5*(A2A1)[2]
#        = [0.05, 0.425, 0.025] + [0.25, 0, 0.25]           = [0.3, 0.425, 0.275]
R1_CLS = [0.5, 0.25, 0.25]
R2_CLS = [0.1, 0.85, 0.05]
R3_CLS = [0.3, 0.425, 0.275]


def loop_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n, k = a.shape
    k2, m = b.shape
    assert k == k2
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            total = 0.0
            for t in range(k):
                total += a[i, t] * b[t, j]
            out[i, j] = total
    return out


def loop_rollout_cls_rows(layers: np.ndarray) -> np.ndarray:
    """Full-matrix rollout with explicit loops: R_1 = A_1, R_l = A_l @ R_(l-1); returns every R_l[0]."""
    rolled = layers[0].copy()
    rows = [rolled[0].copy()]
    for layer in layers[1:]:
        rolled = loop_matmul(layer, rolled)
        rows.append(rolled[0].copy())
    return np.array(rows)


def random_stochastic(rng, shape) -> np.ndarray:
    x = rng.random(shape) + 0.05
    return x / x.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- rollout


def test_rollout_two_layers_hand_worked():
    A = np.stack([A1, A2])
    np.testing.assert_allclose(attention_rollout(A), R2_CLS, atol=1e-12)
    np.testing.assert_allclose(attention_rollout(A, per_layer=True), [R1_CLS, R2_CLS], atol=1e-12)


def test_rollout_three_layers_hand_worked():
    A = np.stack([A1, A2, A3])
    last = attention_rollout(A, per_layer=False)
    assert last.shape == (3,)
    np.testing.assert_allclose(last, R3_CLS, atol=1e-12)
    every = attention_rollout(A, per_layer=True)
    assert every.shape == (3, 3)
    np.testing.assert_allclose(every, [R1_CLS, R2_CLS, R3_CLS], atol=1e-12)


def test_rollout_single_layer_is_its_cls_row():
    np.testing.assert_allclose(attention_rollout(A3[None]), A3[0], atol=1e-15)


def test_rollout_matches_explicit_full_matrix_loops_on_random_layers():
    rng = np.random.default_rng(7)
    A = random_stochastic(rng, (4, 6, 6))
    expected = loop_rollout_cls_rows(A)
    np.testing.assert_allclose(attention_rollout(A, per_layer=True), expected, atol=1e-12)
    np.testing.assert_allclose(attention_rollout(A), expected[-1], atol=1e-12)
    # Rows of products of stochastic matrices stay stochastic.
    np.testing.assert_allclose(expected.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("residual", ["half", "none"])
def test_identity_attention_gives_identity_rollout(residual):
    n_layers, n = 3, 5
    eye = np.stack([np.eye(n)] * n_layers)
    e0 = np.zeros(n)
    e0[0] = 1.0
    np.testing.assert_array_equal(attention_rollout(eye), e0)
    np.testing.assert_array_equal(attention_rollout(eye, per_layer=True), np.tile(e0, (n_layers, 1)))
    scores = get_method("rollout", AttentionOptions(residual=residual)).attribute(eye)
    np.testing.assert_allclose(scores, np.tile(e0, (n_layers, 1)), atol=1e-15)


def test_rollout_numpy_and_torch_inputs_agree():
    rng = np.random.default_rng(3)
    A = random_stochastic(rng, (3, 5, 5))
    from_numpy = attention_rollout(A, per_layer=True)
    from_torch = attention_rollout(torch.from_numpy(A), per_layer=True)
    assert isinstance(from_torch, np.ndarray) and from_torch.dtype == np.float64
    np.testing.assert_allclose(from_torch, from_numpy, atol=1e-15)
    # float32 tensors are accepted too (up to float32 rounding of the input).
    from_f32 = attention_rollout(torch.from_numpy(A).float(), per_layer=True)
    np.testing.assert_allclose(from_f32, from_numpy, atol=1e-6)
    method = get_method("rollout")
    np.testing.assert_allclose(method.attribute(torch.from_numpy(A)), method.attribute(A), atol=1e-15)


def test_as_layers_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\(L, n, n\)"):
        as_layers(np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"\(L, n, n\)"):
        as_layers(np.zeros((2, 3, 4)))


# --------------------------------------------------------------------------- residual mixing


def test_mix_residual_modes_hand_values():
    W = np.array([[0.2, 0.2], [0.0, 0.5]])
    # half: 0.5*W + 0.5*I
    np.testing.assert_allclose(mix_residual(W, "half"), [[0.6, 0.1], [0.0, 0.75]], atol=1e-15)
    np.testing.assert_allclose(mix_residual(W, "none"), W, atol=0)


def test_residual_add_is_refused_because_it_equals_half():
    # Given row-stochastic W (what fusion always yields), (W + I) renormalised, by hand ...
    W = np.array([[0.5, 0.5, 0.0], [0.2, 0.2, 0.6], [0.1, 0.0, 0.9]])
    added = W + np.eye(3)
    added = added / added.sum(axis=1, keepdims=True)
    # ... is the "half" matrix, so "add" is no variant: it is refused with the reason.
    np.testing.assert_allclose(mix_residual(W, "half"), added, atol=1e-15)
    with pytest.raises(ValueError, match="equals residual=half"):
        AttentionOptions(residual="add")


def test_mix_residual_on_stochastic_rows_and_stacks():
    # For rows that sum to 1, W + I renormalised equals 0.5*W + 0.5*I.
    W = np.array([[0.5, 0.5, 0.0], [0.2, 0.2, 0.6], [0.1, 0.0, 0.9]])
    expected = np.array([[0.75, 0.25, 0.0], [0.1, 0.6, 0.3], [0.05, 0.0, 0.95]])
    np.testing.assert_allclose(mix_residual(W, "half"), expected, atol=1e-15)
    stacked = mix_residual(np.stack([W, W]), "half")  # (L, n, n)
    np.testing.assert_allclose(stacked, np.stack([expected, expected]), atol=1e-15)


def test_mix_residual_rejects_unknown_mode():
    with pytest.raises(ValueError, match="residual"):
        mix_residual(np.eye(2), "double")


# --------------------------------------------------------------------------- Method classes


def test_rollout_method_default_mixes_half_residual():
    # M_l = 0.5*A_l + 0.5*I:
    # M1 = [[0.75, 0.125, 0.125], [0, 1, 0], [0.25, 0, 0.75]]
    # M2 = [[0.6, 0.4, 0], [0.25, 0.75, 0], [0, 0, 1]]
    # R_1[0] = M1[0]                                = [0.75, 0.125, 0.125]
    # R_2[0] = 0.6*M1[0] + 0.4*M1[1] + 0*M1[2]
    #        = [0.45, 0.075, 0.075] + [0, 0.4, 0]   = [0.45, 0.475, 0.075]
    scores = get_method("rollout").attribute(np.stack([A1, A2]))
    np.testing.assert_allclose(scores, [[0.75, 0.125, 0.125], [0.45, 0.475, 0.075]], atol=1e-12)


def test_rollout_method_half_residual_from_layer_two():
    # Layers 2 and 3 mixed as 0.5*W + 0.5*I:
    # M2 = [[0.6, 0.4, 0], [0.25, 0.75, 0], [0, 0, 1]]
    # M3 = [[0.75, 0, 0.25], [1/6, 2/3, 1/6], [0.25, 0.25, 0.5]]
    # R_2[0] = M2[0]                                = [0.6, 0.4, 0.0]
    # R_3[0] = 0.75*M2[0] + 0*M2[1] + 0.25*M2[2]
    #        = [0.45, 0.3, 0] + [0, 0, 0.25]        = [0.45, 0.3, 0.25]
    method = get_method("rollout", AttentionOptions(residual="half", start_layer=2))
    scores = method.attribute(np.stack([A1, A2, A3]))
    assert scores.shape == (3, 3)
    assert np.isnan(scores[0]).all()
    np.testing.assert_allclose(scores[1:], [[0.6, 0.4, 0.0], [0.45, 0.3, 0.25]], atol=1e-12)


def test_rollout_method_start_layer_beyond_depth_is_all_nan():
    scores = get_method("rollout", AttentionOptions(start_layer=5)).attribute(np.stack([A1, A2]))
    assert scores.shape == (2, 3) and np.isnan(scores).all()


def test_rollout_method_residual_none_is_plain_rollout():
    scores = get_method("rollout", AttentionOptions(residual="none")).attribute(np.stack([A1, A2, A3]))
    np.testing.assert_allclose(scores, [R1_CLS, R2_CLS, R3_CLS], atol=1e-12)


def test_raw_returns_cls_rows():
    fused = np.stack([A1, A2, A3])
    scores = get_method("raw").attribute(fused)
    np.testing.assert_array_equal(scores, [[0.5, 0.25, 0.25], [0.2, 0.8, 0.0], [0.5, 0.0, 0.5]])
    scores[0, 0] = 99.0  # a copy, not a view into the input
    assert fused[0, 0, 0] == 0.5
    from_torch = get_method("raw").attribute(torch.from_numpy(fused).float())
    np.testing.assert_allclose(from_torch, fused[:, 0, :], atol=1e-7)


def test_raw_ignores_residual_and_start_layer_options():
    fused = np.stack([A1, A2])
    scores = get_method("raw", AttentionOptions(residual="none", start_layer=2)).attribute(fused)
    np.testing.assert_array_equal(scores, fused[:, 0, :])


def test_get_method_unknown_name_lists_known_methods():
    with pytest.raises(ValueError, match="nope") as info:
        get_method("nope")
    message = str(info.value)
    assert "known methods" in message
    assert "raw" in message and "rollout" in message


def test_get_method_passes_options():
    options = AttentionOptions(residual="none", start_layer=3)
    method = get_method("rollout", options)
    assert method.name == "rollout" and method.options is options
    assert get_method("raw").options == AttentionOptions()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"residual": "double"}, "residual"),
        ({"head_fusion": "sum"}, "head_fusion"),
        ({"discard_ratio": 1.0}, "discard_ratio"),
        ({"discard_ratio": -0.1}, "discard_ratio"),
        ({"start_layer": 0}, "start_layer"),
    ],
)
def test_attention_options_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        AttentionOptions(**kwargs)


def test_attention_options_defaults_and_dict():
    options = AttentionOptions(residual="none", head_fusion="max", discard_ratio=0.5, start_layer=2)
    assert options.to_dict() == {"residual": "none", "head_fusion": "max", "discard_ratio": 0.5, "start_layer": 2}
    assert AttentionOptions().to_dict() == {
        "residual": "half",
        "head_fusion": "mean",
        "discard_ratio": 0.0,
        "start_layer": 1,
    }


# --------------------------------------------------------------------------- head fusion


def masked_softmax_attention(seed: int, batch: int, heads: int, n: int, lengths: list[int]) -> torch.Tensor:
    """Random (B, H, n, n) attention like an eager encoder's: padding key columns are exactly 0."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, heads, n, n, generator=gen) * 2
    for b, length in enumerate(lengths):
        logits[b, :, :, length:] = float("-inf")
    return torch.softmax(logits, dim=-1)


def test_fuse_heads_mean_max_min_match_explicit_loops():
    B, H, n = 2, 3, 5
    attn = masked_softmax_attention(0, B, H, n, [n, n])
    mean = fuse_heads(attn, "mean")
    biggest = fuse_heads(attn, "max")
    smallest = fuse_heads(attn, "min")
    assert mean.shape == biggest.shape == smallest.shape == (B, n, n)
    a = attn.double().numpy()
    for b in range(B):
        for i in range(n):
            row_mean = [sum(a[b, h, i, j] for h in range(H)) / H for j in range(n)]
            row_max = [max(a[b, h, i, j] for h in range(H)) for j in range(n)]
            row_min = [min(a[b, h, i, j] for h in range(H)) for j in range(n)]
            total_max, total_min = sum(row_max), sum(row_min)
            for j in range(n):
                assert mean[b, i, j].item() == pytest.approx(row_mean[j], abs=1e-6)
                assert biggest[b, i, j].item() == pytest.approx(row_max[j] / total_max, abs=1e-6)
                assert smallest[b, i, j].item() == pytest.approx(row_min[j] / total_min, abs=1e-6)


def test_fuse_heads_rejects_unknown_fusion():
    with pytest.raises(ValueError, match="fusion"):
        fuse_heads(torch.full((1, 1, 2, 2), 0.5), "sum")


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.5, 0.9])
def test_fused_real_rows_sum_to_one_and_padding_columns_stay_zero(fusion, ratio):
    lengths = [6, 4, 2]
    n = 6
    attn = masked_softmax_attention(1, 3, 4, n, lengths)
    fused = fuse_heads(attn, fusion, ratio, torch.tensor(lengths))
    for b, length in enumerate(lengths):
        real = fused[b, :length, :length]
        np.testing.assert_allclose(real.sum(dim=-1).numpy(), 1.0, atol=1e-5)
        assert torch.all(fused[b, :, length:] == 0), "padding columns must stay zero"
        assert torch.all(real[:, 0] > 0), "column 0 ([CLS]) is never dropped"


def test_discard_hand_worked_row():
    # One head, one row of 5 real tokens, ratio 0.5: floor((5 - 1) * 0.5) = 2 entries dropped
    # among columns 1..4. Values 0.4, 0.1, 0.3, 0.15 -> drop 0.1 (col 2) and 0.15 (col 4).
    # Column 0 holds the smallest weight (0.05) yet is protected.
    # Kept: [0.05, 0.4, 0, 0.3, 0], sum 0.75 -> [1/15, 8/15, 0, 6/15, 0].
    row = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15])
    attn = row.expand(1, 1, 5, 5).clone()
    fused = fuse_heads(attn, "mean", 0.5)
    np.testing.assert_allclose(fused[0, 0].numpy(), [1 / 15, 8 / 15, 0.0, 6 / 15, 0.0], atol=1e-6)


def test_discard_hand_worked_row_with_padding():
    # Same row but the document has 4 real tokens: the last column is padding (0 weight).
    # floor((4 - 1) * 0.5) = 1 drop among columns 1..3 (0.4, 0.1, 0.3) -> column 2.
    # Kept: [0.05, 0.4, 0, 0.3, 0] / 0.75, padding column stays 0 and is not counted as dropped.
    row = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.0])
    attn = row.expand(1, 1, 5, 5).clone()
    fused = fuse_heads(attn, "mean", 0.5, torch.tensor([4]))
    np.testing.assert_allclose(fused[0, 0].numpy(), [1 / 15, 8 / 15, 0.0, 6 / 15, 0.0], atol=1e-6)


@pytest.mark.parametrize("ratio", [0.1, 0.25, 0.5, 0.7, 0.99])
def test_discard_drops_exactly_floor_count_per_head_row(ratio):
    lengths = [7, 5, 3]
    n = 7
    attn = masked_softmax_attention(2, 3, 1, n, lengths)  # one head: the fused matrix is that head
    fused = fuse_heads(attn, "mean", ratio, torch.tensor(lengths))
    for b, length in enumerate(lengths):
        n_drop = math.floor((length - 1) * ratio)
        for i in range(length):
            original = attn[b, 0, i, :length].double().numpy()
            kept = fused[b, i, :length].double().numpy()
            dropped = [j for j in range(length) if kept[j] == 0]
            assert len(dropped) == n_drop
            assert 0 not in dropped
            # The dropped ones are the n_drop smallest among columns 1..length-1.
            smallest = sorted(range(1, length), key=lambda j: original[j])[:n_drop]
            assert sorted(dropped) == sorted(smallest)
            survivors = [j for j in range(length) if j not in dropped]
            total = sum(original[j] for j in survivors)
            for j in survivors:
                assert kept[j] == pytest.approx(original[j] / total, abs=1e-6)


def test_discard_per_head_before_mean_fusion():
    # Two heads, 3 tokens, ratio 0.5: floor(2 * 0.5) = 1 drop per head row among columns 1..2.
    # head 0 row 0: [0.2, 0.5, 0.3] -> drop col 2 -> [0.2, 0.5, 0] / 0.7 = [2/7, 5/7, 0]
    # head 1 row 0: [0.6, 0.1, 0.3] -> drop col 1 -> [0.6, 0, 0.3] / 0.9 = [2/3, 0, 1/3]
    # mean = [(2/7 + 2/3)/2, (5/7)/2, (1/3)/2], which already sums to 1.
    attn = torch.zeros(1, 2, 3, 3)
    attn[0, 0] = torch.tensor([0.2, 0.5, 0.3])
    attn[0, 1] = torch.tensor([0.6, 0.1, 0.3])
    fused = fuse_heads(attn, "mean", 0.5)
    expected = [(2 / 7 + 2 / 3) / 2, (5 / 7) / 2, (1 / 3) / 2]
    np.testing.assert_allclose(fused[0, 0].numpy(), expected, atol=1e-6)


def test_fuse_heads_mean_without_discard_is_plain_average():
    attn = masked_softmax_attention(4, 2, 4, 5, [5, 3])
    fused = fuse_heads(attn, "mean", 0.0, torch.tensor([5, 3]))
    manual = (attn[:, 0] + attn[:, 1] + attn[:, 2] + attn[:, 3]) / 4
    torch.testing.assert_close(fused, manual, atol=1e-7, rtol=0)


def test_build_attention_by_hand():
    # 1 layer, 2 heads, 2 tokens.  head 0 rows: [.6 .4], [.2 .8]; head 1 rows: [.4 .6], [.4 .6]
    per_head = np.array([[[[0.6, 0.4], [0.2, 0.8]], [[0.4, 0.6], [0.4, 0.6]]]])
    mean = xai_ray.build_attention(per_head, residual="none")
    np.testing.assert_allclose(mean[0], [[0.5, 0.5], [0.3, 0.7]])
    half = xai_ray.build_attention(per_head)  # 0.5*W + 0.5*I
    np.testing.assert_allclose(half[0], [[0.75, 0.25], [0.15, 0.85]])
    top = xai_ray.build_attention(per_head, residual="none", head_fusion="max")
    # max per cell: [[.6 .6], [.4 .8]] -> rows renormalised: [[.5 .5], [1/3 2/3]]
    np.testing.assert_allclose(top[0], [[0.5, 0.5], [1 / 3, 2 / 3]])


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.6])
def test_build_attention_matches_the_pipeline_capture(fusion, ratio):
    """The notebook helper (numpy) and the forward-pass fusion (torch) agree."""
    rng = np.random.default_rng(7)
    per_head = rng.dirichlet(np.ones(9), size=(3, 4, 9))  # (L, H, n, n), rows sum to 1
    got = xai_ray.build_attention(per_head, residual="half", head_fusion=fusion, discard_ratio=ratio)
    fused = torch.stack([fuse_heads(torch.tensor(layer[None]), fusion, ratio)[0] for layer in per_head])
    np.testing.assert_allclose(got, mix_residual(fused.double().numpy(), "half"), atol=1e-6)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-9)
