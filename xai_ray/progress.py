"""Progress with an ETA for the long commands, and where the libraries' noise goes.

On a terminal a command shows a bar (tqdm) with rate and ETA; anywhere else (a log file, cron, a
CI job) it writes one line at most every ``LINE_EVERY_S`` seconds, plus one at the end. ``--quiet``
turns both off. The ETA is the remaining count over the mean rate since the start (Ray Data
delivers in bursts, so a recent-window rate would jump around). A ``heartbeat`` bar also writes a
line when nothing arrives for ``LINE_EVERY_S`` (actors starting, a first batch of long reviews), and
every line also goes to the run's log file, bars and ``--quiet`` included: a log read from afar
shows what is running, how far and for how long.

Ray's and setuptools' chatter (the C++ core worker's warnings, Ray Data's plan logs, deprecation
warnings) goes to a log file, not to the user: ``route_noise(path)`` sends Python warnings and the
``ray`` loggers there, and ``quiet_ray_env()`` keeps the C++ backend's warnings off stderr (Ray still
writes them to its own session logs under /tmp/ray/session_latest/logs).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from xai_ray.terminal import VisibleFormatter

log = logging.getLogger("xai_ray")


def _every_s(text: str | None, default: float = 30.0) -> float:
    """``XAI_RAY_PROGRESS_EVERY_S`` as seconds: a positive number, else ``default`` with a warning
    (read when the package is imported: a typo must not stop every command, ``--help`` included)."""
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        warnings.warn(
            f"XAI_RAY_PROGRESS_EVERY_S={text!r} is not a positive number of seconds; using {default:g}", stacklevel=2
        )
        return default
    return value


LINE_EVERY_S = _every_s(os.environ.get("XAI_RAY_PROGRESS_EVERY_S"))
_state: dict = {"quiet": False, "bars": None, "handler": None}  # bars None: bars on a terminal only


def configure(quiet: bool = False, bars: bool | None = None) -> None:
    """``quiet``: no progress at all; ``bars``: force bars on (True) or lines (False); None: by terminal."""
    _state["quiet"], _state["bars"] = bool(quiet), bars


def is_quiet() -> bool:
    return _state["quiet"] or os.environ.get("XAI_RAY_QUIET", "").strip().lower() in ("1", "true", "yes", "on")


def format_seconds(seconds: float) -> str:
    """``75`` -> ``1 min 15 s``; ``3720`` -> ``1 h 02 min``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def eta(done: float, total: float, elapsed: float) -> float | None:
    """Seconds left at the mean rate so far; None before anything is done."""
    if done <= 0 or total <= 0 or elapsed <= 0:
        return None
    return max(0.0, (total - done) * elapsed / done)


class Progress:
    """``with Progress(total, "scoring", "documents") as p: p.update(n)``; also ``p.set(done)``.

    ``heartbeat``: a line every ``every`` seconds even when nothing arrives, saying ``waiting`` (what
    runs meanwhile) until the first item is done."""

    def __init__(
        self,
        total: int | float | None,
        what: str,
        unit: str = "items",
        every: float | None = None,
        stream=None,
        heartbeat: bool = False,
        waiting: str = "",
    ) -> None:
        every = LINE_EVERY_S if every is None else every  # read now: a test may have lowered it
        self.total, self.what, self.unit, self.every, self.waiting = total, what, unit, every, waiting
        self.stream = stream or sys.stderr
        self.done: float = 0
        self.started = self.last_line = time.perf_counter()
        self.bar = None
        self.lines: list[str] = []  # what was written as lines (tests read it)
        self.shown: float = 0  # the count the last line showed
        self.lock = threading.Lock()  # the heartbeat thread and the caller both write lines
        self.stopped = threading.Event()
        if is_quiet():
            self.mode = "quiet"
        elif _state["bars"] if _state["bars"] is not None else _isatty(self.stream):
            self.mode = "bar"
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total, desc=what, unit=f" {unit}", file=self.stream, dynamic_ncols=True, smoothing=0.0
            )  # smoothing 0: the mean rate, as the lines use
        else:
            self.mode = "lines"
        if heartbeat and every > 0:
            threading.Thread(target=self._beat, name=f"progress: {what}", daemon=True).start()

    def _beat(self) -> None:
        """Until closed: a line whenever ``every`` seconds passed without one."""
        while not self.stopped.wait(max(0.05, self.every - (time.perf_counter() - self.last_line))):
            with self.lock:
                if self.stopped.is_set() or time.perf_counter() - self.last_line < self.every:
                    continue
                if self.bar is not None:
                    self.bar.refresh()  # the bar's elapsed time moves on the terminal
                    self._log(self.line())
                    self.last_line = time.perf_counter()
                else:
                    self._line()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close(failed=exc[0] is not None)

    def update(self, n: float = 1) -> None:
        self.set(self.done + n)

    def set(self, done: float) -> None:
        with self.lock:
            step, self.done = done - self.done, done
            if self.bar is not None:
                self.bar.update(step)
                if time.perf_counter() - self.last_line >= self.every:
                    self._log(self.line())
                    self.last_line = time.perf_counter()
            elif time.perf_counter() - self.last_line >= self.every:
                self._line()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        of = f"/{_count(self.total)}" if self.total else ""
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        left = eta(self.done, self.total or 0, elapsed)
        tail = f", ETA {format_seconds(left)}" if left is not None and self.done < (self.total or 0) else ""
        if self.done == 0 and self.waiting:
            tail += f"; {self.waiting}"
        return (
            f"{self.what}: {_count(self.done)}{of} {self.unit}{share}, {rate:.3g} {self.unit}/s, "
            f"{format_seconds(elapsed)} elapsed{tail}"
        )

    def _line(self) -> None:
        text = self.line()
        if self.mode == "lines":
            self.lines.append(text)
            try:
                print(f"xai-ray: {text}", file=self.stream, flush=True)
            except (ValueError, OSError):  # the stream closed under it as the process ends (SIGTERM)
                return
        self._log(text)  # quiet too: the log file is not the terminal
        self.last_line, self.shown = time.perf_counter(), self.done

    @staticmethod
    def _log(text: str) -> None:
        """A progress line into the run's log file (``route_noise``) only: stderr has its own."""
        handler = _state.get("handler")
        if handler is not None:
            handler.handle(logging.LogRecord("xai_ray.progress", logging.INFO, __file__, 0, text, None, None))

    def close(self, failed: bool = False) -> None:
        self.stopped.set()
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
                self._log(self.line())
            elif self.mode in ("lines", "quiet") and not failed and self.done != self.shown:
                self._line()  # the final count, whatever the interval
            self.mode = "closed" if self.mode != "quiet" else "quiet"


def _count(value) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


RAY_DATA_LOGGING = Path(__file__).parent / "ray_data_logging.yaml"


def quiet_ray_env() -> None:
    """Before Ray starts: its C++ backend logs errors only (the rest stays in its session logs under
    /tmp/ray/session_latest/logs), and Ray Data logs to its ray-data.log, errors only on the console.
    A value the user set already is kept."""
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    os.environ.setdefault("RAY_DATA_LOGGING_CONFIG", str(RAY_DATA_LOGGING))


def route_ray_loggers() -> None:
    """Ray's Python loggers (set up when ray is imported and initialised) into the run's log file."""
    handler = _state.get("handler")
    names = [name for name in list(logging.root.manager.loggerDict) if name == "ray" or name.startswith("ray.")]
    for name in names:
        if name == "ray.data" or name.startswith("ray.data."):
            continue  # Ray Data's own config (RAY_DATA_LOGGING_CONFIG) keeps it to errors on the console
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if isinstance(old, logging.StreamHandler) and not isinstance(old, logging.FileHandler):
                logger.removeHandler(old)
        if handler is not None and name == "ray" and handler not in logger.handlers:
            logger.addHandler(handler)
        if name == "ray":
            logger.propagate = False


def open_log(path: str | Path) -> int:
    """A descriptor appending to the log file ``path``, never through a link: a store's log folder
    may be shared, and a link planted there could aim the log at any file the job may write."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise OSError(errno.ELOOP, "a link, not a file (a log is never written through one)", str(path)) from None


class _LogFile(logging.FileHandler):
    """``logging.FileHandler`` opening its file with ``open_log``."""

    def _open(self):
        return open(open_log(self.baseFilename), "a", encoding=self.encoding, errors=self.errors)


NOISY_LOGGERS = ("ray", "ray.train", "ray.tune", "py.warnings", "setuptools", "filelock", "urllib3")


def route_noise(path: str | Path) -> Path:
    """Send Python warnings (deprecations included, each once) and the libraries' loggers to ``path``,
    not to the terminal. Our own ``xai_ray`` log lines go there too (and stay on stderr)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    previous = _state.get("handler")
    if previous is not None:  # a second run in one process (a notebook): its own log file
        for name in (*NOISY_LOGGERS, "xai_ray"):
            logging.getLogger(name).removeHandler(previous)
        previous.close()
    handler = _LogFile(path, encoding="utf-8")
    _state["handler"] = handler
    handler.setFormatter(VisibleFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.DEBUG)
    # warnings.warn -> the py.warnings logger. Re-armed on every call: a host (a notebook kernel, a test
    # runner) may have put its own ``showwarning`` back since the last run, and captureWarnings(True)
    # alone is a no-op once logging holds a saved original.
    logging.captureWarnings(False)
    logging.captureWarnings(True)
    warnings.simplefilter("default", DeprecationWarning)  # shown once per place: in the log file, not hidden
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if isinstance(old, logging.StreamHandler) and not isinstance(old, logging.FileHandler):
                logger.removeHandler(old)  # Ray's own console handlers
        logger.addHandler(handler)
        logger.propagate = False
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
    logging.getLogger("xai_ray").addHandler(handler)
    quiet_ray_env()
    return path


@contextmanager
def native_stderr_into(path: str | Path):
    """Inside: what C/C++ code writes to file descriptor 2 (Ray's core worker: "Set ray log level",
    "constructor arguments in the object store"; the Ray processes started meanwhile) goes to ``path``,
    while Python's ``sys.stderr`` (our log lines, bars, errors) still reaches the terminal.

    Only when ``sys.stderr`` is the process's own stderr: a notebook kernel or pytest's capture
    replace it, and their fd 2 is theirs to manage.
    """
    if sys.stderr is not sys.__stderr__ or _fileno(sys.stderr) != 2:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    target = open_log(path)
    old = sys.stderr
    terminal = os.fdopen(os.dup(saved), "w", buffering=1, encoding=old.encoding, errors=old.errors)
    handlers = [h for h in logging.root.handlers if isinstance(h, logging.StreamHandler) and h.stream is old]
    os.dup2(target, 2)
    sys.stderr = terminal
    for handler in handlers:
        handler.setStream(terminal)
    try:
        yield
    finally:
        terminal.flush()
        os.dup2(saved, 2)
        sys.stderr = old
        for handler in handlers:
            handler.setStream(old)
        terminal.close()
        os.close(saved)
        os.close(target)


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
