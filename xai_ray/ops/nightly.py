"""``xai-ray nightly``: score what is new in a corpus once a night and publish a dated report.

A document counts as scored when a nightly run of the same scoring key (model fingerprint,
methods, attention options, max_length) holds its id with the sha256 of the same cleaned text.
Each night the job

1. takes a lock on ``STORE/.nightly.lock`` (a second run at once stops with a clear message);
2. reads the corpus and keeps the documents that are new or whose text changed;
3. scores them into one run, ``nightly-YYYY-MM-DD``, published in one rename (a run killed
   half-way leaves only staging, so the next run scores those documents again); a night that
   already has its run scores nothing;
4. rebuilds the report over every nightly document of this key, each in its latest version
   (``query.open_union``), into ``STORE/reports/YYYY-MM-DD/report.html`` with a "since last
   night" section (and ``nightly.json``: the config, key, runs and versions behind it), and
   points ``STORE/reports/latest`` at it.

Documents that failed (the ``errors`` table) are tried again the next night. A store URI
(``s3://...``) works through its local mirror (``xai_ray.store.remote``).

Over 300 lines: the nightly job reads top to bottom as the numbered steps above.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import date as Date
from datetime import datetime, timedelta, timezone
from pathlib import Path

from xai_ray import pipeline, runtime
from xai_ray.config import ConfigError, RunConfig, absolute_paths, check_start_layer
from xai_ray.methods import methods_need
from xai_ray.model.loading import describe_model
from xai_ray.model.structure import check_structure
from xai_ray.ops.night_key import manifest_key, scoring_key
from xai_ray.progress import native_stderr_into, route_noise
from xai_ray.store import StoreError, remote
from xai_ray.store import layout as store_layout
from xai_ray.store.files import write_atomically
from xai_ray.store.staging import read_committed_ids

log = logging.getLogger("xai_ray")
PREFIX = store_layout.NIGHTLY_PREFIX
REPORT = store_layout.REPORT


class NightlyError(StoreError):
    """The nightly job cannot go on; the message says why."""


@dataclass
class NightlyResult:
    date: str
    run_id: str
    scored: int  # documents scored tonight (0: nothing new, or the night was already scored)
    runs: list[str]  # the nightly runs the report covers, oldest first
    report: Path
    latest: Path
    message: str
    counts: dict | None = None  # the night's run's docs / errors (scored tonight or before), when it has one


def parse_date(text: str | None) -> str:
    if text is None:
        return Date.today().isoformat()  # the machine's night, as cron sees it
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):  # fromisoformat also takes 20260305 and 2026-W10-1
            raise ValueError(text)
        night = Date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--date must be YYYY-MM-DD, got {text!r}") from None
    # A night to come would hold tomorrow's documents as known, so the nights before it would leave
    # them out, and `latest` would stay on it; tomorrow is allowed: a submitter east of its cluster
    if night > Date.today() + timedelta(days=1):
        raise ConfigError(f"--date {text} is a night still to come (today is {Date.today().isoformat()})")
    return night.isoformat()


def check_nightly(cfg: RunConfig) -> None:
    """Refuse what a night cannot do: ``limit``, a seeded sample, would be the same documents every
    night and the rest of the corpus never scored."""
    if cfg.limit is not None:
        raise NightlyError(
            f"limit {cfg.limit} would score the same {cfg.limit} documents of {cfg.data!r} every night and never "
            "the others; a night scores every new or changed document: leave limit out (--set limit=null)"
        )


def run_nightly(cfg: RunConfig, date: str | None = None, definition=None) -> NightlyResult:
    """One night: score the new documents of ``cfg.data`` into ``cfg.store`` and rebuild the report."""
    date = parse_date(date)
    check_nightly(cfg)
    cfg = absolute_paths(cfg)  # the workers read them in Ray's folder, not this process's
    local = Path(remote.local_store(cfg.store))
    local.mkdir(parents=True, exist_ok=True)
    run_id = PREFIX + date
    # the libraries' chatter (weight loading, Ray's executor lines) into the night's log, as `run` does
    with nightly_lock(local), native_stderr_into(route_noise(store_layout.run_log(local, run_id))):
        _refuse_unlisted_nights(local)
        model = describe_model(cfg.model, cfg.allow_pickle, cfg.trust_remote_code)
        check_start_layer(cfg.start_layer, model["n_layers"])
        check_structure(cfg.model, methods_need(cfg.methods), cfg.allow_pickle, cfg.trust_remote_code)
        key = scoring_key(cfg)
        runs = matching_runs(local, key, date)
        foreign = other_runs(local, key)
        if foreign:  # the union, the changes since last night and `latest` would mix two configurations
            raise NightlyError(
                f"store {cfg.store!r} holds nightly runs of another configuration (another model, methods or "
                f"options: {foreign[0]}, ...{_differing(local, foreign[0], key)}); give each nightly configuration its "
                "own store"
            )
        scored, published, counts = 0, run_id in store_layout.list_runs(local), None
        if published:
            message = f"night {date} is already scored (run {run_id}): nothing scored again"
            counts = store_layout.read_manifest(store_layout.manifest_path(local, run_id)).get("counts")
            if remote.is_uri(cfg.store) and not remote.has_run(cfg.store, run_id):  # its upload was cut short
                remote.push_run(local, cfg.store, run_id)
                message += f"; its upload to {cfg.store}, cut short before, is done now"
        else:
            corpus = pipeline.read(cfg)
            # the same screening as `run` (first of two ids wins), on Ray workers; what is already
            # scored comes from the store: ids with the sha256 of their text, and a killed night's parts
            done = read_committed_ids(store_layout.staging_dir(local, run_id))
            # known: held by any night of this key, a later one too (a backfilled night scores no document twice)
            known = known_documents(local, matching_runs(local, key))
            screened = pipeline.screen(corpus, model["labels"], done=done, known=known)
            new, n_corpus = screened.counts["kept"], screened.n_input
            if not new:
                message = f"no new or changed documents among {n_corpus}: nothing to score"
                message += _unscorable(screened)
            else:
                counts = _score(cfg, local, run_id, screened, runs, key, model)
                runs, scored = [*runs, run_id], new
                message = f"scored {scored} new or changed documents of {n_corpus} into run {run_id}"
        log.info("nightly %s: %s", date, message)
        if not runs and matching_runs(local, key):
            raise NightlyError(
                f"night {date} comes before the store's first night ({matching_runs(local, key)[0]}), which "
                f"holds every document of {cfg.data!r} already: nothing to score or report for it"
            )
        if not runs:
            raise NightlyError(f"nothing scored yet in {cfg.store!r} and nothing to score in {cfg.data!r}")
        report = build_report(local, runs, date, definition, run_id if run_id in runs else None)
        lean = lead_lean(local, runs, date, definition)
        if lean["said"]:  # a night whose lead method turns against its predictions says so in its one line
            message = f"{message}; lead method {lean['said']}"
            log.info("nightly %s: %s", date, lean["said"])
        created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        record = {"date": date, "created_at": created_at, "message": message, "scored": scored, "runs": runs}
        record["lean"] = lean
        write_record(local, date, {**record, "key": key, "config": cfg.to_dict(), "versions": runtime.versions()})
        latest = point_latest(local, date)
        if remote.is_uri(cfg.store):
            remote.push_tree(local, report.parent, cfg.store)
            if _newest_night(local) == date:  # a past night rebuilt leaves the bucket's latest on the newest too
                key_of_latest = (store_layout.latest_reports(Path()) / REPORT).as_posix()  # relative to the store
                remote.push_text(cfg.store, key_of_latest, _redirect(f"../{date}/{REPORT}"))
    return NightlyResult(date, run_id, scored, runs, report, latest, message, counts)


def _unscorable(screened) -> str:
    """What a night that scores nothing says of the corpus's rows that cannot be scored (bad text,
    id or label; a repeated id): their count, and each one's reason in the night's log where the
    driver holds them (they are retried every night, and recorded in the run of a night that
    scores something)."""
    count = screened.counts["rejected"] + screened.counts["duplicates"]
    if not count:
        return ""
    for row in screened.rejected().itertuples() if hasattr(screened, "rejected") else ():
        log.info("nightly: %s cannot be scored: %s", row.doc_id, row.reason)
    return f"; {count} row(s) cannot be scored (bad text, id or label, or a repeated id; the night's log says why)"


def _refuse_unlisted_nights(local: Path) -> None:
    """A night's run folder without its manifest is read by no query: tonight's union and report
    (written over the last good one) would leave its documents out without a word."""

    for folder in store_layout.unlisted_runs(local):
        if store_layout.run_id_of(folder).startswith(PREFIX):
            raise StoreError(
                f"nightly run {store_layout.run_id_of(folder)!r} is not read: {store_layout.unlisted_why(folder)}; the nights' "
                "report would leave its documents out"
            )


@contextmanager
def nightly_lock(folder: Path):
    """An exclusive, non-blocking flock on ``folder/.nightly.lock``; released when the process ends,
    however it ends, so a killed run never blocks the next one."""
    path = store_layout.nightly_lock(folder)
    try:  # never through a link: the lock file is truncated and written, and a link could aim anywhere
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise NightlyError(
            f"{str(path)!r} is a link; the nightly lock is never opened through one (remove it)"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
        os.close(fd)
        raise NightlyError(
            f"another nightly run is writing store {str(folder)!r} ({holder}); it holds the lock until it ends"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        yield
    finally:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def matching_runs(local: Path, key: dict, through: str | None = None) -> list[str]:
    """Published nightly runs of this key dated ``through`` or earlier (None: any), oldest first."""
    return sorted(
        run_id for run_id, night, same in _nights(local, key) if same and (through is None or night <= through)
    )


def _differing(local: Path, run_id: str, key: dict) -> str:
    """What of ``run_id``'s key differs from ``key``, as ", which differs in X (here A, there B)"."""
    theirs = manifest_key(store_layout.read_manifest(store_layout.manifest_path(local, run_id)))
    names = sorted(name for name in set(key) | set(theirs) if key.get(name) != theirs.get(name))
    if not names:
        return ""
    said = "; ".join(f"{n}: here {key.get(n, 'not set')}, there {theirs.get(n, 'not set')}" for n in names)
    if names == ["ig_tolerance"]:  # nights scored before the key never refined their paths
        said += "; `ig_tolerance: 0` in this nightly config keeps the series"
    return f", which differs in {said}"


def other_runs(local: Path, key: dict) -> list[str]:
    """Published nightly runs of another key (another model, methods or options), oldest first."""
    return sorted(run_id for run_id, _, same in _nights(local, key) if not same)


def _nights(local: Path, key: dict) -> list[tuple[str, str, bool]]:
    """(run id, night, whether its key is ``key``) of every published nightly run of ours."""
    from xai_ray.query.connection import open_store, run_named

    found = run_named(open_store(local), "nightly_runs", prefix=PREFIX)
    nights = []
    for row in found.itertuples():
        night = row.run_id[len(PREFIX) :]
        try:
            Date.fromisoformat(night)
        except ValueError:
            continue  # not a nightly id of ours
        manifest = json.loads(row.manifest)
        if not ((manifest.get("config") or {}).get("extra") or {}).get("nightly"):
            continue  # named like a night (a store from before `run` refused the prefix), not made by this job
        nights.append((row.run_id, night, manifest_key(manifest) == key))
    return nights


def known_documents(local: Path, runs: list[str]):
    """An Arrow table ``doc_id, text_sha256`` of every document of ``runs`` (its latest version), or
    None: what screening compares the corpus with (a known id is scored again only with a new text)."""
    import pyarrow as pa

    from xai_ray.query.connection import open_union, run_named

    if not runs:
        return None
    label = "nightly-known"
    scored = run_named(open_union(local, runs, label), "nightly_doc_ids", run_id=label)
    return pa.table(
        {"doc_id": pa.array(scored.doc_id, pa.string()), "text_sha256": pa.array(scored.text_sha256, pa.string())}
    )


def _score(cfg: RunConfig, local: Path, run_id: str, screened, runs: list[str], key: dict, model: dict) -> dict:
    """Tonight's run, through the pipeline's one publishing path: the new documents scored, tonight's
    rejected rows recorded as errors (they are tried again every night until they pass). Returns the
    run's counts (docs, errors, ...)."""
    counts = screened.counts
    night = {
        "corpus_documents": screened.n_input,
        "scored_documents": counts["kept"],
        "rejected_documents": counts["rejected"] + counts["duplicates"],
        "earlier_runs": runs,
        "key": key,
    }
    run_cfg = replace(
        cfg,
        store=str(local),
        run_id=run_id,
        report=False,
        extra={**cfg.extra, "nightly": night, **({"store_uri": cfg.store} if remote.is_uri(cfg.store) else {})},
    )
    log.info("nightly: scoring %d new or changed documents of %d", counts["kept"], screened.n_input)
    manifest = pipeline.publish(screened, run_cfg, model=model).manifest
    if remote.is_uri(cfg.store):
        remote.push_run(local, cfg.store, run_id)
    return manifest["counts"]


def build_report(local: Path, runs: list[str], date: str, definition, tonight: str | None) -> Path:
    """The report over every nightly document (``runs``, oldest first) as of ``date``, with the
    state before ``date`` for the "since last night" section."""
    from xai_ray.query.connection import open_union
    from xai_ray.report import page as report

    before = [r for r in runs if r[len(PREFIX) :] < date]
    label, then_label = f"nightly {date}", "last night"
    then = open_union(local, before, then_label) if before else None
    spec = report.load_definition(definition) if not isinstance(definition, dict) else dict(definition)
    sections = [s for s in spec["sections"] if s != "since_last_night"]
    spec["sections"] = sections[:1] + ["since_last_night"] + sections[1:]  # right after the summary
    previous = _previous_night(local, date, before)
    out = store_layout.night_report(local, date)
    extra = {
        "nightly": {
            "date": date,
            "previous_date": previous,
            "then": then,
            "then_label": then_label,
            "tonight_run": tonight,
        }
    }
    return report.build_report(local, label, out, definition=spec, con=open_union(local, runs, label), extra=extra)


def lead_lean(local: Path, runs: list[str], date: str, definition) -> dict:
    """How the top words of the report's lead method (its last layer, the report's k and word
    statistics) lean toward each predicted class over every nightly document (``query.lean``):
    ``{"method", "layer", "classes": [{class, label, mean_lean, n_words, n_against, flagged}],
    "said": the caution of each flagged class, or ""}``."""
    import pandas as pd

    from xai_ray.query.connection import open_union
    from xai_ray.query.lean import lean, sentences
    from xai_ray.report import page as report
    from xai_ray.report.context import context

    label = f"nightly {date}"
    spec = report.load_definition(definition) if not isinstance(definition, dict) else dict(definition)
    ctx = context(None, label, spec, con=open_union(local, runs, label))
    frame = lean(ctx.con, label, method=ctx.main_method, layer=ctx.last_layer, **ctx.topk_params())
    classes = [
        {
            "class": int(row.pred),
            "label": ctx.label(row.pred),
            "mean_lean": None if pd.isna(row.mean_lean) else round(float(row.mean_lean), 4),  # None: one class
            "n_words": int(row.n_words),
            "n_against": int(row.n_against),
            "flagged": bool(row.flagged),
        }
        for row in frame.itertuples()
    ]
    said = "; ".join(sentences(frame, ctx.label))
    return {"method": ctx.main_method, "layer": ctx.last_layer, "classes": classes, "said": said}


def write_record(local: Path, date: str, record: dict) -> Path:
    """``nightly.json`` beside the night's report, all or nothing: written under a temporary name in
    the same folder, flushed to disk and renamed over the old one, so a reader (or a crash) never
    meets half a record."""
    return write_atomically(store_layout.night_record(local, date), json.dumps(record, indent=2, default=str))


def _previous_night(local: Path, date: str, before: list[str]) -> str | None:
    """The last night before ``date`` whose report was built from exactly the runs still here
    (``before``, whose union is what "last night" shows; a quiet night made no run of its own), or,
    failing that, the last run's night. A night whose run was deleted by hand is not "last night"
    for numbers that lack its documents (the report named it over an older night's counts), nor is
    an older night for numbers holding a later night's run whose report was never written."""
    present = set(before)
    for night in sorted((p.name for p in store_layout.nights(local) if p.name < date), reverse=True):
        runs = _recorded_runs(local, night)
        if runs is not None and set(runs) == present:
            return night
    return max((r[len(PREFIX) :] for r in before), default=None)


def _recorded_runs(local: Path, night: str) -> list[str] | None:
    """The runs a night's report was built from, as its record says; None without a readable record."""
    try:
        runs = json.loads(store_layout.night_record(local, night).read_text()).get("runs")
    except (OSError, ValueError, AttributeError):
        return None
    return [str(r) for r in runs] if isinstance(runs, list) else None


def point_latest(local: Path, date: str) -> Path:
    """``reports/latest`` -> ``reports/<date>`` (a relative symlink swapped in atomically), unless a
    later night's report exists; where symlinks cannot be made, ``latest/report.html`` redirects."""
    latest = store_layout.latest_reports(local)
    if (_newest_night(local) or date) > date:
        return latest  # a past night was rebuilt: latest stays on the newest
    temporary = store_layout.latest_swap(local)
    try:
        if temporary.is_symlink() or temporary.exists():
            temporary.unlink()
        os.symlink(date, temporary)
        os.replace(temporary, latest)
    except OSError:  # no symlinks here, or latest is a folder (a copy that followed the link)
        with contextlib.suppress(OSError):
            temporary.unlink()  # the link made for the swap: left behind, it was read as a night's folder
        latest.mkdir(parents=True, exist_ok=True)
        write_atomically(latest / REPORT, _redirect(f"../{date}/{REPORT}"))
    return latest


def _newest_night(local: Path) -> str | None:
    """The latest night with a report."""
    return max((p.name for p in store_layout.nights(local) if (p / REPORT).is_file()), default=None)


def _redirect(target: str) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='0; url={target}'>"
        f"<title>latest nightly report</title></head><body><a href='{target}'>{target}</a></body></html>\n"
    )
