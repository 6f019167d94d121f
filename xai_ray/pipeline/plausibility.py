"""The plausibility stage of a run with ``--set rationales=COLUMN``: every stored method and layer
scored against the corpus's human rationales (``xai_ray.scoring.plausibility``), after the run is
published and before its aggregates, so the report's leaderboard shows them.

The rows go into the run's faithfulness table (``faithfulness/part-plausibility.parquet``, the
metric names of ``plausibility.metric_names``), beside the random ranking's, so the leaderboard
and the one interval rule serve them unchanged. Rationales are read from the run's corpus file
(Parquet, CSV or JSON lines) by ``id_column``, or by row number (``{split}-{row}``) when it has
none, and against the text as scored (after ``clean_html``). A review whose rationale cannot be
read is an ``errors`` row of stage ``plausibility`` with its reason; the other reviews go on.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pyarrow as pa

from xai_ray.config import ConfigError, RunConfig
from xai_ray.data import fields
from xai_ray.data.corpus import sample_rows
from xai_ray.data.pieces import column_rows
from xai_ray.data.sources import piece_columns, plan
from xai_ray.data.text import clean_text
from xai_ray.query.connection import open_store, run_named
from xai_ray.scoring import plausibility
from xai_ray.scoring.faithfulness import RANDOM, random_scores
from xai_ray.store import layout
from xai_ray.store.files import write_atomically, write_parquet_atomically
from xai_ray.store.schemas import ERRORS, FAITHFULNESS

log = logging.getLogger("xai_ray")
STAGE = "plausibility"
READABLE = ("parquet", "csv", "jsonl", "json")


def read_rationales(cfg: RunConfig) -> dict[str, object]:
    """doc_id -> the rationale as the corpus wrote it (rows without one, an empty cell among them,
    are left out). Of rows repeating an id within the run's ``limit`` sample, screening scores the
    first it does not reject (an empty text, a bad label): such an id maps to its ``Candidates``,
    each row's text as scored beside its rationale, and ``score_run`` takes the row whose text is
    the review's. Read by the corpus's own reader (``data.pieces.column_rows``): the same rows,
    and the same ids, as the scored reviews."""
    source = plan(cfg.data, cfg.split, cfg.text_column, cfg.label_column, cfg.id_column, cfg.clean_html)
    kinds = sorted({p.kind for p in source.pieces} - set(READABLE))
    if kinds:
        raise ConfigError(
            f"rationales={cfg.rationales!r} needs a Parquet, CSV or JSON lines corpus; {cfg.data!r} is {kinds[0]}"
        )
    if not any(cfg.rationales in piece_columns(piece) for piece in source.pieces):
        columns = ", ".join(dict.fromkeys(c for piece in source.pieces for c in piece_columns(piece)))
        raise ConfigError(f"rationales={cfg.rationales!r} is not a column of {cfg.data!r} (columns: {columns})")
    rows: list[tuple[str | None, object]] = []  # every row's (id, rationale), in the order pos numbers them
    for piece in source.pieces:
        for written_id, value in column_rows(source, piece, cfg.rationales):
            rows.append((written_id if written_id is not None or source.has_ids else f"{cfg.split}-{len(rows)}", value))
    kept = range(len(rows))
    if cfg.limit is not None and cfg.limit < len(rows):  # the run's sample: a repeated id's kept row is in it
        kept = sample_rows(len(rows), cfg.limit, cfg.seed).tolist()
    by_id: dict[str, list[int]] = {}
    for row in kept:
        if rows[row][0] is not None:
            by_id.setdefault(rows[row][0], []).append(row)
    texts = _texts(source, cfg) if any(len(found) > 1 for found in by_id.values()) else []
    out: dict[str, object] = {}
    for doc_id, found in by_id.items():
        if len(found) > 1:
            out[doc_id] = Candidates([(texts[row], _plain(rows[row][1])) for row in found])
        elif not _blank(rows[found[0]][1]):
            out[doc_id] = _plain(rows[found[0]][1])
    return out


class Candidates(list):
    """The (text as scored, rationale) of each row repeating one id, in row order; a rationale
    may be blank (that row has none)."""

    def of(self, text: str):
        """The rationale of the first row whose text is ``text`` (the row screening kept), else of
        the first row; None where that row has none."""
        chosen = next((value for seen, value in self if seen == text), self[0][1])
        return None if _blank(chosen) else chosen


def _texts(source, cfg: RunConfig) -> list[str | None]:
    """Every row's text as the run scores it (``clean_html`` applied), in row order."""
    found = []
    for piece in source.pieces:
        for _, value in column_rows(source, piece, cfg.text_column):
            text = value if isinstance(value, str) else None
            found.append(clean_text(text) if text is not None and cfg.clean_html else text)
    return found


def _blank(value) -> bool:
    return fields.missing(value) or (isinstance(value, str) and not value.strip())  # a CSV's empty cell


def _plain(value):
    """A rationale as plain Python: the corpus reader keeps a JSON number as its text
    (``fields.JsonNumber``), read here as the number it spells (``NaN`` and ``Infinity`` as floats,
    which the rationale's check then refuses for their review alone)."""
    if isinstance(value, fields.JsonNumber):
        try:
            return int(value)
        except ValueError:
            return float(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def score_run(words: pd.DataFrame, rationales: dict, units: str, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    """``sql/run_word_scores.sql`` rows and the rationales -> (metric rows, error rows)."""
    metrics, errors = [], []
    for doc_id, doc in words.groupby("doc_id", sort=True):
        rationale = rationales.get(doc_id)
        if isinstance(rationale, Candidates):  # a repeated id: the row whose text was scored
            rationale = rationale.of(doc["text"].iloc[0])
        if rationale is None:
            continue
        try:
            metrics += _review_rows(doc_id, doc, rationale, units, seed)
        except plausibility.RationaleError as err:  # recorded per row, the job goes on
            errors.append((doc_id, str(err)))
        except Exception as err:  # a review this code did not foresee: recorded too, never the whole stage
            errors.append((doc_id, f"plausibility failed: {type(err).__name__}: {err}"))
    table = (
        pa.table(dict(zip(FAITHFULNESS.names, zip(*metrics))), schema=FAITHFULNESS)
        if metrics
        else FAITHFULNESS.empty_table()
    )
    failed = pa.table(
        {"doc_id": [d for d, _ in errors], "stage": [STAGE] * len(errors), "reason": [r for _, r in errors]},
        schema=ERRORS,
    )
    return table, failed


def _review_rows(doc_id, doc: pd.DataFrame, rationale, units: str, seed: int) -> list[tuple]:
    """One review's metric rows (doc_id, method, layer, metric, value) from its word scores."""
    text = doc["text"].iloc[0]
    gold, spans = plausibility.rationale_spans(rationale, text, units)
    rankings, seen = [], None
    for (method, layer), scored in doc.groupby(["method", "layer"], sort=True):
        words = scored["word"].tolist()
        starts = plausibility.word_starts(words, text)
        lengths = [len(word) for word in words]
        per_token, seen = plausibility.token_scores(scored["raw_score"].to_numpy(float), starts, text, lengths)
        rankings.append((method, int(layer), per_token[0]))
    rankings = [(m, layer, s[seen]) for m, layer, s in rankings]
    rankings.append((RANDOM, None, random_scores(doc_id, int(seen.sum()), seed)))
    spans = plausibility.spans_within(spans, seen)
    return [
        (doc_id, method, layer, metric, None if np.isnan(value) else float(value))
        for method, layer, metric, value in plausibility.review_rows(rankings, gold[seen], gold_spans=spans)
    ]


def add_plausibility(cfg: RunConfig, run_id: str) -> dict:
    """Score the published run ``run_id`` against ``cfg.rationales``; returns the counts it added."""
    rationales = read_rationales(cfg)
    con = open_store(cfg.store, run=run_id)
    try:
        words = run_named(con, "run_word_scores", run_id=run_id)
    finally:
        con.close()
    metrics, errors = score_run(words, rationales, cfg.rationale_units, cfg.seed)
    run = layout.run_dir(cfg.store, run_id)
    (run / "faithfulness").mkdir(exist_ok=True)  # a run without --evaluate has no faithfulness rows yet
    if errors.num_rows:
        write_parquet_atomically(run / "errors" / f"part-{STAGE}.parquet", errors)
    if metrics.num_rows:
        write_parquet_atomically(run / "faithfulness" / f"part-{STAGE}.parquet", metrics)
    values = zip(metrics.column("doc_id").to_pylist(), metrics.column("value").to_pylist(), strict=True)
    reviews = len({doc_id for doc_id, value in values if value is not None})  # an empty rationale scores none
    counts = {"plausibility_reviews": reviews, "plausibility_errors": errors.num_rows}
    manifest = layout.read_manifest(run / layout.MANIFEST)
    manifest["counts"] = {**manifest.get("counts", {}), **counts}
    write_atomically(run / layout.MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str).encode())
    log.info("run %s: plausibility of %d reviews, %d rationale errors", run_id, reviews, errors.num_rows)
    return counts
