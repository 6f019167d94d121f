"""What the scoring actor's host does per review outside the model's forward and backward.

    python bench/host_cost.py [--docs 16] [--batch 8] [--repeats 3]

For two model shapes at 512 tokens (about 400 words a review), on one thread:
    MiniLM:    6 layers x 12 heads, hidden 384; methods raw and rollout
    bert-base: 12 layers x 12 heads, hidden 768; methods raw, rollout and grad_rollout
the captures a forward (and grad_rollout's backward) leaves are synthesised at their shapes
(row-stochastic fused attention, non-negative gradient-weighted attention), since the stages
measured here never read the model. Each stage's CPU time per review, in one run:
    methods          the methods' (L, n) scores of every review
    words            word sums and renormalised words
    columns          the actor's output table (``scoring.rows.row_schema``)
    encode + write   the store's tables of those rows, encoded as Parquet in memory (the writer's
                     options; no files, no fsync), as ``bench/scale.py``'s encoding floor: a part
                     of as many distinct reviews as a run's parts hold (500 at the defaults;
                     ``store_layout.block``'s synthetic rows), so a part's fixed costs are spread
                     as a run spreads them, for both paths; encoded ``--repeats`` times in turn,
                     the best of each
before: the per-document path before the batched one, kept below as code (float64 numpy per review,
        words by ``np.add.at`` per review, a Python dict per row and ``pa.Table.from_pylist``);
after:  the scorer's path (``Method.scores`` on the whole (B, L, N, N) batch in float32 torch,
        ``words.merge_batch``, ``rows.score_arrays`` and ``rows.table_of``).
Both tables are checked to hold the same rows (scores to float32 rounding). ``join_contractions``
is the current one in both (it now skips its patterns unless the next word opens with an apostrophe).

Ends with one line:
``host: BEFORE -> AFTER ms/review outside the forward (RATIOx); write BEFORE -> AFTER reviews/s per core (RATIOx); store BEFORE -> AFTER KB/review``
for MiniLM raw+rollout, host including the write. The write and store figures are those of the
store layout this checkout writes.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_layout import block  # noqa: E402

from xai_ray.config import RunConfig  # noqa: E402
from xai_ray.methods import AttentionOptions, get_method  # noqa: E402
from xai_ray.pipeline.writing import docs_per_part  # noqa: E402
from xai_ray.scoring.rows import review_meta, row_schema, score_arrays, table_of  # noqa: E402
from xai_ray.scoring.segments import MergedBatch  # noqa: E402
from xai_ray.scoring.text_columns import Vocabulary, text_columns  # noqa: E402
from xai_ray.store.files import write_parquet  # noqa: E402
from xai_ray.store.parts import ROW_GROUP_ROWS  # noqa: E402
from xai_ray.store.schemas import LAYOUT  # noqa: E402
from xai_ray.store.tables import parquet_options, part_tables  # noqa: E402
from xai_ray.words import APOSTROPHE, TAIL, WORDLIKE, merge_batch  # noqa: E402

TOKENS, WORDS = 512, 400
SHAPES = {"MiniLM": (6, ("raw", "rollout")), "bert-base": (12, ("raw", "rollout", "grad_rollout"))}
STAGES = ("methods", "words", "columns", "encode + write")
PART_DOCS = docs_per_part(RunConfig(max_length=TOKENS))  # reviews a run's part holds at the defaults (500)


def synthetic(n_docs: int, n_layers: int, seed: int) -> dict:
    """Captures and layout of ``n_docs`` 512-token reviews of WORDS words (torch float32)."""
    rng = np.random.default_rng(seed)
    fused = torch.from_numpy(rng.random((n_docs, n_layers, TOKENS, TOKENS), dtype=np.float32) + 0.01)
    fused /= fused.sum(-1, keepdim=True)
    weighted = torch.from_numpy(rng.random((n_docs, n_layers, TOKENS, TOKENS), dtype=np.float32) * 1e-3)
    docs = []
    for d in range(n_docs):
        inner = np.sort(np.concatenate([np.arange(WORDS), rng.choice(WORDS, TOKENS - 2 - WORDS)]))
        index = np.concatenate([[-1], inner, [-1]]).astype(np.int64)  # [CLS] ... [SEP]
        words = [f"w{d}x{w}" for w in range(WORDS)]
        text = " ".join(words)
        starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
        offsets = [(0, 0)] + [(int(starts[w]), int(starts[w] + len(words[w]))) for w in inner] + [(0, 0)]
        tokens = ["[CLS]"] + [f"t{w}" for w in inner] + ["[SEP]"]
        ids = [0] + [2 + int(w) for w in inner] + [1]  # BenchTokens' ids of those tokens
        docs.append(
            {"doc_id": f"d{seed}-{d}", "text": text, "index": index, "offsets": offsets, "tokens": tokens, "ids": ids}
        )
    return {"attention": fused, "attention_gradients": weighted, "docs": docs}


class BenchTokens:
    """The synthetic reviews' vocabulary: [CLS], [SEP], then one token per word position."""

    def __len__(self) -> int:
        return 2 + WORDS

    def convert_ids_to_tokens(self, ids):
        return [("[CLS]", "[SEP]")[i] if i < 2 else f"t{i - 2}" for i in ids]


VOCABULARY = Vocabulary(BenchTokens())


# ---------------------------------------------------------------- before: the per-document path, as it was


def old_as_layers(A) -> np.ndarray:
    if hasattr(A, "detach"):
        A = A.detach().cpu().double().numpy()
    return np.asarray(A, dtype=np.float64)


def old_rollout_rows(A) -> np.ndarray:
    A = old_as_layers(A)
    rows = []
    for top in range(A.shape[0]):
        row = A[top, 0, :]
        for below in range(top - 1, -1, -1):
            row = row @ A[below]
        rows.append(row)
    return np.stack(rows)


def old_shares(scores) -> np.ndarray:
    totals = scores.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, scores / np.where(totals > 0, totals, 1.0), scores)


def old_method(name: str, doc_attention, doc_weighted) -> np.ndarray:
    if name == "raw":
        return old_as_layers(doc_attention)[:, 0, :].copy()
    if name == "rollout":
        fused = old_as_layers(doc_attention)
        return old_rollout_rows(0.5 * fused + 0.5 * np.eye(fused.shape[-1]))
    weighted = old_as_layers(doc_weighted)
    return old_shares(old_rollout_rows(old_as_layers(weighted) + np.eye(weighted.shape[-1])))


def old_merge_scores(scores, index, n_words) -> np.ndarray:
    out = np.zeros((scores.shape[0], n_words), dtype=np.float64)
    keep = index >= 0
    np.add.at(out.T, index[keep], scores[:, keep].T)
    return out


def old_normalise(word_scores) -> np.ndarray:
    total = word_scores.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, word_scores / total, np.where(np.isnan(total), np.nan, 0.0))


def old_word_spans(index, n_words, offsets) -> list:
    starts, ends = [None] * n_words, [0] * n_words
    for position, w in enumerate(index):
        if w < 0:
            continue
        start, end = offsets[position]
        starts[w] = start if starts[w] is None else min(starts[w], start)
        ends[w] = max(ends[w], end)
    return list(zip(starts, ends))


def old_join_contractions(
    texts: list[str], spans: list[tuple[int | None, int]], text: str
) -> tuple[list[int], list[str]]:
    """``words.join_contractions`` as it was: every word walked in Python."""
    n = len(texts)

    def touch(a: int, b: int) -> bool:
        return spans[a][0] is not None and spans[b][0] is not None and spans[a][1] == spans[b][0]

    first = list(range(n))
    last = list(range(n))
    # every join needs the next word to start with an apostrophe: the rest skip the patterns
    opens = [bool(t) and t[0] in "'\u2019" for t in texts] + [False]
    i = 0
    while i < n:
        j = i
        if opens[i + 1] and WORDLIKE.fullmatch(texts[i]):
            while opens[j + 1]:
                if j + 1 < n and touch(j, j + 1) and TAIL.fullmatch(texts[j + 1]):
                    j += 1
                elif (
                    j + 2 < n
                    and touch(j, j + 1)
                    and touch(j + 1, j + 2)
                    and APOSTROPHE.fullmatch(texts[j + 1])
                    and WORDLIKE.fullmatch(texts[j + 2])
                ):
                    j += 2
                else:
                    break
        for w in range(i, j + 1):
            first[w], last[w] = i, j
        i = j + 1
    joined = [texts[w] if first[w] == last[w] else text[spans[first[w]][0] : spans[last[w]][1]] for w in range(n)]
    return first, joined


def old_document_row(doc: dict, n_words: int, n_layers: int) -> dict:
    index, text = doc["index"], doc["text"]
    spans = old_word_spans(index, n_words, doc["offsets"])
    words = [text[s:e].strip() if s is not None else "" for s, e in spans]
    word_span, word_joined = old_join_contractions(words, spans, text)
    return {
        "doc_id": doc["doc_id"],
        "text": text,
        "label": 1,
        "pred": 1,
        "probs": [0.25, 0.75],
        "n_tokens": len(doc["tokens"]),
        "n_layers": n_layers,
        "truncated": False,
        "tokens": doc["tokens"],
        "word_index": index.tolist(),
        "words": words,
        "word_span": word_span,
        "word_joined": word_joined,
        "error": None,
        "model_fingerprint": "bench",
        "seconds": {"forward": 0.0},
    }


def before(batch: dict, methods, clock: dict) -> pa.Table:
    fused, weighted = batch["attention"].numpy(), batch["attention_gradients"].numpy()
    n_layers = fused.shape[1]
    rows = []
    for b, doc in enumerate(batch["docs"]):
        n, n_words = len(doc["tokens"]), WORDS
        with clock_of(clock, "columns"):
            row = old_document_row(doc, n_words, n_layers)
        for name in methods:
            with clock_of(clock, "methods"):
                scores = old_method(name, fused[b, :, :n, :n], weighted[b, :, :n, :n])
            with clock_of(clock, "words"):
                word_raw = old_merge_scores(scores, doc["index"], n_words)
                word_scores = old_normalise(word_raw)
            with clock_of(clock, "columns"):
                row[f"scores_{name}"] = scores.astype(np.float32).ravel()
                row[f"word_raw_{name}"] = word_raw.astype(np.float32).ravel()
                row[f"word_scores_{name}"] = word_scores.astype(np.float32).ravel()
        rows.append(row)
    with clock_of(clock, "columns"):
        return pa.Table.from_pylist(rows, schema=row_schema(list(methods)))


# ---------------------------------------------------------------- after: the scorer's path


def after(batch: dict, methods, clock: dict) -> pa.Table:
    docs = batch["docs"]
    n_layers = batch["attention"].shape[1]
    lengths = torch.tensor([len(doc["tokens"]) for doc in docs])
    merged = MergedBatch(
        token_ids=[list(range(len(doc["tokens"]))) for doc in docs],
        offsets=[doc["offsets"] for doc in docs],
        indexes=[doc["index"] for doc in docs],
        n_tokens=lengths.numpy(),
        n_words=np.full(len(docs), WORDS),
        rows=list(range(len(docs))),
        gather=None,
    )
    columns = {}
    for name in methods:
        method = get_method(name, AttentionOptions())
        with clock_of(clock, "methods"):
            tokens = merged.scores(method.scores(batch, lengths, n_layers))  # (D, L, N)
        with clock_of(clock, "words"):
            raw, spread = merge_batch(tokens, merged.word_index(tokens.device), merged.n_words_max, method.signed)
        with clock_of(clock, "columns"):
            columns.update(score_arrays(name, tokens, raw, spread, merged.n_tokens, merged.n_words))
    with clock_of(clock, "columns"):
        columns.update(
            text_columns(
                [doc["text"] for doc in docs],
                [doc["ids"] for doc in docs],
                merged.indexes,
                merged.n_words,
                merged.offsets,
                VOCABULARY,
            )
        )
        meta = [
            review_meta(
                doc_id=doc["doc_id"],
                text=doc["text"],
                label=1,
                probs=np.array([0.25, 0.75], dtype=np.float32),
                n_tokens=len(doc["tokens"]),
                n_layers=n_layers,
                truncated=False,
                fingerprint="bench",
                forward_s=0.0,
            )
            for doc in docs
        ]
        return table_of(row_schema(list(methods)), meta, columns)


# ---------------------------------------------------------------- measuring


class clock_of:
    """Adds the CPU seconds of a ``with`` block to ``clock[stage]``."""

    def __init__(self, clock: dict, stage: str) -> None:
        self.clock, self.stage = clock, stage

    def __enter__(self):
        self.started = time.process_time()

    def __exit__(self, *exc):
        self.clock[self.stage] = self.clock.get(self.stage, 0.0) + time.process_time() - self.started


# Before: the previous store layout (1: a row per method x layer x token); after: this checkout's.
LAYOUTS = {"before": 1, "after": LAYOUT}


def encode(table: pa.Table, methods, clock: dict, layout: int = LAYOUT) -> int:
    """The store's tables of ``table`` in store ``layout``, encoded as Parquet in memory; returns their bytes."""
    size = 0
    with clock_of(clock, "encode + write"):
        for part in part_tables(table, list(methods), layout=layout).merged().values():
            sink = io.BytesIO()
            write_parquet(part, sink, **{"row_group_size": ROW_GROUP_ROWS, **parquet_options(part)})
            size += sink.tell()
    return size


def same_rows(old: pa.Table, new: pa.Table, methods) -> None:
    for column in ("doc_id", "tokens", "word_index", "words", "word_span", "word_joined", "n_tokens"):
        assert old.column(column).equals(new.column(column)), column
    for name in methods:
        for prefix in ("scores", "word_raw", "word_scores"):
            a = old.column(f"{prefix}_{name}").combine_chunks().flatten().to_numpy()
            b = new.column(f"{prefix}_{name}").combine_chunks().flatten().to_numpy()
            np.testing.assert_allclose(b, a, atol=2e-5, rtol=1e-3, err_msg=f"{prefix}_{name}")


def part_rows(n_layers: int, methods) -> pa.Table:
    """A part's worth of scorer rows (``PART_DOCS`` distinct reviews; ``store_layout.block``: 512
    tokens, 400 words from a Zipf vocabulary, attention-like token scores, words summed from them as
    the scorer sums them), for the encode stage: timing a part as large as a run's spreads its fixed
    costs as a run does, and distinct reviews keep the encoder from finding one review in another."""
    rng = np.random.default_rng(7)
    size = 50
    blocks = [block(min(size, PART_DOCS - f), f, list(methods), n_layers, rng) for f in range(0, PART_DOCS, size)]
    return pa.concat_tables(blocks).combine_chunks()


def measure(shape: str, n_docs: int, batch_size: int, repeats: int) -> dict:
    n_layers, methods = SHAPES[shape]
    clocks = {"before": {}, "after": {}}
    sizes = {"before": 0, "after": 0}
    tables = {"before": [], "after": []}
    for repeat in range(repeats):
        for first in range(0, n_docs, batch_size):
            batch = synthetic(min(batch_size, n_docs - first), n_layers, seed=repeat * 1000 + first)
            for path, run in (("before", before), ("after", after)):
                tables[path].append(run(batch, methods, clocks[path]))
            same_rows(tables["before"][-1], tables["after"][-1], methods)
    reviews = n_docs * repeats
    part = part_rows(n_layers, methods)
    best = dict.fromkeys(clocks, float("inf"))
    for _ in range(repeats):  # the store's parts, as large as a run's: a part's fixed costs are paid once
        for path in clocks:  # in turn, the best of each: one pass was the noisiest figure of the table
            encoded = {}
            sizes[path] = encode(part, methods, encoded, LAYOUTS[path]) * reviews / part.num_rows
            best[path] = min(best[path], encoded["encode + write"])
    for path in clocks:
        clocks[path]["encode + write"] = best[path] * reviews / part.num_rows
    return {
        path: {
            **{stage: 1000 * clocks[path].get(stage, 0.0) / reviews for stage in STAGES},
            "kb": sizes[path] / 1024 / reviews,
        }
        for path in clocks
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=16, help="reviews per shape and repeat (default 16)")
    parser.add_argument("--batch", type=int, default=8, help="reviews per scorer batch (default 8)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats, summed (default 3)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # CPU time per review-core: one thread per actor, as an actor runs
    results = {shape: measure(shape, args.docs, args.batch, args.repeats) for shape in SHAPES}
    print(f"CPU ms per review outside the forward, one thread, {TOKENS} tokens, {WORDS} words")
    print(f"{'shape':<36}{'path':<8}" + "".join(f"{s:>16}" for s in STAGES) + f"{'total':>10}{'KB':>8}")
    for shape, found in results.items():
        label = f"{shape} {'+'.join(SHAPES[shape][1])}"
        for path in ("before", "after"):
            row = found[path]
            total = sum(row[s] for s in STAGES)
            print(
                f"{label:<36}{path:<8}"
                + "".join(f"{row[s]:>16.2f}" for s in STAGES)
                + f"{total:>10.2f}{row['kb']:>8.1f}"
            )
        totals = [sum(found[p][s] for s in STAGES) for p in ("before", "after")]
        print(f"{label:<36}{'ratio':<8}{totals[0] / totals[1]:>16.1f}x before/after, all stages")
    mini = results["MiniLM"]
    host = [sum(mini[p][s] for s in STAGES) for p in ("before", "after")]
    write = [1000 / mini[p]["encode + write"] for p in ("before", "after")]
    print(
        f"host: {host[0]:.2f} -> {host[1]:.2f} ms/review outside the forward ({host[0] / host[1]:.1f}x); "
        f"write {write[0]:.0f} -> {write[1]:.0f} reviews/s per core ({write[1] / write[0]:.1f}x); "
        f"store {mini['before']['kb']:.1f} -> {mini['after']['kb']:.1f} KB/review"
    )


if __name__ == "__main__":
    main()
