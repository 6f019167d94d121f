"""The evaluation stage on the scoring actor: faithfulness metrics of the rows it just scored.

The actor already holds the model, so the perturbed inputs of ``xai_ray.scoring.faithfulness`` run here,
batched by the same token budget as scoring and on the same device (fp32: the metrics are
differences of probabilities, which bf16 would blur). Knows nothing of Ray; the Scorer calls it.
"""

from __future__ import annotations

import hashlib
import logging
import time

import numpy as np
import pyarrow as pa

from xai_ray.model.batching import token_budget_batches
from xai_ray.model.gradients import input_x_gradient
from xai_ray.scoring.faithfulness import FRACTIONS, document_rankings, evaluate_document

log = logging.getLogger("xai_ray.scoring.evaluation")
GRADIENT_SHARE = 4  # a backward batch holds 1/4 of the forward token budget (activations are kept)

FAITHFULNESS_FIELDS = [
    pa.field(
        "faithfulness",
        pa.list_(
            pa.struct(
                [("method", pa.string()), ("layer", pa.int32()), ("metric", pa.string()), ("value", pa.float64())]
            )
        ),
    ),
    pa.field("evaluate_error", pa.string()),  # the document was scored but could not be evaluated
]


def chosen_for_evaluation(doc_id: str, share: float) -> bool:
    """Whether a document is in the evaluated ``share``: by a stable hash of its id, so the same
    documents are picked whatever the actors, batches or order."""
    if share >= 1.0:
        return True
    digest = int.from_bytes(hashlib.sha256(str(doc_id).encode()).digest()[:8], "little")
    return digest / 2**64 < share


class Evaluator:
    """Metrics of scored rows: ``add_metrics(rows, input_ids, attention_mask)`` fills each row's
    ``faithfulness`` (or ``evaluate_error``) and adds its seconds to ``row["seconds"]``."""

    def __init__(
        self,
        model,
        tokenizer,
        device: str,
        token_budget: int,
        methods: list[str],
        fractions=FRACTIONS,
        seed: int = 0,
        share: float = 1.0,
    ) -> None:
        self.model, self.device, self.token_budget = model, device, int(token_budget)
        self.methods, self.fractions, self.seed, self.share = list(methods), tuple(fractions), seed, share
        self.mask_id = tokenizer.mask_token_id if tokenizer.mask_token_id is not None else tokenizer.unk_token_id
        if self.mask_id is None:
            raise ValueError("the tokenizer has neither a mask nor an unknown token for leave-one-out")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def predict(self, inputs: list[np.ndarray]) -> np.ndarray:
        """Class probabilities of variable-length id sequences: (B, C), in the order given.

        Longest first, cut into right-padded batches of at most ``token_budget`` padded tokens.
        """
        import torch

        out: list[np.ndarray | None] = [None] * len(inputs)
        for chosen in token_budget_batches([len(x) for x in inputs], self.token_budget):
            longest = len(inputs[chosen[0]])
            ids = np.full((len(chosen), longest), self.pad_id, dtype=np.int64)  # (B, m)
            mask = np.zeros((len(chosen), longest), dtype=np.int64)  # (B, m)
            for row, i in enumerate(chosen):
                ids[row, : len(inputs[i])] = inputs[i]
                mask[row, : len(inputs[i])] = 1
            with torch.inference_mode():
                logits = self.model(
                    input_ids=torch.from_numpy(ids).to(self.device),
                    attention_mask=torch.from_numpy(mask).to(self.device),
                ).logits  # (B, C)
                probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
            for row, i in enumerate(chosen):
                out[i] = probs[row]
        return np.stack(out) if out else np.zeros((0, 0))

    def add_metrics(self, rows: list[dict], input_ids, attention_mask) -> None:
        """rows: the Scorer's rows of one forward batch, in its order; input_ids/attention_mask:
        that batch's (B, N) tensors on the device."""
        picked = [b for b, row in enumerate(rows) if chosen_for_evaluation(row["doc_id"], self.share)]
        if not picked:
            return
        started = time.perf_counter()
        try:
            gradients = self._gradients(input_ids, attention_mask, picked)  # (P, N)
        except Exception as err:  # recorded per row, the job goes on
            for b in picked:
                rows[b]["evaluate_error"] = f"input x gradient failed: {type(err).__name__}: {err}"
            return
        gradient_s = (time.perf_counter() - started) / len(picked)  # one backward, shared out
        ids = input_ids.cpu().numpy()
        for g, b in enumerate(picked):
            row, started = rows[b], time.perf_counter()
            n = row["n_tokens"]
            try:
                row["faithfulness"] = self.evaluate_row(row, ids[b, :n], gradients[g, :n])
            except Exception as err:  # recorded per row, the job goes on
                row["evaluate_error"] = f"evaluation failed: {type(err).__name__}: {err}"
            row["seconds"] = {
                **(row.get("seconds") or {}),
                "gradient": gradient_s,
                "evaluate": time.perf_counter() - started,
            }

    def _gradients(self, input_ids, attention_mask, picked: list[int]) -> np.ndarray:
        """Input x gradient of the picked rows, one backward per chunk: a backward keeps every
        layer's activations, so a chunk holds a quarter of the forward's token budget."""
        rows = max(1, self.token_budget // (GRADIENT_SHARE * input_ids.shape[1]))
        chunks = [
            input_x_gradient(self.model, input_ids[picked[i : i + rows]], attention_mask[picked[i : i + rows]])[0]
            for i in range(0, len(picked), rows)
        ]
        return np.concatenate(chunks)  # (P, N)

    def evaluate_row(self, row: dict, ids: np.ndarray, gradient: np.ndarray) -> list[dict]:
        n = row["n_tokens"]
        special = np.asarray(row["word_index"]) < 0  # no word id: [CLS], [SEP], <s>, </s>
        scores = {m: np.asarray(row[f"scores_{m}"], dtype=np.float64).reshape(-1, n) for m in self.methods}
        rankings = document_rankings(scores, gradient, row["doc_id"], self.seed)
        found = evaluate_document(ids, special, rankings, gradient, self.predict, self.mask_id, self.fractions)
        return [
            {"method": method, "layer": layer, "metric": metric, "value": None if np.isnan(value) else value}
            for method, layer, metric, value in found
        ]
