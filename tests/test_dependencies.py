"""Every library the package imports is declared in pyproject.toml, so a fresh install of xai-ray
has it (one that only came along with another library may leave with that library's next release).
Read from the source with ``ast``; the import names mapped to distributions by the installed metadata."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def imported_modules() -> dict[str, str]:
    """Top-level name of every third-party module the package imports -> one file importing it."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "xai_ray").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "xai_ray" and top not in sys.stdlib_module_names:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def normalized(requirement: str) -> str:
    """``ray[default]>=2.50`` -> ``ray``; ``PyYAML`` -> ``pyyaml`` (PEP 503 names)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def undeclared(project: dict) -> list[str]:
    """Imported modules whose distribution ``project`` (pyproject's [project] table) declares nowhere
    (dependencies or an extra: an extra's library is imported only where it is asked for)."""
    declared = {normalized(r) for r in project["dependencies"]}
    declared |= {normalized(r) for extra in project.get("optional-dependencies", {}).values() for r in extra}
    distributions = packages_distributions()
    return [
        f"{module} (imported in {where})"
        for module, where in imported_modules().items()
        if not {normalized(d) for d in distributions.get(module, [module])} & declared
    ]


def test_every_imported_library_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not undeclared(project), "imported but not declared in pyproject.toml: " + ", ".join(undeclared(project))


def test_the_check_sees_an_import_that_only_came_along_with_another_library():
    """tqdm is installed with transformers; without its own line it would be found missing."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    without = {**project, "dependencies": [r for r in project["dependencies"] if normalized(r) != "tqdm"]}
    assert undeclared(without) == ["tqdm (imported in xai_ray/progress.py)"]
    assert normalized("ray[default,data,train]>=2.50") == "ray" and normalized("PyYAML>=6") == "pyyaml"
