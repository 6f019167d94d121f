"""What ``xai-ray submit`` ships to a Ray cluster as its working directory, and what stays here.

Ray uploads the repository (``working_dir``) less ``EXCLUDES`` and what the repository's
.gitignore and .rayignore leave out. ``left_out_by`` asks Ray's own matcher whether a path goes up
(a job's relative ``data`` that does not is refused before the upload); ``own_store`` leaves a
job's store out when it lies inside the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

# Never uploaded: environments, VCS data, secrets, stores, models and build leftovers (Ray's own
# defaults drop .git and .venv too; listing them keeps older Rays from shipping them). Patterns as
# .gitignore reads them: the repository's own folders are anchored with "/" ("store" alone left out
# the package xai_ray/store, and every job failed on a cluster that installs what was shipped).
EXCLUDES = [
    ".venv",
    ".git",
    ".env",
    "/store",
    "/store-*",
    "/models",
    "**/__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "/reports/out",
    "*.egg-info",
    "/build",
    "/report.html",
]


def own_store(root: Path, path: Path, sets: list[str] | None, kind: str) -> list[str]:
    """The job's store (or a finetune's ``out``) as an exclude when it lies inside the working
    directory under another name than ``EXCLUDES`` knows (``out/mystore``): its files were uploaded
    with the code, every run of it."""
    if kind == "finetune":
        from xai_ray.train.settings import resolve as resolve_finetune

        target = resolve_finetune(path, None, sets).out
    else:
        from xai_ray import config

        target = config.resolve(path, None, sets).store
    from xai_ray.store import remote

    if remote.is_uri(target) or not Path(target).is_absolute():
        return []
    found = Path(target).resolve()
    return ["/" + found.relative_to(root).as_posix()] if found.is_relative_to(root) and found != root else []


def left_out_by(root: Path, relative: Path) -> str | None:
    """What leaves ``relative`` (a file, or a folder and what it holds) out of Ray's upload of
    ``root`` as the working directory: ``EXCLUDES``, or the .gitignore or .rayignore of ``root``,
    which Ray reads too (matched with Ray's own matcher, as the upload matches them); None when
    the upload takes it."""
    try:  # Ray's own matcher (private: a Ray without it uploads as it does, unchecked here)
        from ray._private.ray_constants import RAY_RUNTIME_ENV_IGNORE_GITIGNORE
        from ray._private.runtime_env.packaging import _get_excludes, _get_ignore_file
    except ImportError:
        return None

    gitignore = os.environ.get(RAY_RUNTIME_ENV_IGNORE_GITIGNORE, "0") != "1"
    rules = {"EXCLUDES of xai_ray/ops/upload.py": _get_excludes(root, EXCLUDES)}
    for name in (".gitignore", ".rayignore") if gitignore else (".rayignore",):
        rule = _get_ignore_file(root, name)
        if rule is not None:
            rules[f"its {name}"] = rule
    path = root / relative
    # the folder itself and each folder above it, and a file inside (a rule for "incoming/" is one)
    candidates = [path, *(root / p for p in relative.parents if p != Path("."))]
    candidates += [path / "file"] if path.is_dir() or not path.suffix else []
    for what, rule in rules.items():
        if any(rule(candidate) for candidate in candidates):
            return what
    return None
