"""Corpus-wide head statistics from the scorer's per-document sums: merged, tabled, mapped.

Every scored row carries its document's per-head sums (``xai_ray.methods.heads``); the write stage adds
them up batch by batch (``HeadTotals``: one L x H x k array, whatever the corpus size) and
publishes the means as the ``heads`` table and the mean Jensen-Shannon divergences of the
sampled documents as ``head_similarity``. ``classical_mds`` and ``behaviour`` turn those into
the report's head map. numpy only: no torch, no Ray.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Per-head statistics, in the order the capture sums them (xai_ray.methods.heads documents each one)
STATISTICS = ("entropy", "entropy_norm", "cls_entropy", "to_cls", "to_sep", "to_punct", "to_self", "to_prev", "to_next")
N_STATS = len(STATISTICS)
# Which rows each statistic is averaged over: every row, one ([CLS]) per document, or every row
# but one per document (the first has no previous token, the last no next one).
PER_DOCUMENT = {"cls_entropy"}
ONE_LESS = {"to_prev", "to_next"}
BEHAVIOURS = ("to_cls", "to_sep", "to_punct", "to_self", "to_prev", "to_next")
DOMINANT_SHARE = 0.5  # a head "attends to X" when X takes at least this mean share (Clark et al.'s > 50%)
BROAD_ENTROPY = 0.7  # else "broad" when rows are this close to uniform (entropy / ln n), else "mixed"


HEAD_COLUMNS = ("n_layers", "n_tokens", "heads", "head_jsd", "head_jsd_rows")  # the row columns ``add`` reads


class HeadTotals:
    """Sums of the per-document head statistics and head-pair divergences over scorer batches."""

    def __init__(self) -> None:
        self.sums: np.ndarray | None = None  # (L, H, k)
        self.n_docs = 0
        self.n_rows = 0
        self.jsd: np.ndarray | None = None  # (P, P), P = L * H
        self.jsd_rows = 0
        self.jsd_docs = 0
        self.n_layers = 0

    def add(self, batch: pa.Table) -> None:
        """Add one batch of scorer rows (``scoring.row_schema``); error rows and rows without
        head statistics (heads off) are skipped."""
        if "heads" not in batch.column_names:
            return
        keep = pc.and_(pc.is_null(batch.column("error")), pc.is_valid(batch.column("heads")))
        # the few columns summed here, filtered alone: filtering the whole batch copied every
        # review's scores (a writer's part: 0.1 s of 500 bert-base reviews)
        wanted = [name for name in HEAD_COLUMNS if name in batch.column_names]
        batch = batch.select(wanted).filter(keep)
        if batch.num_rows == 0:
            return
        self.n_layers = int(batch.column("n_layers")[0].as_py())
        per_doc = _stacked(batch.column("heads"), batch.num_rows)  # (B, L*H*k)
        total = per_doc.sum(axis=0).reshape(self.n_layers, -1, N_STATS)  # (L, H, k)
        self.sums = total if self.sums is None else self.sums + total
        self.n_docs += batch.num_rows
        self.n_rows += int(pc.sum(batch.column("n_tokens")).as_py())
        sampled = batch.filter(pc.is_valid(batch.column("head_jsd")))
        if sampled.num_rows:
            jsd = _stacked(sampled.column("head_jsd"), sampled.num_rows).sum(axis=0)  # (P*P,)
            size = int(round(np.sqrt(jsd.size)))
            jsd = jsd.reshape(size, size)
            self.jsd = jsd if self.jsd is None else self.jsd + jsd
            self.jsd_rows += int(pc.sum(sampled.column("head_jsd_rows")).as_py())
            self.jsd_docs += sampled.num_rows

    def merge(self, other: HeadTotals) -> None:
        """Add another total in (an earlier part of the same run, see ``store.RunWriter``)."""
        if other.sums is None:
            return
        self.n_layers = self.n_layers or other.n_layers
        self.sums = other.sums.copy() if self.sums is None else self.sums + other.sums
        self.n_docs += other.n_docs
        self.n_rows += other.n_rows
        if other.jsd is not None:
            self.jsd = other.jsd.copy() if self.jsd is None else self.jsd + other.jsd
        self.jsd_rows += other.jsd_rows
        self.jsd_docs += other.jsd_docs

    def state(self) -> dict | None:
        """Plain JSON values (kept in a committed part's record); None when nothing was added."""
        if self.sums is None:
            return None
        return {
            "sums": self.sums.tolist(),
            "n_docs": self.n_docs,
            "n_rows": self.n_rows,
            "n_layers": self.n_layers,
            "jsd": None if self.jsd is None else self.jsd.tolist(),
            "jsd_rows": self.jsd_rows,
            "jsd_docs": self.jsd_docs,
        }

    @classmethod
    def from_state(cls, state: dict) -> HeadTotals:
        totals = cls()
        totals.sums = np.asarray(state["sums"], dtype=np.float64)
        totals.n_docs, totals.n_rows, totals.n_layers = state["n_docs"], state["n_rows"], state["n_layers"]
        totals.jsd = None if state["jsd"] is None else np.asarray(state["jsd"], dtype=np.float64)
        totals.jsd_rows, totals.jsd_docs = state["jsd_rows"], state["jsd_docs"]
        return totals

    def means(self) -> np.ndarray:
        """(L, H, k) mean of each statistic over the rows it is defined on (see ``PER_DOCUMENT``)."""
        rows = np.array(
            [
                self.n_docs if name in PER_DOCUMENT else self.n_rows - self.n_docs if name in ONE_LESS else self.n_rows
                for name in STATISTICS
            ],
            dtype=np.float64,
        )
        return self.sums / np.maximum(rows, 1)

    def heads_table(self) -> pa.Table:
        """One row per layer x head: the means and the counts behind them (the store casts it to ``schemas.HEADS``)."""
        means = self.means()
        n_layers, n_heads, _ = means.shape
        layer, head = np.meshgrid(np.arange(1, n_layers + 1), np.arange(1, n_heads + 1), indexing="ij")
        columns = {"layer": layer.ravel().astype(np.int32), "head": head.ravel().astype(np.int32)}
        for k, name in enumerate(STATISTICS):
            columns[name] = means[:, :, k].ravel()
        columns["n_docs"] = np.full(layer.size, self.n_docs, dtype=np.int64)
        columns["n_rows"] = np.full(layer.size, self.n_rows, dtype=np.int64)
        return pa.table(columns)

    def similarity_table(self) -> pa.Table | None:
        """Every ordered pair of heads with its mean JSD over the sampled rows (``schemas.HEAD_SIMILARITY``)."""
        if self.jsd is None:
            return None
        size = self.jsd.shape[0]
        n_heads = size // self.n_layers
        a, b = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
        a, b = a.ravel(), b.ravel()
        return pa.table(
            {
                "layer_a": (a // n_heads + 1).astype(np.int32),
                "head_a": (a % n_heads + 1).astype(np.int32),
                "layer_b": (b // n_heads + 1).astype(np.int32),
                "head_b": (b % n_heads + 1).astype(np.int32),
                "jsd": (self.jsd / max(self.jsd_rows, 1)).ravel(),
                "n_docs": np.full(a.size, self.jsd_docs, dtype=np.int64),
                "n_rows": np.full(a.size, self.jsd_rows, dtype=np.int64),
            }
        )


def _stacked(column: pa.ChunkedArray, n: int) -> np.ndarray:
    """A list<double> column of equal-length lists -> (n, width) float64 array, without Python lists."""
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return flat.reshape(n, -1)


def classical_mds(squared: np.ndarray, dims: int = 2) -> np.ndarray:
    """Classical (Torgerson) MDS: (P, P) squared distances -> (P, dims) coordinates.

    B = -1/2 J D² J with J = I - 11ᵀ/P; coordinates are the top eigenvectors of B scaled by the
    square roots of their eigenvalues (negative ones, from a non-Euclidean D, count as 0).
    """
    squared = np.asarray(squared, dtype=np.float64)
    size = squared.shape[0]
    centre = np.eye(size) - np.full((size, size), 1.0 / size)
    gram = -0.5 * centre @ squared @ centre
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)  # ascending
    order = np.argsort(values)[::-1][:dims]
    coords = vectors[:, order] * np.sqrt(np.clip(values[order], 0.0, None))
    # A fixed sign per axis (largest |coordinate| positive): the same data always draws the same map
    signs = np.sign(coords[np.abs(coords).argmax(axis=0), np.arange(coords.shape[1])])
    coords = coords * np.where(signs == 0, 1.0, signs)
    # fewer points than axes (a model of one head): the missing axes are 0, so the map still draws
    return np.pad(coords, ((0, 0), (0, dims - coords.shape[1])))


def behaviour(stats) -> str:
    """A head's dominant behaviour from its mean statistics (a mapping or a DataFrame row):
    the attention target holding at least ``DOMINANT_SHARE`` of its mass, else broad or mixed."""
    share, name = max((float(stats[key]), key) for key in BEHAVIOURS)
    if share >= DOMINANT_SHARE:
        return {
            "to_cls": "[CLS]",
            "to_sep": "[SEP]",
            "to_punct": "punctuation",
            "to_self": "self",
            "to_prev": "previous token",
            "to_next": "next token",
        }[name]
    return "broad" if float(stats["entropy_norm"]) >= BROAD_ENTROPY else "mixed"
