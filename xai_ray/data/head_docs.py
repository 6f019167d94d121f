"""Which documents of a run get per-head statistics, and which of those are compared head by head.

Both come from one seeded permutation of the documents a run keeps, each numbered by its rank in
input order (rows screened out or unchanged are not counted; rows a resumed run already holds
are): the first ``heads_docs`` ranks of the permutation get statistics (0: every document), the
first ``heads_sample`` of them the head-similarity comparison too, so a compared document always
has its statistics. The choice depends on the corpus, its screening and ``seed`` only: the
driver's path (``data.held``) and the streaming one (``data.stream``) mark the same documents,
whatever the batches, the actors or a resume.

The marks travel as two boolean columns of the rows to score, ``heads_sample`` and
``heads_stats``; rows without ``heads_stats`` (a notebook's DataFrame or Ray Dataset) get
statistics for every row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xai_ray.config import RunConfig

EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class HeadDocs:
    """Ranks (among the kept documents, input order) of the two samples, each sorted."""

    sample: np.ndarray = field(default_factory=lambda: EMPTY)  # compared head by head (Jensen-Shannon)
    stats: np.ndarray | None = None  # with per-head statistics; None: every document

    def marks(self, ranks: np.ndarray) -> dict[str, np.ndarray]:
        """The ``heads_sample`` and ``heads_stats`` columns of rows of these ``ranks``."""
        ranks = np.asarray(ranks, dtype=np.int64)
        stats = np.ones(len(ranks), dtype=bool) if self.stats is None else np.isin(ranks, self.stats)
        return {"heads_sample": np.isin(ranks, self.sample), "heads_stats": stats}


def head_docs(n_docs: int, cfg: RunConfig) -> HeadDocs:
    """The samples of a run that keeps ``n_docs`` documents (see the module docstring); none at all
    with ``heads`` off."""
    if not cfg.heads or n_docs == 0:
        return HeadDocs(EMPTY, EMPTY)
    order = np.random.default_rng(cfg.seed).permutation(n_docs)  # (n_docs,) one draw for both samples
    n_stats = cfg.heads_docs if 0 < cfg.heads_docs < n_docs else n_docs
    stats = None if n_stats == n_docs else np.sort(order[:n_stats])
    return HeadDocs(np.sort(order[: min(cfg.heads_sample, n_stats)]), stats)
