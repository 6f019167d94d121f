"""Per-head statistics on a seeded sample of a run's documents (``heads_docs``): exactly the
documents the documented rule picks get them, each the statistics a run counting every document
gives it, on the per-document and the batched capture alike; the similarity sample lies inside
them; the driver's path and the streaming one pick the same documents, and a resumed run the same
ones again; the key is checked."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from xai_ray import pipeline
from xai_ray.config import ConfigError, RunConfig, resolve
from xai_ray.data import held, stream
from xai_ray.data.head_docs import HeadDocs, head_docs
from xai_ray.data.sources import plan
from xai_ray.methods.head_summary import HeadTotals
from xai_ray.methods.heads import HeadCollector, position_masks
from xai_ray.model import capture
from xai_ray.query.connection import open_store
from xai_ray.scoring.actor import Scorer
from xai_ray.scoring.rows import head_columns

TEXTS = [
    "the film was good, not very good.",
    "i loved the plot!",
    "a bad movie. very boring, the acting was fine",
    "this story is not good and it was not bad",
    "un believable , the end",
    "fine",
    "the end was boring; the start was good",
    "not bad at all, i loved it",
]


def rule(n_docs: int, seed: int, heads_docs: int, heads_sample: int) -> tuple[set, set]:
    """The documented choice, as ranks among the kept documents in input order: one seeded
    permutation of them; its first heads_docs have statistics, its first heads_sample are compared."""
    order = np.random.default_rng(seed).permutation(n_docs).tolist()
    return set(order[:heads_docs]), set(order[: min(heads_sample, heads_docs)])


def score(scorer, corpus: pd.DataFrame, cfg: RunConfig) -> dict[str, dict]:
    ordered = pipeline.order_corpus(corpus, cfg)  # marks the samples as a screened corpus does
    return {row["doc_id"]: row for row in scorer({c: ordered[c].to_numpy() for c in ordered}).to_pylist()}


def test_only_the_seeded_sample_has_statistics_and_they_equal_a_full_count(scorer_factory):
    corpus = pd.DataFrame({"doc_id": [f"d{i}" for i in range(8)], "text": TEXTS, "label": [0, 1] * 4})
    cfg = RunConfig(heads_docs=3, heads_sample=2, heads_sample_rows=4, seed=5)
    scorer = scorer_factory("bert", heads_sample_rows=4)
    part = score(scorer, corpus, cfg)
    every = score(scorer, corpus, replace(cfg, heads_docs=0))
    stats, sample = rule(8, 5, 3, 2)
    assert {d for d, row in part.items() if row["heads"] is not None} == {f"d{i}" for i in stats}
    assert {d for d, row in part.items() if row["head_jsd"] is not None} == {f"d{i}" for i in sample}
    assert sample < stats
    assert all(row["heads"] is not None for row in every.values())  # 0: every document
    for i in stats:
        np.testing.assert_array_equal(part[f"d{i}"]["heads"], every[f"d{i}"]["heads"])
    for i in sample:
        np.testing.assert_array_equal(part[f"d{i}"]["head_jsd"], every[f"d{i}"]["head_jsd"])


def test_rows_without_statistics_marks_get_them_and_a_compared_row_always_does(scorer_factory):
    scorer = scorer_factory("bert")
    batch = {"doc_id": ["a", "b", "c"], "text": TEXTS[:3], "label": [1, 0, 1]}
    rows = scorer(batch).to_pylist()  # a notebook's own rows: no marks at all
    assert all(row["heads"] is not None for row in rows)
    marked = {**batch, "heads_sample": np.array([False, True, False]), "heads_stats": np.array([False] * 3)}
    got = {row["doc_id"]: row["heads"] is not None for row in scorer(marked).to_pylist()}
    assert got == {"a": False, "b": True, "c": False}
    none = {**marked, "heads_sample": np.array([False] * 3)}
    assert all(row["heads"] is None for row in scorer(none).to_pylist())


def test_the_batched_capture_emits_the_same_rows_as_the_per_document_one(scorer_factory):
    """The batched path (a GPU's) reduces the whole padded block and keeps the counted documents'
    sums; the per-document path skips the rest. Both give the same rows."""
    scorer = scorer_factory("roberta")
    encoding = scorer.tokenizer(TEXTS, truncation=True, max_length=32, padding=True, return_tensors="pt")
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    counted = [True, False, False, True, False, True, False, False]
    sample = [False, False, False, True, False, False, False, False]
    got = []
    for batched in (False, True):
        masks = position_masks(encoding["input_ids"], scorer.tokenizer)
        collector = HeadCollector(lengths, masks, sample, 6, counted=counted)
        capture.forward_with_attention(scorer.model, dict(encoding), heads=collector, batched=batched)
        got.append(head_columns(collector, len(TEXTS)))
    for doc, (alone, batched) in enumerate(zip(*got)):
        if not counted[doc]:
            assert alone["heads"] is None and batched["heads"] is None
            continue
        np.testing.assert_allclose(alone["heads"], batched["heads"], atol=2e-5, rtol=1e-5)  # fp32 sums
        assert (alone["head_jsd"] is None) == (batched["head_jsd"] is None) == (not sample[doc])


def test_the_rule_at_its_edges():
    full = head_docs(8, RunConfig(heads_docs=0, heads_sample=2, seed=1))
    assert full.stats is None and set(full.sample.tolist()) == rule(8, 1, 8, 2)[1]
    assert head_docs(8, RunConfig(heads_docs=8, seed=1)).stats is None  # as many as the run has: every one
    small = head_docs(8, RunConfig(heads_docs=2, heads_sample=32, seed=1))
    assert small.sample.tolist() == small.stats.tolist() and set(small.stats.tolist()) == rule(8, 1, 2, 32)[0]
    off = head_docs(8, RunConfig(heads=False))
    assert not off.marks(np.arange(8))["heads_stats"].any() and not off.marks(np.arange(8))["heads_sample"].any()
    default = HeadDocs().marks(np.arange(3))  # nothing chosen: statistics for every row, none compared
    assert default["heads_stats"].all() and not default["heads_sample"].any()


@pytest.mark.parametrize("value,says", [("x", "must be an integer"), ("-1", "must be >= 0")])
def test_heads_docs_is_checked_in_one_sentence(value, says):
    with pytest.raises(ConfigError) as caught:
        resolve(None, {}, [f"heads_docs={value}"])
    message = str(caught.value)
    assert message.startswith(f"heads_docs {says}") and "\n" not in message and message.count(". ") == 0


@pytest.mark.ray
@pytest.mark.slow
def test_both_paths_publish_the_statistics_of_the_same_documents(ray_cluster, tmp_path, tiny_bert_dir):
    """Ten rows, an empty text and a repeated id among them: the eight kept documents are ranked in
    input order, and both paths publish the statistics of the rule's three of them (and compare two)."""
    ids = [f"d{i}" for i in range(8)]
    rows = pd.DataFrame({"id": [*ids[:3], "bad", *ids[3:5], "d1", *ids[5:]], "label": [0, 1] * 5})
    rows["text"] = [*TEXTS[:3], " ", *TEXTS[3:5], "a repeated id", *TEXTS[5:]]
    source = tmp_path / "c.parquet"
    rows.to_parquet(source)
    views = {}
    for name, driver_rows in (("here", 1000), ("streamed", 0)):
        flags = {"data": str(source), "model": tiny_bert_dir, "store": str(tmp_path / name), "run_id": name}
        sets = ["max_length=32", "batch_size=3", "actors=2", f"driver_rows={driver_rows}", "report=false"]
        cfg = resolve(None, flags, [*sets, "heads_docs=3", "heads_sample=2", "seed=4"])
        result = pipeline.run(cfg)
        assert result.manifest["config"]["heads_docs"] == 3 and result.manifest["heads"]["documents"] == 3
        con = open_store(cfg.store)
        views[name] = con.execute("select * exclude (run_id) from heads order by layer, head").df()
        assert (con.execute("select n_docs from head_similarity").df().n_docs == 2).all()
    stats, _ = rule(8, 4, 3, 2)  # rank i is d{i}: the empty text and the repeated id are not kept
    scorer = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})
    chosen = sorted(stats)
    batch = {"doc_id": [ids[i] for i in chosen], "text": [TEXTS[i] for i in chosen], "label": [0] * 3}
    expected = HeadTotals()
    expected.add(scorer(batch))  # those three documents alone, every one counted
    want = expected.heads_table().to_pandas()
    for view in views.values():
        assert (view.n_docs == 3).all()
        pd.testing.assert_frame_equal(view[want.columns], want, check_exact=False, rtol=1e-6, atol=1e-9)


def test_a_resumed_run_marks_the_documents_it_still_scores_as_before(tmp_path):
    """Documents a resumed run already holds keep their ranks: the rest are marked as at first."""
    source = tmp_path / "c.parquet"
    pd.DataFrame({"id": [f"d{i}" for i in range(8)], "text": TEXTS, "label": [0, 1] * 4}).to_parquet(source)
    cfg = RunConfig(heads_docs=3, heads_sample=2, seed=2)
    marks = []
    for done in (set(), {"d0", "d3", "d6"}):
        screened = held.screen(stream.Corpus(plan(str(source), "train"), driver=True), [0, 1], done=done)
        todo = screened.todo(head_docs(screened.counts["kept"], cfg)).to_pandas().set_index("doc_id")
        marks.append(todo[["heads_stats", "heads_sample"]])
    assert len(marks[1]) == 5 and marks[0].heads_stats.sum() == 3
    pd.testing.assert_frame_equal(marks[1].sort_index(), marks[0].loc[marks[1].index].sort_index())
    stats, _ = rule(8, 2, 3, 2)
    assert set(marks[0].index[marks[0].heads_stats]) == {f"d{i}" for i in stats}
