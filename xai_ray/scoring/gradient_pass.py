"""The backward passes that the class-specific methods read, run on the scoring actor after its
capture forward: once per batch and per kind of capture, however many methods read it.

    attention_gradients   one forward + backward of the target logit: per layer the head mean
                          of clamp(dA * A, 0) (grad_rollout, attn_x_grad)
    input_x_gradient      one forward + backward of log p_target (input_x_gradient)
    integrated_gradients  ig_steps forwards + backwards of log p_target along the path, and the
                          two forwards its completeness check needs (integrated_gradients)

Each pass goes through a quarter of the forward's token budget at a time (a backward keeps every
layer's activations). Which class each document is explained for is the run's ``target``: the
predicted class, the document's label, or one fixed class (resolved to its index here).
"""

from __future__ import annotations

import time

from xai_ray.config import resolve_target
from xai_ray.methods.base import (
    ATTENTION_GRADIENTS,
    GRADIENT_NEEDS,
    INPUT_GRADIENTS,
    INTEGRATED_GRADIENTS,
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

    def __init__(self, model, methods: dict, target, labels: dict, ig_steps: int, token_budget: int) -> None:
        self.model, self.ig_steps, self.token_budget = model, int(ig_steps), int(token_budget)
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

    def capture(self, model_inputs: dict, targets: list[int]) -> tuple[list[dict], dict]:
        """model_inputs: (R, N) tensors of one forward batch on the device (right padded);
        targets: (R,) classes. Returns, per input, {need: array over its real tokens, plus
        ``ig_delta`` and ``ig_completeness_error`` with integrated gradients}, and the seconds
        each pass took (for the whole batch)."""
        from xai_ray.model.attention_gradients import attention_gradients
        from xai_ray.model.gradients import input_x_gradient, integrated_gradients

        mask = model_inputs["attention_mask"]
        lengths = mask.sum(dim=1).tolist()
        captured: list[dict] = [{} for _ in lengths]
        seconds: dict[str, float] = {}
        for rows in self._chunks(lengths):  # positions into the batch
            width = max(lengths[r] for r in rows)
            chunk = {k: v[rows, :width] for k, v in model_inputs.items()}  # padding beyond the chunk's longest cut
            chosen = [targets[r] for r in rows]
            if ATTENTION_GRADIENTS in self.needs:
                started = time.perf_counter()
                _, weighted = attention_gradients(self.model, chunk, chosen)  # (P, L, W, W)
                weighted = weighted.cpu().numpy()
                for j, r in enumerate(rows):
                    captured[r][ATTENTION_GRADIENTS] = weighted[j, :, : lengths[r], : lengths[r]]
                key = seconds_key(ATTENTION_GRADIENTS)
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started
            if INPUT_GRADIENTS in self.needs:
                started = time.perf_counter()
                scores, _ = input_x_gradient(self.model, chunk["input_ids"], chunk["attention_mask"], chosen)
                for j, r in enumerate(rows):
                    captured[r][INPUT_GRADIENTS] = scores[j, : lengths[r]]
                key = seconds_key(INPUT_GRADIENTS)
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started
            if INTEGRATED_GRADIENTS in self.needs:
                started = time.perf_counter()
                found, f_input, f_baseline = integrated_gradients(
                    self.model,
                    chunk["input_ids"],
                    chunk["attention_mask"],
                    chosen,
                    self.ig_steps,
                    rows_per_pass=rows_per_backward(self.token_budget, width),
                )
                for j, r in enumerate(rows):
                    captured[r][INTEGRATED_GRADIENTS] = found[j, : lengths[r]]
                    captured[r]["ig_delta"] = float(f_input[j] - f_baseline[j])
                    captured[r]["ig_completeness_error"] = completeness_error(found[j], f_input[j], f_baseline[j])
                key = seconds_key(INTEGRATED_GRADIENTS)
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started
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


def ig_summary(captured: list[dict]) -> dict:
    """A review's integrated-gradients check from its inputs' captures (one, or its windows): the
    input with the largest completeness error speaks for it; nulls without integrated gradients."""
    found = [c for c in captured if "ig_completeness_error" in c]
    if not found:
        return {"ig_delta": None, "ig_completeness_error": None}
    worst = max(found, key=lambda c: c["ig_completeness_error"])
    return {"ig_delta": worst["ig_delta"], "ig_completeness_error": worst["ig_completeness_error"]}


def captures_for(passes: GradientPasses, model_inputs: dict, preds: list[int], labels: list) -> tuple:
    """The gradient captures of one forward batch's inputs: (captured per input, target per input
    (None where it cannot be had), why not per input (None when fine), seconds per input by pass).
    Inputs without a target stay out of the passes; the scorer turns them into error rows."""
    n = len(preds)
    if not passes:
        return [{} for _ in range(n)], [None] * n, [None] * n, {}
    found = [passes.target_of(pred, label) for pred, label in zip(preds, labels)]
    targets, problems = [t for t, _ in found], [p for _, p in found]
    ok = [r for r in range(n) if targets[r] is not None]
    captured: list[dict] = [{} for _ in range(n)]
    if not ok:
        return captured, targets, problems, {}
    got, seconds = passes.capture({k: v[ok] for k, v in model_inputs.items()}, [targets[r] for r in ok])
    for j, r in enumerate(ok):
        captured[r] = got[j]
    return captured, targets, problems, {key: value / len(ok) for key, value in seconds.items()}
