"""Does the driver stay out of the data path?

    python bench/scale.py [--docs 2000] [--rss-docs 200000] [--skip-rss] [--skip-write]

(a) The write path alone, fed synthetic scorer output at the shape of bert-base x 3 methods
    (raw, rollout, flow) x 512 tokens, 12 layers x 12 heads (about 400 words a review, per-head
    statistics included), in one run:
      before: the driver-side path (``bench/legacy_writer.py``, a verbatim copy): the driver's
              RunWriter turns each batch into Python objects and writes Parquet;
      after:  the rows sit in Ray's object store, as the scoring actors leave them, and Ray workers
              write them as committed parts (``pipeline.write_parts``); the driver collects records and
              publishes. Measured with 1 writer and with as many as the machine has cores.
    Both stores are checked to hold the same documents and rows.
(b) The driver's peak RSS for a 200,000-review corpus (the IMDB train file repeated with fresh ids,
    written to a temporary Parquet file) against the 25,000-review file, through read + screen and
    the stream of rows to score, consumed by a stand-in for the scorer (it counts characters on the
    workers; the model's own memory lives in the actors, not the driver). Each corpus in its own
    process (a clean peak), each starting its own local Ray.

Ends with: ``scale: write path BEFORE -> AFTER docs/s (RATIOx); driver peak RSS 200k/25k = RSSx``.
Run inside a loopback-only network namespace (Ray): ``bash scripts/loopback.sh python bench/scale.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
IMDB = next(
    (p / "shared/data/imdb/train.parquet" for p in ROOT.parents if (p / "shared/data/imdb/train.parquet").is_file()),
    ROOT.parent / "shared/data/imdb/train.parquet",
)
from xai_ray.store.schemas import LAYOUT  # noqa: E402

METHODS = ["raw", "rollout", "flow"]
LAYERS, HEADS, TOKENS, WORDS = 12, 12, 512, 400


def synthetic_block(n_docs: int, seed: int) -> pa.Table:
    """Scorer rows (``scoring.rows.row_schema``) of ``n_docs`` 512-token reviews of a 12 x 12 model."""
    from xai_ray.methods.head_summary import N_STATS
    from xai_ray.scoring.rows import row_schema

    rng = np.random.default_rng(seed)
    vocab = np.array([f"tok{i}" for i in range(8000)], dtype=object)
    rows = []
    for d in range(n_docs):
        inner = np.sort(np.concatenate([np.arange(WORDS), rng.choice(WORDS, TOKENS - 2 - WORDS)]))
        index = np.concatenate([[-1], inner, [-1]]).astype(np.int32)
        words = [f"w{x}" for x in rng.integers(0, 5000, WORDS)]
        row = {
            "doc_id": f"doc-{seed}-{d}",
            "text": " ".join(words) * 2,
            "label": int(d % 2),
            "pred": int(rng.integers(0, 2)),
            "probs": [0.3, 0.7],
            "n_tokens": TOKENS,
            "n_layers": LAYERS,
            "truncated": True,
            "tokens": vocab[rng.integers(0, len(vocab), TOKENS)].tolist(),
            "word_index": index,
            "words": words,
            "word_span": np.arange(WORDS, dtype=np.int32),
            "word_joined": words,
            "model_fingerprint": "f" * 64,
            "seconds": {"forward": 0.01, "raw": 0.001, "rollout": 0.002, "flow": 0.05},
            "heads": rng.random(LAYERS * HEADS * N_STATS),
        }
        for method in METHODS:
            scores = rng.random((LAYERS, TOKENS), dtype=np.float32)
            raw, shares = words_of(scores, index)
            row[f"scores_{method}"] = scores.ravel()
            row[f"word_scores_{method}"] = shares.ravel()
            row[f"word_raw_{method}"] = raw.ravel()
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=row_schema(METHODS))


def words_of(scores: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(raw (L, W), shares (L, W)) as the scorer makes them from token scores (L, N): a word's raw
    score the float32 sum of its tokens' (``words.merge_batch``), its share that over the review's
    float32 total (every method, the CPU stage's flow among them: ``scoring.rows.score_columns``)."""
    raw = np.zeros((scores.shape[0], WORDS), dtype=np.float32)
    np.add.at(raw.T, index[index >= 0], scores[:, index >= 0].T)
    return raw, raw / raw.sum(axis=1, keepdims=True, dtype=np.float32)


def blocks_of(n_docs: int, block_docs: int = 50) -> list[pa.Table]:
    """``n_docs`` documents in blocks (a few distinct blocks, reused under fresh ids)."""
    distinct = [synthetic_block(block_docs, seed) for seed in range(4)]
    out = []
    for b in range(-(-n_docs // block_docs)):
        block = distinct[b % len(distinct)]
        ids = pa.array([f"doc-{b}-{d}" for d in range(block.num_rows)], pa.string())
        out.append(block.set_column(0, "doc_id", ids))
    return out


def write_before(blocks: list[pa.Table], store: Path) -> tuple[float, dict]:
    from legacy_writer import RunWriter

    from xai_ray.methods.head_summary import HeadTotals

    started = time.perf_counter()
    writer = RunWriter(store, "before", METHODS, totals=HeadTotals)
    for block in blocks:
        writer.write(block)
    writer.commit()
    writer.write_whole("heads", writer.totals.heads_table())
    writer.publish({"created_at": "bench"})
    return time.perf_counter() - started, dict(writer.counts)


def write_after(blocks: list[pa.Table], store: Path, writers: int) -> tuple[float, dict]:
    import ray

    from xai_ray.config import RunConfig
    from xai_ray.methods.head_summary import HeadTotals
    from xai_ray.pipeline.writing import write_parts
    from xai_ray.store.writer import RunWriter

    rows = ray.data.from_arrow(blocks).materialize()  # in the object store, as the actors leave them
    cfg = RunConfig(store=str(store), methods=tuple(METHODS), max_length=TOKENS)  # default parts: 500 reviews
    started = time.perf_counter()
    writer = RunWriter(store, "after", METHODS, totals=HeadTotals)
    for record in write_parts(rows, cfg, "after", writers=writers):
        writer.collect(record)
    writer.commit()
    writer.write_whole("heads", writer.totals.heads_table())
    writer.publish({"created_at": "bench"})
    return time.perf_counter() - started, dict(writer.counts)


def encode_only(blocks: list[pa.Table], layout: int) -> float:
    """Seconds to build the store tables of ``blocks`` and encode them as Parquet in memory, in this
    process on one core (the writer's options, no files, no fsync, no Ray), in parts of as many
    documents as the Ray writers' (``docs_per_part``): the floor under any write path that keeps
    store ``layout`` (1: the previous layout, a table per method x layer; 2: a column per method x
    layer), measured on the same rows."""
    import io

    from xai_ray.config import RunConfig
    from xai_ray.pipeline.writing import docs_per_part
    from xai_ray.store.files import write_parquet
    from xai_ray.store.parts import ROW_GROUP_ROWS
    from xai_ray.store.tables import parquet_options, part_tables

    rows = pa.concat_tables(blocks)
    size = docs_per_part(RunConfig(methods=tuple(METHODS), max_length=TOKENS))
    started = time.perf_counter()
    for first in range(0, rows.num_rows, size):
        for table in part_tables(rows.slice(first, size), METHODS, layout=layout).merged().values():
            write_parquet(table, io.BytesIO(), **{"row_group_size": ROW_GROUP_ROWS, **parquet_options(table)})
    return time.perf_counter() - started


def same_rows(store: Path) -> dict:
    from xai_ray.query.connection import open_store

    con = open_store(store)
    out = {}
    for run_id in ("before", "after-1", "after-n"):
        row = con.execute(
            "select (select count(distinct doc_id) from docs where run_id = $r), "
            "(select count(*) from tokens where run_id = $r), (select count(*) from words where run_id = $r), "
            "(select round(sum(score), 2) from words where run_id = $r)",
            {"r": run_id},
        ).fetchone()
        out[run_id] = row
    assert len(set(out.values())) == 1, out
    return out


def rss_child(data: str) -> None:
    """In its own process: read + screen ``data`` and stream its rows through a stand-in scorer."""
    import ray

    from xai_ray import pipeline
    from xai_ray.config import resolve
    from xai_ray.runtime import ensure_ray

    ensure_ray()
    cfg = resolve(None, {"data": data, "split": "train", "model": "minilm"}, ["driver_rows=0"])  # streamed, at any size
    started = time.perf_counter()
    screened = pipeline.screen(pipeline.read(cfg), classes=[0, 1])
    actors = max(1, int(ray.cluster_resources().get("CPU", 1)))  # what `xai-ray run` would start here
    rows = screened.todo(cfg.batch_size, pipeline.head_docs(screened.counts["kept"], cfg), blocks=16 * actors)

    def stand_in(batch: pa.Table) -> pa.Table:  # the scorer's place: only a count comes back
        return pa.table({"n": [batch.num_rows], "chars": [sum(len(t) for t in batch.column("text").to_pylist())]})

    counted = rows.map_batches(stand_in, batch_format="pyarrow", batch_size=None, num_cpus=1)
    n = chars = 0
    for batch in counted.iter_batches(batch_format="pyarrow", batch_size=None):
        n += sum(batch.column("n").to_pylist())
        chars += sum(batch.column("chars").to_pylist())
    peak_mb = peak_rss_mb()
    seconds = time.perf_counter() - started
    print(json.dumps({"docs": n, "chars": chars, "counts": screened.counts, "peak_mb": peak_mb, "seconds": seconds}))
    ray.shutdown()


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``: per address space, so not the parent's peak, which Linux
    carries across ``exec`` into ``getrusage``'s ``ru_maxrss``)."""
    status = Path("/proc/self/status").read_text()
    if "VmHWM:" not in status:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def repeated_corpus(path: Path, times: int) -> None:
    """The IMDB train file ``times`` over, each copy's ids made fresh, in row groups of 25,000."""
    table = pq.read_table(IMDB)
    with pq.ParquetWriter(path, table.schema) as out:
        for k in range(times):
            ids = pa.array([f"{i}-copy{k}" for i in table.column("id").to_pylist()], pa.string())
            out.write_table(table.set_column(table.schema.get_field_index("id"), "id", ids), row_group_size=25_000)


def measure_rss(data: Path) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--rss-child", str(data)], capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_writes(n_docs: int, cores: int) -> tuple[float, float]:
    """(a): documents per second before and after (with as many writers as cores)."""
    import ray

    from xai_ray.runtime import ensure_ray

    blocks = blocks_of(n_docs)
    n = sum(b.num_rows for b in blocks)
    with tempfile.TemporaryDirectory(prefix="xai-scale-") as tmp:
        store = Path(tmp) / "store"
        before_s, before_counts = write_before(blocks, store)
        floor_s = encode_only(blocks, 1)  # today's floor: layout 1
        encode_s = encode_only(blocks, LAYOUT)
        ensure_ray()
        write_after(blocks[:2], Path(tmp) / "warm", cores)  # untimed: the writers' processes import once
        after1_s, _ = write_after(blocks, store / "_one", 1)
        aftern_s, after_counts = write_after(blocks, store / "_many", cores)
        ray.shutdown()
        for name, sub in (("after-1", "_one"), ("after-n", "_many")):  # one store for the check below
            os.rename(store / sub / "runs" / "run_id=after", store / "runs" / f"run_id={name}")
        checked = same_rows(store)
    before, after_one, after = n / before_s, n / after1_s, n / aftern_s
    rows = before_counts["tokens"] + before_counts["words"]
    print(
        f"(a) write path, {n} documents of {TOKENS} tokens x {len(METHODS)} methods x {LAYERS} layers ({rows:,} rows):"
    )
    print(f"    before (driver RunWriter, to_pylist): {before:8.1f} docs/s  ({before_s:.1f} s)")
    print(f"    after, 1 Ray writer:                   {after_one:8.1f} docs/s  ({after1_s:.1f} s)")
    print(f"    after, {cores} Ray writers:                  {after:8.1f} docs/s  ({aftern_s:.1f} s)")
    print(f"    same documents and rows in both: {checked['before']}; counts {after_counts}")
    floor, floor_now = n / floor_s, n / encode_s
    print(
        f"    floor: building the tables and encoding them as Parquet in memory, one core, no Ray, parts as the"
        f" writers': layout 1 {floor:.1f} docs/s, layout {LAYOUT} {floor_now:.1f} docs/s ({floor_now / floor:.1f}x);"
        f" after, 1 Ray writer (files, fsync, records) / layout 1's floor: {after_one / floor:.1f}x"
    )
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000, help="documents written by each path (default 2000)")
    parser.add_argument("--rss-docs", type=int, default=200_000, help="the large corpus (default 200000)")
    parser.add_argument("--skip-rss", action="store_true", help="only (a)")
    parser.add_argument("--skip-write", action="store_true", help="only (b)")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if args.rss_child:
        return rss_child(args.rss_child)
    cores = os.cpu_count() or 1
    before = after = float("nan")
    if not args.skip_write:
        before, after = measure_writes(args.docs, cores)
    rss = float("nan")
    if not args.skip_rss:
        with tempfile.TemporaryDirectory(prefix="xai-scale-rss-") as tmp:
            big = Path(tmp) / "imdb-200k.parquet"
            repeated_corpus(big, max(1, args.rss_docs // 25_000))
            small_run, big_run = measure_rss(IMDB), measure_rss(big)
        rss = big_run["peak_mb"] / small_run["peak_mb"]
        for name, got in (("25k", small_run), (f"{big_run['docs'] // 1000}k", big_run)):
            print(
                f"(b) {name}: {got['docs']} documents streamed, driver peak RSS {got['peak_mb']:.0f} MB, "
                f"{got['seconds']:.0f} s; screening {got['counts']}"
            )
    print(
        f"scale: write path {before:.0f} -> {after:.0f} docs/s ({after / before:.1f}x); "
        f"driver peak RSS 200k/25k = {rss:.2f}x"
    )


if __name__ == "__main__":
    main()
