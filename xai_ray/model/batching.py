"""One token-budget batcher for every forward pass: scoring, the faithfulness evaluation and the
fine-tuning's held-out evaluation.

A padded batch costs its longest sequence times its rows, so a budget of padded tokens (not a row
count) keeps memory flat: 64 short reviews cost what 4 long ones do. Sequences go longest first, so
each batch holds similar lengths and pads little.
"""

from __future__ import annotations

from collections.abc import Sequence


def token_budget_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Positions into ``lengths``, longest first, cut into batches whose padded size (the batch's
    longest length x its rows) stays within ``budget``. A sequence longer than the budget gets a
    batch of its own; equal lengths keep their input order (a stable sort)."""
    if budget < 1:
        raise ValueError(f"the token budget must be at least 1; got {budget}")
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = int(lengths[current[0]]) if current else int(lengths[i])
        if current and longest * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches
