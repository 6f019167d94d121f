"""The commands that read a store or explain one review: ``sql``, ``topk``, ``report`` and ``explain``
(parsers, commands, and how rows are printed)."""

from __future__ import annotations

import json
import sys

from xai_ray.cli import flags
from xai_ray.cli.printing import TABLE_ROWS, print_rows
from xai_ray.config import ConfigError
from xai_ray.terminal import undecodable


def add_parsers(sub) -> None:
    sql = sub.add_parser("sql", help="run SQL over the store's views (read-only)")
    sql.add_argument(
        "query",
        help="SQL over runs, docs, tokens, words, errors, faithfulness, heads (several statements, each "
        "one reading: the last one's rows are printed)",
    )
    flags.add_store(sql)
    add_format(sql)
    add_limits(sql, output=True)

    top = sub.add_parser("topk", help="top-k words of a run by mean length-fair score, with 95%% intervals")
    flags.add_store(top)
    flags.add_run_id(top)
    top.add_argument(
        "--method",
        help="the method ranked (default: the one the run's leaderboard ranks best, else grad_rollout, "
        "attn_x_grad, integrated_gradients, norm_rollout, globenc, norm, rollout, raw, ... whichever the run has first)",
    )
    top.add_argument("--layer", type=flags.whole(1), help="1-based layer (default: the model's last layer)")
    top.add_argument(
        "--k", type=flags.whole(1, 100_000), default=20, help="words listed per group, 1 to 100000 (default: 20)"
    )
    top.add_argument(
        "--stat",
        choices=["lift", "share"],
        default="lift",
        help="lift: share x words in the review, 1 = even spread (default); share: the old mean share",
    )
    top.add_argument(
        "--min-docs",
        type=int,
        dest="min_docs",
        help="distinct documents a word needs (default: documents // 50, between 2 and 50)",
    )
    top.add_argument(
        "--min-count",
        type=int,
        default=1,
        dest="min_count",
        help="leave out words seen fewer times than this (default: 1)",
    )
    top.add_argument(
        "--exclude", default="", help="word classes to leave out: punct, stop, or punct,stop (default: none)"
    )
    top.add_argument(
        "--by",
        choices=["all", "label", "pred", "correct"],
        default="all",
        help="one ranking, or one per true class, predicted class or correctness (default: all)",
    )
    add_format(top)
    add_limits(top)

    rep = sub.add_parser("report", help="write a self-contained HTML report of a run")
    flags.add_store(rep)
    flags.add_run_id(rep)
    rep.add_argument("--out", required=True, type=flags.text, help="the HTML file to write (required)")
    rep.add_argument(
        "--k", type=flags.whole(1, 1000), help="words per top-k chart, 1 to 1000 (default: the definition's k, 20)"
    )
    rep.add_argument("--definition", help="report definition YAML (default: reports/default.yaml)")
    rep.add_argument(
        "--format",
        choices=["html", "png", "svg"],
        default="html",
        help="png/svg: also write every chart as an image file into --charts-dir (default: html)",
    )
    rep.add_argument(
        "--charts-dir", dest="charts_dir", help="where chart images go (default: <out without .html>-charts/)"
    )
    flags.add_quiet(rep)

    exp = sub.add_parser("explain", help="one review in depth: every layer's and head's attention, one HTML page")
    exp.add_argument(
        "text", nargs="?", help="the review to explain, or - to read it from stdin (or --store with --doc-id)"
    )
    exp.add_argument(
        "--model",
        help="Hub id, local model folder, or 'minilm' (required for a text; default with --doc-id: the run's)",
    )
    exp.add_argument("--store", type=flags.text, help="a store holding the review (with --doc-id; default: none)")
    exp.add_argument("--doc-id", dest="doc_id", help="the stored review's id (default: none)")
    exp.add_argument("--run", dest="run_id", help="the run it was scored in (default: the newest)")
    exp.add_argument("--out", required=True, type=flags.text, help="the HTML page to write (required)")
    exp.add_argument(
        "--max-length",
        type=flags.whole(3, 100_000),
        dest="max_length",
        help="tokens kept (default 256; --doc-id: the run's)",
    )
    from xai_ray.methods import REGISTRY

    exp.add_argument(
        "--methods",
        metavar="M[,M...]",
        help=f"comma-separated, from: {', '.join(sorted(REGISTRY))} (default raw,rollout,flow; --doc-id: the run's)",
    )
    exp.add_argument(
        "--allow-pickle",
        dest="allow_pickle",
        action="store_true",
        help="load pickled weights (pytorch_model.bin): they can run code (default: off)",
    )
    exp.add_argument(
        "--trust-remote-code",
        dest="trust_remote_code",
        action="store_true",
        help="run the model folder's own code, after you have read it (default: off)",
    )


def add_format(parser) -> None:
    parser.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help=f"table (default) shows the first {TABLE_ROWS} rows; csv and json stream every row",
    )


def add_limits(parser, output: bool = False) -> None:
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds before the query is stopped, 1 to 86400 (default 60)"
    )
    parser.add_argument(
        "--memory-limit",
        dest="memory_limit",
        default="2GB",
        help="DuckDB memory_limit, 16MB to this machine's memory; user SQL's process is capped near twice it "
        "(default 2GB)",
    )
    parser.add_argument("--threads", type=int, default=2, help="DuckDB threads, 1 to 64 (default 2)")
    if output:
        parser.add_argument(
            "--max-output",
            dest="max_output",
            default="1GB",
            help="the result's size in memory (Arrow bytes), at least 1MB; one row at most 64MiB (default 1GB)",
        )


def limits_of(args):
    from xai_ray.query.limits import Limits

    return Limits(
        memory_limit=args.memory_limit,
        threads=args.threads,
        timeout_s=args.timeout,
        max_output=getattr(args, "max_output", Limits.max_output),
    )


def cmd_sql(args) -> int:
    import contextlib

    from xai_ray.query import isolated
    from xai_ray.store.remote import local_store

    limits = limits_of(args)
    with contextlib.closing(isolated.stream(local_store(args.store), args.query, limits)) as batches:
        print_rows(batches, args.format)
    return 0


def cmd_topk(args) -> int:
    from xai_ray.query.connection import open_store
    from xai_ray.query.top_words import topk
    from xai_ray.query.user_sql import limited
    from xai_ray.store.remote import local_store

    limits = limits_of(args)
    con = open_store(local_store(args.store), limits=limits, run=args.run_id)  # another run's damage: no matter
    with limited(con, limits.timeout_s):
        method = args.method
        if method is None:  # the run's own leaderboard decides
            from xai_ray.query.connection import pick_run
            from xai_ray.report.leaderboard import lead_method

            run = pick_run(con, args.run_id)
            method, why = lead_method(con, run["run_id"], run["methods"].split(","), args.layer)
            if not args.quiet:  # a note, not a warning: -q keeps the result only
                print(f"xai-ray: method {method}: {why}", file=sys.stderr)
        frame = topk(
            con,
            args.run_id,
            method,
            args.layer,
            args.k,
            args.min_count,
            args.by,
            stat=args.stat,
            min_docs=args.min_docs,
            exclude=args.exclude,
        )
        leaning = _lean_lines(con, args, method) if args.by == "pred" else []
    import pyarrow as pa

    print_rows([pa.Table.from_pandas(frame, preserve_index=False)], args.format)
    for line in leaning:  # after the table; on stderr when the rows are csv or json, which stay parseable
        print(f"xai-ray: {line}", file=sys.stdout if args.format == "table" else sys.stderr)
    return 0


def _lean_lines(con, args, method: str) -> list[str]:
    """One sentence per predicted class whose top words lean, on average, to the other classes
    (``query.lean``), ranked exactly as the table just printed."""
    from xai_ray.query.connection import pick_run
    from xai_ray.query.lean import sentences, topk_lean

    run = pick_run(con, args.run_id)
    frame = topk_lean(
        con,
        run["run_id"],
        method,
        args.layer,
        args.k,
        args.min_count,
        stat=args.stat,
        min_docs=args.min_docs,
        exclude=args.exclude,
    )
    labels = json.loads(run["manifest"]).get("model", {}).get("labels", {})
    return sentences(frame, lambda cls: labels.get(str(cls), str(cls)))


def cmd_report(args) -> int:
    from pathlib import Path

    from xai_ray.report.page import build_report
    from xai_ray.store.remote import local_store

    if args.format == "html" and args.charts_dir:
        raise ConfigError("--charts-dir needs --format png or svg")
    charts_dir = None
    if args.format != "html":  # the charts as image files too, next to the report unless told where
        charts_dir = Path(args.charts_dir or Path(args.out).with_suffix("").as_posix() + "-charts")

    print(
        build_report(
            local_store(args.store),
            args.run_id,
            args.out,
            k=args.k,
            definition=args.definition,
            charts_dir=charts_dir,
            fmt=args.format,
        )
    )
    if charts_dir is not None:
        print(f"charts: {charts_dir}")
    return 0


def cmd_explain(args) -> int:
    from xai_ray.report import explain

    if (args.text is None) == (args.doc_id is None):
        raise ConfigError("explain takes a review text or --store with --doc-id, exactly one of them")
    if args.methods is not None and not [m for m in args.methods.split(",") if m.strip()]:
        # "" and ",,," fell back to the defaults without a word, where run refuses them
        raise ConfigError("--methods is empty: name at least one method, or leave --methods out for the defaults")
    if args.doc_id is not None:
        if not args.store:
            raise ConfigError("--doc-id needs --store, the store holding the review")
        if undecodable(args.doc_id):  # it was "a file of the store cannot be read"
            raise ConfigError(f"--doc-id is not valid UTF-8: {undecodable(args.doc_id)}")
        methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
        out = explain.explain_stored(
            args.store, args.doc_id, args.out, args.run_id, args.model, args.max_length, methods
        )
    else:
        if args.run_id is not None or args.store:  # they name where a stored review is: taken and dropped before
            flag = "--run" if args.run_id is not None else "--store"
            raise ConfigError(f"{flag} picks a stored review, with --doc-id; a text given here is explained alone")
        if not args.model:
            raise ConfigError("explain needs --model for a text given on the command line")
        methods = [m.strip() for m in (args.methods or ",".join(explain.DEFAULT_METHODS)).split(",") if m.strip()]
        from xai_ray.config import resolve

        # the run config's own checks: known methods, a sane max_length
        cfg = resolve(
            None,
            {
                "model": args.model,
                "methods": ",".join(methods),
                "max_length": args.max_length or explain.DEFAULT_MAX_LENGTH,
            },
        )
        safety = {"allow_pickle": args.allow_pickle, "trust_remote_code": args.trust_remote_code}
        text = sys.stdin.read() if args.text == "-" else args.text  # a long review: the argument list has a limit
        out = explain.explain_text(
            text, args.model, args.out, cfg.max_length, cfg.methods, {**explain.page_options(cfg), **safety}
        )
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


COMMANDS = {"sql": cmd_sql, "topk": cmd_topk, "report": cmd_report, "explain": cmd_explain}
