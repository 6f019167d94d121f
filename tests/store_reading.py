"""A run's words or tokens of one method and layer read straight from its Parquet files (not through
the views), as layout 1 stored them, for tests that check the views against the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq


def read_slice(run: Path, table: str, method: str, layer: int) -> pd.DataFrame:
    """``table`` ("words" or "tokens") of ``method`` and ``layer`` in layout 1's columns."""
    legacy = run / table / f"method={method}" / f"layer={layer}"
    if legacy.is_dir():
        return pq.read_table(legacy).to_pandas()
    frame = pq.read_table(run / ("word_scores" if table == "words" else "token_scores")).to_pandas()
    score = frame.pop(f"score:{method}:{layer}")
    if table == "tokens":
        return frame[["doc_id", "position", "token", "word_id"]].assign(score=score).dropna(subset=["score"])
    out = frame[["doc_id", "word_id", "word"]].assign(
        score=score,
        raw_score=frame[f"raw_score:{method}:{layer}"],
        lift=(score.to_numpy(np.float64) * frame["unit_weight"].to_numpy()).astype(np.float32),
        span_id=frame["span_id"],
        joined=frame["joined"],
    )
    return out.dropna(subset=["score"]).reset_index(drop=True)
