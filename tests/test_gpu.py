"""The GPU path, run where a CUDA GPU is present and skipped cleanly elsewhere (conftest skips
every ``gpu`` test without one). CI has no GPU: these run in sessions that are lent one."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from xai_ray import cli
from xai_ray.methods.heads import HeadCollector, position_masks
from xai_ray.model import capture
from xai_ray.model.loading import load_model
from xai_ray.model.recovery import is_out_of_memory, release_memory
from xai_ray.scoring.actor import Scorer

pytestmark = pytest.mark.gpu
IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"


def _reviews(n: int) -> dict:
    table = pq.read_table(IMDB).slice(0, n).to_pydict()
    return {"doc_id": [str(x) for x in table["id"]], "text": table["text"], "label": table["label"]}


def test_capture_on_the_gpu_equals_eager_attention_on_the_cpu():
    """The batched capture in fp32 on CUDA against eager attention's head mean on the CPU."""
    cpu = load_model("minilm", attn_implementation="eager")
    gpu = load_model("minilm", device="cuda")
    batch = _reviews(8)
    encoding = cpu.tokenizer(batch["text"], truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = cpu.model(**encoding, output_attentions=True)
    on_device = {k: v.to("cuda") for k, v in encoding.items()}
    logits, fused = capture.forward_with_attention(gpu.model, on_device)  # batched by default on CUDA
    np.testing.assert_allclose(logits.cpu().numpy(), reference.logits.numpy(), atol=1e-3)
    for b, n in enumerate(encoding["attention_mask"].sum(dim=1).tolist()):
        for layer, attention in enumerate(reference.attentions):
            expected = attention[b, :, :n, :n].mean(dim=0).numpy()
            np.testing.assert_allclose(fused[b, layer, :n, :n].cpu().numpy(), expected, atol=1e-4)


def test_head_statistics_of_the_batched_gpu_capture_equal_the_cpu_loop():
    """Per-head statistics and head similarity reduced for the whole batch on CUDA (fp32) against
    the per-document loop on the CPU."""
    cpu = load_model("minilm")
    gpu = load_model("minilm", device="cuda")
    batch = _reviews(8)
    encoding = cpu.tokenizer(batch["text"], truncation=True, max_length=128, padding=True, return_tensors="pt")
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    masks = position_masks(encoding["input_ids"], cpu.tokenizer)
    got = []
    for loaded, inputs in ((cpu, encoding), (gpu, {k: v.to("cuda") for k, v in encoding.items()})):
        heads = HeadCollector(lengths, masks, [True] * 8, 16)
        capture.forward_with_attention(loaded.model, dict(inputs), heads=heads)  # batched only on CUDA
        got.append((heads.statistics().numpy(), heads.similarity()))
    np.testing.assert_allclose(got[1][0], got[0][0], atol=1e-3, rtol=1e-3)
    for doc in range(8):
        np.testing.assert_allclose(got[1][1][doc][0].numpy(), got[0][1][doc][0].numpy(), atol=1e-3)


def test_gpu_scorer_in_bf16_agrees_with_the_cpu_scorer():
    """bf16 matmuls on the GPU, fp32 probabilities: the same predictions and close rollout scores."""
    config = {"model": "minilm", "max_length": 128, "methods": ["raw", "rollout"], "heads": False}
    batch = _reviews(16)
    on_cpu = Scorer({**config, "gpus_per_actor": 0})(batch).to_pandas()
    on_gpu = Scorer({**config, "gpus_per_actor": 1})(batch).to_pandas()
    assert on_gpu.error.isna().all()
    agree = (on_cpu.pred == on_gpu.pred).mean()
    assert agree >= 0.9  # bf16 may flip a review sitting on the boundary
    for a, b in zip(on_cpu.scores_rollout, on_gpu.scores_rollout):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-2)


def test_a_real_cuda_out_of_memory_error_is_recognised_and_released():
    free, _ = torch.cuda.mem_get_info()
    with pytest.raises(torch.cuda.OutOfMemoryError) as caught:
        torch.empty(int(free * 4), dtype=torch.uint8, device="cuda")
    assert is_out_of_memory(caught.value)
    release_memory("cuda")
    torch.ones(1024, device="cuda")  # the device is usable afterwards


@pytest.mark.ray
def test_a_whole_run_on_the_gpu_with_the_deferred_flow_stage(tmp_path):
    """One GPU actor (flow deferred to a CPU stage, the default with GPUs): every review once,
    flow's per-layer token shares sum to 1."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, logging_level="ERROR")
    try:
        status = cli.main(
            ["run", "--data", str(IMDB), "--limit", "24", "--model", "minilm", "--methods", "raw,rollout,flow",
             "--max-length", "128", "--store", str(tmp_path), "--run-id", "gpu", "--no-report"]
        )  # fmt: skip
        assert status == 0
        from xai_ray.query.connection import open_store

        con = open_store(tmp_path)
        assert con.execute("select count(*) from docs where run_id = 'gpu'").fetchall() == [(24,)]
        sums = con.sql(
            "select sum(score) as s from tokens where run_id = 'gpu' and method = 'flow' group by doc_id, layer"
        ).df()
        np.testing.assert_allclose(sums.s, 1.0, atol=1e-4)
    finally:
        ray.shutdown()
