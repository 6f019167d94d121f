"""Run configuration: one frozen dataclass, read from YAML, overridden by flags and ``--set``.

Precedence (lowest first): dataclass defaults < YAML file < command-line flags < ``--set key=value``.
The resolved config is written beside every run's outputs.

Over 300 lines: every run key's default, check and one-sentence error sit together.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import yaml

from xai_ray.keys import ConfigError, Rule, check_all, plain_yaml, yaml_problem
from xai_ray.methods.base import HEAD_FUSIONS, RESIDUAL_MODES, RETIRED_RESIDUAL

__all__ = ["ConfigError", "CorpusSource", "RunConfig", "resolve"]


# How a review longer than max_length reaches the model (xai_ray.scoring.segments has the rules).
LONG_TEXTS = ("auto", "head", "head_tail", "window")


@dataclass(frozen=True)
class CorpusSource:
    """Where the documents come from; shared by ``RunConfig`` and ``train.finetune.FinetuneConfig``."""

    data: str = "stanfordnlp/imdb"
    split: str = "test"
    text_column: str = "text"
    label_column: str = "label"
    id_column: str = "id"
    clean_html: bool = True
    limit: int | None = None
    seed: int = 0


@dataclass(frozen=True)
class RunConfig(CorpusSource):
    # model
    model: str = "textattack/bert-base-uncased-imdb"
    allow_pickle: bool = False
    trust_remote_code: bool = False
    max_length: int = 512
    long_text: str = "auto"  # reviews longer than max_length: auto, head, head_tail or window (see LONG_TEXTS)
    window_stride: int | None = None  # long_text=window: tokens between window starts; None: half a window
    # methods
    methods: tuple[str, ...] = ("raw", "rollout")
    residual: str = "half"
    head_fusion: str = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 1
    # class-specific methods (grad_rollout, attn_x_grad, input_x_gradient, integrated_gradients, lrp)
    target: str | int = "pred"  # the class they explain: pred, label, a class index or one of the model's label names
    ig_steps: int = 20  # integrated_gradients: Gauss-Legendre nodes along the path
    ig_tolerance: float = 0.01  # integrated_gradients: refine the path where completeness errs more; 0: never
    # per-head statistics (xai_ray.methods.heads): the `heads` and `head_similarity` tables
    heads: bool = True
    # Corpus means converge long before every review of a large corpus is counted: the statistics
    # (+14% to +28% of a CPU scoring stage when every review has them) come from a seeded sample.
    heads_docs: int = 500  # documents with per-head statistics (a seeded sample of the kept ones); 0: every one
    # The comparison costs about a forward pass per sampled document (every pair of heads, row by row).
    # Two disjoint samples of 16 draw maps that correlate 0.998 (32: 0.999; bench/head_sample.py).
    heads_sample: int = 16  # documents whose heads are compared pairwise (Jensen-Shannon); 0: none
    heads_sample_rows: int = 64  # query rows per sampled document in that comparison
    # execution
    batch_size: int = 64  # documents handed to an actor at once
    max_tokens_per_batch: int = 8192  # padded tokens per forward pass (the memory knob)
    actors: int = 0  # 0: one per GPU, else one per two CPU cores
    gpus_per_actor: float | None = None  # None: a share of a GPU where the cluster has GPUs (pool.gpu_share), else 0
    cpus_per_actor: float = 1.0
    defer_flow: bool | None = None  # None: flow runs as its own CPU stage only when actors hold GPUs
    driver_rows: int = 10_000  # a run selecting at most this many rows reads and screens them in the driver (data.held)
    # outputs
    store: str = "store"
    run_id: str | None = None
    report: bool = True
    top_k: int = 20
    part_rows: int = 256_000  # rows of the largest table slice per committed part (resume granularity)
    store_layout: int = 3  # 3: compact (store.scores_v3); 2: a word row apart, faster token scans
    shared_store: bool = False  # the store folder is mounted on every node: workers anywhere write parts
    extra: dict = field(default_factory=dict)
    # faithfulness (--evaluate): perturbation metrics of every method on the scoring actors
    evaluate: bool = False
    evaluate_fractions: tuple[float, ...] = (
        0.01,
        0.05,
        0.10,
        0.20,
        0.50,
    )  # ERASER scorer defaults (faithfulness.FRACTIONS)
    evaluate_share: float = 1.0  # share of documents evaluated, picked by a hash of doc_id
    # plausibility: agreement with human rationales (xai_ray.scoring.plausibility), rows of faithfulness
    rationales: str | None = None  # the corpus column holding each review's rationale; None: not measured
    rationale_units: str = "tokens"  # what a rationale's [start, end] pairs count: tokens or chars
    # exit status (cron, CI)
    max_error_share: float | None = None  # None: fail only when every document failed

    def __post_init__(self) -> None:
        from xai_ray.methods import REGISTRY

        if self.residual in RETIRED_RESIDUAL:
            raise ConfigError(RETIRED_RESIDUAL[self.residual])
        if isinstance(self.evaluate_fractions, (int, float)) and not isinstance(self.evaluate_fractions, bool):
            object.__setattr__(self, "evaluate_fractions", (self.evaluate_fractions,))
        check_all(self, RULES)  # every key's type and range (xai_ray.keys)
        for key in ("data", "store", "model"):  # a "~" in YAML or --set reaches no shell: expanded here, once
            value = getattr(self, key)
            if isinstance(value, str) and value.startswith("~"):
                object.__setattr__(self, key, os.path.expanduser(value))
        if not self.methods:
            raise ConfigError("methods is empty: name at least one of " + ", ".join(sorted(REGISTRY)))
        for name in self.methods:
            if name not in REGISTRY:
                raise ConfigError(f"unknown method {name!r} in methods; known methods: {', '.join(sorted(REGISTRY))}")
        twice = sorted({name for name in self.methods if self.methods.count(name) > 1})
        if twice:  # each method is a set of columns in the store: a second copy has nowhere to go
            raise ConfigError(f"methods names {', '.join(twice)} more than once: {', '.join(self.methods)}")
        check_target(self.target)
        if not self.evaluate_fractions or not all(0.005 <= f <= 1.0 for f in self.evaluate_fractions):
            raise ConfigError(  # named at two decimals: 0.001 would read @0.00, "nothing removed"
                f"evaluate_fractions must be shares in [0.005, 1] (metric names give two decimals), "
                f"got {list(self.evaluate_fractions)}"
            )
        named = [f"{f:.2f}" for f in self.evaluate_fractions]  # as the metric names spell them (comprehensiveness@0.10)
        if len(set(named)) < len(named):
            raise ConfigError(
                f"evaluate_fractions must differ at two decimals, as their metric names do; got {list(self.evaluate_fractions)}"
            )
        if self.window_stride is not None and not 1 <= self.window_stride <= self.max_length - 2:
            raise ConfigError(
                f"window_stride must be in [1, max_length - 2] = [1, {self.max_length - 2}], got {self.window_stride}"
            )
        if self.long_text == "window" and self.evaluate:
            raise ConfigError(
                "--evaluate perturbs one model input per review; use it with long_text head or head_tail, not window"
            )
        if self.run_id is not None and not _safe_name(self.run_id):
            raise ConfigError(
                f"run_id {self.run_id!r} may hold only letters, digits, '-', '_' and '.', and must not start with"
                " '-' or '.' (a command line would read it as a flag, a folder listing would hide it)"
            )
        if self.run_id is not None and len(self.run_id.encode()) > MAX_RUN_ID:  # a folder name holds 255 bytes
            raise ConfigError(
                f"run_id is {len(self.run_id.encode())} bytes long; at most {MAX_RUN_ID} fit a folder name"
            )

    def to_dict(self) -> dict:
        """Plain values (lists for tuples): what the manifest and the staged ``config.yaml`` hold."""
        out = asdict(self)
        out["methods"] = list(self.methods)
        out["evaluate_fractions"] = list(self.evaluate_fractions)
        return out

    @classmethod
    def from_dict(cls, saved: dict, **changes) -> RunConfig:
        """The run a manifest's ``config`` (or a staged ``config.yaml``) describes, checked by the same
        rules as a new one, with ``changes`` on top: every consumer of a written run (evaluate,
        explain --doc-id, resume, nightly) reads it back through here, never key by key.

        Keys a later version removed are dropped; the retired ``residual: add`` equals ``half``
        (``RETIRED_RESIDUAL``) and is read as ``half``, so older runs keep their meaning. A run
        saved before ``ig_tolerance`` existed never refined its path: it reads as 0."""
        known = {k: v for k, v in saved.items() if k in FIELD_NAMES}
        if known.get("residual") in RETIRED_RESIDUAL:
            known["residual"] = "half"
        known.setdefault("ig_tolerance", 0.0)
        return cls(**{**known, **changes})

    @classmethod
    def from_manifest(cls, manifest: dict, **changes) -> RunConfig:
        return cls.from_dict(manifest.get("config", {}), **changes)

    @property
    def attention_options(self) -> dict:
        return {
            "residual": self.residual,
            "head_fusion": self.head_fusion,
            "discard_ratio": self.discard_ratio,
            "start_layer": self.start_layer,
        }


# What each key accepts beyond its declared type (xai_ray.keys checks both, help-config prints both).
TEXT = Rule(nonempty=True)
RULES = {
    "data": TEXT,
    "split": TEXT,
    "text_column": TEXT,
    "label_column": TEXT,
    "id_column": TEXT,
    "limit": Rule(lo=1),
    "seed": Rule(lo=0, hi=2**32 - 1),
    "model": TEXT,
    "max_length": Rule(lo=3, hi=1_000_000),  # room for [CLS], one token and [SEP]
    "long_text": Rule(choices=LONG_TEXTS),
    "window_stride": Rule(lo=1),
    "residual": Rule(choices=RESIDUAL_MODES),
    "head_fusion": Rule(choices=HEAD_FUSIONS),
    "discard_ratio": Rule(lo=0.0, hi=1.0, hi_open=True),
    "start_layer": Rule(lo=1),
    "ig_steps": Rule(lo=1, hi=10_000),
    "ig_tolerance": Rule(lo=0.0),
    "heads_docs": Rule(lo=0),
    "heads_sample": Rule(lo=0),
    "heads_sample_rows": Rule(lo=1),
    "batch_size": Rule(lo=1, hi=1_000_000),
    "max_tokens_per_batch": Rule(lo=1),
    "actors": Rule(lo=0, hi=100_000),
    "gpus_per_actor": Rule(lo=0.0, hi=64.0),
    "cpus_per_actor": Rule(lo=0.0, lo_open=True, hi=1024.0),
    "driver_rows": Rule(lo=0),
    "store": TEXT,
    "top_k": Rule(lo=1, hi=100_000),
    "part_rows": Rule(lo=1),
    "store_layout": Rule(choices=(2, 3)),
    "evaluate_share": Rule(lo=0.0, lo_open=True, hi=1.0),
    "rationales": TEXT,
    "rationale_units": Rule(choices=("tokens", "chars")),
    "max_error_share": Rule(lo=0.0, hi=1.0),
}

TARGET_MODES = ("pred", "label")


PACKAGED_MODEL = "minilm"  # a name, not a path (model.loading): never a folder of the working directory


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """``cfg`` with a ``data`` or ``model`` naming a local file or folder made absolute. Ray's
    workers and actors read them in the folder Ray started in: after a notebook's ``os.chdir`` a
    relative path read another folder's corpus and model, while the driver described this one's."""
    changes = {"data": local_path(cfg.data)}
    if cfg.model != PACKAGED_MODEL:
        changes["model"] = local_path(cfg.model)
    return replace(cfg, **changes)


def local_path(name: str) -> str:
    """``name`` as an absolute path when it names a file or folder here, else as it is (a Hub id, a URI)."""
    if not isinstance(name, str) or "://" in name:
        return name
    path = os.path.expanduser(name)
    return os.path.abspath(path) if os.path.exists(path) else name


def check_target(target) -> None:
    """``target`` has a usable form (whether the model has that class is ``resolve_target``'s call)."""
    if isinstance(target, bool) or not isinstance(target, (str, int)) or (isinstance(target, int) and target < 0):
        raise ConfigError(f"target must be pred, label, a class index (0, 1, ...) or a label name; got {target!r}")
    if isinstance(target, str) and not target.strip():
        raise ConfigError("target is empty: use pred, label, a class index (0, 1, ...) or a label name")


def error_verdict(counts: dict, max_error_share: float | None) -> str | None:
    """One sentence when the failures should fail the job, else None.

    ``counts`` holds the run's ``docs`` (scored) and ``errors`` (documents that could not be scored);
    every input document is in exactly one of them.
    """
    docs, errors = int(counts.get("docs", 0)), int(counts.get("errors", 0))
    total = docs + errors
    if total and docs == 0:
        return f"every document failed: 0 of {total} scored, {errors} in errors"
    if max_error_share is not None and total and errors / total > max_error_share:
        return (
            f"{errors} of {total} documents failed ({errors / total:.1%}), more than --max-error-share "
            f"{max_error_share:.1%}; {docs} scored"
        )
    return None


def check_start_layer(start_layer: int, n_layers: int) -> None:
    """``start_layer`` against the model's layers, before anything is scored: a layer past the last
    would leave rollout and its kin without a single score."""
    if start_layer > n_layers:
        raise ConfigError(
            f"start_layer is {start_layer} but the model has {n_layers} layers: give a layer from 1 to {n_layers}"
        )


def resolve_target(target, labels: dict) -> str | int:
    """``pred`` or ``label`` as they are, or the index of the class a fixed ``target`` names (an
    index, or one of the model's label names ``labels``: {index: name}), checked against the model."""
    check_target(target)
    if target in TARGET_MODES:
        return target
    labels = {int(k): str(v) for k, v in labels.items()}
    if isinstance(target, int) or str(target).strip().isdigit():
        index = int(target)
        if index in labels:
            return index
    else:
        named = [i for i, name in labels.items() if name == target] or [
            i for i, name in labels.items() if name.lower() == str(target).strip().lower()
        ]
        if len(named) == 1:
            return named[0]
    classes = ", ".join(f"{i} ({name})" for i, name in sorted(labels.items()))
    raise ConfigError(
        f"target {target!r} is not a class of this model; use pred, label or one of its classes: {classes}"
    )


MAX_RUN_ID = 200  # "run_id=<id>" and "<id>.tmp"-style names must fit in 255 bytes


def _safe_name(text: str) -> bool:
    return bool(text) and all(c.isalnum() or c in "-_." for c in text) and text[0] not in ".-"


FIELD_NAMES = tuple(f.name for f in fields(RunConfig))


def _check_keys(keys, where: str) -> None:
    for key in keys:
        if key not in FIELD_NAMES:
            close = difflib.get_close_matches(key, FIELD_NAMES, n=1) if isinstance(key, str) else []  # YAML's `1: 2`
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r} in {where}{hint}")


def parse_set(items: list[str] | None) -> dict:
    """``["a=1", "methods=raw,flow"]`` -> ``{"a": 1, "methods": "raw,flow"}`` (values parsed as YAML)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = plain_yaml(value) if value.strip() else None
        except yaml.YAMLError as err:
            problem = str(getattr(err, "problem", None) or "not a YAML value").strip()
            raise ConfigError(f"--set {key.strip()}: {value!r} is not a plain YAML value ({problem})") from None
    return out


def read_yaml(path: str | Path, what: str = "config file") -> dict:
    """The mapping a YAML file holds, read by ``keys.PlainLoader``; ``what`` the file is, for the one
    sentence of ConfigError when it cannot be (missing, not UTF-8, not plain YAML, not a mapping)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a folder; name the YAML file itself")
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{what} {str(path)!r} is not UTF-8 text: byte 0x{raw[err.start]:02x} at byte {err.start}; save it as UTF-8"
        ) from None
    try:
        data = plain_yaml(text) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {str(path)!r} is not valid YAML: {yaml_problem(err)}") from None
    except RecursionError:
        raise ConfigError(f"{what} {str(path)!r} nests lists or mappings too deeply to be read") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {str(path)!r} must hold a mapping of keys to values")
    return data


def resolve(
    config_path=None, flags: dict | None = None, sets: list[str] | None = None, given_as: str = "flags"
) -> RunConfig:
    """Merge YAML, flags (None values ignored) and ``--set`` overrides into a validated config;
    ``given_as``: what the flags are to the user (a notebook's keywords), named in an error."""
    merged: dict = {}
    if config_path is not None and not isinstance(config_path, (str, Path)):
        raise ConfigError(
            f"config takes a YAML file's path, got a {type(config_path).__name__}; give settings as keywords (limit=2)"
        )
    if config_path:
        data = read_yaml(config_path)
        _check_keys(data, str(config_path))
        merged.update(data)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    _check_keys(flags, given_as)
    merged.update(flags)
    overrides = parse_set(sets)
    _check_keys(overrides, "--set")
    merged.update(overrides)
    try:
        return replace(RunConfig(), **merged)
    except TypeError as err:
        raise ConfigError(f"bad config value: {err}") from None
