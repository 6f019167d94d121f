"""One token-budget batcher for every forward pass: scoring, the faithfulness evaluation and the
fine-tuning's held-out evaluation.

A padded batch costs its longest sequence times its rows, so a budget of padded tokens (not a row
count) keeps memory flat: 64 short reviews cost what 4 long ones do. Sequences go longest first, so
each batch holds similar lengths and pads little.
"""

from __future__ import annotations

from collections.abc import Sequence


def token_budget_batches(lengths: Sequence[int], budget: int, padding: float | None = None) -> list[list[int]]:
    """Positions into ``lengths``, longest first, cut into batches whose padded size (the batch's
    longest length x its rows) stays within ``budget``. A sequence longer than the budget gets a
    batch of its own; equal lengths keep their input order (a stable sort).

    ``padding``: also cut where the padded size would pass (1 + padding) x the batch's real tokens.
    Where a bigger batch buys nothing (a CPU works through one row as fast as through many), padding
    is pure loss: 25 IMDB reviews cut by the budget alone pad to 1.5x their tokens (2.1x the
    attention's n^2), with ``padding=0.1`` to 1.08x (1.15x)."""
    if budget < 1:
        raise ValueError(f"the token budget must be at least 1; got {budget}")
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0  # tokens of the current batch without its padding
    for i in order:
        longest = int(lengths[current[0]]) if current else int(lengths[i])
        padded = longest * (len(current) + 1)
        if current and (padded > budget or (padding is not None and padded > (1 + padding) * (real + int(lengths[i])))):
            batches.append(current)
            current, real = [], 0
        current.append(i)
        real += int(lengths[i])
    if current:
        batches.append(current)
    return batches
