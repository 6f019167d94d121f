"""Which files of a published run the views read, and the checks that refuse a damaged run.

A run's part records (``_parts/part-*.json``, ``store.staging``) name the files of each committed
part. ``part_columns`` reads them, with what each file holds, and refuses a run the views would
otherwise read short or wrong without a word: a record that does not read as one, records holding
fewer documents than the manifest counts, a recorded file that is gone, cut short, a symbolic link
or another Parquet file copied over it. ``recorded`` leaves out the files no writer made (a file
manager's copies).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from xai_ray.query.limits import QueryError
from xai_ray.store import layout as store_layout
from xai_ray.store.scores_v2 import TOKEN_TABLE, WORD_TABLE
from xai_ray.store.staging import PARTS, read_record, resized_files, unreadable_files


def part_columns(run: Path, version: int, docs: int | None = None) -> dict[str, tuple[frozenset, frozenset]]:
    """Each file of ``run``'s committed parts (relative to the run) -> the slices it holds and
    those whose shares it keeps, from the parts' records (``_parts/part-*.json``). Refused,
    because the views would read the run short and say nothing:
      - a record that cannot be read (cut short, edited): its files would count as stray copies;
      - records that hold fewer documents than the manifest's ``docs`` count (a record deleted);
      - a file a record names that is gone, cut short, or a symbolic link (never followed);
      - a part written in another store layout than the manifest's ``version`` (a hand-edited
        manifest)."""
    found = {}
    name = run.name.removeprefix(store_layout.RUN_PREFIX)
    counted: int | None = 0  # the documents the records hold; None once a record does not say
    for path in sorted((run / PARTS).glob("part-*.json")):
        record = read_record(path)
        if record is None:
            raise QueryError(
                f"run {name!r} is damaged: {PARTS}/{path.name} is not a part record (cut short or edited), "
                f"so the rows of its part would be left out; restore the run folder from a copy, or delete it "
                f"({run}) and run it again"
            )
        written = record.get("layout")
        # a part of errors only reads alike in every layout: a layout-2 run's read errors were written
        # as layout 3's before 2026-11-27, and such a run stays readable
        only_errors = all(str(file).startswith("errors/") for file in record["files"])
        if isinstance(written, int) and written != version and not only_errors:
            raise QueryError(
                f"run {name!r} says store layout {version} in its manifest, but "
                f"{PARTS}/{path.name} was written in layout {written}; restore the manifest or move the run "
                "folder out of the store"
            )
        damaged = unreadable_files(run, record)
        # a link anywhere between the run's folder and the file (a linked table folder too)
        linked = [str(file) for file in record["files"] if not store_layout.inside(run, run / str(file))]
        if damaged or linked:
            what = (
                "is missing or not a whole Parquet file" if damaged else "is a symbolic link, which is never followed"
            )
            raise QueryError(
                f"run {name!r} is damaged: {(damaged or linked)[0]}, which {PARTS}/{path.name} lists, {what}; "
                f"restore the run folder from a copy, or delete it ({run}) and run it again"
            )
        held = (record.get("counts") or {}).get("docs") if isinstance(record.get("counts"), dict) else None
        counted = counted + held if counted is not None and type(held) is int else None
        try:
            described = (frozenset(record.get("slices") or []), frozenset(record.get("shares") or []))
        except TypeError:  # its files are the run's, but what they hold is not said: read by name
            described = None
        foreign = _foreign_file(run, record, held, described)
        if foreign:
            raise QueryError(
                f"run {name!r} is damaged: {foreign[0]}, which {PARTS}/{path.name} lists, is not that part's file "
                f"({foreign[1]}); restore the run folder from a copy, or delete it ({run}) and run it again"
            )
        resized = resized_files(run, record)
        if resized:
            file, size, kept = resized[0]
            raise QueryError(
                f"run {name!r} is damaged: {file}, which {PARTS}/{path.name} lists, is not the file its part wrote "
                f"({size} bytes, where {kept} were written: another file copied over it?); restore the run folder "
                f"from a copy, or delete it ({run}) and run it again"
            )
        for file in record["files"]:
            found[str(file)] = described
    if found and counted is not None and type(docs) is int and counted < docs:
        raise QueryError(
            f"run {name!r} is damaged: the part records in {PARTS} hold {counted} of the {docs} documents its "
            "manifest counts (a record is missing, and its part's rows would be left out); restore the run "
            f"folder from a copy, or delete it ({run}) and run it again"
        )
    if found and counted is not None and type(docs) is int and counted > docs:
        raise QueryError(
            f"run {name!r} is damaged: the part records in {PARTS} hold {counted} documents where its manifest "
            f"counts {docs} (a record and its files copied in from elsewhere would be read as this run's); "
            f"restore the run folder from a copy, or delete it ({run}) and run it again"
        )
    return found


def check_table_totals(run: Path, manifest: dict, info: dict) -> None:
    """Refuse a run whose files, those the views read (``recorded``), hold another number of rows
    than its manifest counts, table by table: ``docs``, ``errors`` (with the evaluation's and the
    rationales'), ``heads``, ``head_similarity`` and ``faithfulness``, and in a run without part
    records its scores too. A sync tool's copy (``part-0-DESKTOP1.parquet``) was read as more of
    the run, a deleted file or a linked one (never read) as less, and every answer changed without
    a word. A file that cannot be read is left to the views' own read, which names it."""
    counts = manifest.get("counts")
    if not isinstance(counts, dict):
        return
    name = run.name.removeprefix(store_layout.RUN_PREFIX)
    for table, expected in _expected_rows(counts).items():
        held = _rows_held(run, info, table)
        if held is None or held == expected:
            continue
        if table == "docs" and not info["parts"]:
            raise QueryError(
                f"run {name!r} has no part records ({PARTS}), so every file under a part's name is read, and its docs "
                f"files hold {held} documents where its manifest counts {expected} (a copy of a part would be read "
                f"as more of the run, a linked or missing one as less); remove the copies, restore {PARTS} from a "
                f"copy of the run, or delete it ({run}) and run it again"
            )
        why = (
            "a copy of one of its files, a sync tool's or a file manager's, would be read as more of the run: remove it"
            if held > expected
            else "a file of it is gone, or a symbolic link, which is never followed: restore it from a copy"
        )
        raise QueryError(
            f"run {name!r} is damaged: its {table} files hold {held} rows where its manifest counts {expected} "
            f"({why}), or delete the run ({run}) and run it again"
        )
    if not info["parts"]:
        _check_unrecorded_scores(run, name, counts, info)


def _expected_rows(counts: dict) -> dict[str, int]:
    """The tables whose rows a manifest counts one for one (a key missing, as in older runs: not checked)."""
    errors = [counts.get("errors"), counts.get("evaluate_errors", 0), counts.get("plausibility_errors", 0)]
    expected = {
        "docs": counts.get("docs"),
        "heads": counts.get("heads"),
        "head_similarity": counts.get("head_similarity"),
    }
    expected["errors"] = sum(errors) if all(type(n) is int for n in errors) else None
    if not any(key.startswith("plausibility") for key in counts):  # the rationales' rows are not counted as rows
        expected["faithfulness"] = counts.get("faithfulness")
    return {table: n for table, n in expected.items() if type(n) is int}


def _rows_held(run: Path, info: dict, table: str) -> int | None:
    """The rows of the files of ``table`` the views read (regular files only: a link or a pipe is
    never opened); None where a footer cannot be read."""
    footers = _footers(run, info, table)
    return None if footers is None else sum(footer.num_rows for footer in footers)


def _footers(run: Path, info: dict, table: str) -> list | None:
    """The footers of the files of ``table`` the views read; None where one cannot be read."""
    found = []
    for file in store_layout.store_files(run, run / table, "*.parquet"):
        if not recorded(run, info, file):
            continue
        try:
            found.append(pq.read_metadata(file))
        except (OSError, pa.ArrowException):
            return None
    return found


def _check_unrecorded_scores(run: Path, name: str, counts: dict, info: dict) -> None:
    """A run without part records: its scores files hold as many rows as its counts give each slice
    (as ``_rows_counted`` checks a part's file), else a part is missing or copied (in layout 1, a
    slice's folder too)."""
    slices = len(info["slices"])
    tokens, words = counts.get("tokens"), counts.get("words")
    if info["layout"] == 1:  # a file per method x layer, a row per token or word of each: the counts exactly
        for table, expected in (("tokens", tokens), ("words", words)):
            held = _rows_held(run, info, table)
            if type(expected) is int and held is not None and held != expected:
                _refuse_unrecorded(run, name, f"{table} files hold {held} rows", str(expected))
        return
    if not slices or type(tokens) is not int or type(words) is not int or tokens % slices or words % slices:
        return
    tokens, words = tokens // slices, words // slices
    ranges = {TOKEN_TABLE: (tokens, tokens + words) if info["layout"] >= 3 else (tokens, tokens)}
    if info["layout"] == 2:
        ranges[WORD_TABLE] = (words, words)
    for table, (low, high) in ranges.items():
        held = _rows_held(run, info, table)
        if held is not None and not low <= held <= high:
            _refuse_unrecorded(
                run, name, f"{table} files hold {held} rows", f"{low}" + (f" to {high}" if high != low else "")
            )
    footers = _footers(run, info, TOKEN_TABLE) if info["layout"] >= 3 else None
    if footers is not None:  # the range above lets a copy of a small part by: its token and word rows, exactly
        for column, expected, what in (("position", tokens, "token"), ("span_id", words, "word")):
            held = _set_in(footers, column)
            if held is not None and held != expected:
                _refuse_unrecorded(run, name, f"{TOKEN_TABLE} files hold {held} {what} rows", f"{expected}")


def _refuse_unrecorded(run: Path, name: str, held: str, expected: str) -> None:
    raise QueryError(
        f"run {name!r} has no part records ({PARTS}), so every file under a part's name is read, and its "
        f"{held} where its manifest's counts give {expected} (a part missing or copied); restore {PARTS} "
        f"from a copy of the run, or delete it ({run}) and run it again"
    )


def _set_in(footers: list, column: str) -> int | None:
    """The rows of the files (``footers``) where ``column`` is set, from their null counts (layout
    3 writes them for ``position`` and ``span_id``); None where a footer does not say."""
    held = 0
    for footer in footers:
        names = footer.schema.names
        if column not in names:
            return None
        index = names.index(column)
        for group in range(footer.num_row_groups):
            chunk = footer.row_group(group).column(index)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count:
                return None
            held += chunk.num_values - stats.null_count
    return held


def _foreign_file(run: Path, record: dict, docs: int | None, described) -> tuple[str, str] | None:
    """A file a record names that holds another table's rows (another Parquet file copied over it:
    its magic bytes are whole, and the views read it as the part): (file, what is wrong), else None.
    Read from each file's footer: a docs part holds the record's documents, a scores part the
    record's slices and as many rows as its counts give each slice, an errors part the errors it
    counts, and none a document id outside the record's."""
    ids = [str(doc_id) for doc_id in record["doc_ids"]]
    first, last = (min(ids), max(ids)) if ids else (None, None)
    expected = _rows_counted(record, described)
    for file in map(str, record["files"]):
        folder = file.split("/")[0]
        if folder not in ("docs", "errors", TOKEN_TABLE, WORD_TABLE):
            continue
        try:
            footer = pq.read_metadata(run / file)
        except (OSError, pa.ArrowException) as err:
            return file, f"its footer cannot be read: {(str(err).splitlines() or [type(err).__name__])[0]}"
        names = footer.schema.names
        if folder == "docs" and (type(docs) is int and footer.num_rows != docs or "doc_id" not in names):
            return file, f"{footer.num_rows} rows where the record counts {docs} documents"
        missing = (
            sorted({f"score:{s}" for s in described[0]} - set(names))
            if folder in (TOKEN_TABLE, WORD_TABLE) and described
            else []
        )
        if missing:
            return file, f"it lacks the column {missing[0]!r} of a slice the record lists"
        low, high = expected.get(folder, (0, footer.num_rows))
        if not low <= footer.num_rows <= high:
            counted = f"{low}" if low == high else f"{low} to {high}"
            return file, f"{footer.num_rows} rows where the record counts {counted}"
        if folder == "errors":  # its ids may be any row's the reader rejected: not the record's
            continue
        outside = _ids_outside(footer, names, first, last) if ids else None
        if outside:
            return file, f"it holds document {outside!r}, which the record does not list"
    return None


def _rows_counted(record: dict, described) -> dict[str, tuple[int, int]]:
    """The fewest and most rows each table's one file of a part holds by its record's counts
    (this version's records, which say their layout): an errors file its scoring and evaluation
    errors; a token_scores file its tokens (layout 3: and at most one row more for each word, a
    word without a token having a row of its own), a layout-2 word_scores file its words (tokens
    and words are counted once per slice in the record)."""
    counts = record.get("counts")
    if type(record.get("layout")) is not int or not isinstance(counts, dict):
        return {}
    folders = [str(file).split("/")[0] for file in record["files"]]
    if len(folders) != len(set(folders)):
        return {}  # a table in several files: the counts are the files' together
    expected = {}
    errors = [counts.get(key, 0) for key in ("errors", "evaluate_errors")]
    if all(type(n) is int for n in errors):
        expected["errors"] = (sum(errors), sum(errors))
    slices = len(described[0]) if described else 0
    tokens, words = (counts.get(key) for key in ("tokens", "words"))
    if not slices or type(tokens) is not int or type(words) is not int or tokens % slices or words % slices:
        return expected
    tokens, words = tokens // slices, words // slices
    expected[TOKEN_TABLE] = (tokens, tokens + words) if record["layout"] >= 3 else (tokens, tokens)
    expected[WORD_TABLE] = (words, words)
    return expected


def _ids_outside(footer, names: list[str], first: str, last: str) -> str | None:
    """A document id a file's row groups hold (their doc_id statistics) outside ``first``..``last``,
    the record's smallest and largest ids; None when within or unknown."""
    if "doc_id" not in names:
        return None
    column = names.index("doc_id")
    for group in range(footer.num_row_groups):
        stats = footer.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            continue
        low, high = (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in (stats.min, stats.max))
        if max(len(low), len(high)) >= 64:  # a writer may cut long statistics short: not exact
            continue
        if low < first or high > last:
            return low if low < first else high
    return None


RECORDED = {"docs", "token_scores", "tokens", "words"}  # folders every part of which a part record names
EMPTY_PART = "part-empty.parquet"  # what publish writes into a table no part wrote to
PART_NAME = re.compile(r"part-[A-Za-z0-9_-]+\.parquet")  # every name a writer gives a part (part-w3f..., part-whole)


def recorded(run: Path, info: dict, file: Path) -> bool:
    """Whether the views read ``file`` of ``run``. Left out, as stray copies that would count their
    rows again: a file whose name no writer gives (``part-0 (copy).parquet``, ``part-whole
    copy.parquet``, left by a file manager), one in a folder below a table's own (``heads/old/``;
    a layout-1 slice's ``method=<m>/layer=<l>/`` is its own), and, in a run whose part records
    name its files, a file of a recorded folder that no record names. A run without records
    (copied without ``_parts``) is read whole."""
    parts = file.relative_to(run).parts
    folder = parts[0]
    own_place = len(parts) == 2 or (
        len(parts) == 4 and parts[1].startswith("method=") and parts[2].startswith("layer=")
    )
    if not own_place or not PART_NAME.fullmatch(file.name):
        return False
    relative = "/".join(parts)
    return folder not in RECORDED or not info["parts"] or relative in info["parts"] or file.name == EMPTY_PART


def first_unreadable(store: str | Path, budget_s: float = 20.0) -> str | None:
    """The first Parquet file of the store's published runs that pyarrow cannot read whole (a
    damaged page inside a file whose footer reads: DuckDB says only "don't know what type"), by its
    path below the store; None when none is found within ``budget_s`` seconds of reading."""
    import time

    root = Path(store)
    started = time.monotonic()
    for file in store_layout.store_files(root, store_layout.runs_dir(root), "*.parquet"):
        if time.monotonic() - started > budget_s:
            return None
        try:
            pq.read_table(file)
        except (OSError, pa.ArrowException):
            return file.relative_to(root).as_posix()
    return None
