"""Whether a model type can be explained is asked of its transformers class once per transformers
version and kept in the user's cache folder: later runs answer without importing the class's
modeling code, and a cached answer is the class's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import transformers
from transformers import BertConfig, DebertaV2Config

from xai_ray.model.compatibility import backend_compatible
from xai_ray.model.files import ModelError
from xai_ray.model.loading import describe_model


def _cache(folder):
    return folder / "xai-ray" / "backend-compatible.json"


def test_the_answer_is_the_classes_own_and_is_kept_per_version_type_and_class(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert backend_compatible(BertConfig()) is True
    assert backend_compatible(DebertaV2Config()) is False  # its attention bypasses the interface
    version = transformers.__version__
    assert json.loads(_cache(tmp_path).read_text()) == {
        f"{version} bert BertForSequenceClassification": True,
        f"{version} deberta-v2 DebertaV2ForSequenceClassification": False,
    }


def test_a_kept_answer_is_used_and_another_versions_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _cache(tmp_path).parent.mkdir(parents=True)
    version = transformers.__version__
    _cache(tmp_path).write_text(
        json.dumps(
            {
                f"{version} bert BertForSequenceClassification": False,
                "0.0.1 roberta RobertaForSequenceClassification": False,
            }
        )
    )
    assert backend_compatible(BertConfig()) is False  # the kept answer, whatever the class says
    from transformers import RobertaConfig

    assert backend_compatible(RobertaConfig()) is True  # another version's answer is not this one's


def test_an_unreadable_or_unwritable_cache_only_costs_the_import(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _cache(tmp_path).parent.mkdir(parents=True)
    _cache(tmp_path).write_text("{not json")
    assert backend_compatible(BertConfig()) is True
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a folder that cannot be made
    assert backend_compatible(BertConfig()) is True


def test_a_type_without_a_text_classification_class_is_refused(tmp_path, monkeypatch):
    from transformers import CLIPVisionConfig

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(KeyError):
        backend_compatible(CLIPVisionConfig())


def test_with_the_answer_kept_the_driver_describes_a_model_without_its_modeling_code(tiny_bert_dir, tmp_path):
    """A fresh process: the first description asks the class (modeling_bert imported), the second
    answers from the cache (never imported)."""
    probe = (
        "import sys; from xai_ray.model.loading import describe_model; "
        f"describe_model({str(tiny_bert_dir)!r}); "
        "print('transformers.models.bert.modeling_bert' in sys.modules)"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    first = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    second = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert first.stdout.split()[-1] == "True" and second.stdout.split()[-1] == "False"
    assert describe_model(str(tiny_bert_dir))["model_type"] == "bert"


def test_a_kept_refusal_still_refuses_in_one_sentence(tmp_path, monkeypatch, tiny_bert_dir):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _cache(tmp_path).parent.mkdir(parents=True)
    _cache(tmp_path).write_text(json.dumps({f"{transformers.__version__} bert BertForSequenceClassification": False}))
    with pytest.raises(ModelError, match="does not go through transformers' attention interface"):
        describe_model(str(tiny_bert_dir))
