"""``xai-ray``: argument parsing -> config -> pipeline / query / report.

Problems a user can fix (a wrong path, an offline Hub id, a bad option) end with one
sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from xai_ray import cli_jobs
from xai_ray.config import ConfigError


def _user_errors() -> tuple[type[Exception], ...]:
    from xai_ray.corpus import CorpusError
    from xai_ray.finetune import FinetuneError
    from xai_ray.model import ModelError
    from xai_ray.query import QueryError
    from xai_ray.store import StoreError

    return (ConfigError, CorpusError, ModelError, QueryError, StoreError, FinetuneError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xai-ray", description="Corpus-scale attention explanations on Ray.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="score a corpus and publish a run into a store")
    run.add_argument("--config", help="YAML config (flags and --set override it)")
    run.add_argument("--data", help="Hub dataset id, Parquet/CSV/JSONL file, Parquet folder, aclImdb folder or .tar.gz")
    run.add_argument("--split")
    run.add_argument("--limit", type=int, help="a seeded random sample of N documents")
    run.add_argument("--model", help="Hub id, local model folder, or 'minilm' (packaged weights)")
    run.add_argument("--methods", help="comma-separated, e.g. raw,rollout")
    run.add_argument("--max-length", type=int, dest="max_length")
    run.add_argument("--batch-size", type=int, dest="batch_size")
    run.add_argument("--actors", type=int)
    run.add_argument("--gpus-per-actor", type=float, dest="gpus_per_actor")
    run.add_argument("--store")
    run.add_argument("--run-id", dest="run_id")
    run.add_argument("--resume", metavar="RUN_ID",
                     help="finish an interrupted run with the settings it was started with (execution flags may change)")
    run.add_argument("--no-report", dest="report", action="store_const", const=False)
    run.add_argument("--evaluate", action="store_const", const=True,
                     help="also measure faithfulness (comprehensiveness, sufficiency, rank correlation with "
                          "leave-one-out and input x gradient) of every method into the faithfulness table")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", dest="sets", help="override any config key")

    sql = sub.add_parser("sql", help="run SQL over the store's views (read-only)")
    sql.add_argument("query")
    sql.add_argument("--store", default="store")
    _format(sql)

    top = sub.add_parser("topk", help="top-k words of a run by mean score")
    top.add_argument("--store", default="store")
    top.add_argument("--run", dest="run_id")
    top.add_argument("--method", default="rollout")
    top.add_argument("--layer", type=int, help="default: the model's last layer")
    top.add_argument("--k", type=int, default=20)
    top.add_argument("--min-count", type=int, default=1, dest="min_count")
    top.add_argument("--by", choices=["all", "label", "pred", "correct"], default="all")
    _format(top)

    rep = sub.add_parser("report", help="write a self-contained HTML report of a run")
    rep.add_argument("--store", default="store")
    rep.add_argument("--run", dest="run_id")
    rep.add_argument("--out", required=True)
    rep.add_argument("--k", type=int, help="words per top-k chart (default: the definition's k, 20)")
    rep.add_argument("--definition", help="report definition YAML (default: reports/default.yaml)")
    rep.add_argument("--format", choices=["html", "png", "svg"], default="html",
                     help="png/svg: also write every chart as an image file into --charts-dir")
    rep.add_argument("--charts-dir", dest="charts_dir", help="default: <out without .html>-charts/")

    exp = sub.add_parser("explain", help="one review in depth: every layer's and head's attention, one HTML page")
    exp.add_argument("text", nargs="?", help="the review to explain (or --store with --doc-id)")
    exp.add_argument("--model", help="Hub id, local model folder, or 'minilm' (default with --doc-id: the run's)")
    exp.add_argument("--store", help="a store holding the review (with --doc-id)")
    exp.add_argument("--doc-id", dest="doc_id", help="the stored review's id")
    exp.add_argument("--run", dest="run_id", help="the run it was scored in (default: the newest)")
    exp.add_argument("--out", required=True, help="the HTML page to write")
    exp.add_argument("--max-length", type=int, dest="max_length", help="tokens kept (default 256; --doc-id: the run's)")
    exp.add_argument("--methods", help="comma-separated (default raw,rollout,flow; --doc-id: the run's)")

    ev = sub.add_parser("evaluate", help="add faithfulness metrics to a run published without --evaluate")
    ev.add_argument("--store", default="store")
    ev.add_argument("--run", dest="run_id", help="default: the newest run")
    ev.add_argument("--share", type=float, help="share of documents evaluated, picked by a hash of doc_id")
    ev.add_argument("--actors", type=int, help="default: the run's own setting")

    fine = sub.add_parser("finetune", help="fine-tune a classifier on Ray Train into a model folder")
    fine.add_argument("--config", help="YAML config (flags and --set override it)")
    fine.add_argument("--base", help="Hub id, local model folder, or 'minilm' (packaged weights)")
    fine.add_argument("--data", help="Hub dataset id, Parquet/CSV/JSONL file, Parquet folder, aclImdb folder or .tar.gz")
    fine.add_argument("--split")
    fine.add_argument("--limit", type=int, help="a seeded random sample of N documents (held-out slice included)")
    fine.add_argument("--eval-fraction", type=float, dest="eval_fraction", help="share of each class held out")
    fine.add_argument("--epochs", type=int)
    fine.add_argument("--max-length", type=int, dest="max_length")
    fine.add_argument("--batch-size", type=int, dest="batch_size", help="global batch, split across workers")
    fine.add_argument("--lr", type=float)
    fine.add_argument("--workers", type=int)
    fine.add_argument("--gpus-per-worker", type=float, dest="gpus_per_worker")
    fine.add_argument("--seed", type=int)
    fine.add_argument("--out", help="output model folder (checkpoints in OUT/_checkpoints until done)")
    fine.add_argument("--set", action="append", metavar="KEY=VALUE", dest="sets", help="override any config key")
    cli_jobs.add_parsers(sub)
    return parser


def _format(parser) -> None:
    parser.add_argument("--format", choices=["table", "csv", "json"], default="table")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        return COMMANDS[args.command](args)
    except _user_errors() as err:
        print(f"xai-ray: {err}", file=sys.stderr)
        return 2


def cmd_run(args) -> int:
    from xai_ray import config, pipeline, remote

    flags = {k: getattr(args, k) for k in ("data", "split", "limit", "model", "methods", "max_length",
                                           "batch_size", "actors", "gpus_per_actor", "store", "run_id", "report",
                                           "evaluate")}
    if args.resume:
        flags = {k: v for k, v in flags.items() if k not in ("store", "run_id")}
        cfg = pipeline.resume_config(args.store or "store", args.resume, flags, args.sets)
    else:
        cfg = config.resolve(args.config, flags, args.sets)
    result = remote.run(cfg) if remote.is_uri(cfg.store) else pipeline.run(cfg)
    counts = result.manifest["counts"]
    print(f"run {result.run_id}: {counts['docs']} documents scored, {counts['errors']} errors, "
          f"{result.manifest['timings']['docs_per_s']} docs/s -> {result.run_dir}")
    if result.report:
        print(f"report: {result.report}")
    return 0


def cmd_sql(args) -> int:
    from xai_ray.query import open_store, run_sql
    from xai_ray.remote import local_store

    _print(run_sql(open_store(local_store(args.store)), args.query), args.format)
    return 0


def cmd_topk(args) -> int:
    from xai_ray.query import open_store, topk
    from xai_ray.remote import local_store

    frame = topk(open_store(local_store(args.store)), args.run_id, args.method, args.layer, args.k, args.min_count, args.by)
    _print(frame, args.format)
    return 0


def cmd_report(args) -> int:
    from pathlib import Path

    from xai_ray.report import build_report

    if args.format == "html" and args.charts_dir:
        raise ConfigError("--charts-dir needs --format png or svg")
    charts_dir = None
    if args.format != "html":  # the charts as image files too, next to the report unless told where
        charts_dir = Path(args.charts_dir or Path(args.out).with_suffix("").as_posix() + "-charts")
    from xai_ray.remote import local_store

    print(build_report(local_store(args.store), args.run_id, args.out, k=args.k, definition=args.definition,
                       charts_dir=charts_dir, fmt=args.format))
    if charts_dir is not None:
        print(f"charts: {charts_dir}")
    return 0


def cmd_evaluate(args) -> int:
    from xai_ray.audit import evaluate_run

    if args.share is not None and not 0.0 < args.share <= 1.0:
        raise ConfigError(f"--share must be in (0, 1], got {args.share}")
    manifest = evaluate_run(args.store, args.run_id, args.share, args.actors)
    counts = manifest["counts"]
    print(f"run {manifest['run_id']}: {counts['faithfulness']} faithfulness rows, {counts['evaluate_errors']} "
          f"evaluation errors, {manifest['timings']['evaluate_s']} s")
    return 0


def cmd_finetune(args) -> int:
    from xai_ray import finetune

    flags = {k: getattr(args, k) for k in ("base", "data", "split", "limit", "eval_fraction", "epochs", "max_length",
                                           "batch_size", "lr", "workers", "gpus_per_worker", "seed", "out")}
    cfg = finetune.resolve(args.config, flags, args.sets)
    result = finetune.run_finetune(cfg)
    metrics = result.metrics
    print(f"fine-tuned {cfg.base} on {metrics['data']['train_docs']} documents: held-out accuracy "
          f"{metrics['heldout_accuracy']:.4f} on {metrics['data']['heldout_docs']} (majority "
          f"{metrics['majority_baseline']:.4f}), {metrics['timings']['total_s'] / 60:.1f} min -> {result.out}")
    return 0


def cmd_explain(args) -> int:
    from xai_ray import explain

    if (args.text is None) == (args.doc_id is None):
        raise ConfigError("explain takes a review text or --store with --doc-id, exactly one of them")
    if args.doc_id is not None:
        if not args.store:
            raise ConfigError("--doc-id needs --store, the store holding the review")
        methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
        out = explain.explain_stored(args.store, args.doc_id, args.out, args.run_id, args.model, args.max_length,
                                     methods)
    else:
        if not args.model:
            raise ConfigError("explain needs --model for a text given on the command line")
        methods = [m.strip() for m in (args.methods or ",".join(explain.DEFAULT_METHODS)).split(",") if m.strip()]
        from xai_ray.config import resolve

        # the run config's own checks: known methods, a sane max_length
        cfg = resolve(None, {"model": args.model, "methods": ",".join(methods),
                             "max_length": args.max_length or explain.DEFAULT_MAX_LENGTH})
        out = explain.explain_text(args.text, args.model, args.out, cfg.max_length, cfg.methods,
                                   cfg.attention_options)
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


def _print(frame, fmt: str) -> None:
    if fmt == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif fmt == "json":
        print(json.dumps(json.loads(frame.to_json(orient="records")), indent=1))
    else:
        import pandas as pd

        with pd.option_context("display.max_rows", 500, "display.max_columns", 50, "display.width", 160):
            print(frame.to_string(index=False) if not frame.empty else "(no rows)")


COMMANDS = {"run": cmd_run, "sql": cmd_sql, "topk": cmd_topk, "report": cmd_report, "finetune": cmd_finetune,
            "evaluate": cmd_evaluate, "explain": cmd_explain}
COMMANDS.update(cli_jobs.COMMANDS)  # nightly, submit, schedule

if __name__ == "__main__":
    sys.exit(main())
