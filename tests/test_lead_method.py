"""The method a run's report, topk and nightly lead with: the best of the run's own leaderboard,
else the default order. Given rows of a faithfulness table, expected choice."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from xai_ray.report.leaderboard import PRIOR, lead_method


def _con(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    frame = pd.DataFrame(rows, columns=["run_id", "doc_id", "method", "layer", "metric", "value"])
    frame["layer"] = frame["layer"].astype("Int32")
    con = duckdb.connect()
    con.register("faithfulness", frame)
    return con


def _values(method, layer, metric, values):
    return [("r", f"d{i}", method, layer, metric, v) for i, v in enumerate(values)]


def test_the_leaderboard_best_leads_among_the_runs_methods():
    rows = (
        _values("rollout", 2, "comprehensiveness_aopc", [0.10, 0.20, 0.15])
        + _values("raw", 1, "comprehensiveness_aopc", [0.30, 0.35, 0.40])  # best
        + _values("raw", 2, "comprehensiveness_aopc", [0.20, 0.25, 0.20])
        + _values("random", None, "comprehensiveness_aopc", [0.05, 0.06, 0.04])
        + _values("input_x_gradient", None, "comprehensiveness_aopc", [0.9, 0.9, 0.9])  # a baseline, not stored
    )
    method, why = lead_method(_con(rows), "r", ["raw", "rollout"])
    assert method == "raw" and "comprehensiveness" in why


def test_rationales_rank_a_run_without_perturbation_metrics():
    rows = _values("rollout", 2, "auprc", [0.5, 0.6]) + _values("grad_rollout", 2, "auprc", [0.4, 0.45])
    method, why = lead_method(_con(rows), "r", ["rollout", "grad_rollout"])
    assert method == "rollout" and "AUPRC" in why


@pytest.mark.parametrize(
    "methods,expected",
    [
        (["raw", "rollout"], "rollout"),
        (["raw", "rollout", "grad_rollout"], "grad_rollout"),
        (["flow", "raw"], "raw"),
        (["input_x_gradient", "attn_x_grad"], "attn_x_grad"),
    ],
)
def test_without_a_leaderboard_the_default_order_decides(methods, expected):
    other_run = [("another", "d0", "raw", 1, "comprehensiveness_aopc", 0.9)]  # not this run's
    method, why = lead_method(_con(other_run), "r", methods)
    assert method == expected and "default order" in why
    assert set(PRIOR) >= set(methods)


def test_the_default_order_names_every_registered_method():
    from xai_ray.methods import REGISTRY

    assert sorted(PRIOR) == sorted(REGISTRY)


def test_a_notebook_runs_topk_leads_with_the_method_the_command_line_leads_with(tmp_path, scorer_factory, capsys):
    """``Run.topk()`` fell back to "rollout if run, else the first method" while ``xai-ray topk`` and
    the report asked the leaderboard: with raw and norm stored they showed different methods."""
    from xai_ray import Run, cli
    from xai_ray.store.writer import RunWriter

    methods = ["raw", "norm"]
    scorer = scorer_factory("bert", methods=("raw", "norm"))
    texts = ["the film was good", "bad movie", "i loved the story", "not very boring"]
    writer = RunWriter(tmp_path, "r", methods)
    writer.write(scorer({"doc_id": ["a", "b", "c", "d"], "text": texts, "label": [1, 0, 1, 0]}))
    writer.publish({"created_at": "2026-01-01T00:00:00", "config": {"methods": methods}, "model": {"n_layers": 2}})

    assert cli.main(["topk", "--store", str(tmp_path), "--k", "3", "--min-docs", "1", "--format", "csv"]) == 0
    said = capsys.readouterr()
    assert "xai-ray: method norm:" in said.err  # the default order puts norm before raw
    shown = Run.load(str(tmp_path)).topk(k=3, min_docs=1)
    assert shown["word"].tolist() == [line.split(",")[2] for line in said.out.splitlines()[1:]]
    assert shown["word"].tolist() == Run.load(str(tmp_path)).topk(method="norm", k=3, min_docs=1)["word"].tolist()


def test_the_lead_is_ranked_at_the_layer_it_is_shown_at_not_its_best():
    """raw's first layer agrees with the rationales best, but topk and the report show a method's
    last layer, where grad_rollout is ahead: raw led and was shown below grad_rollout."""
    rows = (
        _values("raw", 1, "auprc", [0.83, 0.84])  # raw's best layer
        + _values("raw", 6, "auprc", [0.45, 0.46])  # raw's last layer: what is shown
        + _values("grad_rollout", 1, "auprc", [0.52, 0.53])
        + _values("grad_rollout", 6, "auprc", [0.48, 0.48])
        + _values("input_x_gradient", None, "auprc", [0.2, 0.2])
    )
    method, why = lead_method(_con(rows), "r", ["raw", "grad_rollout", "input_x_gradient"])
    assert method == "grad_rollout" and "last layer" in why


def test_a_method_without_layers_shows_its_agreement_beside_its_faithfulness():
    """The evaluation keeps input x gradient at no layer, plausibility at the last layer (its
    stored words): the leaderboard said n/a beside it."""
    from xai_ray.report.leaderboard import with_beside

    board = pd.DataFrame({"method": ["input_x_gradient", "raw"], "layer": [None, 6]}).astype({"layer": "Int32"})
    board.attrs["metric"] = "comprehensiveness_aopc"
    summary = pd.DataFrame(
        {
            "method": ["input_x_gradient", "raw", "random"],
            "layer": pd.array([6, 6, None], dtype="Int32"),
            "metric": ["auprc"] * 3,
            "mean": [0.579, 0.4, 0.5],
            "lo": [0.5, 0.3, 0.45],
            "hi": [0.65, 0.5, 0.55],
        }
    )
    shown = with_beside(board, summary)
    assert shown["auprc"].tolist() == ["0.579 [0.500, 0.650] (1.16x random)", "0.400 [0.300, 0.500] (0.80x random)"]


def test_the_documented_fallback_order_is_the_codes():
    """reports/default.yaml and docs/sql.md listed the order without globenc and lrp."""
    import re
    from pathlib import Path

    from xai_ray.report.leaderboard import PRIOR

    root = Path(__file__).resolve().parents[1]
    spelled = ", ".join(PRIOR)
    comment = " ".join(
        line.lstrip("# ").strip() for line in (root / "reports" / "default.yaml").read_text().splitlines()
    )
    assert spelled in re.sub(r"\s+", " ", comment)
    assert spelled in re.sub(r"\s+", " ", (root / "docs" / "sql.md").read_text())


def test_a_stored_input_x_gradient_of_another_class_is_ranked_as_itself_not_as_the_baseline():
    """With target=0 the run's input_x_gradient explains class 0, and the evaluation ranks it at its
    layer; its baseline of the predicted class (no layer) was taken for it and led the run."""
    from xai_ray.query.connection import run_named

    rows = (
        _values("input_x_gradient", None, "comprehensiveness_aopc", [0.40, 0.42])  # the baseline: predicted class
        + _values("input_x_gradient", 6, "comprehensiveness_aopc", [0.01, 0.02])  # the run's own, class 0
        + _values("lrp", 6, "comprehensiveness_aopc", [0.05, 0.04])
        + _values("random", None, "comprehensiveness_aopc", [0.03, 0.03])
    )
    method, _ = lead_method(_con(rows), "r", ["input_x_gradient", "lrp"])
    assert method == "lrp"
    board = run_named(_con(rows), "report_leaderboard", run_id="r", metric="comprehensiveness_aopc", floor="random")
    which = {
        (m, None if pd.isna(layer) else int(layer)): w for m, layer, w in board[["method", "layer", "which"]].values
    }
    assert which == {
        ("input_x_gradient", None): "baseline: predicted class",
        ("input_x_gradient", 6): "best and last layer",
        ("lrp", 6): "best and last layer",
        ("random", None): "no layers",
    }


def test_a_layer_asked_for_leads_with_the_best_method_stored_there():
    """lrp leads at the last layer, the only one it is stored at; `topk --layer 1` without
    --method led with it and was refused ("stores method 'lrp' at layer 2 only")."""
    import json

    rows = (
        _values("lrp", 2, "comprehensiveness_aopc", [0.5, 0.6])
        + _values("raw", 1, "comprehensiveness_aopc", [0.1, 0.2])
        + _values("raw", 2, "comprehensiveness_aopc", [0.2, 0.3])
    )
    con = _con(rows)
    manifest = {"store_layout": 3, "slices": ["lrp:2", "raw:1", "raw:2"], "model": {"n_layers": 2}}
    runs = pd.DataFrame({"run_id": ["r"], "created_at": ["2026-11-28"], "manifest": [json.dumps(manifest)]})
    con.register("runs", runs)
    assert lead_method(con, "r", ["lrp", "raw"])[0] == "lrp"
    assert lead_method(con, "r", ["lrp", "raw"], layer=2)[0] == "lrp"
    method, why = lead_method(con, "r", ["lrp", "raw"], layer=1)
    assert method == "raw" and why.endswith("(among the methods stored at layer 1)")
    assert "among" not in lead_method(con, "r", ["lrp", "raw"], layer=2)[1]


def test_a_nan_metric_is_left_out_of_the_leaderboard_and_the_lead_alike(tmp_path):
    """DuckDB sorts NaN above every number and pandas below: the board ranked raw's NaN first
    while the lead went to another method. Read from Parquet too, whose statistics leave NaN out
    (DuckDB then folded an isnan filter away)."""
    from xai_ray.query.connection import run_named

    rows = (
        _values("raw", 2, "comprehensiveness_aopc", [0.1, float("nan")])
        + _values("rollout", 2, "comprehensiveness_aopc", [0.2, 0.3])
        + _values("random", None, "comprehensiveness_aopc", [0.0, 0.0])
    )
    board = run_named(_con(rows), "report_leaderboard", run_id="r", metric="comprehensiveness_aopc", floor="random")
    assert board["method"].tolist()[0] == "rollout" and not board["mean"].isna().any()
    assert board.set_index("method").loc["raw", "n_docs"] == 1  # its one real value
    assert lead_method(_con(rows), "r", ["raw", "rollout"])[0] == "rollout"
    frame = pd.DataFrame(rows, columns=["run_id", "doc_id", "method", "layer", "metric", "value"])
    frame["layer"] = frame["layer"].astype("Int32")
    frame.to_parquet(tmp_path / "f.parquet")
    con = duckdb.connect()
    con.execute(f"create view faithfulness as select * from read_parquet('{tmp_path / 'f.parquet'}')")
    read = run_named(con, "report_leaderboard", run_id="r", metric="comprehensiveness_aopc", floor="random")
    assert read["method"].tolist()[0] == "rollout" and not read["mean"].isna().any()


def test_the_report_names_the_baseline_apart_from_a_stored_input_x_gradient_of_another_class():
    """The faithfulness table listed one input_x_gradient row and its verdict added the stored
    entry's metrics to the baseline's: the baseline gets a name of its own there."""
    from xai_ray.report.faithfulness import BASELINE_ENTRY, baseline_apart, order_methods

    summary = pd.DataFrame(
        {
            "method": ["input_x_gradient", "input_x_gradient", "lrp", "random"],
            "layer": pd.array([None, 6, 6, None], dtype="Int32"),
            "metric": ["comprehensiveness_aopc"] * 4,
        }
    )
    apart = baseline_apart(summary)
    assert apart["method"].tolist() == [BASELINE_ENTRY, "input_x_gradient", "lrp", "random"]
    assert order_methods(apart["method"].unique().tolist(), ["lrp", "input_x_gradient"]) == [
        "lrp", "input_x_gradient", BASELINE_ENTRY, "random",
    ]  # fmt: skip
    # the run's own input_x_gradient of the predicted class is the baseline: one entry, kept as it is;
    # its agreement with rationales sits at the last layer beside it and changes nothing
    same = summary.iloc[[0, 2, 3]].reset_index(drop=True)
    assert baseline_apart(same).equals(same)
    plausible = pd.concat([same, same.iloc[[0]].assign(layer=pd.array([6], dtype="Int32"), metric="auprc")])
    assert baseline_apart(plausible).equals(plausible)


@pytest.mark.parametrize(("target", "lead"), [("pred", "input_x_gradient"), (0, "lrp"), ("label", "lrp")])
def test_a_run_evaluated_before_its_input_x_gradient_was_told_apart_leads_by_its_target(target, lead):
    """Runs evaluated before the fix hold the baseline's row only, whatever the target: of the
    predicted class it is the stored method's own, of another class it is not and never leads."""
    import json

    rows = _values("input_x_gradient", None, "comprehensiveness_aopc", [0.40, 0.42]) + _values(
        "lrp", 6, "comprehensiveness_aopc", [0.05, 0.04]
    )
    con = _con(rows)
    manifest = {"store_layout": 3, "config": {"target": target}}
    con.register("runs", pd.DataFrame({"run_id": ["r"], "created_at": ["1"], "manifest": [json.dumps(manifest)]}))
    assert lead_method(con, "r", ["input_x_gradient", "lrp"])[0] == lead
