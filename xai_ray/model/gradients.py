"""Gradient attributions w.r.t. the word embeddings: input x gradient and integrated gradients.

Input x gradient (Shrikumar et al. 2016; Kindermans et al. 2016): score_j = sum_d e_jd *
d log p_t / d e_jd, with e_j the word embedding of input position j (the vector the model's
embedding table returns, before position and type embeddings are added) and t the target class:
the class the model predicts for the full input unless given (``--evaluate`` always uses the
prediction; stored methods use the run's ``target``). Signed: positive = the token pushes
towards class t. The log-probability rather than the raw logit: the faithfulness metrics measure
p_t, which depends on the margin over the other classes, and a logit alone can rise while p_t
falls (in a two-class head both logits often move together). Integrated gradients
(``methods.integrated_gradients``) integrates the same objective along a path from a zero
word-embedding baseline.

Passes go through ``inputs_embeds``, which BERT, DistilBERT and RoBERTa all accept (RoBERTa then
numbers positions without looking for padding, which under right padding gives the real tokens
the positions they get from ids). Gradients are taken w.r.t. the embeddings only, in fp32, so no
parameter gradient is accumulated and the model is left as it was.
"""

from __future__ import annotations

import numpy as np

from xai_ray.methods.integrated_gradients import path_points

BACKWARD_SHARE = 4  # a backward batch holds 1/4 of the forward token budget (activations are kept)


def rows_per_backward(token_budget: int, width: int) -> int:
    """Inputs of ``width`` padded tokens per forward-and-backward pass under ``token_budget``."""
    return max(1, int(token_budget) // (BACKWARD_SHARE * max(1, int(width))))


def input_x_gradient(model, input_ids, attention_mask, targets=None) -> tuple[np.ndarray, np.ndarray]:
    """(B, n) ids and mask (right padded) -> ((B, n) input x gradient, (B,) predicted classes).

    ``targets`` (B,): the class whose log-probability is differentiated per row (None: the
    predicted class). Padding positions come back as 0.
    """
    import torch

    table = model.get_input_embeddings()
    with torch.enable_grad(), torch.autocast(input_ids.device.type, enabled=False):
        embeddings = table(input_ids).detach().float().requires_grad_(True)  # (B, n, d)
        logits = model(inputs_embeds=embeddings, attention_mask=attention_mask).logits.float()  # (B, C)
        predicted = logits.argmax(dim=-1)  # (B,)
        chosen_class = predicted if targets is None else torch.as_tensor(targets, device=logits.device).long()
        log_probs = torch.log_softmax(logits, dim=-1)  # (B, C)
        chosen = log_probs.gather(1, chosen_class[:, None]).sum()  # rows are independent: one backward serves all
        (gradient,) = torch.autograd.grad(chosen, embeddings)  # (B, n, d)
    scores = (embeddings.detach() * gradient).sum(dim=-1) * attention_mask  # (B, n)
    return scores.cpu().numpy(), predicted.cpu().numpy()


def integrated_gradients(
    model, input_ids, attention_mask, targets, n_steps: int, rows_per_pass: int = 64, rule: str = "gausslegendre"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, n) ids and mask (right padded), (B,) target classes -> ((B, n) attributions,
    (B,) f(input), (B,) f(baseline)), f = log p_target, baseline = zero word embeddings.

    The B x n_steps path points are forwarded and differentiated ``rows_per_pass`` at a time;
    each point's gradient is folded into its document's weighted sum at once, so no
    (B, n_steps, n, d) tensor exists. Padding positions come back as 0.
    """
    import torch

    alphas, weights = path_points(n_steps, rule)  # rule: methods.integrated_gradients
    device = input_ids.device
    targets = torch.as_tensor(targets, device=device).long()  # (B,)
    with torch.no_grad():
        embeddings = model.get_input_embeddings()(input_ids).float()  # (B, n, d)
    baseline = torch.zeros_like(embeddings)  # (B, n, d)
    integral = torch.zeros_like(embeddings)  # (B, n, d): sum_k w_k df/de at point k
    points = [(b, k) for b in range(input_ids.shape[0]) for k in range(len(alphas))]
    for start in range(0, len(points), max(1, int(rows_per_pass))):
        chunk = points[start : start + max(1, int(rows_per_pass))]
        docs = torch.tensor([b for b, _ in chunk], device=device)  # (P,)
        alpha = torch.tensor([alphas[k] for _, k in chunk], dtype=torch.float32, device=device)  # (P,)
        weight = torch.tensor([weights[k] for _, k in chunk], dtype=torch.float32, device=device)  # (P,)
        with torch.enable_grad(), torch.autocast(device.type, enabled=False):
            point = baseline[docs] + alpha[:, None, None] * (embeddings[docs] - baseline[docs])  # (P, n, d)
            point.requires_grad_(True)
            objective = _log_probs(model, point, attention_mask[docs], targets[docs]).sum()
            (gradient,) = torch.autograd.grad(objective, point)  # (P, n, d)
        integral.index_add_(0, docs, gradient * weight[:, None, None])
    attributions = ((embeddings - baseline) * integral).sum(dim=-1) * attention_mask  # (B, n)
    f_input, f_baseline = [], []
    with torch.no_grad(), torch.autocast(device.type, enabled=False):
        for start in range(0, input_ids.shape[0], max(1, int(rows_per_pass))):
            rows = slice(start, start + max(1, int(rows_per_pass)))
            f_input.append(_log_probs(model, embeddings[rows], attention_mask[rows], targets[rows]))
            f_baseline.append(_log_probs(model, baseline[rows], attention_mask[rows], targets[rows]))
    return (
        attributions.cpu().numpy(),
        torch.cat(f_input).cpu().numpy().astype(np.float64),
        torch.cat(f_baseline).cpu().numpy().astype(np.float64),
    )


def _log_probs(model, embeddings, attention_mask, targets):
    """(P,) log p_target of each row, through ``inputs_embeds``."""
    import torch

    logits = model(inputs_embeds=embeddings, attention_mask=attention_mask).logits.float()  # (P, C)
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
