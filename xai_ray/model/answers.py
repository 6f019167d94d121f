"""Answers about models kept in the user's cache folder ($XDG_CACHE_HOME or ~/.cache, ``xai-ray/``),
so a command need not import transformers (and torch under it) to learn them again.

Each file is a JSON object of answers by key; a key names everything its answer depends on (the
transformers version among them). A file that cannot be read counts as empty, and one that cannot
be written only costs the next command the question: a cache never changes an answer.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path


def cache_file(name: str) -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xai-ray" / name


def kept(name: str) -> dict:
    """The answers in cache file ``name`` ({} when it is missing, unreadable or not an object)."""
    try:
        answers = json.loads(cache_file(name).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: a file of deeply nested brackets
        return {}
    return answers if isinstance(answers, dict) else {}


def keep(name: str, key: str, answer) -> None:
    """Add ``answer`` under ``key`` to cache file ``name``: written whole or not at all (runs
    starting side by side), silently not where the folder cannot be written."""
    path = cache_file(name)
    answers = {**kept(name), key: answer}
    staged = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(answers, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(staged, path)
    except OSError:  # a read-only home, or the file's name taken by a folder: the next command asks again
        with contextlib.suppress(OSError):
            staged.unlink(missing_ok=True)
