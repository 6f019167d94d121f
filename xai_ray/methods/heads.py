"""Per-head attention statistics, gathered inside the capture's block loop (Clark et al. 2019).

The capture computes each head's probabilities block by block and lets them die at once; the
statistics are reduced from each block on the spot, so nothing per head outlives its block
except a few sums. Per document, layer and head (``STATISTICS``, summed over query rows):

    entropy        row entropy in nats, every real row
    entropy_norm   row entropy / ln(n), n the document's length (1 = uniform; comparable across lengths)
    cls_entropy    entropy of the [CLS] row (row 0, the row the methods read)
    to_cls, to_sep, to_punct   attention mass on [CLS], [SEP] (RoBERTa: <s>, </s>), punctuation
    to_self, to_prev, to_next  attention on the same, the previous and the next position

Means divide by the rows that have the quantity: n for most, 1 for ``cls_entropy``, n - 1 for
``to_prev`` and ``to_next`` (the first row has no previous token, the last no next one).

For a few sampled documents the first ``sample_rows`` rows of every head are also kept, and the
Jensen-Shannon divergence between every pair of heads is summed over those rows (``jsd_sums``).
"""

from __future__ import annotations

import math
import unicodedata

import torch

from xai_ray.methods.head_summary import N_STATS, STATISTICS

MASKS = ("cls", "sep", "punct")  # key-position masks, in this order, columns of ``HeadCollector.masks``
TINY = 1e-30  # log(0) guard: 0 * log(TINY) = 0, the convention 0 log 0 = 0
FAINT = 2.0**-20  # below this a [CLS] probability's log is too coarse for log Z (``row_log_z``)
WORD_MARKERS = ("##", "Ġ", "▁", "Ċ")  # WordPiece continuation, byte-level BPE and SentencePiece spaces


def is_punctuation(token: str) -> bool:
    """A token made only of Unicode punctuation once its tokenizer's space/continuation marker is gone."""
    for marker in WORD_MARKERS:
        token = token.replace(marker, "")
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def position_masks(input_ids: torch.Tensor, tokenizer, cache: dict | None = None) -> torch.Tensor:
    """(B, n) token ids -> (B, n, 3) float masks of [CLS], [SEP] and punctuation key positions.

    [CLS]/[SEP] are the tokenizer's own special tokens (``cls_token_id``/``sep_token_id``);
    punctuation is decided once per vocabulary id (``cache``) from the token's text.
    """
    cache = {} if cache is None else cache
    special = set(tokenizer.all_special_ids)
    ids = input_ids.tolist()
    unseen = sorted({i for row in ids for i in row} - cache.keys())
    for i, token in zip(unseen, tokenizer.convert_ids_to_tokens(unseen)):
        cache[i] = i not in special and is_punctuation(token or "")
    masks = torch.zeros(*input_ids.shape, len(MASKS))  # (B, n, 3)
    for column, special_id in enumerate((tokenizer.cls_token_id, tokenizer.sep_token_id)):
        if special_id is not None:
            masks[..., column] = (input_ids == special_id).float()
    masks[..., 2] = torch.tensor([[float(cache[i]) for i in row] for row in ids]).reshape(input_ids.shape)
    return masks


class HeadCollector:
    """Running per-document sums of the statistics, fed one block of one head group at a time.

    lengths: (B,) real tokens per document; masks: (B, n, 3) from ``position_masks``;
    sample: per document, whether to keep its first ``sample_rows`` rows for head similarity;
    counted: per document, whether it gets statistics at all (default every one; a sampled one always).
    """

    def __init__(self, lengths, masks: torch.Tensor, sample=None, sample_rows: int = 128, counted=None) -> None:
        self.lengths = [int(x) for x in lengths]
        self.masks = masks.float()
        self.sample = [bool(x) for x in (sample if sample is not None else [False] * len(self.lengths))]
        self.sample_rows = int(sample_rows)
        counted = counted if counted is not None else [True] * len(self.lengths)
        self.counted = [bool(c) or s for c, s in zip(counted, self.sample)]
        self.layers: list[torch.Tensor] = []  # L x (B, H, N_STATS) float64 sums
        self.kept: dict[tuple[int, int], torch.Tensor] = {}  # (layer, doc) -> (H, R, m) first rows

    def block(self, layer: int, doc: int, start: int, probs: torch.Tensor, scores: torch.Tensor | None = None) -> None:
        """Add one block of query rows ``start:start+r`` of document ``doc``: probs (H, r, m) and,
        when the caller has them, the scaled scores they came from (a cheaper exact entropy)."""
        length = probs.shape[-1]
        self._ready(layer, probs)
        if not self.counted[doc]:  # the reduction is the cost: skipped outside the statistics sample
            return
        masks = self.masks[doc, :length]  # (m, 3)
        self.layers[layer][doc] += block_statistics(probs, start, masks, scores).double()  # (H, N_STATS)
        if self.sample[doc] and start < self.sample_rows:
            self._keep(layer, doc, probs[:, : self.sample_rows - start])

    def batch_block(self, layer: int, start: int, probs, scores, raw, lengths) -> None:
        """Add query rows ``start:start+r`` of every document at once (the batched capture, a GPU):
        probs = softmax(scores), (B, H, r, n), padding columns -inf in scores and 0 in probs; raw
        the scores before that mask (finite); lengths (B,) on the device. No loop over documents:
        padded query rows are reduced with the rest and then weighted by 0; so are documents
        outside the statistics sample (``statistics`` still holds their sums; ``counted`` says
        which to read)."""
        batch, _, rows, _ = probs.shape
        self._ready(layer, probs[0])
        real_rows = ((start + torch.arange(rows, device=probs.device))[None, :] < lengths[:, None]).float()  # (B, r)
        self.layers[layer] += batched_block_statistics(probs, scores, raw, start, self.masks, real_rows).double()
        for doc in range(batch):  # the few sampled documents only (a handful per run)
            length = self.lengths[doc]
            if self.sample[doc] and start < min(self.sample_rows, length):
                last = min(rows, self.sample_rows - start, length - start)
                self._keep(layer, doc, probs[doc, :, :last, :length])

    def _ready(self, layer: int, probs: torch.Tensor) -> None:
        """The layer's sums and the masks on the probabilities' device (probs (H, r, m)): no host
        sync per block on a GPU."""
        while len(self.layers) <= layer:
            self.layers.append(
                torch.zeros(len(self.lengths), probs.shape[0], N_STATS, dtype=torch.float64, device=probs.device)
            )
        if self.masks.device != probs.device:
            self.masks = self.masks.to(probs.device)

    def _keep(self, layer: int, doc: int, rows: torch.Tensor) -> None:
        """Append a sampled document's first rows (H, r', m) for head similarity."""
        keep = rows.float()
        previous = self.kept.get((layer, doc))
        self.kept[(layer, doc)] = keep.clone() if previous is None else torch.cat([previous, keep], dim=1)

    def add_layer(self, layer: int, attention: torch.Tensor) -> None:
        """Eager fallback: a whole layer's (B, H, n, n) attention, documents sliced to their length."""
        for doc, length in enumerate(self.lengths):
            self.block(layer, doc, 0, attention[doc, :, :length, :length].float())

    def statistics(self) -> torch.Tensor:
        """(B, L, H, N_STATS) float64 sums over each document's rows (see module doc); those of a
        document not ``counted`` are zero or, from the batched path, unused."""
        sums = torch.stack(self.layers, dim=1).cpu()  # (B, L, H, N_STATS)
        log_n = torch.tensor([math.log(n) if n > 1 else 1.0 for n in self.lengths], dtype=torch.float64)
        norm = STATISTICS.index("entropy_norm")
        sums[..., norm] = sums[..., STATISTICS.index("entropy")] / log_n[:, None, None]
        return sums

    def attention(self, doc: int) -> torch.Tensor:
        """(L, H, R, m) every head's kept rows of a sampled document (all of them when
        ``sample_rows`` >= its length): what the single-review explorer draws."""
        return torch.stack([self.kept[(layer, doc)] for layer in range(len(self.layers))]).cpu()

    def similarity(self) -> dict[int, tuple[torch.Tensor, int]]:
        """Per sampled document: ((P, P) JSD sums over its kept rows, rows), P = L x H heads."""
        out = {}
        for doc, wanted in enumerate(self.sample):
            if not wanted or (0, doc) not in self.kept:
                continue
            heads = torch.cat([self.kept[(layer, doc)] for layer in range(len(self.layers))])  # (P, R, m)
            out[doc] = (jsd_sums(heads), int(heads.shape[1]))
        return out


def block_statistics(
    probs: torch.Tensor, start: int, masks: torch.Tensor, scores: torch.Tensor | None = None
) -> torch.Tensor:
    """probs (H, r, m): query rows start..start+r-1 of every head; masks (m, 3) -> (H, N_STATS) sums.

    With the scores (H, r, m) behind probs = softmax(scores), a row's entropy is
    log Z - sum(p * s), and log Z = s_j - log p_j for any key j (p_j = exp(s_j) / Z): a log per
    row instead of a log per probability (``row_log_z``). Every reduction here is one light pass
    over the block (about a seventh of the block's attention work on a CPU, bench/heads.py).
    """
    heads = probs.shape[0]
    out = torch.zeros(heads, N_STATS, dtype=torch.float32, device=probs.device)
    if scores is not None:
        log_z = row_log_z(probs, scores)  # (H, r)
        entropy = log_z - (probs * scores).sum(dim=-1)  # (H, r): vecdot ran 1.3x slower at 300 keys, einsum 3x at 512
    else:
        entropy = -(probs * probs.clamp_min(TINY).log()).sum(dim=-1)  # (H, r); 0 log 0 = 0
    out[:, 0] = entropy.sum(dim=1)
    if start == 0:
        out[:, 2] = entropy[:, 0]  # the [CLS] row
    out[:, 3:6] = probs.sum(dim=1) @ masks  # (H, 3): mass on cls, sep, punct keys (rows summed first: cheap)
    # Row i of the block is position start + i: the same, previous and next keys are diagonals
    # (views, no copies); row 0 of a document has no previous key, its last row no next one.
    out[:, 6] = probs.diagonal(offset=start, dim1=1, dim2=2).sum(dim=-1)
    out[:, 7] = probs.diagonal(offset=start - 1, dim1=1, dim2=2).sum(dim=-1)
    out[:, 8] = probs.diagonal(offset=start + 1, dim1=1, dim2=2).sum(dim=-1)
    return out


def row_log_z(probs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """(..., r, m) probabilities = softmax(scores) -> (..., r) log Z of each row, from the first key
    ([CLS], every row has it): log Z = s_0 - log p_0, a strided read instead of two max-reductions
    over the block. Where p_0 < 2**-20, its log's rounding would weigh more than a ulp of the
    result, so those rows (few: most heads give [CLS] far more) take their largest key instead."""
    first = probs[..., 0]  # (..., r)
    log_z = scores[..., 0] - first.clamp_min(FAINT).log()  # (..., r)
    faint = first < FAINT  # (..., r)
    if bool(faint.any()):
        rows_scores, rows_probs = scores[faint], probs[faint]  # (k, m): the faint rows only
        log_z[faint] = rows_scores.amax(dim=-1) - rows_probs.amax(dim=-1).log()  # the max of both sits at one key
    return log_z


def batched_block_statistics(
    probs: torch.Tensor,
    scores: torch.Tensor,
    raw: torch.Tensor,
    start: int,
    masks: torch.Tensor,
    real_rows: torch.Tensor,
) -> torch.Tensor:
    """``block_statistics`` for every document of a padded block at once -> (B, H, N_STATS) sums.

    probs = softmax(scores), (B, H, r, n), padding columns -inf in scores and 0 in probs; raw (B,
    H, r, n) the scores before that mask; masks (B, n, 3); real_rows (B, r) 1 for a document's
    real query rows, 0 for padding.
    """
    batch, heads = probs.shape[:2]
    out = torch.zeros(batch, heads, N_STATS, dtype=torch.float32, device=probs.device)
    # log Z = the largest score - log of the largest probability (both at one key), as on the
    # per-document path; p . s over raw scores, as a padding column's -inf times its 0 would be nan
    log_z = scores.amax(dim=-1) - probs.amax(dim=-1).log()  # (B, H, r)
    entropy = log_z - (probs * raw).sum(dim=-1)  # (B, H, r)
    weights = real_rows[:, None, :]  # (B, 1, r)
    out[..., 0] = (entropy * weights).sum(dim=-1)
    if start == 0:
        out[..., 2] = entropy[..., 0]  # the [CLS] row (every document has one)
    summed = torch.matmul(weights[:, :, None, :], probs).squeeze(2)  # (B, H, n): real rows summed
    out[..., 3:6] = torch.matmul(summed, masks)  # (B, H, 3)
    for column, offset in ((6, start), (7, start - 1), (8, start + 1)):
        diagonal = probs.diagonal(offset=offset, dim1=2, dim2=3)  # (B, H, k): row j (j + 1 if offset < 0)
        first = 1 if offset < 0 else 0
        out[..., column] = (diagonal * weights[..., first : first + diagonal.shape[-1]]).sum(dim=-1)
    return out


def jsd_sums(heads: torch.Tensor) -> torch.Tensor:
    """heads (P, R, m): P heads' attention over the same R query rows -> (P, P) float64 matrix of
    the Jensen-Shannon divergence (nats) between each pair, summed over rows; zero diagonal.

    JS(p, q) = H((p + q) / 2) - (H(p) + H(q)) / 2, one head against all later ones at a time.
    With s = p + q, H(s / 2) = (ln 2 * sum(s) - sum(s ln s)) / 2: an add, a log and a dot per pair
    and key into reused buffers (half the passes of forming the mixture and its entropy directly).
    Probabilities are floored at TINY / 2 once, so s never holds a 0 to take the log of; a floored
    entry moves a row's entropy by under 1e-28.
    """
    heads = heads.float().clamp_min(TINY / 2)  # (P, R, m)
    count, rows, keys = heads.shape
    entropy = -(heads * heads.log()).sum(dim=-1)  # (P, R)
    mass = heads.sum(dim=-1)  # (P, R): 1 for a full row of probabilities
    out = torch.zeros(count, count, dtype=torch.float64, device=heads.device)  # filled there: one copy out
    summed = torch.empty(max(count - 1, 0), rows, keys, dtype=heads.dtype, device=heads.device)  # (P-1, R, m)
    logs = torch.empty_like(summed)
    for i in range(count - 1):
        later = count - 1 - i
        s = torch.add(heads[i : i + 1], heads[i + 1 :], out=summed[:later])  # (P-i-1, R, m)
        s_log_s = torch.log(s, out=logs[:later]).mul_(s).sum(dim=-1)  # (P-i-1, R)
        mixed_entropy = (math.log(2) * (mass[i : i + 1] + mass[i + 1 :]) - s_log_s) / 2  # (P-i-1, R)
        divergence = (mixed_entropy - (entropy[i : i + 1] + entropy[i + 1 :]) / 2).clamp_min(0)  # (P-i-1, R)
        row = divergence.sum(dim=1).double()  # (P-i-1,)
        out[i, i + 1 :] = row
        out[i + 1 :, i] = row
    return out.cpu()
