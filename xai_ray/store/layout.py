"""Where everything of a store lives: the only module that spells a path inside a store.

Layout (private; the SQL views in ``query`` are the public interface)::

    STORE/runs/run_id=<id>/manifest.json
    STORE/runs/run_id=<id>/docs/part-<n>.parquet
    STORE/runs/run_id=<id>/errors/part-<n>.parquet
    STORE/runs/run_id=<id>/token_scores/part-<n>.parquet  (a row per token, its word on its first token,
                                                           columns per method x layer)
    STORE/runs/run_id=<id>/word_scores/part-<n>.parquet   (store layout 2 also: a row per word)
    STORE/runs/run_id=<id>/tokens/method=<m>/layer=<l>/part-<n>.parquet  (store layout 1, instead)
    STORE/runs/run_id=<id>/words/method=<m>/layer=<l>/part-<n>.parquet   (store layout 1, instead)
    STORE/runs/run_id=<id>/_parts/part-<n>.json  (which documents each part holds)
    STORE/runs/run_id=<id>/faithfulness/part-<n>.parquet   (runs with --evaluate)
    STORE/runs/run_id=<id>/heads/part-whole.parquet, head_similarity/part-whole.parquet (when gathered)
    STORE/runs/run_id=<id>/aggregates/<name>.parquet       (the aggregate stage's small results)
    STORE/runs/run_id=<id>/report.html
    STORE/_staging/run_id=<id>/...            (a run being written; never read by the views)
    STORE/_staging/run_id=<id>/config.yaml    (the resolved config: what ``--resume`` reads)
    STORE/reports/YYYY-MM-DD/report.html, nightly.json  (nightly reports, and what made each)
    STORE/reports/latest -> YYYY-MM-DD       (the newest night; swapped in as reports/.latest.tmp)
    STORE/logs/<run id>.log                   (what Ray, setuptools and warnings said during the run)
    STORE/.nightly.lock
"""

from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path

from xai_ray.store import StoreError

MANIFEST = "manifest.json"
REPORT = "report.html"
CONFIG = "config.yaml"
NIGHT_RECORD = "nightly.json"
LATEST = "latest"
RUN_PREFIX = "run_id="
NIGHTLY_LOCK = ".nightly.lock"
NIGHTLY_PREFIX = "nightly-"  # the nightly job's run ids (nightly-YYYY-MM-DD): no other run takes one


def runs_dir(store: str | Path) -> Path:
    return Path(store) / "runs"


def run_dir(store: str | Path, run_id: str) -> Path:
    return runs_dir(store) / f"{RUN_PREFIX}{run_id}"


def staging_dir(store: str | Path, run_id: str) -> Path:
    return Path(store) / "_staging" / f"{RUN_PREFIX}{run_id}"


def manifest_path(store: str | Path, run_id: str) -> Path:
    return run_dir(store, run_id) / MANIFEST


def staged_config(store: str | Path, run_id: str) -> Path:
    """The resolved config of a run being written (``xai-ray run --resume`` reads it)."""
    return staging_dir(store, run_id) / CONFIG


def report_path(store: str | Path, run_id: str) -> Path:
    return run_dir(store, run_id) / REPORT


def is_published(store: str | Path, run_id: str) -> bool:
    """A run is published once its folder holds its manifest (written last, moved in by one rename)."""
    return manifest_path(store, run_id).is_file()


def run_folders(store: str | Path) -> list[Path]:
    """Folders of published runs, in no particular order (a linked run folder or manifest is none,
    nor is a name that is not UTF-8: no run id is one, and DuckDB cannot be handed it). A run
    folder renamed by hand to hold ``%`` or ``=`` is refused: DuckDB reads the run's name from the
    folder's, decoding ``%2d`` as ``-`` (the views would name the run otherwise than ``runs``)."""
    found = [
        folder
        for folder in runs_dir(store).glob(f"{RUN_PREFIX}*")
        if utf8(folder.name) and (folder / MANIFEST).is_file() and inside(store, folder / MANIFEST)
    ]
    for folder in found:
        if any(mark in run_id_of(folder) for mark in "%="):
            raise StoreError(
                f"run folder {str(folder)!r} holds a name no run is given ('%' and '=' are read as escapes by "
                "the store's SQL engine); rename it with letters, digits, '-', '_' and '.' only"
            )
    return found


def unlisted_runs(store: str | Path) -> list[Path]:
    """Run folders that ``run_folders`` leaves out for want of their manifest (deleted, a copy cut
    short before it: rsync copies it after the tables, or a link): no query, report or nightly union
    reads them, which a reader must say rather than answer short. A run is published with its
    manifest in one rename, so none is ever seen half-published."""
    return sorted(
        folder
        for folder in runs_dir(store).glob(f"{RUN_PREFIX}*")
        if folder.is_dir()
        and utf8(folder.name)
        and not ((folder / MANIFEST).is_file() and inside(store, folder / MANIFEST))
    )


def unlisted_why(folder: Path) -> str:
    """Why a run folder of ``unlisted_runs`` is read by nobody, and what to do: every reader and
    command that meets one says this sentence."""
    manifest = folder / MANIFEST
    what = "is a symbolic link, which is never followed" if manifest.is_symlink() else "is missing"
    return (
        f"its folder's {MANIFEST} {what} (deleted, or a copy cut short before it), so no query, report, topk "
        f"or nightly sees its rows; restore it from a copy, or move {folder} out of the store"
    )


def utf8(name: str) -> bool:
    """Whether a file name read from the disk is UTF-8 (Python keeps other bytes as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_folders(store: str | Path) -> None:
    """Refuse a store kept below a folder whose name holds ``=``. DuckDB reads every ``key=value``
    folder of a part's path as a column of the views (hive partitioning, which names each part's
    run): under ``/lake/dt=2024-01-01/`` every view gained a ``dt`` column, under ``label=7/``
    every document's label read 7, under ``run_id=x/`` every run was named x. Deriving the run
    from each file's path instead made every query 7-9 ms slower, so such a store is refused in
    one sentence rather than misread."""
    root = Path(os.path.abspath(store))
    named = [part for part in root.resolve().parts if "=" in part]  # a link on the way resolved, the rest as named
    if named:
        raise StoreError(
            f"store {str(store)!r} lies below a folder named {named[0]!r}: the store's SQL engine would read "
            "that key=value name as a column of every view; keep the store in folders without '=' in their names"
        )


def inside(store: str | Path, path: str | Path) -> bool:
    """``path`` is itself, inside ``store``: no symbolic link between the store's folder and it.

    What a link points at (a file outside the store, or another of its files) is never read as a
    file of the store. The store's own folder may be a link: the user named it.
    """
    root, path = Path(os.path.abspath(store)), Path(os.path.abspath(path))
    if not path.is_relative_to(root):
        return False
    return path.resolve() == root.resolve() / path.relative_to(root)


def store_files(store: str | Path, folder: str | Path, pattern: str = "*") -> list[Path]:
    """The regular files under ``folder`` of ``store`` whose names match ``pattern``, sorted,
    leaving out every symbolic link and all that lies below a linked folder, and names that are
    not UTF-8 (no part is named so; one a record names is then reported missing)."""
    found, pending = [], [Path(folder)] if Path(folder).is_dir() and inside(store, folder) else []
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:  # the kind of the entry itself (from the listing: no stat per file)
                if not utf8(entry.name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False) and fnmatch.fnmatchcase(entry.name, pattern):
                    found.append(Path(entry.path))
    return sorted(found)


def run_id_of(folder: Path) -> str:
    return folder.name[len(RUN_PREFIX) :]


def list_runs(store: str | Path) -> list[str]:
    """Published run ids, oldest first by manifest creation time."""
    found = [(str(read_manifest(f / MANIFEST).get("created_at", "")), run_id_of(f)) for f in run_folders(store)]
    return [run_id for _, run_id in sorted(found)]


def read_manifest(path: Path) -> dict:
    """A published run's manifest; one that is not a JSON object is one sentence, not a traceback."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise StoreError(
            f"manifest {str(path)!r} cannot be read ({str(err).splitlines()[0]}); restore it or move "
            "the run folder out of the store"
        ) from None
    if not isinstance(manifest, dict):
        raise StoreError(
            f"manifest {str(path)!r} is not a JSON object; restore it or move the run folder out of the store"
        )
    return manifest


def run_layout(manifest: dict, folder: Path) -> int:
    """The store layout a published run was written in (``schemas.LAYOUTS``; a manifest without
    ``store_layout`` is layout 1); one this version does not know is refused, never misread."""
    from xai_ray.store.schemas import LAYOUTS

    version = manifest.get("store_layout", 1)
    if version not in LAYOUTS or isinstance(version, bool):
        raise StoreError(
            f"run {folder.name[len(RUN_PREFIX) :]!r} was written in store layout {version!r}, which this version "
            f"of xai-ray does not read (it reads layouts {', '.join(map(str, LAYOUTS))}); query it with the "
            "xai-ray that wrote it, or move the run folder out of the store"
        )
    return version


def run_log(store: str | Path, run_id: str) -> Path:
    """A run's log file: our log lines, Python warnings and Ray's Python loggers (``progress.route_noise``)."""
    return Path(store) / "logs" / f"{run_id}.log"


def aggregate_file(store: str | Path, run_id: str, name: str) -> Path:
    return run_dir(store, run_id) / "aggregates" / f"{name}.parquet"


OWN_FOLDERS = ("runs", "_staging", "reports", "logs")  # what a store writes beside a user's own files


def is_page_of(store: str | Path, path: str | Path) -> bool | None:
    """Where ``path`` lies against ``store``: None outside the store's own files and folders
    (``OWN_FOLDERS``, the nightly lock; a user's file beside them, as in a store that is the working
    folder, is outside); inside them, whether it is a place for a page (a run's ``report.html``, a
    night's ``reports/DATE/report.html``), the only ones a report or page may be written to."""
    root, target = Path(os.path.realpath(store)), Path(os.path.realpath(path))
    if root not in target.parents:
        return None
    parts = target.relative_to(root).parts
    if parts[0] not in OWN_FOLDERS and parts != (NIGHTLY_LOCK,):
        return None
    run_page = len(parts) == 3 and parts[0] == "runs" and parts[1].startswith(RUN_PREFIX)
    night_page = len(parts) == 3 and parts[0] == "reports" and parts[1] != LATEST
    return (run_page or night_page) and parts[2] == REPORT


def enclosing_store(path: str | Path) -> Path | None:
    """The store whose run ``path`` lies in (a folder above it is ``runs/run_id=<id>`` or
    ``_staging/run_id=<id>``, the run's manifest or lock beside it), else None: what a page must
    not be written over, whichever store a command was given."""
    target = Path(os.path.realpath(path))
    for folder in target.parents:
        if (
            folder.name.startswith(RUN_PREFIX)
            and folder.parent.name in ("runs", "_staging")
            and ((folder / MANIFEST).is_file() or (folder / ".lock").exists() or (folder / "_parts").is_dir())
        ):
            return folder.parent.parent
    return None


def reports_dir(store: str | Path) -> Path:
    """Where dated reports of a store go (``reports/YYYY-MM-DD/report.html``, ``reports/latest``)."""
    return Path(store) / "reports"


def night_report(store: str | Path, date: str) -> Path:
    return reports_dir(store) / date / REPORT


def night_record(store: str | Path, date: str) -> Path:
    """What a night's report was built from (config, key, runs, versions), beside the report."""
    return reports_dir(store) / date / NIGHT_RECORD


def nights(store: str | Path) -> list[Path]:
    """The dated report folders (``reports/YYYY-MM-DD``), in no particular order."""
    return list(reports_dir(store).glob("????-??-??"))


def latest_reports(store: str | Path) -> Path:
    """``reports/latest``: a relative symlink to the newest night's folder (or, where links cannot
    be made, a folder whose report redirects there)."""
    return reports_dir(store) / LATEST


def latest_swap(store: str | Path) -> Path:
    """The new ``latest`` link, made under this name and renamed over the old one."""
    return reports_dir(store) / f".{LATEST}.tmp"


def nightly_lock(store: str | Path) -> Path:
    return Path(store) / NIGHTLY_LOCK
