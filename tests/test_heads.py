"""Per-head statistics, head similarity and the head map, against plain numpy written here.

The reference reads every head's attention from an eager forward pass with
``output_attentions`` (one review at a time, no padding) and computes each statistic with
loops over rows, exactly as the definitions in ``xai_ray.methods.heads`` say.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from xai_ray import pipeline
from xai_ray.config import ConfigError, resolve
from xai_ray.data.corpus import read_corpus
from xai_ray.methods.head_summary import STATISTICS, HeadTotals, behaviour, classical_mds
from xai_ray.methods.heads import FAINT, block_statistics, is_punctuation, jsd_sums, row_log_z
from xai_ray.model import capture
from xai_ray.model.loading import load_model
from xai_ray.query.connection import open_store
from xai_ray.scoring.actor import Scorer

# ../shared beside the checkout (or beside the worktrees' folder, for a git worktree)
IMDB = next(
    (
        root / "shared" / "data" / "imdb" / "train.parquet"
        for root in Path(__file__).resolve().parents[2:4]
        if (root / "shared" / "data" / "imdb" / "train.parquet").is_file()
    ),
    Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet",
)
TEXTS = [
    "The film was good, not very good.",
    "I loved the plot!",
    "un believable ... boring acting, the end",
    "a",
    "this movie is boring and the story was bad; it was not fine ?",
]


def eager_attention(model_dir: str, text: str, max_length: int):
    """(L, H, n, n) float64 attention and the token strings of one review, from an eager model."""
    loaded = load_model(model_dir, attn_implementation="eager")
    encoding = loaded.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        out = loaded.model(**encoding, output_attentions=True)
    attention = torch.stack(out.attentions)[:, 0].double().numpy()  # (L, H, n, n)
    ids = encoding["input_ids"][0].tolist()
    return attention, ids, loaded.tokenizer


def reference_sums(attention: np.ndarray, ids: list, tokenizer) -> np.ndarray:
    """(L, H, 9) sums over rows, one plain loop per statistic (the order of STATISTICS)."""
    n_layers, n_heads, n, _ = attention.shape
    tokens = tokenizer.convert_ids_to_tokens(ids)
    cls = [i == tokenizer.cls_token_id for i in ids]
    sep = [i == tokenizer.sep_token_id for i in ids]
    specials = set(tokenizer.all_special_ids)
    punct = []
    for i, token in zip(ids, tokens):
        bare = token.replace("##", "").replace("Ġ", "")
        punct.append(i not in specials and bare != "" and all(unicodedata.category(c)[0] == "P" for c in bare))
    out = np.zeros((n_layers, n_heads, 9))
    for layer in range(n_layers):
        for head in range(n_heads):
            a = attention[layer, head]
            for i in range(n):
                entropy = -sum(p * math.log(p) for p in a[i] if p > 0)
                out[layer, head, 0] += entropy
                out[layer, head, 1] += entropy / math.log(n) if n > 1 else entropy
                if i == 0:
                    out[layer, head, 2] = entropy
                out[layer, head, 3] += sum(a[i, j] for j in range(n) if cls[j])
                out[layer, head, 4] += sum(a[i, j] for j in range(n) if sep[j])
                out[layer, head, 5] += sum(a[i, j] for j in range(n) if punct[j])
                out[layer, head, 6] += a[i, i]
                out[layer, head, 7] += a[i, i - 1] if i > 0 else 0.0
                out[layer, head, 8] += a[i, i + 1] if i + 1 < n else 0.0
    return out


def reference_jsd(heads: np.ndarray) -> np.ndarray:
    """heads (P, R, m) -> (P, P) JSD summed over rows, pair by pair, row by row."""
    count = heads.shape[0]
    out = np.zeros((count, count))

    def kl(p, m):  # (R, m) rows -> summed KL(p || m), 0 log 0 = 0
        safe = np.where(p > 0, p, 1.0)
        return float(np.sum(np.where(p > 0, p * np.log(safe / np.where(p > 0, m, 1.0)), 0.0)))

    for a in range(count):
        for b in range(count):
            m = (heads[a] + heads[b]) / 2
            out[a, b] = 0.5 * kl(heads[a], m) + 0.5 * kl(heads[b], m)
    return out


def scored_rows(scorer: Scorer, texts: list[str], sample=None) -> list[dict]:
    batch = {"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts, "label": [1] * len(texts)}
    if sample is not None:
        batch["heads_sample"] = np.asarray(sample)
    by_id = {row["doc_id"]: row for row in scorer(batch).to_pylist()}
    return [by_id[doc_id] for doc_id in batch["doc_id"]]  # the scorer sorts by length; back to input order


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
@pytest.mark.parametrize("block_bytes", [capture.BLOCK_BYTES, 64])
def test_statistics_equal_plain_numpy_on_tiny_models(
    tiny_model_factory, scorer_factory, monkeypatch, family, block_bytes
):
    # 64 bytes: one query row per block, so the sums cross many blocks
    monkeypatch.setattr(capture, "BLOCK_BYTES", block_bytes)
    scorer = scorer_factory(family)
    rows = scored_rows(scorer, TEXTS)  # one padded batch of unequal lengths
    for row, text in zip(rows, TEXTS):
        attention, ids, tokenizer = eager_attention(tiny_model_factory(family), text, 32)
        assert row["n_tokens"] == len(ids)
        got = np.asarray(row["heads"]).reshape(attention.shape[0], attention.shape[1], len(STATISTICS))
        np.testing.assert_allclose(got, reference_sums(attention, ids, tokenizer), atol=2e-5, rtol=1e-4)
        assert row["head_jsd"] is None  # not sampled


def test_special_and_punctuation_positions_are_found(tiny_model_factory, scorer_factory):
    """The masks really select something: a review with commas and a '!' puts mass on them."""
    row = scored_rows(scorer_factory("roberta"), ["the film was good, not very good!"])[0]
    sums = np.asarray(row["heads"]).reshape(3, 3, len(STATISTICS))
    for name in ("to_cls", "to_sep", "to_punct", "to_self", "to_prev", "to_next"):
        assert (sums[..., STATISTICS.index(name)] > 0).all(), name
    total = (
        sums[..., STATISTICS.index("to_cls")]
        + sums[..., STATISTICS.index("to_sep")]
        + sums[..., STATISTICS.index("to_punct")]
    )
    assert (total < row["n_tokens"]).all()  # and not everything: words are neither


def test_is_punctuation():
    assert all(is_punctuation(t) for t in [",", ".", "Ġ!", "##.", "...", "Ġ--", "’", "(", "»"])
    assert not any(is_punctuation(t) for t in ["the", "Ġgood", "##s", "", "Ġ", "$", "+", "10", ":)"[1:] + "a"])


def test_similarity_of_sampled_documents_equals_plain_numpy(tiny_model_factory, scorer_factory):
    scorer = scorer_factory("distilbert", heads_sample_rows=4)
    rows = scored_rows(scorer, TEXTS[:3], sample=[True, False, True])
    assert rows[1]["head_jsd"] is None
    for row, text in zip([rows[0], rows[2]], [TEXTS[0], TEXTS[2]]):
        attention, _, _ = eager_attention(tiny_model_factory("distilbert"), text, 32)
        per_head = attention.reshape(-1, *attention.shape[2:])[:, :4]  # (L*H, 4 rows, n)
        assert row["head_jsd_rows"] == 4
        got = np.asarray(row["head_jsd"]).reshape(12, 12)
        np.testing.assert_allclose(got, reference_jsd(per_head), atol=1e-5)
        assert (got > 0)[~np.eye(12, dtype=bool)].all()


def test_jsd_by_hand():
    heads = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[0.5, 0.5]]])  # (3 heads, 1 row, 2 keys)
    got = jsd_sums(heads).numpy()
    # disjoint supports: ln 2; [.5,.5] vs [1,0]: H([.75,.25]) - (ln 2 + 0) / 2
    half = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)) - math.log(2) / 2
    expected = np.array([[0, math.log(2), half], [math.log(2), 0, half], [half, half, 0]])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_log_z_from_the_cls_key_and_from_the_largest_where_cls_is_faint():
    """Each row's log Z against float64 logsumexp, on rows whose [CLS] probability is large, just
    above and below the faint threshold, and 0 in float32 (a score 200 below the rest); the
    entropies of ``block_statistics`` against -sum p log p in float64 on the same rows."""
    base = torch.tensor([[0.0, 1.0, 2.0, 0.5], [3.0, -1.0, 0.0, 0.0]], dtype=torch.float64)  # [CLS] ordinary
    gap = math.log(1 / FAINT) - math.log(3.0)  # beside three keys at 0, [CLS] at -gap has p = FAINT
    faint = torch.tensor([[-gap + 2.0, 0.0, 0.0, 0.0], [-gap - 2.0, 0.0, 0.0, 0.0], [-200.0, 4.0, 4.0, 1.0]])
    scores = torch.cat([base, faint.double()])[None] * 1.0  # (1 head, 5 rows, 4 keys)
    probs = scores.float().softmax(dim=-1)
    assert probs[0, 2, 0] > FAINT > probs[0, 3, 0] and probs[0, 4, 0] == 0  # every case is there
    got = row_log_z(probs, scores.float())[0].double()
    np.testing.assert_allclose(got.numpy(), torch.logsumexp(scores, dim=-1)[0].numpy(), rtol=0, atol=2e-6)
    exact = scores.softmax(dim=-1)
    entropy = -(exact * exact.clamp_min(1e-300).log()).sum(dim=-1)[0]  # (5,) nats, 0 log 0 = 0
    sums = block_statistics(probs, 0, torch.zeros(4, 3), scores.float())  # (1 head, N_STATS)
    assert abs(sums[0, 0].item() - entropy.sum().item()) < 1e-5
    assert abs(sums[0, 2].item() - entropy[0].item()) < 1e-6  # the [CLS] row's own


def test_classical_mds_recovers_points_up_to_rotation_and_reflection():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(9, 2)) * [3.0, 1.0]
    squared = ((points[:, None] - points[None]) ** 2).sum(-1)
    coords = classical_mds(squared)
    got = ((coords[:, None] - coords[None]) ** 2).sum(-1)
    np.testing.assert_allclose(got, squared, atol=1e-9)  # every distance kept
    centred = points - points.mean(0)
    u, _, vt = np.linalg.svd(coords.T @ centred)  # best orthogonal map (Procrustes)
    np.testing.assert_allclose(coords @ (u @ vt), centred, atol=1e-9)
    assert np.linalg.svd(u @ vt, compute_uv=False) == pytest.approx([1, 1])
    # Three collinear points: one axis carries everything, the second is zero
    line = classical_mds(np.array([[0, 1, 4], [1, 0, 1], [4, 1, 0.0]]))
    np.testing.assert_allclose(np.abs(line[:, 0]), [1, 0, 1], atol=1e-9)
    np.testing.assert_allclose(line[:, 1], 0, atol=1e-7)


def test_behaviour_names_the_dominant_target():
    base = {
        "to_cls": 0.1,
        "to_sep": 0.1,
        "to_punct": 0.1,
        "to_self": 0.1,
        "to_prev": 0.1,
        "to_next": 0.1,
        "entropy_norm": 0.9,
    }
    assert behaviour({**base, "to_sep": 0.62}) == "[SEP]"
    assert behaviour({**base, "to_prev": 0.5}) == "previous token"
    assert behaviour(base) == "broad"
    assert behaviour({**base, "entropy_norm": 0.3}) == "mixed"


def test_totals_average_over_the_rows_each_statistic_has():
    """Two documents of 3 and 5 rows: means divide by 8 rows, 2 [CLS] rows, 6 rows with a neighbour."""
    sums = [np.arange(1, 10, dtype=float), np.arange(1, 10, dtype=float) * 2]  # L = H = 1
    batch = pa.table(
        {
            "error": pa.array([None, None, "failed"], pa.string()),
            "heads": [sums[0], sums[1], None],
            "n_layers": [1, 1, None],
            "n_tokens": [3, 5, None],
            "head_jsd": pa.array([None, None, None], pa.list_(pa.float64())),
            "head_jsd_rows": pa.array([None, None, None], pa.int32()),
        }
    )
    totals = HeadTotals()
    totals.add(batch)
    total = sums[0] + sums[1]
    divisors = {name: 8 for name in STATISTICS} | {"cls_entropy": 2, "to_prev": 6, "to_next": 6}
    np.testing.assert_allclose(totals.means()[0, 0], [total[k] / divisors[n] for k, n in enumerate(STATISTICS)])
    table = totals.heads_table().to_pylist()
    assert len(table) == 1 and table[0]["n_docs"] == 2 and table[0]["n_rows"] == 8
    assert totals.similarity_table() is None


def test_real_minilm_statistics_on_real_reviews():
    reviews = pd.read_parquet(IMDB).iloc[:3]
    texts = reviews.text.tolist()
    scorer = Scorer({"model": "minilm", "max_length": 96, "methods": ["raw"], "heads_sample_rows": 8})
    rows = scored_rows(scorer, texts, sample=[True, False, False])
    for k, (row, text) in enumerate(zip(rows, texts)):
        attention, ids, tokenizer = eager_attention(scorer.info["path"], text, 96)
        got = np.asarray(row["heads"]).reshape(6, 12, len(STATISTICS))
        # fp32 attention summed over up to 96 rows
        np.testing.assert_allclose(got, reference_sums(attention, ids, tokenizer), atol=5e-4, rtol=1e-4)
        if k == 0:
            expected = reference_jsd(attention.reshape(72, *attention.shape[2:])[:, :8])
            np.testing.assert_allclose(np.asarray(row["head_jsd"]).reshape(72, 72), expected, atol=5e-5)
    assert scorer.punctuation  # the punctuation cache filled up on real text


def test_heads_can_be_switched_off_and_config_is_checked(scorer_factory):
    rows = scored_rows(scorer_factory("bert", heads=False), TEXTS[:2], sample=[True, True])
    assert all(row["heads"] is None and row["head_jsd"] is None for row in rows)
    with pytest.raises(ConfigError, match="heads_sample"):
        resolve(None, {}, ["heads_sample=-1"])


@pytest.mark.slow
@pytest.mark.ray
def test_ray_run_merges_actor_sums_into_the_heads_view(tmp_path):
    """Two actors over 10 real reviews: the published view equals one direct scorer call and the
    plain-numpy reference, and the similarity table covers the sampled reviews."""
    ray = pytest.importorskip("ray")
    cfg = resolve(
        None,
        {
            "data": str(IMDB),
            "limit": 10,
            "model": "minilm",
            "max_length": 48,
            "actors": 2,
            "store": str(tmp_path / "store"),
            "batch_size": 3,
            "methods": "raw",
            "run_id": "h",
        },
        ["heads_sample=3", "heads_sample_rows=6", "report=false", "driver_rows=0"],  # streamed by Ray Data
    )
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        screened = pipeline.screen(pipeline.read(cfg))  # read and screened by Ray workers
        pipeline.write(pipeline.score(screened, cfg), cfg, "h", n_input=screened.n_input, screened=screened)
    finally:
        ray.shutdown()
    con = open_store(cfg.store)
    view = con.execute("select * from heads where run_id = 'h' order by layer, head").df()
    assert len(view) == 72 and (view.n_docs == 10).all()

    corpus = read_corpus(cfg.data, cfg.split, limit=cfg.limit, seed=cfg.seed)
    direct = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})
    batch = {"doc_id": corpus.doc_id.values, "text": corpus.text.values, "label": corpus.label.values}
    one_shot = HeadTotals()
    one_shot.add(direct(batch))
    expected = one_shot.heads_table().to_pandas()
    pd.testing.assert_frame_equal(
        view[expected.columns].reset_index(drop=True), expected, check_exact=False, rtol=1e-9, atol=1e-12
    )

    sums, rows = np.zeros((6, 12, 9)), 0
    for text in corpus.text:
        attention, ids, tokenizer = eager_attention(direct.info["path"], text, 48)
        sums += reference_sums(attention, ids, tokenizer)
        rows += len(ids)
    assert int(view.n_rows[0]) == rows
    divisors = np.array(
        [10 if n == "cls_entropy" else rows - 10 if n in ("to_prev", "to_next") else rows for n in STATISTICS]
    )
    means = (sums / divisors).reshape(72, 9)
    np.testing.assert_allclose(view[list(STATISTICS)].to_numpy(), means, atol=1e-5)

    pairs = con.execute("select * from head_similarity where run_id = 'h'").df()
    assert len(pairs) == 72 * 72 and (pairs.n_docs == 3).all()
    # the sample: the first heads_sample of a seeded permutation of the kept documents in input order
    sampled = corpus.iloc[np.random.default_rng(cfg.seed).permutation(len(corpus))[:3]]
    jsd, jsd_rows = np.zeros((72, 72)), 0
    for text in sampled.text:
        attention, _, _ = eager_attention(direct.info["path"], text, 48)
        kept = attention.reshape(72, *attention.shape[2:])[:, :6]
        jsd += reference_jsd(kept)
        jsd_rows += kept.shape[1]
    assert int(pairs.n_rows[0]) == jsd_rows
    got = pairs.sort_values(["layer_a", "head_a", "layer_b", "head_b"]).jsd.to_numpy().reshape(72, 72)
    np.testing.assert_allclose(got, jsd / jsd_rows, atol=1e-6)


def test_eager_fallback_gives_the_same_statistics(tiny_model_factory, scorer_factory):
    """A model without the capture's attention function (eager) goes through output_attentions;
    the statistics come out the same as from the capture's blocks."""
    from xai_ray.methods.heads import HeadCollector, position_masks

    scorer = scorer_factory("roberta")
    eager = load_model(tiny_model_factory("roberta"), attn_implementation="eager")
    encoding = scorer.tokenizer(TEXTS, truncation=True, max_length=32, padding=True, return_tensors="pt")
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    got = []
    for model in (scorer.model, eager.model):
        collector = HeadCollector(lengths, position_masks(encoding["input_ids"], scorer.tokenizer), [True] * 5, 6)
        capture.forward_with_attention(model, dict(encoding), heads=collector)
        got.append((collector.statistics().numpy(), collector.similarity()[4][0].numpy()))
    np.testing.assert_allclose(got[0][0], got[1][0], atol=2e-5, rtol=1e-5)  # fp32 sums over rows
    np.testing.assert_allclose(got[0][1], got[1][1], atol=2e-5)


def test_head_columns_survive_the_deferred_flow_stage(scorer_factory):
    from xai_ray.scoring.deferred import DeferredMethods

    config = {"model": "unused", "max_length": 32, "methods": ["raw", "flow"], "deferred_methods": ["flow"]}
    scorer = scorer_factory("bert", methods=("raw", "flow"), deferred_methods=("flow",))
    rows = scorer({"doc_id": ["a", "b"], "text": TEXTS[:2], "label": [1, 0], "heads_sample": np.array([True, False])})
    assert "attention" in rows.column_names
    done = DeferredMethods(config)(rows)
    assert "attention" not in done.column_names and done.column("scores_flow").null_count == 0
    for column in ("heads", "head_jsd", "head_jsd_rows"):
        assert done.column(column).to_pylist() == rows.column(column).to_pylist()


def test_a_resumed_run_sums_every_document_once(tmp_path, scorer_factory):
    """Head sums live in each committed part's record: a run stopped after two parts, resumed, and
    handed one batch again (a retried Ray task) sums each document exactly once."""
    from xai_ray.store.writer import RunWriter

    scorer = scorer_factory("bert")
    texts = [
        "the film was good",
        "bad movie",
        "i loved the story",
        "not very boring",
        "the plot is fine",
        "great acting and a great plot",
    ]
    batches = [
        scorer({"doc_id": [f"d{i}", f"d{i + 1}"], "text": texts[i : i + 2], "label": [0, 1]}) for i in range(0, 6, 2)
    ]
    per_doc = [np.asarray(r["heads"]) for b in batches for r in b.to_pylist()]  # each row's own sums
    n_rows = sum(r["n_tokens"] for b in batches for r in b.to_pylist())

    first = RunWriter(tmp_path, "r", ["raw", "rollout"], part_rows=1, totals=HeadTotals)
    first.write(batches[0])
    first.write(batches[1])
    first.abort(keep_parts=True)  # the driver dies: two committed parts stay
    again = RunWriter(tmp_path, "r", ["raw", "rollout"], part_rows=1, totals=HeadTotals)
    assert again.totals.n_docs == 4
    again.write(batches[1])  # delivered again: dropped, not summed twice
    again.write(batches[2])
    again.commit()
    assert again.totals.n_docs == 6 and again.totals.n_rows == n_rows
    np.testing.assert_allclose(again.totals.sums.ravel(), np.sum(per_doc, axis=0), rtol=1e-12)
    again.write_whole("heads", again.totals.heads_table())
    again.publish({"created_at": "x"})
    view = open_store(tmp_path).execute("select n_docs, count(*) as n from heads group by n_docs").df()
    assert view.n_docs.tolist() == [6] and view.n.tolist() == [2 * 2]  # tiny BERT: 2 layers x 2 heads


def test_a_model_of_one_head_gets_a_map_of_one_point():
    """A 1-layer, 1-head model crashed `run` after publishing and `report` (IndexError: the map of one
    head had one axis). One point sits at the origin on both axes."""
    assert classical_mds(np.zeros((1, 1))).tolist() == [[0.0, 0.0]]
    two = classical_mds(np.array([[0.0, 4.0], [4.0, 0.0]]))  # two heads 2 apart: on one axis
    assert two.shape == (2, 2) and abs(two[0, 0] - two[1, 0]) == pytest.approx(2.0) and not two[:, 1].any()
