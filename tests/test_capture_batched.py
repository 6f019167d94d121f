"""The batched capture (the GPU's path: padded blocks over the whole batch) against the
per-document path and against eager attention computed in the test."""

import numpy as np
import pytest
import torch

from xai_ray.methods.heads import HeadCollector, position_masks
from xai_ray.model import capture
from xai_ray.model.loading import load_model

TEXTS = [
    "a short one",
    "the acting was superb and the plot kept me guessing until the very end",
    "bad",
    "not the worst film of the year, but close: dull, long and loud",
]


def _encode(scorer):
    return scorer.tokenizer(TEXTS, truncation=True, max_length=32, padding=True, return_tensors="pt")


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
@pytest.mark.parametrize("fusion,discard", [("mean", 0.0), ("max", 0.0), ("min", 0.0), ("mean", 0.3)])
def test_batched_capture_equals_the_per_document_loop(scorer_factory, family, fusion, discard):
    scorer = scorer_factory(family)
    encoding = _encode(scorer)
    loop_logits, loop_fused = capture.forward_with_attention(
        scorer.model, dict(encoding), fusion, discard, batched=False
    )
    batch_logits, batch_fused = capture.forward_with_attention(
        scorer.model, dict(encoding), fusion, discard, batched=True
    )
    np.testing.assert_allclose(batch_logits.numpy(), loop_logits.numpy(), atol=1e-5)
    # Float32 kernels sum in a different order for a padded batch than for one document (and differ
    # across CPUs): a softmax over n <= 32 keys carries ~n * eps32 (4e-6) of rounding. Mean fusion
    # averages it away; max/min fusion and discarding renormalise rows by a sum that can be small,
    # which amplifies it, so those compare at a relative 1e-4 (observed up to 7e-6 absolute).
    renormalised = fusion != "mean" or discard > 0
    tolerance = {"rtol": 1e-4, "atol": 2e-5} if renormalised else {"rtol": 1e-5, "atol": 2e-6}
    np.testing.assert_allclose(batch_fused.numpy(), loop_fused.numpy(), **tolerance)
    lengths = encoding["attention_mask"].sum(dim=1)
    for b, n in enumerate(lengths.tolist()):  # padding rows and columns are zero, real rows sum to 1
        assert float(batch_fused[b, :, n:, :].abs().sum()) == 0 and float(batch_fused[b, :, :, n:].abs().sum()) == 0
        np.testing.assert_allclose(batch_fused[b, :, :n, :n].sum(-1).numpy(), 1.0, atol=1e-5)


def test_batched_capture_equals_eager_mean_attention(tiny_model_factory, scorer_factory):
    """Independent reference: eager attention's per-head probabilities, averaged over heads here."""
    scorer = scorer_factory("bert")
    eager = load_model(tiny_model_factory("bert"), attn_implementation="eager").model
    encoding = _encode(scorer)
    with torch.no_grad():
        reference = eager(**encoding, output_attentions=True)
    _, fused = capture.forward_with_attention(scorer.model, dict(encoding), batched=True)
    for b, n in enumerate(encoding["attention_mask"].sum(dim=1).tolist()):
        for layer, attention in enumerate(reference.attentions):
            expected = attention[b, :, :n, :n].mean(dim=0)  # (n, n)
            np.testing.assert_allclose(fused[b, layer, :n, :n].numpy(), expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("block_bytes", [None, 1])  # one block per layer; one query row per block
def test_batched_capture_gives_the_same_head_statistics(scorer_factory, monkeypatch, block_bytes):
    """Every statistic and every sampled document's head similarity, with padded rows and columns
    in the batch (lengths differ) and, with one-row blocks, the previous/next diagonals crossing
    block edges and the kept rows gathered over several blocks."""
    scorer = scorer_factory("roberta")
    encoding = _encode(scorer)
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    assert len(set(lengths)) > 1  # padding is present
    if block_bytes is not None:
        monkeypatch.setattr(capture, "BATCHED_BLOCK_BYTES", block_bytes)
    got = []
    for batched in (False, True):
        collector = HeadCollector(lengths, position_masks(encoding["input_ids"], scorer.tokenizer), [True] * 4, 6)
        capture.forward_with_attention(scorer.model, dict(encoding), heads=collector, batched=batched)
        similarity = collector.similarity()
        assert sorted(similarity) == [0, 1, 2, 3]
        got.append((collector.statistics().numpy(), [similarity[d][0].numpy() for d in range(4)]))
        assert [similarity[d][1] for d in range(4)] == [min(6, n) for n in lengths]
    np.testing.assert_allclose(got[1][0], got[0][0], atol=2e-5, rtol=1e-5)
    for batched_jsd, loop_jsd in zip(got[1][1], got[0][1]):
        np.testing.assert_allclose(batched_jsd, loop_jsd, atol=2e-5)


def test_batched_head_statistics_make_no_call_per_document(scorer_factory, monkeypatch):
    """On the batched path (a GPU's) the statistics of a block are reduced for the whole batch at
    once: the per-document entry point is never called."""
    scorer = scorer_factory("bert")
    encoding = _encode(scorer)
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    collector = HeadCollector(lengths, position_masks(encoding["input_ids"], scorer.tokenizer), [False] * 4, 6)

    def per_document(*args, **kwargs):
        raise AssertionError("per-document statistics on the batched path")

    monkeypatch.setattr(collector, "block", per_document)
    capture.forward_with_attention(scorer.model, dict(encoding), heads=collector, batched=True)
    statistics = collector.statistics()  # (B, L, H, N_STATS)
    assert statistics.shape[0] == 4 and float(statistics[..., 0].abs().sum()) > 0


def test_small_blocks_cut_the_batch_into_many_row_blocks(scorer_factory, monkeypatch):
    """Blocks of a few query rows give the same result as one block (the block loop is exact)."""
    scorer = scorer_factory("bert")
    encoding = _encode(scorer)
    _, whole = capture.forward_with_attention(scorer.model, dict(encoding), "max", 0.2, batched=True)
    monkeypatch.setattr(capture, "BATCHED_BLOCK_BYTES", 1)  # one query row per block
    _, rowwise = capture.forward_with_attention(scorer.model, dict(encoding), "max", 0.2, batched=True)
    np.testing.assert_allclose(rowwise.numpy(), whole.numpy(), atol=1e-6)


def test_discarding_in_row_blocks_equals_one_block_on_the_per_document_path(scorer_factory, monkeypatch):
    """A long review's rows come in blocks of fewer rows than columns; dropping the lowest weights
    must rank each row's columns all the same (it once read the block's row count as the width)."""
    scorer = scorer_factory("bert")
    encoding = _encode(scorer)
    _, whole = capture.forward_with_attention(scorer.model, dict(encoding), "mean", 0.3, batched=False)
    monkeypatch.setattr(capture, "BLOCK_BYTES", 1)  # one query row per block
    _, rowwise = capture.forward_with_attention(scorer.model, dict(encoding), "mean", 0.3, batched=False)
    np.testing.assert_allclose(rowwise.numpy(), whole.numpy(), atol=1e-6)
