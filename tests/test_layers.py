"""Imports run one way: a module may import from its own package and from the layers below it,
never from a layer above. Read from the source with ``ast`` (nothing is imported), so a new arrow
that runs back up fails here before it becomes a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xai_ray"

# Top to bottom; units on one line are peers and may not import each other.
LAYERS = [
    ["cli"],  # main, and its commands: scoring (run, evaluate, finetune), reading, jobs; flags
    ["api"],  # the notebook API: run, open_store, explain, charts
    ["ops"],
    ["pipeline", "train"],
    ["report"],
    ["query"],
    ["scoring"],
    ["data", "model", "store"],
    ["config_help"],  # what each run key means, by section (help-config, the reference page)
    ["config", "runtime"],
    # progress bars and log routing; sub-token -> word alignment; typed config keys; a trimmed local Ray head
    ["progress", "words", "keys", "local_ray"],
    ["terminal"],  # what a terminal is shown of data (progress's log lines too)
    ["methods"],
]
RANK = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}
FACADE = "__init__"  # xai_ray/__init__.py: the public API may gather from anywhere


def unit_of(module: str) -> str:
    """``xai_ray.store.writer`` -> ``store``; ``xai_ray.pipeline`` -> ``pipeline``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else FACADE


def imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "xai_ray":
            names = [a.name for a in node.names] if node.module == "xai_ray" else [None]
            found += [(f"xai_ray.{n}" if n else node.module, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("xai_ray.")]
    return found


def module_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = [p for p in relative.parts if p != "__init__"]
    return ".".join(parts) if len(parts) > 1 or path.name != "__init__.py" else "xai_ray"


def test_every_unit_has_a_layer():
    units = {unit_of(module_of(p)) for p in PACKAGE.rglob("*.py")} - {FACADE}
    assert units <= set(RANK), f"place {sorted(units - set(RANK))} in LAYERS"


def test_imports_run_one_way():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = unit_of(module_of(path))
        if source == FACADE:
            continue
        for target_module, line in imports(path):
            target = unit_of(target_module)
            if target == source or target_module == "xai_ray.__version__":  # the version: a constant, no arrow
                continue
            if target not in RANK or RANK[target] <= RANK[source]:  # a name of the facade, or a layer not below
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} {source} -> {target}")
    assert not wrong, "imports that run back up or sideways:\n" + "\n".join(wrong)


def test_the_check_sees_an_arrow_that_runs_back_up(tmp_path):
    """The checker itself: an import from a higher layer is found."""
    module = tmp_path / "bad.py"
    module.write_text("from xai_ray.pipeline import run\nimport xai_ray.report.page\nfrom xai_ray import ops\n")
    targets = [unit_of(m) for m, _ in imports(module)]
    assert targets == ["pipeline", "report", "ops"]
    assert all(RANK[t] < RANK["store"] for t in targets)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (anywhere in the file, inside functions too); ``from
    package import module`` counts as an arrow to that module, not to the package."""
    modules = {module_of(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "xai_ray":
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("xai_ray.")]
            for target in targets:
                if (
                    target in modules
                    and target != module
                    and not (
                        isinstance(node, ast.ImportFrom)
                        and target == node.module
                        and f"{target}.{node.names[0].name}" in modules
                    )
                ):
                    graph[module].add(target)
    return graph


def test_no_module_imports_itself_through_others():
    """No cycle at all, inside packages included: an import hidden in a function or at the bottom
    of a file to dodge a circle is still a circle."""
    import networkx as nx

    cycles = list(nx.simple_cycles(nx.DiGraph([(a, b) for a, targets in import_graph().items() for b in targets])))
    assert cycles == [], cycles
