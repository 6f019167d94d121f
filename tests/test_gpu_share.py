"""How many actors share a GPU by default: a GPU actor's host work per review outlasts its forward
(bench/README, throughput.py on an H100), so a GPU with CPUs to spare takes up to four actors."""

from __future__ import annotations

import pytest

from xai_ray.config import resolve
from xai_ray.pipeline.pool import actor_gpus, auto_actors, gpu_share


@pytest.mark.parametrize(
    ("cpus_per_gpu", "cpus_per_actor", "share"),
    [
        (16, 1, 0.25),  # the lent H100 machines: 16 CPUs, one GPU
        (32, 1, 0.25),  # never more than four a GPU
        (12, 1, 0.5),
        (8, 1, 0.5),
        (7, 1, 1.0),
        (4, 1, 1.0),
        (16, 2, 0.5),  # actors asking for 2 CPUs each: half as many fit beside the GPU
        (16, 4, 1.0),
        (16, 0.5, 0.25),  # under one CPU an actor counts as one
    ],
)
def test_the_gpu_share_follows_the_cpus_beside_each_gpu(cpus_per_gpu, cpus_per_actor, share):
    assert gpu_share(cpus_per_gpu, cpus_per_actor) == share


@pytest.mark.ray
def test_a_cluster_with_a_gpu_and_16_cpus_runs_four_actors_on_it():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=16, num_gpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        cfg = resolve(None, {"model": "minilm", "data": "x.parquet"})
        assert actor_gpus(cfg) == 0.25
        assert auto_actors(actor_gpus(cfg), cfg.cpus_per_actor) == 4
        given = resolve(None, {"model": "minilm", "data": "x.parquet", "gpus_per_actor": 1})
        assert actor_gpus(given) == 1.0 and auto_actors(1.0, given.cpus_per_actor) == 1
    finally:
        ray.shutdown()
