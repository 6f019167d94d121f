"""A run's words or tokens of one method and layer read straight from its Parquet files (not through
the views), as layout 1 stored them, for tests that check the views against the files. Layout 3's
words are the rows of their first tokens (span_id set), whose score column holds the word's raw
score: the share stored or else raw / the document's divisor in float32; a token's score is its
token_score where set, else its row's score."""

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
    if table == "words" and not (run / "word_scores").is_dir():
        return _layout3_words(pq.read_table(run / "token_scores").to_pandas(), f"{method}:{layer}")
    frame = pq.read_table(run / ("word_scores" if table == "words" else "token_scores")).to_pandas()
    score = frame.pop(f"score:{method}:{layer}")
    if table == "tokens" and "span_id" in frame:  # layout 3: a word without a token has a row of its own
        score = frame[f"token_score:{method}:{layer}"].fillna(score)  # a word's row holds the word's raw score
        frame, score = frame[frame["position"].notna()], score[frame["position"].notna()]
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


def _layout3_words(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    words = frame[frame["span_id"].notna() & frame[f"divisor:{name}"].notna()]
    raw = words[f"score:{name}"].to_numpy(np.float32)
    share = raw / words[f"divisor:{name}"].to_numpy(np.float32)
    if f"share:{name}" in words:
        share = words[f"share:{name}"].fillna(pd.Series(share, index=words.index)).to_numpy(np.float32)
    out = words[["doc_id", "word"]].assign(
        word_id=words["word_id"].astype("int32"),
        score=share,
        raw_score=raw,
        lift=(share.astype(np.float64) * words["unit_weight"].to_numpy()).astype(np.float32),
        span_id=words["span_id"].astype("int32"),
        joined=words["joined"],
    )
    return out[["doc_id", "word_id", "word", "score", "raw_score", "lift", "span_id", "joined"]].reset_index(drop=True)
