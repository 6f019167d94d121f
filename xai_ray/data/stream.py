"""Reading and screening a corpus on Ray workers: the driver plans and counts, it never holds a text.

``Corpus`` is a planned source (``sources.plan``): a Ray Data read of its pieces, each row numbered
in the source's order (``pos``), a ``limit`` sample drawn by those numbers. ``screen`` runs two
passes over it. The first reads every row's id, whether it can be scored alone
(``screening.local_problem``), and whether a resumed or nightly run needs it at all (``done``,
``unchanged``); one task per bucket of ids then decides, column-wise, which rows are not scored
(``screening.verdicts``: the first occurrence of an id wins, in input order, as in ``screen``).
Those verdicts (rows not scored; small) stay in Ray's object store. The second pass, ``Screened.todo``,
reads the source again and streams the rows to score to the actors. Only counts reach the driver.

Over 300 lines: both passes share the numbering of rows and the verdicts; split, the rule that a
row's place decides its fate would be spread over files.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray

from xai_ray.data import screening
from xai_ray.data.corpus import named_ids, sample_rows
from xai_ray.data.head_docs import HeadDocs
from xai_ray.data.pieces import count_piece
from xai_ray.data.source_files import changed_file, files_state
from xai_ray.data.sources import SourcePlan
from xai_ray.data.text import CorpusError
from xai_ray.runtime import ray_data

BUCKETS = 64  # ids are hashed into this many buckets; one screening task takes one or several
ROWS_PER_SCREEN_TASK = 2_000_000
MAX_BLOCKS = 256  # blocks a read is split into at most, unless asked for more


@dataclass
class Corpus:
    """A planned source and what numbering its rows needs (found by ``counted``)."""

    plan: SourcePlan
    limit: int | None = None
    seed: int = 0
    offsets: list[int] | None = None  # each piece's first row in the source
    n_source: int | None = None  # rows in the source
    chosen: object = None  # ObjectRef of the sorted sampled rows (``limit``), or None
    driver: bool = False  # read and screened by the driver itself (``data.held``: a small corpus)

    def counted(self) -> Corpus:
        """Count what the numbering needs: piece sizes unknown from names and footers are counted by
        Ray tasks (the texts read there and dropped), or here for a ``driver`` corpus; the JSONL id
        question is settled the same way. The ``limit`` sample is drawn here in both cases."""
        if self.offsets is not None:
            return self
        from xai_ray.runtime import ensure_ray

        pieces, found = self.plan.pieces, self.plan
        needs_count = any(p.rows is None for p in pieces) and (self.limit is not None or len(pieces) > 1)
        sizes = [p.rows for p in pieces]
        if needs_count or found.has_ids is None:
            if self.driver:
                counts = {p.index: count_piece(found, p) for p in pieces}
            else:
                ensure_ray()
                counts = _run(_count_pieces(found))
            sizes = [counts[p.index][0] for p in pieces]
            if found.has_ids is None:
                found = found.with_ids(any(has for _, has in counts.values()))
        offsets = list(np.cumsum([0] + [s or 0 for s in sizes[:-1]]))
        n_source = sum(sizes) if all(s is not None for s in sizes) else None
        chosen = None
        if self.limit is not None and n_source is not None and self.limit < n_source:
            chosen = sample_rows(n_source, self.limit, self.seed)
            if not self.driver:
                ensure_ray()
                chosen = ray.put(chosen)
        return replace(self, plan=found, offsets=[int(o) for o in offsets], n_source=n_source, chosen=chosen)

    def rows(self, blocks: int = 0, beside_actors: bool = False):
        """A Ray Dataset of the source's rows: ``pos`` (in input order, after the sample), ``doc_id``
        (rows of a source without ids named ``{split}-{row}``), ``text``, ``label``, ``problem``.

        ``blocks``: at least this many blocks (Ray splits what each read task yields; more blocks than
        pieces also keeps the steps after the read out of its task, so they spread over the workers).
        ``beside_actors``: every step asks for no CPU, as scoring actors may hold them all."""
        corpus = self.counted()
        pieces = len(corpus.plan.pieces)
        blocks = max(pieces, blocks)
        from xai_ray.data.piece_source import PieceSource

        source = ray_data().read_datasource(
            PieceSource(corpus.plan), override_num_blocks=blocks, **_beside(pieces, beside_actors)
        )
        place = partial(_place, offsets=corpus.offsets, split=corpus.plan.split)
        return source.map_batches(
            place, fn_args=[corpus.chosen], batch_format="pyarrow", batch_size=None, **_beside(blocks, beside_actors)
        )


def _beside(inputs: int, beside_actors: bool) -> dict:
    """Ray remote args of a step that runs beside the scoring actors: no CPU asked, at most 4 tasks
    at once (no more than it has inputs), or nothing special."""
    return {"num_cpus": 0, "compute": ray_data().TaskPoolStrategy(size=max(1, min(inputs, 4)))} if beside_actors else {}


def _run(dataset) -> dict:
    """Rows of a small result, with a ``CorpusError`` raised by a worker raised here as itself."""
    try:
        return {row["piece"]: (row["rows"], row["has_ids"]) for row in dataset.take_all()}
    except Exception as err:
        raise _corpus_error(err) from None


def _corpus_error(err: Exception) -> Exception:
    """The worker's own ``CorpusError`` inside what Ray raised, or ``err``. Ray's wrapper is a
    ``CorpusError`` too, but its text is the task's traceback: the sentence is its ``cause``'s."""
    cause = err
    while cause is not None:
        inner = getattr(cause, "cause", None) or cause.__cause__
        if isinstance(cause, CorpusError) and not isinstance(inner, CorpusError):
            return CorpusError(str(cause).splitlines()[0])
        cause = inner
    return err


def _count_pieces(source: SourcePlan):
    def count(batch: pa.Table) -> pa.Table:
        found = [count_piece(source, pieces[i]) for i in batch.column("piece").to_pylist()]
        return pa.table(
            {
                "piece": batch.column("piece"),
                "rows": pa.array([r for r, _ in found], pa.int64()),
                "has_ids": pa.array([h for _, h in found], pa.bool_()),
            }
        )

    pieces = {p.index: p for p in source.pieces}
    items = [{"piece": p.index} for p in source.pieces]
    blocks = ray_data().from_items(items, override_num_blocks=len(items))
    return blocks.map_batches(count, batch_format="pyarrow", batch_size=1)


def _place(batch: pa.Table, chosen, offsets: list[int], split: str) -> pa.Table:
    """Number a chunk's rows in the source, keep the sampled ones, name rows without ids."""
    source_rows = np.asarray(offsets, np.int64)[batch.column("piece").to_numpy()] + batch.column("piece_row").to_numpy()
    batch = batch.set_column(batch.schema.get_field_index("doc_id"), "doc_id", named_ids(batch, source_rows, split))
    positions = source_rows
    if chosen is not None:
        chosen = ray.get(chosen) if isinstance(chosen, ray.ObjectRef) else chosen
        kept = _found(chosen, source_rows)
        batch, positions = batch.filter(pa.array(kept)), np.searchsorted(chosen, source_rows)[kept]
    return pa.table(
        {
            "pos": pa.array(positions, pa.int64()),
            "doc_id": batch.column("doc_id"),
            "text": batch.column("text"),
            "label": batch.column("label"),
            "problem": batch.column("problem"),
            "label_name": batch.column("label_name"),
        }
    )


# ---------------------------------------------------------------------------------- screening


@dataclass
class Screened:
    """The outcome of the first pass: counts on the driver, the verdicts in the object store."""

    corpus: Corpus
    verdicts: list  # ObjectRefs of ``screening.VERDICTS`` tables (one per screening task)
    counts: dict = field(default_factory=dict)  # rows, rejected, duplicates, done, unchanged, todo
    classes: dict | None = None  # the model's classes (``screening.class_map``): a label may name one
    files: dict = field(default_factory=dict)  # ``source_files.files_state`` before the first pass

    @property
    def n_input(self) -> int:
        return self.counts["rows"]

    def check_unchanged(self) -> None:
        """Refuse a run whose source files changed since the first pass began: the second pass
        picks rows by their place, so its rows would not be the ones screened."""
        changed = changed_file(self.files, self.corpus.plan)
        if changed is not None:
            raise CorpusError(
                f"{changed} changed while this run read it (between screening and scoring, rows are picked by "
                "their place in the file): nothing was published, as documents could be lost or stored "
                "unscreened; run again once the file is whole (copy it aside first if it keeps growing)"
            )

    def let_go(self) -> None:
        """Drop this corpus's handles on Ray's object store (the verdicts, the sampled rows), once
        the run no longer reads them: a handle freed while Ray shuts down ends the process."""
        self.verdicts = []
        self.corpus = replace(self.corpus, chosen=None)

    def todo(self, batch_size: int, heads: HeadDocs | None = None, blocks: int = 0):
        """The second pass: a Ray Dataset of the rows to score (``doc_id, text, label, heads_sample,
        heads_stats``), each block longest first (batches of similar lengths pad little), in blocks of
        about half a batch. ``heads``: the documents marked for head statistics and similarity, as
        ranks among the rows a run keeps (``counts['kept']``; ``data.head_docs``); default: statistics
        for every row, none compared. ``blocks``: at most this many blocks (each read task's output
        split; default ``MAX_BLOCKS``)."""
        side = _side_table.remote(*self.verdicts)
        ray.wait([side], fetch_local=False)  # ready before any actor asks for it
        heads = heads if heads is not None else HeadDocs()
        # About half a batch a block, up to ``blocks`` (say 16 an actor), so even one large piece
        # feeds every actor; no more, as the driver keeps a little for every block in flight.
        # Half, not one: Ray Data bundles blocks until a task holds ``batch_size`` rows, and blocks
        # of at most a batch (their count rounded up) mostly came out short, two to a task: 600
        # reviews on 2 actors made 5 tasks of ~120 (3 against 2, one actor idle at the end); with
        # half-batch blocks they make 8 to 10 tasks of about one batch.
        blocks = min(-(-2 * self.counts["todo"] // max(batch_size, 1)), blocks or MAX_BLOCKS)
        rows = self.corpus.rows(blocks=blocks, beside_actors=True)
        pick = partial(_todo, classes=self.classes)
        return rows.map_batches(
            pick, fn_args=[side, heads], batch_format="pyarrow", batch_size=None, **_beside(blocks, True)
        )


def screen(corpus: Corpus, classes=None, done=None, known=None) -> Screened:
    """The first pass over ``corpus``: which rows are not scored and why (see the module docstring).

    ``done``: ids a resumed run already holds; ``known``: an Arrow table ``doc_id, text_sha256`` of
    documents scored before (a nightly run scores a known id only when its text changed)."""
    from xai_ray.runtime import ensure_ray

    ensure_ray()
    files = files_state(corpus.plan)  # before the first pass reads a row (``check_unchanged``)
    corpus = corpus.counted()
    classes = screening.class_map(classes)
    done_ref = ray.put(pa.array(sorted(done or ()), pa.string()))
    known_ref = ray.put(known) if known is not None else None
    local = partial(_local, classes=classes)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    narrow = corpus.rows(blocks=2 * cpus).map_batches(
        local, fn_args=[done_ref, known_ref], batch_format="pyarrow", batch_size=None
    )
    try:
        narrow = narrow.materialize()  # ids, reasons and flags only: small beside the texts
        n_rows = narrow.count()
    except Exception as err:
        raise _corpus_error(err) from None
    blocks = narrow.to_arrow_refs()
    n_tasks = max(1, min(BUCKETS, -(-n_rows // ROWS_PER_SCREEN_TASK)))
    verdicts = [_verdicts.remote(task, n_tasks, *blocks) for task in range(n_tasks)]
    counts = {"rows": n_rows, **ray.get(_count_verdicts.remote(*verdicts))}
    counts["todo"] = n_rows - counts["rejected"] - counts["duplicates"] - counts["done"] - counts["unchanged"]
    counts["kept"] = counts["todo"] + counts["done"]  # what a run keeps; its head sample is drawn from these
    return Screened(corpus=corpus, verdicts=verdicts, counts=counts, classes=classes, files=files)


def _local(batch: pa.Table, done, known, classes) -> pa.Table:
    """Per row: the stored id, ``local_problem``'s reason, and whether a kept row is done or unchanged."""
    done = ray.get(done) if isinstance(done, ray.ObjectRef) else done
    known = ray.get(known) if isinstance(known, ray.ObjectRef) else known
    ids, reasons, missing = [], [], []
    names = ("pos", "doc_id", "text", "label", "problem", "label_name")
    for pos, doc_id, text, label, problem, name in zip(*(batch.column(c).to_pylist() for c in names)):
        stored, reason, _ = screening.local_problem(pos, doc_id, text, label, problem, classes, name)
        ids.append(stored)
        reasons.append(reason)
        missing.append(screening.unnamed(reason))  # no id of its own: never a duplicate
    ids = pa.array(ids, pa.string())
    is_done = pc.is_in(ids, value_set=done).fill_null(False) if len(done) else pa.array(np.zeros(len(ids), bool))
    unchanged = np.zeros(len(ids), bool)
    if known is not None and known.num_rows:
        at = pc.index_in(ids, value_set=known.column("doc_id")).to_numpy(zero_copy_only=False)
        hashes = known.column("text_sha256").to_pylist()
        texts = batch.column("text").to_pylist()
        for i in np.nonzero(~np.isnan(at.astype(float)))[0]:
            digest = hashlib.sha256((texts[i] if isinstance(texts[i], str) else "").encode()).hexdigest()
            unchanged[i] = hashes[int(at[i])] == digest
    return pa.table(
        {
            "pos": batch.column("pos"),
            "doc_id": ids,
            "missing": pa.array(missing, pa.bool_()),
            "reason": pa.array(reasons, pa.string()),
            "done": is_done,
            "unchanged": pa.array(unchanged),
            "bucket": pa.array([_bucket(i) for i in ids.to_pylist()], pa.int32()),
        }
    )


@ray.remote(num_cpus=1)
def _verdicts(task: int, n_tasks: int, *blocks: pa.Table) -> pa.Table:
    """Screening task ``task``: the verdicts of the ids whose bucket it owns (all rows of an id meet here)."""
    parts = [b.filter(pa.array(b.column("bucket").to_numpy() % n_tasks == task)) for b in blocks if b.num_rows]
    rows = pa.concat_tables(parts) if parts else None
    if rows is None or rows.num_rows == 0:
        return screening.VERDICTS.empty_table()
    return screening.verdicts(rows)


@ray.remote(num_cpus=1)
def _count_verdicts(*tables: pa.Table) -> dict:
    return verdict_counts(*tables)


def verdict_counts(*tables: pa.Table) -> dict:
    """Rows of each verdict (``screening.VERDICTS`` tables): rejected, duplicates, done, unchanged."""
    counts = {"rejected": 0, "duplicates": 0, "done": 0, "unchanged": 0}
    names = {screening.REJECTED: "rejected", screening.DUPLICATE: "duplicates", screening.DONE: "done"}
    names[screening.UNCHANGED] = "unchanged"
    for table in tables:
        values, found = np.unique(table.column("verdict").to_numpy(), return_counts=True)
        for value, n in zip(values, found):
            counts[names[int(value)]] += int(n)
    return counts


@ray.remote(num_cpus=0)  # tiny, and awaited by actors that may hold every CPU
def _side_table(*tables: pa.Table) -> pa.Table:
    """The verdicts the second pass looks rows up in: ``pos`` (sorted) and ``verdict``."""
    return pa.concat_tables([screening.VERDICTS.empty_table(), *tables]).select(["pos", "verdict"]).sort_by("pos")


def _todo(batch: pa.Table, side, heads: HeadDocs, classes=None) -> pa.Table:
    """The second pass on one chunk: rows without a verdict, marked for head statistics and
    similarity (``heads``), longest first."""
    side = ray.get(side) if isinstance(side, ray.ObjectRef) else side
    pos = batch.column("pos").to_numpy()
    judged = side.column("pos").to_numpy()
    keep = ~_found(judged, pos)
    # rank among the rows a run keeps: the position, less the rows before it that it does not keep
    dropped = (screening.REJECTED, screening.DUPLICATE, screening.UNCHANGED)
    outside = judged[np.isin(side.column("verdict").to_numpy(), dropped)]
    rank = pos - np.searchsorted(outside, pos)
    rows = batch.filter(pa.array(keep))
    ids = [screening.stored_id(d) for d in rows.column("doc_id").to_pylist()]
    labels = rows.column("label")
    # labels written as names, aclImdb's folders: read by name where the model names its classes
    # (screening's rule; a name it could not read rejected its row)
    if screening.names_classes(classes) and rows.column("label_name").null_count < rows.num_rows:
        written, values = rows.column("label_name").to_pylist(), labels.to_pylist()
        labels = pa.array(
            [v if n is None else screening.by_name(n, classes)[0] for n, v in zip(written, values)], pa.int64()
        )
    marks = heads.marks(rank[keep])
    table = pa.table(
        {
            "doc_id": pa.array(ids, pa.string()),
            "text": rows.column("text"),
            "label": labels,
            "heads_sample": pa.array(marks["heads_sample"]),
            "heads_stats": pa.array(marks["heads_stats"]),
        }
    )
    order = np.argsort(-pc.utf8_length(table.column("text")).to_numpy(zero_copy_only=False), kind="stable")
    return table.take(pa.array(order))


def _found(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in ``sorted_values``."""
    if not len(sorted_values):
        return np.zeros(len(values), bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return sorted_values[at] == values


def _bucket(doc_id: str) -> int:
    return zlib.crc32(doc_id.encode("utf-8", "surrogatepass")) % BUCKETS
