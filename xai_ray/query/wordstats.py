"""What "top words" means, defined once for the CLI, the run summary, the report and the nightly job.

- The statistic (``STATS``): ``lift`` (default), a word's share of its review's score times the
  review's number of words (divided by the words of a joined contraction, so ``wasn't`` is not
  lifted for holding three), so 1 is an even spread whatever the length (``words.lift``); or
  ``share``, the share itself, which favours short reviews (a 10-word review's mean share is 0.1,
  a 300-word review's 0.0033).
- Per document first: a word's value in a review is its mean over its occurrences there; the
  ranked value is the mean of that over the reviews holding the word, so a review counts once
  however often it repeats a word, and the 95% interval is a t interval over those reviews
  (``add_interval``).
- Support in distinct documents: ``default_min_docs`` scales with the corpus and is never 1.
- Word classes that can be left out (``WORD_CLASSES``): ``punct`` (made only of Unicode
  punctuation or symbols, categories P* and S*) and ``stop`` (``data/stopwords.txt``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

STATS = ("lift", "share")
WORD_CLASSES = ("punct", "stop")
STOPWORDS_FILE = Path(__file__).resolve().parents[1] / "data" / "stopwords.txt"
MIN_DOCS_FLOOR, MIN_DOCS_CEILING, DOCS_PER_SUPPORT = 2, 50, 50
# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (standard tables).
T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
Z975 = 1.959964


class WordStatsError(ValueError):
    """A top-k option is out of range; the message says which and why."""


def default_min_docs(n_docs: int) -> int:
    """The support a word needs by default, in distinct documents: one in 50 of the corpus,
    at least 2 (a word of one review is that review's quirk, and has no interval) and at most 50
    (enough for a t interval to be tight whatever the corpus). 200 reviews: 4; 1,000: 20."""
    return int(min(MIN_DOCS_CEILING, max(MIN_DOCS_FLOOR, int(n_docs) // DOCS_PER_SUPPORT)))


def check_stat(stat: str) -> str:
    if stat not in STATS:
        raise WordStatsError(f"--stat must be one of {', '.join(STATS)}; got {stat!r}")
    return stat


def parse_exclude(exclude) -> tuple[str, ...]:
    """``"punct,stop"``, a list or None -> the word classes to leave out, checked."""
    if exclude is None:
        return ()
    names = [x.strip() for x in exclude.split(",")] if isinstance(exclude, str) else [str(x).strip() for x in exclude]
    names = [x for x in names if x and x != "none"]
    unknown = [x for x in names if x not in WORD_CLASSES]
    if unknown:
        raise WordStatsError(
            f"--exclude takes {', '.join(WORD_CLASSES)} (comma-separated) or none; got {', '.join(unknown)}"
        )
    return tuple(dict.fromkeys(names))


@lru_cache(maxsize=1)
def stopwords() -> tuple[str, ...]:
    """The shipped stop-word list (lower case), comments and blank lines skipped."""
    lines = STOPWORDS_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(sorted({line.strip() for line in lines if line.strip() and not line.startswith("#")}))


def query_params(stat: str, min_docs: int, min_count: int, exclude) -> dict:
    """The bound parameters every top-k query takes (``sql/topk*.sql``, ``report_topk_all``)."""
    classes = parse_exclude(exclude)
    if int(min_docs) < 1 or int(min_count) < 1:
        raise WordStatsError(f"--min-docs and --min-count must be >= 1; got {min_docs} and {min_count}")
    return {
        "stat": check_stat(stat),
        "min_docs": int(min_docs),
        "min_count": int(min_count),
        "exclude_punct": "punct" in classes,
        "stopwords": list(stopwords()) if "stop" in classes else [],
    }


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom: the table to 30, then the
    Cornish-Fisher expansion around the normal quantile (error < 0.001 there)."""
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


def add_interval(top: pd.DataFrame) -> pd.DataFrame:
    """Add ``ci_low``/``ci_high``: mean_score +- t(0.975, documents - 1) x sd / sqrt(documents), a
    95% interval over the documents holding the word (``sd``: the standard deviation of its
    per-document values). NaN with a single document."""
    if top.empty:
        return top.assign(ci_low=pd.Series(dtype=float), ci_high=pd.Series(dtype=float))
    documents = top["documents"].astype(float).to_numpy()
    quantile = np.array([t975(int(d) - 1) for d in documents])
    with np.errstate(invalid="ignore", divide="ignore"):
        half = quantile * top["sd"].astype(float).to_numpy() / np.sqrt(documents)
    mean = top["mean_score"].astype(float).to_numpy()
    return top.assign(ci_low=mean - half, ci_high=mean + half)
