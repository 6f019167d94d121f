"""User SQL in a child process of its own: the one way ``xai-ray sql`` and ``xai_ray.open_store``
run it.

DuckDB's ``memory_limit`` leaves out what a query builds outside its buffer manager (``select
unnest(range(50000000))`` under 64MB grew to 3.5 GB; ``repeat('x', 2147483647)`` is a 2 GB
value), and an interrupt is only seen between vectors. So the child opens the store's sandboxed
connection, caps its own data segment (``RLIMIT_DATA``, ``limits.process_cap``) and runs the
guarded statement (``user_sql.stream_arrow``); the parent kills it at the timeout, whatever it is
doing. Rows come back as an Arrow IPC stream on the child's stdout, each batch checked against
``max_output`` and the row size on the child's side, so neither process holds more than its
caps; a refusal comes back as one line on its stderr. The parent only parses with DuckDB.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa

from xai_ray.query.limits import Limits, QueryError, process_cap
from xai_ray.query.user_sql import batches_or_empty

MARK = "xai-ray-refused: "  # the child's one sentence on stderr starts with this
BATCH_ROWS = 2048  # DuckDB's vector size: a batch of long rows stays small

READY = b"\x01"  # the child's first byte: the store is open, the query starts
OPEN_S = 60  # seconds the child may take to start and open the store, beyond --timeout
# The child starts isolated (-I: no current folder, no PYTHONPATH, no user site on its path) and
# gets the parent's own path, so it imports this xai_ray and no module planted where it runs.
CHILD = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from xai_ray.query.isolated import main; sys.exit(main())"
)


def run(store, text: str, limits: Limits, params=None) -> pa.Table:
    """The whole result of ``text`` as one Arrow table (at most ``limits.max_output`` bytes)."""
    batches = list(stream(store, text, limits, params))
    return pa.Table.from_batches(batches, schema=batches[0].schema)


def stream(store, text: str, limits: Limits, params=None) -> Iterator[pa.RecordBatch]:
    """Record batches of ``text`` as the child sends them (at least one, maybe empty); the child is
    killed when the caller stops reading, and at ``limits.timeout_s`` seconds."""
    request = _request(store, text, limits, params)
    _precheck(text)
    path = [str(Path(__file__).resolve().parents[2])] + [p for p in sys.path if p]
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            [sys.executable, "-I", "-c", CHILD, json.dumps(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        stopped = threading.Event()
        timers: list[threading.Timer] = []

        def arm(seconds: float) -> None:
            for timer in timers:
                timer.cancel()
            timers.append(threading.Timer(seconds, _stop, (child, stopped)))
            timers[-1].start()

        # The clock of --timeout starts when the query does: the child's start and the store's views
        # took about 3 s, and `--timeout 1` stopped even `select 1`. Until then, OPEN_S more at most.
        arm(limits.timeout_s + OPEN_S)
        try:
            yield from _receive(child, request, lambda: arm(limits.timeout_s))
            if child.wait() != 0:
                raise EOFError
        except (EOFError, OSError, pa.ArrowInvalid):  # the child ended early: it says why, or its status does
            raise QueryError(_why(child, stopped, errors, limits, len(timers) > 1)) from None
        finally:
            for timer in timers:
                timer.cancel()
            if child.poll() is None:
                child.kill()
            child.wait()
            child.stdout.close()


def _request(store, text: str, limits: Limits, params) -> bytes:
    if not isinstance(text, str):
        raise QueryError(f"a query must be a string of SQL, got {type(text).__name__}")
    if params is not None and not isinstance(params, (list, tuple, dict)):
        raise QueryError(f"query parameters must be a list or a dict, got {type(params).__name__}")
    try:
        return json.dumps(
            {"store": str(store), "query": text, "params": params, "limits": asdict(limits)}, allow_nan=False
        ).encode()
    except (TypeError, ValueError):
        raise QueryError(
            "query parameters must be strings, whole or finite numbers, booleans, None, or lists and dicts of them"
        ) from None


def _precheck(text: str) -> None:
    """The guard, here first (it only parses): a refused statement costs no process. The child
    judges it again on the connection that runs it."""
    import duckdb

    from xai_ray.query.user_sql import check_read_only

    if not check_read_only(duckdb.connect(":memory:"), text):
        raise QueryError("the query is empty")


def _receive(child: subprocess.Popen, request: bytes, querying) -> Iterator[pa.RecordBatch]:
    """The child's batches; ``querying()`` is called once the child has opened the store and runs the query."""
    try:
        child.stdin.write(request)
        child.stdin.close()
    except BrokenPipeError:  # the child is gone before reading: its status says why
        raise EOFError from None
    if child.stdout.read(len(READY)) != READY:  # it stopped before the query: it says why
        raise EOFError
    querying()
    yield from batches_or_empty(pa.ipc.open_stream(child.stdout))


def _stop(child: subprocess.Popen, stopped: threading.Event) -> None:
    stopped.set()
    child.kill()


def _why(child: subprocess.Popen, stopped: threading.Event, errors, limits: Limits, querying: bool = True) -> str:
    """One sentence for a child that ended without all its rows (``querying``: its query had begun)."""
    if child.poll() is None:
        child.kill()
    status = child.wait()
    if stopped.is_set() and not querying:
        return f"opening the store took more than {limits.timeout_s + OPEN_S:g} s (--timeout and {OPEN_S} s to open it)"
    if stopped.is_set():
        return f"the query ran past --timeout {limits.timeout_s:g} s and was stopped"
    errors.seek(0)
    said = errors.read().decode("utf-8", "replace").splitlines()
    refused = [line[len(MARK) :] for line in said if line.startswith(MARK)]
    if refused:
        return refused[-1]
    if status < 0:  # a signal: the kernel's or a failed allocation's abort under the cap
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return (
            f"the query's process was ended by {name}, most likely for memory beyond the cap that "
            f"--memory-limit {limits.memory_limit} sets; raise it, or select fewer rows or columns"
        )
    last = said[-1][:300] if said else "no message"
    return f"the query's process failed with exit status {status}: {last}"


def main() -> int:
    """The child: read the request, open the store, cap memory, send the rows (or one sentence)."""
    import duckdb

    from xai_ray.query.connection import open_store
    from xai_ray.query.user_sql import DamagedRead, stream_arrow
    from xai_ray.store import StoreError

    request = json.loads(sys.stdin.buffer.read())
    limits = Limits(**request["limits"])
    out = sys.stdout.buffer
    sent = rows = 0
    try:
        pa.set_cpu_count(limits.threads)
        pa.set_io_thread_count(limits.threads)
        try:
            con = open_store(request["store"], limits=limits)
        except duckdb.Error as err:  # a part whose columns are not those its record lists: no view binds
            return _refuse(
                f"DuckDB failed on the store (a damaged file?): {(str(err).strip().splitlines() or ['?'])[0]}"
            )
        _cap(process_cap(limits), limits)
        out.write(READY)  # the parent's clock of --timeout starts here
        out.flush()
        writer = None
        for batch in stream_arrow(con, request["query"], request["params"], None, BATCH_ROWS):
            sent += batch.nbytes
            if sent > limits.output_bytes:
                raise QueryError(
                    f"the result is larger than --max-output {limits.max_output}; select fewer rows or "
                    "columns, or raise --max-output"
                )
            _check_rows(batch, rows, limits)
            rows += batch.num_rows
            writer = writer or pa.ipc.new_stream(out, batch.schema)
            writer.write_batch(batch)
        writer.close()
        out.flush()
        return 0
    except DamagedRead as err:  # which file: the error does not say
        from xai_ray.query.run_files import first_unreadable

        found = first_unreadable(request["store"])
        where = f"{found} is damaged" if found else "no damaged file was found in 20 s of reading"
        return _refuse(f"{str(err).removesuffix(': a damaged file?')}: {where}; restore that run folder from a copy")
    except (QueryError, StoreError) as err:  # StoreError: a run folder that cannot be read as one
        return _refuse(str(err))
    except (duckdb.IOException, duckdb.InvalidInputException) as err:  # a store file damaged or cut short
        return _refuse(f"a file of the store cannot be read: {(str(err).strip().splitlines() or ['?'])[0]}")

    except MemoryError:
        return _refuse(
            f"the query needs more memory than --memory-limit {limits.memory_limit} allows (DuckDB's limit and "
            "the cap on its process); raise it, or select fewer rows or columns"
        )
    except BrokenPipeError:  # the parent stopped reading: nothing to say
        return 0


def _cap(extra: int, limits: Limits) -> None:
    """Cap the data segment at what it is now plus ``extra`` bytes (Linux counts every private
    writable mapping in it since 4.7: the heap, DuckDB's and Arrow's allocations, thread stacks).
    Also: no core file (a failed allocation's abort would write one into the working folder), and
    CPU seconds a little past what its threads can use in the timeout, in case its parent, which
    kills it at the timeout, is gone."""
    import math
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = math.ceil(limits.timeout_s * (limits.threads + 2)) + 10
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    try:
        with open("/proc/self/status") as status:
            now = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    except (OSError, StopIteration):  # no procfs: the caps that remain are DuckDB's and the timeout
        return
    resource.setrlimit(resource.RLIMIT_DATA, (now + extra, now + extra))


def _check_rows(batch: pa.RecordBatch, first: int, limits: Limits) -> None:
    if batch.nbytes <= limits.row_bytes:  # no row can be larger than its whole batch
        return
    for row in range(batch.num_rows):
        size = batch.slice(row, 1).nbytes
        if size > limits.row_bytes:
            raise QueryError(
                f"row {first + row + 1} of the result holds {size / 1024**2:.0f} MiB, over the {limits.row_bytes // 1024**2} "
                "MiB a row may hold; select a part of its long values (substr, list_slice)"
            )


def _refuse(sentence: str) -> int:
    sys.stderr.write(MARK + " ".join(sentence.split()) + "\n")
    sys.stderr.flush()
    return 2
