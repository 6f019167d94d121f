"""How much memory does printing a large `xai-ray sql` result take, streamed vs materialised?

Runs, side by side in one run and each in its own fresh Python process, the same query over an
empty store printed as CSV to /dev/null:
  (a) streamed: `xai_ray.cli` as shipped (record batches from its query process, printed as they
      come; the peak is the larger of the command's and its query process's),
  (b) materialised: the former path, the whole result as one pandas DataFrame, then `to_csv`.
Prints each process's peak resident memory (ru_maxrss) and the ratio b/a.
Usage: python bench/sql_stream.py [--rows 5000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

STREAMED = """
import contextlib, os, resource, sys
from xai_ray import cli
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    status = cli.main(["sql", "--store", sys.argv[1], "--timeout", "600", "--memory-limit", "8GB", sys.argv[2],
                       "--format", "csv"])
peaks = [resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(status, max(peaks), file=sys.stderr)
"""
MATERIALISED = """
import os, resource, sys
from xai_ray.query.connection import open_store
con = open_store(sys.argv[1])
with open(os.devnull, "w") as sink:
    con.execute(sys.argv[2]).df().to_csv(sink, index=False)
print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def peak_kib(script: str, store: Path, query: str) -> int:
    done = subprocess.run([sys.executable, "-c", script, str(store), query], capture_output=True, text=True, check=True)
    status, peak = done.stderr.strip().splitlines()[-1].split()
    assert status == "0", done.stderr
    return int(peak)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    args = parser.parse_args()
    query = f"select range as id, range * 2 as twice, 'doc-' || range as name from range({args.rows})"
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "store"
        (store / "runs").mkdir(parents=True)
        streamed = peak_kib(STREAMED, store, query)
        materialised = peak_kib(MATERIALISED, store, query)
    print(
        json.dumps(
            {
                "rows": args.rows,
                "streamed_peak_mib": round(streamed / 1024, 1),
                "materialised_peak_mib": round(materialised / 1024, 1),
                "ratio_materialised_over_streamed": round(materialised / streamed, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
