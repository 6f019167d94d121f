"""The backward passes that the class-specific methods read, run on the scoring actor after its
capture forward: once per batch and per kind of capture, however many methods read it.

    attention_gradients   one forward + backward of the target logit: per layer the head mean
                          of clamp(dA * A, 0) (grad_rollout, attn_x_grad)
    input_x_gradient      one forward + backward of log p_target (input_x_gradient)
    integrated_gradients  ig_steps forwards + backwards of log p_target along the path, and the
                          two forwards its completeness check needs; where a review's path
                          misses by more than ig_tolerance, its intervals are split and
                          integrated again (integrated_gradients)
    lrp                   one forward + backward of the target logit, attention probabilities
                          and layer norms' 1/sigma held constant (lrp)

Each pass goes through a quarter of the forward's token budget at a time (a backward keeps every
layer's activations). Which class each document is explained for is the run's ``target``: the
predicted class, the document's label, or one fixed class (resolved to its index here).
"""

from __future__ import annotations

import time

import numpy as np

from xai_ray.config import resolve_target
from xai_ray.methods.base import (
    ATTENTION_GRADIENTS,
    GRADIENT_NEEDS,
    INPUT_GRADIENTS,
    INTEGRATED_GRADIENTS,
    LRP,
    REGISTRY,
)
from xai_ray.methods.integrated_gradients import completeness_error
from xai_ray.model.gradients import rows_per_backward


def seconds_key(needs: str) -> str:
    """Where a pass's actor seconds go in a row's ``seconds`` (and the manifest's ``actor_seconds``)."""
    return f"{needs} pass"


def pass_seconds_key(method: str) -> str | None:
    """The ``seconds_key`` of the backward pass a stored method reads (None: it reads none). A pass
    shared by two methods (grad_rollout, attn_x_grad) counts in full for each: either alone costs it."""
    needs = REGISTRY[method].needs if method in REGISTRY else None
    return seconds_key(needs) if needs in GRADIENT_NEEDS else None


class GradientPasses:
    """``capture(inputs, targets)`` -> per model input, the gradient captures the methods need."""

    def __init__(
        self, model, methods: dict, target, labels: dict, ig_steps: int, token_budget: int, ig_tolerance: float = 0.0
    ) -> None:
        self.model, self.ig_steps, self.token_budget = model, int(ig_steps), int(token_budget)
        self.ig_tolerance = float(ig_tolerance)
        self.needs = {m.needs for m in methods.values()} & set(GRADIENT_NEEDS)
        self.target = resolve_target(target, labels) if self.needs else None

    def __bool__(self) -> bool:
        return bool(self.needs)

    def target_of(self, pred: int, label) -> tuple[int | None, str | None]:
        """(the class a document is explained for, or None and why not)."""
        if self.target == "pred":
            return int(pred), None
        if self.target == "label":
            if label is None:
                return None, "target=label, but the document has no label: its class-specific methods cannot run"
            return int(label), None
        return int(self.target), None

    def capture(self, model_inputs: dict, targets: list[int]) -> tuple[dict, dict]:
        """model_inputs: (R, N) tensors of one forward batch on the device (right padded);
        targets: (R,) classes. Returns the batch's captures, left on the device for the methods
        ({need: (R, L, N, N) or (R, N) tensor}, plus ``ig_delta`` and ``ig_completeness_error``
        (R,) arrays with integrated gradients), and the seconds each pass took (whole batch)."""
        import torch

        from xai_ray.model.attention_gradients import attention_gradients
        from xai_ray.model.gradients import input_x_gradient, integrated_gradients
        from xai_ray.model.relevance import relevance

        mask = model_inputs["attention_mask"]
        lengths = mask.sum(dim=1).tolist()
        batch, n = mask.shape
        device = mask.device
        captured: dict = {}
        if ATTENTION_GRADIENTS in self.needs:
            layers = self.model.config.num_hidden_layers
            captured[ATTENTION_GRADIENTS] = torch.zeros(batch, layers, n, n, dtype=torch.float32, device=device)
        for need in {INPUT_GRADIENTS, INTEGRATED_GRADIENTS, LRP} & self.needs:
            captured[need] = torch.zeros(batch, n, dtype=torch.float32, device=device)
        if INTEGRATED_GRADIENTS in self.needs:
            captured["ig_delta"], captured["ig_completeness_error"] = np.zeros(batch), np.zeros(batch)
        seconds: dict[str, float] = {}
        for rows in self._chunks(lengths):  # positions into the batch
            width = max(lengths[r] for r in rows)
            chunk = {k: v[rows, :width] for k, v in model_inputs.items()}  # padding beyond the chunk's longest cut
            chosen = [targets[r] for r in rows]
            at = torch.as_tensor(rows, device=device)
            if ATTENTION_GRADIENTS in self.needs:
                started = time.perf_counter()
                _, weighted = attention_gradients(self.model, chunk, chosen)  # (P, L, W, W)
                captured[ATTENTION_GRADIENTS][at, :, :width, :width] = weighted.float()
                _add(seconds, seconds_key(ATTENTION_GRADIENTS), started)
            if INPUT_GRADIENTS in self.needs:
                started = time.perf_counter()
                scores, _ = input_x_gradient(self.model, chunk["input_ids"], chunk["attention_mask"], chosen)
                captured[INPUT_GRADIENTS][at, :width] = torch.from_numpy(scores).float().to(device)
                _add(seconds, seconds_key(INPUT_GRADIENTS), started)
            if INTEGRATED_GRADIENTS in self.needs:
                started = time.perf_counter()
                found, f_input, f_baseline = integrated_gradients(
                    self.model,
                    chunk["input_ids"],
                    chunk["attention_mask"],
                    chosen,
                    self.ig_steps,
                    rows_per_pass=rows_per_backward(self.token_budget, width),
                    tolerance=self.ig_tolerance,
                )
                captured[INTEGRATED_GRADIENTS][at, :width] = torch.from_numpy(found).float().to(device)
                for j, r in enumerate(rows):
                    captured["ig_delta"][r] = float(f_input[j] - f_baseline[j])
                    captured["ig_completeness_error"][r] = completeness_error(found[j], f_input[j], f_baseline[j])
                _add(seconds, seconds_key(INTEGRATED_GRADIENTS), started)
            if LRP in self.needs:
                started = time.perf_counter()
                scores, _ = relevance(self.model, chunk, chosen)  # (P, W)
                captured[LRP][at, :width] = scores.float()
                _add(seconds, seconds_key(LRP), started)
        return captured, seconds

    def _chunks(self, lengths: list[int]) -> list[list[int]]:
        """Inputs in runs of at most a quarter of the token budget (they come longest first)."""
        order = sorted(range(len(lengths)), key=lambda r: -lengths[r])
        chunks, start = [], 0
        while start < len(order):
            size = rows_per_backward(self.token_budget, lengths[order[start]])
            chunks.append(order[start : start + size])
            start += size
        return chunks


def _add(seconds: dict, key: str, started: float) -> None:
    seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started


def ig_summary(captured: dict, rows: list[int]) -> dict:
    """A review's integrated-gradients check from its inputs' captures (batch rows ``rows``: one,
    or its windows): the input with the largest completeness error speaks for it; nulls without
    integrated gradients."""
    if "ig_completeness_error" not in captured:
        return {"ig_delta": None, "ig_completeness_error": None}
    worst = max(rows, key=lambda r: captured["ig_completeness_error"][r])
    return {
        "ig_delta": float(captured["ig_delta"][worst]),
        "ig_completeness_error": float(captured["ig_completeness_error"][worst]),
    }


def captures_for(passes: GradientPasses, model_inputs: dict, preds: list[int], labels: list) -> tuple:
    """The gradient captures of one forward batch's inputs: (captures of the whole batch, as
    ``GradientPasses.capture``; target per input (None where it cannot be had); why not per input
    (None when fine); seconds per input by pass). Inputs without a target stay out of the passes
    (their captures are 0); the scorer turns them into error rows."""
    n = len(preds)
    if not passes:
        return {}, [None] * n, [None] * n, {}
    found = [passes.target_of(pred, label) for pred, label in zip(preds, labels)]
    targets, problems = [t for t, _ in found], [p for _, p in found]
    ok = [r for r in range(n) if targets[r] is not None]
    if not ok:
        return {}, targets, problems, {}
    if len(ok) == n:
        captured, seconds = passes.capture(model_inputs, targets)
        return captured, targets, problems, {key: value / n for key, value in seconds.items()}
    got, seconds = passes.capture({k: v[ok] for k, v in model_inputs.items()}, [targets[r] for r in ok])
    captured = {}
    for key, value in got.items():  # back to the whole batch's rows
        whole = value.new_zeros((n, *value.shape[1:])) if hasattr(value, "new_zeros") else np.zeros(n)
        whole[ok] = value
        captured[key] = whole
    return captured, targets, problems, {key: value / len(ok) for key, value in seconds.items()}
