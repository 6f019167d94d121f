"""What one user query may use, checked once where the limits are made (``xai-ray sql`` and
``topk`` flags, ``xai_ray.open_store`` keywords): each value out of its range is one sentence
naming the flag and what it accepts.

``memory_limit`` is DuckDB's own, which does not count everything a query builds (a list made by
``range``, a long string, the Arrow result): user SQL also runs in a child process whose data
segment is capped (``process_cap``), so a query that outgrows it fails there, not in the caller.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
TIMEOUT_S = (1.0, 86_400.0)  # a second (the child process starts in well under one) to a day
MAX_THREADS = 64
MIN_MEMORY = 16 * 1000**2  # DuckDB needs a few MB to open the views and plan a query
MIN_OUTPUT = 1000**2
MAX_ROW = 64 * 1024**2  # one row of a result, in Arrow bytes: beyond it no value is worth printing


class QueryError(ValueError):
    """A query cannot run as asked; the message says why."""


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf: no upper bound known
        return 1024**5


def size_bytes(value, flag: str) -> int:
    """``512MB``, ``4GB``, ``1.5GiB``: bytes (MB = 1000^2, as DuckDB reads it; MiB = 1024^2)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)", str(value).strip(), flags=re.IGNORECASE)
    if not isinstance(value, str) or not match:
        raise QueryError(f"{flag} must be a size such as 512MB or 4GB, got {value!r}")
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


@dataclass(frozen=True)
class Limits:
    """What one user query may use: DuckDB's ``memory_limit`` (also the base of the child
    process's cap) and ``threads``, seconds before it is stopped, and the result's size in Arrow
    bytes (``max_output``; one row at most ``MAX_ROW`` of it)."""

    memory_limit: str = "2GB"
    threads: int = 2
    timeout_s: float = 60.0
    max_output: str = "1GB"

    def __post_init__(self) -> None:
        memory = size_bytes(self.memory_limit, "--memory-limit")
        if not MIN_MEMORY <= memory <= physical_memory():
            raise QueryError(
                f"--memory-limit must be between 16MB and this machine's memory "
                f"({physical_memory() / 1024**3:.1f}GiB), got {self.memory_limit!r}"
            )
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= MAX_THREADS:
            raise QueryError(f"--threads must be a whole number from 1 to {MAX_THREADS}, got {self.threads!r}")
        timeout = self.timeout_s
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or not TIMEOUT_S[0] <= timeout <= TIMEOUT_S[1]
        ):
            raise QueryError(f"--timeout must be a number of seconds from 1 to 86400, got {timeout!r}")
        if size_bytes(self.max_output, "--max-output") < MIN_OUTPUT:
            raise QueryError(f"--max-output must be at least 1MB, got {self.max_output!r}")

    @property
    def memory_bytes(self) -> int:
        return size_bytes(self.memory_limit, "--memory-limit")

    @property
    def output_bytes(self) -> int:
        return size_bytes(self.max_output, "--max-output")

    @property
    def row_bytes(self) -> int:
        return min(MAX_ROW, self.output_bytes)


def process_cap(limits: Limits) -> int:
    """Bytes of data segment the query's process may add once its views are open: DuckDB's
    ``memory_limit``, as much again (at least 256 MiB) for what DuckDB does not count and for the
    Arrow batches on their way out, and 16 MiB per thread (its stack and allocator arena)."""
    memory = limits.memory_bytes
    return memory + max(memory, 256 * 1024**2) + 16 * 1024**2 * limits.threads
