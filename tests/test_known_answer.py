"""Signed methods on a model whose answer is known: a bag of word embeddings with a linear head.

The logit of class c is w_c . sum_j e_j, so a word's push toward class t over the other is exactly
(w_t - w_other) . e_j. Every signed method, through the path the scoring actor takes (the
gradient passes, then ``Method.explain``), must rank the words pushing toward the explained class
first, for either class: a sign error in input x gradient, integrated gradients or lrp would put the
other class's words on top. Integrated gradients' completeness error is also checked here,
where f is smooth along the path and Gauss-Legendre nodes leave almost nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xai_ray.methods import REGISTRY, get_method
from xai_ray.methods.base import GRADIENT_NEEDS
from xai_ray.scoring.gradient_pass import GradientPasses

POSITIVE, NEGATIVE, NEUTRAL = (1, 2, 3), (4, 5, 6), (7, 8)
DOCUMENT = [0, 1, 4, 2, 7, 5, 3, 8, 6, 9]  # [CLS]-like 0 and [SEP]-like 9 carry zero embeddings


class Output:
    def __init__(self, logits):
        self.logits = logits


class BagOfEmbeddings(torch.nn.Module):
    """What the gradient passes use of a Hugging Face classifier: ``get_input_embeddings`` and
    ``forward(input_ids= | inputs_embeds=, attention_mask=, ...).logits``."""

    def __init__(self) -> None:
        super().__init__()
        table = torch.zeros(10, 2)
        for word in POSITIVE:
            table[word] = torch.tensor([1.0 + 0.2 * word, 0.0])  # toward class 1 by 1.2 to 1.6
        for word in NEGATIVE:
            table[word] = torch.tensor([0.0, 0.5 + 0.1 * word])  # toward class 0 by 0.9 to 1.1
        for word in NEUTRAL:
            table[word] = torch.tensor([0.05, 0.05])  # pushes neither way
        self.embeddings = torch.nn.Embedding.from_pretrained(table, freeze=True)
        self.head = torch.nn.Linear(2, 2, bias=False)
        # Class 1 reads dimension 0 over dimension 1, class 0 the reverse. The rows are centred (the
        # one-hot head [[0, 1], [1, 0]] less its mean row): the probabilities are the same, and each
        # logit is then itself half the push toward its class, which lrp explains.
        with torch.no_grad():
            self.head.weight.copy_(torch.tensor([[-0.5, 0.5], [0.5, -0.5]]))

    def get_input_embeddings(self):
        return self.embeddings

    def forward(self, input_ids=None, inputs_embeds=None, attention_mask=None, **_):
        embedded = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, n, d)
        pooled = (embedded * attention_mask[..., None]).sum(dim=1)  # (B, d)
        return Output(self.head(pooled))


def signed_methods() -> list[str]:
    return sorted(name for name, cls in REGISTRY.items() if cls.signed and cls.needs in GRADIENT_NEEDS)


def test_the_registry_has_signed_methods_to_check():
    assert {"input_x_gradient", "integrated_gradients", "lrp"} <= set(signed_methods())


@pytest.mark.parametrize("target", [0, 1])
@pytest.mark.parametrize("method", signed_methods())
def test_top_tokens_push_toward_the_explained_class(method, target):
    model = BagOfEmbeddings().eval()
    chosen = get_method(method)
    passes = GradientPasses(model, {method: chosen}, target, {0: "neg", 1: "pos"}, ig_steps=16, token_budget=4096)
    inputs = {"input_ids": torch.tensor([DOCUMENT]), "attention_mask": torch.ones(1, len(DOCUMENT), dtype=torch.long)}
    captured, _ = passes.capture(inputs, [target])
    one = {need: values[0] for need, values in captured.items()}  # the batch's first (only) review
    scores = chosen.explain(one, n_layers=3)[-1]  # (n,): stored under the last layer
    pushing = POSITIVE if target == 1 else NEGATIVE
    top = [DOCUMENT[j] for j in np.argsort(-scores, kind="stable")[: len(pushing)]]
    assert sorted(top) == sorted(pushing), (method, target, scores)
    against = [j for j, word in enumerate(DOCUMENT) if word in (NEGATIVE if target == 1 else POSITIVE)]
    assert (scores[against] < 0).all()  # the other class's words are evidence against the target
    assert np.abs(scores).sum() == pytest.approx(1.0)  # shares of |score|, signs kept


def test_integrated_gradients_is_complete_on_a_smooth_path():
    model = BagOfEmbeddings().eval()
    chosen = get_method("integrated_gradients")
    passes = GradientPasses(model, {"integrated_gradients": chosen}, 1, {0: "neg", 1: "pos"}, 8, 4096)
    inputs = {"input_ids": torch.tensor([DOCUMENT]), "attention_mask": torch.ones(1, len(DOCUMENT), dtype=torch.long)}
    captured, _ = passes.capture(inputs, [1])
    assert captured["ig_delta"][0] > 0.4  # far from trivial: log sigmoid(1.2) - log(1/2) = 0.43
    assert captured["ig_completeness_error"][0] < 1e-5
