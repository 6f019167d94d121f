"""The plain-torch classifiers (``model.encoders``, loaded by ``model.lean``) against transformers'
own classes on the same folders: the same weights and fingerprint, the same tokens, the same
scores for every method, and an actor that never imports transformers' model code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xai_ray.methods import REGISTRY
from xai_ray.model.files import ModelError
from xai_ray.model.loading import load_model

FAMILIES = ["bert", "distilbert", "roberta"]
TEXTS = [
    "A good film, with a <br /> bad ending... really!",
    "bad",
    "It's the best [SEP] movie <s> I've seen in years; the acting was superb and the plot moved.",
    "   spaced   out \u00e9t\u00e9 caf\u00e9 na\u00efve",
]


def both(folder: str, **kwargs):
    return load_model(folder, **kwargs), load_model(folder, lean=False, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lean_classifier_holds_transformers_weights_names_and_fingerprint(tiny_model_factory, family):
    lean, full = both(tiny_model_factory(family))
    assert type(lean.model).__name__ == "SequenceClassifier"
    assert type(full.model).__name__ != "SequenceClassifier"
    assert lean.info == full.info  # the fingerprint hashes every parameter by name
    lean_state, full_state = lean.model.state_dict(), full.model.state_dict()
    assert sorted(lean_state) == sorted(full_state)
    assert all(np.array_equal(lean_state[k].numpy(), full_state[k].numpy()) for k in full_state)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lean_tokenizer_encodes_as_the_family_class(tiny_model_factory, family):
    lean, full = both(tiny_model_factory(family))
    assert lean.tokenizer.model_input_names == full.tokenizer.model_input_names
    assert lean.tokenizer.all_special_ids == full.tokenizer.all_special_ids
    assert lean.tokenizer.model_max_length == full.tokenizer.model_max_length
    options = {"truncation": True, "max_length": 24, "padding": True, "return_offsets_mapping": True}
    a, b = lean.tokenizer(TEXTS, **options), full.tokenizer(TEXTS, **options)
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in b)
    assert [a.word_ids(i) for i in range(len(TEXTS))] == [b.word_ids(i) for i in range(len(TEXTS))]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_scores_the_same_on_both_classes(tiny_model_factory, family):
    """The whole scorer on a padded batch (RoBERTa's positions count real tokens only), every
    registered method: lean against transformers, to float32 rounding."""
    from xai_ray.scoring.actor import Scorer

    lean, full = both(tiny_model_factory(family))
    config = {"model": tiny_model_factory(family), "max_length": 32, "methods": sorted(REGISTRY), "ig_steps": 4}
    batch = {"doc_id": [f"d{i}" for i in range(len(TEXTS))], "text": TEXTS, "label": [1, 0, 1, 0]}
    a = Scorer(config, loaded=lean)(batch).to_pylist()
    b = Scorer(config, loaded=full)(batch).to_pylist()
    assert [row["error"] for row in a] == [row["error"] for row in b] == [None] * len(TEXTS)
    for row_a, row_b in zip(a, b):
        for key, value in row_b.items():
            if key in ("seconds", "pid"):  # how long it took, and where
                continue
            if isinstance(value, float) or (isinstance(value, list) and value and isinstance(value[0], float)):
                np.testing.assert_allclose(row_a[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
            else:
                assert row_a[key] == value, key


def _edit_json(file: Path, change: dict | None) -> None:
    """Merge ``change`` into the JSON file, or (None) remove the file."""
    if change is None:
        file.unlink()
    else:
        file.write_text(json.dumps({**json.loads(file.read_text()), **change}))


@pytest.mark.parametrize(
    "family, file, change",
    [
        ("bert", "tokenizer_config.json", {"do_lower_case": False}),  # the family's class rebuilds its normaliser
        ("distilbert", "tokenizer_config.json", {"do_lower_case": False}),
        ("roberta", "tokenizer_config.json", {"add_prefix_space": True}),
        ("bert", "tokenizer_config.json", None),  # the family's special tokens all the same
        ("roberta", "tokenizer_config.json", None),
        ("bert", "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast"}),
    ],
)
def test_the_tokenizer_is_the_one_autotokenizer_builds_from_the_folders_settings(
    tiny_model_factory, tmp_path, family, file, change
):
    import torch

    folder = Path(_rewrite(tiny_model_factory(family), tmp_path / "m", {}))
    _edit_json(folder / file, change)
    lean, full = both(str(folder))
    assert type(lean.model).__name__ == "SequenceClassifier"
    assert type(lean.tokenizer).__name__ == "LeanTokenizer"
    assert lean.tokenizer.all_special_ids == full.tokenizer.all_special_ids
    a, b = (side.tokenizer(TEXTS, padding=True, return_tensors="pt") for side in (lean, full))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)
    with torch.inference_mode():
        assert torch.equal(lean.model(**dict(b)).logits, full.model(**dict(b)).logits)


def test_a_checkpoint_saved_without_the_encoders_prefix_keeps_its_trained_head(tiny_model_factory, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = Path(_rewrite(tiny_model_factory("bert"), tmp_path / "m", {}))
    weights = load_file(folder / "model.safetensors")
    save_file({k.removeprefix("bert."): v for k, v in weights.items()}, folder / "model.safetensors")
    lean, full = both(str(folder))
    assert type(lean.model).__name__ == "SequenceClassifier" and lean.info == full.info
    assert np.array_equal(lean.model.classifier.weight.detach().numpy(), weights["classifier.weight"].numpy())


def test_the_lean_forward_refuses_what_it_would_ignore(tiny_model_factory):
    import torch

    lean = load_model(tiny_model_factory("bert"))
    encoding = dict(lean.tokenizer(TEXTS[:1], return_tensors="pt"))
    with pytest.raises(TypeError, match="position_ids"):
        lean.model(**encoding, position_ids=torch.zeros_like(encoding["input_ids"]))


def test_the_packaged_minilm_loads_lean_with_the_same_seeded_head():
    """Its checkpoint has no classifier: the lean path draws it as transformers does."""
    import torch

    lean, full = both("minilm", seed=3)
    assert type(lean.model).__name__ == "SequenceClassifier" and lean.info == full.info
    encoding = dict(full.tokenizer(TEXTS, padding=True, return_tensors="pt"))
    with torch.inference_mode():
        assert torch.equal(lean.model(**encoding).logits, full.model(**encoding).logits)
    assert load_model("minilm", seed=4).info["fingerprint"] != lean.info["fingerprint"]


def _rewrite(folder: str, target: Path, change: dict) -> str:
    import shutil

    shutil.copytree(folder, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **change}))
    return str(target)


@pytest.mark.parametrize(
    "family, change",
    [
        ("bert", {"hidden_act": "gelu_new"}),  # an activation the lean classes do not reproduce bit for bit
        ("bert", {"position_embedding_type": "relative_key"}),
        ("distilbert", {"sinusoidal_pos_embds": True}),
    ],
)
def test_a_folder_the_lean_classes_do_not_reproduce_loads_through_transformers(
    tiny_model_factory, tmp_path, family, change
):
    folder = _rewrite(tiny_model_factory(family), tmp_path / "m", change)
    loaded = load_model(folder)
    assert type(loaded.model).__name__ != "SequenceClassifier"


@pytest.mark.parametrize(
    "family, change",
    [
        ("bert", {"num_attention_heads": 3}),
        ("bert", {"num_attention_heads": 32}),
        ("bert", {"hidden_size": None}),
        ("roberta", {"pad_token_id": 1.5}),  # RoBERTa's positions count from its padding id
    ],
)
def test_sizes_the_lean_classes_cannot_build_get_transformers_refusal(tiny_model_factory, tmp_path, family, change):
    folder = _rewrite(tiny_model_factory(family), tmp_path / "m", change)
    with pytest.raises(ModelError, match="cannot be (loaded|read)"):
        load_model(folder)


def test_a_regression_head_is_refused_naming_the_folder(tiny_model_factory, tmp_path):
    folder = _rewrite(tiny_model_factory("bert"), tmp_path / "m", {"problem_type": "regression"})
    with pytest.raises(ModelError, match=f"model {folder!r} has a single output"):
        load_model(folder)


def test_a_checkpoint_missing_more_than_the_last_layer_loads_through_transformers(tiny_model_factory, tmp_path):
    """A DistilBERT base checkpoint lacks pre_classifier and classifier: transformers draws both."""
    from safetensors.torch import load_file, save_file

    folder = Path(_rewrite(tiny_model_factory("distilbert"), tmp_path / "m", {}))
    weights = load_file(folder / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "classifier" not in k}, folder / "model.safetensors")
    assert type(load_model(str(folder)).model).__name__ != "SequenceClassifier"


def test_an_actor_scoring_minilm_imports_no_transformers_once_its_tokenizer_is_kept(tmp_path):
    """What the lean path is for: the actor's start (bench/README.md). Its first start reads the
    tokenizer through transformers' tokenizer class (never its model code) and keeps it; the next
    imports nothing of transformers."""
    code = (
        "import sys\n"
        "from xai_ray.scoring.actor import Scorer\n"
        "rows = Scorer({'model': 'minilm', 'max_length': 64, 'methods': ['raw', 'rollout', 'grad_rollout']})"
        "({'doc_id': ['a'], 'text': ['a fine film'], 'label': [1]})\n"
        "assert rows.column('error').to_pylist() == [None]\n"
        "print(sorted(m for m in sys.modules if m in ('transformers', 'transformers.modeling_utils')"
        " or m.startswith('transformers.models.') and '.modeling_' in m))\n"
    )  # model code: the modeling utilities and a family's modeling_*; not transformers 5.17's GGUF reader
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    first, second = (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        for _ in range(2)
    )
    assert first.returncode == second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    assert first.stdout.strip() == "['transformers']"  # the tokenizer's class, no model code
    assert second.stdout.strip() == "[]"
    assert len(list((tmp_path / "xai-ray" / "tokenizers").glob("*.json"))) == 1


CALLS = [
    {},
    {"add_special_tokens": False},
    {"add_special_tokens": False, "return_offsets_mapping": True},
    {"truncation": True, "max_length": 9},
    {"truncation": True, "max_length": 9, "padding": True, "return_offsets_mapping": True},
    {"padding": True, "return_tensors": "pt"},
]


@pytest.mark.parametrize("family", [*FAMILIES, "minilm"])
def test_the_kept_tokenizer_answers_every_call_as_transformers_class(tiny_model_factory, tmp_path, monkeypatch, family):
    """A review alone or in a list, with every option the scorer and the explain page pass; the
    state read on the first start (a miss) and read back on the next (a hit) alike."""
    import torch

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = "minilm" if family == "minilm" else tiny_model_factory(family)
    full = load_model(folder, lean=False).tokenizer
    for attempt in ("miss", "hit"):
        lean = load_model(folder).tokenizer
        assert type(lean).__name__ == "LeanTokenizer", attempt
        for name in ("pad_token_id", "cls_token_id", "sep_token_id", "mask_token_id", "all_special_ids", "cls_token"):
            assert getattr(lean, name) == getattr(full, name), name
        assert lean.model_max_length == full.model_max_length and len(lean) == len(full)
        ids = full(TEXTS[2])["input_ids"]
        assert lean.convert_ids_to_tokens(ids) == full.convert_ids_to_tokens(ids)
        tokens = full.convert_ids_to_tokens(ids) + ["not-a-token-of-it"]
        assert lean.convert_tokens_to_ids(tokens) == full.convert_tokens_to_ids(tokens)
        for token in tokens[1:2] + tokens[-1:]:  # one token alone: one id, as transformers
            assert lean.convert_tokens_to_ids(token) == full.convert_tokens_to_ids(token)
        assert lean.convert_ids_to_tokens(ids[1]) == full.convert_ids_to_tokens(ids[1])
        for call in CALLS:
            for text in (TEXTS[2], TEXTS, [""]):
                if call.get("return_tensors") and isinstance(text, str):
                    text = [text]
                a, b = lean(text, **call), full(text, **call)
                assert list(a.keys()) == list(b.keys()), call
                for key in b:
                    same = torch.equal(a[key], b[key]) if call.get("return_tensors") else a[key] == b[key]
                    assert same, (attempt, call, key)
                many = not isinstance(text, str)
                assert [a.word_ids(i) for i in range(len(text) if many else 1)] == [
                    b.word_ids(i) for i in range(len(text) if many else 1)
                ]


def test_an_unreadable_kept_tokenizer_is_read_again(tiny_model_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tiny_model_factory("bert")
    expected = load_model(folder).tokenizer(TEXTS)["input_ids"]
    (kept,) = (tmp_path / "xai-ray" / "tokenizers").glob("*.json")
    kept.write_text('{"backend": ')
    assert load_model(folder).tokenizer(TEXTS)["input_ids"] == expected
    assert json.loads(kept.read_text())["backend"]


def test_the_lean_classifier_says_what_it_is_not(tiny_model_factory):
    """Inference only: training it is refused (no dropout: it would silently differ from
    transformers'); it names its folder as transformers does; it pickles with its tokenizer's
    reading of markers written in a text."""
    import pickle

    folder = tiny_model_factory("bert")
    lean = load_model(folder)
    with pytest.raises(RuntimeError, match="lean=False"):
        lean.model.train()
    assert not lean.model.eval().training
    assert lean.model.config.name_or_path == folder == load_model(folder, lean=False).model.config.name_or_path
    copy = pickle.loads(pickle.dumps(lean))
    text = "good [SEP] film"
    assert copy.tokenizer(text)["input_ids"] == lean.tokenizer(text)["input_ids"]
    assert copy.tokenizer.backend_tokenizer.encode_special_tokens
    assert copy.info == lean.info
