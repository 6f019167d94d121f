"""One forward pass that yields what the methods need: logits and head-fused attention.

Asking transformers for ``output_attentions`` keeps every layer's (B, H, n, n) attention alive
and forces the eager path. Instead we register an attention function of our own
("xai_capture") through transformers' AttentionInterface: the layer's output comes from fused
SDPA as in a plain forward pass, and the head-fused attention is computed beside it in small
blocks whose per-head probabilities die at once. Peak memory then no longer grows with heads,
and only the fused matrices of the L layers leave the forward pass.

A custom attention name also needs a mask function registered (AttentionMaskInterface):
without one transformers passes no mask and padding would be silently attended. Both are
registered by ``register`` (``loading.load_model`` calls it), so importing this module imports
no transformers: the plain-torch classifiers (``encoders``) call ``capture_attention`` themselves.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

import torch

from xai_ray.model import attention_gradients, encoder_norms, relevance, value_norms
from xai_ray.model.attention_record import attention_of

CAPTURE = "xai_capture"
SDPA_OUTPUT = False  # True: layer output from fused SDPA, probabilities computed beside it
BLOCK_BYTES = 4 * 2**20  # per-head scores of one block of query rows: about a cache's worth
BATCHED_BLOCK_BYTES = 256 * 2**20  # the batched path's block on a GPU: few large kernels, bounded memory

_active: contextvars.ContextVar[_Collector | None] = contextvars.ContextVar("xai_ray_capture", default=None)


@dataclass
class _Collector:
    fusion: str
    discard_ratio: float
    lengths: torch.Tensor  # (B,)
    batched: bool = False  # padded blocks over the whole batch (a GPU) instead of a loop over documents
    layers: list = field(default_factory=list)  # L x (B, n, n) fused attention
    heads: object = None  # xai_ray.methods.heads.HeadCollector: per-head statistics from the same blocks
    projections: dict | None = None  # value_norms.output_projections: set when norm-based attention is asked
    norms: list = field(default_factory=list)  # L x (B, n, n) norms ||sum_h alpha^h_ij f^h(x_j)||
    encoder: dict | None = None  # encoder_norms.encoder_layers: set when globenc is asked
    inputs: dict = field(default_factory=dict)  # id of a self-attention module -> its (B, n, D) input, this pass
    globenc: list = field(default_factory=list)  # L x (B, n, n) norms ||A z_ij|| (encoder_norms)


def fuse_heads(
    attn: torch.Tensor, fusion: str = "mean", discard_ratio: float = 0.0, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, H, n, n) per-head attention -> (B, n, n) fused attention whose real rows sum to 1.

    discard_ratio drops, per head and row, that share of the lowest weights among the row's real
    columns (never column 0, [CLS]) before fusion; max/min fusion renormalises rows afterwards.
    """
    partial = _fuse_partial(attn.float(), fusion, discard_ratio, lengths)
    return _finish(partial, attn.shape[1], fusion, discard_ratio)


def _fuse_partial(attn, fusion, discard_ratio, lengths) -> torch.Tensor:
    """Reduce a chunk of heads: a sum for mean fusion, else the max/min over the chunk."""
    if discard_ratio > 0:
        attn = _discard_lowest(attn, discard_ratio, lengths)
    if fusion == "mean":
        return attn.sum(dim=1)  # (B, n, n)
    if fusion == "max":
        return attn.amax(dim=1)  # (B, n, n)
    if fusion == "min":
        return attn.amin(dim=1)  # (B, n, n)
    raise ValueError(f"head fusion must be mean, max or min; got {fusion!r}")


def _finish(total, n_heads, fusion, discard_ratio):
    if fusion == "mean":
        total = total / n_heads
    if fusion != "mean" or discard_ratio > 0:
        total = _renormalise(total)
    return total


def _renormalise(rows: torch.Tensor) -> torch.Tensor:
    total = rows.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, rows / total.clamp_min(1e-30), rows)


def _discard_lowest(attn: torch.Tensor, ratio: float, lengths: torch.Tensor | None) -> torch.Tensor:
    batch, n = attn.shape[0], attn.shape[-1]  # a block may hold fewer query rows than columns
    if lengths is None:
        lengths = torch.full((batch,), n, device=attn.device)
    columns = torch.arange(n, device=attn.device)
    real = columns[None, :] < lengths[:, None]  # (B, n)
    protected = ~real[:, None, None, :] | (columns == 0)[None, None, None, :]  # (B, 1, 1, n)
    ranked = attn.masked_fill(protected, float("inf"))  # (B, H, n, n)
    order = ranked.argsort(dim=-1, stable=True)  # ascending; protected columns last
    rank = order.argsort(dim=-1)  # rank of each column within its row
    n_drop = torch.floor((lengths - 1).clamp_min(0).float() * ratio).long()  # (B,)
    drop = rank < n_drop[:, None, None, None]
    return _renormalise(attn.masked_fill(drop, 0.0))


def capture_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Drop-in attention that also records the head-fused probabilities.

    query/key/value: (B, H, n, d). Returns ((B, n, H, d) output, None).
    While capturing, attention runs per document over its real tokens only (no mask to add, no
    padding work) in blocks of query rows small enough to stay in cache; each block's per-head
    probabilities give both the output rows (P @ V) and the fused rows, then die. Outside a
    capture it is plain fused SDPA.
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    conservative = relevance.active()
    if conservative is not None:  # a relevance pass (relevance): probabilities held constant in the backward
        return relevance.attend_detached(query, key, value, attention_mask, scaling, conservative), None
    gradients = attention_gradients.active()
    if gradients is not None:  # a gradient pass (attention_gradients): every layer's A hooked for backward
        return attention_gradients.attend_with_gradients(query, key, value, scaling, gradients), None
    collector = _active.get()
    if collector is None or SDPA_OUTPUT:  # a plain forward pass (no capture asked): fused SDPA
        output = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling
        )  # (B, H, n, d)
    if collector is not None:
        if not SDPA_OUTPUT:
            output = torch.zeros_like(query)  # (B, H, n, d): padded query rows stay 0, nothing reads them
        attend = _attend_and_fuse_batched if collector.batched else _attend_and_fuse
        with torch.autocast(query.device.type, enabled=False):  # probabilities stay fp32 under autocast
            norms = _norm_targets(module, value, collector)
            fused = attend(query, key, value, scaling, collector, None if SDPA_OUTPUT else output, norms)
        collector.layers.append(fused)
        for target, (out, _, _) in norms.items():
            getattr(collector, target).append(out)
    return output.transpose(1, 2).contiguous(), None


def _norm_targets(module, value, collector) -> dict:
    """Collector list ("norms", "globenc") -> (zeroed (B, n, n) norms to fill, (B, n, K, K) Gram of
    the vectors the rows mix, whether the residual's x_i is the last of them), for each that a
    method reads; empty when none does."""
    batch, _, n, _ = value.shape
    targets = {}
    if collector.projections is not None:
        weight = collector.projections.get(id(module))
        if weight is None:
            raise RuntimeError(value_norms.UNSUPPORTED)
        targets["norms"] = (value_norms.value_gram(value, weight), False)  # (B, n, H, H)
    if collector.encoder is not None:
        layer, layer_input = collector.encoder.get(id(module)), collector.inputs.pop(id(module), None)
        if layer is None or layer_input is None:
            raise RuntimeError(encoder_norms.UNSUPPORTED)
        targets["globenc"] = (encoder_norms.encoder_gram(value, layer, layer_input), True)  # (B, n, H+1, H+1)
    zeros = {name: torch.zeros(batch, n, n, dtype=torch.float32, device=value.device) for name in targets}
    return {name: (zeros[name], gram, residual) for name, (gram, residual) in targets.items()}


def _block_norms(probs, gram, residual: bool, start: int):
    """(B, H, r, n) probabilities of rows start.. and the (B, n, K, K) Gram -> (B, r, n) norms."""
    return value_norms.vector_norms(value_norms.with_residual(probs, start) if residual else probs, gram)


def _attend_and_fuse(query, key, value, scaling, collector, output, norms=None) -> torch.Tensor:
    """Attention per document over its real tokens, in blocks of query rows: writes the layer's
    output into ``output`` (and the norms of each of ``_norm_targets``, when asked) and returns
    the head-fused probabilities (B, n, n)."""
    batch, heads, n, _ = query.shape
    fused = torch.zeros(batch, n, n, dtype=torch.float32, device=query.device)  # (B, n, n)
    plain_mean = collector.fusion == "mean" and collector.discard_ratio == 0
    for b, length in enumerate(collector.lengths.tolist()):
        q = query[b, :, :length].float() * scaling  # (H, m, d)
        k_t = key[b, :, :length].float().transpose(1, 2)  # (H, d, m)
        v = value[b, :, :length].float()  # (H, m, d)
        rows = max(1, BLOCK_BYTES // max(1, heads * length * 4))
        for start in range(0, length, rows):
            stop = min(start + rows, length)
            scores = torch.matmul(q[:, start:stop], k_t)  # (H, r, m)
            probs = scores.softmax(dim=-1)  # (H, r, m)
            if collector.heads is not None:
                collector.heads.block(len(collector.layers), b, start, probs, scores)
            if output is not None:
                output[b, :, start:stop] = torch.matmul(probs, v).to(output.dtype)  # (H, r, d)
            for out, gram, residual in (norms or {}).values():
                block = _block_norms(probs[None], gram[b : b + 1, :length], residual, start)  # (1, r, m)
                out[b, start:stop, :length] = block[0]
            target = fused[b, start:stop, :length]  # (r, m) view
            if plain_mean:
                torch.sum(probs, dim=0, out=target)  # divided by H once, below
                continue
            if collector.discard_ratio > 0:
                probs = _discard_lowest(
                    probs[None], collector.discard_ratio, torch.tensor([length], device=probs.device)
                )[0]
            partial = _fuse_partial(probs[None], collector.fusion, 0.0, None)[0]  # (r, m)
            target.copy_(_finish(partial, heads, collector.fusion, collector.discard_ratio))
    if plain_mean:
        fused /= heads
    return fused


def _attend_and_fuse_batched(query, key, value, scaling, collector, output, norms=None) -> torch.Tensor:
    """The same as ``_attend_and_fuse`` for the whole padded batch at once, for a GPU: blocks of
    query rows of every document together (padding columns masked), no Python loop over
    documents and no host sync (the lengths stay on the device). Padded query rows are computed
    and then zeroed: cheap on a GPU, where the per-document loop's many small kernels are not."""
    batch, heads, n, _ = query.shape
    lengths = collector.lengths.to(query.device)  # (B,)
    positions = torch.arange(n, device=query.device)
    real_columns = positions[None, :] < lengths[:, None]  # (B, n)
    column_mask = torch.where(real_columns, 0.0, float("-inf"))[:, None, None, :]  # (B, 1, 1, n)
    q = query.float() * scaling  # (B, H, n, d)
    k_t = key.float().transpose(2, 3)  # (B, H, d, n)
    v = value.float()  # (B, H, n, d)
    fused = torch.empty(batch, n, n, dtype=torch.float32, device=query.device)  # (B, n, n)
    rows = max(1, BATCHED_BLOCK_BYTES // max(1, batch * heads * n * 4))
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        raw = torch.matmul(q[:, :, start:stop], k_t)  # (B, H, r, n)
        scores = raw + column_mask  # (B, H, r, n)
        probs = scores.softmax(dim=-1)  # (B, H, r, n): padding columns exactly 0
        if collector.heads is not None:  # per-document statistics, every document in a few kernels
            collector.heads.batch_block(len(collector.layers), start, probs, scores, raw, lengths)
        del raw
        if output is not None:
            output[:, :, start:stop] = torch.matmul(probs, v).to(output.dtype)  # (B, H, r, d)
        for out, gram, residual in (norms or {}).values():  # padding columns: probability 0 (the residual: below)
            out[:, start:stop] = _block_norms(probs, gram, residual, start)  # (B, r, n)
        if collector.discard_ratio > 0:
            probs = _discard_lowest(probs, collector.discard_ratio, lengths)
        partial = _fuse_partial(probs, collector.fusion, 0.0, None)  # (B, r, n)
        fused[:, start:stop] = _finish(partial, heads, collector.fusion, collector.discard_ratio)
    real_rows = real_columns[:, :, None] & real_columns[:, None, :]  # (B, n, n)
    if output is not None:
        output.mul_(real_columns[:, None, :, None])  # padded query rows stay 0, as on the per-document path
    for out, _, _ in (norms or {}).values():  # a padded row's residual reaches its own padded column: zeroed here
        out.masked_fill_(~real_rows, 0.0)
    return fused.masked_fill_(~real_rows, 0.0)


def register() -> None:
    """Make "xai_capture" an attention implementation transformers' models can be built with
    (``loading.load_model``); the plain-torch classifiers (``encoders``) call the function directly."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(CAPTURE, capture_attention)
    AttentionMaskInterface.register(CAPTURE, eager_mask)


@torch.inference_mode()
def forward_with_attention(
    model,
    encoding: dict,
    fusion: str = "mean",
    discard_ratio: float = 0.0,
    heads=None,
    batched: bool | None = None,
    norms: bool = False,
    globenc: bool = False,
):
    """Run the model once; return (logits (B, C), fused attention (B, L, n, n)) as float32.

    The model must have been loaded with ``attn_implementation="xai_capture"`` (model.load_model
    does this and records it: ``attention_record``); eager models are served through
    ``output_attentions`` as a fallback. ``heads``
    (an ``xai_ray.methods.heads.HeadCollector``) also receives every head's probabilities, block by block.
    ``batched``: padded blocks over the whole batch (default on CUDA) instead of a loop over
    documents over their real tokens (default on a CPU, where it is the faster of the two).
    ``norms``: also return the norm-based attention (B, L, n, n) of ``value_norms``, next;
    ``globenc``: also return GlobEnc's norms (B, L, n, n) of ``encoder_norms``, after them.
    """
    lengths = encoding["attention_mask"].sum(dim=1)
    if attention_of(model) != CAPTURE:
        if norms or globenc:  # output_attentions gives the weights only, not the values they mix
            raise RuntimeError("the norm and globenc methods need the model loaded with the xai_capture attention")
        outputs = model(**encoding, output_attentions=True)
        if not outputs.attentions or outputs.attentions[0] is None:
            raise RuntimeError("the model returned no attention weights (is eager attention available?)")
        fused = [fuse_heads(layer, fusion, discard_ratio, lengths) for layer in outputs.attentions]
        for index, layer in enumerate(outputs.attentions if heads is not None else ()):
            heads.add_layer(index, layer)
        return outputs.logits.float(), torch.stack(fused, dim=1)
    if batched is None:
        batched = lengths.device.type == "cuda"
    collector = _Collector(fusion=fusion, discard_ratio=discard_ratio, lengths=lengths, heads=heads, batched=batched)
    if norms:
        collector.projections = value_norms.output_projections(model)
    hooks = []
    if globenc:
        collector.encoder = encoder_norms.encoder_layers(model)
        if not collector.encoder:
            raise RuntimeError(encoder_norms.UNSUPPORTED)
        hooks = encoder_norms.keep_inputs(collector.encoder, collector.inputs)
    token = _active.set(collector)
    try:
        logits = model(**encoding).logits
    finally:
        _active.reset(token)
        for hook in hooks:
            hook.remove()
    if not collector.layers:
        raise RuntimeError("the model never called its attention function: it cannot be explained here")
    fused = torch.stack(collector.layers, dim=1)  # (B, L, n, n)
    extra = [
        torch.stack(found, dim=1) for found, asked in ((collector.norms, norms), (collector.globenc, globenc)) if asked
    ]
    return (logits.float(), fused, *extra)  # (B, C), (B, L, n, n), and each (B, L, n, n) asked
