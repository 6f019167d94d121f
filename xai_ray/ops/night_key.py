"""What makes two nights' scores of a document comparable: the nightly job's scoring key.

Nights of one key share a store (``ops.nightly``): the model's weights (its fingerprint), the
methods, the attention options and ``max_length``, and, only where they matter, the class explained,
integrated gradients' steps and how long reviews are cut, so runs made before those options existed
keep matching.
"""

from __future__ import annotations

from xai_ray.config import RunConfig
from xai_ray.scoring.segments import resolve_mode


def scoring_key(cfg: RunConfig, fingerprint: str | None = None) -> dict:
    """What makes two scores of a document comparable: the weights and the method options, from the
    run's typed settings (a manifest's through ``RunConfig.from_manifest``: see ``manifest_key``).
    Without ``fingerprint`` the model is loaded once here to take it (CPU, no Ray)."""
    if fingerprint is None:
        from xai_ray.model.loading import load_model

        loaded = load_model(
            cfg.model, allow_pickle=cfg.allow_pickle, trust_remote_code=cfg.trust_remote_code, seed=cfg.seed
        )
        fingerprint = loaded.info["fingerprint"]
    key = {
        "fingerprint": fingerprint,
        "methods": sorted(cfg.methods),
        "attention": cfg.attention_options,
        "max_length": cfg.max_length,
    }
    target = target_key(cfg.methods, cfg.target, cfg.ig_steps, cfg.ig_tolerance)
    return {**key, **long_text_key(resolve_mode(cfg.long_text, cfg.model), cfg.window_stride), **target}


def target_key(methods, target, ig_steps, ig_tolerance=0.0) -> dict:
    """The class explained (and integrated gradients' steps) enter the key only with class-specific
    methods, so runs of attention methods alone match runs made before these options existed."""
    from xai_ray.methods import REGISTRY

    if not any(REGISTRY[m].class_specific for m in methods if m in REGISTRY):
        return {}
    if "integrated_gradients" not in methods:
        return {"target": target}
    # a path refined by a tolerance gives other scores; 0 (never refined) keys as runs made before the option
    return {"target": target, "ig_steps": ig_steps, **({"ig_tolerance": ig_tolerance} if ig_tolerance else {})}


def long_text_key(mode: str | None, stride) -> dict:
    """Long reviews enter the key only when not cut at the head, so runs made before the choice existed match."""
    return {} if mode in (None, "head") else {"long_text": mode, "window_stride": stride}


def manifest_key(manifest: dict) -> dict:
    """The key of a published run: its saved settings read back as a ``RunConfig``, its fingerprint."""
    return scoring_key(RunConfig.from_manifest(manifest), manifest.get("model", {}).get("fingerprint"))
