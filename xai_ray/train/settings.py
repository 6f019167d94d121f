"""``xai-ray finetune``'s settings: one frozen dataclass over the corpus source, read from YAML and
overridden by flags and ``--set`` (the run config's precedence), checked with one-sentence errors."""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, fields

from xai_ray.config import RULES as RUN_RULES
from xai_ray.config import ConfigError, CorpusSource, parse_set, read_yaml
from xai_ray.keys import Rule, check_all

TRUNCATIONS = ("head", "head_tail")
# Keys that may change between an interrupted run and its resumption without changing the job.
RESUMABLE_CHANGES = (
    "out",
    "resume",
    "keep_checkpoints",
    "log_every",
    "checkpoint_every",
    "max_failures",
    "fail_after_epoch",
    "workers",
    "gpus_per_worker",
    "cpus_per_worker",
    "eval_batch_size",
)


@dataclass(frozen=True)
class FinetuneConfig(CorpusSource):
    split: str = "train"  # the corpus fields are CorpusSource's; training reads the train split
    eval_fraction: float = 0.1
    # model
    base: str = "minilm"
    allow_pickle: bool = False
    trust_remote_code: bool = False
    max_length: int = 256
    truncation: str = "head_tail"  # long texts: first quarter + last tokens (head: first tokens only, as `run`)
    # optimisation
    epochs: int = 1
    batch_size: int = 16  # global: split across workers
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    head_lr_scale: float = 1.0  # the classifier head (and pooler) learns at lr x this
    bf16: bool | None = None  # None: bf16 autocast on GPU only
    eval_batch_size: int = 32
    # execution
    workers: int = 0  # 0: one per GPU, else one per `cpus_per_worker` CPUs
    gpus_per_worker: float | None = None  # None: 1 when the cluster has GPUs, else 0
    cpus_per_worker: float | None = None  # None: 1 CPU per worker on CPU clusters (see README)
    max_failures: int = 0  # worker failures Ray Train recovers from within one invocation
    log_every: int = 10
    checkpoint_every: int = 0  # steps; 0: at each epoch end only
    # outputs
    out: str | None = None
    resume: bool = True
    keep_checkpoints: bool = False
    fail_after_epoch: int | None = None  # testing hook: a worker raises after that epoch's checkpoint

    def __post_init__(self) -> None:
        check_all(self, RULES)  # every key's declared type (xai_ray.keys); YAML's 2e-4 reads as a number
        if not self.out:
            raise ConfigError("finetune needs an output folder: --out DIR")
        for name in ("epochs", "batch_size", "max_length", "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_length < 3:
            raise ConfigError("max_length must leave room for [CLS], one token and [SEP] (>= 3)")
        if self.truncation not in TRUNCATIONS:
            raise ConfigError(f"truncation must be one of {', '.join(TRUNCATIONS)}; got {self.truncation!r}")
        if not 0.0 < self.eval_fraction < 1.0:
            raise ConfigError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.lr <= 0 or self.head_lr_scale <= 0 or self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ConfigError("lr and head_lr_scale must be > 0, weight_decay and max_grad_norm >= 0")
        if self.limit is not None and self.limit < 2:
            raise ConfigError(f"limit must be >= 2 when given, got {self.limit}")
        if self.workers < 0 or self.checkpoint_every < 0 or self.max_failures < -1:
            raise ConfigError("workers and checkpoint_every must be >= 0, max_failures >= -1")

    def to_dict(self) -> dict:
        return asdict(self)


# The corpus keys accept what `run` accepts; the rest are checked in __post_init__.
RULES = {f.name: RUN_RULES[f.name] for f in fields(CorpusSource) if f.name in RUN_RULES} | {
    "limit": Rule(lo=2),
    "truncation": Rule(choices=TRUNCATIONS),
    "gpus_per_worker": Rule(lo=0.0, hi=64.0),
    "cpus_per_worker": Rule(lo=0.0, lo_open=True, hi=1024.0),
}
FIELD_NAMES = tuple(f.name for f in fields(FinetuneConfig))


def resolve(config_path=None, flags: dict | None = None, sets: list[str] | None = None) -> FinetuneConfig:
    """defaults < YAML (``--config``) < flags (None ignored) < ``--set key=value``, as for ``run``."""
    merged: dict = {}
    sources = [
        (read_yaml(config_path) if config_path else {}, str(config_path)),
        ({k: v for k, v in (flags or {}).items() if v is not None}, "flags"),
        (parse_set(sets), "--set"),
    ]
    for values, where in sources:
        for key in values:
            if key not in FIELD_NAMES:
                close = difflib.get_close_matches(key, FIELD_NAMES, n=1) if isinstance(key, str) else []
                raise ConfigError(
                    f"unknown finetune key {key!r} in {where}" + (f" (did you mean {close[0]!r}?)" if close else "")
                )
        merged.update(values)
    try:
        return FinetuneConfig(**merged)
    except TypeError as err:
        raise ConfigError(f"bad config value: {err}") from None
