"""How faithful is each method on real reviews, and what does the evaluation cost per document?

Runs the real pipeline (Ray actors, ``--evaluate``) on N IMDB reviews with a given model, then
prints, from the store's faithfulness view and the report's summary: per method (attention
methods at every layer, input x gradient, the random floor) the mean and 95% t interval over
reviews of each headline metric, and the evaluation's seconds per document (actor seconds of the
gradient and evaluation stages from the manifest, and the run's wall time); then the report's
leaderboard (every method's best and last layer by comprehensiveness AOPC, 95% t intervals,
the paired gain over random, actor-seconds per review and that over the capture forward's).

Usage (Ray needs the loopback namespace here):
  bash scripts/loopback.sh .venv/bin/python bench/faithfulness.py --n 100 --max-length 128 \
      [--model models/minilm-imdb] [--methods raw,rollout,flow] [--ig-steps 20] [--out table.md]

Also prints each method's scoring cost per review relative to the capture forward (the actor
seconds of its own array math plus the backward pass it reads, which grad_rollout and
attn_x_grad share), and integrated gradients' completeness error over the reviews.

--model defaults to the packaged MiniLM; a fine-tuned folder (`xai-ray finetune --out DIR`) is
evaluated on its own held-out reviews (heldout_ids.txt).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import pandas as pd

from xai_ray import pipeline
from xai_ray.config import resolve
from xai_ray.query.connection import open_store, run_named
from xai_ray.query.intervals import RULE, faithfulness_summary
from xai_ray.report import leaderboard
from xai_ray.report.faithfulness import HEADLINE, order_methods

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"


def heldout_reviews(model: str, data: str, folder: Path) -> tuple[str, str]:
    """A fine-tuned model's held-out reviews (``heldout_ids.txt`` beside it), never seen in training,
    as a Parquet file; else the data as given."""
    ids_file = Path(model) / "heldout_ids.txt"
    if not ids_file.is_file():
        return data, "IMDB reviews"
    ids = set(ids_file.read_text().split())
    frame = pd.read_parquet(data)
    frame = frame[frame["id"].astype(str).isin(ids)]
    path = folder.parent / f"{folder.name}-heldout.parquet"
    frame.to_parquet(path)
    return str(path), f"held-out IMDB reviews (of {len(frame)} the model never trained on)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--model", default="minilm", help="minilm, a Hub id or a model folder")
    parser.add_argument("--data", default=str(IMDB))
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--methods", default="raw,rollout,flow")
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--cpus-per-actor", type=float, default=2)
    parser.add_argument("--ig-steps", type=int, default=20)
    parser.add_argument("--store", help="default: a temporary folder")
    parser.add_argument("--out", help="also write the table as Markdown here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    store = Path(args.store or tempfile.mkdtemp(prefix="faithfulness-"))
    data, source = heldout_reviews(args.model, args.data, store)
    cfg = resolve(
        None,
        {
            "data": data,
            "limit": args.n,
            "model": args.model,
            "max_length": args.max_length,
            "methods": args.methods,
            "actors": args.actors,
            "store": str(store),
            "report": False,
            "evaluate": True,
        },
        [f"cpus_per_actor={args.cpus_per_actor}", "batch_size=16", f"ig_steps={args.ig_steps}"],
    )
    started = time.perf_counter()
    result = pipeline.run(cfg)
    wall = time.perf_counter() - started
    con = open_store(store)
    values = run_named(con, "report_faithfulness", run_id=result.run_id)
    summary = faithfulness_summary(values)
    docs = int(values.doc_id.nunique())
    tokens = con.execute("select avg(n_tokens) from docs where run_id = $r", {"r": result.run_id}).fetchone()[0]
    actor = result.manifest["timings"]["actor_seconds"]
    per_doc = (actor.get("evaluate", 0) + actor.get("gradient", 0)) / max(docs, 1)
    scoring = sum(v for k, v in actor.items() if k not in ("evaluate", "gradient")) / max(docs, 1)
    lines = [
        f"model {args.model}, {docs} {source} (seeded sample), max_length {args.max_length}, "
        f"mean {tokens:.1f} tokens; {args.actors} actor x {args.cpus_per_actor:g} CPU",
        f"evaluation: {per_doc:.2f} actor-s per document (scoring itself {scoring:.3f} s); run wall "
        f"{wall:.0f} s; projected for 1,000 reviews on this hardware: {per_doc * 1000 / 60:.0f} actor-minutes",
        "",
        "| method | layer | " + " | ".join(HEADLINE) + " |",
        "|---|---|" + "---|" * len(HEADLINE),
    ]
    for method in order_methods(summary.method.unique().tolist(), cfg.methods):
        mine = summary[summary.method == method]
        for layer in sorted(mine.layer.dropna().unique()) or [None]:
            cells = (mine[mine.layer.isna()] if layer is None else mine[mine.layer == layer]).set_index("metric")
            row = [
                f"{cells.at[m, 'mean']:.3f} [{cells.at[m, 'lo']:.3f}, {cells.at[m, 'hi']:.3f}]"
                if m in cells.index
                else "n/a"
                for m in HEADLINE
            ]
            lines.append(f"| {method} | {'' if layer is None else int(layer)} | " + " | ".join(row) + " |")
    lines += ["", *leaderboard_lines(con, result.run_id, result.manifest)]
    lines += ["", *cost_lines(actor, cfg.methods, docs), *completeness_lines(con, result.run_id)]
    text = "\n".join(lines)
    print(text)
    print(
        json.dumps(
            {"docs": docs, "eval_s_per_doc": round(per_doc, 3), "wall_s": round(wall, 1), "actor_seconds": actor}
        )
    )
    if args.out:
        Path(args.out).write_text(text + "\n")


def cost_lines(actor: dict, methods, docs: int) -> list[str]:
    """Each method's actor seconds per review (its math plus the pass it reads) over the forward's."""
    from xai_ray.scoring.gradient_pass import pass_seconds_key

    forward = actor.get("forward", 0.0) / max(docs, 1)
    lines = [f"capture forward: {1000 * forward:.1f} ms per review", "", "| method | ms per review | x forward |"]
    lines.append("|---|---:|---:|")
    for method in methods:
        spent = (actor.get(method, 0.0) + actor.get(pass_seconds_key(method), 0.0)) / max(docs, 1)
        lines.append(f"| {method} | {1000 * spent:.1f} | {spent / max(forward, 1e-12):.2f} |")
    return lines


def completeness_lines(con, run_id: str) -> list[str]:
    """Integrated gradients' completeness error over the run's reviews (when it ran)."""
    found = con.execute(
        "select ig_completeness_error as error, abs(ig_delta) as delta from docs"
        " where run_id = $r and ig_completeness_error is not null",
        {"r": run_id},
    ).df()
    if found.empty:
        return []
    relative = found.error / found.delta.clip(lower=1e-12)
    return [
        "",
        f"integrated gradients completeness |sum - (f(x) - f(baseline))|, f = log p_target, over {len(found)} reviews: "
        f"median {found.error.median():.4f}, 95th percentile {found.error.quantile(0.95):.4f}, max {found.error.max():.4f}; "
        f"relative to |f(x) - f(baseline)|: median {relative.median():.2%}, 95th percentile {relative.quantile(0.95):.2%}",
    ]


def leaderboard_lines(con, run_id: str, manifest: dict) -> list[str]:
    """The report's leaderboard as a Markdown table."""
    board = run_named(con, "report_leaderboard", run_id=run_id, **leaderboard.PARAMS)
    n_docs = con.execute("select count(*) from docs where run_id = $r", {"r": run_id}).fetchone()[0]
    board = leaderboard.board_with_costs(leaderboard.with_intervals(board), manifest, n_docs)
    forward = board.attrs.get("forward_seconds")
    lines = [
        f"leaderboard: comprehensiveness AOPC, {RULE}; capture forward {forward or 0:.4f} s per review",
        "",
        "| rank | method | AOPC [95% CI] | minus random [95% CI] | s per review | x forward |",
        "|---:|---|---|---|---:|---:|",
    ]
    for r in board.itertuples():
        gain = "" if pd.isna(r.gain) else f"{r.gain:+.3f} [{r.gain_lo:+.3f}, {r.gain_hi:+.3f}]"
        cost = "" if pd.isna(r.seconds) else f"{r.seconds:.4f}"
        ratio = "" if pd.isna(r.x_forward) else f"{r.x_forward:.2f}"
        lines.append(f"| {r.rank} | {r.entry} | {r.mean:.3f} [{r.lo:.3f}, {r.hi:.3f}] | {gain} | {cost} | {ratio} |")
    return lines


if __name__ == "__main__":
    main()
