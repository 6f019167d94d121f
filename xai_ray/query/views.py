"""The ``tokens`` and ``words`` views over runs of either store layout, as one SQL text each.

A run in store layout 2 (``store.scores_v2``) keeps a part's tokens and words once, with a float
column per method x layer; a run of layout 1 (written before layout 2) has a file per method x
layer. The view is the union of one select per method x layer the runs hold (``view_tokens.sql``
with the slice filled in: a filter on method and layer leaves DuckDB one branch, which reads the
id columns and that slice's column) and, when layout-1 runs are present, their select
(``view_tokens_v1.sql``). Same columns in the same order, so the view's rows are the same whichever
layout wrote them (``tests/test_store_layouts.py``). Slice names come from the runs' manifests and
are checked against ``schemas.SLICE`` before they enter SQL.
"""

from __future__ import annotations

from pathlib import Path

from xai_ray.query.limits import QueryError
from xai_ray.store import layout as store_layout
from xai_ray.store.schemas import SLICE
from xai_ray.store.scores_v2 import TOKEN_TABLE, WORD_TABLE

FOLDERS = {  # a view -> its folders in layout 1 and in layout 2
    "tokens": ("tokens", TOKEN_TABLE),
    "words": ("words", WORD_TABLE),
}


def run_layouts(run_dirs: list[Path]) -> dict[Path, dict]:
    """Each run folder's layout and slices (``{"layout": 2, "slices": ["raw:1", ...]}``)."""
    found = {}
    for folder in run_dirs:
        manifest = store_layout.read_manifest(folder / store_layout.MANIFEST)
        version = store_layout.run_layout(manifest, folder)
        slices = (manifest.get("slices") or []) if version > 1 else []
        if not isinstance(slices, list):
            slices = [slices]
        bad = [name for name in slices if not isinstance(name, str) or not SLICE.match(f"score:{name}")]
        if bad:
            raise QueryError(
                f"the manifest of {folder.name!r} lists a slice {bad[0]!r} that is not METHOD:LAYER; "
                "restore it or move the run folder out of the store"
            )
        found[folder] = {"layout": version, "slices": slices}
    return found


def view_sql(view: str, runs: dict[Path, dict], files: dict[str, list[str]], sql_text) -> str | None:
    """The select of ``view`` (tokens or words) over ``runs`` (``run_layouts``), or None when no run
    holds a file of it. ``files`` maps a folder name (``tokens``, ``token_scores``) to its files,
    bound as ``files_<folder>``; ``sql_text`` reads a named query."""
    legacy, sliced = FOLDERS[view]
    slices = sorted({name for info in runs.values() for name in info["slices"]}, key=_order)
    branches = []
    if files.get(sliced) and slices:
        template = sql_text(f"view_{view}")
        for name in slices:
            method, layer = name.split(":")
            branch = template.replace("@slice@", name).replace("@method@", method).replace("@layer@", layer)
            branches.append(f"({branch})")
    if files.get(legacy):
        branches.append(f"({sql_text(f'view_{view}_v1')})")
    return "\nunion all\n".join(branches) if branches else None


def folder_files(root: Path, runs: dict[Path, dict], folder: str) -> list[str]:
    """The Parquet files of ``folder`` in runs of the layout that writes it."""
    wanted = 1 if folder in ("tokens", "words") else 2
    return sorted(
        str(f)
        for run, info in runs.items()
        if info["layout"] == wanted
        for f in store_layout.store_files(root, run / folder, "*.parquet")
    )


def manifest_slices(manifest: dict) -> list[tuple[str, int]]:
    """The (method, layer) slices a run may hold: its manifest's ``slices`` (layout 2), else every
    method x layer of its model (layout 1; a slice the method leaves out simply has no rows)."""
    if manifest.get("slices"):
        return [(name.split(":")[0], int(name.split(":")[1])) for name in manifest["slices"]]
    layers = int((manifest.get("model") or {}).get("n_layers") or 0)
    methods = (manifest.get("config") or {}).get("methods") or []
    return [(method, layer) for method in methods for layer in range(1, layers + 1)]


def _order(name: str) -> tuple[str, int]:
    method, layer = name.split(":")
    return method, int(layer)
