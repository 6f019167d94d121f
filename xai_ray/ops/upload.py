"""What ``xai-ray submit`` ships to a Ray cluster as its working directory, and what stays here.

Ray uploads the repository (``working_dir``) less ``EXCLUDES``, the repository's
``.git/info/exclude`` (``git_excludes``) and what its .gitignore and .rayignore files leave out.
``left_out_by`` asks Ray's own matcher whether a path goes up (a job's relative ``data`` that does
not is refused before the upload); ``own_store`` leaves a job's store out when it lies inside the
repository.
"""

from __future__ import annotations

import os
import re
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


def git_excludes(root: Path) -> list[str]:
    """The patterns of ``root``'s ``.git/info/exclude`` (git's own, never committed: a file kept
    out of git there, a secret among them, is not kept out of Ray's upload, which reads .gitignore
    files only). A worktree's ``.git`` file leads to its repository's (``commondir``)."""
    git = root / ".git"
    if git.is_file():  # a worktree or submodule: "gitdir: <path>"
        first = git.read_text(errors="replace").splitlines()[:1]
        if not first or not first[0].startswith("gitdir:"):
            return []
        git = (root / first[0].removeprefix("gitdir:").strip()).resolve()
        common = git / "commondir"
        if common.is_file():
            git = (git / common.read_text(errors="replace").strip()).resolve()
    exclude = git / "info" / "exclude"
    if not exclude.is_file():
        return []
    lines = exclude.read_text(errors="replace").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


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
    if not found.is_relative_to(root) or found == root:
        return []
    # a pattern of that one folder: its name's [, ], *, ? and \ escaped, as .gitignore escapes them
    return ["/" + re.sub(r"([\[\]*?\\])", r"\\\1", found.relative_to(root).as_posix())]


def left_out_by(root: Path, relative: Path) -> str | None:
    """What leaves ``relative`` (a file, or a folder and what it holds, as written: a link is not
    followed) out of Ray's upload of ``root`` as the working directory: ``EXCLUDES``, or a
    .gitignore or .rayignore of ``root`` or of a folder on the way, each matched below its folder
    as Ray's walk matches it (with Ray's own matcher); None when the upload takes it."""
    try:  # Ray's own matcher (private: a Ray without it uploads as it does, unchecked here)
        from ray._private.ray_constants import RAY_RUNTIME_ENV_IGNORE_GITIGNORE
        from ray._private.runtime_env.packaging import _get_excludes, _get_ignore_file
    except ImportError:
        return None

    names = (".gitignore", ".rayignore") if os.environ.get(RAY_RUNTIME_ENV_IGNORE_GITIGNORE, "0") != "1" else ()
    names = names or (".rayignore",)
    path = root / relative
    above = [root / p for p in reversed(relative.parents) if p != Path(".")]  # root/a, root/a/b, ...
    # each folder on the way, the path, and a file inside it (a rule for "incoming/" is one)
    candidates = [*above, path, *([path / "file"] if path.is_dir() or not path.suffix else [])]
    rules = [("EXCLUDES of xai_ray/ops/upload.py", root, _get_excludes(root, EXCLUDES))]
    own = git_excludes(root)
    if own:
        rules.append(("its .git/info/exclude", root, _get_excludes(root, own)))
    for folder in [root, *above, *([path] if path.is_dir() else [])]:
        for name in names:
            rule = _get_ignore_file(folder, name)
            if rule is not None:
                where = "its" if folder == root else f"{folder.relative_to(root).as_posix()}/"
                rules.append((f"{where} {name}".replace("/ ", "/"), folder, rule))
    for what, folder, rule in rules:
        if any(c != folder and c.is_relative_to(folder) and rule(c) for c in candidates):
            return what
    return None
