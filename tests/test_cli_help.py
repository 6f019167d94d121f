"""The command line explains itself: every flag has help with its default, --help-config lists every
config key (enumerated here from the config class), --version, and nightly takes run's flags."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

import pytest
import yaml

from xai_ray import __version__, cli
from xai_ray.config import RunConfig
from xai_ray.config_help import MEANINGS, SECTIONS
from xai_ray.methods import REGISTRY


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _help_config(capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "--help-config"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_help_config_lists_every_key_with_its_default_and_meaning(capsys):
    text = _help_config(capsys)
    lines = text.splitlines()
    for f in fields(RunConfig):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        header = [i for i, line in enumerate(lines) if line.strip().startswith(f"{f.name} (default: ")]
        assert len(header) == 1, f"{f.name} is not listed once in --help-config"
        shown = lines[header[0]].strip()[len(f"{f.name} (default: ") : -1]
        # the printed default reads back (as YAML, as --set reads it) to the class's default
        expected = list(default) if isinstance(default, tuple) else default
        assert yaml.safe_load(shown) == expected, f.name
        meaning = lines[header[0] + 1].strip()
        assert meaning and meaning != "(undocumented)", f"{f.name} has no meaning in config.MEANINGS"
    # and nothing documented that the class does not have
    assert set(MEANINGS) == {f.name for f in fields(RunConfig)}


def test_nightly_lists_the_same_keys(capsys):
    with pytest.raises(SystemExit):
        cli.main(["nightly", "--help-config"])
    assert capsys.readouterr().out == _help_config(capsys)


def _options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def test_every_flag_has_help_with_its_default_or_says_required():
    missing = []
    for name, parser in _subparsers().items():
        for action in _options(parser):
            text = (action.help or "").lower()
            if action.dest == "help_config":
                continue  # an action, not a setting
            if "default" not in text and "required" not in text:
                missing.append(f"{name} {action.option_strings[-1]}")
    assert not missing, f"flags without help naming their default: {missing}"


def test_methods_help_lists_every_registered_method():
    run = _subparsers()["run"]
    (methods,) = [a for a in run._actions if a.dest == "methods"]
    for name in REGISTRY:
        assert name in methods.help


def test_flag_defaults_in_help_are_the_config_class_defaults():
    run = _subparsers()["run"]
    defaults = {f.name: f.default for f in fields(RunConfig)}
    for action in _options(run):
        if action.dest in ("split", "model", "max_length", "batch_size", "store", "data"):
            assert f"(default: {defaults[action.dest]})" in " ".join(action.help.split()), action.dest


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"xai-ray {__version__}"


def test_nightly_accepts_every_flag_of_run():
    parsers = _subparsers()
    run_only = {"--config", "--run-id", "--resume", "--no-report"}  # the night names its run and always reports
    run_flags = {s for a in _options(parsers["run"]) for s in a.option_strings} - run_only
    nightly_flags = {s for a in _options(parsers["nightly"]) for s in a.option_strings}
    assert run_flags <= nightly_flags, sorted(run_flags - nightly_flags)


def test_nightly_flags_reach_its_config(tmp_path):
    from xai_ray.cli.jobs import nightly_config

    config = tmp_path / "n.yaml"
    config.write_text("data: a.parquet\nmodel: minilm\nmax_length: 256\nlimit: 50\n")
    args = cli.build_parser().parse_args(
        [
            "nightly",
            str(config),
            "--max-length",
            "64",
            "--methods",
            "raw",
            "--max-error-share",
            "0.1",
            "--set",
            "long_text=window",
        ]
    )
    cfg = nightly_config(args)
    # flags over the YAML, --set over both; keys no flag named keep the YAML's value
    assert (cfg.max_length, cfg.methods, cfg.limit, cfg.max_error_share, cfg.long_text) == (
        64,
        ("raw",),
        50,
        0.1,
        "window",
    )


def test_quiet_is_accepted_before_and_after_the_command():
    parser = cli.build_parser()
    assert parser.parse_args(["-q", "report", "--out", "x.html"]).quiet is True
    assert parser.parse_args(["report", "--out", "x.html", "--quiet"]).quiet is True
    assert parser.parse_args(["report", "--out", "x.html"]).quiet is False


def test_every_key_sits_in_exactly_one_section_of_help_config(capsys):
    placed = [key for keys in SECTIONS.values() for key in keys]
    assert sorted(placed) == sorted(f.name for f in fields(RunConfig))  # each once, none left out
    text = _help_config(capsys)
    assert "[methods: integrated_gradients]\n  ig_steps (default: 20)" in text  # a method's option under it


@pytest.mark.parametrize("command", ["run", "explain"])
def test_every_command_taking_methods_lists_every_method(command):
    (methods,) = [a for a in _subparsers()[command]._actions if "--methods" in a.option_strings]
    listed = methods.help.split("from: ", 1)[1].split(" (default", 1)[0].split(", ")
    assert listed == sorted(REGISTRY)


@pytest.mark.parametrize(
    "fault, status, sentence",
    [
        (OSError(28, "No space left on device"), 2, "xai-ray: no space left on the device; free some"),
        (KeyboardInterrupt(), 130, "xai-ray: interrupted"),
        (RuntimeError("Query interrupted"), 130, "xai-ray: interrupted"),  # Ctrl-C inside a DuckDB query
    ],
)
def test_a_full_disk_and_ctrl_c_end_a_command_in_one_line(fault, status, sentence, monkeypatch, capsys):
    """Both ended a run with a traceback (the run's committed parts were kept, and `--resume` finished
    it): now one line and the status a shell expects (130 for Ctrl-C)."""
    import importlib

    entry = importlib.import_module("xai_ray.cli.main")  # the module (``cli.main`` is its function)

    def fails(args):
        raise fault

    monkeypatch.setitem(entry.COMMANDS, "sql", fails)
    assert cli.main(["sql", "--store", ".", "select 1"]) == status
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(sentence), said
    assert "--resume" not in said[0]  # a read-only command has no run to resume
    # a run's full disk or Ctrl-C points at the resume that finishes it, a night's at its rerun
    monkeypatch.setitem(entry.COMMANDS, "run", fails)
    assert cli.main(["run", "--store", "."]) == status
    assert "`xai-ray run --resume RUN_ID --store STORE` finishes it" in capsys.readouterr().err
    monkeypatch.setitem(entry.COMMANDS, "nightly", fails)
    assert cli.main(["nightly", "night.yaml"]) == status
    assert "the same `xai-ray nightly` again finishes it" in capsys.readouterr().err


@pytest.mark.parametrize("run_id", ["", "  "])
def test_an_empty_resume_id_is_refused_not_a_new_run(run_id, tmp_path, capsys):
    """`--resume ""` started a new run with the default config (and tried the Hub's IMDB)."""
    assert cli.main(["run", "--resume", run_id, "--store", str(tmp_path)]) == 2
    assert "--resume needs the id of the unfinished run" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_every_command_takes_quiet_after_its_name_too():
    """`run -q`, `evaluate -q` and `report -q` were taken; `topk -q`, `sql -q` and `explain -q` were
    "unrecognized arguments"."""
    from xai_ray.cli.main import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"run", "topk", "sql", "explain", "report", "nightly", "schedule", "submit"} <= set(commands)
    for name, command in commands.items():
        assert "-q" in command._option_string_actions, name


@pytest.mark.parametrize("command", [["report", "--store", "s"], ["explain", "--model", "minilm", "a text"]])
def test_an_empty_out_is_refused_by_name(command, capsys):
    """`report --out ''` said "--out '.' is a folder"."""
    with pytest.raises(SystemExit) as caught:
        cli.main([*command, "--out", ""])
    assert caught.value.code == 2 and "argument --out: must not be empty" in capsys.readouterr().err


def test_a_command_whose_ray_never_stops_still_ends(tmp_path):
    """Ctrl-C landing while the main thread imported a module left its import lock held; the Ray
    shutdown started after publishing, importing too, waited on it forever, and the interpreter
    waited for the shutdown: the command hung after saying it was interrupted. A shutdown that never
    ends (standing in for that one) now holds the command for RELEASE_WAIT_S at most."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import importlib, sys, time\n"
        "import ray\n"
        "from xai_ray import runtime\n"
        "entry = importlib.import_module('xai_ray.cli.main')\n"
        "ray.is_initialized = lambda: True\n"
        "ray.shutdown = lambda: time.sleep(3600)\n"
        "runtime.RELEASE_WAIT_S = 1.0\n"
        "def command(args):\n"
        "    runtime.release_if_done()\n"
        "    return 0\n"
        "entry.COMMANDS['sql'] = command\n"
        "sys.argv = ['xai-ray', 'sql', '--store', '.', 'select 1']\n"
        "sys.exit(entry.console())\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Ray did not stop within 1 s; the command ends without waiting for it" in done.stderr
