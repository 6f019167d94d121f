"""The word totals a run's aggregate stage keeps beside it (view ``word_totals``): per method x
layer x predicted class x word, the sums ``topk`` and the report's top words are ranked from, so
they read a few thousand rows instead of every occurrence.

A run in store layout 3 is summed several slices at a time in one scan of its parts
(``sql/word_totals_wide.sql``): each word's key (lower case, NFC) is made once, not once per slice,
which is most of the cost. Runs of the older layouts are summed a slice at a time over the words
view (``sql/word_totals.sql``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from xai_ray.query.connection import (
    WORD_TOTALS,
    as_written,
    open_store,
    pick_run,
    run_named,
    sql_text,
    word_totals_tag,
)
from xai_ray.query.views import DERIVED_SHARE, SOURCES, folder_files, manifest_slices, run_layouts
from xai_ray.store import layout, schemas
from xai_ray.store.aggregates import write_aggregate

TOTALS_ROW_GROUP = 32_768
# The sums stay float64 (topk's variance is a difference of them) but split by byte before zstd, as
# the parts' scores are; only the two string columns get dictionary pages: a third smaller than
# with pyarrow's defaults on a real run (17.8 -> 11.8 KB a review, 192 reviews), the same values.
SUMS = ("total_lift", "squares_lift", "total_share", "squares_share")
TOTALS_OPTIONS = {
    "compression": "zstd",
    "use_dictionary": ["method", "word"],
    "column_encoding": dict.fromkeys(SUMS, "BYTE_STREAM_SPLIT"),
}
# Slices summed in one scan: a scan's per-document groups hold 3 sums a slice, so this bounds its
# memory. On 5,000 IMDB reviews with 12 slices, 6 a scan took 2.1 s, 12 a scan 2.06 s and one
# slice a scan (the words view) 4.4 s.
SLICES_PER_SCAN = 6
# A block of word_totals_wide.sql written once for every slice of a scan
BLOCK = re.compile(r"^[ \t]*-- each slice, joined by (commas|union all):\n(.*?)^[ \t]*-- end\n", re.M | re.S)


def keep_word_totals(store: str | Path, run_id: str) -> Path:
    """Sum the run's word totals and keep them beside it (``store.aggregates``)."""
    con = open_store(store, run=run_id)
    frame = word_totals(con, store, run_id)
    # sorted by method and layer in small row groups: a top-k of one slice reads only its groups
    return write_aggregate(
        store,
        run_id,
        WORD_TOTALS,
        word_totals_tag(),
        frame.sort_values(["method", "layer", "word", "pred"], ignore_index=True),
        row_group_size=TOTALS_ROW_GROUP,
        schema=schemas.WORD_TOTALS,  # a run that scored nothing writes the same types as the others
        **TOTALS_OPTIONS,
    )


def word_totals(con, store: str | Path, run_id: str, wide: bool = True) -> pd.DataFrame:
    """The run's word totals over ``con`` (``open_store``): layout 3 in scans of several slices
    (``wide=False``: a slice at a time, the reference the wide scan is tested against)."""
    manifest = json.loads(pick_run(con, run_id)["manifest"])
    slices = manifest_slices(manifest)
    run = layout.run_dir(Path(store).resolve(), run_id)
    info = run_layouts([run])
    if wide and info[run]["layout"] == 3 and slices:
        files = folder_files(Path(store).resolve(), info, SOURCES["words"][-1])  # layout 3's parts
        if not files:  # a run that scored nothing
            return schemas.WORD_TOTALS.empty_table().to_pandas()
        # a slice or share the manifest lists but no part holds (a hand-edited manifest, a removed
        # part) has no column to read: the words view has no rows of it either
        columns = {name for f in files for name in pq.read_schema(f).names}
        slices = [(m, la) for m, la in slices if f"divisor:{m}:{la}" in columns]
        kept_shares = {name for name in info[run]["shares"] if f"share:{name}" in columns}
        if not slices:
            return schemas.WORD_TOTALS.empty_table().to_pandas()
        scans = [slices[i : i + SLICES_PER_SCAN] for i in range(0, len(slices), SLICES_PER_SCAN)]
        frames = [_scan(con, run_id, files, scan, kept_shares) for scan in scans]
    else:
        slices = slices or [("", 0)]  # none: the empty frame with the query's columns
        frames = [run_named(con, WORD_TOTALS, run_id=run_id, method=method, layer=layer) for method, layer in slices]
    return pd.concat(frames, ignore_index=True)


def _scan(con, run_id: str, files: list[str], slices: list[tuple[str, int]], kept_shares: set) -> pd.DataFrame:
    """``sql/word_totals_wide.sql`` with each of its per-slice blocks repeated for ``slices``."""
    fills = []
    for i, (method, layer) in enumerate(slices):
        name = f"{method}:{layer}"
        if not schemas.SLICE.match(f"score:{name}"):  # it enters the SQL's text
            raise ValueError(f"not a slice name: {name!r}")
        share = DERIVED_SHARE.replace("@slice@", name)
        if name in kept_shares:  # a part kept the share where no divisor reproduced it
            share = f'coalesce("share:{name}", {share})'
        fills.append({"@share@": share, "@i@": str(i), "@method@": method, "@layer@": str(int(layer)), "@slice@": name})

    def repeat(block: re.Match) -> str:
        joiner = ",\n" if block[1] == "commas" else "\n    union all\n"
        return joiner.join(_filled(block[2].rstrip("\n"), fill) for fill in fills) + "\n"

    sql = BLOCK.sub(repeat, sql_text("word_totals_wide"))
    return con.execute(sql, {"run_id": run_id, "files": as_written(files)}).df()


def _filled(text: str, fill: dict[str, str]) -> str:
    for marker, value in fill.items():
        text = text.replace(marker, value)
    return text
