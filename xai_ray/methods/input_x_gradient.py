"""Input x gradient (Shrikumar et al. 2016, "Not Just a Black Box"; Kindermans et al. 2016,
"Investigating the influence of noise and distractors on the interpretation of neural networks").

score_j = sum_d e_jd * d log p_t / d e_jd, e_j the word embedding of input position j and t the
run's target class. ``xai_ray.model.gradients.input_x_gradient`` computes it, the same function
``--evaluate`` uses for its input x gradient baseline (there t is always the predicted class).
"""

from __future__ import annotations

from xai_ray.methods.base import INPUT_GRADIENTS, TokenAttribution, register


@register
class InputXGradient(TokenAttribution):
    """input_x_gradient: one signed score per token, no layers (stored under the last layer)."""

    name = "input_x_gradient"
    needs = INPUT_GRADIENTS
