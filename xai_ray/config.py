"""Run configuration: one frozen dataclass, read from YAML, overridden by flags and ``--set``.

Precedence (lowest first): dataclass defaults < YAML file < command-line flags < ``--set key=value``.
The resolved config is written beside every run's outputs.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import yaml

from xai_ray.methods.base import HEAD_FUSIONS, RESIDUAL_MODES


class ConfigError(ValueError):
    """A configuration value is wrong; the message says which and how to fix it."""


@dataclass(frozen=True)
class RunConfig:
    # corpus
    data: str = "stanfordnlp/imdb"
    split: str = "test"
    text_column: str = "text"
    label_column: str = "label"
    id_column: str = "id"
    clean_html: bool = True
    limit: int | None = None
    seed: int = 0
    # model
    model: str = "textattack/bert-base-uncased-imdb"
    allow_pickle: bool = False
    trust_remote_code: bool = False
    max_length: int = 512
    # methods
    methods: tuple[str, ...] = ("raw", "rollout")
    residual: str = "half"
    head_fusion: str = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 1
    # per-head statistics (xai_ray.heads): the `heads` and `head_similarity` tables
    heads: bool = True
    heads_sample: int = 64  # documents whose heads are compared pairwise (Jensen-Shannon); 0: none
    heads_sample_rows: int = 128  # query rows per sampled document in that comparison
    # execution
    batch_size: int = 64  # documents handed to an actor at once
    max_tokens_per_batch: int = 8192  # padded tokens per forward pass (the memory knob)
    actors: int = 0  # 0: one per GPU, else one per two CPU cores
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0
    cpus_per_actor: float = 1.0
    defer_flow: bool | None = None  # None: flow runs as its own CPU stage only when actors hold GPUs
    # outputs
    store: str = "store"
    run_id: str | None = None
    report: bool = True
    top_k: int = 20
    part_rows: int = 256_000  # rows of the largest table slice per committed part (resume granularity)
    extra: dict = field(default_factory=dict)
    # faithfulness (--evaluate): perturbation metrics of every method on the scoring actors
    evaluate: bool = False
    evaluate_fractions: tuple[float, ...] = (0.05, 0.10, 0.20, 0.50)  # shares of tokens removed / kept
    evaluate_share: float = 1.0  # share of documents evaluated, picked by a hash of doc_id

    def __post_init__(self) -> None:
        from xai_ray.methods import REGISTRY

        methods = self.methods
        if isinstance(methods, str):
            methods = tuple(m.strip() for m in methods.split(",") if m.strip())
            object.__setattr__(self, "methods", methods)
        object.__setattr__(self, "methods", tuple(methods))
        if not self.methods:
            raise ConfigError("methods is empty: name at least one of " + ", ".join(sorted(REGISTRY)))
        for name in self.methods:
            if name not in REGISTRY:
                raise ConfigError(
                    f"unknown method {name!r} in methods; known methods: {', '.join(sorted(REGISTRY))}"
                )
        _check_choice("residual", self.residual, RESIDUAL_MODES)
        _check_choice("head_fusion", self.head_fusion, HEAD_FUSIONS)
        if not 0.0 <= self.discard_ratio < 1.0:
            raise ConfigError(f"discard_ratio must be in [0, 1), got {self.discard_ratio}")
        for name in ("max_length", "batch_size", "start_layer", "top_k", "max_tokens_per_batch", "part_rows"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_length < 3:
            raise ConfigError("max_length must leave room for [CLS], one token and [SEP] (>= 3)")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1 when given, got {self.limit}")
        if self.heads_sample < 0 or self.heads_sample_rows < 1:
            raise ConfigError("heads_sample must be >= 0 and heads_sample_rows >= 1, got "
                              f"{self.heads_sample} and {self.heads_sample_rows}")
        if self.actors < 0:
            raise ConfigError(f"actors must be >= 0 (0 picks automatically), got {self.actors}")
        self._check_evaluation()
        if self.run_id is not None and not _safe_name(self.run_id):
            raise ConfigError(
                f"run_id {self.run_id!r} may hold only letters, digits, '-', '_' and '.'"
            )

    def _check_evaluation(self) -> None:
        fractions = self.evaluate_fractions
        if isinstance(fractions, (int, float)):
            fractions = (fractions,)
        try:
            if isinstance(fractions, str):
                fractions = fractions.split(",")
            object.__setattr__(self, "evaluate_fractions", tuple(float(f) for f in fractions))
        except (TypeError, ValueError):
            raise ConfigError(f"evaluate_fractions must be a list of shares such as 0.05,0.1; got {fractions!r}") from None
        if not self.evaluate_fractions or not all(0.0 < f <= 1.0 for f in self.evaluate_fractions):
            raise ConfigError(f"evaluate_fractions must be shares in (0, 1], got {list(self.evaluate_fractions)}")
        if not 0.0 < self.evaluate_share <= 1.0:
            raise ConfigError(f"evaluate_share must be in (0, 1], got {self.evaluate_share}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["methods"] = list(self.methods)
        out["evaluate_fractions"] = list(self.evaluate_fractions)
        return out

    @property
    def attention_options(self) -> dict:
        return {
            "residual": self.residual,
            "head_fusion": self.head_fusion,
            "discard_ratio": self.discard_ratio,
            "start_layer": self.start_layer,
        }


def _safe_name(text: str) -> bool:
    return bool(text) and all(c.isalnum() or c in "-_." for c in text) and not text.startswith(".")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


FIELD_NAMES = tuple(f.name for f in fields(RunConfig))


def _check_keys(keys, where: str) -> None:
    for key in keys:
        if key not in FIELD_NAMES:
            close = difflib.get_close_matches(key, FIELD_NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {key!r} in {where}{hint}")


def parse_set(items: list[str] | None) -> dict:
    """``["a=1", "methods=raw,flow"]`` -> ``{"a": 1, "methods": "raw,flow"}`` (values parsed as YAML)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {str(path)!r} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys to values")
    return data


def resolve(config_path=None, flags: dict | None = None, sets: list[str] | None = None) -> RunConfig:
    """Merge YAML, flags (None values ignored) and ``--set`` overrides into a validated config."""
    merged: dict = {}
    if config_path:
        data = read_yaml(config_path)
        _check_keys(data, str(config_path))
        merged.update(data)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    _check_keys(flags, "flags")
    merged.update(flags)
    overrides = parse_set(sets)
    _check_keys(overrides, "--set")
    merged.update(overrides)
    try:
        return replace(RunConfig(), **merged)
    except TypeError as err:
        raise ConfigError(f"bad config value: {err}") from None
