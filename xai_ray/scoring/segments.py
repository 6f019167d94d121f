"""How a review longer than ``max_length`` reaches the model, and how its pieces are merged back.

The review is tokenized whole once (no special tokens). ``room`` = max_length minus the special
tokens the tokenizer adds. Then, by ``long_text``:

- ``head``: the first ``room`` tokens (what plain truncation keeps).
- ``head_tail``: the first ``room // 4`` tokens and the last ``room - room // 4`` (the split
  ``xai-ray finetune`` trains with; reviews tend to end with their verdict).
- ``window``: windows of ``room`` tokens starting every ``stride`` tokens (default ``room // 2``);
  the last window ends at the review's end. Each window gets its own special tokens.

Merge rule for windows (as BERT's reading-comprehension code picks a token's "max context"
window): every word takes all its pieces' scores from one window, the window that holds all its
pieces and leaves it the most context, i.e. maximises min(pieces before it, pieces after it) in
that window; ties go to the earlier window. So every word is scored exactly once, and a review
that fits one window is scored exactly as without windows. Special tokens ([CLS], [SEP]) take the
mean of their scores over the windows; the class probabilities are the mean over the windows.
``auto`` is what the model folder says it was fine-tuned with (``finetune`` writes
``xai_ray_input.json``), else ``head``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xai_ray.words import blank_tokens, join_blank_words, visible_word_ids

INPUT_FILE = "xai_ray_input.json"  # written by `xai-ray finetune` into the model folder


def model_truncation(model: str) -> str | None:
    """The truncation a model folder records (``finetune``), or None (a Hub id, another folder)."""
    folder = Path(str(model)).expanduser()
    for name, key in ((INPUT_FILE, "truncation"), ("metrics.json", None)):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        value = data.get("truncation") if key else data.get("config", {}).get("truncation")
        if value in ("head", "head_tail"):
            return value
    return None


def resolve_mode(long_text: str, model: str) -> str:
    if long_text != "auto":
        return long_text
    return model_truncation(model) or "head"


@dataclass
class Segments:
    """One review cut into model inputs. Positions are into the review's content tokens."""

    ids: list[int]  # content token ids of the whole review
    offsets: list[tuple[int, int]]  # character span of each content token
    word_ids: list  # the tokenizer's word id of each content token (None for none)
    windows: list[tuple[int, int]]  # [start, end) content ranges, one model input each (head_tail: two ranges)
    kept: list[int]  # content positions the merged document holds, in order
    source: list[int]  # for each kept position, the window (index into ``inputs``) its score comes from
    inputs: list[list[int]]  # model input ids per window, special tokens included
    content_at: list[int]  # per window: position of its first content token in its input
    truncated: bool
    blank: bytes | None = (
        None  # per content token, words.blank_tokens' kind (uint8 bytes), where a tokenizer makes such words
    )


def special_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """(ids before the content, ids after it) that the tokenizer adds around one sequence,
    read off a probe as ``finetune.encode`` does (transformers 5 has no build_inputs_with_special_tokens)."""
    bare, full = tokenizer("a", add_special_tokens=False)["input_ids"], tokenizer("a")["input_ids"]
    start = next(i for i in range(len(full)) if full[i : i + len(bare)] == bare)
    return list(full[:start]), list(full[start + len(bare) :])


def special_layout(tokenizer) -> tuple[int, int]:
    """(tokens before the content, tokens after it) around one sequence."""
    prefix, suffix = special_tokens(tokenizer)
    return len(prefix), len(suffix)


def plan(tokenizer, text: str, max_length: int, mode: str, stride: int | None = None) -> Segments:
    """Cut ``text`` into model inputs of at most ``max_length`` tokens by ``mode`` (see module doc)."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [tuple(o) for o in encoded["offset_mapping"]]
    text = text if makes_blank_words(tokenizer) else None
    return _cut(
        list(encoded["input_ids"]),
        offsets,
        encoded.word_ids(),
        text,
        special_tokens(tokenizer),
        max_length,
        mode,
        stride,
    )


def _cut(ids, offsets, word_ids, text, specials, max_length, mode, stride) -> Segments:
    """``cut``, a word of white-space pieces joined to a word first where ``text`` is given (the
    tokenizer makes such words): then the cut is kept, to join them again within what is kept."""
    if text is None:
        return cut(ids, offsets, word_ids, specials, max_length, mode, stride)
    blank = blank_tokens(offsets, text)
    seg = cut(ids, offsets, join_blank_words(word_ids, blank), specials, max_length, mode, stride)
    seg.blank = None if blank is None else blank.tobytes()  # bytes: plans compare as values
    return seg


def makes_blank_words(tokenizer) -> bool:
    """Whether the tokenizer makes words of white space alone (byte-level BPE: a lone "Ġ", tabs,
    line breaks), found once on a probe and kept on the tokenizer: WordPiece makes none, and its
    reviews skip ``words.visible_word_ids`` (0.3 ms a review)."""
    found = getattr(tokenizer, "_xai_ray_blank_words", None)
    if found is None:
        probe = "a  b\t\tc\n\nd "
        encoded = tokenizer(probe, add_special_tokens=False, return_offsets_mapping=True)
        found = visible_word_ids(encoded.word_ids(), encoded["offset_mapping"], probe) != encoded.word_ids()
        try:
            tokenizer._xai_ray_blank_words = found
        except AttributeError:  # a tokenizer that takes no attribute: probed again next time
            pass
    return found


def plan_batch(
    tokenizer, texts: list[str], max_length: int, mode: str, stride: int | None = None, specials=None
) -> list[Segments | Exception]:
    """``plan`` for many texts with one tokenizer call: the tokenizer's batch encoding (in Rust,
    on its own threads) costs less than one call per text on one core, and much less on many.
    A text the batch call cannot take is planned alone, so its error is its own (an ``Exception``
    in its place) and the others' plans are unchanged. ``specials``: ``special_tokens(tokenizer)``,
    read once by the caller."""
    specials = specials or special_tokens(tokenizer)
    blank = makes_blank_words(tokenizer)
    try:
        encodings = _encode_batch(tokenizer, list(texts))
    except Exception:  # one bad text fails the whole call: each on its own, errors kept per text
        return [_plan_or_error(tokenizer, text, max_length, mode, stride) for text in texts]
    return [
        _cut_or_error(e, text if blank else None, specials, max_length, mode, stride)
        for e, text in zip(encodings, texts)
    ]


def _cut_or_error(encoding, text, specials, max_length, mode, stride) -> Segments | Exception:
    """``text``: the review, where the tokenizer makes words of white space alone (else None)."""
    try:
        return _cut(
            list(encoding.ids), list(encoding.offsets), encoding.word_ids, text, specials, max_length, mode, stride
        )
    except Exception as err:  # this text's error alone: the caller records it as its row
        return err


def _encode_batch(tokenizer, texts: list[str]) -> list:
    """The tokenizer's own encodings of ``texts`` (no special tokens): ``ids``, ``offsets`` and
    ``word_ids`` each. A fast tokenizer whose encoding transformers does not override is asked
    directly, after one empty call through transformers has set its truncation, padding and
    special-token options as ``plan``'s call would: transformers' conversion of every encoding into
    Python lists of six fields costs as much as the encoding itself."""
    from xai_ray.model.lean_tokenizer import LeanTokenizer

    if isinstance(tokenizer, LeanTokenizer):  # its Rust tokenizer truncates and pads nothing between calls
        return tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    if isinstance(tokenizer, TokenizersBackend) and type(tokenizer)._encode_plus is TokenizersBackend._encode_plus:
        tokenizer("", add_special_tokens=False, return_offsets_mapping=True)  # the options plan's call sets
        return tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    return [
        _Encoding(ids, offsets, encoded.word_ids(i))
        for i, (ids, offsets) in enumerate(zip(encoded["input_ids"], encoded["offset_mapping"]))
    ]


@dataclass
class _Encoding:
    """A slow tokenizer's encoding of one text, shaped as a fast tokenizer's."""

    ids: list[int]
    offsets: list
    word_ids: list


def _plan_or_error(tokenizer, text, max_length, mode, stride) -> Segments | Exception:
    try:
        return plan(tokenizer, text, max_length, mode, stride)
    except Exception as err:  # recorded by the caller as the text's error row
        return err


def cut(ids, offsets, word_ids, specials, max_length: int, mode: str, stride: int | None = None) -> Segments:
    """One review's content tokens (``ids``, their character ``offsets`` and ``word_ids``) cut into
    model inputs; ``specials``: (ids before the content, ids after it)."""
    prefix, suffix = specials
    before, after = len(prefix), len(suffix)
    room = max(1, max_length - before - after)
    n = len(ids)
    if n <= room or mode == "head":
        ranges = [(0, min(n, room))]
    elif mode == "head_tail":
        head = room // 4
        ranges = [(0, head), (n - (room - head), n)]
    elif mode == "window":
        step = stride or max(1, room // 2)
        starts = list(range(0, n - room, step)) + [n - room]  # the last window ends at the end
        ranges = [(s, s + room) for s in dict.fromkeys(starts)]
    else:
        raise ValueError(f"unknown long_text mode {mode!r}")
    if mode == "head_tail" and len(ranges) == 2:  # one model input holding both parts
        (h0, h1), (t0, t1) = ranges
        inputs = [prefix + ids[h0:h1] + ids[t0:t1] + suffix]
        kept = list(range(h0, h1)) + list(range(t0, t1))
        return Segments(ids, offsets, word_ids, ranges, kept, [0] * len(kept), inputs, [before], True)
    inputs = [prefix + ids[s:e] + suffix for s, e in ranges]
    if len(ranges) == 1:  # the head, or a review that fits: every position from the one window
        kept = list(range(*ranges[0]))
        return Segments(ids, offsets, word_ids, ranges, kept, [0] * len(kept), inputs, [before], len(kept) < n)
    kept = sorted({p for s, e in ranges for p in range(s, e)})
    source = choose_windows(kept, word_ids, ranges)
    truncated = len(kept) < n
    return Segments(ids, offsets, word_ids, ranges, kept, source, inputs, [before] * len(ranges), truncated)


def choose_windows(kept: list[int], word_ids: list, ranges: list[tuple[int, int]]) -> list[int]:
    """For each kept position, the window its word is scored in (the max-context rule)."""
    pieces: dict = {}
    for p in kept:
        key = ("word", word_ids[p]) if word_ids[p] is not None else ("token", p)
        pieces.setdefault(key, []).append(p)
    source = {}
    for group in pieces.values():
        first, last = group[0], group[-1]
        best, best_context = None, -1
        for w, (s, e) in enumerate(ranges):
            if s <= first and last < e:
                context = min(first - s, e - 1 - last)
                if context > best_context:  # strictly better: ties stay with the earlier window
                    best, best_context = w, context
        if best is None:  # a word longer than the windows' overlap: each piece by its own context
            for p in group:
                source[p] = max(
                    range(len(ranges)),
                    key=lambda w: (ranges[w][0] <= p < ranges[w][1], min(p - ranges[w][0], ranges[w][1] - 1 - p), -w),
                )
        else:
            for p in group:
                source[p] = best
    return [source[p] for p in kept]


def merge_index(seg: Segments, special_before: int, special_after: int) -> tuple[np.ndarray, ...]:
    """Where each merged position's score comes from, by the rule in the module doc: arrays
    (window, position in its input, merged position, weight) over every source. A review of one
    model input is the identity (weight 1); the special tokens of several windows take each
    window's score at weight 1 / windows (their mean); a content token takes its chosen window's."""
    lengths = [len(x) for x in seg.inputs]
    n_merged = special_before + len(seg.kept) + special_after
    if len(seg.inputs) == 1:
        positions = np.arange(lengths[0])
        return np.zeros_like(positions), positions, positions, np.ones(lengths[0])
    n_windows = len(seg.inputs)
    windows, positions, merged, weights = [], [], [], []
    for w, length in enumerate(lengths):  # specials: the mean over windows
        ends = np.arange(length - special_after, length)
        positions.append(np.concatenate([np.arange(special_before), ends]))
        merged.append(np.concatenate([np.arange(special_before), np.arange(n_merged - special_after, n_merged)]))
        windows.append(np.full(special_before + special_after, w))
        weights.append(np.full(special_before + special_after, 1.0 / n_windows))
    source = np.asarray(seg.source, dtype=np.int64)  # (kept,)
    starts = np.asarray([seg.windows[w][0] for w in range(n_windows)])[source]
    content_at = np.asarray(seg.content_at)[source]
    windows.append(source)
    positions.append(content_at + np.asarray(seg.kept) - starts)
    merged.append(special_before + np.arange(len(seg.kept)))
    weights.append(np.ones(len(seg.kept)))
    return tuple(np.concatenate(x) for x in (windows, positions, merged, weights))


def merged_layout(seg: Segments, special_before: int, special_after: int) -> tuple[list, list, list]:
    """The merged document's (word ids, offsets, input ids): special tokens around the kept content.
    Where the cut kept white-space pieces of a word it left out (a line break just before the cut,
    joined to the word past it), they join a word of their own part of what is kept."""
    kept = [seg.word_ids[p] for p in seg.kept]
    if seg.blank is not None and seg.truncated:
        blank = np.frombuffer(seg.blank, dtype=np.uint8)[np.asarray(seg.kept)]  # (kept,)
        runs = np.split(np.arange(len(seg.kept)), np.flatnonzero(np.diff(seg.kept) != 1) + 1)  # head_tail: two
        kept = [w for run in runs for w in join_blank_words([kept[i] for i in run], blank[run])]
    word_ids = [None] * special_before + kept + [None] * special_after
    offsets = [(0, 0)] * special_before + [seg.offsets[p] for p in seg.kept] + [(0, 0)] * special_after
    first = seg.inputs[0]
    ids = first[:special_before] + [seg.ids[p] for p in seg.kept] + first[len(first) - special_after :]
    return word_ids, offsets, ids


@dataclass
class MergedBatch:
    """The reviews of one forward batch as merged documents: their layout, and how the (R, L, N)
    scores of the batch's model inputs become the (D, L, Nm) scores of its D reviews."""

    token_ids: list[list[int]]  # per review: its merged input ids
    offsets: list[list]  # per review: each token's character span
    indexes: list[np.ndarray]  # per review: word index per token (-1: special token)
    n_tokens: np.ndarray  # (D,)
    n_words: np.ndarray  # (D,)
    rows: list[int]  # the batch row of each review's first input
    gather: tuple | None  # (batch row, position, flat target, weight) per source, (S,) each; None: one input each

    @property
    def n_words_max(self) -> int:
        return int(self.n_words.max()) if len(self.n_words) else 0

    @classmethod
    def of(cls, plans: list[Segments], windows_of: list[list[int]], tokenizer) -> MergedBatch:
        """plans: the D reviews' cuts; windows_of: the batch rows of each review's inputs, in order."""
        from xai_ray.words import word_index

        before, after = special_layout(tokenizer)
        ids, offsets, indexes, n_words = [], [], [], []
        for seg in plans:
            word_ids, spans, token_ids = merged_layout(seg, before, after)
            index, count = word_index(word_ids)
            ids.append(token_ids)
            offsets.append(spans)
            indexes.append(index)
            n_words.append(count)
        n_tokens = np.asarray([len(x) for x in ids], dtype=np.int64)
        gather = None
        if any(len(rows) > 1 for rows in windows_of):
            parts = []
            for d, (seg, rows) in enumerate(zip(plans, windows_of)):
                window, position, merged, weight = merge_index(seg, before, after)
                parts.append((np.asarray(rows)[window], position, d * n_tokens.max() + merged, weight))
            gather = tuple(np.concatenate(x) for x in zip(*parts))
        first = [rows[0] for rows in windows_of]
        return cls(ids, offsets, indexes, n_tokens, np.asarray(n_words, dtype=np.int64), first, gather)

    def scores(self, window_scores):
        """(R, L, N) scores of the batch's inputs -> (D, L, Nm) scores of its reviews (torch, on
        their device): the inputs' rows themselves when every review is one input, else the
        weighted sum of each merged position's sources (``merge_index``)."""
        import torch

        rows = torch.as_tensor(self.rows, device=window_scores.device)
        width = int(self.n_tokens.max())
        if self.gather is None:
            return window_scores[rows][..., :width]
        source_rows, positions, targets, weights = self.gather
        batch, n_layers, n = window_scores.shape
        flat = window_scores.transpose(1, 2).reshape(batch * n, n_layers)  # (R * N, L)
        picked = flat[torch.as_tensor(source_rows * n + positions, device=flat.device)]  # (S, L)
        weights = torch.as_tensor(weights, dtype=flat.dtype, device=flat.device)
        out = torch.zeros(len(self.rows) * width, n_layers, dtype=flat.dtype, device=flat.device)
        out.index_add_(0, torch.as_tensor(targets, device=flat.device), picked * weights[:, None])
        return out.reshape(len(self.rows), width, n_layers).transpose(1, 2)  # (D, L, Nm)

    def word_index(self, device):
        """(D, Nm) word index of every merged token, -1 for special tokens and padding (torch)."""
        import torch

        out = np.full((len(self.indexes), int(self.n_tokens.max())), -1, dtype=np.int64)
        for d, index in enumerate(self.indexes):
            out[d, : len(index)] = index
        return torch.from_numpy(out).to(device)
