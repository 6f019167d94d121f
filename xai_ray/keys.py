"""Typed configuration keys: every value from YAML, flags or ``--set`` is checked against the type its
dataclass field declares and the range or choices declared here, before anything starts.

A type is a promise: ``trust_remote_code: bool`` takes ``true`` or ``false`` and nothing else (the
YAML string ``"false"`` is truthy in Python and would have let a model folder's code run); an
``int`` key refuses ``2.5``; a ``float`` key refuses ``nan`` and ``inf``. One leniency: YAML 1.1
reads ``2e-4`` and ``1e4`` as strings, so a number written that way is read as the number it spells
when the key is numeric (and, for an ``int`` key, only when it is whole).

Used by ``config.RunConfig`` and ``train.settings.FinetuneConfig`` (their ``__post_init__``) and by
``help-config``, which prints each key's type and accepted values from the same declarations.
The YAML every value comes in as (config files, ``--set``, report definitions) is read here too,
by ``PlainLoader``: plain values only, no aliases, numbers as written in decimal.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

import yaml


class ConfigError(ValueError):
    """A configuration value is wrong; the message says which and how to fix it."""


@dataclass(frozen=True)
class Rule:
    """What a key accepts beyond its type: a closed or half-open range, or a list of choices."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo itself excluded
    hi_open: bool = False  # hi itself excluded
    choices: tuple = ()
    nonempty: bool = False  # a string key that must not be empty (a path, a model, a column)

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        return "not empty" if self.nonempty else ""

    def holds(self, value) -> bool:
        if self.choices:
            return value in self.choices
        if isinstance(value, str):
            return bool(value.strip()) or not self.nonempty
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return self.hi is None or not (value > self.hi or (self.hi_open and value == self.hi))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def type_name(annotation: str) -> str:
    """``"int | None"`` -> ``"integer or null"``: how help-config and errors name a declared type."""
    words = {
        "bool": "true or false",
        "int": "integer",
        "float": "number",
        "str": "text",
        "None": "null",
        "dict": "mapping",
        "tuple[str, ...]": "list of names",
        "tuple[float, ...]": "list of numbers",
    }
    return " or ".join(words.get(part.strip(), part.strip()) for part in annotation.split("|"))


def check_all(instance, rules: dict[str, Rule]) -> None:
    """Coerce and check every field of the frozen dataclass ``instance`` in place."""
    for f in fields(instance):
        value = check(f.name, getattr(instance, f.name), str(f.type), rules.get(f.name))
        object.__setattr__(instance, f.name, value)


def check(name: str, value, annotation: str, rule: Rule | None = None):
    """``value`` as the declared ``annotation`` (a dataclass field's type, as text), or ConfigError."""
    kinds = [part.strip() for part in annotation.split("|")]
    value = _plain(value)
    if value is None:
        if "None" in kinds:
            return None
        raise ConfigError(f"{name} needs a value ({type_name(annotation)}); got null")
    if "str" in kinds and "int" not in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # a text key given a whole number takes its digits (--set run_id=123, as --run-id 123)
    for kind in kinds:
        converted = _as(kind, value)
        if converted is not _NO:
            break
    else:
        beyond = " (beyond any setting's range)" if isinstance(value, int) and abs(value) > LARGEST else ""
        raise ConfigError(f"{name} must be {_a(type_name(annotation))}{beyond}, got {_shown(value)}")
    if isinstance(converted, dict) and _has_non_finite(converted):
        # the manifest is JSON, which has no NaN or infinity: json.dumps wrote NaN, which jq and
        # JavaScript refuse to read
        raise ConfigError(f"{name} must hold finite numbers only (no .nan or .inf), got {_shown(converted)}")
    if rule is not None and rule.nonempty and isinstance(converted, str) and not converted.strip():
        raise ConfigError(f"{name} must not be empty")
    if rule is not None and not (isinstance(converted, tuple) or rule.holds(converted)):
        raise ConfigError(f"{name} must be {rule.describe()}, got {_shown(converted)}")
    return converted


_NO = object()  # "not of this kind"


def _plain(value):
    """A numpy scalar as the Python value it holds: a notebook's ``np.int64(10)`` (a DataFrame's
    ``len`` or a column's max) was refused as no integer, and ``np.bool_`` as no boolean."""
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind is not None and getattr(value, "ndim", None) == 0 and kind in "biuf":
        return value.item()
    return value


def _as(kind: str, value):
    if kind == "bool":
        return value if isinstance(value, bool) else _NO
    if isinstance(value, bool):  # True is an int in Python, never a number here
        return _NO
    if kind == "int":
        number = _number(value)
        if isinstance(number, int):
            return number
        return int(number) if number is not _NO and number.is_integer() else _NO
    if kind == "float":
        number = _number(value)
        return float(number) if number is not _NO else _NO
    if kind == "str":
        return value if isinstance(value, str) else _NO
    if kind == "dict":
        return _text_keys(value) if isinstance(value, dict) else _NO
    if kind.startswith("tuple["):
        return _sequence(kind, value)
    return _NO


LARGEST = 2**63 - 1  # a 64-bit signed integer's largest value


def _text_keys(value):
    """A mapping's keys as text, at every depth, as JSON will write them: YAML's ``{1: a, b: c}``
    mixes int and text keys, which the manifest's sorted JSON could not order (a finished run then
    failed to publish)."""
    if isinstance(value, dict):
        return {str(key): _text_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_text_keys(item) for item in value]
    return value


def _has_non_finite(value) -> bool:
    if isinstance(value, dict):
        return any(_has_non_finite(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(item) for item in value)
    return isinstance(value, float) and not math.isfinite(value)


# A numeral as text: ASCII digits only. Python's int() and float() also read "1_000" and other
# scripts' digits ("١٢"), which no config file means as a number.
NUMERAL = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def _number(value):
    """An int or finite float, from a number or from text YAML 1.1 left unread (``1e4``, ``2e-4``)."""
    if isinstance(value, str):
        text = value.strip()
        if not NUMERAL.fullmatch(text):
            return _NO
        value = float(text) if any(c in text for c in ".eE") else int(text)
    if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        return _NO
    if isinstance(value, int) and abs(value) > LARGEST:  # no setting counts that far (nor could torch or Arrow)
        return _NO
    return value


def _sequence(kind: str, value):
    items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        return _NO
    inner = kind[len("tuple[") :].split(",")[0].strip()
    out = tuple(_as(inner, item) for item in items)
    return _NO if any(item is _NO for item in out) else out


def _a(text: str) -> str:
    return ("an " if text[0] in "aeiou" else "a ") + text if not text.startswith(("true", "list")) else text


def _shown(value) -> str:
    kind = {str: "text", float: "number", int: "integer", bool: "boolean", list: "list", dict: "mapping"}
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"{text} ({kind.get(type(value), type(value).__name__)})"


class PlainLoader(yaml.SafeLoader):
    """YAML for configs and ``--set``: plain values, as written. No aliases (``*name``): a few hundred
    bytes of nested aliases expand to gigabytes, and one that names itself never ends. Numbers only
    in decimal: YAML 1.1 reads ``010`` as 8 (octal), ``1:00`` as 60 (base 60) and ``2026-01-01`` as a
    date; here the first two stay text (a number key reads ``010`` as 10, a text key keeps it) and a
    date is text."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"the alias *{event.anchor} is not allowed (write the value out)", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        """A mapping whose key is given twice is refused: PyYAML keeps the last one silently, so a
        config holding ``limit: 4`` then ``limit: 5`` ran with 5 and said nothing."""
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: PyYAML's own error names it
                    continue
                if first is not key_node.start_mark:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {key!r} is given twice (first on line {first.line + 1})",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep)


# Tags that build values no config holds (bytes, dates, sets, ordered pairs): refused as any other
# tag, rather than stored in a manifest as their text
PlainLoader.yaml_constructors = {
    tag: build
    for tag, build in yaml.SafeLoader.yaml_constructors.items()
    if tag not in {f"tag:yaml.org,2002:{kind}" for kind in ("binary", "timestamp", "set", "omap", "pairs")}
}
_YAML11_NUMBERS = {f"tag:yaml.org,2002:{kind}" for kind in ("int", "float", "timestamp")}
PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _YAML11_NUMBERS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
PlainLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789"))
PlainLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^[-+]?(?:[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
    ),
    list("-+0123456789."),
)


def plain_yaml(text: str):
    """``text`` read by ``PlainLoader`` (``yaml.YAMLError`` where it is not plain YAML)."""
    return yaml.load(text, Loader=PlainLoader)  # noqa: S506 (a SafeLoader: builds plain values only)


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (PyYAML's own text spans several lines, with
    the line quoted). A tag such as ``!!python/name:os.system`` is no plain value: safe_load builds none."""
    problem = getattr(err, "problem", None) or (str(err).splitlines() or [type(err).__name__])[0]
    mark = getattr(err, "problem_mark", None)
    if "could not determine a constructor for the tag" in problem:
        tag = problem.split("tag", 1)[1].strip(" '").replace("tag:yaml.org,2002:", "!!")
        problem = f"the tag {tag!r} is not allowed (plain values only: strings, numbers, booleans, lists, mappings)"
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem
