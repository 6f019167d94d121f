"""Chart specs (what each chart must encode, read from ``to_dict()``) and the report's SQL
queries (given rows in a tiny hand-written store, expected rows computed by hand)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xai_ray.query.connection import open_store, run_named
from xai_ray.report import charts
from xai_ray.store import layout, schemas

LABELS = {0: "negative", 1: "positive"}


# --------------------------------------------------------------------------- a tiny store


def write_run(root: Path, run_id: str, docs: list[dict], words: dict, created_at: str = "2026-01-01T00:00:00") -> None:
    """One published run in the store's layout: ``docs`` rows (doc_id, label, pred, prob_pos,
    n_tokens, text) and ``words[(method, layer)] = [(doc_id, word_id, word, score), ...]``."""
    run = layout.run_dir(root, run_id)
    (run / "docs").mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "doc_id": d["doc_id"],
                    "label": d.get("label"),
                    "pred": d["pred"],
                    "prob_pos": d.get("prob_pos", 0.5),
                    "probs": [1 - d.get("prob_pos", 0.5), d.get("prob_pos", 0.5)],
                    "n_tokens": d.get("n_tokens", 30),
                    "n_words": d.get("n_words", 3),
                    "truncated": False,
                    "text": d.get("text", ""),
                }
                for d in docs
            ],
            schema=schemas.DOCS,
        ),
        run / "docs" / "part-0.parquet",
    )
    for (method, layer), rows in words.items():
        folder = run / "words" / f"method={method}" / f"layer={layer}"
        folder.mkdir(parents=True)
        length = {d: sum(1 for r in rows if r[0] == d) for d, *_ in rows}  # words of each document, as the writer
        pq.write_table(
            pa.Table.from_pylist(
                [
                    {
                        "doc_id": d,
                        "word_id": i,
                        "word": w,
                        "score": s,
                        "raw_score": s,
                        "lift": s * length[d],
                        "span_id": i,
                        "joined": w,
                    }
                    for d, i, w, s in rows
                ],
                schema=schemas.WORDS,
            ),
            folder / "part-0.parquet",
        )
    methods = sorted({method for method, _ in words})
    layers = max(layer for _, layer in words)
    manifest = {
        "run_id": run_id,
        "created_at": created_at,
        "config": {"methods": methods, "model": "tiny"},
        "model": {"n_layers": layers, "labels": {str(k): v for k, v in LABELS.items()}},
        "timings": {"total_s": 1.5},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))


# d1, d3, d5 predicted positive; d2, d4, d6 negative; d5 has no words, d6 no label. Words
# of d4 and d6 occur once each (below min_count 2). Scores per (method, layer).
DOCS = [
    {"doc_id": "d1", "label": 1, "pred": 1, "prob_pos": 0.9, "n_tokens": 30, "text": "Good film, good"},
    {"doc_id": "d2", "label": 0, "pred": 0, "prob_pos": 0.2, "n_tokens": 25, "text": "bad film good"},
    {"doc_id": "d3", "label": 0, "pred": 1, "prob_pos": 0.55, "n_tokens": 40, "text": "good film"},
    {"doc_id": "d4", "label": 1, "pred": 0, "prob_pos": 0.45, "n_tokens": 10, "text": "meh"},
    {"doc_id": "d5", "label": 1, "pred": 1, "prob_pos": 0.99, "n_tokens": 50, "text": "great"},
    {"doc_id": "d6", "label": None, "pred": 0, "prob_pos": 0.3, "n_tokens": 50, "text": "fine"},
]
WORDS_OF = {
    "d1": ["Good", "film", "good"],
    "d2": ["bad", "film", "good"],
    "d3": ["good", "film"],
    "d4": ["meh", "dull", "plot", "ok"],
    "d6": ["fine"],
}
SCORES = {
    ("raw", 1): {"d1": [0.5, 0.3, 0.2], "d2": [0.4, 0.2, 0.4], "d3": [0.1, 0.9], "d4": [0.25] * 4, "d6": [1.0]},
    ("raw", 2): {
        "d1": [0.9, 0.05, 0.05],
        "d2": [0.5, 0.2, 0.3],
        "d3": [0.7, 0.3],
        "d4": [0.1, 0.3, 0.3, 0.5],
        "d6": [1.0],
    },
    ("rollout", 2): {
        "d1": [0.6, 0.3, 0.1],
        "d2": [0.1, 0.2, 0.7],
        "d3": [0.4, 0.6],
        "d4": [0.1, 0.2, 0.3, 0.4],
        "d6": [1.0],
    },
}


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny-store")
    words = {
        key: [(doc, i, WORDS_OF[doc][i], s) for doc, scores in per_doc.items() for i, s in enumerate(scores)]
        for key, per_doc in SCORES.items()
    }
    write_run(root, "r1", DOCS, words)
    # Another run with the same doc ids: every query must keep to its own run.
    write_run(
        root,
        "r2",
        [{"doc_id": "d1", "label": 0, "pred": 0}],
        {
            ("raw", 1): [("d1", 0, "film", 1.0), ("d1", 1, "film", 1.0), ("d1", 2, "bad", 1.0)],
            ("raw", 2): [("d1", 0, "film", 1.0)],
            ("rollout", 2): [("d1", 0, "film", 1.0)],
        },
        created_at="2026-01-02T00:00:00",
    )
    return root


def rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple]:
    return [
        tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in frame[columns].itertuples(index=False)
    ]


# --------------------------------------------------------------------------- SQL


# The top-k queries' word parameters (wordstats.query_params) with the share statistic, whose values
# are easy to work by hand; lift is share x words in the document (d1, d2: 3 words, d3: 2).
SHARE = {"stat": "share", "min_count": 1, "exclude_punct": False, "stopwords": []}


def test_topk_all_ranks_every_method_layer_and_class_slice(tiny_store):
    got = run_named(open_store(tiny_store), "report_topk_all", run_id="r1", min_docs=2, k=2, **SHARE)
    columns = ["method", "layer", "group", "rank", "word", "mean_score", "occurrences", "documents"]
    # Per document first: d1's 'Good' and 'good' are one word, their mean one value (raw 1: (.5 + .2) / 2).
    # No word is in two predicted-negative reviews (d2, d4, d6), so class '0' has no rows.
    assert rows(got, columns) == [
        ("raw", 1, "1", 1, "film", 0.6, 2, 2),
        ("raw", 1, "1", 2, "good", 0.225, 3, 2),
        ("raw", 1, "all", 1, "film", round(1.4 / 3, 6), 3, 3),
        ("raw", 1, "all", 2, "good", round(0.85 / 3, 6), 4, 3),
        ("raw", 2, "1", 1, "good", 0.5875, 3, 2),
        ("raw", 2, "1", 2, "film", 0.175, 2, 2),
        ("raw", 2, "all", 1, "good", round(1.475 / 3, 6), 4, 3),
        ("raw", 2, "all", 2, "film", round(0.55 / 3, 6), 3, 3),
        ("rollout", 2, "1", 1, "film", 0.45, 2, 2),
        ("rollout", 2, "1", 2, "good", 0.375, 3, 2),
        ("rollout", 2, "all", 1, "good", round(1.45 / 3, 6), 4, 3),
        ("rollout", 2, "all", 2, "film", round(1.1 / 3, 6), 3, 3),
    ]
    film = got[(got.method == "raw") & (got.layer == 1) & (got.group == "all") & (got.word == "film")]
    assert film.sd.iloc[0] == pytest.approx(np.std([0.3, 0.2, 0.9], ddof=1), rel=1e-5)  # over documents d1, d2, d3
    top1 = run_named(open_store(tiny_store), "report_topk_all", run_id="r1", min_docs=2, k=1, **SHARE)
    assert rows(top1, ["method", "layer", "group", "word"]) == [
        ("raw", 1, "1", "film"),
        ("raw", 1, "all", "film"),
        ("raw", 2, "1", "good"),
        ("raw", 2, "all", "good"),
        ("rollout", 2, "1", "film"),
        ("rollout", 2, "all", "good"),
    ]
    # lift: film in d1, d2, d3 at raw 1 is .3 x 3, .2 x 3, .9 x 2
    lifted = run_named(
        open_store(tiny_store), "report_topk_all", run_id="r1", min_docs=3, k=1, **{**SHARE, "stat": "lift"}
    )
    assert rows(lifted[(lifted.method == "raw") & (lifted.layer == 1)], ["word", "mean_score"]) == [
        ("film", round((0.9 + 0.6 + 1.8) / 3, 6))
    ]


@pytest.mark.parametrize("stat", ["share", "lift"])
def test_topk_all_agrees_with_the_topk_query(tiny_store, stat):
    con = open_store(tiny_store)
    params = {**SHARE, "stat": stat, "min_docs": 1}
    every = run_named(con, "report_topk_all", run_id="r1", k=5, **params)
    one = run_named(con, "topk", run_id="r1", method="raw", layer=1, k=5, **params)
    mine = every[(every.method == "raw") & (every.layer == 1) & (every.group == "all")]
    columns = ["word", "mean_score", "sd", "occurrences", "documents"]
    assert len(one) == 5 and one.sd.isna().sum() == (one.documents == 1).sum() >= 3  # one document: no spread
    assert rows(mine.fillna(-1), columns) == rows(one.fillna(-1), columns)


def test_contrast_takes_the_gap_between_predicted_classes(tiny_store):
    con = open_store(tiny_store)
    got = run_named(con, "report_contrast", run_id="r1", method="raw", layer=1, min_docs=1, k=5, **SHARE)
    # positive (d1, d3): film .3, .9; good (.5 + .2) / 2 in d1, .1 in d3. negative (d2, d4, d6): film .2, good .4
    assert rows(
        got,
        [
            "side",
            "rank",
            "word",
            "difference",
            "mean_pos",
            "mean_neg",
            "occurrences_pos",
            "occurrences_neg",
            "documents_pos",
            "documents_neg",
        ],
    ) == [
        ("positive", 1, "film", 0.4, 0.6, 0.2, 2, 1, 2, 1),
        ("negative", 1, "good", round(0.225 - 0.4, 6), 0.225, 0.4, 3, 1, 2, 1),
    ]
    assert run_named(con, "report_contrast", run_id="r1", method="raw", layer=1, min_docs=2, k=5, **SHARE).empty


def test_agreement_bins_spearman_per_document(tiny_store):
    con = open_store(tiny_store)
    got = run_named(con, "report_agreement", run_id="r1", layer=2, bins=5, max_docs=100)
    # d1: raw ranks (3, 1.5, 1.5) (a tie), rollout (3, 2, 1): rho = 1.5 / sqrt(1.5 * 2) = 0.866
    # d2: (3, 1, 2) vs (1, 2, 3): -0.5;  d3: (2, 1) vs (1, 2): -1;  d6: one word, no rho
    # d4: (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5) = 0.949 (first ranks (1, 2, 2, 4): 0.923)
    assert rows(got, ["method_a", "method_b", "bin", "bin_lo", "bin_hi", "documents", "n_docs"]) == [
        ("raw", "rollout", 0, -1.0, -0.6, 1, 4),
        ("raw", "rollout", 1, -0.6, -0.2, 1, 4),
        ("raw", "rollout", 4, 0.6, 1.0, 2, 4),
    ]
    rho_d1, rho_d4 = 1.5 / (1.5 * 2) ** 0.5, 4.5 / (4.5 * 5) ** 0.5
    assert got.median_rho.iloc[0] == pytest.approx((-0.5 + rho_d1) / 2)
    assert got.q1_rho.iloc[0] == pytest.approx(-1 + 0.75 * 0.5)
    assert got.q3_rho.iloc[0] == pytest.approx(rho_d1 + 0.25 * (rho_d4 - rho_d1))
    # a sample of 3 of the 6 documents: those it keeps that have a rho, and the same ones each time
    sample = run_named(con, "report_agreement", run_id="r1", layer=2, bins=5, max_docs=3)
    assert sample.documents.sum() == sample.n_docs.iloc[0] <= 3
    assert sample.equals(run_named(con, "report_agreement", run_id="r1", layer=2, bins=5, max_docs=3))


def test_examples_pick_one_correct_and_one_wrong_per_label(tiny_store):
    con = open_store(tiny_store)
    shortest = run_named(con, "report_examples", run_id="r1", min_tokens=20, pick="shortest")
    # label 1: d1 (30 tokens) beats d5 (50); d4 (the only wrong one) is under 20 tokens
    assert rows(shortest, ["doc_id", "label", "pred", "correct", "text"]) == [
        ("d1", 1, 1, True, "Good film, good"),
        ("d2", 0, 0, True, "bad film good"),
        ("d3", 0, 1, False, "good film"),
    ]
    confident = run_named(con, "report_examples", run_id="r1", min_tokens=20, pick="confident")
    assert confident.doc_id.tolist() == ["d5", "d2", "d3"]
    # the predicted class's probability: d5 predicted 1 at .99, d2 predicted 0 at 1 - .2, d3 1 at .55
    assert confident.confidence.tolist() == pytest.approx([0.99, 0.8, 0.55])


def test_class_summary_counts_and_mean_probability_per_class(tiny_store):
    con = open_store(tiny_store)
    got = run_named(con, "class_summary", run_id="r1")
    # P(1) of d1..d6: .9 .2 .55 .45 .99 .3; predicted 1: d1 d3 d5; labelled 1: d1 d4 d5; both: d1 d5
    p1 = (0.9 + 0.2 + 0.55 + 0.45 + 0.99 + 0.3) / 6
    assert rows(got, ["class", "predicted", "labelled", "correct"]) == [(0, 3, 2, 1), (1, 3, 3, 2)]
    assert got.mean_prob.tolist() == pytest.approx([1 - p1, p1])


# --------------------------------------------------------------------------- charts


def encoding(spec: dict) -> dict:
    """The encoding of a single, layered or faceted chart (first layer)."""
    inner = spec.get("spec", spec)
    return inner["layer"][0]["encoding"] if "layer" in inner else inner["encoding"]


def fields(spec: dict) -> dict:
    return {
        channel: (value.get("field"), value.get("type"))
        for channel, value in encoding(spec).items()
        if isinstance(value, dict) and "field" in value
    }


@pytest.fixture
def top() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "method": ["raw", "raw", "rollout", "rollout", "rollout"],
            "layer": [2, 2, 2, 1, 2],
            "group": ["all", "all", "all", "all", "positive"],
            "word": ["film", "good", "good", "film", "bad"],
            "mean_score": [0.5, 0.3, 0.45, 0.2, 0.1],
            "occurrences": [3, 4, 4, 3, 2],
            "documents": [3, 3, 3, 2, 2],
            "ci_low": [0.4, 0.1, 0.3, 0.0, 0.05],
            "ci_high": [0.6, 0.5, 0.6, 0.4, 0.15],
        }
    )


def test_topk_bar_keeps_the_headline_title_and_order(top):
    spec = charts.topk_bar(top[top.method == "raw"], "Top 2 important words", ["Overall accuracy: 50%"]).to_dict()
    assert spec["title"]["text"] == "Top 2 important words" and spec["title"]["subtitle"] == ["Overall accuracy: 50%"]
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["bar", "rule", "text"]
    assert fields(spec)["y"] == ("word", "nominal") and fields(spec)["x"] == ("mean_score", "quantitative")
    assert encoding(spec)["y"]["sort"] == ["film", "good"]
    errors = spec["layer"][1]["encoding"]  # the 95% interval of each bar
    assert errors["x"]["field"] == "ci_low" and errors["x2"]["field"] == "ci_high"


def test_topk_facets_one_panel_per_value(top):
    spec = charts.topk_facets(top[top.group == "all"], "method", "per method").to_dict()
    assert spec["title"] == "per method" and [panel["title"] for panel in spec["hconcat"]] == ["raw", "rollout"]
    raw = spec["hconcat"][0]
    assert [layer["mark"]["type"] for layer in raw["layer"]] == ["bar", "rule"]
    assert fields(raw)["x"] == ("mean_score", "quantitative") and encoding(raw)["y"]["sort"] == ["film", "good"]
    errors = raw["layer"][1]["encoding"]  # each bar's 95% interval
    assert errors["x"]["field"] == "ci_low" and errors["x2"]["field"] == "ci_high"


def test_topk_explorer_has_controls_and_a_readable_default(top):
    import vl_convert

    spec = charts.topk_explorer(top, "rollout", 2, 2, "Top 2 words").to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert params["pick_method"]["value"] == "rollout" and params["pick_method"]["bind"]["input"] == "select"
    assert params["pick_method"]["bind"]["options"] == ["raw", "rollout"]
    assert params["pick_layer"]["value"] == 2 and params["pick_layer"]["bind"]["input"] == "range"
    assert (params["pick_layer"]["bind"]["min"], params["pick_layer"]["bind"]["max"]) == (1, 2)
    assert params["pick_class"]["value"] == "all" and params["pick_class"]["bind"]["options"] == ["all", "positive"]
    assert params["pick_min"]["value"] == 2 and params["pick_min"]["bind"]["input"] == "range"
    layer = spec["layer"][0]
    condition = next(t["filter"] for t in layer["transform"] if "filter" in t)
    assert all(name in condition for name in ("pick_method", "pick_layer", "pick_class", "pick_min"))
    assert "pick_method" in spec["title"]["text"]["expr"]
    assert encoding(spec)["y"]["sort"] == {"field": "mean_score", "op": "max", "order": "descending"}
    assert spec["layer"][1]["encoding"]["x2"]["field"] == "ci_high"  # error bars
    assert spec["layer"][2]["encoding"]["text"]["field"] == "label"  # mean and documents
    vega = vl_convert.vegalite_to_vega(spec)  # compiles: the params resolve to Vega signals
    assert {"pick_method", "pick_layer", "pick_class", "pick_min"} <= {s["name"] for s in vega["signals"]}
    # the title says what is on show: above the ranking's minimum, words hidden from the top k
    # ranked at it (not `topk --min-docs 5`, which the title "in >= 5 reviews" promised)
    for value, said in (
        (2, "Top 2 words: rollout, layer 2, all reviews, in >= 2 reviews"),
        (5, "Top 2 words: rollout, layer 2, all reviews, ranked in >= 2 reviews, those in >= 5 shown"),
    ):
        params["pick_min"]["value"] = value
        svg = vl_convert.vegalite_to_svg(spec)
        assert said in html.unescape(svg), said


CONTRAST = pd.DataFrame(
    {
        "side": ["positive", "negative"],
        "word": ["great", "awful"],
        "difference": [0.2, -0.3],
        "mean_pos": [0.3, 0.1],
        "mean_neg": [0.1, 0.4],
        "occurrences_pos": [5, 6],
        "occurrences_neg": [4, 7],
    }
)


def test_contrast_bars_diverge_by_side():
    frame = CONTRAST
    spec = charts.contrast_bars(frame, "positive", "negative", "contrast").to_dict()
    assert spec["mark"]["type"] == "bar" and fields(spec)["x"] == ("difference", "quantitative")
    assert encoding(spec)["y"]["sort"] == ["great", "awful"]
    assert encoding(spec)["color"]["field"] == "predicted"  # the classes' names, from the data
    assert encoding(spec)["color"]["scale"]["domain"] == ["positive", "negative"]


@pytest.mark.parametrize("names", [("if", "y"), ("constructor", "__proto__"), ("a\\", "'"), ("same", "same")])
def test_contrast_bars_draw_any_class_names(names):
    """The legend named the classes in a labelExpr: "if" emptied the chart ("Unrecognized signal
    name"), "constructor" and "__proto__" lost their labels, a name ending in a backslash broke the
    tooltip's expression, and the image export failed with a traceback."""
    chart = charts.contrast_bars(CONTRAST, *names, "contrast")
    assert "labelExpr" not in json.dumps(chart.to_dict())
    import html

    import vl_convert

    svg = vl_convert.vegalite_to_svg(charts.spec(chart))  # the image export: it raised on "if" and "a\\"
    drawn = {html.unescape(text).replace(charts.JOINER, "") for text in re.findall(r"<text[^>]*>([^<]+)</text>", svg)}
    shown = names if names[0] != names[1] else (names[0], f"{names[1]} (other)")  # two classes of one name
    assert set(shown) <= drawn, sorted(drawn)


def test_agreement_histogram_is_prebinned_per_pair():
    frame = pd.DataFrame(
        {
            "pair": ["raw vs rollout"] * 2,
            "bin_lo": [-1.0, 0.0],
            "bin_hi": [0.0, 1.0],
            "documents": [3, 5],
            "median_rho": [0.2, 0.2],
        }
    )
    spec = charts.agreement_histogram(frame, "agreement").to_dict()
    assert spec["facet"]["column"]["field"] == "pair"
    bars, median = spec["spec"]["layer"]
    assert bars["encoding"]["x"]["bin"] == "binned" and bars["encoding"]["x2"]["field"] == "bin_hi"
    assert bars["encoding"]["y"]["field"] == "documents"
    assert median["mark"]["type"] == "rule" and median["encoding"]["x"]["field"] == "median_rho"


def test_layer_heatmap_and_curves_facet_by_method():
    words = pd.DataFrame(
        {
            "method": ["raw", "raw", "rollout", "rollout"],
            "layer": [1, 2, 1, 2],
            "word_id": [0, 0, 0, 0],
            "word": ["film"] * 4,
            "score": [0.1, 0.2, 0.3, 0.4],
        }
    )
    heat = charts.layer_heatmap(words, "heat").to_dict()
    assert heat["spec"]["mark"]["type"] == "rect" and heat["facet"]["row"]["field"] == "method"
    assert fields(heat)["y"] == ("layer", "ordinal") and fields(heat)["color"] == ("score", "quantitative")
    curves = charts.layer_curves(words, "curves").to_dict()
    assert curves["spec"]["mark"]["type"] == "line" and curves["facet"]["column"]["field"] == "method"
    assert fields(curves)["x"] == ("layer", "ordinal") and fields(curves)["color"] == ("word", "nominal")


def test_the_word_curves_of_a_method_without_rows_are_empty_not_an_error():
    # a run whose lead method scored no row at the model's last layer (a start_layer past it, from
    # a version that let one through): the section draws nothing instead of failing the report
    from xai_ray.report.sections import _curves

    words = pd.DataFrame(
        {
            "method": ["raw", "raw"],
            "layer": pd.array([1, 2], "int32"),
            "word_id": pd.array([0, 1], "int32"),
            "word": ["film", "good"],
            "score": [0.4, 0.6],
        }
    )
    assert _curves(words, "rollout").empty
    assert _curves(words, "raw")["word"].tolist() == ["001 good"]  # the last layer's top word


def test_confusion_names_the_classes():
    counts = pd.DataFrame({"label": [0, 1], "pred": [1, 1], "documents": [2, 3]})
    spec = charts.confusion(counts, LABELS).to_dict()
    assert spec["title"] == "Confusion matrix"
    assert fields(spec)["x"] == ("predicted", "nominal") and fields(spec)["y"] == ("true", "nominal")
    data = next(iter(spec["datasets"].values()))
    cells = {(row["true"], row["predicted"]): row["documents"] for row in data}
    assert cells == {  # every cell of the 2 x 2, the empty ones drawn as 0
        ("negative", "negative"): 0,
        ("negative", "positive"): 2,
        ("positive", "negative"): 0,
        ("positive", "positive"): 3,
    }


def test_confusion_is_k_by_k_in_class_order():
    labels = {0: "sad", 1: "neutral", 2: "happy"}
    counts = pd.DataFrame({"label": [0, 2, 2], "pred": [1, 2, 0], "documents": [4, 5, 1]})
    spec = charts.confusion(counts, labels).to_dict()
    data = next(iter(spec["datasets"].values()))
    assert len(data) == 9 and sum(row["documents"] for row in data) == 10
    assert {(row["true"], row["predicted"]): row["documents"] for row in data if row["documents"]} == {
        ("sad", "neutral"): 4,
        ("happy", "happy"): 5,
        ("happy", "sad"): 1,
    }
    x, y = encoding(spec)["x"], encoding(spec)["y"]
    assert x["sort"] == y["sort"] == ["sad", "neutral", "happy"]  # class-index order, not alphabetical


def test_words_that_name_javascript_object_members_are_drawn():
    """Vega keeps a nominal scale's values as keys of a plain object: a corpus whose top words
    included "constructor" got empty charts in its report and no image export. Each chart that
    shows words or class names is drawn here by Vega itself (vl-convert), with such words, and
    with "if", which Vega's expression parser failed on in an explicit sort (a run's contrast
    chart was empty and `report --format png` failed)."""
    import vl_convert

    words = ["constructor", "toString", "if", "film"]
    top = pd.DataFrame(
        {
            "method": ["rollout"] * 4,
            "layer": [2] * 4,
            "group": ["all"] * 4,
            "word": words,
            "mean_score": [0.5, 0.4, 0.3, 0.2],
            "occurrences": [3] * 4,
            "documents": [3] * 4,
            "ci_low": [0.4, 0.3, 0.2, 0.1],
            "ci_high": [0.6, 0.5, 0.4, 0.3],
        }
    )
    contrast = top.assign(
        side=["positive", "negative", "positive", "negative"],
        difference=[0.2, -0.3, 0.1, -0.1],
        mean_pos=0.2,
        mean_neg=0.1,
        occurrences_pos=2,
        occurrences_neg=2,
    )
    counts = pd.DataFrame({"label": [0, 1], "pred": [1, 1], "documents": [2, 3]})
    made = {
        "headline": (charts.topk_bar(top, "top"), words),
        "facets": (charts.topk_facets(top, "method", "per method"), words),
        "explorer": (charts.topk_explorer(top, "rollout", 2, 1, "explore"), words),
        "contrast": (charts.contrast_bars(contrast, "positive", "negative", "contrast"), words),
        "confusion": (charts.confusion(counts, {0: "constructor", 1: "if"}), ["constructor", "if"]),
    }
    for name, (chart, expected) in made.items():
        svg = vl_convert.vegalite_to_svg(charts.spec(chart))
        drawn = {text.replace(charts.JOINER, "") for text in re.findall(r"<text[^>]*>([^<]+)</text>", svg)}
        assert set(expected) <= drawn, (name, sorted(drawn))


def _run_with_labels(root, labels: dict) -> None:
    """Run r1 of the hand-written store, its model's classes named ``labels``."""
    write_run(
        root,
        "r1",
        DOCS,
        {
            key: [(d, i, WORDS_OF[d][i], s) for d, sc in per.items() for i, s in enumerate(sc)]
            for key, per in SCORES.items()
        },
    )
    manifest = layout.run_dir(root, "r1") / "manifest.json"
    named = json.loads(manifest.read_text())
    named["model"]["labels"] = {str(k): v for k, v in labels.items()}
    manifest.write_text(json.dumps(named))


def test_a_class_named_all_is_told_apart_from_the_overall_group(tmp_path):
    """The overall ranking is group "all": a class of that name had its words counted in the
    headline twice over (40 rows for 20) and lost its own panel."""
    from xai_ray.report.context import context
    from xai_ray.report.definition import DEFAULTS

    _run_with_labels(tmp_path, {0: "all", 1: "positive"})
    top = context(tmp_path, "r1", {**DEFAULTS, "min_docs": 1}).topk_all()
    assert set(top["group"]) == {"all", "all (class 0)", "positive"}
    overall = top[top["group"] == "all"].groupby(["method", "layer"])["word"]
    assert overall.apply(lambda words: words.is_unique).all()


@pytest.mark.parametrize(
    "labels, shown",
    [
        ({0: "good", 1: "good"}, {0: "good (class 0)", 1: "good (class 1)"}),  # one name for two classes
        ({0: "good\u202a", 1: "good\u202b"}, {0: "good\ufffd (class 0)", 1: "good\ufffd (class 1)"}),  # apart by bidi
        ({0: "negative", 1: "posi\u2028tive"}, {0: "negative", 1: "posi\ufffdtive"}),  # a line separator
        ({0: "n\x00eg", 1: "p\x1bos"}, {0: "n\u2400eg", 1: "p\u241bos"}),  # controls as their pictures
        ({0: "a (class 1)", 1: "a", 2: "a"}, {0: "a (class 1) (class 0)", 1: "a (class 1)", 2: "a (class 2)"}),
    ],
)
def test_class_names_are_drawn_one_per_class_by_vega(tmp_path, labels, shown):
    """Two classes shown under one name were one cell of the confusion matrix and one panel of
    top words (the charts key on the name); a class name with U+2028 left the matrix blank (Vega's
    expression parser refused it in the sort), and one with NUL aborted `report --format svg`
    (vl-convert's SVG parser panicked). The report's names are told apart, and Vega draws them."""
    import vl_convert

    from xai_ray.report.context import context
    from xai_ray.report.definition import DEFAULTS

    _run_with_labels(tmp_path, labels)
    ctx = context(tmp_path, "r1", {**DEFAULTS, "min_docs": 1})
    assert ctx.labels == shown
    assert set(ctx.topk_all()["group"]) == {"all", shown[0], shown[1]}  # a panel per predicted class
    counts = pd.DataFrame({"label": [0, 0, 1, 1], "pred": [0, 1, 0, 1], "documents": [12, 1, 13, 1]})
    svg = vl_convert.vegalite_to_svg(charts.spec(charts.confusion(counts, ctx.labels)))
    cells = re.search(r'<g class="mark-text role-mark[^"]*"[^>]*>(.*?)</g>', svg, re.S).group(1)
    drawn_cells = re.findall(r"<text[^>]*>([^<]+)</text>", cells)
    assert len(drawn_cells) == len(shown) ** 2  # a cell per pair of classes, none drawn over another
    assert sorted(c for c in drawn_cells if c != "0") == ["1", "1", "12", "13"]
    drawn = re.findall(r"<text[^>]*>([^<]+)</text>", svg)
    assert set(shown.values()) <= {html.unescape(d) for d in drawn}


def test_a_word_with_control_characters_is_drawn_as_its_pictures():
    """RoBERTa's byte-level tokenizer keeps NUL and ESC as parts of words: a chart holding one made
    vl-convert's SVG parser panic, which aborted `report --format svg` (exit 134, no word)."""
    import vl_convert

    top = pd.DataFrame(
        {
            "method": ["rollout"] * 2,
            "layer": [2] * 2,
            "group": ["all"] * 2,
            "word": ["bad\x00movie", "\x1b[2Jok\x7f"],
            "mean_score": [0.5, 0.4],
            "occurrences": [3] * 2,
            "documents": [3] * 2,
            "ci_low": [0.4, 0.3],
            "ci_high": [0.6, 0.5],
        }
    )
    svg = vl_convert.vegalite_to_svg(charts.spec(charts.topk_bar(top, "top")))
    drawn = set(re.findall(r"<text[^>]*>([^<]+)</text>", svg))
    assert {"bad\u2400movie", "\u241b[2Jok\u2421"} <= drawn


def test_the_summary_counts_the_documents_the_run_could_not_score():
    """Given docs and errors rows, the run summary's errors are the documents not scored: a
    rationale's or an evaluation's error row is about a scored document (the report said "Errors 1"
    of a run whose every document was scored, against the command's "0 errors, 1 rationale errors")."""
    import duckdb

    from xai_ray.query.connection import run_named

    con = duckdb.connect()
    con.execute(
        "create view docs as select * from (values ('r', 'a', 1, 1, 0.9, false, 10), ('r', 'b', 0, 1, 0.6, false, 12))"
        " as t(run_id, doc_id, label, pred, prob_pos, truncated, n_tokens)"
    )
    con.execute(
        "create view errors as select * from (values ('r', 'c', 'read', 'text is empty'),"
        " ('r', 'a', 'plausibility', 'rationale out of range'), ('r', 'b', 'evaluate', 'failed'),"
        " ('r', 'd', 'score', 'out of memory'), ('other', 'e', 'read', 'text is null'))"
        " as t(run_id, doc_id, stage, reason)"
    )
    summary = run_named(con, "summary", run_id="r").iloc[0]
    assert (summary.n_docs, summary.n_errors) == (2, 2)  # c and d
