"""The faithfulness table's summary: per method, layer and metric, the mean over documents with a
percentile-bootstrap 95% interval. Documents are resampled (the same resamples for every method,
so their intervals are comparable) with a fixed seed, so a report is reproducible. The pipeline's
aggregate stage keeps the result beside the run (``report.aggregates``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

SUMMARY = "faithfulness_bootstrap"  # the kept aggregate's name
RESAMPLES = 1000
SEED = 0
CHUNK = 200  # resamples per matrix product: bounds memory at CHUNK x documents


def bootstrap(values: pd.DataFrame, resamples: int = RESAMPLES, seed: int = SEED) -> pd.DataFrame:
    """Mean and percentile-bootstrap 95% interval of each (method, layer, metric).

    values: columns method, layer (NaN for the baselines), metric, doc_id, value. Documents are
    resampled with replacement; a resample's mean of a metric averages the documents that have
    it (with their multiplicity). Returns method, layer, metric, mean, lo, hi, n_docs.
    """
    columns = ["method", "layer", "metric", "mean", "lo", "hi", "n_docs"]
    if values.empty:
        return pd.DataFrame(columns=columns)
    frame = values.assign(layer=values["layer"].fillna(0).astype(int))  # 0: no layer (pivot keys cannot be NaN)
    wide = frame.pivot_table(index="doc_id", columns=["method", "layer", "metric"], values="value", aggfunc="first")
    x = wide.to_numpy(dtype=np.float64)  # (D, G)
    present = ~np.isnan(x)  # (D, G)
    x = np.where(present, x, 0.0)
    n_docs = x.shape[0]
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, resamples, CHUNK):
        picks = rng.integers(0, n_docs, size=(min(CHUNK, resamples - start), n_docs))  # (b, D)
        weights = np.stack([np.bincount(row, minlength=n_docs) for row in picks]).astype(np.float64)  # (b, D)
        with np.errstate(invalid="ignore", divide="ignore"):
            means.append((weights @ x) / (weights @ present))  # (b, G)
    resampled = np.concatenate(means)  # (B, G)
    counts = present.sum(axis=0)  # (G,)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(axis=0) / counts
    out = pd.DataFrame(list(wide.columns), columns=["method", "layer", "metric"])
    out["mean"] = mean
    out["lo"] = np.nanpercentile(resampled, 2.5, axis=0)
    out["hi"] = np.nanpercentile(resampled, 97.5, axis=0)
    out["n_docs"] = counts
    out["layer"] = out["layer"].where(out["layer"] > 0)  # back to NaN for the baselines
    return out[columns]
