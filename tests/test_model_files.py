"""The model pre-check decides from the files ``from_pretrained`` will load: model.safetensors
(an unrelated *.safetensors does not count), pickled pytorch_model.bin only when allowed, a
tokenizer's files, a readable config.json; each refusal is one sentence naming an option the
command really takes."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from xai_ray import cli
from xai_ray.model.loading import ModelError, describe_model


@pytest.fixture()
def folder(tmp_path, tiny_bert_dir):
    copy = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, copy)
    return copy


def _pickled_with_stray_safetensors(folder):
    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")
    save_file({"unrelated": torch.zeros(2)}, folder / "adapter.safetensors")  # not the model's weights


def _explain(folder, tmp_path, capsys, *extra):
    status = cli.main(["explain", "a good film", "--model", str(folder), "--out", str(tmp_path / "p.html"), *extra])
    return status, capsys.readouterr().err


def test_an_unrelated_safetensors_file_does_not_pass_for_the_weights(folder, tmp_path, capsys):
    _pickled_with_stray_safetensors(folder)
    with pytest.raises(ModelError, match=r"no \.safetensors weights \(model\.safetensors\)"):
        describe_model(str(folder))
    status, err = _explain(folder, tmp_path, capsys)
    assert status == 2 and len(err.splitlines()) == 1 and "(explain: --allow-pickle)" in err, err
    assert not (tmp_path / "p.html").exists()
    status, err = _explain(folder, tmp_path, capsys, "--allow-pickle")  # the option named works
    assert status == 0 and (tmp_path / "p.html").is_file(), err


def test_a_folder_without_weights_or_tokenizer_is_one_sentence(folder, tmp_path, capsys):
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(ModelError, match="has no tokenizer files"):
        describe_model(str(folder))
    status, err = _explain(folder, tmp_path, capsys)
    assert status == 2 and "has no tokenizer files" in err and len(err.splitlines()) == 1, err
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="holds no weights"):
        describe_model(str(folder))


@pytest.mark.parametrize("config", ["{not json", '{"model_type": "bert", "num_hidden_layers": "two"}', None])
def test_a_local_folder_with_a_broken_config_says_so_not_offline(folder, config):
    if config is None:
        (folder / "config.json").unlink()
    else:
        (folder / "config.json").write_text(config)
    with pytest.raises(ModelError) as refused:
        describe_model(str(folder))
    message = str(refused.value)
    assert "offline" not in message and "config.json" in message and len(message.splitlines()) == 1


def test_a_half_precision_checkpoint_computes_in_float32(folder):
    """Many fine-tuned checkpoints are saved in fp16 or bf16, and transformers 5 loads a checkpoint in
    its own dtype: an fp16 model then ran its CPU forward and the capture in fp16. Found on an H100,
    where the CPU reference of tests/test_gpu.py disagreed with the GPU's capture by 3e-4."""
    from transformers import AutoModelForSequenceClassification

    from xai_ray.model.loading import load_model

    half = AutoModelForSequenceClassification.from_pretrained(folder).half()
    half.save_pretrained(folder, safe_serialization=True)
    stored = load_file(folder / "model.safetensors")
    assert {tensor.dtype for tensor in stored.values()} == {torch.float16}

    loaded = load_model(str(folder)).model
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    weight = loaded.bert.embeddings.word_embeddings.weight
    assert torch.equal(weight, stored["bert.embeddings.word_embeddings.weight"].float())  # upcast is exact


@pytest.mark.parametrize("head", [{"num_labels": 1, "id2label": {"0": "LABEL_0"}}, {"problem_type": "regression"}])
def test_a_regression_head_is_refused_before_anything_starts(folder, head):
    """A single-output head was read as a classifier of one class: probability 1 for every review,
    accuracy 1.0, and signed scores summing to 0."""
    import json

    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **head}))
    with pytest.raises(ModelError, match="has a single output"):
        describe_model(str(folder))
