"""A corpus's pieces as a Ray Data datasource: one read task per piece (``sources.Piece``), yielding
its standardised chunks (``pieces.read_piece``). Its own module because it subclasses Ray Data's
``Datasource``: importing Ray Data costs most of a second that a corpus the driver reads itself
(``data.held``) never needs."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from xai_ray.data.pieces import CHUNK, read_piece
from xai_ray.data.sources import Piece, SourcePlan


class PieceSource(Datasource):
    """A Ray Data datasource: one read task per piece, yielding its standardised chunks."""

    def __init__(self, plan: SourcePlan) -> None:
        super().__init__()
        self.plan = plan

    def estimate_inmemory_data_size(self):
        return None

    def get_name(self) -> str:
        return "Corpus"

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None) -> list[ReadTask]:
        bare = replace(self.plan, pieces=())  # each task carries its own piece only
        return [
            ReadTask(
                partial(_read_one, bare, piece),
                BlockMetadata(num_rows=piece.rows, size_bytes=None, exec_stats=None, input_files=None),
                schema=CHUNK,
            )
            for piece in self.plan.pieces
        ]


def _read_one(plan: SourcePlan, piece: Piece):
    yield from read_piece(plan, piece)
