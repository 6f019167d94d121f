"""A small corpus read and screened by the driver itself: the same rows as the streaming path.

Streaming a corpus (``stream``) costs three Ray Data executions (count, screen, the rows to
score), each a few seconds of planning and task start whatever the rows; for the README's 200
reviews that was most of the screening and a good part of the scoring. A run that scores few rows
(``reads_here``) skips them: the driver reads the rows the ``limit`` sample keeps, numbers them,
names rows without ids and screens them with the streaming path's own functions (``Corpus.counted``
and ``corpus.sample_rows`` for the sample, ``stream._place``, ``stream._local``,
``screening.verdicts``, ``stream._todo``), so both paths keep the same rows in the same order,
with the same ids, labels, head sample and ``errors`` rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from xai_ray.data import screening
from xai_ray.data.head_docs import HeadDocs
from xai_ray.data.pieces import CHUNK, read_piece
from xai_ray.data.sources import SourcePlan
from xai_ray.data.stream import Corpus, _local, _place, _todo, verdict_counts

DRIVER_BYTES = 256 << 20  # files the driver reads at most (all of them: a sample's rows are anywhere)
FILE_KINDS = ("parquet", "csv", "jsonl", "json", "tar")


def reads_here(plan: SourcePlan, limit: int | None, most_rows: int) -> bool:
    """Whether the driver reads and screens the corpus itself: the rows a run selects (``limit`` of
    the source, or all of it) are known before reading and at most ``most_rows``, and the source is
    local (not a Hub dataset) with its files at most ``DRIVER_BYTES`` together. Row counts are known
    from Parquet footers and aclImdb names; for other files only ``limit`` bounds them."""
    if most_rows <= 0 or any(p.kind == "hub" for p in plan.pieces):
        return False
    sizes = [p.rows for p in plan.pieces]
    source_rows = sum(sizes) if all(s is not None for s in sizes) else None
    bounds = [n for n in (limit, source_rows) if n is not None]
    if not bounds or min(bounds) > most_rows:
        return False
    files = {p.path for p in plan.pieces if p.kind in FILE_KINDS}
    return sum(os.path.getsize(path) for path in files) <= DRIVER_BYTES


@dataclass
class Held:
    """A screened corpus held by the driver: what ``stream.Screened`` keeps in Ray's object store."""

    placed: pa.Table  # every selected row: pos, doc_id, text, label, problem, label_name (``stream._place``)
    side: pa.Table  # ``screening.VERDICTS`` of the rows not scored, sorted by ``pos``
    counts: dict  # rows, rejected, duplicates, done, unchanged, todo, kept (as ``Screened.counts``)
    classes: dict | None = None

    @property
    def n_input(self) -> int:
        return self.counts["rows"]

    def let_go(self) -> None:
        """Nothing to drop (``Screened.let_go``): these rows are the driver's own."""

    def todo(self, heads: HeadDocs | None = None) -> pa.Table:
        """The rows to score (``doc_id, text, label, heads_sample, heads_stats``), longest first;
        ``heads``: the documents marked for head statistics and similarity (as ``Screened.todo``)."""
        heads = heads if heads is not None else HeadDocs()
        return _todo(self.placed, self.side.select(["pos", "verdict"]), heads, classes=self.classes)

    def rejected(self) -> pd.DataFrame:
        """The screened-out rows as ``doc_id, reason``, in input order (the run's ``errors``)."""
        dropped = pa.array([screening.REJECTED, screening.DUPLICATE], pa.int8())
        out = self.side.filter(pc.is_in(self.side.column("verdict"), value_set=dropped))
        return pd.DataFrame({"doc_id": out.column("doc_id").to_pylist(), "reason": out.column("reason").to_pylist()})


def screen(corpus: Corpus, classes=None, done=None, known=None) -> Held:
    """``stream.screen``'s outcome, found here: ``done`` (ids a resumed run holds) and ``known``
    (``doc_id, text_sha256`` of documents scored before) leave out what need not be scored."""
    corpus = corpus.counted()
    classes = screening.class_map(classes)
    placed = gather(corpus)
    narrow = _local(placed, pa.array(sorted(done or ()), pa.string()), known, classes)
    side = screening.verdicts(narrow) if narrow.num_rows else screening.VERDICTS.empty_table()
    counts = {"rows": placed.num_rows, **verdict_counts(side)}
    counts["todo"] = placed.num_rows - counts["rejected"] - counts["duplicates"] - counts["done"] - counts["unchanged"]
    counts["kept"] = counts["todo"] + counts["done"]
    return Held(placed=placed, side=side, counts=counts, classes=classes)


def gather(corpus: Corpus) -> pa.Table:
    """The rows the sample keeps (all rows without ``limit``), read here, in input order."""
    chosen = corpus.chosen
    ends = [*corpus.offsets[1:], corpus.n_source]  # n_source is known whenever there is a sample
    chunks = []
    for piece, offset, end in zip(corpus.plan.pieces, corpus.offsets, ends):
        wanted = None
        if chosen is not None:  # the sample's rows within this piece, numbered in it
            wanted = chosen[(chosen >= offset) & (chosen < end)] - offset
        for chunk in read_piece(corpus.plan, piece, wanted=wanted):
            chunks.append(_place(chunk, chosen, corpus.offsets, corpus.plan.split))
    if not chunks:
        return _place(CHUNK.empty_table(), None, corpus.offsets or [0], corpus.plan.split)
    return pa.concat_tables(chunks)
