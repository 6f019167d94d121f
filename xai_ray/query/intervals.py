"""The one interval rule of every table and chart: a 95% t interval of a mean over reviews.

Every interval the product shows is of a mean over reviews (a word's mean lift over the reviews
holding it, a method's mean faithfulness, its paired gain over the random floor), each review one
draw, so one rule serves them all: mean +- t(0.975, n - 1) x sd / sqrt(n), ``sd`` the sample
standard deviation of the n per-review values. None with fewer than two reviews.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

RULE = "95% t interval over reviews"  # how tables and notes name it
# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom, to six decimals.
T975 = (
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.131450,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.045230,
    2.042272,
)
Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom: the table to 30, then the
    Cornish-Fisher expansion around the normal quantile (error < 2e-6 there)."""
    if df < 1:
        return math.nan
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def t_interval(mean, sd, n) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of each mean (arrays or columns alike): mean +- t(0.975, n - 1) x sd / sqrt(n);
    NaN where n < 2 or sd is missing."""
    mean, sd, n = _floats(mean), _floats(sd), _floats(n)
    quantile = np.array([math.nan if math.isnan(k) else t975(int(k) - 1) for k in n])
    with np.errstate(invalid="ignore", divide="ignore"):
        half = quantile * sd / np.sqrt(n)
    return mean - half, mean + half


def _floats(values) -> np.ndarray:
    """A column, array or list as float64, missing values (None, NA) as NaN."""
    return pd.Series(values).to_numpy(dtype=float, na_value=np.nan)


def summarize(values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group of ``keys``: ``mean``, ``lo``, ``hi`` (the rule above) and ``n_docs``, of ``value``
    over the rows (one per review) that have one. Group keys that are NaN stay NaN."""
    columns = [*keys, "mean", "lo", "hi", "n_docs"]
    present = values[values["value"].notna()]
    if present.empty:
        return pd.DataFrame(columns=columns)
    grouped = present.groupby(keys, dropna=False)["value"].agg(["mean", "std", "count"]).reset_index()
    lo, hi = t_interval(grouped["mean"], grouped["std"], grouped["count"])
    return grouped.assign(lo=lo, hi=hi, n_docs=grouped["count"].astype(int))[columns]


# The faithfulness table's summary (per method, layer and metric), kept beside a run by the
# aggregate stage (``report.aggregates``) under this name, tagged with the rule.
SUMMARY = "faithfulness_summary"
SUMMARY_PARAMS = {"interval": RULE}


def faithfulness_summary(values: pd.DataFrame) -> pd.DataFrame:
    """values: ``sql/report_faithfulness.sql``'s rows (method, layer (NaN for the baselines),
    metric, doc_id, value) -> method, layer, metric, mean, lo, hi, n_docs."""
    return summarize(values, ["method", "layer", "metric"])
