"""The commands that score on Ray: ``run``, ``evaluate`` and ``finetune`` (parsers and commands)."""

from __future__ import annotations

from xai_ray.cli import flags
from xai_ray.config import ConfigError


def add_parsers(sub) -> None:
    run = sub.add_parser(
        "run",
        help="score a corpus and publish a run into a store",
        description="Score a corpus on Ray actors and publish one run into a store. Precedence: "
        "defaults < --config YAML < flags < --set; `xai-ray run --help-config` lists "
        "every key.",
    )
    run.add_argument("--config", help="YAML config of run keys (flags and --set override it; default: none)")
    flags.add_run_flags(run)
    run.add_argument("--run-id", dest="run_id", help="the run's id (default: UTC timestamp + random suffix)")
    run.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="finish an interrupted run with the settings it was started with; execution flags may change "
        "(default: start a new run)",
    )
    run.add_argument(
        "--no-report",
        dest="report",
        action="store_const",
        const=False,
        help="do not write report.html into the run folder (default: write it)",
    )

    ev = sub.add_parser("evaluate", help="add faithfulness metrics to a run published without --evaluate")
    flags.add_store(ev)
    flags.add_run_id(ev)
    ev.add_argument("--share", type=float, help="share of documents evaluated, picked by a hash of doc_id (default: 1)")
    ev.add_argument("--actors", type=int, help="scoring actors (default: the run's own setting)")
    flags.add_quiet(ev)

    fine = sub.add_parser("finetune", help="fine-tune a classifier on Ray Train into a model folder")
    fine.add_argument("--config", help="YAML config (flags and --set override it; default: none)")
    fine.add_argument("--base", help="Hub id, local model folder, or 'minilm' (packaged weights) (default: minilm)")
    fine.add_argument(
        "--data",
        help="Hub dataset id, Parquet/CSV/JSONL file, Parquet folder, aclImdb folder or .tar.gz "
        "(default: stanfordnlp/imdb)",
    )
    fine.add_argument("--split", help="split of a Hub dataset or aclImdb folder (default: train)")
    fine.add_argument(
        "--limit", type=int, help="a seeded random sample of N documents, held-out slice included (default: all)"
    )
    fine.add_argument(
        "--eval-fraction", type=float, dest="eval_fraction", help="share of each class held out (default: 0.1)"
    )
    fine.add_argument("--epochs", type=int, help="passes over the training rows (default: 1)")
    fine.add_argument(
        "--max-length",
        type=int,
        dest="max_length",
        help="tokens per review; longer ones keep their first quarter and their end (default: 256)",
    )
    fine.add_argument(
        "--batch-size", type=int, dest="batch_size", help="global batch, split across workers (default: 16)"
    )
    fine.add_argument("--lr", type=float, help="peak AdamW learning rate (default: 1e-4)")
    fine.add_argument("--workers", type=int, help="Ray Train workers; 0 = one per GPU, else by CPUs (default: 0)")
    fine.add_argument(
        "--gpus-per-worker",
        type=float,
        dest="gpus_per_worker",
        help="GPUs per worker (default: 1 when the cluster has GPUs, else 0)",
    )
    fine.add_argument("--seed", type=int, help="seed of the sample, split, head and batches (default: 0)")
    fine.add_argument("--out", help="output model folder (required; checkpoints in OUT/_checkpoints until done)")
    fine.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        dest="sets",
        help="override any finetune config key (default: none)",
    )
    flags.add_quiet(fine)
    flags.add_quiet(run)


def cmd_run(args) -> int:
    from xai_ray import config, pipeline

    given = {**flags.run_flags(args), "run_id": args.run_id, "report": args.report}
    if args.resume is not None:  # "" too: an empty id names no run (it started a new one with the defaults)
        if args.config is not None or args.run_id not in (None, args.resume):  # each was dropped without a word
            raise ConfigError(
                "--resume finishes a run with the settings it was started with (its staging keeps them); "
                "--config and another --run-id cannot be given with it"
            )
        given = {k: v for k, v in given.items() if k not in ("store", "run_id")}
        finished = _finish_published(args.store or "store", args.resume)
        if finished is not None:  # published, but its aggregates or report were never written
            return finished
        cfg = pipeline.resume_config(args.store or "store", args.resume, given, args.sets)
    else:
        cfg = config.resolve(args.config, given, args.sets)
    result = pipeline.run(cfg)  # the one path, for a folder or a store URI (api.run too)
    counts = result.manifest["counts"]
    rationales = (  # the rationales that could not be read: in the errors view, stage plausibility
        f", {counts['plausibility_errors']} rationale errors" if counts.get("plausibility_errors") else ""
    )
    print(
        f"run {result.run_id}: {counts['docs']} documents scored, {counts['errors']} errors{rationales}, "
        f"{result.manifest['timings']['docs_per_s']} docs/s -> {result.run_dir}"
    )
    if result.report:
        print(f"report: {result.report}")
    return flags.exit_status(counts, cfg.max_error_share)


def _finish_published(store: str, run_id: str) -> int | None:
    """A published run's missing aggregates and report, written (``pipeline.finish_published``);
    None where that is not what ``--resume`` asks for (an unfinished run, or a run lacking nothing)."""
    import os

    from xai_ray import pipeline
    from xai_ray.store import remote

    if not run_id.strip() or remote.is_uri(store):
        return None
    finished = pipeline.finish_published(os.path.expanduser(store), run_id)
    if finished is None:
        return None
    counts = finished["manifest"]["counts"]
    print(
        f"run {run_id}: already published with {counts['docs']} documents and {counts['errors']} errors; "
        f"its {' and '.join(finished['written'])} written now"
    )
    if finished["report"]:
        print(f"report: {finished['report']}")
    return 0


def cmd_evaluate(args) -> int:
    from xai_ray.ops.evaluate import evaluate_run

    if args.share is not None and not 0.0 < args.share <= 1.0:
        raise ConfigError(f"--share must be in (0, 1], got {args.share}")
    manifest = evaluate_run(args.store, args.run_id, args.share, args.actors)
    counts = manifest["counts"]
    print(
        f"run {manifest['run_id']}: {counts['faithfulness']} faithfulness rows, {counts['evaluate_errors']} "
        f"evaluation errors, {manifest['timings']['evaluate_s']} s"
    )
    return 0


def cmd_finetune(args) -> int:
    from xai_ray.train import finetune, settings

    given = {
        k: getattr(args, k)
        for k in (
            "base",
            "data",
            "split",
            "limit",
            "eval_fraction",
            "epochs",
            "max_length",
            "batch_size",
            "lr",
            "workers",
            "gpus_per_worker",
            "seed",
            "out",
        )
    }
    cfg = settings.resolve(args.config, given, args.sets)
    result = finetune.run_finetune(cfg)
    metrics = result.metrics
    print(
        f"fine-tuned {cfg.base} on {metrics['data']['train_docs']} documents: held-out accuracy "
        f"{metrics['heldout_accuracy']:.4f} on {metrics['data']['heldout_docs']} (majority "
        f"{metrics['majority_baseline']:.4f}), {metrics['timings']['total_s'] / 60:.1f} min -> {result.out}"
    )
    return 0


COMMANDS = {"run": cmd_run, "evaluate": cmd_evaluate, "finetune": cmd_finetune}
