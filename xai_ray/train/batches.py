"""The fine-tuning's batches: one epoch's plan (seeded shuffle, similar lengths together), dynamic
padding, and the learning-rate schedule (linear warmup, then linear decay)."""

from __future__ import annotations

import numpy as np


def plan_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, world: int, window: int = 50
) -> list[np.ndarray]:
    """One epoch's global batches: seeded shuffle, then sort windows of ``window`` batches by length.

    Rows of similar length share a batch (little padding), batch order is shuffled again, and every
    batch holds at least ``world`` rows so that each worker gets one.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    span = max(batch_size * window, batch_size)
    batches: list[np.ndarray] = []
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    merged: list[np.ndarray] = []
    for batch in batches:
        if len(batch) < world and merged:
            merged[-1] = np.concatenate([merged[-1], batch])
        else:
            merged.append(batch)
    merged = [b for b in merged if len(b) >= world]
    return [merged[i] for i in rng.permutation(len(merged))]


def collate(ids: list[np.ndarray], labels: np.ndarray | None, rows: np.ndarray, pad_id: int, device):
    """Dynamic padding: pad only to the longest row of this batch."""
    import torch

    width = max(len(ids[i]) for i in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for j, i in enumerate(rows):
        input_ids[j, : len(ids[i])] = torch.from_numpy(np.asarray(ids[i], dtype=np.int64))
        mask[j, : len(ids[i])] = 1
    batch = {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}
    if labels is not None:
        batch["labels"] = torch.as_tensor(labels[rows], dtype=torch.long).to(device)
    return batch


def linear_schedule(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor
