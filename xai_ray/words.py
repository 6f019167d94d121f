"""Sub-token -> word alignment from the tokenizer's own word ids (WordPiece, BPE, SentencePiece).

Clark et al. (2019): attention TO a word is the sum over its pieces, attention FROM a word is the
mean over its pieces. Token scores are attention to input tokens, so a word's score is the sum
of its pieces' scores. Special tokens have no word id and are left out.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

import numpy as np

WORDLIKE = re.compile(r"\w+")
APOSTROPHE = re.compile(r"['\u2019]")
TAIL = re.compile(r"['\u2019]\w+")  # a byte-level BPE piece such as 't or 's


# every code point Python's str.isspace() takes: what str.strip() removes from a word's text
SPACES = np.array([c for c in range(0x3001) if chr(c).isspace()], dtype=np.uint32)


# What a token's offsets cover (``blank_tokens``): BLANK, white space alone; SEAM, a token that
# touches the one before it with a combining mark at the seam (the second half of a word that
# byte-level BPE cut at a mark: "re|\u0301|sume|\u0301", Hindi, Thai, Arabic with its vowel marks).
SHOWN, BLANK, SEAM = 0, 1, 4


def blank_tokens(offsets, text: str) -> np.ndarray | None:
    """(tokens,) uint8 bits, per token of ``text``: BLANK where its ``offsets`` cover no character
    but white space (none at all, as byte-level BPE's lone "Ġ" of a trailing or doubled space;
    tabs, line breaks); SEAM where it starts where the token before it ends and a combining mark
    ends that one or starts this one; else SHOWN. None for a text no encoder takes (a lone
    surrogate: screening refuses it anyway)."""
    try:
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # (characters,)
    except UnicodeEncodeError:
        return None
    spans = np.clip(np.asarray(offsets, dtype=np.int64).reshape(-1, 2), 0, len(points))  # (tokens, 2)
    solid = np.concatenate([[0], np.cumsum(~np.isin(points, SPACES))])  # non-space characters before each
    kinds = np.where(solid[spans[:, 1]] - solid[spans[:, 0]] == 0, BLANK, SHOWN).astype(np.uint8)
    if text.isascii() or len(spans) < 2:  # no mark to find (most reviews)
        return kinds
    mark = np.zeros(len(points) + 1, dtype=bool)  # (characters + 1,): the last is past the text
    wide = np.flatnonzero(points >= 0x300)  # no combining mark comes before U+0300
    mark[wide] = [unicodedata.category(chr(c)).startswith("M") for c in points[wide]]
    before, this = spans[:-1], spans[1:]  # (tokens - 1, 2) each: each token beside the one before it
    touching = (this[:, 0] == before[:, 1]) & (before[:, 1] > before[:, 0]) & (this[:, 1] > this[:, 0])
    at_seam = mark[np.maximum(before[:, 1] - 1, 0)] | mark[this[:, 0]]
    solid_pair = (kinds[:-1] != BLANK) & (kinds[1:] != BLANK)
    kinds[1:][touching & at_seam & solid_pair] |= SEAM
    return kinds


def join_blank_words(word_ids: list, blank) -> list:
    """``word_ids`` with each word whose tokens are all ``blank`` (``blank_tokens``: white space,
    or bool True) joined to the next word that shows something (the one before, where none follows),
    and the words a combining mark cut joined again (a token marked SEAM joins its word to the word
    of the token before it): a word of white space had a row of its own with an empty text and
    took a share of the review's score (0.2 to 0.5 of rollout's on a RoBERTa review with line
    breaks); ``résumé`` with decomposed accents was four words. Where no word needs it, the ids come
    back as they were."""
    n = len(word_ids)
    if not n or blank is None:
        return word_ids
    kinds = np.asarray(blank, dtype=np.uint8)  # (tokens,): bool True reads as BLANK
    ids = np.fromiter((-1 if w is None else w for w in word_ids), dtype=np.int64, count=n)
    worded = ids >= 0
    if not worded.any():
        return word_ids
    size = int(ids.max()) + 1
    target = np.arange(size)  # (words,): the word each word joins
    seams = np.flatnonzero((kinds[1:] & SEAM).astype(bool) & worded[1:] & worded[:-1]) + 1
    for t in seams:  # in order: a word cut twice ("re|\u0301|sume") joins its first part
        if ids[t] != ids[t - 1]:
            target[target == target[ids[t]]] = target[ids[t - 1]]
    present = np.bincount(ids[worded], minlength=size) > 0  # (words,)
    visible = np.bincount(ids[worded & ((kinds & BLANK) == 0)], minlength=size) > 0
    if (present & ~visible).any() and visible.any():
        seen = np.flatnonzero(visible)
        after = np.searchsorted(seen, np.arange(size))  # the first visible word at or after each
        blank_to = seen[np.minimum(after, len(seen) - 1)]  # past the last visible word: that word
        target = np.where(visible, target, target[blank_to])
    if (target == np.arange(size)).all():
        return word_ids
    joined = np.where(worded, target[np.maximum(ids, 0)], -1)
    return [None if w < 0 else int(w) for w in joined]


def visible_word_ids(word_ids: list, offsets, text: str) -> list:
    """``join_blank_words`` of the tokens ``blank_tokens`` finds in ``text``."""
    return join_blank_words(word_ids, blank_tokens(offsets, text)) if len(word_ids) else word_ids


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


def word_spans(index: np.ndarray, n_words: int, offsets) -> list[tuple[int | None, int]]:
    """Each word's (start, end) character span in the text: from its first piece's start to its
    last piece's end (start None for a word with no offsets)."""
    starts, ends, seen = span_arrays(index, n_words, offsets)
    if seen.all():  # every word has pieces: no None to place
        return list(zip(starts.tolist(), ends.tolist(), strict=True))
    return [(s if ok else None, e) for s, e, ok in zip(starts.tolist(), ends.tolist(), seen.tolist(), strict=True)]


def span_arrays(index: np.ndarray, n_words: int, offsets) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``word_spans`` as (W,) arrays: starts, ends, and whether the word has pieces (a word
    without has start 0 and end 0 here). One pass over the pieces in numpy: a word's pieces
    follow one another, so each word is one run of equal indexes, reduced at once."""
    index = np.asarray(index, dtype=np.int64)
    keep = index >= 0
    starts = np.full(n_words, np.iinfo(np.int64).max)
    ends = np.zeros(n_words, dtype=np.int64)
    seen = np.zeros(n_words, dtype=bool)
    if n_words == 0 or not keep.any():
        return np.zeros(n_words, dtype=np.int64), ends, seen
    spans = start_end_pairs(offsets)[keep]  # (pieces, 2)
    words = index[keep]
    runs = np.flatnonzero(np.r_[True, words[1:] != words[:-1]])  # where each run of one word begins
    ids = words[runs]
    if bool((ids[1:] > ids[:-1]).all()):  # increasing, every word in one run (a tokenizer's order)
        starts[ids] = np.minimum.reduceat(spans[:, 0], runs)
        ends[ids] = np.maximum.reduceat(spans[:, 1], runs)
    else:  # a word's pieces apart: gather them wherever they are
        np.minimum.at(starts, words, spans[:, 0])
        np.maximum.at(ends, words, spans[:, 1])
    seen[words] = True
    starts[~seen] = 0
    return starts, ends, seen


def start_end_pairs(offsets) -> np.ndarray:
    """(n, 2) int64 from a tokenizer's list of (start, end) tuples (or an array): one iterator over
    the flat ints, half the time of ``np.asarray`` on tuples."""
    if isinstance(offsets, np.ndarray):
        return offsets.astype(np.int64, copy=False).reshape(-1, 2)
    flat = np.fromiter(itertools.chain.from_iterable(offsets), dtype=np.int64, count=2 * len(offsets))
    return flat.reshape(-1, 2)


def word_texts(index: np.ndarray, n_words: int, offsets, text: str) -> list[str]:
    """Each word's surface text, cut from the original string by the pieces' character offsets."""
    return [
        text[s:e].strip() if s is not None else "" for s, e in with_marks(word_spans(index, n_words, offsets), text)
    ]


def with_marks(spans: list[tuple[int | None, int]], text: str) -> list[tuple[int | None, int]]:
    """``spans`` with each word's end moved past the combining marks that follow it in ``text``: a
    tokenizer that strips accents (BERT's, lowercasing) leaves a decomposed ``café`` (``e`` + U+0301)
    out of its offsets, and the word would read ``cafe``. A mark where another word starts stays
    that word's."""
    if text.isascii():  # no mark to find (most reviews)
        return spans
    starts = {start for start, _ in spans if start is not None}
    out = []
    for start, end in spans:
        if start is not None:
            while end < len(text) and end not in starts and unicodedata.category(text[end]).startswith("M"):
                end += 1
        out.append((start, end))
    return out


def join_contractions(texts: list[str], spans: list[tuple[int | None, int]], text: str) -> tuple[list[int], list[str]]:
    """Contractions that the tokenizer's pre-tokenizer split, joined back: ``wasn't`` is three
    BERT words (``wasn``, ``'``, ``t``) and two byte-level BPE words (``wasn``, ``'t``).

    A unit starts at a word of letters or digits and takes, while their characters touch in the
    text (no space between), an apostrophe followed by a word of letters or digits, or a piece
    made of an apostrophe and letters. Returns, per word, the index of its unit's first word
    (``span_id``; a word outside any contraction is its own unit) and the unit's text (``joined``).
    Hyphens and other punctuation are not joined: "well-made" stays three words.
    """
    n = len(texts)

    def touch(a: int, b: int) -> bool:
        return spans[a][0] is not None and spans[b][0] is not None and spans[a][1] == spans[b][0]

    first = list(range(n))
    joined = list(texts)
    # Every join needs the next word to start with an apostrophe: only the words before one are
    # tried (a few in a review), left to right, each after the unit before it has ended.
    candidates = [k - 1 for k in range(1, n) if texts[k][:1] in ("'", "\u2019")]
    opens = set(k + 1 for k in candidates)
    done = -1  # the last word of the last unit formed
    for i in candidates:
        if i <= done or not WORDLIKE.fullmatch(texts[i]):
            continue
        j = i
        while j + 1 in opens:
            if j + 1 < n and touch(j, j + 1) and TAIL.fullmatch(texts[j + 1]):
                j += 1
            elif (
                j + 2 < n
                and touch(j, j + 1)
                and touch(j + 1, j + 2)
                and APOSTROPHE.fullmatch(texts[j + 1])
                and WORDLIKE.fullmatch(texts[j + 2])
            ):
                j += 2
            else:
                break
        if j > i:
            unit = text[spans[i][0] : spans[j][1]]
            for w in range(i, j + 1):
                first[w], joined[w] = i, unit
            done = j
    return first, joined


def lift(shares: np.ndarray, span: np.ndarray) -> np.ndarray:
    """(L, W) word shares -> (L, W) length-fair importance, stored per word so that a unit's lift
    is the sum of its words' values: share x W / (the words in the word's unit).

    A unit's lift is therefore its share over the share an even spread gives it (its words / W),
    the mean of its words' share x W. So 1 means an even spread for every unit, whatever the
    review's length and however many words the tokenizer cut a contraction into: ``wasn't``
    (``wasn``, ``'``, ``t``) is not lifted three-fold for holding three words' worth of score.
    """
    span = np.asarray(span)
    unit_size = np.bincount(span, minlength=len(span))[span]  # (W,): words in each word's unit
    return np.asarray(shares, dtype=np.float64) * (len(span) / unit_size)


def merge_scores(scores: np.ndarray, index: np.ndarray, n_words: int) -> np.ndarray:
    """(L, n) token scores -> (L, W) word scores: the sum over each word's pieces."""
    out = np.zeros((scores.shape[0], n_words), dtype=np.float64)
    keep = index >= 0
    np.add.at(out.T, index[keep], scores[:, keep].T)
    return out


def normalise(word_scores: np.ndarray, signed: bool = False) -> np.ndarray:
    """Rescale each layer's word scores to sum 1 (the special tokens' share removed); ``signed``
    scores (gradient attributions) so that their absolute values sum to 1, signs kept. A layer
    summing to 0 stays 0; a NaN layer (one the method does not define) stays NaN."""
    total = (np.abs(word_scores) if signed else word_scores).sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # a layer the method leaves undefined stays NaN
        return np.where(total > 0, word_scores / total, np.where(np.isnan(total), np.nan, 0.0))


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


def merge_batch(scores, index, n_words: int, signed: bool = False):
    """A batch's word scores in one pass, on the scores' device (torch): scores (D, L, N) and
    index (D, N) (``word_index`` per document, -1 for special tokens and padding) -> (word sums
    (D, L, W), renormalised words (D, L, W)), W = ``n_words`` (the batch's most). A segment sum by
    word index: the special tokens' and padding's scores go to a spare column that is dropped.
    Per document and layer this is ``merge_scores`` then ``normalise``."""
    import torch

    batch, n_layers, n = scores.shape
    slot = torch.where(index >= 0, index, n_words)[:, None, :].expand(batch, n_layers, n)  # (D, L, N)
    sums = torch.zeros(batch, n_layers, n_words + 1, dtype=scores.dtype, device=scores.device)
    sums = sums.scatter_add_(2, slot, scores)[..., :n_words]  # (D, L, W)
    total = (sums.abs() if signed else sums).sum(dim=-1, keepdim=True)  # (D, L, 1)
    spread = torch.where(total > 0, sums / torch.where(total > 0, total, torch.ones_like(total)), 0.0)
    return sums, torch.where(total.isnan(), float("nan"), spread)
