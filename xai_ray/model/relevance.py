"""Layer-wise relevance propagation with conservative propagation (``methods.lrp``): Ali et al.
2022, "XAI for Transformers: Better Explanations through Conservative Propagation" (ICML).

Relevance is gradient x input of the target logit, taken in one forward and backward of a model
whose non-conservative parts are held constant in the backward:

    attention   out_i = sum_j p_ij v_j with the probabilities p detached (their AH-rule): relevance
                flows through the values only, as through a linear layer with fixed weights;
    layer norm  y = gamma * (x - mean(x)) / sigma + beta with sigma detached (their LN-rule): the
                centring stays (it is linear), the division by sigma becomes a fixed scale;
    activations f(z) = z * (f(z) / z) with the ratio detached (LRP's identity rule, which
                AttnLRP, Achtibat et al. 2024, names): the relevance of a GELU's or tanh's output
                passes to its input whole, as LRP has always treated a neuron's activation.

With every bias and beta zero, the model is then linear in its input along the backward, and
the relevances of the input positions add up to the explained logit exactly (conservation;
biases absorb their share otherwise). The input is the summed embedding (word + position +
type) entering the embeddings' layer norm; a model without one (no such layer norm) is read at
its word embeddings. Activations are the modules of ``ACTIVATIONS`` and ``transformers.activations``;
one a classification head applies as a bare function between its ``dense`` and ``out_proj``
(RoBERTa's head calls ``torch.tanh``), out of a module hook's reach, gets the same rule from a
hook on each side (``_bare_activation``): without it RoBERTa's relevances missed the logit by
about the logit's size.

The attention is held constant through the capture attention ("xai_capture", ``capture``),
which hands every layer to ``attend_detached`` while a pass is active; an eager model cannot
be explained here (its softmax is out of reach) and gets one sentence saying so.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import torch

from xai_ray.model.attention_gradients import frozen_parameters

ACTIVATIONS = (torch.nn.GELU, torch.nn.Tanh, torch.nn.ReLU, torch.nn.SiLU)
UNSUPPORTED = "lrp needs the model loaded with the xai_capture attention (every layer's softmax held constant)"


@dataclass
class _Pass:
    calls: int = 0  # attention calls so far
    inputs: list = field(default_factory=list)  # the (B, N, D) summed embeddings made leaves, at most one


_active: contextvars.ContextVar[_Pass | None] = contextvars.ContextVar("xai_ray_relevance", default=None)


def active() -> _Pass | None:
    return _active.get()


def attend_detached(query, key, value, attention_mask, scaling: float, state: _Pass):
    """query/key/value (B, H, N, d), the additive mask (B, 1, N, N) or None -> (B, N, H, d):
    softmax(q k^T) v with the probabilities detached, padded query rows computed like any other
    (nothing real reads them: their columns are masked)."""
    state.calls += 1
    scores = torch.matmul(query * scaling, key.transpose(-1, -2))  # (B, H, N, N)
    if attention_mask is not None:
        scores = scores + attention_mask.to(scores.dtype)  # (B, H, N, N): padding columns -inf-like
    probabilities = scores.softmax(dim=-1).detach()  # (B, H, N, N): constants of the backward
    return torch.matmul(probabilities, value).transpose(1, 2).contiguous()  # (B, N, H, d)


def _norm_detached(module: torch.nn.LayerNorm, x):
    """The layer norm of x (..., D) with 1/sigma held constant: still its value in the forward."""
    dims = tuple(range(-len(module.normalized_shape), 0))
    centred = x - x.mean(dim=dims, keepdim=True)  # (..., D): linear in x, kept in the graph
    sigma = (centred.pow(2).mean(dim=dims, keepdim=True) + module.eps).sqrt().detach()  # (..., 1)
    out = centred / sigma  # (..., D)
    if module.weight is not None:
        out = out * module.weight
    if module.bias is not None:
        out = out + module.bias
    return out


def _embedding_norm(model):
    """The layer norm the summed embeddings enter (BERT, RoBERTa, DistilBERT), or None."""
    table = model.get_input_embeddings()
    for module in model.modules():
        norm = getattr(module, "LayerNorm", None)
        if getattr(module, "word_embeddings", None) is table and isinstance(norm, torch.nn.LayerNorm):
            return norm
    return None


def _identity_rule(module, args, output):
    return _held(args[0], output)


def _held(x, fx):
    """x * (f(x) / x) with the ratio detached (0 where x is 0): f(x) in the forward; the relevance
    of f(x) passes to x whole."""
    zero = x == 0
    ratio = torch.where(zero, torch.zeros_like(x), fx / torch.where(zero, torch.ones_like(x), x))
    return x * ratio.detach()


def _is_activation(module) -> bool:
    return isinstance(module, ACTIVATIONS) or type(module).__module__ == "transformers.activations"


def _applies_a_bare_activation(module) -> bool:
    """A head of ``dense`` then ``out_proj`` (Linear both) with no activation module of its own: it
    applies the activation between them as a function (RoBERTa's, XLM-R's: ``torch.tanh``)."""
    children = dict(module.named_children())
    linear = all(isinstance(children.get(name), torch.nn.Linear) for name in ("dense", "out_proj"))
    return linear and not any(_is_activation(child) for child in children.values())


def _bare_activation(dense, out_proj) -> list:
    """The identity rule for f between ``dense`` and ``out_proj``: ``dense``'s output z kept, and
    ``out_proj``'s input f(z) (dropout between is off in eval) given back as z * (f(z) / z), the
    ratio detached: the same value, the relevance of f(z) passed to z whole."""
    seen = {}

    def keep(module, args, output):
        seen["z"] = output

    def rule(module, args):
        z, fz = seen.pop("z", None), args[0]
        if z is None or z.shape != fz.shape:  # not the head this was made for: leave it
            return None
        return (_held(z, fz), *args[1:])

    return [dense.register_forward_hook(keep), out_proj.register_forward_pre_hook(rule)]


@contextlib.contextmanager
def _conservative(model, state: _Pass):
    """Hooks that hold sigma and activation ratios constant (removed after, whatever happens);
    the embeddings' layer norm also turns its input into the leaf relevance is read at."""
    entry = _embedding_norm(model)

    def norm_hook(module, args, output):
        return _norm_detached(module, args[0])

    def entry_hook(module, args, output):
        leaf = args[0].detach().requires_grad_(True)  # (B, N, D): word + position + type
        state.inputs.append(leaf)
        return _norm_detached(module, leaf)

    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            hooks.append(module.register_forward_hook(entry_hook if module is entry else norm_hook))
        elif _is_activation(module):
            hooks.append(module.register_forward_hook(_identity_rule))
        elif _applies_a_bare_activation(module):
            hooks += _bare_activation(module.dense, module.out_proj)
    token = _active.set(state)
    try:
        yield entry is not None
    finally:
        _active.reset(token)
        for hook in hooks:
            hook.remove()


def relevance(model, encoding: dict, targets) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, N) ids and mask (right padded) and (B,) target classes -> ((B, N) relevance of each
    input position for its row's target logit, (B,) those logits), in the model's dtype.

    Rows are independent (padding columns are masked in attention, layers act per position), so
    one backward of the sum of the target logits serves the whole batch. Padding comes back 0.
    """
    input_ids, attention_mask = encoding["input_ids"], encoding["attention_mask"]
    device = input_ids.device
    targets = torch.as_tensor(targets, dtype=torch.long, device=device)
    n_layers = getattr(getattr(model, "config", None), "num_hidden_layers", 0)
    state = _Pass()
    with (
        torch.enable_grad(),
        torch.autocast(device.type, enabled=False),
        frozen_parameters(model),
        _conservative(model, state) as summed,
    ):
        if summed:
            logits = model(**encoding).logits  # (B, C)
        else:  # no embedding layer norm to read at: the word embeddings
            words = model.get_input_embeddings()(input_ids).detach().requires_grad_(True)  # (B, N, D)
            state.inputs.append(words)
            others = {k: v for k, v in encoding.items() if k != "input_ids"}
            logits = model(inputs_embeds=words, **others).logits  # (B, C)
        if state.calls != n_layers:
            raise RuntimeError(UNSUPPORTED)
        explained = logits.gather(1, targets[:, None])[:, 0]  # (B,)
        (leaf,) = state.inputs
        (gradient,) = torch.autograd.grad(explained.sum(), leaf)  # (B, N, D)
    scores = (leaf.detach() * gradient).sum(dim=-1) * attention_mask.to(gradient.dtype)  # (B, N)
    return scores, explained.detach()
