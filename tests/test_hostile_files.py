"""Model folders and config files that cannot be used (issue 29): each is one sentence and exit
status 2 before anything loads or runs, never a traceback; a deep model is explained, not refused.
Generated as weights-file faults x loader (``describe_model``, ``explain``) and config files x ``run``.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from xai_ray import cli
from xai_ray.model.loading import ModelError, describe_model


@pytest.fixture()
def folder(tmp_path, tiny_bert_dir):
    copy = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, copy)
    return copy


def _garbage(folder, tmp_path):
    (folder / "model.safetensors").write_bytes(os.urandom(4096))


def _truncated(folder, tmp_path):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _empty(folder, tmp_path):
    (folder / "model.safetensors").write_bytes(b"")


def _link_out(folder, tmp_path):
    outside = tmp_path / "elsewhere.safetensors"
    (folder / "model.safetensors").rename(outside)
    (folder / "model.safetensors").symlink_to(outside)


def _link_dangling(folder, tmp_path):
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(tmp_path / "gone.safetensors")


def _index_outside(folder, tmp_path):
    (folder / "model.safetensors").rename(tmp_path / "shard.safetensors")
    index = {"metadata": {}, "weight_map": {"bert.pooler.dense.weight": "../shard.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


MODEL_FAULTS = {
    "garbage": (_garbage, "model.safetensors is not a safetensors file that can be read"),
    "truncated": (_truncated, "model.safetensors is not a safetensors file that can be read"),
    "empty": (_empty, "model.safetensors is not a safetensors file that can be read"),
    "link out": (_link_out, "model.safetensors is a link to"),
    "dangling": (_link_dangling, "which does not exist"),
    "index outside": (_index_outside, "names '../shard.safetensors', which is no file of the folder"),
}


@pytest.mark.parametrize("fault", MODEL_FAULTS)
def test_a_broken_weights_file_is_one_sentence_before_anything_loads(folder, tmp_path, capsys, fault):
    make, expected = MODEL_FAULTS[fault]
    make(folder, tmp_path)
    with pytest.raises(ModelError, match=expected.replace("(", r"\(").replace(".", r"\.")):
        describe_model(str(folder))
    out = tmp_path / "page.html"
    status = cli.main(["explain", "a good film", "--model", str(folder), "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and expected in err and "Traceback" not in err, err
    assert not out.exists()
    if fault == "link out":
        assert "outside the folder" in err


def test_links_inside_the_folder_or_into_the_hub_cache_blobs_load(folder, tmp_path):
    (folder / "weights").mkdir()
    (folder / "model.safetensors").rename(folder / "weights" / "real.safetensors")
    (folder / "model.safetensors").symlink_to(folder / "weights" / "real.safetensors")
    assert describe_model(str(folder))["n_layers"] == 2
    repo = tmp_path / "models--me--tiny"  # the Hugging Face cache: snapshots/<rev>/file -> ../../blobs/<sha>
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in folder.iterdir():
        if file.is_file() and not file.is_symlink():
            shutil.copy(file, repo / "blobs" / file.name)
            (snapshot / file.name).symlink_to(f"../../blobs/{file.name}")
    shutil.copy(folder / "weights" / "real.safetensors", repo / "blobs" / "w")
    (snapshot / "model.safetensors").symlink_to("../../blobs/w")
    assert describe_model(str(snapshot))["n_layers"] == 2


def _set_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_weights_that_do_not_fit_their_config_are_one_sentence(folder, tmp_path, capsys):
    _set_config(folder, hidden_size=32)
    status = cli.main(["explain", "a good film", "--model", str(folder), "--out", str(tmp_path / "p.html")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1, err
    assert "weights do not have the shapes its config.json gives" in err and not (tmp_path / "p.html").exists()


def test_a_48_layer_model_is_explained(folder, tmp_path, capsys):
    # 48 layers x 16 heads x 9 statistics: 6,912 rows in the heads chart, past altair's 5,000
    _set_config(folder, num_hidden_layers=48, num_attention_heads=16)
    out = tmp_path / "p.html"
    status = cli.main(["explain", "a good film", "--model", str(folder), "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    assert "<td>48 x 16</td>" in out.read_text()


# ---------------------------------------------------------------------------- config files

CONFIGS = {
    "non-utf8": (b"limit: 5  # caf\xe9\n", "is not UTF-8 text: byte 0xe9 at byte 15; save it as UTF-8"),
    "python name": (b"limit: !!python/name:os.system\n", "the tag '!!python/name:os.system' is not allowed"),
    "python apply": (b"limit: !!python/object/apply:os.system ['touch PWNED']\n", "is not allowed"),
    "local tag": (b"limit: !mine 3\n", "the tag '!mine' is not allowed"),
    "alias": (b"limit: *nope\n", "the alias *nope is not allowed (write the value out) (line 1, column 8)"),
    "unclosed": (b"methods: [raw, rollout\n", "(line 2, column 1)"),
    "deep": (b"limit: " + b"[" * 50_000 + b"\n", "nests lists or mappings too deeply"),
}


@pytest.mark.parametrize("case", CONFIGS)
def test_a_config_file_that_is_no_plain_yaml_is_one_sentence(tmp_path, capsys, monkeypatch, case):
    data, expected = CONFIGS[case]
    config = tmp_path / "job.yaml"
    config.write_bytes(data)
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    status = cli.main(["run", "--config", str(config), "--data", "x.parquet", "--store", str(store)])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert err.startswith(f"xai-ray: config file {str(config)!r} ")
    assert not (tmp_path / "PWNED").exists() and not store.exists()
