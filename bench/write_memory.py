"""What a writer's freed memory costs when glibc returns it to the kernel after every part.

    python bench/write_memory.py [--parts 6] [--docs 500]

A Ray writer (``store.parts.PartWriter``) builds and writes one part after another. In two fresh
processes, one after the other, the same parts (``scale.py``'s synthetic bert-base rows: 512 tokens,
12 layers, raw + rollout + flow, ``--docs`` reviews a part, the default part size) are written into
a temporary store:
  returned: glibc's defaults, as before ``store.heap``: a freed block above the mmap threshold
            goes back to the kernel, and the next part's arrays are mapped and faulted in afresh;
  kept:     ``store.heap.keep_freed_memory`` (what ``PartWriter`` now calls): freed blocks stay in
            the heap and the next part reuses them.
For each part, the wall seconds, user and system CPU seconds and minor page faults of the whole
``PartWriter.write`` (tables, head sums, encoding, files with fsync, the record); the medians over
the parts after the first (the first part of a process maps its heap in either case) and the
first part's wall seconds apart. Ends with one line:
``write_memory: part BEFORE -> AFTER s (RATIOx, median of N parts); page faults BEFORE -> AFTER``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def child(mode: str, parts: int, docs: int) -> None:
    """In its own process: write ``parts`` parts and print one JSON line of per-part figures."""
    import pyarrow as pa
    from scale import METHODS, blocks_of

    from xai_ray.methods.head_summary import HeadTotals
    from xai_ray.store import heap
    from xai_ray.store.parts import PartWriter

    if mode == "returned":
        heap._applied = False  # glibc's defaults: PartWriter's call then changes nothing
    rows = pa.concat_tables(blocks_of(parts * docs)).combine_chunks()
    figures = []
    with tempfile.TemporaryDirectory() as store:
        for k in range(parts):
            part = rows.slice(k * docs, docs)
            before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            PartWriter(store, "bench", METHODS, totals=HeadTotals).write(part)
            wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
            figures.append(
                {
                    "wall": wall,
                    "user": after.ru_utime - before.ru_utime,
                    "sys": after.ru_stime - before.ru_stime,
                    "faults": after.ru_minflt - before.ru_minflt,
                }
            )
    print(json.dumps({"mode": mode, "applied": heap.keep_freed_memory(), "parts": figures}))


def run(mode: str, parts: int, docs: int) -> dict:
    command = [sys.executable, __file__, "--child", mode, "--parts", str(parts), "--docs", str(docs)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=6)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--child", choices=["returned", "kept"])
    args = parser.parse_args()
    if args.child:
        child(args.child, args.parts, args.docs)
        return
    print(f"{args.parts} parts of {args.docs} bert-base reviews (512 tokens, 12 layers, raw + rollout + flow)")
    print(
        f"{'memory':10s} {'first s':>8s} {'wall s':>8s} {'user s':>8s} {'sys s':>8s} {'faults':>8s}  (medians of parts 2..)"
    )
    medians = {}
    for mode in ("returned", "kept"):
        result = run(mode, args.parts, args.docs)
        later = result["parts"][1:] or result["parts"]
        medians[mode] = {key: statistics.median(p[key] for p in later) for key in ("wall", "user", "sys", "faults")}
        m = medians[mode]
        print(
            f"{mode:10s} {result['parts'][0]['wall']:8.3f} {m['wall']:8.3f} {m['user']:8.3f} {m['sys']:8.3f}"
            f" {m['faults']:8.0f}" + ("" if result["applied"] or mode == "returned" else "  (mallopt not applied here)")
        )
    before, after = medians["returned"], medians["kept"]
    print(
        f"write_memory: part {before['wall']:.3f} -> {after['wall']:.3f} s ({before['wall'] / after['wall']:.2f}x,"
        f" median of {max(args.parts - 1, 1)} parts); page faults {before['faults']:.0f} -> {after['faults']:.0f}"
    )


if __name__ == "__main__":
    main()
