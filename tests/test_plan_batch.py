"""``segments.plan_batch``: one tokenizer call for a batch gives each text exactly the plan that
``segments.plan`` (one call per text) gives it, for WordPiece and BPE tokenizers, every long-text
mode, texts the tokenizer drops, and a tokenizer class that encodes its own way; a text the batch
call cannot take fails alone."""

from __future__ import annotations

import dataclasses

import pytest

from xai_ray.scoring import segments

TEXTS = [
    "The film was good, not boring!",
    "",
    "   ",
    "\u200b\u200b",
    "naïve café 😀 <br /> the plot",
    " ".join(["unbelievable acting"] * 120),  # longer than the windows
    "films films films. " * 40,
]


def _plans_alone(tokenizer, texts, max_length, mode):
    return [dataclasses.asdict(segments.plan(tokenizer, text, max_length, mode)) for text in texts]


@pytest.mark.parametrize("mode", ["head", "head_tail", "window"])
@pytest.mark.parametrize("kind", ["wordpiece_tokenizer", "bpe_tokenizer"])
def test_one_call_for_the_batch_plans_each_text_as_a_call_of_its_own(kind, mode, request):
    tokenizer = request.getfixturevalue(kind)
    together = segments.plan_batch(tokenizer, TEXTS, 32, mode)
    assert [dataclasses.asdict(p) for p in together] == _plans_alone(tokenizer, TEXTS, 32, mode)
    assert any(len(p.inputs) > 1 for p in together) == (mode == "window")  # the long texts were cut


def test_a_tokenizer_class_with_its_own_encoding_goes_through_transformers(wordpiece_tokenizer):
    calls = []

    class Counting(type(wordpiece_tokenizer)):
        def _encode_plus(self, *args, **kwargs):
            calls.append(args[0] if args else kwargs.get("text"))
            return super()._encode_plus(*args, **kwargs)

    counting = Counting(tokenizer_object=wordpiece_tokenizer.backend_tokenizer)
    together = segments.plan_batch(counting, TEXTS, 32, "window")
    assert [dataclasses.asdict(p) for p in together] == _plans_alone(wordpiece_tokenizer, TEXTS, 32, "window")
    assert list(TEXTS) in calls  # the batch went through the class's own encoding, in one call


def test_a_text_the_batch_call_cannot_take_fails_alone(wordpiece_tokenizer):
    texts = ["a good film", None, "a boring plot"]
    together = segments.plan_batch(wordpiece_tokenizer, texts, 32, "head")
    assert isinstance(together[1], Exception)
    assert dataclasses.asdict(together[0]) == dataclasses.asdict(
        segments.plan(wordpiece_tokenizer, texts[0], 32, "head")
    )
    assert dataclasses.asdict(together[2]) == dataclasses.asdict(
        segments.plan(wordpiece_tokenizer, texts[2], 32, "head")
    )


def test_the_scorer_records_a_review_it_cannot_cut_and_scores_the_others(tiny_bert_dir, monkeypatch):
    from xai_ray.scoring.actor import Scorer

    scorer = Scorer({"model": tiny_bert_dir, "max_length": 32, "methods": ["raw"]})
    bad = len(scorer.tokenizer("the film", add_special_tokens=False)["input_ids"])
    texts = ["the film was good and the plot was fine", "the film", "the plot was boring, not good"]
    assert bad not in {len(scorer.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts[::2]}
    cut = segments.cut

    def failing(ids, *args, **kwargs):
        if len(ids) == bad:
            raise ValueError("boom")
        return cut(ids, *args, **kwargs)

    monkeypatch.setattr(segments, "cut", failing)
    table = scorer({"doc_id": ["a", "b", "c"], "text": texts, "label": [1, 0, 1]})
    rows = {r["doc_id"]: r["error"] for r in table.select(["doc_id", "error"]).to_pylist()}
    assert rows["a"] is None and rows["c"] is None
    assert rows["b"] == "tokenizing failed: ValueError: boom"
