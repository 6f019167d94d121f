"""A local model folder's description is kept under its config.json's bytes and transformers'
version: a later command describes it without importing transformers or torch, and whatever the
kept answer says, the folder's own checks still run and another config is read afresh."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

from xai_ray.model.files import ModelError
from xai_ray.model.loading import describe_model


def _kept(folder):
    path = folder / "xai-ray" / "descriptions.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def test_a_fresh_process_describes_a_kept_folder_without_transformers_or_torch(tiny_bert_dir, tmp_path):
    probe = (
        "import sys, json; from xai_ray.model.loading import describe_model; "
        f"d = describe_model({str(tiny_bert_dir)!r}); "
        "print(json.dumps([d['model_type'], d['n_layers'], d['n_heads'], d['labels'], "
        "'transformers' in sys.modules, 'torch' in sys.modules]))"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    runs = [
        json.loads(
            subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
        )
        for _ in range(2)
    ]
    config = json.loads((Path(tiny_bert_dir) / "config.json").read_text())
    expected = ["bert", config["num_hidden_layers"], config["num_attention_heads"], {"0": "negative", "1": "positive"}]
    assert runs[0] == [*expected, True, True]  # the first reads the config with transformers
    assert runs[1] == [*expected, False, False]  # the second from the kept answer alone


def test_another_config_is_read_afresh_and_another_versions_answer_is_not_used(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    assert describe_model(str(folder))["labels"] == {0: "negative", 1: "positive"}
    (key,) = _kept(tmp_path)
    assert key.split()[1] == transformers.__version__
    config = json.loads((folder / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "bad", "1": "good"}, {"bad": 0, "good": 1}
    (folder / "config.json").write_text(json.dumps(config))
    assert describe_model(str(folder))["labels"] == {0: "bad", 1: "good"}  # new bytes: read again
    # an answer kept under another transformers version is never read, whatever it says
    kept = _kept(tmp_path)
    kept = {k.replace(transformers.__version__, "0.0.1"): {**v, "n_layers": 99} for k, v in kept.items()}
    (tmp_path / "xai-ray" / "descriptions.json").write_text(json.dumps(kept))
    assert describe_model(str(folder))["n_layers"] == config["num_hidden_layers"]


def test_the_folders_checks_run_on_a_kept_description(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    describe_model(str(folder))
    assert len(_kept(tmp_path)) == 1
    (folder / "model.safetensors").rename(folder / "weights.bak")
    with pytest.raises(ModelError, match="weights"):
        describe_model(str(folder))
    (folder / "weights.bak").rename(folder / "model.safetensors")
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        (folder / name).unlink(missing_ok=True)
    with pytest.raises(ModelError, match="tokenizer"):
        describe_model(str(folder))


def test_remote_code_is_never_kept_and_a_broken_cache_is_read_as_empty(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    describe_model(str(tiny_bert_dir), trust_remote_code=True)
    assert _kept(tmp_path) == {}
    (tmp_path / "xai-ray").mkdir(exist_ok=True)
    (tmp_path / "xai-ray" / "descriptions.json").write_text("[not an object")
    assert describe_model(str(tiny_bert_dir))["model_type"] == "bert"
    key = next(iter(_kept(tmp_path)))
    (tmp_path / "xai-ray" / "descriptions.json").write_text(json.dumps({key: {"model_type": "bert"}}))  # half an answer
    assert describe_model(str(tiny_bert_dir))["n_heads"] > 0  # read afresh


@pytest.mark.parametrize(
    "change",
    [
        {"model_type": "deberta"},
        {"n_layers": 0},
        {"n_layers": 7},
        {"n_heads": -3},
        {"labels": {"0": "negative", "1": "neutral", "2": "positive"}},
        {"labels": {"1": "negative", "2": "positive"}},
    ],
    ids=["type", "no-layer", "other-layers", "heads", "a-third-class", "classes-from-1"],
)
def test_a_kept_answer_that_config_json_contradicts_is_not_believed(tiny_bert_dir, tmp_path, monkeypatch, change):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    fresh = describe_model(str(folder))
    ((key, entry),) = _kept(tmp_path).items()
    (tmp_path / "xai-ray" / "descriptions.json").write_text(json.dumps({key: {**entry, **change}}))
    assert describe_model(str(folder)) == fresh  # read from the folder again, and kept again as it is
    assert _kept(tmp_path)[key] == entry


def test_a_cache_file_that_cannot_be_read_or_written_costs_only_the_question(tiny_bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "xai-ray"
    cache.mkdir()
    (cache / "descriptions.json").write_text("[" * 100_000 + "]" * 100_000)  # deeper than json can nest
    fresh = describe_model(tiny_bert_dir)
    assert fresh["model_type"] == "bert"
    (cache / "descriptions.json").unlink()
    (cache / "descriptions.json").mkdir()  # its name taken by a folder: nothing can be written
    assert describe_model(tiny_bert_dir) == fresh
    assert not list(cache.glob("*.tmp"))  # no staged file left behind
