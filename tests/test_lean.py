"""Whether a method's top words lean toward the predicted class or against it (sql/topk_lean*.sql,
query.lean), dbt-style: a tiny hand-written store in, the expected rows out, every lean worked by
hand from the document frequencies below (ln of smoothed odds, 0.5 added to each count).

Reviews: p1-p4 predicted positive (1), n1-n4 predicted negative (0); 4 reviews a side.
Document frequency (positive, negative): great 4/1, awful 2/4, dull 2/2, plot 4/4.
Lean toward positive = ln((a + .5) / (4 - a + .5)) - ln((b + .5) / (4 - b + .5)):
  great ln(4.5/.5) - ln(1.5/3.5) = ln 21; awful ln(2.5/2.5) - ln(4.5/.5) = -ln 9; dull, plot 0.
Lean toward negative is the same with the sides swapped: the opposite number.
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from test_charts import write_run  # the tiny hand-written store of the SQL tests

from xai_ray import cli
from xai_ray.query import wordstats
from xai_ray.query.connection import open_store
from xai_ray.query.lean import lean, sentences, topk_lean
from xai_ray.query.top_words import topk
from xai_ray.query.word_totals import keep_word_totals
from xai_ray.store import layout

WORDS = {
    "p1": ["great", "awful", "dull", "plot"],
    "p2": ["great", "awful", "dull", "plot"],
    "p3": ["great", "plot"],
    "p4": ["great", "plot"],
    "n1": ["awful", "dull", "plot"],
    "n2": ["awful", "dull", "plot"],
    "n3": ["awful", "plot"],
    "n4": ["awful", "plot", "great"],
}
# Shares per review. "against": its positive reviews' top words are awful and dull (lift 1.6 each,
# against great and plot's 0.7), its negative reviews' plot (1.525) and dull (1.35). "along": great
# (1.4) and plot (1.2) for positive, awful (1.425) and dull (1.2) for negative.
SHARES = {
    "against": {
        "p1": [0.1, 0.4, 0.4, 0.1],
        "p2": [0.1, 0.4, 0.4, 0.1],
        "p3": [0.5, 0.5],
        "p4": [0.5, 0.5],
        "n1": [0.1, 0.45, 0.45],
        "n2": [0.1, 0.45, 0.45],
        "n3": [0.2, 0.8],
        "n4": [0.2, 0.6, 0.2],
    },
    "along": {
        "p1": [0.4, 0.1, 0.1, 0.4],
        "p2": [0.4, 0.1, 0.1, 0.4],
        "p3": [0.6, 0.4],
        "p4": [0.6, 0.4],
        "n1": [0.5, 0.4, 0.1],
        "n2": [0.5, 0.4, 0.1],
        "n3": [0.6, 0.4],
        "n4": [0.5, 0.3, 0.2],
    },
}
PARAMS = wordstats.query_params("lift", 2, 1, None)
LN9, LN21 = math.log(9.0), math.log(21.0)
COLUMNS = ["method", "layer", "pred", "words", "n_words", "n_against", "reviews", "other_reviews", "flagged"]


def write(root, preds: dict[str, int], run_id: str = "r") -> None:
    docs = [{"doc_id": d, "label": p, "pred": p} for d, p in preds.items()]
    words = {
        (method, 1): [(d, i, w, s) for d in WORDS for i, (w, s) in enumerate(zip(WORDS[d], shares[d]))]
        for method, shares in SHARES.items()
    }
    write_run(root, run_id, docs, words)


def both_ways(root, run_id: str = "r", **params) -> list[pd.DataFrame]:
    """The lean read from the views, then from the kept word totals: the two must agree."""
    scanned = lean(open_store(root), run_id, 2, **PARAMS, **params)
    keep_word_totals(root, run_id)
    return [scanned, lean(open_store(root), run_id, 2, **PARAMS, **params)]


@pytest.fixture
def two_sided(tmp_path):
    write(tmp_path, {d: int(d.startswith("p")) for d in WORDS})
    return tmp_path


def test_top_words_that_lean_to_the_other_class_are_flagged_with_their_lean(two_sided):
    expected = pd.DataFrame(
        [
            ["against", 1, 0, ["plot", "dull"], 2, 0, 4, 4, False],  # plot and dull: 0 each, a tie, not below 0
            ["against", 1, 1, ["awful", "dull"], 2, 1, 4, 4, True],  # awful -ln 9, dull 0
            ["along", 1, 0, ["awful", "dull"], 2, 0, 4, 4, False],  # awful +ln 9, dull 0
            ["along", 1, 1, ["great", "plot"], 2, 0, 4, 4, False],  # great ln 21, plot 0
        ],
        columns=COLUMNS,
    )
    mean_lean = [0.0, -LN9 / 2, LN9 / 2, LN21 / 2]
    share_against = [0.0, 0.5, 0.0, 0.0]
    for got in both_ways(two_sided):
        got = got.assign(words=got["words"].map(list))
        assert got[COLUMNS].values.tolist() == expected.values.tolist()
        assert got["mean_lean"].tolist() == pytest.approx(mean_lean, abs=1e-12)
        assert got["share_against"].tolist() == pytest.approx(share_against)


def test_the_lean_ranks_the_words_topk_by_pred_lists(two_sided):
    con = open_store(two_sided)
    for method in SHARES:
        listed = topk(con, method=method, layer=1, k=2, by="pred", min_docs=2)
        got = topk_lean(con, None, method, None, 2, min_docs=2)
        assert got["words"].map(list).tolist() == listed.groupby("group")["word"].agg(list).tolist()


def test_a_one_class_corpus_has_nothing_to_compare_and_flags_nothing(tmp_path):
    # Every review predicted positive: no review predicted otherwise, so no odds on the other side.
    write(tmp_path, {d: 1 for d in WORDS})
    for got in both_ways(tmp_path):
        assert got[["method", "pred", "reviews", "other_reviews", "flagged"]].values.tolist() == [
            ["against", 1, 8, 0, False],
            ["along", 1, 8, 0, False],
        ]
        assert got["mean_lean"].isna().all() and got["share_against"].isna().all()
        assert got["n_against"].tolist() == [0, 0]


def test_a_third_class_is_pooled_with_the_other_side(tmp_path):
    # n3 and n4 predicted 2: for class 1 the other side is still n1-n4 (4 reviews), so the positive
    # rows are unchanged; class 0 now has 2 reviews (n1, n2) against 6.
    write(tmp_path, {**{d: int(d.startswith("p")) for d in WORDS}, "n3": 2, "n4": 2})
    got = lean(open_store(tmp_path), "r", 2, method="against", **PARAMS)
    positive = got[got.pred == 1].iloc[0]
    assert list(positive.words) == ["awful", "dull"] and positive.mean_lean == pytest.approx(-LN9 / 2)
    negative = got[got.pred == 0].iloc[0]
    # class 0 (n1, n2: awful, dull, plot at lifts .3, 1.35, 1.35): top dull, plot.
    # dull: 2 of 2 against 2 of 6 (p1, p2); plot: 2 of 2 against 6 of 6.
    dull = math.log(2.5 / 0.5) - math.log(2.5 / 4.5)
    plot = math.log(2.5 / 0.5) - math.log(6.5 / 0.5)
    assert list(negative.words) == ["dull", "plot"]
    assert negative.mean_lean == pytest.approx((dull + plot) / 2)
    assert negative.reviews == 2 and negative.other_reviews == 6


def test_topk_by_pred_prints_the_flag_after_its_table(two_sided, capsys):
    argv = ["topk", "--store", str(two_sided), "--by", "pred", "--k", "2", "--min-docs", "2", "--method"]
    assert cli.main([*argv, "against"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == (
        "xai-ray: against, layer 1 leans against the prediction for class positive: mean lean "
        f"{-LN9 / 2:+.2f} over its top 2 words, 1 of them more frequent in reviews predicted otherwise"
    )
    assert "awful" in lines[-3] and "leans" not in "".join(lines[:-1])  # the table first, then the one line
    assert cli.main([*argv, "along"]) == 0
    assert "lean" not in capsys.readouterr().out  # nothing flagged: nothing said
    assert cli.main([*argv, "against", "--format", "json"]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("[") and "leans against" in printed.err  # the JSON stays JSON


def test_sentences_name_the_class_by_its_label():
    frame = pd.DataFrame(
        [{"method": "m<b>", "layer": 3, "pred": 0, "mean_lean": -0.5, "n_words": 4, "n_against": 3, "flagged": True}]
    )
    assert sentences(frame, {0: "neg"}.get) == [
        "m<b>, layer 3 leans against the prediction for class neg: mean lean -0.50 over its top 4 words, "
        "3 of them more frequent in reviews predicted otherwise"
    ]


def test_the_report_cautions_beside_the_top_words_of_a_leaning_method_escaped(two_sided, tmp_path):
    import json

    from xai_ray.report.definition import DEFAULTS
    from xai_ray.report.page import build_report

    # Class names are data: a label that is markup must reach the page as text.
    manifest = layout.run_dir(two_sided, "r") / "manifest.json"
    record = json.loads(manifest.read_text())
    record["model"]["labels"] = {"0": "negative", "1": "<b>pos</b>"}
    manifest.write_text(json.dumps(record))
    definition = {**DEFAULTS, "k": 2, "min_docs": 2, "exclude": [], "sections": ["headline", "per_method", "explorer"]}
    page = build_report(two_sided, "r", tmp_path / "r.html", definition=definition).read_text()
    # the lead method (no leaderboard, neither name in the default order: the run's first) is "against"
    caution = (
        "Caution: against, layer 1 leans against the prediction for class &lt;b&gt;pos&lt;/b&gt;: mean lean "
        f"{-LN9 / 2:+.2f} over its top 2 words, 1 of them more frequent in reviews predicted otherwise."
    )
    notes = re.findall(r"<section id='(\w+)'><h2>[^<]*</h2><p class='note'>(.*?)</p>", page)
    assert {key for key, note in notes if caution in note} == {"headline", "per_method"}
    explorer = dict(notes)["explorer"]
    assert "against at layer 1 for class &lt;b&gt;pos&lt;/b&gt;." in explorer and "along" not in explorer
    assert "<b>pos</b>" not in page


def test_the_nightly_summary_carries_the_lead_methods_lean(tmp_path):
    from xai_ray.ops.nightly import lead_lean
    from xai_ray.report.definition import DEFAULTS

    night = "nightly-2026-01-01"
    write(tmp_path, {d: int(d.startswith("p")) for d in WORDS}, run_id=night)
    definition = {**DEFAULTS, "k": 2, "min_docs": 2, "exclude": []}
    got = lead_lean(tmp_path, [night], "2026-01-01", definition)  # the lead: "against", the run's first method
    assert (got["method"], got["layer"]) == ("against", 1)
    assert [(c["label"], c["n_against"], c["flagged"]) for c in got["classes"]] == [
        ("negative", 0, False),
        ("positive", 1, True),
    ]
    assert [c["mean_lean"] for c in got["classes"]] == pytest.approx([0.0, -LN9 / 2], abs=1e-4)
    assert got["said"].startswith("against, layer 1 leans against the prediction for class positive: mean lean -1.10")
    quiet = lead_lean(tmp_path, [night], "2026-01-01", {**definition, "main_method": "along"})
    assert quiet["said"] == "" and not any(c["flagged"] for c in quiet["classes"])
