"""The report definition: which sections, in which order, with which word statistics
(``reports/default.yaml``, or ``--definition PATH``), read over ``DEFAULTS`` and checked."""

from __future__ import annotations

import copy
from pathlib import Path

from xai_ray.config import ConfigError, read_yaml
from xai_ray.query import wordstats

# Every section a definition may name, in the default order (report.sections.BUILDERS has one builder each).
SECTIONS = (
    "summary",
    "headline",
    "explorer",
    "per_method",
    "per_class",
    "contrast",
    "layers",
    "highlights",
    "agreement",
    "faithfulness",
    "heads",
    "since_last_night",
)
DEFAULT_DEFINITION = Path(__file__).resolve().parents[2] / "reports" / "default.yaml"
# The same values as reports/default.yaml (a test keeps them equal), for installs without it.
DEFAULTS = {
    "k": 20,
    "stat": "lift",
    "min_docs": "auto",
    "min_count": 1,
    "exclude": ["punct"],
    "main_method": "auto",
    "sections": list(SECTIONS),
    "examples": {"min_tokens": 20, "pick": "shortest", "max_words": 60},
    "highlight": {"methods": ["raw", "rollout", "flow"], "layer": "last"},
    "agreement": {"bins": 20, "max_docs": 2000},
}


def load_definition(path: str | Path | None = None) -> dict:
    """The report definition at ``path`` (default: reports/default.yaml) over ``DEFAULTS``, checked."""
    definition = copy.deepcopy(DEFAULTS)
    source = Path(path) if path else DEFAULT_DEFINITION
    given = read_yaml(source, "report definition") if path or source.is_file() else {}
    for key, value in given.items():
        if key not in DEFAULTS:
            raise ConfigError(f"report definition: unknown key {key!r}; known: {', '.join(DEFAULTS)}")
        if isinstance(DEFAULTS[key], dict):
            if not isinstance(value, dict) or set(value) - set(DEFAULTS[key]):
                raise ConfigError(f"report definition: {key!r} takes the keys {', '.join(DEFAULTS[key])}")
            definition[key].update(value)
        else:
            definition[key] = value
    _check(definition)
    return definition


MAX_K = 1000  # words per chart, as `report --k` takes them


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # YAML's true is no count


def _check(d: dict) -> None:
    if not isinstance(d["sections"], list) or not all(isinstance(s, str) for s in d["sections"]):
        raise ConfigError("report definition: sections must be a list of section names")
    unknown = [s for s in d["sections"] if s not in SECTIONS]
    if unknown:
        raise ConfigError(f"report definition: unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    twice = sorted({s for s in d["sections"] if d["sections"].count(s) > 1})
    if twice:  # one page anchor per section: the navigation's links went to the first
        raise ConfigError(f"report definition: sections {twice} are listed twice")
    if not (_whole(d["k"]) and 1 <= d["k"] <= MAX_K):
        raise ConfigError(f"report definition: k must be a whole number in [1, {MAX_K}] (as --k)")
    if d["min_count"] != "auto" and not (_whole(d["min_count"]) and d["min_count"] >= 1):
        raise ConfigError("report definition: min_count must be a positive integer")
    if d["min_docs"] != "auto" and not (_whole(d["min_docs"]) and d["min_docs"] >= 1):
        raise ConfigError("report definition: min_docs must be 'auto' or a positive integer")
    try:
        wordstats.check_stat(d["stat"])
        wordstats.parse_exclude(d["exclude"] if isinstance(d["exclude"], (list, str)) else [d["exclude"]])
    except wordstats.WordStatsError as err:
        raise ConfigError(f"report definition: {err}".replace("--", "")) from None
    if d["examples"]["pick"] not in ("shortest", "confident"):
        raise ConfigError("report definition: examples.pick must be 'shortest' or 'confident'")
    if d["highlight"]["layer"] != "last" and not (_whole(d["highlight"]["layer"]) and d["highlight"]["layer"] >= 1):
        raise ConfigError("report definition: highlight.layer must be 'last' or a layer number (1 = the first)")
    counts = {  # key -> (value, least) whole numbers the sections' queries and charts take
        "examples.min_tokens": (d["examples"]["min_tokens"], 0),
        "examples.max_words": (d["examples"]["max_words"], 1),
        "agreement.bins": (d["agreement"]["bins"], 1),
        "agreement.max_docs": (d["agreement"]["max_docs"], 1),
    }
    for key, (value, least) in counts.items():
        if not (_whole(value) and value >= least):
            raise ConfigError(f"report definition: {key} must be a whole number >= {least}, got {value!r}")
