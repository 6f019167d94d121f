"""Layer-wise relevance propagation for transformers with conservative propagation: Ali et al.
2022, "XAI for Transformers: Better Explanations through Conservative Propagation" (ICML).

score_j = sum_d x_jd * d y_t / d x_jd, x_j the summed input embedding of position j (word +
position + type) and y_t the logit of the run's target class, in a backward through which the
attention probabilities and the layer norms' 1/sigma are constants and every activation passes
relevance to its input whole (``xai_ray.model.relevance``). Relevance is then conserved from the
logit down to the input positions: with zero biases they add up to y_t. Signed (positive: the
token pushes toward the target class) and class specific, like input x gradient, but of the
logit rather than the log-probability: the logit is what relevance is conserved for.
"""

from __future__ import annotations

from xai_ray.methods.base import LRP, TokenAttribution, register


@register
class LayerwiseRelevance(TokenAttribution):
    """lrp: one signed score per token, no layers (stored under the last layer)."""

    name = "lrp"
    needs = LRP
    objective = "logit"
