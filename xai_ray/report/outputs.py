"""Files written where the user said (``report --out``, ``explain --out``, chart files): all or nothing.

A page is written into a fresh temporary file beside its target and renamed into place
(``store.files``: created exclusively under a random name, so a link planted beside the target
is never followed). The target may be missing or a regular file, which is replaced; anything else
that exists there (a folder, a device such as ``/dev/null``, a FIFO, a socket, a symbolic link,
even one to a regular file) is refused before any work and left as it is. When a write fails (the
disk is full or read-only, the name is too long) the temporary file is removed and the failure is
one sentence naming the path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from xai_ray.config import ConfigError
from xai_ray.store import layout
from xai_ray.store.files import not_regular, write_atomically


class OutputError(ConfigError):
    """A file cannot be written where asked; the message names the path and why."""


def check_target(out: str | Path, option: str = "--out", store: str | Path | None = None) -> Path:
    """Refuse, before any work, a target that exists and is not a regular file, or one inside
    ``store`` that is not a page's place there (``store.layout.is_page_of``): `report --out` once
    replaced a run's Parquet part with the page, and the run was lost."""
    out = Path(out)
    # the store given, and any store whose run the target lies in (`report --store a --out
    # b/runs/run_id=r/docs/part-0.parquet` replaced b's part with the page)
    for owner in dict.fromkeys(s for s in (store, layout.enclosing_store(out)) if s is not None):
        if layout.is_page_of(owner, out) is False:
            raise OutputError(
                f"{option} {str(out)!r} is inside store {str(owner)!r}, whose files are its data; write the page "
                "outside the store (a run's own report.html is the one place inside it)"
            )
    kind = not_regular(out)
    if kind == "a folder":
        raise OutputError(
            f"{option} {str(out)!r} is a folder; name the file to write, e.g. {str(out / 'report.html')!r}"
        )
    if kind == "a symbolic link":  # refused, not replaced: whoever made it may expect its target to change
        raise OutputError(
            f"{option} {str(out)!r} is a symbolic link (to {_link_target(out)!r}), which is never written "
            "through or replaced; name the file itself or a new one"
        )
    if kind is not None:
        raise OutputError(
            f"{option} {str(out)!r} is {kind}, not a regular file; name a new file or a regular file to replace"
        )
    return out


# Bidirectional overrides, embeddings and isolates (U+202A-U+202E, U+2066-U+2069): a review, a
# class name or an id holding U+202E turned the text after it around in the page (spoofing what a
# reader sees). A page shows each as U+FFFD, so the reader sees that something was there.
BIDI_CONTROLS = {code: "\ufffd" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
# What a chart draws in place of the characters it cannot carry (``drawn``): a control character as
# its Unicode control picture (NUL as U+2400, DEL as U+2421; C1 as its ``\x85`` escape), as a page's
# text shows it (blocks.text_html): a NUL in a word or class name made vl-convert's SVG parser
# panic and abort the process (`report --format svg`). U+2028 and U+2029 as U+FFFD: Vega's
# expression parser refuses them raw in the sort and tooltip expressions a class name reaches,
# which left the confusion matrix blank. The bidirectional controls as the page shows them.
CONTROL_PICTURES = {
    **{code: chr(0x2400 + code) for code in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20))},
    0x7F: "\u2421",
    **{code: f"\\x{code:02x}" for code in range(0x80, 0xA0)},
}
UNDRAWABLE = {**CONTROL_PICTURES, 0x2028: "\ufffd", 0x2029: "\ufffd", **BIDI_CONTROLS}


def drawn(text: str) -> str:
    """``text`` as a chart draws it (``UNDRAWABLE``)."""
    return text.translate(UNDRAWABLE)


# The same controls as JSON writes them (\u202e), not preceded by a backslash of the text's own
_BIDI_ESCAPES = re.compile(r"(?<!\\)((?:\\\\)*)\\u(?:202[a-e]|206[6-9])", re.IGNORECASE)


def script_json(value) -> str:
    """``value`` as JSON safe inside <script>: no '<', '>' or '&' can close the tag or open a
    comment, and no bidirectional control, which JSON writes as an escape that ``write_page``
    never sees and Vega draws back as the character: each is written as U+FFFD's escape."""
    text = _BIDI_ESCAPES.sub(lambda found: found.group(1) + "\\ufffd", json.dumps(value))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def write_page(out: str | Path, text: str | bytes, option: str = "--out") -> Path:
    """Write ``text`` to ``out`` atomically (``store.files``); on failure leave nothing behind. A
    page's bidirectional controls are written as U+FFFD (``BIDI_CONTROLS``)."""
    out = check_target(out, option)
    if isinstance(text, str):
        text = text.translate(BIDI_CONTROLS)
    try:
        return write_atomically(out, text, durable=True)
    except OSError as err:
        raise OutputError(describe(err, f"{option} {str(out)!r}")) from None


def describe(err: OSError, what: str) -> str:
    """One sentence for an OSError of a user path: what could not be used, and the system's reason."""
    reason = err.strerror or type(err).__name__
    return f"cannot write {what}: {reason.lower()}"


def _link_target(link: Path) -> str:
    try:
        return str(link.readlink())
    except OSError:
        return "?"
