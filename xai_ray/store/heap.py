"""A writer process keeps the memory it frees, so the next part's arrays land on pages it already has.

Building a part's tables makes a few hundred MB of short-lived numpy arrays (500 bert-base
reviews x 3 methods: every layer's scores gathered, stacked, divided, scattered). glibc hands any
block above its mmap threshold (128 KB at first, 32 MB at most) back to the kernel when it is
freed, and maps the next one fresh: a part then costs ~45,000 page faults, whose zeroing and
huge-page compaction took 0.2 to 1.1 s of system time against ~0.25 s of the build's own work
(``bench/write_memory.py``). Raising the mmap and trim thresholds makes glibc serve those blocks
from its heap and keep what is freed there, so each part reuses the last one's pages. The cost
is that the process holds its peak heap until it exits (a writer's: about one part's tables).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  # blocks below 1 GiB come from the heap
TRIM_THRESHOLD = (1 << 31) - 1  # free memory at the heap's top kept up to 2 GiB (mallopt takes an int)

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to reuse freed blocks instead of returning them to the kernel; once per
    process. True where it took effect; False where the C library is not glibc (musl, macOS)."""
    global _applied
    if _applied is None:
        _applied = _mallopt()
    return _applied


def _mallopt() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not hasattr(libc, "gnu_get_libc_version"):  # another libc's mallopt may read these numbers otherwise
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
