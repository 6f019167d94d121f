"""Which words count in a top-k list (support in documents and occurrences, punctuation, stop
words), defined once for SQL: the ``counted_word`` macro (``sql/macro_counted_word.sql``) that every
top-k query calls. Given rows and expected rows, worked out by hand."""

from __future__ import annotations

import re

import pytest

from xai_ray.query import wordstats
from xai_ray.query.connection import SQL_DIR, open_store

# word, documents, occurrences: a word's support in one slice, as the queries aggregate it
GIVEN = [
    ("good", 3, 5),
    ("rare", 1, 4),  # one document
    ("thin", 2, 2),  # two documents, two occurrences
    (".", 3, 9),
    ("...", 3, 3),
    ("\u2014", 3, 3),  # em dash: punctuation
    ("$", 3, 3),  # a symbol
    ("wasn't", 3, 3),  # a contraction holds letters: a word
    ("a.b", 3, 3),
    ("7", 3, 3),  # a digit is no punctuation
    ("the", 3, 3),
    ("and", 3, 3),
    ("not", 3, 3),  # a negation is no stop word: it turns a review
]

CASES = [
    # (min_docs, min_count, exclude) -> the words that count, by hand
    pytest.param(1, 1, "none", [w for w, _, _ in GIVEN], id="everything"),
    pytest.param(2, 1, "none", [w for w, d, _ in GIVEN if w != "rare"], id="support-in-documents"),
    pytest.param(
        2, 3, "none", ["good", ".", "...", "\u2014", "$", "wasn't", "a.b", "7", "the", "and", "not"], id="occurrences"
    ),
    pytest.param(
        2, 1, "punct", ["good", "thin", "wasn't", "a.b", "7", "the", "and", "not"], id="punctuation-and-symbols"
    ),
    pytest.param(
        2, 1, "stop", ["good", "thin", ".", "...", "\u2014", "$", "wasn't", "a.b", "7", "not"], id="stop-words"
    ),
    pytest.param(3, 3, "punct,stop", ["good", "wasn't", "a.b", "7", "not"], id="all-together"),
]


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    """A store's connection (the macro comes with every one) holding the given rows, in order."""
    con = open_store(tmp_path_factory.mktemp("empty-store"))
    con.execute("create temporary table given (position integer, word varchar, documents bigint, occurrences bigint)")
    con.executemany("insert into given values (?, ?, ?, ?)", [(i, *row) for i, row in enumerate(GIVEN)])
    return con


@pytest.mark.parametrize(("min_docs", "min_count", "exclude", "expected"), CASES)
def test_counted_word_keeps_the_expected_rows(con, min_docs, min_count, exclude, expected):
    params = wordstats.query_params("lift", min_docs, min_count, exclude)
    del params["stat"]
    got = con.execute(
        "select word from given where counted_word(word, documents, occurrences, $min_docs, $min_count, "
        "$exclude_punct, $stopwords) order by position",
        params,
    ).fetchall()
    assert [w for (w,) in got] == expected


def test_every_topk_query_asks_the_macro_and_spells_no_rule_of_its_own():
    """The rule lives in one file: a query that took the support or word-class parameters and
    filtered on them itself would drift from it."""
    takers = sorted(p for p in SQL_DIR.glob("*.sql") if "$min_docs" in p.read_text())
    assert [p.stem for p in takers] == [
        "report_contrast",
        "report_topk_all",
        "topk",
        "topk_grouped",
        "topk_lean",
        "topk_lean_totals",
        "topk_totals",
    ]
    for path in takers:
        text = path.read_text()
        assert "counted_word(" in text, path.name
        code = re.sub(r"--[^\n]*", "", text)  # comments may describe the rule
        assert "regexp_full_match" not in code and "list_contains" not in code, path.name
        assert not re.search(r"[<>]=?\s*\$min_(docs|count)", code), path.name
