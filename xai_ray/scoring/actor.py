"""The scoring actor: model loaded once, then ``__call__(batch) -> one row per document``.

Rows (``xai_ray.scoring.rows``) carry the prediction, tokens, words and every method's per-layer
scores; a document that cannot be scored becomes an ``error`` row and the rest of the batch is
kept. The same class runs inside Ray Data actors and directly in a notebook or test: it knows
nothing of Ray. Methods that would stall a GPU run after it (``xai_ray.scoring.deferred``).

Over 300 lines: the actor's one batch loop with its fallbacks (out-of-memory halving, one
document at a time) and the windowed and gradient paths that share them.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pyarrow as pa

from xai_ray.methods import get_method
from xai_ray.model.batching import token_budget_batches
from xai_ray.model.recovery import is_out_of_memory, prefix_for_tokenizer, release_memory
from xai_ray.scoring import segments
from xai_ray.scoring.gradient_pass import GradientPasses, captures_for, ig_summary
from xai_ray.scoring.rows import (
    document_row,
    error_row,
    explained_columns,
    head_columns,
    missing,
    row_schema,
    score_columns,
    text_problem,
)
from xai_ray.scoring.settings import ScorerConfig
from xai_ray.words import word_index

log = logging.getLogger("xai_ray.scoring.actor")


class Scorer:
    """Callable class for ``Dataset.map_batches``: scores a batch of ``{doc_id, text, label}``.

    ``config``: a ``ScorerConfig`` (or a mapping of run-config keys, checked the same way);
    ``loaded``: the model already loaded for it (``pipeline.pool``: a warm actor keeps it between runs)."""

    def __init__(self, config: ScorerConfig | dict, loaded=None) -> None:
        import torch
        import transformers

        from xai_ray.model.loading import label_names, load_model

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        config = ScorerConfig.of(config)
        self.config = config
        torch.set_num_threads(max(1, int(config.run.cpus_per_actor or 1)))
        self.device = "cuda" if torch.cuda.is_available() and config.gpus_per_actor else "cpu"
        loaded = loaded or load_model(
            config.run.model,
            allow_pickle=config.run.allow_pickle,
            trust_remote_code=config.run.trust_remote_code,
            seed=config.run.seed,
            device=self.device,
        )
        self.model, self.tokenizer, self.info = loaded.model, loaded.tokenizer, loaded.info
        self.tokenizer.padding_side = "right"  # per-document slices [:n] assume real tokens come first
        self.token_budget = config.run.max_tokens_per_batch
        self.max_length = min(config.run.max_length, _model_limit(self.tokenizer, self.model))
        self.options = config.attention_options()
        self.methods = {name: get_method(name, self.options) for name in config.run.methods}
        self.deferred = set(config.deferred_methods)
        labels = label_names(self.model.config, self.model.config.num_labels)
        # the backward passes of the class-specific methods (none when the run has none of them)
        self.gradients = GradientPasses(
            self.model, self.methods, config.run.target, labels, config.run.ig_steps, self.token_budget
        )
        # long reviews (xai_ray.scoring.segments): head keeps the plain path; head_tail and window cut and merge
        self.long_text = segments.resolve_mode(config.run.long_text, config.run.model)
        self.stride = config.run.window_stride
        self.schema = row_schema(list(self.methods), with_attention=bool(self.deferred))
        self.pid = os.getpid()
        self.evaluator = self._evaluator(config)
        self.heads = config.run.heads
        self.heads_sample_rows = config.run.heads_sample_rows
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
        labels = [None if missing(x) else int(x) for x in batch["label"]]
        # The driver marks the documents of the head-similarity sample (pipeline.order_corpus)
        self.sampled = {i for i, x in enumerate(batch.get("heads_sample", ())) if x} if self.heads else set()
        rows, good = [], []
        for i, text in enumerate(texts):
            problem = text_problem(text)
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
        """A batch's documents in length-sorted groups of at most ``max_tokens_per_batch`` padded tokens."""
        if not chosen:
            return []
        if self.long_text != "head":  # a review's windows are forwarded together: they cost their sum
            lengths = [sum(len(x) for x in texts[i].inputs) for i in chosen]
        else:
            encoded = self.tokenizer([texts[i] for i in chosen], truncation=True, max_length=self.max_length)
            lengths = [len(ids) for ids in encoded["input_ids"]]  # of the cut texts
        return [[chosen[j] for j in batch] for batch in token_budget_batches(lengths, self.token_budget)]

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
        heads = head_columns(collector, len(chosen))
        captured, targets, problems, pass_s = captures_for(
            self.gradients, model_inputs, probs.argmax(axis=1).tolist(), [labels[i] for i in chosen]
        )
        rows = []
        for b, i in enumerate(chosen):
            if problems[b]:  # recorded per row, the job goes on
                rows.append(self._error_row(ids[i], labels[i], problems[b]))
                continue
            n = int(lengths[b])
            index, n_words = word_index(encoding.word_ids(b)[:n])
            row = document_row(
                doc_id=ids[i],
                text=texts[i],
                label=labels[i],
                probs=probs[b],
                tokens=self.tokenizer.convert_ids_to_tokens(encoding["input_ids"][b, :n].tolist()),
                index=index,
                n_words=n_words,
                offsets=offsets[b][:n],
                n_layers=fused.shape[1],
                truncated=self._was_truncated(texts[i], offsets[b][:n], index),
                fingerprint=self.info["fingerprint"],
                forward_s=forward_s,
            )
            doc_attention = fused[b, :, :n, :n]  # (L, n, n): padding sliced away
            row["seconds"].update(pass_s)
            row.update(target=targets[b], **ig_summary([captured[b]]))
            for name, method in self.methods.items():
                if name in self.deferred:
                    continue
                found = {"attention": doc_attention, **captured[b]}
                row.update(explained_columns(name, method, found, fused.shape[1], index, n_words, row["seconds"]))
            if self.deferred:
                row["attention"] = doc_attention.astype(np.float32).ravel()  # for the CPU stage
            row.update(heads[b])
            rows.append(row)
        self._evaluate(rows, model_inputs, problems)
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
        heads = head_columns(collector, len(owners))
        before, after = segments.special_layout(self.tokenizer)
        windows_of = {i: [r for r, (owner, _) in enumerate(owners) if owner == i] for i in chosen}
        preds = {
            i: int(probs[windows_of[i]].mean(axis=0).argmax()) for i in chosen
        }  # a review's windows share its class
        captured, targets, problems, pass_s = captures_for(
            self.gradients, model_inputs, [preds[i] for i, _ in owners], [labels[i] for i, _ in owners]
        )
        rows = []
        for i in chosen:
            seg, mine = plans[i], windows_of[i]
            if problems[mine[0]]:  # recorded per row, the job goes on
                rows.append(self._error_row(ids[i], labels[i], problems[mine[0]]))
                continue
            lengths = [len(seg.inputs[w]) for w in range(len(mine))]
            word_ids, offsets, token_ids = segments.merged_layout(seg, before, after)
            index, n_words = word_index(word_ids)
            row = document_row(
                doc_id=ids[i],
                text=texts[i],
                label=labels[i],
                probs=probs[mine].mean(axis=0),  # (C,): the windows' mean
                tokens=self.tokenizer.convert_ids_to_tokens(token_ids),
                index=index,
                n_words=n_words,
                offsets=offsets,
                n_layers=fused.shape[1],
                truncated=seg.truncated,
                fingerprint=self.info["fingerprint"],
                forward_s=forward_s,
            )
            windows = [fused[r, :, :n, :n] for r, n in zip(mine, lengths)]  # (L, n_w, n_w) each
            found = [{"attention": a, **captured[r]} for a, r in zip(windows, mine)]
            row["seconds"].update({key: value * len(mine) for key, value in pass_s.items()})
            row.update(target=targets[mine[0]], **ig_summary([captured[r] for r in mine]))
            for name, method in self.methods.items():
                if name in self.deferred:
                    continue
                begun = time.perf_counter()
                merged = segments.merge(seg, [method.explain(f, fused.shape[1]) for f in found], before)  # (L, n)
                row.update(score_columns(name, merged, index, n_words, method.signed))
                row["seconds"][name] = time.perf_counter() - begun
            if self.deferred:  # only single-input reviews get here (pipeline.score keeps windows on the actor)
                row["attention"] = windows[0].astype(np.float32).ravel()
            row.update(heads[mine[0]])
            rows.append(row)
        self._evaluate(rows, model_inputs, problems)  # head_tail only: the config refuses windows with --evaluate
        return rows

    def _evaluate(self, rows: list[dict], model_inputs: dict, problems: list) -> None:
        """Faithfulness of the scored rows (``--evaluate``); inputs whose document became an error are left out."""
        if self.evaluator is not None:
            kept = [r for r, problem in enumerate(problems) if not problem]
            inputs = [model_inputs[k][kept] for k in ("input_ids", "attention_mask")]
            self.evaluator.add_metrics([row for row in rows if not row.get("error")], *inputs)

    def _head_collector(self, input_ids, attention_mask, sampled: list[bool]):
        """The per-head statistics collector of one forward pass, or None when heads are off."""
        if not self.heads:
            return None
        from xai_ray.methods.heads import HeadCollector, position_masks

        masks = position_masks(input_ids, self.tokenizer, self.punctuation)  # (B, n, 3)
        return HeadCollector(attention_mask.sum(dim=1).tolist(), masks, sampled, self.heads_sample_rows)

    def _evaluator(self, config: ScorerConfig):
        """The faithfulness stage (``--evaluate``), run here because this actor holds the model."""
        if not config.run.evaluate:
            return None
        from xai_ray.scoring.evaluation import Evaluator
        from xai_ray.scoring.faithfulness import GRADIENT

        return Evaluator(
            self.model,
            self.tokenizer,
            self.device,
            self.token_budget,
            # a stored input_x_gradient is the evaluation's own baseline (the same function), evaluated once as that
            [m for m in self.methods if m not in self.deferred and m != GRADIENT],
            fractions=config.run.evaluate_fractions,
            seed=config.run.seed,
            share=config.run.evaluate_share,
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
        return error_row(doc_id, label, reason, self.info["fingerprint"])


def _model_limit(tokenizer, model) -> int:
    limit = getattr(model.config, "max_position_embeddings", None) or 512
    if getattr(model.config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2  # RoBERTa reserves two positions for the padding offset
    return int(min(limit, getattr(tokenizer, "model_max_length", limit) or limit))
