"""The labelled examples a fine-tuning job trains on: the corpus rows checked (text, a 0/1 label,
unique ids), a stratified seeded held-out split, a fingerprint of the rows used, and the token ids
(long reviews keep their start and their end with ``truncation=head_tail``)."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pandas as pd

LABELS = {0: "negative", 1: "positive"}
log = logging.getLogger("xai_ray")


class FinetuneError(ValueError):
    """The fine-tune job cannot run as asked; the message says what to change."""


def encode(tokenizer, texts: list[str], max_length: int, truncation: str = "head") -> list[np.ndarray]:
    """Token ids with special tokens, at most ``max_length``; ``head_tail`` keeps a quarter of the budget
    from the start and the rest from the end of long texts (reviews tend to end with the verdict)."""
    if truncation == "head":
        return [
            np.asarray(x, dtype=np.int32) for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        ]
    bare, full = tokenizer("a", add_special_tokens=False)["input_ids"], tokenizer("a")["input_ids"]
    prefix = next(i for i in range(len(full)) if full[i : i + len(bare)] == bare)  # [CLS] ... [SEP] around the text
    keep = max_length - (len(full) - len(bare))
    head = prefix + keep // 4
    out = []
    # cut below, so the tokenizer's warning that a text is longer than the model takes is noise
    # (it reached the terminal under -q)
    for ids in tokenizer(texts, verbose=False)["input_ids"]:
        if len(ids) > max_length:
            ids = ids[:head] + ids[len(ids) - (max_length - head) :]
        out.append(np.asarray(ids, dtype=np.int32))
    return out


def labelled_rows(cfg) -> pd.DataFrame:
    """The corpus rows with text and a 0/1 label; one-sentence errors for missing or foreign labels."""
    from xai_ray.data.corpus import read_corpus

    rows = read_corpus(
        cfg.data, cfg.split, cfg.text_column, cfg.label_column, cfg.id_column, cfg.limit, cfg.seed, cfg.clean_html
    )
    bad = rows[rows.problem.notna()]
    if len(bad):  # training on a guessed row is worse than stopping: say which and why
        raise FinetuneError(
            f"{len(bad)} rows of {cfg.data!r} cannot be used; the first, {bad.doc_id.iloc[0]!r}: {bad.problem.iloc[0]}"
        )
    rows = rows.drop(columns=["problem"])
    written = [isinstance(t, str) and bool(t.strip()) for t in rows.text]
    if not all(written) and any(written):  # left out, and said: nothing to learn from, nothing lost unsaid
        empty = rows.doc_id[[not w for w in written]]
        log.warning(
            "%d rows of %r have an empty text and are left out of the fine-tune; the first: %r",
            len(empty),
            cfg.data,
            empty.iloc[0],
        )
    rows = rows[written].reset_index(drop=True)
    if rows.empty:
        raise FinetuneError(f"data {cfg.data!r} (split {cfg.split!r}) holds no non-empty texts")
    missing = int(rows.label.isna().sum())
    if missing == len(rows):
        raise FinetuneError(
            f"data {cfg.data!r} has no labels in column {cfg.label_column!r}; fine-tuning needs a "
            "0/1 label per row (name the column with --set label_column=NAME)"
        )
    if missing:
        raise FinetuneError(
            f"{missing} of {len(rows)} rows of {cfg.data!r} have no numeric label in column "
            f"{cfg.label_column!r}; fine-tuning needs a 0 (negative) or 1 (positive) label per row"
        )
    foreign = sorted(set(int(v) for v in rows.label) - set(LABELS))
    if foreign:
        shown = ", ".join(map(str, foreign[:5])) + (", ..." if len(foreign) > 5 else "")
        raise FinetuneError(
            f"label column {cfg.label_column!r} of {cfg.data!r} holds values outside the classes "
            f"{{0, 1}} (negative, positive): {shown}"
        )
    if not rows.doc_id.is_unique:
        raise FinetuneError(
            f"doc ids in {cfg.data!r} are not unique, so the held-out slice cannot be recorded by id; "
            "name a unique id column with --set id_column=NAME"
        )
    rows["label"] = rows.label.astype("int64")
    return rows


def split_rows(rows: pd.DataFrame, eval_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stratified, seeded split: each class gives ``eval_fraction`` of its rows to the held-out slice."""
    rng = np.random.default_rng(seed)
    counts = rows.label.value_counts()
    if len(counts) < 2 or counts.min() < 2:  # one row of a class trained on it and held none out
        found = ", ".join(f"{int(k)}: {int(v)}" for k, v in counts.sort_index().items()) or "none"
        raise FinetuneError(
            f"fine-tuning needs rows of both classes (0 and 1), at least two of each; rows per class: {found}"
        )
    held: list[int] = []
    for label in sorted(rows.label.unique()):
        members = rows.index[rows.label == label].to_numpy()
        n = min(len(members) - 1, max(1, int(round(eval_fraction * len(members)))))
        held.extend(rng.permutation(members)[:n].tolist() if n > 0 else [])
    if len(rows.label.unique()) < 2 or not held:
        raise FinetuneError("fine-tuning needs rows of both classes (0 and 1), at least two of each")
    mask = rows.index.isin(held)
    return rows[~mask].reset_index(drop=True), rows[mask].reset_index(drop=True)


def fingerprint_rows(rows: pd.DataFrame) -> str:
    """sha256 over (doc_id, label, text) of every row used, in order."""
    digest = hashlib.sha256()
    for doc_id, label, text in zip(rows.doc_id, rows.label, rows.text):
        for part in (str(doc_id), str(int(label)), text):
            digest.update(part.encode("utf-8", errors="surrogatepass"))
            digest.update(b"\x00")
    return digest.hexdigest()


def label_counts(rows: pd.DataFrame) -> dict:
    return {LABELS[int(k)]: int(v) for k, v in rows.label.value_counts().sort_index().items()}
