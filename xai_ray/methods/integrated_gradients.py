"""Integrated gradients: Sundararajan, Taly & Yan 2017, "Axiomatic Attribution for Deep Networks".

For the word embeddings e (n, d) of a document, a baseline e' and f = log p_t (the target
class's log-probability, the objective of input x gradient):

    IG_j = sum_d (e_jd - e'_jd) * integral_0^1 df/de_jd (e' + a (e - e')) da

The baseline is the zero word embedding at every position, [CLS]/[SEP] included (the model
still adds its position and type embeddings, and the attention mask is unchanged), so the path
scales the word embeddings from 0 to 1. The integral is Gauss-Legendre quadrature over
``n_steps`` nodes mapped onto [0, 1] (captum's default): exact for a polynomial of degree up to
2 n_steps - 1 along the path, where the midpoint rule (kept as ``rule="midpoint"`` for
comparison) has error O(1 / n_steps^2). Completeness (the paper's axiom): sum_j IG_j = f(e) -
f(e'), up to the quadrature's error, which the run reports per document.
"""

from __future__ import annotations

import numpy as np

from xai_ray.methods.base import INTEGRATED_GRADIENTS, TokenAttribution, register

DEFAULT_STEPS = 20
RULES = ("gausslegendre", "midpoint")


def path_points(n_steps: int, rule: str = "gausslegendre") -> tuple[np.ndarray, np.ndarray]:
    """(alphas, weights), each (n_steps,): the quadrature ``rule`` on [0, 1] (weights sum to 1)."""
    if int(n_steps) < 1:
        raise ValueError(f"integrated gradients needs at least 1 step, got {n_steps}")
    m = int(n_steps)
    if rule == "midpoint":
        return (np.arange(m) + 0.5) / m, np.full(m, 1.0 / m)
    if rule != "gausslegendre":
        raise ValueError(f"integrated gradients' rule must be one of {', '.join(RULES)}, got {rule!r}")
    nodes, weights = np.polynomial.legendre.leggauss(m)  # on [-1, 1]
    return (nodes + 1.0) / 2.0, weights / 2.0


def completeness_error(attributions, f_input: float, f_baseline: float) -> float:
    """|sum of the attributions - (f(input) - f(baseline))|: 0 for the exact integral."""
    return float(abs(np.sum(np.asarray(attributions, dtype=np.float64)) - (f_input - f_baseline)))


@register
class IntegratedGradients(TokenAttribution):
    """integrated_gradients: one signed score per token, no layers (stored under the last layer)."""

    name = "integrated_gradients"
    needs = INTEGRATED_GRADIENTS
