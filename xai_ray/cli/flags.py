"""The flags ``xai-ray run`` and ``xai-ray nightly`` share, with help text and the config's defaults,
and the exit-status rule for runs (cron and CI read it).

Defaults shown in ``--help`` are read from ``RunConfig`` itself, so they cannot drift from it; the
flags default to None so that a YAML config given with ``--config`` still applies beneath them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from xai_ray.config import RunConfig, error_verdict
from xai_ray.config_help import help_config

# Exit statuses: 2 = the job could not run as asked (one sentence on stderr); 3 = it ran, but too
# many documents failed (every one, or more than max_error_share of them).
EXIT_USAGE = 2
EXIT_ERRORS = 3

# flag -> config key, for the flags that set one key each
RUN_FLAGS = (
    "data",
    "split",
    "limit",
    "model",
    "methods",
    "max_length",
    "batch_size",
    "actors",
    "gpus_per_actor",
    "store",
    "evaluate",
    "max_error_share",
)


def default(key: str) -> str:
    """A config key's default as help text shows it."""
    value = {f.name: f.default for f in fields(RunConfig)}[key]
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return "none" if value is None else str(value)


class HelpConfig(argparse.Action):
    """``--help-config``: print every config key with its default and meaning, then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(help_config())
        parser.exit()


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The scoring flags of ``run`` (and ``nightly``): each sets the config key of the same name."""
    from xai_ray.methods import REGISTRY

    d = default
    parser.add_argument(
        "--help-config",
        action=HelpConfig,
        help="list every config key (for --config YAML and --set) with its default and meaning",
    )
    parser.add_argument(
        "--data",
        help="Hub dataset id, Parquet/CSV/JSONL file, Parquet folder, aclImdb folder or "
        f".tar.gz (default: {d('data')})",
    )
    parser.add_argument("--split", help=f"split of a Hub dataset or aclImdb folder (default: {d('split')})")
    parser.add_argument("--limit", type=int, help="score a seeded random sample of N documents (default: all)")
    parser.add_argument(
        "--model", help=f"Hub id, local model folder, or 'minilm' (packaged weights) (default: {d('model')})"
    )
    parser.add_argument(
        "--methods",
        metavar="M[,M...]",
        help=f"comma-separated, from: {', '.join(sorted(REGISTRY))} (default: {d('methods')})",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        dest="max_length",
        help=f"tokens the model sees at once, [CLS]/[SEP] included; longer reviews follow the "
        f"long_text key (default: {d('max_length')})",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        dest="batch_size",
        help=f"documents handed to a scoring actor at once (default: {d('batch_size')})",
    )
    parser.add_argument(
        "--actors",
        type=int,
        help="scoring actors; 0 = as many as the GPU shares (--gpus-per-actor), else one per cpus_per_actor CPUs (default: 0)",
    )
    parser.add_argument(
        "--gpus-per-actor",
        type=float,
        dest="gpus_per_actor",
        help="GPUs per actor (default: with GPUs, 1/4 where a GPU has 16+ CPUs beside it, 1/2 with 8+, else 1; 0 without)",
    )
    parser.add_argument("--store", help=f"store folder or s3:// / gs:// URI (default: {d('store')})")
    parser.add_argument(
        "--evaluate",
        action="store_const",
        const=True,
        help="also measure faithfulness (comprehensiveness, sufficiency, rank correlation with "
        "leave-one-out and input x gradient) of every method (default: off)",
    )
    parser.add_argument(
        "--max-error-share",
        type=float,
        dest="max_error_share",
        metavar="SHARE",
        help=f"exit with status {EXIT_ERRORS} when more than this share of documents failed "
        f"(default: only when every document failed)",
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        dest="sets",
        default=None,
        help="override any config key; --help-config lists them (default: none)",
    )


def run_flags(args) -> dict:
    return {k: getattr(args, k, None) for k in RUN_FLAGS}


def exit_status(counts: dict, max_error_share: float | None) -> int:
    verdict = error_verdict(counts, max_error_share)
    if verdict is None:
        return 0
    print(f"xai-ray: {verdict}", file=sys.stderr)
    return EXIT_ERRORS


def whole(lo: int, hi: int | None = None):
    """An argparse ``type``: a whole number in [lo, hi]; anything else is one sentence and exit 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            span = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {value}")
        return value

    return parse


def text(value: str) -> str:
    """An argparse ``type``: text that is not empty (``--store ''`` would mean the current folder)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def add_store(parser) -> None:
    parser.add_argument(
        "--store", type=text, default="store", help="store folder or s3:// / gs:// URI (default: store)"
    )


def add_run_id(parser) -> None:
    parser.add_argument("--run", dest="run_id", help="run id (default: the newest run)")


def add_quiet(parser) -> None:
    """``--quiet`` after the command too (``xai-ray run --quiet``), not only before it."""
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="no progress bars or lines: warnings, errors and the result only (default: off)",
    )
