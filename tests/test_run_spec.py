"""One definition of a run: a ``RunConfig`` written into a manifest (JSON) or a staged config.yaml
reads back as the same ``RunConfig``, every field; consumers of a written run read it through
``RunConfig.from_manifest``."""

from __future__ import annotations

import json
from dataclasses import MISSING, fields

import yaml

from xai_ray.config import RunConfig, resolve
from xai_ray.ops.night_key import manifest_key, scoring_key

# A value other than the default for every key (a new key fails the test until it is listed here).
CHANGED = {
    "data": "reviews.csv",
    "split": "train",
    "text_column": "body",
    "label_column": "stars",
    "id_column": "key",
    "clean_html": False,
    "limit": 123,
    "seed": 7,
    "model": "some/model",
    "allow_pickle": True,
    "trust_remote_code": True,
    "max_length": 128,
    "long_text": "head_tail",
    "window_stride": 32,
    "methods": ("raw", "flow", "grad_rollout"),
    "residual": "none",
    "head_fusion": "max",
    "discard_ratio": 0.25,
    "start_layer": 2,
    "target": "label",
    "ig_steps": 16,
    "ig_tolerance": 0.05,
    "heads": False,
    "heads_docs": 40,
    "heads_sample": 8,
    "heads_sample_rows": 16,
    "batch_size": 9,
    "max_tokens_per_batch": 4096,
    "actors": 3,
    "gpus_per_actor": 0.5,
    "cpus_per_actor": 2.0,
    "defer_flow": True,
    "driver_rows": 10,
    "store": "elsewhere",
    "run_id": "night-1",
    "report": False,
    "top_k": 7,
    "part_rows": 1000,
    "store_layout": 2,
    "shared_store": True,
    "extra": {"store_uri": "s3://bucket/x", "note": [1, 2]},
    "evaluate": True,
    "evaluate_fractions": (0.1, 0.3),
    "evaluate_share": 0.5,
    "rationales": "evidence",
    "rationale_units": "chars",
    "max_error_share": 0.2,
}


def _changed() -> RunConfig:
    cfg = RunConfig(**CHANGED)
    for f in fields(RunConfig):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        assert f.name in CHANGED, f"list a changed value for {f.name} in CHANGED"
        assert getattr(cfg, f.name) != default, f"{f.name}: the test value must differ from the default"
    return cfg


def test_manifest_round_trip_is_identity_for_every_field():
    cfg = _changed()
    manifest = json.loads(json.dumps({"config": cfg.to_dict()}))  # what a published run holds
    assert RunConfig.from_manifest(manifest) == cfg


def test_staged_yaml_round_trip_is_identity_for_every_field(tmp_path):
    cfg = _changed()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))  # what --resume reads
    assert resolve(path) == cfg


def test_an_older_manifest_reads_with_its_meaning_kept():
    saved = {"model": "m", "residual": "add", "a_key_of_an_older_version": 1, "methods": ["raw"]}
    cfg = RunConfig.from_dict(saved)
    assert cfg.residual == "half"  # add was half under another name
    assert cfg.methods == ("raw",) and cfg.model == "m"
    assert cfg.ig_tolerance == 0.0  # saved before the option: its path was never refined


def test_changes_on_top_are_checked_like_any_value():
    cfg = RunConfig.from_manifest({"config": {"model": "m"}}, evaluate=True, evaluate_share=0.25)
    assert cfg.evaluate and cfg.evaluate_share == 0.25
    try:
        RunConfig.from_manifest({"config": {"model": "m", "long_text": "window"}}, evaluate=True)
    except ValueError as err:
        assert "window" in str(err)
    else:
        raise AssertionError("evaluate on a windowed run must be refused")


def test_the_nightly_key_of_a_manifest_is_the_key_of_its_config():
    cfg = RunConfig(model="m", methods=("raw", "grad_rollout"), target=1, max_length=64, long_text="head")
    manifest = json.loads(json.dumps({"config": cfg.to_dict(), "model": {"fingerprint": "abc"}}))
    assert manifest_key(manifest) == scoring_key(cfg, "abc")
    other = RunConfig(model="m", methods=("raw", "grad_rollout"), target=0, max_length=64, long_text="head")
    assert manifest_key(manifest) != scoring_key(other, "abc")  # another class explained: not comparable


def test_a_run_staged_before_ig_tolerance_resumes_without_refining(tmp_path):
    """Its parts' integrated gradients were never refined: resumed with the new default, the rest
    were, and the manifest said every score was (33 of 60 reviews missed by more than 0.01)."""
    from xai_ray.pipeline.resume import resume_config
    from xai_ray.store import layout

    staged = layout.staged_config(tmp_path, "old")
    staged.parent.mkdir(parents=True)
    settings = {"model": "minilm", "methods": ["raw", "integrated_gradients"], "store": str(tmp_path), "run_id": "old"}
    staged.write_text(yaml.safe_dump(settings))
    assert resume_config(str(tmp_path), "old").ig_tolerance == 0.0
    staged.write_text(yaml.safe_dump({**settings, "ig_tolerance": 0.05}))
    assert resume_config(str(tmp_path), "old").ig_tolerance == 0.05
