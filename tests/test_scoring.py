"""The Scorer on tiny random BERT, DistilBERT and RoBERTa models, against an eager reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from xai_ray.model.capture import forward_with_attention
from xai_ray.scoring.rows import rows_to_scores

FAMILIES = ["bert", "distilbert", "roberta"]
METHODS = ["raw", "rollout"]

TEXTS = [
    "The acting was unbelievable, playing wonderfully!",
    "good",
    "I loved the film and the story, not very boring.",
    "bad movie",
    "This plot is fine",
]


def score(scorer, texts, labels=None) -> dict:
    """Run the scorer on a batch; rows keyed by doc_id (the scorer may reorder rows)."""
    ids = [f"d{i}" for i in range(len(texts))]
    labels = labels if labels is not None else [i % 2 for i in range(len(texts))]
    table = scorer({"doc_id": ids, "text": list(texts), "label": labels})
    rows = table.to_pylist()
    assert len(rows) == len(texts)
    by_id = {row["doc_id"]: row for row in rows}
    assert sorted(by_id) == sorted(ids)
    return by_id


def eager_reference(folder: str, text: str, max_length: int = 32):
    """Straightforward reference: HF model with output_attentions on one unpadded text.

    Returns (probs, raw (L, n), rollout (L, n), word_ids) in float64.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation="eager").eval()
    encoding = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    word_ids = encoding.word_ids(0)
    with torch.no_grad():
        outputs = model(**encoding, output_attentions=True)
    probs = torch.softmax(outputs.logits[0].double(), dim=-1).numpy()
    n = encoding["input_ids"].shape[1]
    eye = np.eye(n)
    raw, rollout = [], []
    rolled = None
    for layer_attention in outputs.attentions:  # each (1, H, n, n)
        heads = layer_attention[0].double().numpy()
        W = sum(heads[h] for h in range(heads.shape[0])) / heads.shape[0]  # head mean
        raw.append(W[0].copy())
        A = 0.5 * W + 0.5 * eye
        rolled = A if rolled is None else A @ rolled  # R_l = A_l @ R_(l-1), full matrices
        rollout.append(rolled[0].copy())
    return probs, np.array(raw), np.array(rollout), word_ids


def test_the_tokenizers_markers_written_in_a_review_are_read_as_text(tiny_model_dir, scorer_factory):
    """A review holding "[SEP]" or an HTML "<s>" (RoBERTa's start marker) was fed to the model with
    the marker's own id mid-review: special tokens only where the tokenizer adds them, on both
    paths the scorer encodes by (transformers' call and the Rust tokenizer's batch encoding)."""
    from xai_ray.model.loading import load_model

    tokenizer = load_model(tiny_model_dir).tokenizer
    markers = [tokenizer.cls_token, tokenizer.sep_token, tokenizer.pad_token, tokenizer.bos_token, "<s>", "[MASK]"]
    text = "good " + " film ".join(str(m) for m in markers if m) + " plot"
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}  # a piece out of the vocabulary is [UNK]
    ids = tokenizer(text)["input_ids"]
    assert ids[0] in special and ids[-1] in special
    assert not special & set(ids[1:-1]), tokenizer.convert_ids_to_tokens(ids)
    (bare,) = tokenizer.backend_tokenizer.encode_batch([text], add_special_tokens=False)
    assert not special & set(bare.ids)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    return request.param


def test_load_model_reads_tiny_folder(tiny_model_dir):
    from xai_ray.model.loading import load_model

    loaded = load_model(tiny_model_dir)
    assert loaded.tokenizer.is_fast
    assert loaded.info["n_layers"] in (2, 3) and loaded.info["n_heads"] in (2, 3, 4)
    assert loaded.info["labels"] == {0: "negative", 1: "positive"}
    assert len(loaded.info["fingerprint"]) == 64
    assert load_model(tiny_model_dir).info["fingerprint"] == loaded.info["fingerprint"]
    encoding = loaded.tokenizer("good film", return_tensors="pt")
    logits, fused = forward_with_attention(loaded.model, dict(encoding))
    n = encoding["input_ids"].shape[1]
    assert logits.shape == (1, 2) and fused.shape == (1, loaded.info["n_layers"], n, n)
    torch.testing.assert_close(fused.sum(dim=-1), torch.ones(1, loaded.info["n_layers"], n))


def test_scorer_loads_each_family(family, scorer_factory):
    scorer = scorer_factory(family)
    assert scorer.info["model_type"] == family
    assert scorer.info["n_layers"] == {"bert": 2, "distilbert": 3, "roberta": 3}[family]
    assert scorer.max_length == 32
    assert set(scorer.methods) == set(METHODS)


def test_batch_equals_single(family, scorer_factory):
    scorer = scorer_factory(family)
    fallbacks = scorer.fallbacks
    batch = score(scorer, TEXTS)
    assert scorer.fallbacks == fallbacks, "the padded batch failed and was re-scored one document at a time"
    lengths = {row["n_tokens"] for row in batch.values()}
    assert len(lengths) == len(TEXTS), "texts should have different lengths so the batch is padded"
    for i, text in enumerate(TEXTS):
        alone = score(scorer, [text], labels=[i % 2])["d0"]
        together = batch[f"d{i}"]
        assert together["error"] is None and alone["error"] is None
        for key in ("n_tokens", "n_layers", "tokens", "words", "word_index", "truncated", "pred", "label"):
            assert together[key] == alone[key], key
        np.testing.assert_allclose(together["probs"], alone["probs"], atol=1e-5)
        for method in METHODS:
            for prefix in ("scores", "word_scores", "word_raw"):
                column = f"{prefix}_{method}"
                a, b = np.asarray(together[column]), np.asarray(alone[column])
                assert a.shape == b.shape, column
                np.testing.assert_allclose(a, b, atol=1e-5, err_msg=f"{family} {column} text {i}")


def test_batch_equals_single_with_discard_and_max_fusion(family, scorer_factory):
    # Discarding ranks columns per row: padding columns must neither be kept nor counted as dropped.
    scorer = scorer_factory(family, head_fusion="max", discard_ratio=0.4, residual="none", start_layer=2)
    fallbacks = scorer.fallbacks
    batch = score(scorer, TEXTS)
    assert scorer.fallbacks == fallbacks, "the padded batch failed and was re-scored one document at a time"
    for i, text in enumerate(TEXTS):
        alone = score(scorer, [text], labels=[i % 2])["d0"]
        together = batch[f"d{i}"]
        for method in METHODS:
            a, b = rows_to_scores(together, method), rows_to_scores(alone, method)
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=f"{family} {method} text {i}")
            if method == "rollout":
                assert np.isnan(a[0]).all() and not np.isnan(a[1:]).any()
            else:
                assert not np.isnan(a).any()
                np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("text_index", [0, 2])
def test_scores_match_eager_reference(family, text_index, scorer_factory, tiny_model_factory):
    text = TEXTS[text_index]
    scorer = scorer_factory(family)
    # Score inside a padded batch: the result must still equal the unpadded reference.
    row = score(scorer, TEXTS)[f"d{text_index}"]
    probs, raw, rollout, word_ids = eager_reference(tiny_model_factory(family), text)
    n_layers, n = raw.shape
    assert row["n_layers"] == n_layers and row["n_tokens"] == n
    np.testing.assert_allclose(row["probs"], probs, atol=1e-5)
    assert row["pred"] == int(np.argmax(probs))
    np.testing.assert_allclose(rows_to_scores(row, "raw"), raw, atol=1e-5)
    np.testing.assert_allclose(rows_to_scores(row, "rollout"), rollout, atol=1e-5)
    # Sanity of the reference itself: rows of stochastic products sum to 1.
    np.testing.assert_allclose(rollout.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(raw.sum(axis=1), 1.0, atol=1e-5)


def test_word_scores_sum_to_one_and_word_raw_sums_pieces(family, scorer_factory):
    scorer = scorer_factory(family)
    rows = score(scorer, TEXTS)
    for i, text in enumerate(TEXTS):
        row = rows[f"d{i}"]
        encoding = scorer.tokenizer(text, truncation=True, max_length=32)
        # Dense word numbering by hand: first appearance order, specials -> -1.
        dense, seen = [], {}
        for wid in encoding.word_ids():
            if wid is None:
                dense.append(-1)
            else:
                if wid not in seen:
                    seen[wid] = len(seen)
                dense.append(seen[wid])
        assert row["word_index"] == dense
        n_words = len(seen)
        assert len(row["words"]) == n_words
        n_layers, n = row["n_layers"], row["n_tokens"]
        for method in METHODS:
            tokens = rows_to_scores(row, method).astype(np.float64)  # (L, n)
            word_raw = np.asarray(row[f"word_raw_{method}"], dtype=np.float64).reshape(n_layers, n_words)
            word_scores = np.asarray(row[f"word_scores_{method}"], dtype=np.float64).reshape(n_layers, n_words)
            for layer in range(n_layers):
                hand = [0.0] * n_words
                for position in range(n):
                    if dense[position] >= 0:
                        hand[dense[position]] += tokens[layer, position]
                np.testing.assert_allclose(word_raw[layer], hand, atol=1e-6)
                assert word_scores[layer].sum() == pytest.approx(1.0, abs=1e-5)
                np.testing.assert_allclose(word_scores[layer], np.array(hand) / sum(hand), atol=1e-5)


def test_bad_rows_become_error_rows(scorer_factory):
    scorer = scorer_factory("bert")
    texts = [None, "", "   ", "The film was good", 42]
    rows = score(scorer, texts, labels=[0, 1, None, 1, 0])
    good = rows["d3"]
    assert good["error"] is None
    assert good["words"] == ["The", "film", "was", "good"]
    assert len(good["scores_raw"]) == good["n_layers"] * good["n_tokens"]
    assert good["label"] == 1
    for bad_id, reason in (("d0", "null"), ("d1", "empty"), ("d2", "whitespace"), ("d4", "int")):
        row = rows[bad_id]
        assert isinstance(row["error"], str) and reason in row["error"], row["error"]
        assert row["scores_raw"] is None and row["pred"] is None
        assert row["model_fingerprint"] == scorer.info["fingerprint"]
    assert rows["d2"]["label"] is None


def test_batch_of_only_bad_rows(scorer_factory):
    scorer = scorer_factory("bert")
    rows = score(scorer, [None, " "])
    assert all(row["error"] for row in rows.values())


def test_truncation_flag(family, scorer_factory):
    scorer = scorer_factory(family)
    long_text = " ".join(["the film was good and the plot was fine"] * 8)
    rows = score(scorer, [long_text, "bad movie"])
    long_row, short_row = rows["d0"], rows["d1"]
    assert long_row["error"] is None
    assert long_row["n_tokens"] == 32
    assert long_row["truncated"] is True
    assert short_row["truncated"] is False
    assert short_row["n_tokens"] < 32
    # Truncated rows are still well formed.
    assert rows_to_scores(long_row, "rollout").shape == (long_row["n_layers"], 32)


def test_probs_are_a_distribution(family, scorer_factory):
    scorer = scorer_factory(family)
    rows = score(scorer, TEXTS)
    for row in rows.values():
        probs = np.asarray(row["probs"])
        assert probs.shape == (2,)
        assert probs.sum() == pytest.approx(1.0, abs=1e-5)
        assert row["pred"] == int(probs.argmax())


def test_capture_in_small_row_blocks_equals_one_block(scorer_factory, monkeypatch):
    """Long documents are captured in blocks of query rows; block edges must not change a score."""
    import xai_ray.model.capture as capture

    scorer = scorer_factory("bert")
    whole = score(scorer, TEXTS)
    monkeypatch.setattr(capture, "BLOCK_BYTES", 400)  # blocks of 2-5 rows for these lengths
    fallbacks = scorer.fallbacks
    blocked = score(scorer, TEXTS)
    assert scorer.fallbacks == fallbacks
    for doc_id, row in whole.items():
        for method in METHODS:
            np.testing.assert_allclose(rows_to_scores(blocked[doc_id], method), rows_to_scores(row, method), atol=1e-6)


@pytest.mark.parametrize("kind", ["roberta-prelayernorm", "data2vec-text"])
def test_roberta_style_models_outside_a_list_keep_within_their_positions(kind, tiny_roberta_dir, tmp_path):
    """Positions start after the padding index in every RoBERTa-style embedding; a list of three
    model types left RoBERTa-PreLayerNorm and Data2Vec-text one window too long: every review
    longer than 62 tokens failed with an index error on a 64-position table."""
    import json
    import shutil

    from transformers import AutoConfig, AutoModelForSequenceClassification

    from xai_ray.scoring.actor import Scorer

    base = json.loads((Path(tiny_roberta_dir) / "config.json").read_text())
    config = AutoConfig.for_model(
        kind, **{k: v for k, v in base.items() if k not in ("model_type", "architectures", "transformers_version")}
    )
    torch.manual_seed(0)
    folder = tmp_path / kind
    AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    for name in Path(tiny_roberta_dir).iterdir():
        if "token" in name.name or name.suffix in (".txt", ".json") and name.name != "config.json":
            shutil.copy(name, folder / name.name)
    scorer = Scorer({"model": str(folder), "max_length": 512, "methods": ["raw"]})
    assert scorer.max_length == 62
    (row,) = scorer({"doc_id": ["long"], "text": [" ".join(["good film"] * 100)], "label": [1]}).to_pylist()
    assert row["error"] is None and row["truncated"] and row["n_tokens"] == 62
