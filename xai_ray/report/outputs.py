"""Files written where the user said (``report --out``, ``explain --out``): all or nothing.

A page is written under a temporary name beside its target and renamed into place; when either
step fails (the target is a folder, the disk is full or read-only, the name is too long) the
temporary file is removed and the failure is one sentence naming the path.
"""

from __future__ import annotations

from pathlib import Path

from xai_ray.config import ConfigError
from xai_ray.store.files import write_atomically


class OutputError(ConfigError):
    """A file cannot be written where asked; the message names the path and why."""


def check_target(out: str | Path, option: str = "--out") -> Path:
    """Refuse, before any work, a target that is a folder."""
    out = Path(out)
    if out.is_dir():
        raise OutputError(
            f"{option} {str(out)!r} is a folder; name the file to write, e.g. {str(out / 'report.html')!r}"
        )
    return out


def write_page(out: str | Path, text: str, option: str = "--out") -> Path:
    """Write ``text`` to ``out`` atomically (``store.files``); on failure leave nothing behind."""
    out = check_target(out, option)
    try:
        return write_atomically(out, text, durable=False)
    except OSError as err:
        raise OutputError(describe(err, f"{option} {str(out)!r}")) from None


def describe(err: OSError, what: str) -> str:
    """One sentence for an OSError of a user path: what could not be used, and the system's reason."""
    reason = err.strerror or type(err).__name__
    return f"cannot write {what}: {reason.lower()}"
