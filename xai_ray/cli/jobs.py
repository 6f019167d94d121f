"""The job commands of ``xai-ray``: ``nightly``, ``submit`` and ``schedule`` (parsers and commands).

Kept apart from ``cli`` so that the core commands stay short; ``cli`` adds these parsers and
commands. Imports of the heavy modules happen inside the commands.
"""

from __future__ import annotations

import argparse

from xai_ray.cli import flags as cli_flags
from xai_ray.config import ConfigError


def add_parsers(sub) -> None:
    night = sub.add_parser("nightly", help="score the corpus's new documents and publish tonight's report")
    night.add_argument(
        "config", nargs="?", help="YAML config (the keys of `xai-ray run`; required, here or as --config)"
    )
    night.add_argument(
        "--config", dest="config_flag", help="the same, as a flag (job entrypoints use it; one of the two is required)"
    )
    night.add_argument("--date", help="the night, YYYY-MM-DD (default: today, local time)")
    night.add_argument("--definition", help="report definition YAML (default: reports/default.yaml)")
    cli_flags.add_run_flags(night)  # the same flags as `run` (the run id and the report are the night's own)
    night.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="no progress bars or lines: warnings, errors and the result only (default: off)",
    )

    submit = sub.add_parser("submit", help="run a job on a Ray cluster through the Ray Jobs API")
    submit.add_argument("config", help="job YAML inside the working directory (shipped with it; required)")
    submit.add_argument(
        "--address",
        default="http://127.0.0.1:8265",
        help="Jobs API (dashboard) address (default: http://127.0.0.1:8265, through the SSH tunnel)",
    )
    submit.add_argument(
        "--kind",
        choices=["analyze", "finetune", "nightly"],
        help="default: nightly for a *nightly*.yaml, finetune for a config with `base`, else analyze",
    )
    submit.add_argument(
        "--submission-id",
        dest="submission_id",
        help="default: xai-ray-nightly-YYYY-MM-DD-<store digest> for nightly jobs, else one Ray makes up",
    )
    submit.add_argument("--date", help="nightly: the night, YYYY-MM-DD (default: today, local time)")
    submit.add_argument(
        "--working-dir",
        dest="working_dir",
        help="the folder shipped to the cluster (default: the repository holding jobs/)",
    )
    submit.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="submit and return at once (default: wait and stream the logs)",
    )
    submit.add_argument(
        "--set", action="append", metavar="KEY=VALUE", dest="sets", help="override any config key (default: none)"
    )

    sched = sub.add_parser("schedule", help="run the nightly job every night (crontab entry or systemd user timer)")
    sched.add_argument("config", help="nightly YAML config (required)")
    sched.add_argument("--at", default="02:00", help="HH:MM, local time (default 02:00)")
    sched.add_argument(
        "--submit-to",
        dest="submit_to",
        help="Jobs API address: submit to that cluster instead of running on this machine (default: none)",
    )
    sched.add_argument(
        "--systemd", action="store_true", help="a systemd user timer instead of a crontab entry (default: crontab)"
    )
    sched.add_argument(
        "--log", type=cli_flags.text, help="where the job's output goes (default: ~/.local/state/xai-ray/nightly.log)"
    )
    sched.add_argument(
        "--dry-run", dest="dry_run", action="store_true", help="print what would be installed (default: install it)"
    )
    sched.add_argument("--remove", action="store_true", help="remove this config's entry (default: install it)")
    sched.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        dest="sets",
        help="config overrides the scheduled job gets, e.g. store=s3://bucket/xai-ray (default: none)",
    )


def nightly_config(args):
    """The nightly job's config: its YAML, then the flags it shares with `run`, then --set."""
    from xai_ray import config

    path = args.config or args.config_flag
    if args.config and args.config_flag and args.config != args.config_flag:
        raise ConfigError("give the config once: as CONFIG or as --config")
    if not path:
        raise ConfigError("xai-ray nightly needs a config: xai-ray nightly jobs/nightly.yaml")
    return config.resolve(path, cli_flags.run_flags(args), args.sets)


def cmd_nightly(args) -> int:
    from xai_ray.ops.nightly import run_nightly

    cfg = nightly_config(args)
    result = run_nightly(cfg, args.date, args.definition)
    print(f"nightly {result.date}: {result.message}")
    print(f"report: {result.report} ({len(result.runs)} nightly run(s)); latest: {result.latest}")
    return cli_flags.exit_status(result.counts, cfg.max_error_share) if result.counts else 0


def cmd_submit(args) -> int:
    from xai_ray.ops.submit import submit

    return submit(
        args.config,
        address=args.address,
        kind=args.kind,
        submission_id=args.submission_id,
        sets=args.sets,
        date=args.date,
        working_dir=args.working_dir,
        wait=args.wait,
    )


def cmd_schedule(args) -> int:
    from xai_ray.ops.schedule import schedule

    print(
        schedule(
            args.config,
            at=args.at,
            submit_to=args.submit_to,
            systemd=args.systemd,
            log=args.log,
            dry_run=args.dry_run,
            remove=args.remove,
            sets=args.sets,
        )
    )
    return 0


COMMANDS = {"nightly": cmd_nightly, "submit": cmd_submit, "schedule": cmd_schedule}
