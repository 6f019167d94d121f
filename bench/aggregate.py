"""What does a run's aggregate stage cost, before and after it summed layout 3 in one scan?

On a published run of a store, in turn, each variant in its own process (`--repeats R` times,
median):
  (old) the stage as it was: the report's planned aggregates first, its top words of every slice
        scanned from every word (`report_topk_all.sql`), then the word totals a slice at a time
        over the words view (`word_totals.sql`), kept as code here;
  (new) `xai_ray.pipeline.aggregate`'s two steps as they are: the word totals several slices a scan
        (`word_totals_wide.sql`), then the planned aggregates with the top words from those totals.
Each also prints its steps' seconds and peak RSS, and the two variants' word totals are compared.

    python bench/aggregate.py STORE RUN_ID [--repeats 3]
    python bench/aggregate.py --build DATA N STORE   # first: a run of N reviews of DATA, scored by a
        # 6-layer, 12-head model with MiniLM's tokenizer and random weights, hidden 48 (its words
        # and slices are MiniLM's, its forward cheap); needs `bash scripts/loopback.sh` (Ray)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def old_stage(store: str, run_id: str) -> dict:
    from xai_ray.query.connection import WORD_TOTALS, open_store, run_named
    from xai_ray.query.word_totals import TOTALS_OPTIONS, TOTALS_ROW_GROUP, word_totals
    from xai_ray.report.aggregates import planned
    from xai_ray.report.context import context, kept_tag
    from xai_ray.report.definition import load_definition
    from xai_ray.store import schemas
    from xai_ray.store.aggregates import write_aggregate

    seconds, start = {}, time.perf_counter()
    ctx = context(store, run_id, load_definition(None), None)
    for name, params in planned(ctx):  # every query over the words view, as before
        frame = run_named(ctx.con, name, run_id=run_id, **params)
        write_aggregate(store, run_id, name, kept_tag(name, params), frame)
    seconds["aggregates"] = time.perf_counter() - start
    start = time.perf_counter()
    frame = word_totals(open_store(store, run=run_id), store, run_id, wide=False)
    frame = frame.sort_values(["method", "layer", "word", "pred"], ignore_index=True)
    write_aggregate(
        store,
        run_id,
        WORD_TOTALS,
        {"query": WORD_TOTALS},
        frame,
        row_group_size=TOTALS_ROW_GROUP,
        schema=schemas.WORD_TOTALS,
        **TOTALS_OPTIONS,
    )
    seconds["word_totals"] = time.perf_counter() - start
    return seconds


def new_stage(store: str, run_id: str) -> dict:
    from xai_ray.query.word_totals import keep_word_totals
    from xai_ray.report.aggregates import keep_aggregates

    seconds, start = {}, time.perf_counter()
    keep_word_totals(store, run_id)
    seconds["word_totals"] = time.perf_counter() - start
    start = time.perf_counter()
    keep_aggregates(store, run_id)
    seconds["aggregates"] = time.perf_counter() - start
    return seconds


def child(variant: str, store: str, run_id: str) -> None:
    import pyarrow.parquet as pq

    from xai_ray.store.layout import aggregate_file

    start = time.perf_counter()
    steps = (old_stage if variant == "old" else new_stage)(store, run_id)
    seconds = time.perf_counter() - start
    totals = pq.read_table(aggregate_file(Path(store), run_id, "word_totals")).to_pandas()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "steps": steps,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "rows": len(totals),
                "checksum": [float(totals[c].sum()) for c in ("total_lift", "total_share", "occurrences", "documents")],
            }
        )
    )


def build(data: str, n: int, store: str) -> None:
    """A run ``bench`` of ``n`` reviews scored by a tiny random model with MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from xai_ray.model.loading import resolve_model_path

    source = resolve_model_path("minilm")
    with tempfile.TemporaryDirectory() as folder:
        config = BertConfig.from_pretrained(source)
        config.update({"hidden_size": 48, "intermediate_size": 96, "num_labels": 2})
        torch.manual_seed(0)
        BertForSequenceClassification(config).save_pretrained(folder)
        AutoTokenizer.from_pretrained(source).save_pretrained(folder)
        command = [sys.executable, "-m", "xai_ray.cli", "run", "--data", data, "--limit", str(n)]
        command += ["--model", folder, "--store", store, "--run-id", "bench", "--no-report"]
        subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", nargs="?")
    parser.add_argument("run_id", nargs="?")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--build", nargs=3, metavar=("DATA", "N", "STORE"))
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(args.build[0], int(args.build[1]), args.build[2])
        return
    if args.variant:
        child(args.variant, args.store, args.run_id)
        return
    runs = {"old": [], "new": []}
    for _ in range(args.repeats):
        for variant in runs:  # in turn, so a noisy minute hits both
            command = [sys.executable, __file__, args.store, args.run_id, "--variant", variant]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"aggregate stage of run {args.run_id!r} ({runs['new'][0]['rows']:,} word-total rows), {args.repeats} in turn:"
    )
    print(f"{'variant':8} {'seconds':>8} {'word totals':>12} {'aggregates':>11} {'peak MB':>8}")
    median = {}
    for variant, results in runs.items():
        median[variant] = statistics.median(r["seconds"] for r in results)
        steps = {k: statistics.median(r["steps"][k] for r in results) for k in ("word_totals", "aggregates")}
        peak = max(r["peak_rss_mb"] for r in results)
        print(
            f"{variant:8} {median[variant]:8.2f} {steps['word_totals']:12.2f} {steps['aggregates']:11.2f} {peak:8.0f}"
        )
    same = all(
        abs(a - b) <= 1e-9 * max(1.0, abs(a)) for a, b in zip(runs["old"][0]["checksum"], runs["new"][0]["checksum"])
    )
    print(
        f"new/old {median['new'] / median['old']:.2f} ({median['old'] / median['new']:.2f}x faster); word totals alike: {same}"
    )


if __name__ == "__main__":
    main()
