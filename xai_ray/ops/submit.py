"""``xai-ray submit``: run a job on a Ray cluster through the Ray Jobs API.

What ``ray job submit --working-dir . -- python -m jobs.<kind> --config <yaml>`` does, plus the
checks a cluster run needs: the config is resolved here first (a typo fails in a second, not after
the upload), its store must outlive the job (an absolute path or an object-store URI, never a
path inside the job's temporary working directory), and a nightly job gets the submission id
``xai-ray-nightly-YYYY-MM-DD-<store digest>``, which Ray refuses to reuse, so a second submission
of the same night to the same store is a no-op (another store's night is a job of its own). The
code travels as ``working_dir`` (``ops.upload``: the repository without .venv, .git, secrets,
stores and models); its dependencies are on the nodes already (cluster.yaml). Logs are streamed;
the exit status is the job's: 0 when it SUCCEEDED, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shlex
import sys
import time
from pathlib import Path

from xai_ray.config import ConfigError
from xai_ray.ops.upload import EXCLUDES, git_excludes, left_out_by, own_store

KINDS = ("analyze", "finetune", "nightly")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class SubmitError(ConfigError):
    """The job cannot be submitted as asked; the message says why."""


def submit(
    config: str,
    address: str = "http://127.0.0.1:8265",
    kind: str | None = None,
    submission_id: str | None = None,
    sets: list[str] | None = None,
    date: str | None = None,
    working_dir: str | None = None,
    wait: bool = True,
) -> int:
    root, path, kind = check_submission(config, kind, sets, working_dir, address)
    given = submission_id  # the user's own id: one command's; a night's id is its store's, however spelled
    if kind == "nightly":
        from xai_ray.ops.nightly import parse_date

        date = parse_date(date)
        submission_id = submission_id or night_id(date, nightly_store(path, sets))
    command = entrypoint(kind, path.relative_to(root).as_posix(), sets, date if kind == "nightly" else None)
    client = connect(address)
    found = _exists(client, submission_id, command if given else None, kind) if submission_id else None
    if found:
        return 0 if found in LIVE else 1  # a night that failed is said again in the exit status
    excludes = EXCLUDES + git_excludes(root) + own_store(root, path, sets, kind)
    runtime_env = {"working_dir": str(root), "excludes": excludes, "env_vars": {"PYTHONUNBUFFERED": "1"}}
    try:
        job = client.submit_job(
            entrypoint=command,
            runtime_env=runtime_env,
            submission_id=submission_id,
            metadata={"xai-ray-kind": kind, "config": path.relative_to(root).as_posix()},
        )
    except RuntimeError as err:
        if submission_id and "already exists" in str(err):  # lost a race with another submitter
            return 0 if _exists(client, submission_id, command if given else None, kind) in LIVE else 1
        raise SubmitError(f"the cluster refused the job: {str(err).splitlines()[0]}") from None
    print(f"submitted {kind} job {job} to {address}: {command}", flush=True)
    if not wait:
        return 0
    return follow(client, job)


def check_submission(
    config: str, kind: str | None, sets: list[str] | None, working_dir: str | None, address: str
) -> tuple[Path, Path, str]:
    """(working directory, config, kind) of a submission, refused in one sentence before anything
    connects: what ``submit`` checks now, and ``schedule --submit-to`` at install time (else the
    entry would fail at 2 a.m.)."""
    root = Path(working_dir).resolve() if working_dir else find_working_dir()
    path = Path(config).resolve()
    if not path.is_file():
        raise SubmitError(f"config file {config!r} does not exist")
    if not path.is_relative_to(root):
        raise SubmitError(
            f"config {config!r} lies outside the working directory {str(root)!r} that is shipped "
            "to the cluster; put it under jobs/"
        )
    kind = kind or infer_kind(path)
    check_config(path, kind, sets, root)
    check_address(address)
    return root, path, kind


def find_working_dir() -> Path:
    """The repository holding ``jobs/__init__.py``: the current folder or a parent, else the package's."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents, Path(__file__).resolve().parents[2]):
        if (folder / "jobs" / "__init__.py").is_file() and (folder / "xai_ray").is_dir():
            return folder
    raise SubmitError(
        "no working directory with jobs/ and xai_ray/ found; run from the repository or pass --working-dir"
    )


def infer_kind(path: Path) -> str:
    from xai_ray.config import read_yaml

    if "nightly" in path.stem:
        return "nightly"
    return "finetune" if "base" in read_yaml(path) else "analyze"


def check_config(path: Path, kind: str, sets: list[str] | None, root: Path | None = None) -> None:
    """Resolve the config here (errors surface before the upload) and refuse outputs that would
    vanish with the job's temporary working directory, and data the job would not find there."""
    from xai_ray import config
    from xai_ray.store import remote

    if kind == "finetune":
        from xai_ray.train.settings import resolve as resolve_finetune

        cfg = resolve_finetune(path, None, sets)
        if remote.is_uri(cfg.out) or not Path(cfg.out).is_absolute():
            raise SubmitError(
                f"out {cfg.out!r} must be an absolute path on the cluster (the model folder and Ray "
                "Train's checkpoints; on several nodes, a shared filesystem such as EFS)"
            )
        check_data(cfg.data, root)
        return
    cfg = config.resolve(path, None, sets)
    if kind == "nightly":
        from xai_ray.ops.nightly import check_nightly

        check_nightly(cfg)
    if not remote.is_uri(cfg.store) and not Path(cfg.store).is_absolute():
        raise SubmitError(
            f"store {cfg.store!r} is relative: in a submitted job it would land in the job's temporary "
            "working directory; give an object-store URI or an absolute path on the cluster "
            "(--set store=s3://bucket/xai-ray)"
        )
    check_data(cfg.data, root)


FILE_SUFFIXES = {".parquet", ".csv", ".tsv", ".json", ".jsonl", ".txt"}


def check_data(data: str | None, root: Path | None) -> None:
    """A relative local ``data`` path is read from the job's copy of the working directory: one
    that leads out of it (the shipped jobs/imdb-offline.yaml's ``../shared/...``) is not there, and
    the job failed only after the upload. A Hub dataset id or a URI is left alone."""
    from xai_ray.store import remote

    if not data or root is None or remote.is_uri(data) or Path(data).is_absolute():
        return
    # a folder ("incoming/": no Hub id ends in a slash), a file by its suffix, or what is there here
    local = data.startswith(".") or data.endswith("/") or Path(data).suffix.lower() in FILE_SUFFIXES
    local = local or (root / data).exists()
    if local and not (root / data).resolve().is_relative_to(root):
        raise SubmitError(
            f"data {data!r} is a relative path that leads out of the working directory shipped to the "
            f"cluster ({str(root)!r}), so the job would not find it; give an absolute path on the cluster or "
            "an object-store URI (--set data=/mnt/data/imdb/train.parquet)"
        )
    left_out = left_out_by(root, Path(os.path.normpath(data))) if local else None  # as written: links too
    if left_out:  # jobs/nightly.yaml's incoming/: .gitignore keeps it out of the upload
        raise SubmitError(
            f"data {data!r} is left out of the working directory shipped to the cluster ({left_out}), so the "
            "job would not find it; give an absolute path on the cluster or an object-store URI "
            "(--set data=/PATH/ON/THE/CLUSTER)"
        )


def entrypoint(kind: str, config_rel: str, sets: list[str] | None, date: str | None) -> str:
    if kind not in KINDS:
        raise SubmitError(f"--kind must be one of {', '.join(KINDS)}; got {kind!r}")
    words = ["python", "-m", f"jobs.{kind}", "--config", config_rel]
    for item in sets or []:
        words += ["--set", item]
    if date:
        words += ["--date", date]
    return shlex.join(words)


def auth_headers() -> dict:
    """The cluster's token (Ray's token authentication), from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH
    or ~/.ray/auth_token; none when there is none (a cluster without token authentication)."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        token = path.read_text().strip() if path.is_file() else ""
    return {"Authorization": f"Bearer {token}"} if token else {}


def check_address(address: str) -> None:
    if "://" not in address:  # host:port went to Ray's GCS client: half a minute of retries, a wrong hint
        raise SubmitError(
            f"--address {address!r} needs the Jobs API's URL, with its scheme: http://{address.removeprefix('//')} "
            "(the dashboard's port, 8265 by default; `ray dashboard cluster.yaml` tunnels it)"
        )
    scheme = address.partition("://")[0].lower()
    if scheme not in ("http", "https"):  # ftp:// was taken and answered "is the head up?"
        raise SubmitError(
            f"--address {address!r} has the scheme {scheme!r}; the Ray Jobs API is reached over http:// or https:// "
            "(the dashboard's port, 8265 by default)"
        )


def connect(address: str):
    from ray.job_submission import JobSubmissionClient

    check_address(address)
    try:
        return JobSubmissionClient(address, headers=auth_headers())
    except Exception as err:  # ConnectionError, AuthenticationError: one sentence, not a traceback
        hint = (
            "is the head up and the SSH tunnel open (`ray dashboard cluster.yaml`)?"
            if "uthentica" not in str(err)
            else "copy the cluster's token (`ray exec cluster.yaml 'cat ~/.ray/auth_token'`) to ~/.ray/auth_token "
            "or RAY_AUTH_TOKEN"
        )
        raise SubmitError(f"cannot reach the Ray Jobs API at {address} ({type(err).__name__}): {hint}") from None


LIVE = ("PENDING", "RUNNING", "SUCCEEDED")  # a job already submitted that needs no second one


def night_id(date: str, store: str) -> str:
    """A nightly job's submission id: the night and its store (one nightly configuration per store),
    so another store's night is its own job. Ray never reuses an id: a second submission of a
    night to the same store is a no-op."""
    return f"xai-ray-nightly-{date}-{hashlib.sha256(store.encode()).hexdigest()[:8]}"


def nightly_store(path: Path, sets: list[str] | None) -> str:
    """The night's store as one spelling of it: ``/srv/store/``, ``/srv/./store`` and ``/srv/store``
    (or ``s3://b/x/`` and ``s3://b/x``) are one store, and so one job a night."""
    from xai_ray import config
    from xai_ray.store import remote

    store = config.resolve(path, None, sets).store
    return store.rstrip("/") if remote.is_uri(store) else os.path.normpath(store)


def _exists(client, submission_id: str, command: str | None, kind: str) -> str | None:
    """The status of the job already submitted under ``submission_id`` (said on stdout), or None.
    ``command``: an id the user gave is this command's; a job of another command under it is
    refused (it was said to be this one, and this one never ran)."""
    try:
        info = client.get_job_info(submission_id)
    except RuntimeError as err:
        if "does not exist" in str(err):
            return None
        raise SubmitError(f"cannot look up job {submission_id!r}: {str(err).splitlines()[0]}") from None
    status = str(getattr(info.status, "value", info.status))
    if command is not None and info.entrypoint is not None and info.entrypoint != command:
        raise SubmitError(
            f"submission id {submission_id!r} is another job's ({status}: {info.entrypoint}); nothing was "
            "submitted: give this one another --submission-id"
        )
    when = " tonight" if kind == "nightly" else ""
    retry = "" if status in LIVE else f"; to run it again{when}, pass --submission-id {submission_id}-2"
    print(f"job {submission_id} was already submitted ({status}): nothing submitted{retry}", flush=True)
    return status


def follow(client, job: str) -> int:
    """Stream the job's logs until it ends; the exit status follows the job's."""
    streamed = True
    try:
        asyncio.run(_tail(client, job))
    except KeyboardInterrupt:
        print(f"\nstopped following; the job goes on (`ray job stop {job}` stops it)", file=sys.stderr)
        return 130
    except Exception as err:  # the log stream broke: keep polling the status instead
        print(f"log stream closed ({type(err).__name__}); waiting for the job to end", file=sys.stderr)
        streamed = False
    while (status := str(client.get_job_status(job).value)) not in TERMINAL:
        time.sleep(2)
    info = client.get_job_info(job)
    reason = (info.message or "").splitlines()[0] if status != "SUCCEEDED" and info.message else ""
    if streamed:  # Ray's message ends in ", last available logs (truncated to 20,000 chars):", shown above
        reason = re.sub(r",? ?last available logs.*$", "; its log is above", reason)
    elif info.message:  # the stream broke: Ray's last lines are all there is of the log
        reason = info.message.strip()
    print(f"job {job}: {status}" + (f" ({reason})" if reason else ""), flush=True)
    return 0 if status == "SUCCEEDED" else 1


async def _tail(client, job: str) -> None:
    async for chunk in client.tail_job_logs(job):
        print(chunk, end="", flush=True)
