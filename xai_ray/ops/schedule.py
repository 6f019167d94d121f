"""``xai-ray schedule``: run the nightly job every night, from cron or a systemd user timer.

The entry runs ``xai-ray nightly CONFIG`` on this machine (inside scripts/loopback.sh when the
repository has it, so a local Ray head stays on loopback), or with ``--submit-to ADDRESS``
``xai-ray submit CONFIG --kind nightly --address ADDRESS`` (the date-based submission id makes a
second submission the same night a no-op). Entries carry a marker with a hash of the config's
absolute path, so ``--remove`` takes out exactly this config's entry and reinstalling replaces it.
``XAI_RAY_SYSTEMD_DIR`` points the timer's unit files elsewhere than ~/.config/systemd/user (tests);
``systemctl --user`` is then left alone.

Every value written into an entry or a unit file is data: a control character in any of them
(a newline would start a line of its own: another job) is refused, and ``%`` is escaped for cron
(``\\%``, which cron turns back into ``%``) and for systemd (``%%``; ``$`` and ``\\`` doubled too,
since systemd expands variables and C escapes in ``ExecStart``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

from xai_ray.config import ConfigError, resolve

MARKER = "# xai-ray-nightly:"


class ScheduleError(ConfigError):
    """The schedule cannot be installed as asked; the message says why."""


def schedule(
    config: str,
    at: str = "02:00",
    submit_to: str | None = None,
    systemd: bool = False,
    log: str | None = None,
    dry_run: bool = False,
    remove: bool = False,
    sets: list[str] | None = None,
) -> str:
    """Install, print (``dry_run``) or remove the nightly entry of ``config``; returns what to print."""
    path = Path(config).resolve()
    check_values(
        {
            "the config file name": str(path),
            "--log": log,
            "--submit-to": submit_to,
            **{f"--set {item.partition('=')[0]}": item for item in sets or []},
        }
    )
    if not remove and not path.is_file():
        raise ScheduleError(f"config file {config!r} does not exist")
    hour, minute = parse_time(at)
    if submit_to and not remove:  # what `submit` would refuse fails now, not at 2 a.m.
        from xai_ray.ops.submit import check_submission

        check_submission(str(path), "nightly", sets, None, submit_to)
    elif not remove:  # the config and --set read as the job will read them: a bad key fails now too
        from xai_ray.ops.nightly import check_nightly

        check_nightly(resolve(path, None, sets))
    tag = job_tag(path)
    log_path = Path(log).expanduser().resolve() if log else Path.home() / ".local" / "state" / "xai-ray" / "nightly.log"
    line = command_line(path, submit_to, log_path, sets)
    check_values({"the command line (repository folder, Python or --log path)": line})
    use_systemd = systemd or shutil.which("crontab") is None
    if use_systemd:
        return _systemd(tag, path, hour, minute, line, dry_run, remove)
    entry = f"{minute} {hour} * * * {cron_escape(f'{line} {MARKER}{tag} {path.name}')}"
    if dry_run:
        return (
            f"would remove the crontab entry marked {MARKER}{tag}"
            if remove
            else f"would install into the crontab (replacing any entry marked {MARKER}{tag}):\n{entry}"
        )
    kept = [row for row in read_crontab().splitlines() if f"{MARKER}{tag}" not in row]
    if remove:
        write_crontab(kept)
        return f"removed the crontab entry marked {MARKER}{tag}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    write_crontab([*kept, entry])
    return f"installed into the crontab:\n{entry}"


def check_values(values: dict[str, str | None]) -> None:
    """Refuse a control character (newline, carriage return, tab, ...) in any value written out."""
    for name, value in values.items():
        bad = next((ch for ch in value or "" if unicodedata.category(ch) in ("Cc", "Zl", "Zp")), None)
        if bad is not None:
            raise ScheduleError(
                f"{name} holds a control character ({bad!r}), which would change the schedule file's lines; remove it"
            )


def cron_escape(command: str) -> str:
    """A crontab command field: cron turns an unescaped ``%`` into a newline (stdin for the job)."""
    return command.replace("%", "\\%")


def systemd_escape(value: str, exec_line: bool = False) -> str:
    """A unit file value: ``%`` starts a specifier; in ``ExecStart`` ``$`` expands a variable and
    ``\\`` starts a C escape, so each is doubled to stand for itself."""
    if exec_line:
        value = value.replace("\\", "\\\\").replace("$", "$$")
    return value.replace("%", "%%")


def parse_time(at: str) -> tuple[int, int]:
    found = re.fullmatch(r"(\d{1,2}):(\d{2})", at.strip())
    if not found or int(found.group(1)) > 23 or int(found.group(2)) > 59:
        raise ScheduleError(f"--at must be HH:MM (00:00 to 23:59), got {at!r}")
    return int(found.group(1)), int(found.group(2))


def job_tag(config: Path) -> str:
    return hashlib.sha256(str(config).encode()).hexdigest()[:12]


def command_line(config: Path, submit_to: str | None, log: Path, sets: list[str] | None = None) -> str:
    """The shell line cron or systemd runs: cd to the repository, run, append the output to ``log``."""
    from xai_ray.ops.submit import find_working_dir

    try:
        root = find_working_dir()
    except ConfigError:
        root = config.parent
    python = [sys.executable, "-m", "xai_ray.cli"]
    overrides = [word for item in sets or [] for word in ("--set", item)]
    if submit_to:
        words = [*python, "submit", str(config), "--kind", "nightly", "--address", submit_to, *overrides]
    else:
        words = [*python, "nightly", str(config), *overrides]
        loopback = root / "scripts" / "loopback.sh"
        if loopback.is_file():
            words = ["bash", str(loopback), *words]
    return f"cd {shlex.quote(str(root))} && {shlex.join(words)} >> {shlex.quote(str(log))} 2>&1"


def read_crontab() -> str:
    done = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    if done.returncode != 0:
        if "no crontab" in done.stderr.lower():
            return ""
        raise ScheduleError(f"crontab -l failed: {done.stderr.strip()}")
    return done.stdout


def write_crontab(rows: list[str]) -> None:
    text = "".join(f"{row}\n" for row in rows)
    done = subprocess.run(["crontab", "-"], input=text, capture_output=True, text=True)
    if done.returncode != 0:
        raise ScheduleError(f"crontab - failed: {done.stderr.strip()}")


def unit_dir() -> Path:
    return Path(os.environ.get("XAI_RAY_SYSTEMD_DIR") or Path.home() / ".config" / "systemd" / "user")


def units(tag: str, config: Path, hour: int, minute: int, line: str) -> dict[str, str]:
    name = f"xai-ray-nightly-{tag}"
    described = systemd_escape(str(config))
    service = (
        f"[Unit]\nDescription=xai-ray nightly job ({described})\n\n[Service]\nType=oneshot\n"
        f"ExecStart=/bin/bash -c {systemd_escape(shlex.quote(line), exec_line=True)}\n"
    )
    timer = (
        f"[Unit]\nDescription=xai-ray nightly job ({described}) at {hour:02d}:{minute:02d}\n\n[Timer]\n"
        f"OnCalendar=*-*-* {hour:02d}:{minute:02d}:00\nPersistent=true\n\n[Install]\nWantedBy=timers.target\n"
    )
    return {f"{name}.service": service, f"{name}.timer": timer}


def _systemd(tag: str, config: Path, hour: int, minute: int, line: str, dry_run: bool, remove: bool) -> str:
    folder, files = unit_dir(), units(tag, config, hour, minute, line)
    timer = next(name for name in files if name.endswith(".timer"))
    manage = "XAI_RAY_SYSTEMD_DIR" not in os.environ and shutil.which("systemctl") is not None
    if dry_run:
        if remove:
            return f"would remove {', '.join(str(folder / n) for n in files)}"
        return "\n".join(f"would write {folder / name}:\n{text}" for name, text in files.items())
    if remove:
        if manage:
            _systemctl("disable", "--now", timer)
        for name in files:
            (folder / name).unlink(missing_ok=True)
        return f"removed {timer} and its service from {folder}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    if manage and _systemctl("daemon-reload") and _systemctl("enable", "--now", timer):
        return f"installed and started {folder / timer}"
    return (
        f"wrote {folder / timer} and its service; start it with `systemctl --user daemon-reload && "
        f"systemctl --user enable --now {timer}`"
    )


def _systemctl(*args: str) -> bool:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True).returncode == 0
