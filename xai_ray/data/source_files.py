"""What the files a planned source reads hold now: size and modification time of each, to tell
whether they changed while a run read them.

A streamed corpus is read twice (``data.stream``): the first pass screens every row, the second
picks the rows to score by their place in the source. A file rewritten, reordered or appended to
between the passes gives the second pass other rows at those places: documents were lost without
an ``errors`` row, unscreened rows were stored, a progress bar read 203/200. The run compares the
files' state before the first pass with their state after the second and refuses to publish when
they differ.
"""

from __future__ import annotations

from pathlib import Path

from xai_ray.data.sources import SourcePlan


def files_state(plan: SourcePlan) -> dict[str, tuple[int, int]]:
    """Each local file the plan's pieces read -> (size, modification time in ns): a Parquet, CSV,
    JSON Lines or tar file, or each review file an aclImdb piece lists (its folder's own entry
    changes with a note written beside the reviews, and not with a review rewritten). A Hub
    dataset has none."""
    paths = []
    for piece in plan.pieces:
        if piece.kind == "aclimdb":  # part: the reviews' names below the root
            paths += [str(Path(piece.path) / name) for name in piece.part]
        elif piece.kind != "hub":
            paths.append(piece.path)
    state = {}
    for path in dict.fromkeys(paths):
        try:
            stat = Path(path).stat()
        except OSError:  # gone: differs from any state it had
            state[path] = (-1, -1)
            continue
        state[path] = (stat.st_size, stat.st_mtime_ns)
    return state


def changed_file(before: dict[str, tuple[int, int]], plan: SourcePlan) -> str | None:
    """The first file of ``plan`` whose state differs from ``before`` (``files_state``), or None."""
    now = files_state(plan)
    return next((path for path in sorted(before) if now.get(path) != before[path]), None)
