"""What a scoring actor is told: a frozen, typed ``ScorerConfig``.

The scoring fields of the run's ``RunConfig`` (their defaults and checks live there, once) plus two
things the driver decides when it plans the run: the GPU share of each actor and which methods
are left to a CPU stage after it (``deferred_methods``). A plain mapping (a notebook, a test,
``cfg.to_dict()``) goes through ``RunConfig`` first, so it is checked by the same rules, and a
misspelt key is refused instead of silently falling back to a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from xai_ray.config import ConfigError, RunConfig
from xai_ray.methods import AttentionOptions

RUN_KEYS = {f.name for f in fields(RunConfig)}
DECIDED = ("gpus_per_actor", "deferred_methods")  # settled by the driver, not by the user


@dataclass(frozen=True)
class ScorerConfig:
    """The run's own ``RunConfig`` (the one definition of a run: no field declared twice) and what
    the driver decided for the actors."""

    run: RunConfig = field(default_factory=RunConfig)
    gpus_per_actor: float = 0.0  # the GPU share each actor holds (the run's key may say "auto": None)
    deferred_methods: tuple[str, ...] = ()  # left to a CPU stage after the actors (flow, on GPU actors)

    def __post_init__(self) -> None:
        object.__setattr__(self, "deferred_methods", tuple(self.deferred_methods or ()))
        unknown = set(self.deferred_methods) - set(self.run.methods)
        if unknown:
            raise ConfigError(f"deferred methods {sorted(unknown)} are not among the run's methods {self.run.methods}")

    @classmethod
    def of(cls, source: RunConfig | ScorerConfig | Mapping, **decided) -> ScorerConfig:
        """The scorer's settings from a run config, a mapping of run-config keys (checked as a
        ``RunConfig`` would be) or another ``ScorerConfig``; ``decided`` sets the driver's fields."""
        if isinstance(source, ScorerConfig):
            return replace(source, **decided)
        if isinstance(source, Mapping):
            unknown = sorted(set(source) - RUN_KEYS - set(DECIDED))
            if unknown:
                raise ConfigError(f"unknown scorer setting(s) {', '.join(unknown)}; see xai-ray help-config")
            decided = {k: source[k] for k in DECIDED if k in source} | decided
            source = RunConfig(**{k: v for k, v in source.items() if k in RUN_KEYS and k not in DECIDED})
        gpus = decided.pop("gpus_per_actor", None)
        return cls(run=source, gpus_per_actor=float(gpus or 0.0), **decided)

    def attention_options(self) -> AttentionOptions:
        """How the attention-based methods read the captured attention."""
        return AttentionOptions(**self.run.attention_options)
