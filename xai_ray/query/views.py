"""The ``tokens`` and ``words`` views over runs of every store layout, as one SQL text each.

A run in store layout 3 (``store.scores_v3``) keeps a part's tokens once, a word on its first
token, with float columns per method x layer; layout 2 (``store.scores_v2``) kept tokens and words
in two such tables; layout 1 (written before layout 2) has a file per method x layer. Each view
is the union of one select per method x layer and source (``view_tokens.sql`` with the slice
filled in: a filter on method and layer leaves DuckDB one branch, which reads the id columns and
that slice's columns) and, when layout-1 runs are present, their select (``view_tokens_v1.sql``).
Same columns in the same order, so the view's rows are the same whichever layout wrote them
(``tests/test_store_layouts.py``). Slice names come from the runs' manifests and are checked
against ``schemas.SLICE`` before they enter SQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xai_ray.query.limits import QueryError
from xai_ray.query.run_files import check_table_totals, part_columns, recorded
from xai_ray.store import layout as store_layout
from xai_ray.store.schemas import SLICE
from xai_ray.store.scores_v2 import TOKEN_TABLE, WORD_TABLE


@dataclass(frozen=True)
class Source:
    """Where a view's rows of some layouts are: their folder, the variable its files are bound to
    (``files_<name>``) and the named query that selects them (per slice, or once)."""

    name: str
    folder: str
    layouts: tuple[int, ...]
    query: str
    per_slice: bool = True


SOURCES = {
    "tokens": (
        Source("tokens", "tokens", (1,), "view_tokens_v1", per_slice=False),
        Source("token_scores", TOKEN_TABLE, (2,), "view_tokens"),
        Source("token_rows", TOKEN_TABLE, (3,), "view_tokens_v3"),  # a token's score where no word's is
    ),
    "words": (
        Source("words", "words", (1,), "view_words_v1", per_slice=False),
        Source("word_scores", WORD_TABLE, (2,), "view_words"),
        Source("word_rows", TOKEN_TABLE, (3,), "view_words_v3"),  # layout 3: words on their tokens' rows
    ),
}
# A slice's parts, read by name: union_by_name only for files no part record describes (view_sql).
# The run id stays text (``20261127`` is an id, not a number) by reading every partition value as
# text: naming its type (``hive_types``) cost each select a tenth of a millisecond to bind, and a
# view binds one select per slice (12 for MiniLM raw+rollout: bench/README, store_layout.py).
SCAN = (
    "read_parquet(getvariable('@files@'), hive_partitioning = true, union_by_name = @by_name@, "
    "hive_types_autocast = false)"
)
# layout 3's share of a word: its raw score (the score on its row) / its document's divisor
DERIVED_SHARE = '"score:@slice@" / "divisor:@slice@"'


def run_layouts(run_dirs: list[Path]) -> dict[Path, dict]:
    """Each run folder's layout, slices and kept shares (``{"layout": 3, "slices": ["raw:1", ...],
    "shares": []}``)."""
    found = {}
    for folder in run_dirs:
        manifest = store_layout.read_manifest(folder / store_layout.MANIFEST)
        version = store_layout.run_layout(manifest, folder)
        found[folder] = {
            "layout": version,
            "slices": _slice_names(manifest, "slices", folder) if version > 1 else [],
            "shares": _slice_names(manifest, "shares", folder) if version > 2 else [],
            "parts": part_columns(folder, version, (manifest.get("counts") or {}).get("docs")),
        }
        _check_slices(folder, found[folder])
        check_table_totals(folder, manifest, found[folder])
    return found


def _check_slices(folder: Path, info: dict) -> None:
    """Refuse a run whose parts' records hold a slice (or kept share) its manifest does not list:
    the views make a branch per listed slice only, so that slice's rows would be left out without
    a word (a manifest edited by hand, or ``raw:01`` for ``raw:1``)."""
    for key, at in (("slices", 0), ("shares", 1)):
        listed = set(info[key])
        held = {name for described in info["parts"].values() if described for name in described[at]}
        missing = sorted(held - listed)
        if info["layout"] > 1 + at and missing:
            raise QueryError(
                f"the manifest of {folder.name!r} does not list {missing[0]!r} under {key!r}, which its parts' "
                "records hold, so its rows would be left out; restore the manifest or move the run folder out of "
                "the store"
            )


def _slice_names(manifest: dict, key: str, folder: Path) -> list[str]:
    names = manifest.get(key) or []
    if not isinstance(names, list):
        names = [names]
    bad = [name for name in names if not isinstance(name, str) or not SLICE.match(f"score:{name}")]
    if bad:
        raise QueryError(
            f"the manifest of {folder.name!r} lists a slice {bad[0]!r} under {key!r} that is not METHOD:LAYER; "
            "restore it or move the run folder out of the store"
        )
    return names


def view_sql(view: str, runs: dict[Path, dict], files: dict[str, list[str]], sql_text) -> tuple[str | None, dict]:
    """The select of ``view`` (tokens or words) over ``runs`` (``run_layouts``), or None when no run
    holds a file of it, and the file lists its branches read, by variable (bound with ``SET
    VARIABLE``). ``files`` maps a source's name (``SOURCES``) to its files; ``sql_text`` reads a
    named query.

    A slice's branch reads only the files whose part's record lists that slice, so DuckDB matches
    columns by name without ``union_by_name`` (which opens every file's footer when the view is
    bound, once per branch: most of a small query's time). Files no record describes (a run
    copied without its ``_parts``) are read as before, with ``union_by_name``."""
    branches, bound = [], {}
    for source in SOURCES[view]:
        found = files.get(source.name)
        if not found:
            continue
        if not source.per_slice:
            bound[f"files_{source.name}"] = found
            branches.append(f"({sql_text(source.query)})")
            continue
        held = {run: info for run, info in runs.items() if info["layout"] in source.layouts}
        slices = sorted({name for info in held.values() for name in info["slices"]}, key=_order)
        template = sql_text(source.query)
        for index, name in enumerate(slices):
            for (described, shared), group in _groups(found, held, name).items():
                variable = f"files_{source.name}_{index}_{int(described)}{int(shared)}"
                bound[variable] = group
                share = f'coalesce("share:@slice@", {DERIVED_SHARE})' if shared else DERIVED_SHARE
                method, layer = name.split(":")
                branch = template.replace("@scan@", SCAN).replace("@share@", share).replace("@files@", variable)
                branch = branch.replace("@by_name@", "false" if described else "true")
                branch = branch.replace("@slice@", name).replace("@method@", method).replace("@layer@", layer)
                branches.append(f"({branch})")
    return ("\nunion all\n".join(branches) if branches else None), bound


def _groups(files: list[str], runs: dict[Path, dict], name: str) -> dict[tuple[bool, bool], list[str]]:
    """The files that may hold slice ``name``, by (described by a part record, with a share column)."""
    groups: dict[tuple[bool, bool], list[str]] = {}
    for run, info in runs.items():
        if name not in info["slices"]:
            continue
        prefix = str(run) + "/"
        for path in files:
            if not path.startswith(prefix):
                continue
            part = info["parts"].get(path[len(prefix) :])
            if part is None:  # no record says what it holds (folder_files kept it): any slice, or none
                groups.setdefault((False, name in info["shares"]), []).append(path)
            elif name in part[0]:
                groups.setdefault((True, name in part[1]), []).append(path)
    return groups


def folder_files(root: Path, runs: dict[Path, dict], source: Source) -> list[str]:
    """The Parquet files of ``source``: its folder in the runs of its layouts (``recorded``)."""
    return sorted(
        str(f)
        for run, info in runs.items()
        if info["layout"] in source.layouts
        for f in store_layout.store_files(root, run / source.folder, "*.parquet")
        if recorded(run, info, f)
    )


def manifest_slices(manifest: dict) -> list[tuple[str, int]]:
    """The (method, layer) slices a run may hold: its manifest's ``slices`` (layouts 2 and 3), else
    every method x layer of its model (layout 1; a slice the method leaves out simply has no rows)."""
    if manifest.get("slices"):
        return [(name.split(":")[0], int(name.split(":")[1])) for name in manifest["slices"]]
    layers = int((manifest.get("model") or {}).get("n_layers") or 0)
    methods = (manifest.get("config") or {}).get("methods") or []
    return [(method, layer) for method in methods for layer in range(1, layers + 1)]


def _order(name: str) -> tuple[str, int]:
    method, layer = name.split(":")
    return method, int(layer)
