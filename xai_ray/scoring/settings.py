"""What a scoring actor is told: a frozen, typed ``ScorerConfig``.

The scoring fields of the run's ``RunConfig`` (their defaults and checks live there, once) plus two
things the driver decides when it plans the run: the GPU share of each actor and which methods
are left to a CPU stage after it (``deferred_methods``). A plain mapping (a notebook, a test,
``cfg.to_dict()``) goes through ``RunConfig`` first, so it is checked by the same rules, and a
misspelt key is refused instead of silently falling back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from xai_ray.config import ConfigError, RunConfig
from xai_ray.methods import AttentionOptions

RUN_DEFAULTS = {f.name: f.default for f in fields(RunConfig)}
DECIDED = ("gpus_per_actor", "deferred_methods")  # settled by the driver, not by the user


@dataclass(frozen=True)
class ScorerConfig:
    # the model
    model: str = RUN_DEFAULTS["model"]
    allow_pickle: bool = RUN_DEFAULTS["allow_pickle"]
    trust_remote_code: bool = RUN_DEFAULTS["trust_remote_code"]
    seed: int = RUN_DEFAULTS["seed"]
    # inputs
    max_length: int = RUN_DEFAULTS["max_length"]
    long_text: str = RUN_DEFAULTS["long_text"]
    window_stride: int | None = RUN_DEFAULTS["window_stride"]
    max_tokens_per_batch: int = RUN_DEFAULTS["max_tokens_per_batch"]
    # methods and their options
    methods: tuple[str, ...] = RUN_DEFAULTS["methods"]
    residual: str = RUN_DEFAULTS["residual"]
    head_fusion: str = RUN_DEFAULTS["head_fusion"]
    discard_ratio: float = RUN_DEFAULTS["discard_ratio"]
    start_layer: int = RUN_DEFAULTS["start_layer"]
    target: str | int = RUN_DEFAULTS["target"]
    ig_steps: int = RUN_DEFAULTS["ig_steps"]
    heads: bool = RUN_DEFAULTS["heads"]
    heads_sample_rows: int = RUN_DEFAULTS["heads_sample_rows"]
    # faithfulness (--evaluate)
    evaluate: bool = RUN_DEFAULTS["evaluate"]
    evaluate_fractions: tuple[float, ...] = RUN_DEFAULTS["evaluate_fractions"]
    evaluate_share: float = RUN_DEFAULTS["evaluate_share"]
    # resources, and what the driver decided
    cpus_per_actor: float = RUN_DEFAULTS["cpus_per_actor"]
    gpus_per_actor: float = 0.0
    deferred_methods: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("methods", "evaluate_fractions", "deferred_methods"):
            object.__setattr__(self, name, tuple(getattr(self, name) or ()))
        unknown = set(self.deferred_methods) - set(self.methods)
        if unknown:
            raise ConfigError(f"deferred methods {sorted(unknown)} are not among the run's methods {self.methods}")

    @classmethod
    def of(cls, source: RunConfig | ScorerConfig | Mapping, **decided) -> ScorerConfig:
        """The scorer's settings from a run config, a mapping of run-config keys (checked as a
        ``RunConfig`` would be) or another ``ScorerConfig``; ``decided`` sets the driver's fields."""
        if isinstance(source, ScorerConfig):
            return replace(source, **decided)
        if isinstance(source, Mapping):
            unknown = sorted(set(source) - set(RUN_DEFAULTS) - set(DECIDED))
            if unknown:
                raise ConfigError(f"unknown scorer setting(s) {', '.join(unknown)}; see xai-ray help-config")
            decided = {k: source[k] for k in DECIDED if k in source} | decided
            source = RunConfig(**{k: v for k, v in source.items() if k in RUN_DEFAULTS and k not in DECIDED})
        values = {f.name: getattr(source, f.name) for f in fields(cls) if f.name not in DECIDED}
        gpus = decided.pop("gpus_per_actor", None)
        return cls(**values, gpus_per_actor=float(gpus or 0.0), **decided)

    def attention_options(self) -> AttentionOptions:
        """How the attention-based methods read the captured attention."""
        return AttentionOptions(
            residual=self.residual,
            head_fusion=self.head_fusion,
            discard_ratio=self.discard_ratio,
            start_layer=self.start_layer,
        )
