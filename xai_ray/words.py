"""Sub-token -> word alignment from the tokenizer's own word ids (WordPiece, BPE, SentencePiece).

Clark et al. (2019): attention TO a word is the sum over its pieces, attention FROM a word is the
mean over its pieces. Token scores are attention to input tokens, so a word's score is the sum
of its pieces' scores. Special tokens have no word id and are left out.
"""

from __future__ import annotations

import numpy as np


def word_index(word_ids: list) -> tuple[np.ndarray, int]:
    """Map each position to a dense word index 0..W-1, or -1 for special tokens.

    Dense because a tokenizer's word ids need not start at 0 after truncation or be contiguous.
    """
    dense, seen = [], {}
    for wid in word_ids:
        if wid is None:
            dense.append(-1)
        else:
            dense.append(seen.setdefault(wid, len(seen)))
    return np.asarray(dense, dtype=np.int64), len(seen)


def word_texts(index: np.ndarray, n_words: int, offsets, text: str) -> list[str]:
    """Each word's surface text, cut from the original string by the pieces' character offsets."""
    starts = [None] * n_words
    ends = [0] * n_words
    for position, w in enumerate(index):
        if w < 0:
            continue
        start, end = offsets[position]
        starts[w] = start if starts[w] is None else min(starts[w], start)
        ends[w] = max(ends[w], end)
    return [text[s:e].strip() if s is not None else "" for s, e in zip(starts, ends)]


def merge_scores(scores: np.ndarray, index: np.ndarray, n_words: int) -> np.ndarray:
    """(L, n) token scores -> (L, W) word scores: the sum over each word's pieces."""
    out = np.zeros((scores.shape[0], n_words), dtype=np.float64)
    keep = index >= 0
    np.add.at(out.T, index[keep], scores[:, keep].T)
    return out


def normalise(word_scores: np.ndarray) -> np.ndarray:
    """Rescale each layer's word scores to sum 1 (the special tokens' share removed)."""
    total = word_scores.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, word_scores / total, 0.0)


def merge_attention(attention: np.ndarray, index: np.ndarray, n_words: int) -> np.ndarray:
    """(..., n, n) token attention -> (..., W, W) word attention: to = sum over pieces, from = mean.

    Leading axes (layers, heads) are kept, so one call merges every head of a review.
    """
    keep = index >= 0
    onehot = np.zeros((attention.shape[-1], n_words))
    onehot[np.nonzero(keep)[0], index[keep]] = 1.0  # (n, W)
    to_words = attention @ onehot  # (n, W): sum of columns per word
    counts = onehot.sum(axis=0)  # (W,)
    return (onehot.T @ to_words) / counts[:, None]  # (W, W): mean of rows per word
