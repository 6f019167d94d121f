"""A batch's token and word columns: cut review by review in Python, against ``text_columns``.

    python bench/word_columns.py MODEL DATA [--docs 2000] [--batch 32] [--max-length 512] [--repeats 3]

On the corpus's first ``--docs`` reviews, planned and merged as the scoring actor plans them, each
batch's ``tokens``, ``word_index``, ``words``, ``word_span`` and ``word_joined`` list columns built
two ways, in turn, best of ``--repeats``:
    per review: the actor's previous path, kept here as code: ``convert_ids_to_tokens``, each
                word cut from the text (``words.word_spans``, ``with_marks``, ``str.strip``),
                ``join_contractions``, then ``pa.array`` of the lists;
    batch:      ``scoring.text_columns.text_columns`` (the vocabulary read once, as an actor does).
Both are checked to give the same columns. Prints CPU ms per review for each and the ratio, and
the share of reviews with a character outside ASCII.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xai_ray.model.loading import load_model  # noqa: E402
from xai_ray.scoring import segments  # noqa: E402
from xai_ray.scoring.text_columns import Vocabulary, text_columns  # noqa: E402
from xai_ray.words import join_contractions, with_marks, word_spans  # noqa: E402

COLUMNS = ("tokens", "word_index", "words", "word_span", "word_joined")
TYPES = {
    "tokens": pa.list_(pa.string()),
    "word_index": pa.list_(pa.int32()),
    "words": pa.list_(pa.string()),
    "word_span": pa.list_(pa.int32()),
    "word_joined": pa.list_(pa.string()),
}


def per_review(tokenizer, texts: list[str], merged: segments.MergedBatch) -> dict:
    """The previous path: every document's lists in Python, then one Arrow conversion a column."""
    lists = {name: [] for name in COLUMNS}
    for d, text in enumerate(texts):
        index = merged.indexes[d]
        spans = with_marks(word_spans(index, int(merged.n_words[d]), merged.offsets[d]), text)
        words = [text[s:e].strip() if s is not None else "" for s, e in spans]
        first, joined = join_contractions(words, spans, text)
        lists["tokens"].append(tokenizer.convert_ids_to_tokens(merged.token_ids[d]))
        lists["word_index"].append(index)
        lists["words"].append(words)
        lists["word_span"].append(first)
        lists["word_joined"].append(joined)
    indexes = lists.pop("word_index")  # numpy arrays, concatenated in one step as ``rows._column`` did
    offsets = np.zeros(len(indexes) + 1, dtype=np.int32)
    np.cumsum([len(i) for i in indexes], out=offsets[1:])
    flat = pa.array(np.concatenate(indexes).astype(np.int32))
    columns = {name: pa.array(values, TYPES[name]) for name, values in lists.items()}
    return {**columns, "word_index": pa.ListArray.from_arrays(pa.array(offsets), flat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tokenizer = load_model(args.model).tokenizer
    texts = pq.read_table(args.data, columns=["text"]).column("text").to_pylist()[: args.docs]
    batches = []
    for first in range(0, len(texts), args.batch):
        chunk = texts[first : first + args.batch]
        plans = segments.plan_batch(tokenizer, chunk, args.max_length, "head")
        batches.append((chunk, segments.MergedBatch.of(plans, [[i] for i in range(len(plans))], tokenizer)))
    vocabulary = Vocabulary(tokenizer)
    best = {"per review": float("inf"), "batch": float("inf")}
    for _ in range(args.repeats):
        for path in best:
            started = time.process_time()
            for chunk, merged in batches:
                if path == "per review":
                    per_review(tokenizer, chunk, merged)
                else:
                    text_columns(chunk, merged.token_ids, merged.indexes, merged.n_words, merged.offsets, vocabulary)
            best[path] = min(best[path], time.process_time() - started)
    for chunk, merged in batches:
        old = per_review(tokenizer, chunk, merged)
        new = text_columns(chunk, merged.token_ids, merged.indexes, merged.n_words, merged.offsets, vocabulary)
        for name in COLUMNS:
            assert old[name].equals(new[name]), name
    tokens = np.mean([n for _, merged in batches for n in merged.n_tokens])
    outside = np.mean([not text.isascii() for text in texts])
    print(f"{len(texts)} reviews, batches of {args.batch}, {tokens:.0f} tokens a review, {outside:.1%} not ASCII")
    for path, seconds in best.items():
        print(f"{path:>10}: {1000 * seconds / len(texts):.3f} CPU ms per review")
    print(f"ratio: {best['per review'] / best['batch']:.2f}x (per review / batch), the same columns")


if __name__ == "__main__":
    main()
