"""The rows a run hands its scoring actors: how many a batch holds, and a notebook's DataFrame or
a Ray Dataset made into the actors' input (longest first, the head samples marked)."""

from __future__ import annotations

import pandas as pd

from xai_ray.config import RunConfig
from xai_ray.data.head_docs import head_docs
from xai_ray.runtime import ray_data


def even_batch(batch_size: int, n_docs: int | None, actors: int) -> int:
    """Documents a batch, so that the actors finish together: at least 4 batches an actor. The last
    batches are the shortest (longest reviews first), so an actor idles at the end for a fraction
    of one small batch; at 64 a batch, 200 reviews on 2 actors went 128 + 72 (one actor idle for
    the last 56 of them). An actor still forwards ``max_tokens_per_batch`` at a time."""
    if not n_docs:
        return batch_size
    return max(1, min(batch_size, -(-n_docs // (4 * actors))))


def count_of(rows) -> int | None:
    """How many documents ``score`` was given, when known without reading them."""
    if isinstance(rows, pd.DataFrame):
        return len(rows)
    counts = getattr(rows, "counts", None)
    return counts["todo"] if counts else None


def scorer_input(rows, cfg: RunConfig, actors: int):
    """(a Ray Dataset of the rows to score, how many) for what ``score`` was given."""
    import pyarrow as pa

    if isinstance(rows, pd.DataFrame):
        ordered = order_corpus(rows, cfg)
        table = pa.Table.from_pandas(ordered, preserve_index=False)
        n_blocks = max(1, min(len(ordered) // max(cfg.batch_size, 1), actors * 8))
        step = max(1, -(-table.num_rows // n_blocks))
        return ray_data().from_arrow([table.slice(i, step) for i in range(0, max(table.num_rows, 1), step)]), len(rows)
    if isinstance(rows, ray_data().Dataset):
        return rows, rows.count()
    counts = rows.counts
    return rows.todo(cfg.batch_size, head_docs(counts["kept"], cfg), blocks=16 * actors), counts["todo"]


def order_corpus(corpus: pd.DataFrame, cfg: RunConfig) -> pd.DataFrame:
    """A DataFrame corpus as the actors get it: longest first (batches hold similar lengths, so
    little padding, and memory trouble shows early), with the documents of the head statistics and
    similarity samples marked (``data.head_docs``, ranks in input order, as a screened corpus marks
    them). A corpus that marks its own ``heads_sample`` keeps it, and without ``heads_stats`` every
    row gets statistics."""
    order = corpus["text"].map(lambda t: len(t) if isinstance(t, str) else 0).sort_values(ascending=False).index
    ordered = corpus.loc[order].reset_index(drop=True)
    if "heads_sample" not in ordered:
        for name, marks in head_docs(len(ordered), cfg).marks(corpus.index.get_indexer(order)).items():
            ordered[name] = marks
    return ordered
