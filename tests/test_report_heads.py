"""The report's head section: its charts carry the heads view's numbers, the head map is the
classical MDS of the similarity view, and runs without head statistics leave it out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from xai_ray import pipeline
from xai_ray.config import resolve
from xai_ray.methods.head_summary import STATISTICS
from xai_ray.report.blocks import Fragment
from xai_ray.report.context import context
from xai_ray.report.definition import DEFAULTS
from xai_ray.report.heads import heads
from xai_ray.report.page import build_report
from xai_ray.scoring.actor import Scorer

TEXTS = [
    "the film was good, not very good.",
    "i loved the plot!",
    "a bad movie. very boring, the acting was fine",
    "this story is not good and it was not bad",
    "un believable , the end",
]


def write(root: Path, model: str, run_id: str, heads_on: bool, counted=None) -> str:
    cfg = resolve(
        None,
        {"model": model, "max_length": 32, "store": str(root), "methods": "raw,rollout"},
        [f"heads={str(heads_on).lower()}"],
    )
    batch = {
        "doc_id": [f"d{i}" for i in range(len(TEXTS))],
        "text": TEXTS,
        "label": [1, 1, 0, 0, 1],
        "heads_sample": np.array([True, False, True, True, False]),
    }
    if counted is not None:  # the run's statistics sample (the compared documents are inside it)
        batch["heads_stats"] = np.asarray(counted)
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})(batch)
    pipeline.write([rows], cfg, run_id, n_input=len(TEXTS))
    return cfg.store


@pytest.fixture(scope="module")
def store(tiny_model_factory, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("report-heads") / "store"
    write(root, tiny_model_factory("distilbert"), "with", True)  # 3 layers x 4 heads
    write(root, tiny_model_factory("distilbert"), "without", False)
    write(root, tiny_model_factory("distilbert"), "part", True, counted=[False, False, True, False, True])
    return str(root)


def datasets(chart) -> list[list[dict]]:
    return list(chart.to_dict()["datasets"].values())


def test_section_charts_carry_the_heads_view(store):
    ctx = context(store, "with", {**DEFAULTS, "min_count": 1, "min_docs": 1})
    section = heads(ctx)
    assert section.key == "heads" and len(section.items) == 4
    profile, heatmaps, table, head_map = section.items
    assert isinstance(table, Fragment)
    view = ctx.con.execute("select * from heads where run_id = 'with'").df()
    assert len(view) == 12 and (view.n_docs == 5).all()

    (cells,) = datasets(heatmaps)
    assert len(cells) == 12 * len(STATISTICS)
    for cell in cells:
        expected = view[(view.layer == cell["layer"]) & (view["head"] == cell["head"])][cell["key"]].item()
        assert cell["value"] == pytest.approx(expected)
    spec = heatmaps.to_dict()
    assert spec["resolve"]["scale"]["color"] == "independent" and spec["columns"] == 3

    lines = [row for data in datasets(profile) for row in data]  # targets panel, entropy panel
    sep = {row["layer"]: row["value"] for row in lines if row["key"] == "to_sep"}
    assert {row["key"] for row in lines} == {
        "to_cls",
        "to_sep",
        "to_punct",
        "to_self",
        "to_prev",
        "to_next",
        "entropy",
        "cls_entropy",
    }
    assert sep == pytest.approx(view.groupby("layer")["to_sep"].mean().to_dict())

    # The dominant target: a plain argmax over the six targets, >= 0.5, else broad / mixed
    (points,) = datasets(head_map)
    assert len(points) == 12
    targets = {
        "to_cls": "[CLS]",
        "to_sep": "[SEP]",
        "to_punct": "punctuation",
        "to_self": "self",
        "to_prev": "previous token",
        "to_next": "next token",
    }
    for point in points:
        best = max(targets, key=lambda key: point[key])
        expected = targets[best] if point[best] >= 0.5 else ("broad" if point["entropy_norm"] >= 0.7 else "mixed")
        assert point["behaviour"] == expected

    # The map: classical MDS of the similarity view, recomputed here by SVD of the centred Gram matrix
    pairs = ctx.con.execute("select * from head_similarity where run_id = 'with'").df()
    assert (pairs.n_docs == 3).all()
    matrix = pairs.pivot_table(index=["layer_a", "head_a"], columns=["layer_b", "head_b"], values="jsd").to_numpy()
    centred = matrix - matrix.mean(0) - matrix.mean(1)[:, None] + matrix.mean()
    u, s, _ = np.linalg.svd(-0.5 * centred)
    expected = u[:, :2] * np.sqrt(s[:2])
    got = np.array([[p["x"], p["y"]] for p in sorted(points, key=lambda p: (p["layer"], p["head"]))])
    distances = lambda xy: np.linalg.norm(xy[:, None] - xy[None], axis=-1)  # noqa: E731
    np.testing.assert_allclose(distances(got), distances(expected), atol=1e-9)
    assert head_map.to_dict()["hconcat"][0]["encoding"]["color"]["field"] == "layer"
    assert head_map.to_dict()["hconcat"][1]["encoding"]["color"]["field"] == "behaviour"


def test_report_has_the_section_only_when_the_run_has_heads(store, tmp_path):
    page = build_report(
        store, "with", tmp_path / "with.html", definition={**DEFAULTS, "min_count": 1, "min_docs": 1}
    ).read_text()
    assert "heads" in re.findall(r"<section id='(\w+)'>", page)
    section = re.search(r"<section id='heads'>(.*?)</section>", page, re.S).group(1)
    assert section.count("class='chart'") == 3 and "strongest head" in section
    bare = build_report(
        store, "without", tmp_path / "without.html", definition={**DEFAULTS, "min_count": 1, "min_docs": 1}
    )
    assert "heads" not in re.findall(r"<section id='(\w+)'>", bare.read_text())


def test_the_section_says_over_how_many_of_the_reviews(store):
    """Statistics of a sample: the view counts the sampled reviews (and those compared, which are
    inside it), and the section says the share of the run they are."""
    definition = {**DEFAULTS, "min_count": 1, "min_docs": 1}
    part = heads(context(store, "part", definition))
    con = context(store, "part", definition).con
    assert (con.execute("select n_docs from heads where run_id = 'part'").df().n_docs == 4).all()  # 2 + 2 compared
    assert "a seeded sample of 4 of the run's 5 reviews" in part.note
    assert "a seeded sample of 4 of the run's 5 reviews" in json.dumps(part.items[1].to_dict())
    whole = heads(context(store, "with", definition))
    assert "every query row of 5 reviews" in whole.note and "seeded sample" not in whole.note
