"""`xai-ray schedule`: the crontab entry and the systemd user timer, printed, installed for real
(the machine's crontab, restored afterwards) and removed; the installed line runs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from xai_ray import cli
from xai_ray.ops.schedule import MARKER, job_tag, read_crontab, write_crontab

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "jobs" / "nightly.yaml"


def test_dry_run_prints_the_cron_entry_and_installs_nothing(capsys, monkeypatch):
    if shutil.which("crontab") is None:
        pytest.skip("no crontab command (apt-get install cron)")
    before = read_crontab()
    assert cli.main(["schedule", str(CONFIG), "--at", "02:30", "--dry-run"]) == 0
    out = capsys.readouterr().out
    entry = out.strip().splitlines()[-1]
    assert entry.startswith("30 2 * * * cd ")
    assert f"xai_ray.cli nightly {CONFIG}" in entry and "scripts/loopback.sh" in entry
    assert entry.endswith(f"{MARKER}{job_tag(CONFIG)} nightly.yaml") and ">> " in entry
    assert read_crontab() == before

    assert (
        cli.main(
            [
                "schedule",
                str(CONFIG),
                "--submit-to",
                "http://127.0.0.1:8265",
                "--dry-run",
                "--set",
                "store=s3://bucket/xai",
                "--set",
                "data=/srv/incoming",  # the config's incoming/ is not shipped: a path on the cluster
            ]
        )
        == 0
    )
    entry = capsys.readouterr().out.strip().splitlines()[-1]
    assert entry.startswith("0 2 * * * ")
    assert (
        f"xai_ray.cli submit {CONFIG} --kind nightly --address http://127.0.0.1:8265 --set store=s3://bucket/xai"
        in entry
    )
    assert "loopback.sh" not in entry  # the SSH tunnel lives in this machine's network


def test_bad_time_is_one_sentence(capsys):
    assert cli.main(["schedule", str(CONFIG), "--at", "25:00", "--dry-run"]) == 2
    assert "--at must be HH:MM" in capsys.readouterr().err


@pytest.mark.parametrize("log", ["", "   "])
def test_an_empty_log_path_is_refused(log, capsys):
    """`--log ''` fell back to the default log without a word; `--log '   '` made a file of spaces."""
    with pytest.raises(SystemExit) as caught:
        cli.main(["schedule", str(CONFIG), "--dry-run", "--log", log])
    assert caught.value.code == 2 and "argument --log: must not be empty" in capsys.readouterr().err


def test_crontab_install_and_remove_round_trip(capsys, tmp_path):
    if shutil.which("crontab") is None:
        pytest.skip("no crontab command (apt-get install cron)")
    original = read_crontab()
    had_one = subprocess.run(["crontab", "-l"], capture_output=True).returncode == 0
    sentinel = "# xai-ray test: a line that is not ours"
    try:
        write_crontab([*original.splitlines(), sentinel])
        for at in ("02:00", "03:15"):  # installing again replaces, never duplicates
            assert cli.main(["schedule", str(CONFIG), "--at", at, "--log", str(tmp_path / "n.log")]) == 0
        rows = read_crontab().splitlines()
        ours = [r for r in rows if f"{MARKER}{job_tag(CONFIG)}" in r]
        assert len(ours) == 1 and ours[0].startswith("15 3 * * * ") and sentinel in rows
        assert cli.main(["schedule", str(CONFIG), "--remove"]) == 0
        assert "removed the crontab entry" in capsys.readouterr().out
        assert read_crontab().splitlines() == [*original.splitlines(), sentinel]
    finally:
        if had_one:
            write_crontab(original.splitlines())
        else:  # leave the machine as it was: no crontab at all
            subprocess.run(["crontab", "-r"], capture_output=True)
    assert read_crontab() == original


def test_the_scheduled_line_runs(tmp_path, capsys):
    """Run the printed line through bash: cd, interpreter, quoting and the log all work (nothing
    listens at the address, so the submit stops at once, in the log)."""
    log = tmp_path / "log dir" / "nightly.log"
    argv = ["schedule", str(CONFIG), "--systemd", "--dry-run", "--log", str(log), "--submit-to", "http://127.0.0.1:9"]
    assert cli.main([*argv, "--set", f"store={tmp_path / 'store'}", "--set", "data=/srv/incoming"]) == 0
    service = capsys.readouterr().out
    line = next(row for row in service.splitlines() if row.startswith("ExecStart=/bin/bash -c "))
    log.parent.mkdir()
    subprocess.run(line[len("ExecStart=") :], shell=True, timeout=120)
    assert "cannot reach the Ray Jobs API at http://127.0.0.1:9" in log.read_text()


@pytest.mark.parametrize(
    "case,says",
    [
        ("outside", "lies outside the working directory"),
        ("no scheme", "needs the Jobs API's URL, with its scheme"),
        ("data outside", "is a relative path that leads out of the working directory"),
        (
            "data not shipped",
            "data 'incoming/' is left out of the working directory shipped to the cluster (its .gitignore)",
        ),
    ],
)
def test_a_submission_submit_would_refuse_is_refused_when_scheduled(case, says, tmp_path, capsys):
    """Each of these was installed, and `submit` refused it at 2 a.m."""
    config, address, sets = str(CONFIG), "http://127.0.0.1:8265", ["--set", f"store={tmp_path / 'store'}"]
    if case == "outside":
        config = str(tmp_path / "nightly.yaml")
        (tmp_path / "nightly.yaml").write_text(f"store: {tmp_path / 'store'}\n")
    if case == "no scheme":
        address = "localhost:8265"
    if case == "data outside":
        sets += ["--set", "data=../shared/data/imdb/train.parquet"]
    if case in ("outside", "no scheme"):
        sets += ["--set", "data=/srv/incoming"]  # the config's incoming/ alone is refused: "data not shipped"
    assert cli.main(["schedule", config, "--submit-to", address, "--dry-run", *sets]) == 2
    assert says in capsys.readouterr().err


def test_a_schedule_the_cluster_cannot_run_is_refused_at_once(capsys):
    assert cli.main(["schedule", str(CONFIG), "--submit-to", "http://127.0.0.1:8265", "--dry-run"]) == 2
    assert "store 'store-nightly' is relative" in capsys.readouterr().err


def test_systemd_timer_install_and_remove(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XAI_RAY_SYSTEMD_DIR", str(tmp_path / "units"))
    assert cli.main(["schedule", str(CONFIG), "--systemd", "--at", "01:05", "--dry-run"]) == 0
    assert "OnCalendar=*-*-* 01:05:00" in capsys.readouterr().out and not (tmp_path / "units").exists()
    assert cli.main(["schedule", str(CONFIG), "--systemd", "--at", "01:05"]) == 0
    name = f"xai-ray-nightly-{job_tag(CONFIG)}"
    timer = (tmp_path / "units" / f"{name}.timer").read_text()
    service = (tmp_path / "units" / f"{name}.service").read_text()
    assert "OnCalendar=*-*-* 01:05:00" in timer and "Persistent=true" in timer
    assert f"xai_ray.cli nightly {CONFIG}" in service and "Type=oneshot" in service
    assert cli.main(["schedule", str(CONFIG), "--systemd", "--remove"]) == 0
    assert list((tmp_path / "units").iterdir()) == []


# --------------------------------------------------------------------------- values are data


def _cron_command(entry: str) -> tuple[str, str]:
    """(command, stdin) as cron reads an entry's command field: the first unescaped ``%`` ends the
    command, later ones become newlines of its stdin, and ``\\%`` stands for ``%`` (crontab(5))."""
    field = entry.split(" ", 5)[5]
    parts, current, i = [], "", 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 2] == "%":
            current, i = current + "%", i + 2
        elif field[i] == "%":
            parts.append(current)
            current, i = "", i + 1
        else:
            current, i = current + field[i], i + 1
    parts.append(current)
    return parts[0], "\n".join(parts[1:])


@pytest.mark.parametrize("where", ["set", "config", "log", "submit_to", "log_cr"])
def test_a_control_character_in_any_written_value_is_refused(where, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XAI_RAY_SYSTEMD_DIR", str(tmp_path / "units"))
    config = tmp_path / ("night\n* * * * * touch pwned\n.yaml" if where == "config" else "nightly.yaml")
    config.write_text(f"store: {tmp_path / 'store'}\n")
    argv = ["schedule", str(config), "--dry-run", "--systemd"]
    if where == "set":
        argv += ["--set", "store=x\n* * * * * touch pwned"]
    if where in ("log", "log_cr"):
        argv += ["--log", str(tmp_path / ("a\n* * * * * touch pwned" if where == "log" else "a\rb"))]
    if where == "submit_to":
        argv += ["--submit-to", "http://127.0.0.1:8265\n* * * * * touch pwned"]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert "control character" in captured.err and captured.out == "" and len(captured.err.splitlines()) == 1
    assert not (tmp_path / "units").exists()


def test_percent_signs_reach_the_job_as_written(tmp_path, capsys, monkeypatch):
    """A ``%`` in the config name and the log path: cron's and systemd's unescaping give back the
    very path, and the line then runs (nothing listens at the address: the submit stops at once,
    into that log). The working directory shipped is a repository of its own under that name."""
    folder = tmp_path / "100%"
    (folder / "jobs").mkdir(parents=True)
    (folder / "jobs" / "__init__.py").write_text("")
    (folder / "xai_ray").symlink_to(ROOT / "xai_ray")  # a repository: jobs/ and the package
    monkeypatch.chdir(folder)
    config = folder / "jobs" / "night%ly.yaml"
    config.write_text(f"store: {tmp_path / 'store'}\n")
    log = folder / "log%d.log"
    common = [str(config), "--log", str(log), "--submit-to", "http://127.0.0.1:9", "--dry-run"]
    if shutil.which("crontab") is not None:
        assert cli.main(["schedule", *common]) == 0
        command, stdin = _cron_command(capsys.readouterr().out.strip().splitlines()[-1])
        assert stdin == "" and f">> {log} 2>&1" in command and command.endswith(config.name)
    monkeypatch.setenv("XAI_RAY_SYSTEMD_DIR", str(tmp_path / "units"))
    assert cli.main(["schedule", "--systemd", *common]) == 0
    out = capsys.readouterr().out
    described = next(row for row in out.splitlines() if row.startswith("Description="))
    assert described == f"Description=xai-ray nightly job ({str(config).replace('%', '%%')})"
    exec_line = next(row for row in out.splitlines() if row.startswith("ExecStart="))[len("ExecStart=") :]
    # systemd.service(5): "%%" is "%", "$$" is "$"; undoubled, "%d" would be a specifier.
    assert "%" not in exec_line.replace("%%", "")
    subprocess.run(exec_line.replace("%%", "%").replace("$$", "$"), shell=True, timeout=120)
    assert "cannot reach the Ray Jobs API at http://127.0.0.1:9" in log.read_text()


def test_a_local_schedule_of_a_config_that_cannot_run_is_refused_at_once(tmp_path, capsys):
    """A YAML list, a self-naming alias, `--set limit=abc` and an unknown key each printed an entry
    to install; the job would only have failed at 02:00."""
    cases = {"list.yaml": ("- a\n- b\n", [], "must hold a mapping"), "rec.yaml": ("extra: &a {x: *a}\n", [], "alias")}
    cases["ok.yaml"] = ("model: minilm\n", ["limit=abc"], "limit must be an integer")
    cases["ok2.yaml"] = ("model: minilm\n", ["bogus_key=1"], "unknown config key 'bogus_key'")
    cases["limit.yaml"] = ("model: minilm\nlimit: 200\n", [], "would score the same 200 documents")
    for name, (text, sets, says) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        argv = ["schedule", str(path), "--dry-run", *(arg for item in sets for arg in ("--set", item))]
        assert cli.main(argv) == 2, name
        err = capsys.readouterr().err
        assert says in err and len(err.splitlines()) == 1, err
    (tmp_path / "fine.yaml").write_text("model: minilm\n")
    assert cli.main(["schedule", str(tmp_path / "fine.yaml"), "--dry-run"]) == 0


def test_a_nights_submission_id_names_its_store():
    """Every nightly job of a night had the id xai-ray-nightly-DATE: a second nightly configuration
    (its own store, as the docs ask) submitted the same night was taken for the first and skipped,
    with exit 0. The id now names the store too."""
    from xai_ray.ops.submit import night_id

    a, b = night_id("2026-11-26", "/data/store-a"), night_id("2026-11-26", "/data/store-b")
    assert re.fullmatch(r"xai-ray-nightly-2026-11-26-[0-9a-f]{8}", a) and a != b
    assert night_id("2026-11-26", "/data/store-a") == a and night_id("2026-11-27", "/data/store-a") != a


def test_one_store_spelled_two_ways_is_one_nights_job(tmp_path):
    """A trailing slash made the same store's night a second job."""
    from xai_ray.ops.submit import nightly_store

    config = tmp_path / "nightly.yaml"
    config.write_text("data: /data/imdb.parquet\nstore: /srv/store\n")
    spellings = ["store=/srv/store/", "store=/srv/./store", "store=/srv/store"]
    assert {nightly_store(config, [s]) for s in spellings} == {"/srv/store"}
    assert nightly_store(config, ["store=s3://b/x/"]) == nightly_store(config, ["store=s3://b/x"]) == "s3://b/x"
