"""The shared token-budget batcher and the scorer's typed config."""

import dataclasses
import pickle

import pytest

from xai_ray.config import ConfigError, RunConfig
from xai_ray.model.batching import token_budget_batches
from xai_ray.scoring.settings import ScorerConfig


def test_batches_go_longest_first_and_keep_padded_tokens_within_the_budget():
    lengths = [3, 10, 4, 10, 2, 6]
    # longest first: 10 (1), 10 (3), 6 (5), 4 (2), 3 (0), 2 (4); budget 20:
    # [1, 3] pads to 2 x 10 = 20; adding 5 would be 30. [5, 2, 0] pads to 3 x 6 = 18; adding 4 would be 24.
    assert token_budget_batches(lengths, 20) == [[1, 3], [5, 2, 0], [4]]


def test_a_sequence_over_the_budget_gets_a_batch_of_its_own():
    assert token_budget_batches([50, 5, 5], 20) == [[0], [1, 2]]


def test_equal_lengths_keep_input_order_and_every_position_appears_once():
    lengths = [7] * 9
    batches = token_budget_batches(lengths, 21)
    assert batches == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert token_budget_batches([], 10) == []
    with pytest.raises(ValueError, match="at least 1"):
        token_budget_batches([3], 0)


def test_scorer_config_is_frozen_typed_and_checked_like_the_run_config():
    cfg = RunConfig(model="minilm", methods="raw,flow", max_length=64)
    from_run = ScorerConfig.of(cfg, gpus_per_actor=1, deferred_methods=["flow"])
    from_dict = ScorerConfig.of({**cfg.to_dict(), "gpus_per_actor": 1, "deferred_methods": ["flow"]})
    assert from_run == from_dict and from_run.run.methods == ("raw", "flow") and from_run.gpus_per_actor == 1.0
    assert pickle.loads(pickle.dumps(from_run)) == from_run  # it travels to Ray actors
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_run.gpus_per_actor = 0
    with pytest.raises(ConfigError, match="unknown scorer setting.*max_lenght"):
        ScorerConfig.of({"model": "minilm", "max_lenght": 64})
    with pytest.raises(ConfigError, match="residual"):
        ScorerConfig.of({"model": "minilm", "residual": "sideways"})
    with pytest.raises(ConfigError, match="not among the run's methods"):
        ScorerConfig.of(cfg, deferred_methods=["rollout"])
    # the run config itself, not a restatement of its fields
    assert ScorerConfig().run == RunConfig() and from_run.run == cfg


def test_padding_cuts_a_batch_before_it_pads_more_than_its_share():
    # longest first: 100 (0), 95 (2), 60 (1), 58 (3), 20 (4); budget 1000 alone takes them all
    lengths = [100, 60, 95, 58, 20]
    assert token_budget_batches(lengths, 1000) == [[0, 2, 1, 3, 4]]  # pads to 5 x 100 = 500 for 333 tokens
    # padding 0.1: [100, 95] pads 200 for 195 (<= 214.5); adding 60 would pad 300 for 255 (> 280.5)
    # [60, 58] pads 120 for 118; adding 20 would pad 180 for 138 (> 151.8); [20] alone
    assert token_budget_batches(lengths, 1000, padding=0.1) == [[0, 2], [1, 3], [4]]
    # no padding allowed: only equal lengths share a batch, and the budget still holds
    assert token_budget_batches([5, 5, 4, 5], 10, padding=0.0) == [[0, 1], [3], [2]]
