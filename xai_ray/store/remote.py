"""Stores on object storage: ``s3://``, ``gs://`` or any URI ``pyarrow.fs`` opens (``file://`` too).

DuckDB and the Parquet writer work on local folders, and an object store has no atomic rename, so
a store URI is used through a local mirror (``$XAI_RAY_CACHE``, default ``~/.cache/xai-ray/stores``,
one folder per URI):

- ``pull`` downloads the published runs the mirror lacks (a run counts as published once its
  ``manifest.json`` exists, and that file is uploaded last), each into a temporary folder renamed
  into place, so a reader never sees part of a run;
- a run is written and published in the mirror as usual, then ``push_run`` uploads its files with
  ``manifest.json`` last: a reader of the bucket sees all of a run or none of it;
- ``push_tree``/``push_text`` upload reports.

Writers must not share a store URI at the same moment (the run ids keep them apart; the nightly
job's lock is per machine, its date-based Ray submission id is per cluster). The first read on a
machine downloads the whole store; later reads only what is new.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

from xai_ray.progress import Progress
from xai_ray.store import StoreError
from xai_ray.store import layout as store_layout

log = logging.getLogger("xai_ray")
MANIFEST = store_layout.MANIFEST


def is_uri(path) -> bool:
    """``s3://bucket/x``, ``gs://...``, ``file:///...``: a scheme of two or more letters (not ``C:``)."""
    text = str(path)
    scheme, sep, _ = text.partition("://")
    return bool(sep) and len(scheme) > 1 and scheme.replace("+", "").isalnum()


def cache_dir(uri: str) -> Path:
    root = Path(os.environ.get("XAI_RAY_CACHE") or Path.home() / ".cache" / "xai-ray" / "stores")
    return root / hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16]


def filesystem(uri: str):
    """(pyarrow FileSystem, base path inside it) of a store URI; a clear error when it cannot open."""
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(uri.rstrip("/"))
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError with long texts
        raise StoreError(f"cannot open store {uri!r}: {str(err).splitlines()[0]}") from None


def local_store(store: str | Path) -> str:
    """The local folder to read a store from: the store itself, or the URI's mirror after ``pull``."""
    return str(pull(str(store))) if is_uri(store) else str(store)


def pull(uri: str) -> Path:
    """Download the published runs of ``uri`` that the local mirror lacks; returns the mirror."""
    import pyarrow.fs as pafs

    fs, base = filesystem(uri)
    local = cache_dir(uri)
    runs_rel = store_layout.runs_dir(Path()).as_posix()  # "runs": the layout stays the store's
    prefix = store_layout.run_dir(Path(), "").name  # "run_id="
    listing = fs.get_file_info(pafs.FileSelector(f"{base}/{runs_rel}", allow_not_found=True))
    missing = []
    for info in listing:
        if info.type != pafs.FileType.Directory or not info.base_name.startswith(prefix):
            continue
        run_id = info.base_name[len(prefix) :]
        target = store_layout.run_dir(local, run_id)
        if (target / MANIFEST).is_file():
            continue
        if fs.get_file_info(f"{info.path}/{MANIFEST}").type != pafs.FileType.File:
            continue  # still being uploaded (or abandoned): not published
        missing.append((info, target))
    fetched = 0
    bar = Progress(len(missing), f"downloading {uri}", "runs") if missing else None
    for info, target in missing:
        incoming = local / "_incoming" / info.base_name
        shutil.rmtree(incoming, ignore_errors=True)
        incoming.mkdir(parents=True)
        pafs.copy_files(info.path, str(incoming), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(incoming, target)
        fetched += 1
        bar.update(1)
    if bar is not None:
        bar.close()
    local.mkdir(parents=True, exist_ok=True)
    log.info("store %s: %d run(s) downloaded into %s", uri, fetched, local)
    return local


def has_run(uri: str, run_id: str) -> bool:
    """Whether ``uri`` holds run ``run_id`` published (its manifest there)."""
    import pyarrow.fs as pafs

    fs, base = filesystem(uri)
    rel = store_layout.manifest_path(Path(), run_id).as_posix()
    return fs.get_file_info(f"{base}/{rel}").type == pafs.FileType.File


def push_run(local: str | Path, uri: str, run_id: str) -> None:
    """Upload one published run of the mirror to ``uri``, its manifest last."""
    import pyarrow.fs as pafs

    fs, base = filesystem(uri)
    folder = store_layout.run_dir(local, run_id)
    rel = folder.relative_to(Path(local)).as_posix()
    if fs.get_file_info(f"{base}/{rel}/{MANIFEST}").type == pafs.FileType.File:
        raise StoreError(f"run {run_id!r} already exists in store {uri!r}; pick another run id")
    # An upload cut short left files without a manifest (no reader sees them): another mirror's parts
    # of the run would count beside this one's, so they go first
    fs.delete_dir_contents(f"{base}/{rel}", missing_dir_ok=True)
    files = store_layout.store_files(local, folder)  # never a linked file: what it points at stays here
    files.sort(key=lambda p: p.name == MANIFEST)  # stable: everything else first, the manifest last
    with Progress(sum(p.stat().st_size for p in files) / 1e6, f"uploading run {run_id}", "MB") as bar:
        for path in files:
            _upload(fs, path, f"{base}/{path.relative_to(Path(local)).as_posix()}")
            bar.update(path.stat().st_size / 1e6)
    log.info("uploaded run %s to %s (%d files)", run_id, uri, len(files))


def push_tree(local: str | Path, folder: str | Path, uri: str) -> None:
    """Upload ``folder`` (inside the mirror ``local``) to the same place under ``uri``."""
    fs, base = filesystem(uri)
    for path in store_layout.store_files(local, folder):
        _upload(fs, path, f"{base}/{path.relative_to(Path(local)).as_posix()}")


def push_text(uri: str, rel: str, text: str) -> None:
    fs, base = filesystem(uri)
    target = f"{base}/{rel}"
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(target) as out:
        out.write(text.encode("utf-8"))


def _upload(fs, path: Path, target: str) -> None:
    import pyarrow.fs as pafs

    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)  # a no-op on object stores
    pafs.copy_files(str(path), target, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
