"""Long reviews: windows merged per word (the max-context rule), head_tail as finetune trains, auto.

The references here run the Hugging Face model eagerly on each window's input ids and pick each
word's window with a plain loop over the documented rule, independent of xai_ray.scoring.segments.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from xai_ray.config import ConfigError, resolve
from xai_ray.scoring.actor import Scorer
from xai_ray.scoring.rows import rows_to_scores

WORDS = [
    "the",
    "film",
    "was",
    "good",
    "unbelievable",
    "wonderful",
    "playing",
    "films",
    "acting",
    "plot",
    "not",
    "very",
    "boring",
    ",",
    ".",
    "!",
]


def long_review(tokenizer, n_tokens: int, seed: int = 0) -> str:
    """A seeded review of at least ``n_tokens`` tokens (multi-piece words included)."""
    rng = np.random.default_rng(seed)
    words: list[str] = []
    while len(tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]) < n_tokens:
        words.extend(rng.choice(WORDS, size=200).tolist())
    return " ".join(words)


def eager_window(model, input_ids: list[int]):
    """probs (C,), raw (L, n) and rollout (L, n) of one model input, by the textbook formulas."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([input_ids]), output_attentions=True)
    probs = torch.softmax(out.logits[0].double(), dim=-1).numpy()
    n, raw, rollout, rolled = len(input_ids), [], [], None
    for layer in out.attentions:  # (1, H, n, n)
        W = layer[0].double().mean(dim=0).numpy()
        raw.append(W[0].copy())
        A = 0.5 * W + 0.5 * np.eye(n)
        rolled = A if rolled is None else A @ rolled
        rollout.append(rolled[0].copy())
    return probs, np.array(raw), np.array(rollout)


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert_dir, attn_implementation="eager").eval()
    return tiny_bert_dir, model, AutoTokenizer.from_pretrained(tiny_bert_dir)


def test_2000_token_review_in_windows_scores_every_word_once_from_its_max_context_window(bert):
    folder, model, tokenizer = bert
    text = long_review(tokenizer, 2000)
    max_length, stride = 64, 20
    scorer = Scorer(
        {
            "model": folder,
            "max_length": max_length,
            "methods": ["raw", "rollout"],
            "long_text": "window",
            "window_stride": stride,
        }
    )
    (row,) = scorer({"doc_id": ["long"], "text": [text], "label": [1]}).to_pylist()
    assert row["error"] is None and not row["truncated"]

    encoded = tokenizer(text, add_special_tokens=False)
    ids, word_ids = encoded["input_ids"], encoded.word_ids()
    n, room = len(ids), max_length - 2
    assert n >= 2000
    starts = list(range(0, n - room, stride)) + [n - room]
    windows = [(s, s + room) for s in sorted(set(starts))]
    assert windows[-1][1] == n and all(b[0] - a[0] <= stride for a, b in zip(windows, windows[1:]))
    refs = [eager_window(model, [tokenizer.cls_token_id, *ids[s:e], tokenizer.sep_token_id]) for s, e in windows]

    # every word of the review appears once, in order, with the tokenizer's own words
    n_words = len({w for w in word_ids if w is not None})
    assert len(row["words"]) == n_words and row["n_tokens"] == n + 2
    assert row["tokens"][1:-1] == tokenizer.convert_ids_to_tokens(ids)

    # the rule, written out: the window holding all the word's pieces with the most context, earliest on ties
    pieces: dict[int, list[int]] = {}
    for p, w in enumerate(word_ids):
        pieces.setdefault(w, []).append(p)
    expected = {"raw": np.zeros((2, n_words)), "rollout": np.zeros((2, n_words))}
    for dense, w in enumerate(sorted(pieces)):
        first, last = pieces[w][0], pieces[w][-1]
        best, best_context = None, -1
        for k, (s, e) in enumerate(windows):
            if s <= first and last < e and min(first - s, e - 1 - last) > best_context:
                best, best_context = k, min(first - s, e - 1 - last)
        s = windows[best][0]
        _, raw, rollout = refs[best]
        for p in pieces[w]:
            expected["raw"][:, dense] += raw[:, 1 + p - s]  # +1: [CLS] comes first in the window
            expected["rollout"][:, dense] += rollout[:, 1 + p - s]
    for method in ("raw", "rollout"):
        got = np.asarray(row[f"word_raw_{method}"]).reshape(2, n_words)
        np.testing.assert_allclose(got, expected[method], atol=1e-5)
        normalised = np.asarray(row[f"word_scores_{method}"]).reshape(2, n_words)
        np.testing.assert_allclose(normalised.sum(axis=1), 1.0, atol=1e-5)
        # [CLS]: the mean of its score over the windows
        cls = np.mean([ref[1 if method == "raw" else 2][:, 0] for ref in refs], axis=0)
        np.testing.assert_allclose(rows_to_scores(row, method)[:, 0], cls, atol=1e-5)
    np.testing.assert_allclose(row["probs"], np.mean([ref[0] for ref in refs], axis=0), atol=1e-5)


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
def test_window_equals_plain_scoring_when_the_review_fits_one_window(family, tiny_model_factory):
    folder = tiny_model_factory(family)
    texts = [
        "The acting was unbelievable, playing wonderfully!",
        "I loved the film and the story, not very boring.",
        "bad movie",
    ]
    batch = {"doc_id": ["a", "b", "c"], "text": texts, "label": [1, 0, 1]}
    base = {"model": folder, "max_length": 48, "methods": ["raw", "rollout"]}
    plain = {r["doc_id"]: r for r in Scorer(base)(batch).to_pylist()}
    windowed = {r["doc_id"]: r for r in Scorer({**base, "long_text": "window"})(batch).to_pylist()}
    for doc_id, p in plain.items():
        w = windowed[doc_id]
        assert not p["truncated"] and w["error"] is None
        assert (w["tokens"], w["words"], w["word_index"], w["pred"]) == (
            p["tokens"],
            p["words"],
            p["word_index"],
            p["pred"],
        )
        np.testing.assert_allclose(w["probs"], p["probs"], atol=1e-6)
        for column in ("scores_raw", "scores_rollout", "word_scores_rollout", "word_raw_raw"):
            np.testing.assert_allclose(w[column], p[column], atol=1e-6)


def test_head_tail_feeds_the_model_what_finetune_trains_on(bert):
    from xai_ray.train.examples import encode

    folder, _, tokenizer = bert
    text = long_review(tokenizer, 300, seed=1)
    scorer = Scorer({"model": folder, "max_length": 32, "methods": ["raw"], "long_text": "head_tail"})
    (row,) = scorer({"doc_id": ["x"], "text": [text], "label": [0]}).to_pylist()
    trained = encode(tokenizer, [text], 32, "head_tail")[0]
    assert row["truncated"] and row["n_tokens"] == 32
    assert tokenizer.convert_tokens_to_ids(row["tokens"]) == trained.tolist()


def test_auto_follows_what_the_model_folder_records(tiny_bert_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    config = {"model": str(folder), "max_length": 32, "methods": ["raw"], "long_text": "auto"}
    assert Scorer(config).long_text == "head"  # a folder that records nothing: plain truncation
    (folder / "metrics.json").write_text(json.dumps({"config": {"truncation": "head_tail"}}))  # older finetune
    assert Scorer(config).long_text == "head_tail"
    (folder / "xai_ray_input.json").write_text(json.dumps({"truncation": "head", "max_length": 32}))
    assert Scorer(config).long_text == "head"  # the explicit record wins


def test_long_text_settings_are_checked():
    with pytest.raises(ConfigError, match="long_text must be one of"):
        resolve(None, {"model": "m"}, ["long_text=middle"])
    with pytest.raises(ConfigError, match="window_stride must be in"):
        resolve(None, {"model": "m", "max_length": 64}, ["long_text=window", "window_stride=63"])
    with pytest.raises(ConfigError, match="--evaluate"):
        resolve(None, {"model": "m", "evaluate": True}, ["long_text=window"])


def test_a_stride_past_the_models_own_window_scores_every_word(bert):
    """window_stride was checked against the asked-for max_length (512), not the model's 64
    positions: a stride of 200 over 62-token windows skipped the text between them, and the review
    was stored short as "truncated" in a mode that promises nothing is cut."""
    folder, _, tokenizer = bert
    text = long_review(tokenizer, 400)
    scorer = Scorer(
        {"model": folder, "max_length": 512, "methods": ["raw"], "long_text": "window", "window_stride": 200}
    )
    (row,) = scorer({"doc_id": ["long"], "text": [text], "label": [1]}).to_pylist()
    encoded = tokenizer(text, add_special_tokens=False)
    assert row["error"] is None and not row["truncated"]
    assert len(row["words"]) == len({w for w in encoded.word_ids() if w is not None})
