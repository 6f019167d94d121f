"""One forward and one backward pass that yield, per layer, the gradient-weighted attention
Abar_l = mean over heads of clamp(dy_t/dA_l * A_l, min=0) (``methods.grad_rollout``).

The model's attention function (``capture.capture_attention``, registered as "xai_capture")
hands each layer to ``attend_with_gradients`` while a ``GradientCollector`` is active: per
document, over its real tokens only, it computes the (H, m, m) probabilities A, their output
A @ V, and registers a hook on A. Backward calls the hook with dy_t/dA as it reaches that layer;
the hook reduces the heads at once into the (m, m) Abar and returns, so the per-head gradient of
one layer dies before the next layer's is made: no (B, L, H, n, n) tensor of gradients exists.
(Autograd itself keeps each layer's probabilities for the backward of A @ V, as any backward
through attention does.) Eager models are served by hooks on ``output_attentions``.

The pass runs in fp32 (autocast off) with the parameters frozen for its duration, so autograd
neither saves what only weight gradients need nor computes them.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

import torch

from xai_ray.methods.grad_rollout import gradient_weighted_heads
from xai_ray.model.attention_record import attention_of

_active: contextvars.ContextVar[GradientCollector | None] = contextvars.ContextVar(
    "xai_ray_attention_gradients", default=None
)


@dataclass
class GradientCollector:
    lengths: list[int]  # real tokens per document (right padding)
    weighted: torch.Tensor  # (B, L, N, N) Abar, filled by the hooks during backward
    calls: int = 0  # attention calls so far: the next call is layer ``calls``

    def hook(self, layer: int, b: int, attention: torch.Tensor):
        """The hook of one document's layer: reduces dy/dA (H, m, m) into Abar at once."""
        m = attention.shape[-1]

        def reduce(gradient: torch.Tensor) -> None:
            self.weighted[b, layer, :m, :m] = gradient_weighted_heads(attention, gradient.float())

        return reduce


def active() -> GradientCollector | None:
    return _active.get()


def attend_with_gradients(query, key, value, scaling: float, collector: GradientCollector) -> torch.Tensor:
    """Attention per document over its real tokens, A hooked: query/key/value (B, H, N, d) ->
    output (B, N, H, d); padded query rows are 0 (nothing reads them)."""
    batch, heads, n, _ = query.shape
    layer = collector.calls
    collector.calls += 1
    outputs = []
    for b, length in enumerate(collector.lengths):
        q = query[b, :, :length].float() * scaling  # (H, m, d)
        k = key[b, :, :length].float()  # (H, m, d)
        v = value[b, :, :length].float()  # (H, m, d)
        attention = torch.matmul(q, k.transpose(1, 2)).softmax(dim=-1)  # (H, m, m)
        if attention.requires_grad:
            # the hook keeps a detached alias (shared storage, no graph): no reference cycle
            attention.register_hook(collector.hook(layer, b, attention.detach()))
        out = torch.matmul(attention, v)  # (H, m, d)
        outputs.append(torch.nn.functional.pad(out, (0, 0, 0, n - length)))  # (H, N, d)
    return torch.stack(outputs).to(query.dtype).transpose(1, 2).contiguous()  # (B, N, H, d)


@contextlib.contextmanager
def frozen_parameters(model):
    """Parameters that need no gradient for the duration (restored after, whatever happens)."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def attention_gradients(model, encoding: dict, targets) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward and backward of ``encoding`` (right padded): (logits (B, C), Abar (B, L, N, N)),
    Abar from the gradient of the logit of class ``targets[b]`` (B,) of each document.

    Documents are independent (per-document attention, per-token layers), so the sum of their
    target logits needs one backward for all of them.
    """
    input_ids, attention_mask = encoding["input_ids"], encoding["attention_mask"]
    device = input_ids.device
    targets = torch.as_tensor(targets, dtype=torch.long, device=device)
    others = {k: v for k, v in encoding.items() if k not in ("input_ids", "attention_mask")}
    lengths = attention_mask.sum(dim=1).tolist()
    batch, n = input_ids.shape
    n_layers = model.config.num_hidden_layers
    weighted = torch.zeros(batch, n_layers, n, n, dtype=torch.float32, device=device)  # (B, L, N, N)
    with torch.enable_grad(), torch.autocast(device.type, enabled=False), frozen_parameters(model):
        embeddings = model.get_input_embeddings()(input_ids).detach().float().requires_grad_(True)  # (B, N, d)
        if attention_of(model) != "eager":  # xai_capture: it hands every layer to us
            collector = GradientCollector(lengths=lengths, weighted=weighted)
            token = _active.set(collector)
            try:
                logits = model(inputs_embeds=embeddings, attention_mask=attention_mask, **others).logits.float()
            finally:
                _active.reset(token)
            if collector.calls != n_layers:  # e.g. an sdpa model: its attention never comes through capture
                raise RuntimeError(
                    f"the model's attention came through the capture {collector.calls} times for {n_layers} layers"
                    " (load it with attn_implementation='xai_capture' or 'eager')"
                )
        else:  # an eager model: hooks on the probabilities it returns (it keeps all of them anyway)
            outputs = model(inputs_embeds=embeddings, attention_mask=attention_mask, output_attentions=True, **others)
            if not outputs.attentions or outputs.attentions[0] is None:
                raise RuntimeError("the model returned no attention weights (is eager attention available?)")
            for layer, attention in enumerate(outputs.attentions):  # (B, H, N, N) each
                attention.register_hook(_batch_hook(weighted, layer, attention.detach()))
            logits = outputs.logits.float()
        objective = logits.gather(1, targets[:, None]).sum()
        torch.autograd.grad(objective, embeddings)  # fires the hooks; the embedding gradient is not needed
    mask = attention_mask.bool()
    weighted *= (mask[:, None, :, None] & mask[:, None, None, :]).float()  # eager: padding rows/columns to 0
    return logits.detach(), weighted


def _batch_hook(weighted: torch.Tensor, layer: int, attention: torch.Tensor):
    def reduce(gradient: torch.Tensor) -> None:
        weighted[:, layer] = gradient_weighted_heads(attention.float(), gradient.float())

    return reduce
