"""GlobEnc (Modarressi, Fayyaz, Yaghoobzadeh & Pilehvar 2022, "GlobEnc: Quantifying Global Token
Attribution by Incorporating the Whole Encoder Layer in Transformers", NAACL): how much of each
input token reaches a row through the whole encoder layer but its feed-forward network.

Norm-based attention (``value_norms``) stops at the attention output; the layer then adds the
residual x_i and applies a layer norm, and after the FFN adds that back and applies a second one.
GlobEnc splits the layer's output at row i into one vector per input token j through attention,
the residual and BOTH layer norms, taking each layer norm as linear with row i's own standard
deviation and leaving out the FFN (not linear) and the bias terms:

    z_ij = sum_h alpha^h_ij f^h(x_j) + [i == j] x_j      f^h(x_j) = v^h_j W_O^h (the value bias included)
    T_i(x_j) = gamma2 * C(gamma1 * C(z_ij)) / (sigma1_i sigma2_i)

C subtracts the mean over the hidden size; gamma1 is the weight of the norm after attention
(BERT/RoBERTa ``attention.output.LayerNorm``, DistilBERT ``sa_layer_norm``) and gamma2 that of the
norm after the FFN (``output.LayerNorm``, ``output_layer_norm``). N_ij = ||T_i(x_j)||, each row as
shares of its sum (so sigma1_i sigma2_i cancel and are never captured), rolled out over the layers
with no identity added, since the residual is already inside: ``xai_ray.methods.globenc``.

The map A = diag(gamma2) C diag(gamma1) C is the same for every row, so ||A z_ij||^2 = a^T G_j a
with a = (alpha^1_ij, ..., alpha^H_ij, [i == j]) and G_j the (H+1, H+1) Gram of A f^h(x_j) and
A x_j: norm-based attention's Gram with one more vector, and its block loop unchanged
(``value_norms.with_residual`` adds the residual's weight to the probabilities).

The layer input x_j is not among what the attention function receives (it gets x W_V + b_V): a
forward pre-hook on each self-attention module keeps its hidden-states input for the one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from xai_ray.model.value_norms import gram_of, transformed_values

UNSUPPORTED = (
    "the globenc method needs each encoder layer's attention output projection and both of its layer "
    "norms, and this model exposes none it knows (BERT and RoBERTa: attention.output.dense, "
    "attention.output.LayerNorm and output.LayerNorm; DistilBERT: attention.out_lin, sa_layer_norm "
    "and output_layer_norm)"
)


@dataclass(frozen=True)
class EncoderLayer:
    """What GlobEnc reads of one encoder layer besides the attention function's arguments."""

    attention: torch.nn.Module  # the self-attention module: the attention function's ``module``, fed x
    weight: torch.Tensor  # (D, H*d) attention output projection
    gamma1: torch.Tensor  # (D,) weight of the layer norm after attention
    gamma2: torch.Tensor  # (D,) weight of the layer norm after the FFN


def encoder_layers(model) -> dict[int, EncoderLayer]:
    """id of each self-attention module -> its ``EncoderLayer``; empty when none is recognised."""
    found = {}
    for layer in model.modules():
        attention = getattr(layer, "attention", None)
        out_lin = getattr(attention, "out_lin", None)  # DistilBERT: the norms are the block's own
        norm1, norm2 = getattr(layer, "sa_layer_norm", None), getattr(layer, "output_layer_norm", None)
        if isinstance(out_lin, torch.nn.Linear) and _are_norms(norm1, norm2):
            found[id(attention)] = EncoderLayer(attention, out_lin.weight, _gamma(norm1), _gamma(norm2))
        inner, output = getattr(attention, "self", None), getattr(attention, "output", None)  # BERT, RoBERTa
        dense, norm1 = getattr(output, "dense", None), getattr(output, "LayerNorm", None)
        norm2 = getattr(getattr(layer, "output", None), "LayerNorm", None)
        if isinstance(inner, torch.nn.Module) and isinstance(dense, torch.nn.Linear) and _are_norms(norm1, norm2):
            found[id(inner)] = EncoderLayer(inner, dense.weight, _gamma(norm1), _gamma(norm2))
    return found


def _are_norms(*modules) -> bool:
    return all(isinstance(module, torch.nn.LayerNorm) for module in modules)


def _gamma(norm: torch.nn.LayerNorm) -> torch.Tensor:
    """(D,) the norm's weight; a norm without one scales by 1."""
    return norm.weight if norm.weight is not None else torch.ones(norm.normalized_shape)


def keep_inputs(layers: dict[int, EncoderLayer], inputs: dict) -> list:
    """Hook every self-attention module so that its hidden-states input lands in ``inputs`` under
    the module's id; returns the handles to remove once the pass is over."""

    def keep(module, args, kwargs):
        inputs[id(module)] = args[0] if args else kwargs["hidden_states"]  # (B, n, D) in BERT, RoBERTa, DistilBERT

    return [layer.attention.register_forward_pre_hook(keep, with_kwargs=True) for layer in layers.values()]


def centred(vectors: torch.Tensor) -> torch.Tensor:
    """C: (..., D) -> (..., D) minus their mean over the hidden size."""
    return vectors - vectors.mean(dim=-1, keepdim=True)


def linear_map(vectors: torch.Tensor, layer: EncoderLayer) -> torch.Tensor:
    """A: (..., D) -> (..., D) gamma2 * C(gamma1 * C(vectors)), both layer norms' linear part."""
    gamma1, gamma2 = (gamma.to(vectors.device, torch.float32) for gamma in (layer.gamma1, layer.gamma2))  # (D,)
    return gamma2 * centred(gamma1 * centred(vectors))  # (..., D)


def encoder_gram(value: torch.Tensor, layer: EncoderLayer, layer_input: torch.Tensor) -> torch.Tensor:
    """(B, H, n, d) values and (B, n, D) layer input -> (B, n, H+1, H+1): at each position j the dot
    products of A f^h(x_j) (h < H) and A x_j (last), A = diag(gamma2) C diag(gamma1) C.

    A is linear, so A f^h(x_j) = v^h_j (A W_O^h)^T: A maps the projection's (D, H*d) weight once
    instead of every (B, n, H, D) vector, and the heads' Gram is the one norm-based attention builds."""
    batch, heads, n, _ = value.shape
    mapped_weight = linear_map(layer.weight.float().T, layer).T  # (D, H*d): A applied to every column
    mapped = transformed_values(value, mapped_weight)  # (B, n, H, D)
    residual = linear_map(layer_input.float(), layer)  # (B, n, D): A x_j
    cross = torch.einsum("bjhe,bje->bjh", mapped, residual)  # (B, n, H)
    gram = torch.empty(batch, n, heads + 1, heads + 1, dtype=torch.float32, device=value.device)
    gram[:, :, :heads, :heads] = gram_of(mapped)  # (B, n, H, H)
    gram[:, :, :heads, heads] = cross
    gram[:, :, heads, :heads] = cross
    gram[:, :, heads, heads] = (residual * residual).sum(dim=-1)  # (B, n)
    return gram  # (B, n, H+1, H+1)
