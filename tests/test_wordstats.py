"""Top-k word statistics a careful analyst would trust: length-fair lift, support in documents,
95% intervals, word classes and joined contractions (xai_ray/wordstats.py, sql/topk*.sql).

Stores are written by the real writer (``RunWriter``) from scorer-shaped rows whose word shares
are chosen here, so every expected value is worked by hand from those shares.
"""

from __future__ import annotations

import math
import unicodedata

import numpy as np
import pyarrow as pa
import pytest

from xai_ray.query import wordstats
from xai_ray.query.connection import QueryError, open_store
from xai_ray.query.top_words import topk
from xai_ray.query.user_sql import run_sql
from xai_ray.scoring.rows import row_schema
from xai_ray.store.writer import RunWriter

METHOD = "raw"


def doc_row(
    doc_id: str,
    words: list[str],
    shares: list[float],
    pred: int = 1,
    text: str | None = None,
    span: list[int] | None = None,
    joined: list[str] | None = None,
) -> dict:
    """A scorer row of one layer: [CLS] words [SEP], the words' shares as their token scores."""
    n = len(words) + 2
    token_scores = [0.0, *shares, 0.0]
    return {
        "doc_id": doc_id,
        "text": text or " ".join(words),
        "label": pred,
        "pred": pred,
        "probs": [1.0 - pred, float(pred)],
        "n_tokens": n,
        "n_layers": 1,
        "truncated": False,
        "tokens": ["[CLS]", *words, "[SEP]"],
        "word_index": [-1, *range(len(words)), -1],
        "words": words,
        "word_span": span,
        "word_joined": joined,
        "error": None,
        "model_fingerprint": "f",
        "seconds": {},
        f"scores_{METHOD}": token_scores,
        f"word_raw_{METHOD}": list(shares),
        f"word_scores_{METHOD}": list(shares),
    }


def write_store(root, rows: list[dict], run_id: str = "r"):
    writer = RunWriter(root, run_id, [METHOD])
    writer.write(pa.Table.from_pylist(rows, schema=row_schema([METHOD])))
    writer.publish(
        {"created_at": f"2026-01-01T00:00:{len(run_id):02d}", "config": {"methods": [METHOD]}, "model": {"n_layers": 1}}
    )
    return open_store(root)


def fill(word: str, share: float, length: int, prefix: str) -> tuple[list[str], list[float]]:
    """A review of ``length`` words: ``word`` with ``share``, the rest fillers sharing what is left."""
    rest = (1.0 - share) / (length - 1)
    return [word, *(f"{prefix}{j}" for j in range(length - 1))], [share, *([rest] * (length - 1))]


def test_a_word_with_the_same_relative_weight_ranks_level_in_short_and_long_reviews(tmp_path):
    # Given 20 reviews of 10 words where "alpha" holds twice the even share (2/10), and 20 reviews
    # of 300 words where "beta" holds twice the even share (2/300) ...
    rows = [doc_row(f"s{i}", *fill("alpha", 2 / 10, 10, "short")) for i in range(20)]
    rows += [doc_row(f"l{i}", *fill("beta", 2 / 300, 300, "long")) for i in range(20)]
    con = write_store(tmp_path, rows)
    # ... lift (share x words) ranks them level, both at 2 = twice an even spread ...
    top = topk(con, method=METHOD, k=5)
    assert top.word.tolist()[:2] == ["alpha", "beta"]  # tied, then by word
    np.testing.assert_allclose(top.mean_score.iloc[:2], [2.0, 2.0], rtol=1e-5)
    assert set(top.documents.iloc[:2]) == {20}
    # ... while the old share statistic buries "beta" under every short review's filler (0.8/9 each).
    shares = topk(con, method=METHOD, k=400, stat="share")
    ranks = dict(zip(shares.word, shares["rank"]))
    assert ranks["alpha"] == 1 and ranks["beta"] > 10
    assert shares.set_index("word").mean_score["beta"] == pytest.approx(2 / 300, rel=1e-5)


def test_a_word_seen_in_one_document_never_enters_the_default_topk(tmp_path):
    from xai_ray.pipeline import aggregate
    from xai_ray.report.context import context
    from xai_ray.report.definition import DEFAULTS

    # Given 30 reviews where "once" takes 90% of one review's score and "film" 30% of every review ...
    rows = [doc_row("d0", ["once", "film", "x"], [0.9, 0.05, 0.05])]
    rows += [doc_row(f"d{i}", ["film", "plot", f"w{i}"], [0.3, 0.3, 0.4]) for i in range(1, 30)]
    con = write_store(tmp_path, rows)
    # ... the default support (never 1, whatever the corpus) keeps "once" out of every top-k ...
    assert all(wordstats.default_min_docs(n) >= 2 for n in (0, 1, 2, 10, 99, 1000, 25_000, 10**7))
    assert [wordstats.default_min_docs(n) for n in (200, 1000, 25_000)] == [4, 20, 50]
    assert "once" not in topk(con, method=METHOD, k=50).word.tolist()
    assert topk(con, method=METHOD, k=1, min_docs=1).word.tolist() == ["once"]  # the support is what keeps it out
    # ... the CLI, the report (and so the nightly section, which ranks with the report's context) and
    # the run summary share that one default.
    ctx = context(tmp_path, "r", DEFAULTS)
    assert ctx.min_docs == wordstats.default_min_docs(30) and ctx.stat == "lift"
    assert "once" not in ctx.topk_all().word.tolist()
    summary = aggregate(tmp_path, "r")
    # plot: lift .9 in 29 reviews; film: (.05 x 3 + 29 x .9) / 30 = .875; the w_i and x: one review each
    assert summary["top_words"] == ["plot", "film"]


def test_the_interval_shrinks_as_support_grows_and_is_a_t_interval_over_documents(tmp_path):
    stats = pytest.importorskip("scipy.stats")

    # "gamma" has lift 1 in half the reviews (share 1/4 of 4 words) and 3 in the other half (3/4).
    def rows(n):
        return [
            doc_row(
                f"d{i}",
                ["gamma", f"a{i}", f"b{i}", f"c{i}"],
                [0.25, 0.25, 0.25, 0.25] if i % 2 == 0 else [0.75, 0.25 / 3, 0.25 / 3, 0.25 / 3],
            )
            for i in range(n)
        ]

    widths = []
    for n in (4, 10, 40):
        con = write_store(tmp_path / str(n), rows(n))
        got = topk(con, method=METHOD, k=1, min_docs=2).iloc[0]
        values = np.array([1.0, 3.0] * (n // 2))  # the per-document lifts, by hand
        half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n)  # independent t interval
        assert got.word == "gamma" and got.documents == n and got.mean_score == pytest.approx(2.0, rel=1e-5)
        assert (got.ci_low, got.ci_high) == pytest.approx((2.0 - half, 2.0 + half), abs=1e-5)  # float32 lifts
        widths.append(got.ci_high - got.ci_low)
    assert widths[0] > widths[1] > widths[2]


def test_repeats_in_one_review_count_once_per_review(tmp_path):
    # "bad" 3 times in d0 (lift 0.9 each: shares .3 of 3 words... of 4 units) and once in d1 (lift 1.0):
    rows = [
        doc_row("d0", ["bad", "bad", "bad", "ok"], [0.225, 0.225, 0.225, 0.325]),
        doc_row("d1", ["bad", "ok", "fine", "so"], [0.25, 0.25, 0.25, 0.25]),
    ]
    con = write_store(tmp_path, rows)
    got = topk(con, method=METHOD, k=10, min_docs=2).set_index("word")
    # per review first: (0.9 + 1.0) / 2, not the occurrence mean (3 x 0.9 + 1.0) / 4
    assert got.loc["bad", "mean_score"] == pytest.approx(0.95, rel=1e-5)
    assert got.loc["bad", "occurrences"] == 4 and got.loc["bad", "documents"] == 2


def is_punctuation(word: str) -> bool:
    return all(unicodedata.category(ch)[0] in "PS" for ch in word)


def test_word_classes_are_excluded_on_request_and_sql_keeps_everything(tmp_path):
    words = [".", "!", "\u2014", "$", "...", "the", "and", "good", "wasn't", "7", "a.b"]
    rows = [doc_row(f"d{i}", words, [1 / len(words)] * len(words)) for i in range(3)]
    con = write_store(tmp_path, rows)
    every = set(topk(con, method=METHOD, k=50).word)
    assert every == {w.lower() for w in words}  # nothing left out unless asked
    no_punct = set(topk(con, method=METHOD, k=50, exclude="punct").word)
    assert no_punct == {w for w in words if not is_punctuation(w)}  # unicodedata: the independent reference
    assert {"wasn't", "a.b", "7"} <= no_punct
    no_stop = set(topk(con, method=METHOD, k=50, exclude=["stop"]).word)
    assert {"the", "and"}.isdisjoint(no_stop) and {".", "good", "wasn't"} <= no_stop
    both = set(topk(con, method=METHOD, k=50, exclude="punct,stop").word)
    assert both == no_punct - {"the", "and"}
    stop = set(wordstats.stopwords())
    assert {"the", "and", "was"} <= stop and {"not", "no", "never", "good"}.isdisjoint(stop)
    assert run_sql(con, "select count(*) as n from words where word = '.'").n.iloc[0] == 3  # SQL keeps all
    with pytest.raises(QueryError, match="--exclude takes punct, stop"):
        topk(con, method=METHOD, exclude="numbers")
    with pytest.raises(QueryError, match="--stat must be one of lift, share"):
        topk(con, method=METHOD, stat="mean")


def test_contractions_are_joined_back_from_the_tokenizers_offsets(tiny_model_dir):
    from xai_ray.scoring.actor import Scorer

    text = "It wasn't bad, don't go - rock'n'roll."
    scorer = Scorer({"model": tiny_model_dir, "max_length": 64, "methods": [METHOD]})
    row = scorer({"doc_id": ["d"], "text": [text], "label": [1]}).to_pylist()[0]
    units = {}
    for w, (first, joined) in enumerate(zip(row["word_span"], row["word_joined"])):
        units.setdefault(first, joined)
        assert first <= w and row["word_joined"][first] == joined
    # by hand: the units a reader sees (the tokenizer split the contractions into 2-3 words each)
    assert list(units.values()) == ["It", "wasn't", "bad", ",", "don't", "go", "-", "rock'n'roll", "."]
    assert len(row["words"]) > len(units)


def test_a_joined_contraction_ranks_as_one_word_lifted_as_the_mean_of_its_pieces(tmp_path):
    # "wasn't" as BERT splits it: wasn / ' / t, shares .2 + .1 + .1 of a 6-word, 4-unit review
    words = ["it", "wasn", "'", "t", "bad", "."]
    shares = [0.1, 0.2, 0.1, 0.1, 0.3, 0.2]
    span, joined = [0, 1, 1, 1, 4, 5], ["it", "wasn't", "wasn't", "wasn't", "bad", "."]
    rows = [doc_row(f"d{i}", words, shares, text="it wasn't bad.", span=span, joined=joined) for i in range(2)]
    # and one review with an even spread over its 6 words: every unit, contraction included, lifts 1
    rows.append(doc_row("even", words, [1 / 6] * 6, text="it wasn't bad.", span=span, joined=joined))
    con = write_store(tmp_path, rows)
    got = topk(con, method=METHOD, k=10).set_index("word")
    assert set(got.index) == {"it", "wasn't", "bad", "."}
    # by hand: the unit's share (.4) over the share an even spread gives it (3 of 6 words), i.e. the
    # mean of its pieces' share x 6 = (1.2 + .6 + .6) / 3; averaged with the even review's 1
    assert got.loc["wasn't", "mean_score"] == pytest.approx((0.8 + 0.8 + 1.0) / 3, rel=1e-5)
    assert got.loc["wasn't", "occurrences"] == 3  # one per review, not three
    assert got.loc["bad", "mean_score"] == pytest.approx((1.8 + 1.8 + 1.0) / 3, rel=1e-5)
    even = run_sql(con, "select span_id, sum(lift) as lift from words where doc_id = 'even' group by span_id")
    assert even.lift.tolist() == pytest.approx([1.0] * 4, rel=1e-5)  # an even spread lifts no unit
    shares_of = run_sql(con, "select sum(score) as s from words where doc_id = 'd0' and span_id = 1").s
    assert shares_of[0] == pytest.approx(0.4, rel=1e-5)  # the share statistic still sums the pieces


def test_cli_topk_takes_the_statistic_support_and_word_classes(tmp_path, capsys):
    import json

    from xai_ray import cli

    rows = [doc_row(f"d{i}", ["good", ".", "the", f"w{i}"], [0.4, 0.3, 0.2, 0.1]) for i in range(3)]
    write_store(tmp_path, rows)
    argv = ["topk", "--store", str(tmp_path), "--method", METHOD, "--format", "json"]
    assert cli.main([*argv, "--exclude", "punct,stop"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["word"] for r in got] == ["good"]  # w_i: one review each; "." and "the" left out
    assert got[0]["mean_score"] == pytest.approx(1.6, rel=1e-5) and got[0]["documents"] == 3
    assert got[0]["ci_low"] == pytest.approx(1.6, rel=1e-5)  # the same value in every review: no spread
    assert cli.main([*argv, "--stat", "share", "--min-docs", "1", "--k", "3"]) == 0
    assert [r["word"] for r in json.loads(capsys.readouterr().out)] == ["good", ".", "the"]
    assert cli.main([*argv, "--exclude", "emoji"]) == 2
    assert (
        capsys.readouterr().err.strip() == "xai-ray: --exclude takes punct, stop (comma-separated) or none; got emoji"
    )


@pytest.mark.parametrize("stat", ["lift", "share"])
def test_kept_word_totals_answer_topk_exactly_as_the_scan(tmp_path, stat):
    from xai_ray.query.word_totals import keep_word_totals

    rng = np.random.default_rng(5)
    vocab = ["good", "bad", ".", "the", "plot", "wasn't", "film", "!", "dull", "great"]
    rows = []
    for i in range(40):
        words = list(rng.choice(vocab, size=rng.integers(3, 12)))
        shares = rng.random(len(words))
        rows.append(doc_row(f"d{i}", words, list(shares / shares.sum()), pred=i % 2))
    con = write_store(tmp_path, rows)
    scanned = {
        by: topk(con, method=METHOD, k=8, by=by, stat=stat, min_docs=3, exclude="punct") for by in ("all", "pred")
    }
    keep_word_totals(tmp_path, "r")
    con = open_store(tmp_path)
    for by, expected in scanned.items():
        got = topk(con, method=METHOD, k=8, by=by, stat=stat, min_docs=3, exclude="punct")
        assert (
            got[["group", "rank", "word", "occurrences", "documents"]].values.tolist()
            == expected[["group", "rank", "word", "occurrences", "documents"]].values.tolist()
        )
        for column in ("mean_score", "sd", "ci_low", "ci_high"):
            np.testing.assert_allclose(got[column], expected[column], rtol=1e-6)
    assert len(run_sql(con, "select * from word_totals")) > 0  # the fast path was there to take


def test_word_totals_kept_by_another_definition_of_a_word_are_not_read(tmp_path):
    """Totals are tagged with a digest of the queries that define them and of word_key: a run's
    totals kept by a version that counted words otherwise are left out, and topk and the report
    compute their answer from every word instead."""
    import pyarrow.parquet as pq

    from xai_ray.query.top_words import has_word_totals
    from xai_ray.query.word_totals import keep_word_totals
    from xai_ray.report.context import context
    from xai_ray.report.definition import load_definition
    from xai_ray.store.aggregates import PARAMS_KEY

    rows = [doc_row(f"d{i}", ["good", "film", "the"], [0.5, 0.3, 0.2], pred=i % 2) for i in range(6)]
    con = write_store(tmp_path, rows)
    expected = topk(con, method=METHOD, k=3, min_docs=1)
    kept = keep_word_totals(tmp_path, "r")
    assert has_word_totals(open_store(tmp_path), "r")
    table = pq.read_table(kept)
    pq.write_table(table.replace_schema_metadata({PARAMS_KEY: b'{"query": "word_totals"}'}), kept)  # an older tag
    con = open_store(tmp_path)
    assert not has_word_totals(con, "r")
    assert context(tmp_path, "r", load_definition(None)).source("report_topk_all") == "report_topk_all"
    assert topk(con, method=METHOD, k=3, min_docs=1)["word"].tolist() == expected["word"].tolist()


def test_word_totals_copied_in_from_another_run_are_not_read_as_this_runs(tmp_path):
    """A kept aggregate names the run it was computed from: run s's folder holding run r's word
    totals (a hand copy, a sync tool) gave s the top words of r. Now they are left out, topk
    scans s's own words, and `--resume` counts s's aggregates as missing and keeps them again."""
    import shutil

    from xai_ray.pipeline.finishing import unfinished
    from xai_ray.query.top_words import has_word_totals
    from xai_ray.query.word_totals import keep_word_totals
    from xai_ray.report.aggregates import keep_aggregates
    from xai_ray.store import layout

    write_store(tmp_path, [doc_row(f"a{i}", ["good", "film"], [0.9, 0.1]) for i in range(4)], run_id="r")
    write_store(tmp_path, [doc_row(f"b{i}", ["dull", "plot"], [0.8, 0.2]) for i in range(4)], run_id="s")
    for run_id in ("r", "s"):
        keep_word_totals(tmp_path, run_id)
        keep_aggregates(tmp_path, run_id)
    manifest = layout.read_manifest(layout.manifest_path(tmp_path, "s"))
    assert unfinished(tmp_path, "s", manifest) == ["report"]
    shutil.copy(
        layout.aggregate_file(tmp_path, "r", "word_totals"), layout.aggregate_file(tmp_path, "s", "word_totals")
    )
    con = open_store(tmp_path)
    assert has_word_totals(con, "r") and not has_word_totals(con, "s")
    assert topk(con, run_id="s", method=METHOD, k=2, min_docs=1)["word"].tolist() == ["dull", "plot"]
    assert unfinished(tmp_path, "s", manifest) == ["aggregates", "report"]
    keep_word_totals(tmp_path, "s")
    assert has_word_totals(open_store(tmp_path), "s") and unfinished(tmp_path, "s", manifest) == ["report"]


@pytest.mark.parametrize("stat", ["lift", "share"])
def test_the_reports_top_words_from_the_kept_totals_are_those_of_the_scan(tmp_path, stat):
    """The report's top words of every slice (report_topk_all.sql, a scan of every word) and the
    same from the word totals the aggregate stage keeps: the same rows; the report takes the
    totals once they are kept."""
    from xai_ray.query.connection import run_named
    from xai_ray.query.word_totals import keep_word_totals
    from xai_ray.report.context import context
    from xai_ray.report.definition import load_definition

    rng = np.random.default_rng(11)
    vocab = ["good", "bad", ".", "the", "plot", "wasn't", "film", "!", "dull", "great", "Café", "cafe\u0301"]
    rows = []
    for i in range(60):
        words = list(rng.choice(vocab, size=rng.integers(2, 14)))
        shares = rng.random(len(words))
        rows.append(doc_row(f"d{i}", words, list(shares / shares.sum()), pred=int(rng.integers(0, 2))))
    con = write_store(tmp_path, rows)
    params = {"k": 6, **wordstats.query_params(stat, 3, 2, ("punct",))}
    scanned = run_named(con, "report_topk_all", run_id="r", **params)
    assert context(tmp_path, "r", load_definition(None)).source("report_topk_all") == "report_topk_all"
    keep_word_totals(tmp_path, "r")
    assert context(tmp_path, "r", load_definition(None)).source("report_topk_all") == "report_topk_all_totals"
    got = run_named(open_store(tmp_path), "report_topk_all_totals", run_id="r", **params)
    exact = ["method", "layer", "group", "rank", "word", "occurrences", "documents"]
    assert len(scanned) > 6 and set(scanned["group"]) == {"0", "1", "all"}
    assert got[exact].values.tolist() == scanned[exact].values.tolist()
    np.testing.assert_allclose(got[["mean_score", "sd"]], scanned[["mean_score", "sd"]], rtol=1e-9)


def test_topk_of_a_layer_the_method_does_not_store_says_so(tmp_path):
    """input_x_gradient, integrated_gradients and lrp are stored at the last layer only: `topk
    --layer 3` of one printed "(no rows)", as if no word had passed the filters."""
    import json

    from xai_ray.store import layout

    write_store(tmp_path, [doc_row(f"d{i}", ["good", "film"], [0.6, 0.4]) for i in range(3)])
    path = layout.manifest_path(tmp_path, "r")
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "model": {"n_layers": 2}}))  # raw stored at layer 1 of 2
    with pytest.raises(QueryError, match="run 'r' stores method 'raw' at layer 1 only; got --layer 2"):
        topk(open_store(tmp_path), method=METHOD, layer=2)
    assert topk(open_store(tmp_path), method=METHOD, layer=1, min_docs=1)["word"].tolist() == ["good", "film"]
