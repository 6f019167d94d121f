"""``xai-ray``: the entry point. Global flags here; each group of commands brings its own parsers
(``scoring``: run, evaluate, finetune; ``reading``: sql, topk, report, explain; ``jobs``: nightly,
submit, schedule).

Problems a user can fix (a wrong path, an offline Hub id, a bad option) end with one
sentence on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys

from xai_ray import __version__
from xai_ray.cli import flags, jobs, reading, scoring
from xai_ray.config import ConfigError
from xai_ray.terminal import VisibleFormatter, visible, visible_lines


def _user_errors() -> tuple[type[Exception], ...]:
    from xai_ray.data.corpus import CorpusError
    from xai_ray.model.loading import ModelError
    from xai_ray.query.connection import QueryError
    from xai_ray.runtime import ClusterError
    from xai_ray.store import StoreError
    from xai_ray.train.examples import FinetuneError

    return (ConfigError, CorpusError, ModelError, QueryError, StoreError, FinetuneError, ClusterError)


def _duckdb_error() -> type[Exception]:
    """DuckDB's errors: met outside user SQL (which runs in its own process and says so in its own
    words), they come from store files gone since the views were made, cut short, or damaged inside."""
    import duckdb

    return duckdb.Error


def first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def ray_failure(err: BaseException, command: str) -> str | None:
    """One sentence for Ray's own failure under ``command`` (its node, raylet or an actor gone:
    ``ActorDiedError``, ``NodeDiedError``, ``ObjectLostError``, ...), else None. A task's own error
    (``RayTaskError``) keeps its traceback: that is a fault of the task's code."""
    ray = sys.modules.get("ray")
    exceptions = getattr(ray, "exceptions", None)
    if exceptions is None or not isinstance(err, exceptions.RayError) or isinstance(err, exceptions.RayTaskError):
        return None
    return (
        f"xai-ray: Ray failed under the {command} command ({type(err).__name__}: {first_line(err)})"
        f"{stop_hint(command)}; -v shows where"
    )


def stop_hint(command: str) -> str:
    """What finishes ``command`` stopped part way: a run's ``--resume`` (naming the run once it has
    an id), a night's rerun; nothing for a command that keeps no parts."""
    if command == "run":
        from xai_ray.runtime import resume_hint

        return resume_hint()
    if command == "nightly":
        return " (the night's committed parts are kept: the same `xai-ray nightly` again finishes it)"
    return ""


def _interrupted(command: str) -> int:
    """Ctrl-C or SIGTERM, said in one line with what finishes the command (``stop_hint``)."""
    from xai_ray.runtime import was_terminated

    if was_terminated():
        print(f"xai-ray: terminated (SIGTERM){stop_hint(command)}", file=sys.stderr)
        return 143
    print(f"xai-ray: interrupted{stop_hint(command)}", file=sys.stderr)
    return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xai-ray", description="Corpus-scale attention explanations on Ray.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr (default: off)")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress bars or lines: warnings, errors and the result only (default: off)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    scoring.add_parsers(sub)
    reading.add_parsers(sub)
    jobs.add_parsers(sub)
    for command in sub.choices.values():  # `xai-ray topk -q` as `xai-ray -q topk`, for every command
        if "-q" not in command._option_string_actions:
            flags.add_quiet(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from xai_ray import progress

    progress.configure(quiet=args.quiet)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    ours = set(logging.getLogger().handlers)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    for handler in set(logging.getLogger().handlers) - ours:  # a host's own handlers (a notebook's) stay its
        handler.setFormatter(VisibleFormatter("%(asctime)s %(levelname)s %(message)s"))
    for handler in logging.getLogger().handlers:  # the terminal shows what the flags ask for ...
        handler.setLevel(level)
    logging.getLogger("xai_ray").setLevel(min(level, logging.INFO))  # ... a run's log file keeps INFO under -q
    from xai_ray.runtime import forget_run

    try:
        return COMMANDS[args.command](args)
    except _user_errors() as err:
        print(f"xai-ray: {visible_lines(str(err))}", file=sys.stderr)  # it may quote the data: a column's name
        return 2
    except _duckdb_error() as err:  # a store file cut short or damaged, met while DuckDB reads it
        if args.verbose:
            raise
        import duckdb

        unreadable = isinstance(err, (duckdb.IOException, duckdb.InvalidInputException))
        what = "a file of the store cannot be read" if unreadable else "DuckDB failed on the store (a damaged file?)"
        print(f"xai-ray: {what}: {visible(first_line(err))} (-v shows where)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: a run's committed parts are kept (`run --resume RUN_ID`)
        return _interrupted(args.command)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, like coreutils (128 + SIGPIPE), and point
        # stdout at /dev/null so the interpreter's last flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as err:
        if err.errno == errno.ENOSPC:  # a disk filled up mid-run: what was committed stays
            # the resume hint only where a run was writing (sql > /dev/full got it too)
            print(
                f"xai-ray: no space left on the device; free some and run the command again{stop_hint(args.command)}",
                file=sys.stderr,
            )
            return 2
        if err.filename is None:  # not about a path the user named: a real fault, keep its traceback
            raise
        # a path of the user's (--store, --out, --log, ...) the system refused: one sentence
        print(
            f"xai-ray: cannot use {str(err.filename)!r}: {visible((err.strerror or type(err).__name__).lower())}",
            file=sys.stderr,
        )
        return 2
    except Exception as err:  # the raylet or a node killed under a run: a sentence, not Ray's traceback
        if isinstance(err, RuntimeError) and str(err) == "Query interrupted":  # DuckDB's word for Ctrl-C
            return _interrupted(args.command)
        said = ray_failure(err, args.command)
        if said is None or args.verbose:
            raise
        print(visible_lines(said), file=sys.stderr)
        return 1
    finally:
        forget_run()  # said by now: a later call in this process (a notebook, a test) has its own


def console() -> int:
    """The installed ``xai-ray`` (and ``python -m xai_ray.cli``): ``main`` in a process that ends
    with its command, so a run lets Ray go while its summary and report are made
    (``runtime.one_run_per_process``). ``main`` itself, called in a notebook or a test, keeps Ray."""
    from xai_ray import runtime

    runtime.one_run_per_process()
    runtime.catch_sigterm()
    try:
        status = main()
    except BaseException:  # a traceback to print: Ray's shutdown first ends, as Ray's own at exit would meet it
        runtime.wait_for_release(runtime.RELEASE_WAIT_S)
        raise
    return runtime.end_of_command(status)


COMMANDS = {**scoring.COMMANDS, **reading.COMMANDS, **jobs.COMMANDS}
