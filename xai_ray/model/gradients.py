"""The gradient baseline: input x gradient (Shrikumar et al. 2016; Kindermans et al. 2016).

score_j = sum_d e_jd * d log p_c / d e_jd, with e_j the word embedding of input position j (the
vector the model's embedding table returns, before position and type embeddings are added) and
c the class the model predicts for the full input. Signed: positive = the token pushes towards
the predicted class. The log-probability rather than the raw logit: the faithfulness metrics
measure p_c, which depends on the margin over the other classes, and a logit alone can rise
while p_c falls (in a two-class head both logits often move together). One forward and one backward per batch, through ``inputs_embeds``, which
BERT, DistilBERT and RoBERTa all accept (RoBERTa then numbers positions without looking for
padding, which under right padding gives the real tokens the positions they get from ids).
"""

from __future__ import annotations

import numpy as np


def input_x_gradient(model, input_ids, attention_mask) -> tuple[np.ndarray, np.ndarray]:
    """(B, n) ids and mask (right padded) -> ((B, n) input x gradient, (B,) predicted classes).

    Padding positions come back as 0. Gradients are taken w.r.t. the embeddings only, so no
    parameter gradient is accumulated and the model is left as it was.
    """
    import torch

    table = model.get_input_embeddings()
    with torch.enable_grad(), torch.autocast(input_ids.device.type, enabled=False):
        embeddings = table(input_ids).detach().float().requires_grad_(True)  # (B, n, d)
        logits = model(inputs_embeds=embeddings, attention_mask=attention_mask).logits.float()  # (B, C)
        predicted = logits.argmax(dim=-1)  # (B,)
        log_probs = torch.log_softmax(logits, dim=-1)  # (B, C)
        chosen = log_probs.gather(1, predicted[:, None]).sum()  # rows are independent: one backward serves all
        (gradient,) = torch.autograd.grad(chosen, embeddings)  # (B, n, d)
    scores = (embeddings.detach() * gradient).sum(dim=-1) * attention_mask  # (B, n)
    return scores.cpu().numpy(), predicted.cpu().numpy()
