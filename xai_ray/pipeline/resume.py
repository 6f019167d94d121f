"""Finishing an unfinished run: the settings its staging keeps (``--resume RUN_ID``), and what a
run id already taken by a published run folder says.

A killed run leaves its committed parts and its resolved config in ``STORE/_staging/run_id=<id>/``
(``store.staging``); ``resume_config`` reads that config back, with only execution flags on top,
and refuses what would finish the run elsewhere or with every default.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from xai_ray.config import ConfigError, RunConfig
from xai_ray.store import StoreError, layout, remote


def resume_config(store: str, run_id: str, flags: dict | None = None, sets: list[str] | None = None) -> RunConfig:
    """The config an unfinished run was started with (its staging keeps it), execution flags on top."""
    from xai_ray.config import resolve

    if not run_id.strip():
        raise ConfigError(
            "--resume needs the id of the unfinished run, as the line that said it stopped gives it "
            "(its parts are in STORE/_staging/run_id=ID)"
        )
    store = os.path.expanduser(store)  # as RunConfig takes it
    local = remote.local_store(store)  # a store URI's staging and runs are in this machine's mirror
    saved = layout.staged_config(local, run_id)
    if not saved.is_file():
        published = layout.manifest_path(local, run_id)
        if published.is_file() and remote.is_uri(store) and not remote.has_run(store, run_id):
            manifest = layout.read_manifest(published)  # published here, never uploaded: `run` uploads it
            return replace(RunConfig.from_manifest(manifest), store=store, run_id=run_id)
        if layout.run_dir(local, run_id).is_dir():
            why = no_manifest(layout.run_dir(local, run_id))
            if why:
                raise StoreError(f"run {run_id!r} in store {store!r} was published, but {why}")
            raise StoreError(f"run {run_id!r} in store {store!r} is already complete; nothing to resume")
        raise StoreError(f"store {store!r} has no unfinished run {run_id!r} to resume")
    moved = [
        item.partition("=")[0].strip() for item in sets or [] if item.partition("=")[0].strip() in ("run_id", "store")
    ]
    if moved:  # --set outranks flags: it started another run, elsewhere, and left this one unfinished
        raise ConfigError(f"--resume {run_id} finishes that run in its store; --set {moved[0]} cannot move it")
    flags = {**(flags or {}), "store": store, "run_id": run_id}
    staged = _staged_settings(saved)
    if not staged:  # resolve would take every default: another corpus, another model
        raise StoreError(
            f"the unfinished run {run_id!r} has no settings to resume with: {saved} is empty or not a YAML mapping; "
            "restore it, or start a new run with another --run-id"
        )
    cfg = resolve(saved, flags, sets)
    if "ig_tolerance" not in staged:  # staged before the key: its parts' paths were never refined
        cfg = replace(cfg, ig_tolerance=0.0)
    return cfg


def _staged_settings(path) -> dict | None:
    """The staged settings, or None where the file holds none (empty, or no mapping); a file that
    does not read as YAML says why in read_yaml's own sentence (its line and column)."""
    from xai_ray.config import read_yaml

    try:
        found = read_yaml(path)
    except ConfigError as err:
        if "must hold a mapping" not in str(err):  # not YAML, a key twice, a refused tag: its own sentence
            raise
        return None
    return found if isinstance(found, dict) and found else None


def no_manifest(folder: Path) -> str:
    """What a run folder without its manifest is: no reader lists it (they said nothing of it)."""
    manifest = folder / layout.MANIFEST  # a link is never followed (layout.unlisted_runs)
    return "" if manifest.is_file() and layout.inside(folder.parent.parent, manifest) else layout.unlisted_why(folder)
