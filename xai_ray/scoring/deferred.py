"""The CPU stage after GPU scoring actors: methods that would stall a GPU (attention flow)."""

from __future__ import annotations

import logging
import time

import numpy as np
import pyarrow as pa

from xai_ray.methods import get_method
from xai_ray.scoring.rows import row_schema, score_columns
from xai_ray.scoring.settings import ScorerConfig

log = logging.getLogger("xai_ray.scoring.deferred")


class DeferredMethods:
    """A CPU stage for methods that would stall a GPU actor (attention flow): it reads the
    compact fused attention the GPU scorer left in each row, adds the methods' columns and
    drops the attention, so rows leave it in the same shape as a CPU scorer's."""

    def __init__(self, config: ScorerConfig | dict) -> None:
        config = ScorerConfig.of(config)
        options = config.attention_options()
        self.deferred = list(config.deferred_methods)
        self.methods = {name: get_method(name, options) for name in self.deferred}
        self.schema = row_schema(list(config.run.methods))

    def __call__(self, batch: pa.Table) -> pa.Table:
        try:
            return self._add_methods(batch)
        except Exception as err:  # nothing may escape: Ray Data would fail the whole dataset
            log.exception("deferred methods failed on a whole batch; its documents are recorded as errors")
            reason = f"{', '.join(self.deferred)} failed: {type(err).__name__}: {err}"
            rows = [
                {"doc_id": doc_id, "label": label, "error": reason, "model_fingerprint": fingerprint}
                for doc_id, label, fingerprint in zip(
                    batch.column("doc_id").to_pylist(),
                    batch.column("label").to_pylist(),
                    batch.column("model_fingerprint").to_pylist(),
                )
            ]
            return pa.Table.from_pylist(rows, schema=self.schema)

    def _add_methods(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        for row in rows:
            attention = row.pop("attention", None)
            if row.get("error") or attention is None:
                continue
            n, n_layers = row["n_tokens"], row["n_layers"]
            doc_attention = np.asarray(attention, dtype=np.float64).reshape(n_layers, n, n)
            index = np.asarray(row["word_index"], dtype=np.int64)
            for name, method in self.methods.items():
                try:
                    started = time.perf_counter()
                    scores = method.attribute(doc_attention)  # (L, n)
                    row.update(score_columns(name, scores, index, len(row["words"]), method.signed))
                    seconds = dict(row.get("seconds") or ())  # a map column reads back as (key, value) pairs
                    row["seconds"] = {**seconds, name: time.perf_counter() - started}
                except Exception as err:  # recorded per row, the job goes on
                    row["error"] = f"{name} failed: {type(err).__name__}: {err}"
        return pa.Table.from_pylist(rows, schema=self.schema)
