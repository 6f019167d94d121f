"""The scoring actor: model loaded once, then ``__call__(batch) -> one row per document``.

A row holds the document's prediction, its tokens and words, and every method's per-layer
scores flattened to L*n floats (``scores_<method>``). Rows that cannot be scored carry an
``error`` instead; the rest of the batch is kept. The same class runs inside Ray Data actors
and directly in a notebook or test: it knows nothing of Ray.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa

from xai_ray.methods import AttentionOptions, get_method
from xai_ray.model.recovery import is_out_of_memory, prefix_for_tokenizer, release_memory
from xai_ray.scoring import segments
from xai_ray.scoring.evaluation import FAITHFULNESS_FIELDS
from xai_ray.words import join_contractions, merge_scores, normalise, word_index, word_spans

log = logging.getLogger("xai_ray.scoring.actor")

ROW_FIELDS = [
    pa.field("doc_id", pa.string()),
    pa.field("text", pa.string()),
    pa.field("label", pa.int64()),
    pa.field("pred", pa.int64()),
    pa.field("probs", pa.list_(pa.float32())),
    pa.field("n_tokens", pa.int32()),
    pa.field("n_layers", pa.int32()),
    pa.field("truncated", pa.bool_()),
    pa.field("tokens", pa.list_(pa.string())),
    pa.field("word_index", pa.list_(pa.int32())),
    pa.field("words", pa.list_(pa.string())),
    pa.field("word_span", pa.list_(pa.int32())),  # per word: first word of its unit (a joined contraction)
    pa.field("word_joined", pa.list_(pa.string())),  # per word: its unit's text ("wasn't")
    pa.field("error", pa.string()),
    pa.field("model_fingerprint", pa.string()),
    pa.field("seconds", pa.map_(pa.string(), pa.float64())),  # per stage, for the manifest's timings
    *FAITHFULNESS_FIELDS,  # filled when the run evaluates (--evaluate), else null
]


# Per-head statistics of the document (xai_ray.methods.heads): L x H x len(STATISTICS) sums over its rows,
# and for sampled documents the (L*H) x (L*H) Jensen-Shannon sums over its first rows.
HEAD_FIELDS = [
    pa.field("heads", pa.list_(pa.float64())),
    pa.field("head_jsd", pa.list_(pa.float64())),
    pa.field("head_jsd_rows", pa.int32()),
]


def row_schema(methods, with_attention: bool = False) -> pa.Schema:
    per_method = [
        pa.field(f"{prefix}_{m}", pa.list_(pa.float32()))
        for m in methods
        for prefix in ("scores", "word_scores", "word_raw")
    ]
    extra = [pa.field("attention", pa.list_(pa.float32()))] if with_attention else []
    return pa.schema(ROW_FIELDS + per_method + extra + HEAD_FIELDS)


def method_columns(name: str, method, attention: np.ndarray, index: np.ndarray, n_words: int) -> dict:
    """One method's row columns for one document: token scores, word sums, renormalised words."""
    return score_columns(name, method.attribute(attention), index, n_words)  # (L, n) scores


def score_columns(name: str, scores: np.ndarray, index: np.ndarray, n_words: int) -> dict:
    """A method's (L, n) token scores -> its row columns: token scores, word sums, renormalised words."""
    word_raw = merge_scores(scores, index, n_words)  # (L, W)
    return {
        f"scores_{name}": scores.astype(np.float32).ravel(),
        f"word_raw_{name}": word_raw.astype(np.float32).ravel(),
        f"word_scores_{name}": normalise(word_raw).astype(np.float32).ravel(),
    }


def timed_method_columns(name, method, attention, index, n_words, seconds: dict) -> dict:
    """``method_columns``, adding the seconds it took to ``seconds[name]`` (for the manifest)."""
    started = time.perf_counter()
    columns = method_columns(name, method, attention, index, n_words)
    seconds[name] = time.perf_counter() - started
    return columns


class DeferredMethods:
    """A CPU stage for methods that would stall a GPU actor (attention flow): it reads the
    compact fused attention the GPU scorer left in each row, adds the methods' columns and
    drops the attention, so rows leave it in the same shape as a CPU scorer's."""

    def __init__(self, config: dict) -> None:
        options = attention_options(config)
        self.deferred = list(config.get("deferred_methods") or [])
        self.methods = {name: get_method(name, options) for name in self.deferred}
        self.schema = row_schema(list(config["methods"]))

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
                    row["seconds"] = dict(row.get("seconds") or {})
                    row.update(
                        timed_method_columns(name, method, doc_attention, index, len(row["words"]), row["seconds"])
                    )
                except Exception as err:  # recorded per row, the job goes on
                    row["error"] = f"{name} failed: {type(err).__name__}: {err}"
        return pa.Table.from_pylist(rows, schema=self.schema)


def attention_options(config: dict) -> AttentionOptions:
    return AttentionOptions(
        residual=config.get("residual", "half"),
        head_fusion=config.get("head_fusion", "mean"),
        discard_ratio=config.get("discard_ratio", 0.0),
        start_layer=config.get("start_layer", 1),
    )


class Scorer:
    """Callable class for ``Dataset.map_batches``: scores a batch of ``{doc_id, text, label}``."""

    def __init__(self, config: dict) -> None:
        import torch
        import transformers

        from xai_ray.model.loading import load_model

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        self.config = config
        threads = max(1, int(config.get("cpus_per_actor") or 1))
        torch.set_num_threads(threads)
        self.device = "cuda" if torch.cuda.is_available() and config.get("gpus_per_actor") else "cpu"
        loaded = load_model(
            config["model"],
            allow_pickle=config.get("allow_pickle", False),
            trust_remote_code=config.get("trust_remote_code", False),
            seed=config.get("seed", 0),
            device=self.device,
        )
        self.model, self.tokenizer, self.info = loaded.model, loaded.tokenizer, loaded.info
        self.tokenizer.padding_side = "right"  # per-document slices [:n] assume real tokens come first
        self.token_budget = int(config.get("max_tokens_per_batch") or 8192)
        self.max_length = min(int(config["max_length"]), _model_limit(self.tokenizer, self.model))
        options = attention_options(config)
        self.options = options
        self.methods = {name: get_method(name, options) for name in config["methods"]}
        self.deferred = set(config.get("deferred_methods") or [])
        # long reviews (xai_ray.scoring.segments): head keeps the plain path; head_tail and window cut and merge
        self.long_text = segments.resolve_mode(config.get("long_text") or "head", config["model"])
        self.stride = config.get("window_stride")
        self.schema = row_schema(list(self.methods), with_attention=bool(self.deferred))
        self.pid = os.getpid()
        self.evaluator = self._evaluator(config)
        self.heads = bool(config.get("heads", True))
        self.heads_sample_rows = int(config.get("heads_sample_rows") or 128)
        self.punctuation: dict[int, bool] = {}  # vocabulary id -> is punctuation, filled as ids are seen
        self.sampled: set[int] = set()  # batch positions chosen for head similarity
        self.fallbacks = 0  # batches that had to be re-scored one document at a time
        self.splits = 0  # groups halved after running out of memory

    def __call__(self, batch: dict) -> pa.Table:
        try:
            return self._score_batch(batch)
        except Exception as err:  # nothing may escape: Ray Data would fail the whole dataset
            log.exception("batch failed as a whole; its documents are recorded as errors")
            ids = [str(x) for x in batch.get("doc_id", [])]
            reason = f"batch failed: {type(err).__name__}: {err}"
            return pa.Table.from_pylist([self._error_row(i, None, reason) for i in ids], schema=self.schema)

    def _score_batch(self, batch: dict) -> pa.Table:
        ids = [str(x) for x in batch["doc_id"]]
        texts = list(batch["text"])
        labels = [None if _missing(x) else int(x) for x in batch["label"]]
        # The driver marks the documents of the head-similarity sample (pipeline.order_corpus)
        self.sampled = {i for i, x in enumerate(batch.get("heads_sample", ())) if x} if self.heads else set()
        rows, good = [], []
        for i, text in enumerate(texts):
            problem = _text_problem(text)
            if problem:
                rows.append(self._error_row(ids[i], labels[i], problem))
            else:
                good.append(i)
        if self.long_text != "head":
            cut, good = self._plans(ids, texts, labels, good, rows)
        else:  # very long texts are cut at whitespace before tokenizing (same tokens kept; see recovery)
            cut = {i: prefix_for_tokenizer(self.tokenizer, texts[i], self.max_length) for i in good}
        for group in self._groups(cut, good):
            rows.extend(self._score_group(ids, texts, labels, group, cut))
        return pa.Table.from_pylist(rows, schema=self.schema)

    def _score_group(self, ids, texts, labels, group, cut) -> list[dict]:
        """Score a group; out of memory halves it, any other failure scores its documents alone."""
        try:
            return self._score(ids, texts, labels, group, cut)
        except Exception as err:
            reason = f"scoring failed: {type(err).__name__}: {err}"
            if len(group) == 1:  # recorded per row, the job goes on
                return [self._error_row(ids[group[0]], labels[group[0]], reason)]
            if is_out_of_memory(err):
                self.splits += 1
                release_memory(self.device)
                half = len(group) // 2
                log.warning(
                    "out of memory on %d documents; retrying in halves of %d and %d",
                    len(group),
                    half,
                    len(group) - half,
                )
                return self._score_group(ids, texts, labels, group[:half], cut) + self._score_group(
                    ids, texts, labels, group[half:], cut
                )
            # One bad document must not sink its batch: score the rest one at a time.
            self.fallbacks += 1
            log.warning(
                "batch of %d failed (%s: %s); scoring its documents one at a time", len(group), type(err).__name__, err
            )
            return [row for i in group for row in self._score_group(ids, texts, labels, [i], cut)]

    def _groups(self, texts, chosen) -> list[list[int]]:
        """Split a batch into length-sorted groups of at most ``max_tokens_per_batch`` padded tokens.

        A token budget rather than a row count: 64 short reviews cost what 4 long ones do.
        """
        if not chosen:
            return []
        if self.long_text != "head":  # a review's windows are forwarded together: they cost their sum
            lengths = {i: sum(len(x) for x in texts[i].inputs) for i in chosen}
        else:
            encoded = self.tokenizer([texts[i] for i in chosen], truncation=True, max_length=self.max_length)
            lengths = {i: len(ids) for i, ids in zip(chosen, encoded["input_ids"])}  # of the cut texts
        order = sorted(chosen, key=lambda i: -lengths[i])
        groups, current = [], []
        for i in order:
            longest = lengths[current[0]] if current else lengths[i]
            if current and longest * (len(current) + 1) > self.token_budget:
                groups.append(current)
                current = []
            current.append(i)
        groups.append(current)
        return groups

    def _score(self, ids, texts, labels, chosen, cut) -> list[dict]:
        if self.long_text != "head":
            return self._score_segments(ids, texts, labels, chosen, cut)
        encoding = self.tokenizer(
            [cut[i] for i in chosen],
            truncation=True,
            max_length=self.max_length,
            padding=True,
            return_offsets_mapping=True,
            return_tensors="pt",
        )
        offsets = encoding.pop("offset_mapping").tolist()
        collector = self._head_collector(
            encoding["input_ids"], encoding["attention_mask"], [i in self.sampled for i in chosen]
        )
        started = time.perf_counter()
        model_inputs, probs, fused = self._forward(dict(encoding), collector)  # (B, C), (B, L, N, N)
        forward_s = (time.perf_counter() - started) / len(chosen)  # the batch's forward, shared out
        lengths = encoding["attention_mask"].sum(dim=1).tolist()
        head_columns = self._head_columns(collector, len(chosen))
        rows = []
        for b, i in enumerate(chosen):
            n = int(lengths[b])
            index, n_words = word_index(encoding.word_ids(b)[:n])
            tokens = self.tokenizer.convert_ids_to_tokens(encoding["input_ids"][b, :n].tolist())
            doc_offsets = offsets[b][:n]
            spans = word_spans(index, n_words, doc_offsets)
            words = [texts[i][s:e].strip() if s is not None else "" for s, e in spans]
            word_span, word_joined = join_contractions(words, spans, texts[i])
            row = {
                "doc_id": ids[i],
                "text": texts[i],
                "label": labels[i],
                "pred": int(probs[b].argmax()),
                "probs": probs[b].tolist(),
                "n_tokens": n,
                "n_layers": fused.shape[1],
                "truncated": self._was_truncated(texts[i], doc_offsets, index),
                "tokens": tokens,
                "word_index": index.tolist(),
                "words": words,
                "word_span": word_span,
                "word_joined": word_joined,
                "error": None,
                "model_fingerprint": self.info["fingerprint"],
                "seconds": {"forward": forward_s},
            }
            doc_attention = fused[b, :, :n, :n]  # (L, n, n): padding sliced away
            for name, method in self.methods.items():
                if name in self.deferred:
                    continue
                row.update(timed_method_columns(name, method, doc_attention, index, n_words, row["seconds"]))
            if self.deferred:
                row["attention"] = doc_attention.astype(np.float32).ravel()  # for the CPU stage
            row.update(head_columns[b])
            rows.append(row)
        if self.evaluator is not None:
            self.evaluator.add_metrics(rows, model_inputs["input_ids"], model_inputs["attention_mask"])
        return rows

    def _forward(self, encoding: dict, collector):
        """One forward pass with attention capture: (model inputs on the device, probs (B, C), fused (B, L, N, N))."""
        import torch

        from xai_ray.model.capture import forward_with_attention

        if self.device == "cuda":
            # Pinned host memory lets the copy overlap; bf16 matmuls, while capture keeps the
            # probabilities and their fusion in fp32 (rollout multiplies them L times).
            model_inputs = {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in encoding.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, fused = forward_with_attention(
                    self.model, model_inputs, self.options.head_fusion, self.options.discard_ratio, collector
                )
        else:
            model_inputs = encoding
            logits, fused = forward_with_attention(
                self.model, model_inputs, self.options.head_fusion, self.options.discard_ratio, collector
            )
        return model_inputs, torch.softmax(logits, dim=-1).float().cpu().numpy(), fused.cpu().numpy()

    def _plans(self, ids, texts, labels, good, rows) -> tuple[dict, list[int]]:
        """Each review cut into model inputs (``segments.plan``); a review that cannot be is an error row."""
        plans, kept = {}, []
        for i in good:
            try:
                plans[i] = segments.plan(self.tokenizer, texts[i], self.max_length, self.long_text, self.stride)
                kept.append(i)
            except Exception as err:  # recorded per row, the job goes on
                rows.append(self._error_row(ids[i], labels[i], f"tokenizing failed: {type(err).__name__}: {err}"))
        return plans, kept

    def _score_segments(self, ids, texts, labels, chosen, plans) -> list[dict]:
        """Score reviews cut by ``segments.plan``: every window forwarded in one batch, then merged per
        review by the rule in ``xai_ray.scoring.segments`` (one window per word; mean probabilities)."""
        import torch

        owners = [(i, w) for i in chosen for w in range(len(plans[i].inputs))]  # one model input each
        width = max(len(plans[i].inputs[w]) for i, w in owners)
        input_ids = torch.full((len(owners), width), self.tokenizer.pad_token_id or 0, dtype=torch.long)  # (R, N)
        attention_mask = torch.zeros((len(owners), width), dtype=torch.long)  # (R, N)
        for r, (i, w) in enumerate(owners):
            window = plans[i].inputs[w]
            input_ids[r, : len(window)] = torch.tensor(window)
            attention_mask[r, : len(window)] = 1
        encoding = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in self.tokenizer.model_input_names:
            encoding["token_type_ids"] = torch.zeros_like(input_ids)
        # per-head statistics of a windowed review come from its first window
        collector = self._head_collector(input_ids, attention_mask, [w == 0 and i in self.sampled for i, w in owners])
        started = time.perf_counter()
        model_inputs, probs, fused = self._forward(encoding, collector)  # (R, C), (R, L, N, N)
        forward_s = (time.perf_counter() - started) / len(chosen)
        head_columns = self._head_columns(collector, len(owners))
        before, after = segments.special_layout(self.tokenizer)
        rows = []
        for i in chosen:
            seg, mine = plans[i], [r for r, (owner, _) in enumerate(owners) if owner == i]
            lengths = [len(seg.inputs[w]) for w in range(len(mine))]
            word_ids, offsets, token_ids = segments.merged_layout(seg, before, after)
            index, n_words = word_index(word_ids)
            spans = word_spans(index, n_words, offsets)
            words = [texts[i][s:e].strip() if s is not None else "" for s, e in spans]
            word_span, word_joined = join_contractions(words, spans, texts[i])
            doc_probs = probs[mine].mean(axis=0)  # (C,)
            row = {
                "doc_id": ids[i],
                "text": texts[i],
                "label": labels[i],
                "pred": int(doc_probs.argmax()),
                "probs": doc_probs.tolist(),
                "n_tokens": len(token_ids),
                "n_layers": fused.shape[1],
                "truncated": seg.truncated,
                "tokens": self.tokenizer.convert_ids_to_tokens(token_ids),
                "word_index": index.tolist(),
                "words": words,
                "word_span": word_span,
                "word_joined": word_joined,
                "error": None,
                "model_fingerprint": self.info["fingerprint"],
                "seconds": {"forward": forward_s},
            }
            windows = [fused[r, :, :n, :n] for r, n in zip(mine, lengths)]  # (L, n_w, n_w) each
            for name, method in self.methods.items():
                if name in self.deferred:
                    continue
                begun = time.perf_counter()
                merged = segments.merge(seg, [method.attribute(a) for a in windows], before)  # (L, n)
                row.update(score_columns(name, merged, index, n_words))
                row["seconds"][name] = time.perf_counter() - begun
            if self.deferred:  # only single-input reviews get here (pipeline.score keeps windows on the actor)
                row["attention"] = windows[0].astype(np.float32).ravel()
            row.update(head_columns[mine[0]])
            rows.append(row)
        if self.evaluator is not None:  # head_tail only (the config refuses windows with --evaluate)
            self.evaluator.add_metrics(rows, model_inputs["input_ids"], model_inputs["attention_mask"])
        return rows

    def _head_collector(self, input_ids, attention_mask, sampled: list[bool]):
        """The per-head statistics collector of one forward pass, or None when heads are off."""
        if not self.heads:
            return None
        from xai_ray.methods.heads import HeadCollector, position_masks

        masks = position_masks(input_ids, self.tokenizer, self.punctuation)  # (B, n, 3)
        return HeadCollector(attention_mask.sum(dim=1).tolist(), masks, sampled, self.heads_sample_rows)

    @staticmethod
    def _head_columns(collector, n_docs: int) -> list[dict]:
        if collector is None:
            return [{}] * n_docs
        statistics = collector.statistics().numpy()  # (B, L, H, N_STATS)
        similarity = collector.similarity()
        columns = []
        for b in range(n_docs):
            jsd, jsd_rows = similarity.get(b, (None, None))
            columns.append(
                {
                    "heads": statistics[b].ravel(),
                    "head_jsd": None if jsd is None else jsd.numpy().ravel(),
                    "head_jsd_rows": jsd_rows,
                }
            )
        return columns

    def _evaluator(self, config: dict):
        """The faithfulness stage (``--evaluate``), run here because this actor holds the model."""
        if not config.get("evaluate"):
            return None
        from xai_ray.scoring.evaluation import Evaluator
        from xai_ray.scoring.faithfulness import FRACTIONS

        return Evaluator(
            self.model,
            self.tokenizer,
            self.device,
            self.token_budget,
            [m for m in self.methods if m not in self.deferred],
            fractions=config.get("evaluate_fractions") or FRACTIONS,
            seed=config.get("seed", 0),
            share=config.get("evaluate_share", 1.0),
        )

    def _was_truncated(self, text: str, offsets, index) -> bool:
        """Whether text the tokenizer would have kept lies past the last token the model saw
        (a tail of zero-width or control characters, which it drops, does not count)."""
        ends = [end for (start, end), w in zip(offsets, index) if w >= 0]
        tail = text[max(ends) :].strip() if ends else ""
        if not tail:
            return False
        return len(tail) > 256 or bool(self.tokenizer(tail, add_special_tokens=False)["input_ids"])

    def _error_row(self, doc_id, label, reason: str) -> dict:
        return {"doc_id": doc_id, "label": label, "error": reason, "model_fingerprint": self.info["fingerprint"]}


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _text_problem(text) -> str | None:
    if not isinstance(text, str):
        return f"text is {type(text).__name__}, not a string" if not _missing(text) else "text is null"
    if not text.strip():
        return "text is empty or whitespace only"
    return None


def _model_limit(tokenizer, model) -> int:
    limit = getattr(model.config, "max_position_embeddings", None) or 512
    if getattr(model.config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2  # RoBERTa reserves two positions for the padding offset
    return int(min(limit, getattr(tokenizer, "model_max_length", limit) or limit))


def rows_to_scores(row: dict, method: str) -> np.ndarray:
    """A row's flattened ``scores_<method>`` back to shape (L, n)."""
    return np.asarray(row[f"scores_{method}"], dtype=np.float32).reshape(row["n_layers"], row["n_tokens"])
