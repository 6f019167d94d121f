"""What "top words" means, defined once for the CLI, the run summary, the report and the nightly job.

- The statistic (``STATS``): ``lift`` (default), a word's share of its review's score times the
  review's number of words (divided by the words of a joined contraction, so ``wasn't`` is not
  lifted for holding three), so 1 is an even spread whatever the length (``words.lift``); or
  ``share``, the share itself, which favours short reviews (a 10-word review's mean share is 0.1,
  a 300-word review's 0.0033).
- Per document first: a word's value in a review is its mean over its occurrences there; the
  ranked value is the mean of that over the reviews holding the word, so a review counts once
  however often it repeats a word, and the 95% interval is a t interval over those reviews
  (``add_interval``: the rule of every table, ``intervals``).
- Support in distinct documents: ``default_min_docs`` scales with the corpus and is never 1.
- Word classes that can be left out (``WORD_CLASSES``): ``punct`` (made only of Unicode
  punctuation or symbols, categories P* and S*) and ``stop`` (``data/stopwords.txt``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

from xai_ray.query.intervals import t_interval

STATS = ("lift", "share")
WORD_CLASSES = ("punct", "stop")
STOPWORDS_FILE = Path(__file__).resolve().parents[1] / "data" / "stopwords.txt"
MIN_DOCS_FLOOR, MIN_DOCS_CEILING, DOCS_PER_SUPPORT = 2, 50, 50


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
    """The shipped stop-word list (lower case), comments and blank lines skipped; each contraction
    also with the typographic apostrophe U+2019 ("it’s" passed as a word the list spells "it's")."""
    lines = STOPWORDS_FILE.read_text(encoding="utf-8").splitlines()
    words = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    return tuple(sorted(words | {word.replace("'", "\u2019") for word in words}))


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


def add_interval(top: pd.DataFrame) -> pd.DataFrame:
    """Add ``ci_low``/``ci_high``: the one interval rule (``intervals.t_interval``) over the
    documents holding the word (``sd``: the standard deviation of its per-document values). NaN
    with a single document."""
    if top.empty:
        return top.assign(ci_low=pd.Series(dtype=float), ci_high=pd.Series(dtype=float))
    low, high = t_interval(top["mean_score"], top["sd"], top["documents"])
    return top.assign(ci_low=low, ci_high=high)
