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
        "report_topk_all_totals",
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


def test_a_word_is_one_key_whatever_its_unicode_form_or_apostrophe(con):
    """ "café" typed composed and decomposed ranked as two words with split support, and "it’s"
    (U+2019) passed --exclude stop as a word the list spells "it's". The ``word_key`` macro every
    grouping query calls (lower case, NFC) and a stop list holding both apostrophes."""
    given = [
        ("Caf\u00e9", None, "caf\u00e9"),
        ("cafe\u0301", None, "caf\u00e9"),
        ("It\u2019s", None, "it\u2019s"),
        ("it", "It\u2019s", "it\u2019s"),  # a contraction's piece: its joined word
        ("STRASSE", None, "strasse"),
    ]
    for word, joined, expected in given:
        assert con.execute("select word_key(?, ?)", [joined, word]).fetchone()[0] == expected, word
    params = wordstats.query_params("lift", 1, 1, "stop")
    kept = con.execute(
        "select counted_word(word_key(null, $w), 3, 3, $min_docs, $min_count, $exclude_punct, $stopwords)",
        {"w": "It\u2019s", **{k: v for k, v in params.items() if k != "stat"}},
    ).fetchone()[0]
    assert kept is False


def test_topk_counts_both_forms_of_a_word_as_one(tmp_path):
    """Given: "café" composed in d1 and d2, decomposed in d3; "it’s" in every review. Expected: one
    "café" row in 3 documents, and no "it's" with stop words left out."""
    from test_charts import write_run

    from xai_ray.query.top_words import topk

    docs = [{"doc_id": d, "pred": 1} for d in ("d1", "d2", "d3")]
    forms = {"d1": "caf\u00e9", "d2": "caf\u00e9", "d3": "cafe\u0301"}
    rows = [(d, i, w, s) for d, form in forms.items() for i, (w, s) in enumerate([(form, 0.6), ("it\u2019s", 0.4)])]
    write_run(tmp_path, "r", docs, {("raw", 1): rows})
    top = topk(open_store(tmp_path), "r", "raw", 1, 10, 1, "all", min_docs=1, exclude="stop")
    assert top.word.tolist() == ["caf\u00e9"] and top.documents.tolist() == [3]


def test_topk_by_label_or_correct_of_a_run_without_labels_is_refused(tmp_path):
    """A run of an unlabelled corpus answered `--by label` and `--by correct` with one NULL group."""
    from test_charts import write_run

    from xai_ray.query.limits import QueryError
    from xai_ray.query.top_words import topk

    docs = [{"doc_id": d, "pred": 1, "label": None} for d in ("d1", "d2")]
    write_run(tmp_path, "r", docs, {("raw", 1): [(d, 0, "fine", 1.0) for d in ("d1", "d2")]})
    con = open_store(tmp_path)
    for by in ("label", "correct"):
        with pytest.raises(QueryError, match=rf"run 'r' has no labels .*--by {by} has no groups"):
            topk(con, "r", "raw", 1, 10, 1, by, min_docs=1)
    assert topk(con, "r", "raw", 1, 10, 1, "pred", min_docs=1).word.tolist() == ["fine"]
