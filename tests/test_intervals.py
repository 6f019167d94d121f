"""The one interval rule of every table (``query.intervals``): a 95% t interval of a mean over
reviews, checked against scipy and against values worked by hand; and no other rule in the package."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xai_ray.query import intervals

PACKAGE = Path(intervals.__file__).resolve().parents[1]


@pytest.mark.parametrize("df", [1, 2, 3, 5, 29, 30, 31, 39, 60, 200, 5000])
def test_t_quantile_matches_scipy(df):
    stats = pytest.importorskip("scipy.stats")
    assert intervals.t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-6)


def test_t_interval_by_hand_and_where_it_has_none():
    # 1, 2, 3, 6: mean 3, sd sqrt(14 / 3) = 2.160247, t(0.975, 3) = 3.182446: 3 +- 3.182446 x 2.160247 / 2
    low, high = intervals.t_interval([3.0, 5.0, 5.0], pd.Series([math.sqrt(14 / 3), None, 0.0]), [4, 1, 7])
    assert (low[0], high[0]) == pytest.approx((3 - 3.437435, 3 + 3.437435), abs=1e-6)
    assert np.isnan(low[1]) and np.isnan(high[1])  # one review: no spread, no interval
    assert (low[2], high[2]) == (5.0, 5.0)  # the same value in every review


def test_summary_per_group_matches_scipy_and_keeps_baselines_without_a_layer():
    stats = pytest.importorskip("scipy.stats")
    values = pd.DataFrame(
        {
            "method": ["raw"] * 5 + ["random"] * 3,
            "layer": [2.0] * 5 + [np.nan] * 3,
            "metric": ["m"] * 8,
            "doc_id": ["a", "b", "c", "d", "e", "a", "b", "c"],
            "value": [0.1, 0.4, 0.35, None, 0.2, 0.0, 0.1, 0.05],  # raw has no value for d
        }
    )
    got = intervals.faithfulness_summary(values).set_index("method")
    for method, sample in (("raw", [0.1, 0.4, 0.35, 0.2]), ("random", [0.0, 0.1, 0.05])):
        expected = stats.t.interval(0.95, len(sample) - 1, loc=np.mean(sample), scale=stats.sem(sample))
        row = got.loc[method]
        assert row["mean"] == pytest.approx(np.mean(sample)) and row["n_docs"] == len(sample)
        assert (row["lo"], row["hi"]) == pytest.approx(expected, abs=1e-6)
    assert got.loc["raw", "layer"] == 2 and np.isnan(got.loc["random", "layer"])


def test_no_other_interval_rule_in_the_package():
    """A normal quantile or a resampling in some other module would be a second rule."""
    others = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".sql") or path.name == "intervals.py":
            continue
        text = path.read_text()
        if re.search(r"1\.9599|\b1\.96\b|bootstrap|percentile\(", text):
            others.append(str(path.relative_to(PACKAGE)))
    assert not others, f"interval rules outside query/intervals.py: {others}"
