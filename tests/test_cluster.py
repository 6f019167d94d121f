"""cluster.yaml against the schema inside the installed ray package, and jobs submitted for real
to a local Ray head (`ray start --head --dashboard-host 127.0.0.1`) started and stopped here:
through `ray job submit` and through `xai-ray submit`, then the store they wrote queried."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from xai_ray.ops.submit import entrypoint
from xai_ray.ops.upload import EXCLUDES
from xai_ray.query.connection import open_store

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_cluster_yaml_validates_against_the_installed_ray_schema():
    import jsonschema
    import ray
    from ray.autoscaler._private.util import fillout_defaults, validate_config

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    jsonschema.validate(CLUSTER, schema)
    validate_config(fillout_defaults(CLUSTER))  # what `ray up` checks, defaults merged


def test_cluster_yaml_node_types_and_images():
    """node_config is free-form in the schema: check the fields this config relies on."""
    assert CLUSTER["provider"]["type"] == "aws" and re.fullmatch(r"[a-z]{2}-[a-z]+-\d", CLUSTER["provider"]["region"])
    types = CLUSTER["available_node_types"]
    head = types[CLUSTER["head_node_type"]]
    workers = {name: t for name, t in types.items() if name != CLUSTER["head_node_type"]}
    gpu = [t for t in workers.values() if t["resources"].get("GPU", 0) >= 1]
    assert gpu, "no GPU worker type"
    for node in [head, *workers.values()]:
        config = node["node_config"]
        assert re.fullmatch(r"[a-z]\d[a-z]*\.\d*x?large", config["InstanceType"]), config["InstanceType"]
        assert re.fullmatch(r"ami-[0-9a-f]{8,17}|resolve:ssm:/aws/service/\S+", config["ImageId"]), config["ImageId"]
    assert gpu[0]["node_config"]["InstanceType"].startswith(("g4dn", "g5", "g6", "p3", "p4", "p5"))
    for node in workers.values():
        assert 0 <= node["min_workers"] <= node["max_workers"] <= CLUSTER["max_workers"]


def test_cluster_yaml_keeps_the_dashboard_behind_ssh():
    head_start = " ".join(CLUSTER["head_start_ray_commands"])
    assert re.search(r"ray start --head\b.*--dashboard-host[= ]127\.0\.0\.1\b", head_start)
    assert "0.0.0.0" not in (ROOT / "cluster.yaml").read_text()
    for rule in CLUSTER["provider"].get("security_group", {}).get("IpPermissions", []):
        assert rule["FromPort"] == rule["ToPort"] == 22, rule  # nothing but SSH
    assert "RAY_AUTH_MODE=token" in head_start
    assert CLUSTER["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


def test_the_upload_and_the_sync_take_every_file_of_the_package():
    """EXCLUDES' "store" and cluster.yaml's "**/store" left out xai_ray/store too: every job failed
    on a cluster that installs what was shipped (a local head with this checkout installed
    editable found the package anyway). Stores, models, secrets and the nightly's incoming/ stay out."""
    import fnmatch

    from xai_ray.ops.upload import left_out_by

    code = [p.relative_to(ROOT) for d in ("xai_ray", "jobs") for p in (ROOT / d).rglob("*.py")]
    code = [p for p in code if "__pycache__" not in p.parts] + [Path("pyproject.toml"), Path("cluster.yaml")]
    assert Path("xai_ray/store/writer.py") in code
    assert [str(p) for p in code if left_out_by(ROOT, p)] == []
    for kept_out in ("store/runs/x", "store-nightly/x", "models/m/config.json", ".env", ".venv/bin/python"):
        assert left_out_by(ROOT, Path(kept_out)) == "EXCLUDES of xai_ray/ops/upload.py", kept_out
    assert left_out_by(ROOT, Path("incoming")) == "its .gitignore"
    names = {part for p in code for part in p.parts}  # rsync's "**/NAME" leaves out each folder so named
    for pattern in CLUSTER["rsync_exclude"]:
        assert pattern.startswith(("/", "**/")), pattern
        assert not (pattern.startswith("**/") and fnmatch.filter(names, pattern[3:])), pattern


def test_cluster_yaml_installs_this_project_with_the_clients_ray():
    import ray

    setup = " ".join(CLUSTER["setup_commands"])
    assert f"ray[default,data,train]=={ray.__version__}" in setup  # client and cluster must agree
    assert "xai-ray[minilm]" in setup and CLUSTER["file_mounts"]["~/xai-ray"] == "."
    assert "**/.venv" in CLUSTER["rsync_exclude"] and ".venv" in EXCLUDES
    guide = (ROOT / "docs" / "cluster.md").read_text()  # the user's steps name the same file
    assert "ray up cluster.yaml" in guide and "ray dashboard cluster.yaml" in guide


def test_entrypoint_is_what_ray_job_submit_runs():
    assert entrypoint("nightly", "jobs/nightly.yaml", ["store=s3://b/x", "limit=3"], "2026-01-02") == (
        "python -m jobs.nightly --config jobs/nightly.yaml --set store=s3://b/x --set limit=3 --date 2026-01-02"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A real local Ray head with token authentication, in its own temp dir (other Rays on this
    machine never see it), run with --block and stopped by SIGTERM to that process: `ray stop`
    would stop every Ray on the machine. Leftovers (found by the temp dir) are killed by pid."""
    token = tmp_path_factory.mktemp("auth") / "token"
    token.write_text(secrets.token_hex(16))
    temp = Path(tempfile.mkdtemp(prefix="xr-", dir="/tmp"))  # short: Ray's socket paths must fit
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    # this interpreter's `ray`, and its `python` for the jobs' entrypoints, even when not on PATH
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    dashboard = _free_port()
    start = [
        "ray",
        "start",
        "--head",
        "--block",
        "--dashboard-host",
        "127.0.0.1",
        "--port",
        str(_free_port()),
        "--dashboard-port",
        str(dashboard),
        "--ray-client-server-port",
        str(_free_port()),
        "--num-cpus",
        "2",
        "--temp-dir",
        str(temp),
        "--disable-usage-stats",
    ]
    log = open(temp / "start.log", "w")
    ray_head = subprocess.Popen(start, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_for_jobs_api(address, token.read_text(), ray_head, temp / "start.log")
        yield {"address": address, "env": env}
    finally:
        ray_head.send_signal(signal.SIGTERM)
        try:
            ray_head.wait(timeout=10)  # its SIGTERM handler drains first; the leftovers go below
        except subprocess.TimeoutExpired:
            ray_head.kill()
        _kill_leftovers(str(temp))
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_jobs_api(address: str, token: str, process, log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, f"ray start exited: {log.read_text()[-3000:]}"
        try:
            request = urllib.request.Request(f"{address}/api/version", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"the Jobs API did not come up: {log.read_text()[-3000:]}")


def _kill_leftovers(marker: str) -> None:
    """Processes of this head only: their command lines name its temp dir."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def job_inputs(tmp_path_factory, tiny_bert_dir):
    folder = tmp_path_factory.mktemp("job")
    rng = np.random.default_rng(3)
    words = ["the", "film", "was", "good", "bad", "not", "very", "great", "plot", "boring", "story"]
    texts = [" ".join(rng.choice(words, size=8)) for _ in range(12)]
    pd.DataFrame({"id": [f"j{i:02d}" for i in range(12)], "text": texts, "label": rng.integers(0, 2, 12)}).to_parquet(
        folder / "corpus.parquet"
    )
    return {
        "sets": [
            f"data={folder / 'corpus.parquet'}",
            f"model={tiny_bert_dir}",
            "methods=raw,rollout",
            "max_length=32",
            "limit=null",
            "batch_size=4",
            "actors=1",
        ],
        "store": folder / "store",
    }


def _submit(head, *args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "xai_ray.cli", "submit", *args, "--address", head["address"]],
        env=head["env"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.ray
def test_ray_job_submit_runs_the_entrypoint_as_is(head, job_inputs):
    """`ray job submit --working-dir . -- python -m jobs.analyze --config ...`, then DuckDB over the store."""
    store = job_inputs["store"] / "a"
    sets = [w for item in [*job_inputs["sets"], f"store={store}", "run_id=via-ray-cli"] for w in ("--set", item)]
    done = subprocess.run(
        [
            "ray",
            "job",
            "submit",
            "--address",
            head["address"],
            "--working-dir",
            ".",
            "--runtime-env-json",
            json.dumps({"excludes": EXCLUDES}),
            "--",
            "python",
            "-m",
            "jobs.analyze",
            "--config",
            "jobs/imdb-offline.yaml",
            *sets,
        ],
        env=head["env"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "run via-ray-cli: 12 documents scored" in done.stdout
    con = open_store(store)
    assert con.execute("select count(*), count(distinct doc_id) from docs where run_id = 'via-ray-cli'").fetchone() == (
        12,
        12,
    )
    sums = con.execute("select sum(score) as s from words group by doc_id, method, layer").df()
    assert len(sums) == 12 * 2 * 2 and np.allclose(sums.s, 1.0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.ray
def test_xai_ray_submit_streams_logs_and_exits_with_the_jobs_status(head, job_inputs):
    store = job_inputs["store"] / "n"
    sets = [w for item in [*job_inputs["sets"], f"store={store}"] for w in ("--set", item)]
    before = date.today()
    first = _submit(head, "jobs/nightly.yaml", *sets)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # the submitter names the night when it submits; a test that spans midnight sees either date
    named = re.search(r"submitted nightly job xai-ray-nightly-(\d{4}-\d{2}-\d{2})-([0-9a-f]{8}) ", first.stdout)
    assert named, first.stdout[-3000:]
    night, digest = named.groups()
    assert night in {before.isoformat(), date.today().isoformat()}
    assert f"scored 12 new or changed documents of 12 into run nightly-{night}" in first.stdout  # streamed log
    assert f"job xai-ray-nightly-{night}-{digest}: SUCCEEDED" in first.stdout
    con = open_store(store)
    assert con.execute("select count(*) from docs where run_id = $r", {"r": f"nightly-{night}"}).fetchone() == (12,)
    assert (store / "reports" / night / "report.html").is_file()

    again = _submit(head, "jobs/nightly.yaml", *sets)  # the same night: Ray keeps the id, nothing runs
    assert again.returncode == 0
    assert f"job xai-ray-nightly-{night}-{digest} was already submitted (SUCCEEDED): nothing submitted" in again.stdout
    assert "submitted nightly job" not in again.stdout
    # another store's night is a job of its own (it was skipped as "already submitted", exit 0)
    other = _submit(head, "jobs/nightly.yaml", *sets, "--set", f"store={job_inputs['store'] / 'n2'}", "--date", night)
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    assert f"job xai-ray-nightly-{night}-" in other.stdout and f"-{digest}" not in other.stdout
    assert (job_inputs["store"] / "n2" / "reports" / night / "report.html").is_file()

    failing = _submit(
        head,
        "jobs/imdb-offline.yaml",
        "--kind",
        "analyze",
        *sets,
        "--set",
        "data=/nonexistent.parquet",
        "--set",
        f"store={store}",
    )
    assert failing.returncode == 1, failing.stdout[-3000:]
    assert "data path '/nonexistent.parquet' does not exist" in failing.stdout
    # Ray's reason without its dangling "last available logs (truncated to 20,000 chars):"
    assert re.search(
        r"job raysubmit_\w+: FAILED \(Job entrypoint command failed with exit code 2; its log is above\)",
        failing.stdout,
    )
    # an id given again for another command's job: it was "already submitted", and this one never ran
    failed_id = re.search(r"job (raysubmit_\w+): FAILED", failing.stdout).group(1)
    taken = _submit(head, "jobs/nightly.yaml", *sets, "--submission-id", failed_id)
    assert taken.returncode == 2, taken.stdout[-3000:] + taken.stderr[-3000:]
    assert f"submission id {failed_id!r} is another job's (FAILED: python -m jobs.analyze" in taken.stderr
    assert "was already submitted" not in taken.stdout


def test_submit_refuses_outputs_that_would_vanish_with_the_job(tmp_path, capsys):
    from xai_ray import cli

    # the store would land in the job's temporary working directory: refused before any upload
    assert cli.main(["submit", str(ROOT / "jobs" / "imdb-offline.yaml"), "--address", "http://127.0.0.1:9"]) == 2
    assert "store 'store' is relative" in capsys.readouterr().err
    outside = tmp_path / "x.yaml"
    outside.write_text("store: /tmp/s\n")
    assert cli.main(["submit", str(outside), "--address", "http://127.0.0.1:9"]) == 2
    assert "outside the working directory" in capsys.readouterr().err
    finetune = str(ROOT / "jobs" / "finetune.yaml")  # a `base` key: a finetune job, which needs an absolute out
    assert cli.main(["submit", finetune, "--address", "http://127.0.0.1:9"]) == 2
    assert "finetune needs an output folder" in capsys.readouterr().err
    assert cli.main(["submit", finetune, "--set", "out=models/x", "--address", "http://127.0.0.1:9"]) == 2
    assert "out 'models/x' must be an absolute path on the cluster" in capsys.readouterr().err
    # data that leads out of the shipped folder would not be there on the cluster: refused here
    offline = str(ROOT / "jobs" / "imdb-offline.yaml")  # data: ../shared/data/imdb/train.parquet
    assert cli.main(["submit", offline, "--set", "store=/tmp/s", "--address", "http://127.0.0.1:9"]) == 2
    assert "data '../shared/data/imdb/train.parquet' is a relative path that leads out" in capsys.readouterr().err
    # an address without its scheme is not the Jobs API's URL: said at once, with the fix
    assert (
        cli.main(
            ["submit", offline, "--set", "store=/tmp/s", "--set", "data=/d.parquet", "--address", "127.0.0.1:8265"]
        )
        == 2
    )
    assert "needs the Jobs API's URL, with its scheme: http://127.0.0.1:8265" in capsys.readouterr().err
    # a scheme the Jobs API is not reached by: named, not "is the head up?"
    argv = ["submit", offline, "--set", "store=/tmp/s", "--set", "data=/d.parquet", "--address", "ftp://127.0.0.1:1"]
    assert cli.main(argv) == 2
    assert "has the scheme 'ftp'; the Ray Jobs API is reached over http:// or https://" in capsys.readouterr().err
    # a cluster that is not there: one sentence, not a traceback
    assert (
        cli.main(
            [
                "submit",
                str(ROOT / "jobs" / "imdb-offline.yaml"),
                "--set",
                "store=/tmp/s",
                "--set",
                "data=/data/imdb/train.parquet",  # a path on the cluster
                "--address",
                f"http://127.0.0.1:{_free_port()}",
            ]
        )
        == 2
    )
    assert "cannot reach the Ray Jobs API" in capsys.readouterr().err


def test_a_store_inside_the_working_directory_is_not_uploaded_with_the_code(tmp_path):
    """A job's store at ROOT/out/mystore (no folder name EXCLUDES knows) went up with every job."""
    from ray._private.runtime_env.packaging import _get_excludes

    from xai_ray.ops.upload import EXCLUDES, own_store

    config = ROOT / "jobs" / "nightly.yaml"
    inside = own_store(ROOT, config, [f"store={ROOT / 'out' / 'mystore'}"], "nightly")
    assert inside == ["/out/mystore"]
    left_out = _get_excludes(ROOT, EXCLUDES + inside)
    assert left_out(ROOT / "out" / "mystore" / "runs" / "x.parquet") and not left_out(ROOT / "out" / "notes.txt")
    odd = own_store(ROOT, config, [f"store={ROOT / 'out' / 'my[1]*store'}"], "nightly")  # a pattern's characters
    assert _get_excludes(ROOT, odd)(ROOT / "out" / "my[1]*store" / "x") and not _get_excludes(ROOT, odd)(
        ROOT / "out" / "my1xstore"
    )
    assert own_store(ROOT, config, [f"store={tmp_path}"], "nightly") == []  # elsewhere: nothing to leave out
    assert own_store(ROOT, config, ["store=s3://bucket/x"], "nightly") == []


def test_data_that_a_folders_own_ignore_file_leaves_out_is_refused(tmp_path):
    """Ray reads the .gitignore of every folder it walks: data/.gitignore's "*" kept data/train.csv
    out of the upload while the check, reading the repository's own only, let it through."""
    from xai_ray.ops.submit import SubmitError, check_data

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".gitignore").write_text("*\n!.gitignore\n")
    (tmp_path / "data" / "train.csv").write_text("id,text\n")
    (tmp_path / "feeds").mkdir()
    (tmp_path / "feeds" / "x.csv").write_text("id,text\n")
    (tmp_path / ".gitignore").write_text("/incoming/\n")
    (tmp_path / "incoming").symlink_to(tmp_path / "feeds")  # the name Ray matches, not where it leads
    for data, rule in (("data/train.csv", "data/.gitignore"), ("incoming/x.csv", "its .gitignore")):
        with pytest.raises(SubmitError, match=f"data {data!r} is left out .* \\({rule}\\)"):
            check_data(data, tmp_path)
    check_data("feeds/x.csv", tmp_path)  # taken: nothing said


def test_files_kept_out_of_git_by_its_own_exclude_file_stay_out_of_the_upload(tmp_path):
    """Ray reads .gitignore files, never .git/info/exclude: a secret kept out of git there (never
    committed, never in a .gitignore) went up to the cluster with the code."""
    from ray._private.runtime_env.packaging import _get_excludes

    from xai_ray.ops.submit import SubmitError, check_data
    from xai_ray.ops.upload import EXCLUDES, git_excludes

    repo = tmp_path / "repo"
    (repo / ".git" / "info").mkdir(parents=True)
    (repo / ".git" / "info" / "exclude").write_text("# git's own excludes\nsecrets.env\n/private/\n\n")
    (repo / "private").mkdir()
    (repo / "private" / "train.csv").write_text("id,text\n")
    (repo / "secrets.env").write_text("TOKEN=1\n")
    assert git_excludes(repo) == ["secrets.env", "/private/"]
    left_out = _get_excludes(repo, EXCLUDES + git_excludes(repo))
    assert left_out(repo / "secrets.env") and left_out(repo / "private" / "train.csv")
    assert not left_out(repo / "jobs.yaml")
    with pytest.raises(SubmitError, match=r"\(its \.git/info/exclude\)"):
        check_data("private/train.csv", repo)
    # a worktree's .git is a file naming its folder in the repository's .git, whose exclude it shares
    (repo / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (repo / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git' / 'worktrees' / 'wt'}\n")
    assert git_excludes(worktree) == ["secrets.env", "/private/"]
    assert git_excludes(tmp_path) == []  # no repository: nothing more
