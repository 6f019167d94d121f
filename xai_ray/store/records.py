"""A committed part's record: what the part holds, written beside it as ``_parts/part-<key>.json``.

Every writer builds its records here (``PartRecord.of``): a Ray worker's part of scorer rows
(``parts.PartWriter``), a part of rows rejected before scoring, and the driver's own parts
(``writer.RunWriter``). The record travels as JSON (``as_json``) from the worker to the driver,
which reads it back as a mapping; ``staging.commit_part`` adds the part's key and files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pyarrow as pa

from xai_ray.store.tables import shares_of, slices_of


@dataclass(frozen=True)
class PartRecord:
    doc_ids: list[str]  # the documents the part holds, in order (what a resumed run skips)
    counts: dict[str, int]  # rows per table, as the views count them; duplicates dropped
    layout: int  # the store layout of its tables (schemas.LAYOUT)
    fingerprints: list[str] = field(default_factory=list)  # the model fingerprints that scored them
    n_layers: int | None = None
    read_errors: bool = False  # the part holds the rows screening rejected
    totals: dict | None = None  # per-head sums (methods.head_summary.HeadTotals.state)
    slices: list[str] = field(default_factory=list)  # method:layer columns its tables hold
    shares: list[str] = field(default_factory=list)  # slices whose shares layout 3 keeps as a column
    seconds: dict | None = None  # where the scoring time went (scoring.rows)
    node: str | None = None  # the Ray node that wrote it

    @classmethod
    def of(cls, tables: dict[str, pa.Table], doc_ids: list[str], counts: dict[str, int], layout: int, **known):
        """The record of a part of ``tables``; its slices and kept shares are read off the tables."""
        counts = {**counts, "duplicates": counts.get("duplicates", 0)}
        return cls(list(doc_ids), counts, layout, slices=slices_of(tables), shares=shares_of(tables), **known)

    def as_json(self) -> dict:
        return asdict(self)
