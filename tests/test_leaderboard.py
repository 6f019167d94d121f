"""The report's faithfulness leaderboard: the SQL and its intervals (given faithfulness rows in a
hand-written store, expected rows computed here with the statistics module and scipy's t quantile),
each method's cost per review from the manifest's timings, and the chart's encoding."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xai_ray.query.connection import open_store, run_named
from xai_ray.query.intervals import faithfulness_summary
from xai_ray.report.leaderboard import with_intervals
from xai_ray.store import layout, schemas

METRIC = "comprehensiveness_aopc"
DOCS = ["d1", "d2", "d3", "d4"]
# comprehensiveness AOPC per document (None: undefined there). grad_new stands for a method this
# code has never heard of; rollout layer 1 is neither its best nor its last layer.
GIVEN = {
    ("random", None): [0.1, 0.0, 0.2, 0.1],
    ("rollout", 1): [0.1, 0.1, 0.1, 0.1],
    ("rollout", 2): [0.5, 0.3, 0.4, 0.2],
    ("rollout", 3): [0.3, 0.2, 0.3, 0.2],
    ("raw", 1): [0.2, 0.2, 0.2, 0.2],
    ("raw", 3): [0.3, 0.35, 0.25, 0.3],
    ("grad_new", 3): [0.6, 0.4, 0.5, 0.5],
    ("input_x_gradient", None): [0.4, 0.3, None, 0.5],
}


def faithfulness_rows(given: dict, metric: str = METRIC) -> list[dict]:
    return [
        {"doc_id": doc, "method": method, "layer": layer, "metric": metric, "value": value}
        for (method, layer), values in given.items()
        for doc, value in zip(DOCS, values)
    ]


def write_evaluated_run(root: Path, run_id: str, rows: list[dict], timings: dict | None = None, n_docs=4) -> None:
    """A published run holding only what the leaderboard reads: docs, faithfulness, manifest."""
    run = layout.run_dir(root, run_id)
    (run / "docs").mkdir(parents=True)
    (run / "faithfulness").mkdir()
    docs = [
        {"doc_id": f"d{i + 1}", "label": 0, "pred": 0, "prob_pos": 0.4, "probs": [0.6, 0.4], "n_tokens": 30}
        for i in range(n_docs)
    ]
    pq.write_table(pa.Table.from_pylist(docs, schema=schemas.DOCS), run / "docs" / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=schemas.FAITHFULNESS), run / "faithfulness" / "part-0.parquet")
    manifest = {
        "run_id": run_id,
        "created_at": "2026-01-01T00:00:00",
        "config": {"methods": ["raw", "rollout"], "model": "tiny"},
        "model": {"n_layers": 3, "labels": {"0": "negative", "1": "positive"}},
        "timings": timings or {},
        "counts": {"docs": n_docs},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("leaderboard-store")
    other_metric = faithfulness_rows({("rollout", 1): [9.0] * 4, ("random", None): [5.0] * 4}, "sufficiency_aopc")
    write_evaluated_run(root, "r1", faithfulness_rows(GIVEN) + other_metric)
    # another run with the same ids and methods: the query must keep to its own run
    write_evaluated_run(root, "r2", faithfulness_rows({("rollout", 1): [1.0] * 4, ("random", None): [0.0] * 4}))
    return root


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t interval, by the statistics module and scipy's t quantile."""
    stats = pytest.importorskip("scipy.stats")
    mean = statistics.fmean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def test_leaderboard_ranks_best_and_last_layers_with_intervals_and_gains(store):
    got = _board(store)
    expected_order = [
        ("grad_new", 3, "best and last layer"),  # mean 0.5
        ("input_x_gradient", None, "no layers"),  # 0.4 over its three defined documents
        ("rollout", 2, "best layer"),  # 0.35
        ("raw", 3, "best and last layer"),  # 0.3 (layer 1: 0.2, neither best nor last)
        ("rollout", 3, "last layer"),  # 0.25
        ("random", None, "no layers"),  # 0.1
    ]
    assert [(r.method, None if pd.isna(r.layer) else int(r.layer), r.which) for r in got.itertuples()] == expected_order
    assert got["rank"].tolist() == [1, 2, 3, 4, 5, 6]
    floor = GIVEN["random", None]
    for row in got.itertuples():
        values = GIVEN[row.method, None if pd.isna(row.layer) else int(row.layer)]
        defined = [v for v in values if v is not None]
        mean, lo, hi = interval(defined)
        assert row.mean == pytest.approx(mean, abs=1e-12)
        assert (row.lo, row.hi) == pytest.approx((lo, hi), abs=1e-6)  # the quantile table's six decimals
        assert row.n_docs == len(defined)
        assert row.is_floor == (row.method == "random")
        if row.method == "random":
            assert pd.isna(row.gain) and pd.isna(row.gain_lo)
            continue
        paired = [v - f for v, f in zip(values, floor) if v is not None]
        gain, gain_lo, gain_hi = interval(paired)
        assert row.gain == pytest.approx(gain, abs=1e-12)
        assert (row.gain_lo, row.gain_hi) == pytest.approx((gain_lo, gain_hi), abs=1e-6)
        assert row.n_paired == len(paired)


def test_leaderboard_of_another_metric_and_of_a_run_without_evaluation(store, tmp_path):
    got = with_intervals(
        run_named(open_store(store), "report_leaderboard", run_id="r1", metric="sufficiency_aopc", floor="random")
    )
    assert got["method"].tolist() == ["rollout", "random"] and got["mean"].tolist() == [9.0, 5.0]
    assert got["lo"].tolist() == got["hi"].tolist() == [9.0, 5.0]  # no spread, no width
    write_evaluated_run(tmp_path, "bare", [])
    assert run_named(open_store(tmp_path), "report_leaderboard", run_id="bare", metric=METRIC, floor="random").empty


def _board(store: Path) -> pd.DataFrame:
    return with_intervals(
        run_named(open_store(store), "report_leaderboard", run_id="r1", metric=METRIC, floor="random")
    )


def test_the_leaderboard_and_the_per_layer_table_share_one_interval_rule(store):
    """raw, layer 3: 0.3, 0.35, 0.25, 0.3 -> mean 0.3, sd sqrt(0.005 / 3) = 0.040825, t(0.975, 3) =
    3.182446: 0.3 +- 0.064961, by hand; the faithfulness section's table gives every row the same."""
    board = _board(store).set_index(["method", "layer"])
    assert (board.loc[("raw", 3), "lo"], board.loc[("raw", 3), "hi"]) == pytest.approx((0.235039, 0.364961), abs=1e-6)
    summary = faithfulness_summary(run_named(open_store(store), "report_faithfulness", run_id="r1"))
    summary = summary[summary.metric == METRIC].set_index(["method", "layer"])
    for key, row in board.iterrows():
        assert (row.lo, row.hi, row.n_docs) == pytest.approx(tuple(summary.loc[key, ["lo", "hi", "n_docs"]]), abs=1e-12)


def test_cost_per_review_comes_from_the_manifest_timings(store):
    from xai_ray.report.leaderboard import board_with_costs

    spent = {"forward": 2.0, "raw": 0.4, "rollout": 0.8, "grad_new": 6.0, "gradient": 1.2, "evaluate": 10.0}
    board = board_with_costs(_board(store), {"timings": {"actor_seconds": spent}}, n_docs=4)
    cost = {(r.method, r.which): r.seconds for r in board.itertuples()}
    # stored methods over the 4 scored reviews; the evaluation's gradient over the 4 evaluated ones
    assert cost["raw", "best and last layer"] == pytest.approx(0.1)
    assert cost["rollout", "best layer"] == cost["rollout", "last layer"] == pytest.approx(0.2)
    assert cost["grad_new", "best and last layer"] == pytest.approx(1.5)
    assert cost["input_x_gradient", "no layers"] == pytest.approx(0.3)
    assert pd.isna(cost["random", "no layers"])  # not timed: no cost is claimed
    ratio = dict(zip(board.method, board.x_forward))
    assert ratio["grad_new"] == pytest.approx(1.5 / 0.5) and ratio["raw"] == pytest.approx(0.1 / 0.5)
    assert board.entry.tolist()[:3] == ["grad_new, layer 3 (best, last)", "input_x_gradient", "rollout, layer 2 (best)"]
    # a resumed run timed only the 2 reviews it scored now (and their evaluated share)
    resumed = {"timings": {"actor_seconds": spent}, "resumed": {"docs_scored_now": 2}}
    again = dict(zip(board.method, board_with_costs(_board(store), resumed, n_docs=4).seconds))
    assert again["raw"] == pytest.approx(0.2) and again["input_x_gradient"] == pytest.approx(1.2 / 2)
    untimed = board_with_costs(_board(store), {}, n_docs=4)
    assert untimed.seconds.isna().all() and untimed.x_forward.isna().all()


def test_leaderboard_chart_ranks_rows_with_the_floor_as_a_band(store):
    from xai_ray.report.charts_faithfulness import leaderboard
    from xai_ray.report.leaderboard import board_with_costs

    board = board_with_costs(_board(store), {"timings": {"actor_seconds": {"forward": 1.0, "raw": 0.5}}}, n_docs=4)
    spec = leaderboard(board, "t").to_dict()
    ranked, spent = spec["hconcat"]
    marks = [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"] for layer in ranked["layer"]]
    assert marks == ["rect", "rule", "errorbar", "point"]
    band = ranked["layer"][0]
    assert band["encoding"]["x"]["field"] == "lo" and band["encoding"]["x2"]["field"] == "hi"
    assert "y" not in band["encoding"]  # spans every row
    band_rows = spec["datasets"][band["data"]["name"]]
    assert [row["method"] for row in band_rows] == ["random"]
    points = ranked["layer"][3]["encoding"]
    assert points["x"]["field"] == "mean" and points["y"]["sort"] == board.sort_values("rank").entry.tolist()
    assert spent["layer"][0]["transform"][0]["filter"] == "isValid(datum.seconds)"
    assert spent["layer"][0]["encoding"]["x"]["field"] == "seconds"
    assert spec["resolve"]["scale"]["y"] == "shared"


def test_the_faithfulness_section_opens_with_the_leaderboard(store, tmp_path):
    import shutil

    from xai_ray.report.aggregates import keep_aggregates, planned
    from xai_ray.report.blocks import Fragment
    from xai_ray.report.context import context
    from xai_ray.report.definition import load_definition
    from xai_ray.report.faithfulness import faithfulness
    from xai_ray.report.leaderboard import PARAMS

    root = tmp_path / "store"
    shutil.copytree(store, root)
    manifest_path = layout.run_dir(root, "r1") / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["timings"] = {"actor_seconds": {"forward": 2.0, "rollout": 0.8}}
    manifest_path.write_text(json.dumps(manifest))
    ctx = context(root, "r1", load_definition(), None)
    assert ("report_leaderboard", PARAMS) in planned(ctx)
    assert any(path.stem == "report_leaderboard" for path in keep_aggregates(root, "r1"))
    section = faithfulness(context(root, "r1", load_definition(), None))
    assert type(section.items[0]).__name__ == "HConcatChart"
    table = next(item.html for item in section.items if isinstance(item, Fragment) and "leaderboard" in item.html)
    for method in GIVEN:
        assert f"<td>{method[0]}" in table  # every method of the table, the unknown one too
    assert "0.2000" in table  # rollout: 0.8 actor-seconds over 4 reviews
    bare = tmp_path / "bare"
    write_evaluated_run(bare, "bare", [])
    assert ("report_leaderboard", PARAMS) not in planned(context(bare, "bare", load_definition(), None))


def test_a_gain_over_one_review_has_no_interval_and_says_so(store):
    """One paired review: the gain's interval is undefined and read "+nan" where every other cell says n/a."""
    from xai_ray.report.leaderboard import board_with_costs, table

    board = board_with_costs(_board(store), {}, n_docs=4)
    board = board.assign(gain_lo=float("nan"), gain_hi=float("nan"), lo=float("nan"), hi=float("nan"))
    shown = table(board)
    assert "nan" not in shown and "[n/a, n/a]" in shown
