"""Store layout 3's derivations: a word's raw score from its token, its share from a divisor.

Layout 3 stores a word's raw score on its first token's row (the token's own score kept apart only
where it differs), and its share as raw / a per-document float32 divisor that the writer checks bit
for bit (``scores_v3``). Here the scorer rows are written by hand, with the cases the writer must
get right: a word of two tokens (its first token's score kept apart), a word without a token (a row of its own), a document whose shares no divisor
reproduces (an unsigned method whose total is negative: every share 0, where raw / inf would give
-0 for a negative raw), so the part keeps that slice's shares. The expected rows are computed here
in float32 numpy as the scorer computes them (``words.merge_batch``), and layout 1, which stores
the scorer's floats as they are, must read the same.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xai_ray.query.connection import open_store
from xai_ray.scoring.rows import row_schema
from xai_ray.store import layout
from xai_ray.store.divisors import divisors
from xai_ray.store.writer import RunWriter

F32 = np.float32
# per document: tokens, each token's word (-1: special), words, token scores per layer (L=2, n)
DOCS = {
    "a": (
        ["[CLS]", "un", "##like", "it", "[SEP]"],
        [-1, 0, 0, 1, -1],
        ["unlike", "it", "gone"],  # "gone" has no token
        [[0.1, 0.2, 0.3, 0.25, 0.15], [0.05, 0.4, 0.1, 0.3, 0.15]],
    ),
    "b": (
        ["[CLS]", "a", "b", "[SEP]"],
        [-1, 0, 1, -1],
        ["a", "b"],
        [[0.5, -3.0, 1.0, 0.5], [0.1, 0.6, 0.2, 0.1]],  # layer 1: raw -3 + 1 < 0, every share 0
    ),
}


def scorer_words(scores: np.ndarray, index: list[int], n_words: int):
    """(raw (L, W), share (L, W)) in float32 as ``words.merge_batch`` makes them (unsigned)."""
    raw = np.zeros((scores.shape[0], n_words), dtype=F32)
    for position, word in enumerate(index):
        if word >= 0:
            raw[:, word] += scores[:, position]
    total = raw.sum(axis=1, keepdims=True, dtype=F32)
    share = np.where(total > 0, raw / np.where(total > 0, total, F32(1)), F32(0)).astype(F32)
    return raw, share


def scorer_rows() -> pa.Table:
    rows = []
    for doc_id, (tokens, index, words, scores) in DOCS.items():
        scores = np.array(scores, dtype=F32)
        raw, share = scorer_words(scores, index, len(words))
        rows.append(
            {
                "doc_id": doc_id,
                "text": " ".join(words),
                "label": 1,
                "pred": 1,
                "probs": [0.25, 0.75],
                "n_tokens": len(tokens),
                "n_layers": 2,
                "truncated": False,
                "tokens": tokens,
                "word_index": index,
                "words": words,
                "word_span": list(range(len(words))),
                "word_joined": words,
                "model_fingerprint": "f",
                "scores_raw": scores.ravel(),
                "word_raw_raw": raw.ravel(),
                "word_scores_raw": share.ravel(),
            }
        )
    return pa.Table.from_pylist(rows, schema=row_schema(["raw"]))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout3")
    for run_id, version in (("one", 1), ("three", 3)):
        writer = RunWriter(root, run_id, ["raw"], layout=version)
        writer.write(scorer_rows())
        writer.publish({"created_at": run_id, "config": {"methods": ["raw"]}})
    return root


def expected_words() -> list[tuple]:
    """(doc_id, layer, word_id, word, share, raw, lift) of every word, from the scorer's floats."""
    out = []
    for doc_id, (_, index, words, scores) in DOCS.items():
        raw, share = scorer_words(np.array(scores, dtype=F32), index, len(words))
        for layer in range(2):
            for w, word in enumerate(words):
                lift = float(F32(float(share[layer, w]) * len(words)))  # every unit one word
                out.append((doc_id, layer + 1, w, word, float(share[layer, w]), float(raw[layer, w]), lift))
    return sorted(out)


def test_words_read_back_as_the_scorer_made_them(store):
    con = open_store(store)
    query = "select doc_id, layer, word_id, word, score, raw_score, lift from words where run_id = ? order by all"
    three = con.execute(query, ["three"]).fetchall()
    assert three == expected_words()
    assert three == con.execute(query, ["one"]).fetchall()
    signs = con.execute(
        "select sign(raw_score), score::varchar from words where run_id = 'three' and doc_id = 'b' and layer = 1 order by 1"
    )
    assert signs.fetchall() == [(-1.0, "0.0"), (1.0, "0.0")]  # +0, not raw / inf's -0
    tokens = "select * exclude (run_id) from tokens where run_id = ? order by all"
    assert con.execute(tokens, ["three"]).fetchall() == con.execute(tokens, ["one"]).fetchall()
    assert con.execute("select count(*) from tokens where run_id = 'three'").fetchone()[0] == 2 * 9


def test_only_what_is_not_implied_is_stored(store):
    run = layout.run_dir(store, "three")
    (part,) = (run / "token_scores").glob("*.parquet")
    table = pq.read_table(part)
    assert table.num_rows == 9 + 1  # nine tokens and the word without one
    own = table.column("token_score:raw:1").to_pylist()
    kept = [row["word"] for row, value in zip(table.select(["word"]).to_pylist(), own) if value is not None]
    assert kept == ["unlike"]  # the first token of a word of two tokens keeps its own score
    words = [(r["word"], r["score:raw:1"]) for r in table.select(["word", "score:raw:1"]).to_pylist()]
    assert ("gone", 0.0) in words  # a word without a token: a row of its own with its raw score
    assert "share:raw:1" in table.column_names and "share:raw:2" not in table.column_names
    shares = [v for v in table.column("share:raw:1").to_pylist() if v is not None]
    assert shares == [0.0, 0.0]  # document b's two words, nothing else
    manifest = json.loads(layout.manifest_path(store, "three").read_text())
    assert manifest["shares"] == ["raw:1"] and manifest["store_layout"] == 3


def test_a_divisor_is_found_however_the_total_was_rounded():
    rng = np.random.default_rng(3)
    raw = rng.gamma(0.5, size=800).astype(F32)
    raw[400:] -= F32(0.3)  # the second document is signed
    word_doc = np.repeat([0, 1], 400)
    first = np.nextafter(raw[:400].sum(dtype=F32), F32(np.inf))
    for _ in range(39):  # a total rounded 40 ulps away from the exact sum's float32
        first = np.nextafter(first, F32(np.inf))
    second = np.abs(raw[400:]).sum(dtype=F32)
    shares = np.concatenate([raw[:400] / first, raw[400:] / second]).astype(F32)
    found, exact = divisors(raw, shares, word_doc, 2)
    assert exact.tolist() == [True, True]
    assert ((raw / found[word_doc]).view(np.int32) == shares.view(np.int32)).all()
    shares[7] = np.nextafter(shares[7], F32(1))  # a share no single divisor makes
    assert divisors(raw, shares, word_doc, 2)[1].tolist() == [False, True]
    nan = np.full(3, np.nan, dtype=F32)
    assert divisors(np.ones(3, dtype=F32), nan, np.zeros(3, dtype=int), 1)[1].tolist() == [True]


def test_divisors_of_documents_without_words_or_with_a_first_word_that_implies_no_total():
    # document 0: three words; 1: none; 2: its first word scores 0 (share 0: no total from it); 3: all 0
    raw = np.array([1.0, 2.0, 4.0, 0.0, 3.0, 5.0, 0.0, 0.0], dtype=F32)
    word_doc = np.array([0, 0, 0, 2, 2, 2, 3, 3])
    totals = {0: F32(7.0), 2: F32(8.0), 3: F32(0.0)}
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.array([raw[i] / totals[d] if totals[d] > 0 else 0.0 for i, d in enumerate(word_doc)], dtype=F32)
    found, exact = divisors(raw, shares, word_doc, 4)
    assert exact.tolist() == [True, True, True, True]
    with np.errstate(invalid="ignore", divide="ignore"):
        again = raw / found[word_doc]
    assert (again.view(np.int32) == shares.view(np.int32)).all()  # bit for bit, 0 / inf = 0 included
    assert found[3] == np.inf  # every share 0: the total was 0
    with pytest.raises(ValueError, match="documents in order"):
        divisors(raw, shares, word_doc[::-1].copy(), 4)


def test_each_kind_of_row_sits_in_row_groups_of_its_own_with_the_statistics_a_filter_needs(store):
    (part,) = (layout.run_dir(store, "three") / "token_scores").glob("*.parquet")
    meta = pq.ParquetFile(part).metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    groups = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        span, own = (group.column(names.index(name)).statistics for name in ("span_id", "token_score:raw:1"))
        own_values = pq.ParquetFile(part).read_row_group(g, columns=["token_score:raw:1"]).column(0)
        groups.append((group.num_rows, span.null_count, own_values.null_count))
    # words holding their token's score (a, it, b; gone, whose row has no token), the word keeping
    # it apart (unlike), then the other rows ([CLS], ##like, [SEP] x 2): no group mixes two kinds
    assert groups == [(4, 0, 4), (1, 0, 0), (5, 5, 5)]


@pytest.mark.parametrize("signed", [False, True])
def test_the_cpu_stage_shares_are_kept_as_a_divisor_not_a_column(tmp_path, signed):
    # the CPU stage (flow, and the methods run after a GPU actor) builds a row's words with
    # score_columns: sums in float64 stored as float32, shares divided in float32 as the batched path
    from xai_ray.scoring.rows import score_columns

    rng = np.random.default_rng(5)
    index = np.array([-1, 0, 0, 1, 2, 2, 2, 3, -1])
    scores = rng.normal(size=(2, len(index))) if signed else rng.gamma(0.5, size=(2, len(index)))
    columns = score_columns("raw", scores, index, 4, signed)
    row = {
        **{key: value.tolist() for key, value in columns.items()},
        **{"doc_id": "c", "text": "w x y z", "label": 1, "pred": 1, "probs": [0.5, 0.5], "n_tokens": 9},
        **{"n_layers": 2, "truncated": False, "tokens": [f"t{i}" for i in range(9)], "word_index": index.tolist()},
        **{"words": list("wxyz"), "word_span": [0, 1, 2, 3], "word_joined": list("wxyz"), "model_fingerprint": "f"},
    }
    writer = RunWriter(tmp_path, "cpu", ["raw"], layout=3)
    writer.write(pa.Table.from_pylist([row], schema=row_schema(["raw"])))
    writer.publish({"created_at": "cpu", "config": {"methods": ["raw"]}})
    (part,) = (layout.run_dir(tmp_path, "cpu") / "token_scores").glob("*.parquet")
    assert not [name for name in pq.read_schema(part).names if name.startswith("share:")]
    # the shares read back bit for bit, against a float32 division written here
    raw = np.zeros((2, 4))
    np.add.at(raw.T, index[index >= 0], scores[:, index >= 0].T)
    raw = raw.astype(F32)
    total = (np.abs(raw) if signed else raw).sum(axis=1, keepdims=True, dtype=F32)
    expected = (raw / total).astype(F32)
    got = open_store(tmp_path).execute("select layer, word_id, score from words order by layer, word_id").fetchall()
    assert np.array([s for *_, s in got], dtype=F32).view(np.int32).tolist() == expected.ravel().view(np.int32).tolist()


def test_a_batch_whose_reviews_have_no_words_is_written(tmp_path):
    # a review of zero-width spaces tokenizes to [CLS] [SEP] only: no word, so no divisor to find;
    # alone in its batch, and beside a review with words
    def row(doc_id, tokens, index, words):
        n = len(tokens)
        scores = np.full((2, n), 1.0 / n, dtype=F32)
        raw, share = scorer_words(scores, index, len(words))
        return {
            **{"doc_id": doc_id, "text": " ".join(words) or "\u200b", "label": 1, "pred": 1, "probs": [0.5, 0.5]},
            **{"n_tokens": n, "n_layers": 2, "truncated": False, "tokens": tokens, "word_index": index},
            **{"words": words, "word_span": list(range(len(words))), "word_joined": words, "model_fingerprint": "f"},
            **{"scores_raw": scores.ravel(), "word_raw_raw": raw.ravel(), "word_scores_raw": share.ravel()},
        }

    empty = row("empty", ["[CLS]", "[SEP]"], [-1, -1], [])
    worded = row("worded", ["[CLS]", "good", "[SEP]"], [-1, 0, -1], ["good"])
    for run_id, rows in (("alone", [empty]), ("beside", [empty, worded])):
        writer = RunWriter(tmp_path, run_id, ["raw"], layout=3)
        writer.write(pa.Table.from_pylist(rows, schema=row_schema(["raw"])))
        writer.publish({"created_at": run_id, "config": {"methods": ["raw"]}})
    con = open_store(tmp_path)
    counts = "select run_id, count(*) from {} group by run_id order by run_id"
    assert con.execute(counts.format("docs")).fetchall() == [("alone", 1), ("beside", 2)]
    assert con.execute(counts.format("tokens")).fetchall() == [("alone", 4), ("beside", 10)]  # 2 layers
    assert con.execute("select doc_id, layer, score from words").fetchall() == [("worded", 1, 1.0), ("worded", 2, 1.0)]


def test_a_run_with_no_scored_document_beside_another_reads_its_missing_values_as_none(tmp_path):
    # pandas reads a text column's missing values as NaN once another run fills it: the report then
    # sliced a float (its fingerprint) and failed
    from xai_ray.query.connection import pick_run

    scored = RunWriter(tmp_path, "scored", ["raw"], layout=3)
    scored.write(scorer_rows())
    scored.publish({"created_at": "1", "config": {"methods": ["raw"]}, "model": {"fingerprint": "f" * 64}})
    failed = RunWriter(tmp_path, "failed", ["raw"], layout=3)
    failed.write_errors(["x"], "read", ["text is empty or whitespace only"])
    failed.publish({"created_at": "2", "config": {"methods": ["raw"]}})
    run = pick_run(open_store(tmp_path), "failed")
    assert run["model_fingerprint"] is None and run["n_docs"] == 0 and run["run_id"] == "failed"
    assert pick_run(open_store(tmp_path), None)["run_id"] == "failed"  # the newest


def test_word_totals_summed_in_one_scan_hold_each_words_share_and_lift(store):
    """The aggregate stage's wide scan of layout 3 (a kept share among its rows) against the
    expected words above: every word occurs once in one document, so its totals are its own."""
    from xai_ray.query.word_totals import SUMS, word_totals

    con = open_store(store)
    got = word_totals(con, store, "three").sort_values(["layer", "word"], ignore_index=True)
    expected = sorted((layer, word, share, lift) for _, layer, _, word, share, _, lift in expected_words())
    assert [(r.layer, r.word) for r in got.itertuples()] == [(layer, word) for layer, word, _, _ in expected]
    np.testing.assert_allclose(got["total_share"], [e[2] for e in expected], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(got["total_lift"], [e[3] for e in expected], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(got["squares_lift"], [e[3] ** 2 for e in expected], rtol=1e-6, atol=1e-12)
    assert set(got["method"]) == {"raw"} and set(got["pred"]) == {1}
    assert (got["occurrences"] == 1).all() and (got["documents"] == 1).all()
    by_slice = word_totals(con, store, "three", wide=False).sort_values(["layer", "word"], ignore_index=True)
    assert by_slice.drop(columns=list(SUMS)).equals(got.drop(columns=list(SUMS)))  # the words view, slice by slice
    np.testing.assert_allclose(by_slice[list(SUMS)], got[list(SUMS)], rtol=1e-12)


@pytest.mark.parametrize("run_ids", [("20261127", "20261128"), ("2026-11-27",)])
def test_run_ids_that_look_like_numbers_stay_text_in_every_slice(tmp_path, run_ids):
    """A slice's select reads its run id from the folder name as text (every partition value read
    as text, not typed per select): in a store whose ids all look like values of one type,
    ``20261127`` is no integer and ``2026-11-27`` no date, and a query binds a run id as text."""
    for run_id in run_ids:
        writer = RunWriter(tmp_path, run_id, ["raw"], layout=3)
        writer.write(scorer_rows())
        writer.publish({"created_at": run_id, "config": {"methods": ["raw"]}})
    con = open_store(tmp_path)
    for view in ("tokens", "words"):
        typed = con.execute(f"select distinct typeof(run_id), run_id from {view} order by 2").fetchall()
        assert typed == [("VARCHAR", run_id) for run_id in sorted(run_ids)]
        rows = f"select * exclude (run_id) from {view} where run_id = ? order by all"
        assert con.execute(rows, [run_ids[0]]).fetchall() == con.execute(rows, [run_ids[-1]]).fetchall() != []


def test_topk_by_label_of_a_run_that_scored_nothing_says_so(tmp_path):
    """It said the run's corpus had no label column: every row of it had a label, and failed."""
    from xai_ray.query.connection import QueryError
    from xai_ray.query.top_words import topk

    failed = RunWriter(tmp_path, "failed", ["raw"], layout=3)
    failed.write_errors(["x", "y"], "read", ["label 'joy' is not a class number"] * 2)
    failed.publish({"created_at": "2", "config": {"methods": ["raw"]}, "model": {"n_layers": 2}})
    for by in ("label", "correct"):
        with pytest.raises(QueryError, match=f"run 'failed' scored no document .*, so --by {by} has no groups"):
            topk(open_store(tmp_path), "failed", "raw", 2, 10, by=by)
