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

import pyarrow as pa

from xai_ray.config import check_start_layer
from xai_ray.data.screening import text_problem
from xai_ray.methods import get_method
from xai_ray.methods.base import GLOBENC, NORM_ATTENTION
from xai_ray.model.batching import token_budget_batches
from xai_ray.model.recovery import is_out_of_memory, prefix_for_tokenizer, release_memory
from xai_ray.scoring import segments
from xai_ray.scoring.gradient_pass import GradientPasses, captures_for, ig_summary
from xai_ray.scoring.rows import (
    error_row,
    head_columns,
    missing,
    review_meta,
    row_schema,
    score_arrays,
    table_of,
)
from xai_ray.scoring.settings import ScorerConfig
from xai_ray.scoring.text_columns import Vocabulary, text_columns
from xai_ray.words import merge_batch

log = logging.getLogger("xai_ray.scoring.actor")
# On a CPU a forward costs its padded tokens, one row as much as many: groups pad at most 10% beyond
# their reviews' tokens (``token_budget_batches``); 25-review batches of IMDB padded 1.5x before.
CPU_PADDING = 0.1
# A text the screening passes (it holds a symbol) whose every character the model's tokenizer drops
# (BERT's normaliser removes U+FFFD and control characters): scored, it was a prediction from
# [CLS] [SEP] alone, counted in accuracy with no word to show for it.
NO_TOKENS = (
    "the model's tokenizer keeps no token of the text (it drops every character of it, e.g. U+FFFD): "
    "the model would see no word of it"
)


class Scorer:
    """Callable class for ``Dataset.map_batches``: scores a batch of ``{doc_id, text, label}``.

    ``config``: a ``ScorerConfig`` (or a mapping of run-config keys, checked the same way);
    ``loaded``: the model already loaded for it (``pipeline.pool``: a warm actor keeps it between runs)."""

    def __init__(self, config: ScorerConfig | dict, loaded=None) -> None:
        import sys

        import torch

        from xai_ray.model.loading import label_names, load_model

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
        if "transformers" in sys.modules:  # a model or tokenizer of transformers: its warnings stay quiet
            sys.modules["transformers"].logging.set_verbosity_error()
            sys.modules["transformers"].logging.disable_progress_bar()
        self.tokenizer.padding_side = "right"  # per-document slices [:n] assume real tokens come first
        self.specials = segments.special_tokens(self.tokenizer)  # read once, not once a review
        self.vocabulary = Vocabulary(self.tokenizer)  # every token's text, taken for a batch at once
        self.token_budget = config.run.max_tokens_per_batch
        self.max_length = min(config.run.max_length, model_limit(self.tokenizer, self.model))
        check_start_layer(config.run.start_layer, self.info["n_layers"])  # explain's way in too: never no score
        self.options = config.attention_options()
        self.methods = {name: get_method(name, self.options) for name in config.run.methods}
        self.deferred = set(config.deferred_methods)
        labels = label_names(self.model.config, self.model.config.num_labels)
        # the backward passes of the class-specific methods (none when the run has none of them)
        self.gradients = GradientPasses(
            self.model,
            self.methods,
            config.run.target,
            labels,
            config.run.ig_steps,
            self.token_budget,
            config.run.ig_tolerance,
        )
        # long reviews (xai_ray.scoring.segments): head keeps the plain path; head_tail and window cut and merge
        self.long_text = segments.resolve_mode(config.run.long_text, config.run.model)
        # A window holds max_length less the special tokens: a stride checked against the asked-for
        # max_length can pass the model's own (capped) window and skip text between windows.
        room = max(1, self.max_length - sum(len(ids) for ids in self.specials))
        stride = config.run.window_stride
        self.stride = None if stride is None else min(stride, room)
        self.schema = row_schema(list(self.methods), with_attention=bool(self.deferred))
        self.pid = os.getpid()
        self.evaluator = self._evaluator(config)
        self.heads = config.run.heads
        self.heads_sample_rows = config.run.heads_sample_rows
        self.punctuation: dict[int, bool] = {}  # vocabulary id -> is punctuation, filled as ids are seen
        self.sampled: set[int] = set()  # batch positions chosen for head similarity
        self.counted: set[int] = set()  # batch positions given per-head statistics (the sampled among them)
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
        # The driver marks the documents of the statistics and similarity samples (data.head_docs);
        # rows without statistics marks (a notebook's own rows) all get them, a compared one always
        self.sampled = {i for i, x in enumerate(batch.get("heads_sample", ())) if x} if self.heads else set()
        marks = batch.get("heads_stats")
        counted = range(len(ids)) if marks is None else (i for i, x in enumerate(marks) if x)
        self.counted = (set(counted) | self.sampled) if self.heads else set()
        errors, good = [], []
        for i, text in enumerate(texts):
            problem = text_problem(text)
            if problem:
                errors.append(self._error_row(ids[i], labels[i], problem))
            else:
                good.append(i)
        plans, good = self._plans(ids, texts, labels, good, errors)
        groups = self._groups(plans, good)
        tables = [table for group in groups for table in self._score_group(ids, texts, labels, group, plans)]
        return pa.concat_tables([*tables, self._errors(errors)])

    def _errors(self, rows: list[dict]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=self.schema)

    def _score_group(self, ids, texts, labels, group, plans) -> list[pa.Table]:
        """Score a group; out of memory halves it, any other failure scores its documents alone."""
        try:
            return [self._score(ids, texts, labels, group, plans)]
        except Exception as err:
            reason = f"scoring failed: {type(err).__name__}: {err}"
            if len(group) == 1:  # recorded per row, the job goes on
                return [self._errors([self._error_row(ids[group[0]], labels[group[0]], reason)])]
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
                return self._score_group(ids, texts, labels, group[:half], plans) + self._score_group(
                    ids, texts, labels, group[half:], plans
                )
            # One bad document must not sink its batch: score the rest one at a time.
            self.fallbacks += 1
            log.warning(
                "batch of %d failed (%s: %s); scoring its documents one at a time", len(group), type(err).__name__, err
            )
            return [table for i in group for table in self._score_group(ids, texts, labels, [i], plans)]

    def _groups(self, plans, chosen) -> list[list[int]]:
        """A batch's reviews in length-sorted groups of at most ``max_tokens_per_batch`` padded
        tokens; a review's windows are forwarded together, so it costs their sum."""
        lengths = [sum(len(x) for x in plans[i].inputs) for i in chosen]
        padding = CPU_PADDING if self.device == "cpu" else None  # a GPU is kept busy by bigger batches
        return [[chosen[j] for j in batch] for batch in token_budget_batches(lengths, self.token_budget, padding)]

    def _plans(self, ids, texts, labels, good, errors) -> tuple[dict, list[int]]:
        """Each review cut into model inputs (``segments.plan_batch``: one tokenizer call for the
        batch; the head is one window); a review that cannot be is an error row. For the head, a
        very long text is first cut at whitespace (the same tokens are kept; see
        ``recovery.prefix_for_tokenizer``)."""
        cut_texts, failed = {}, {}
        for i in good:
            try:
                head = self.long_text == "head"
                cut_texts[i] = prefix_for_tokenizer(self.tokenizer, texts[i], self.max_length) if head else texts[i]
            except Exception as err:  # recorded per row, the job goes on
                failed[i] = err
        planned = segments.plan_batch(
            self.tokenizer, list(cut_texts.values()), self.max_length, self.long_text, self.stride, self.specials
        )
        plans = {}
        for i, result in zip(cut_texts, planned):
            if isinstance(result, Exception):
                failed[i] = result
                continue
            if not result.ids:  # only characters this tokenizer drops (BERT's drops U+FFFD): nothing to explain
                failed[i] = NO_TOKENS
                continue
            try:
                if len(cut_texts[i]) < len(texts[i]) and not result.truncated:
                    result.truncated = self._has_tokens(texts[i][len(cut_texts[i]) :])
                plans[i] = result
            except Exception as err:  # recorded per row, the job goes on
                failed[i] = err
        for i in good:
            if i in failed:
                err = failed[i]
                reason = err if isinstance(err, str) else f"tokenizing failed: {type(err).__name__}: {err}"
                errors.append(self._error_row(ids[i], labels[i], reason))
        return plans, [i for i in good if i in plans]

    def _score(self, ids, texts, labels, chosen, plans) -> pa.Table:
        """Score reviews cut by ``segments.plan``: every model input forwarded in one batch, every
        method on the device for the whole batch, windows merged per review by the rule in
        ``xai_ray.scoring.segments`` (one window per word; mean probabilities), words summed by
        index, and the table built column by column."""
        owners = [(i, w) for i in chosen for w in range(len(plans[i].inputs))]  # one model input each
        encoding = self._encode([plans[i].inputs[w] for i, w in owners])
        # per-head statistics of a windowed review come from its first window
        collector = self._head_collector(
            encoding["input_ids"],
            encoding["attention_mask"],
            [w == 0 and i in self.counted for i, w in owners],
            [w == 0 and i in self.sampled for i, w in owners],
        )
        started = time.perf_counter()
        model_inputs, probs, fused, norms = self._forward(encoding, collector)  # (R, C), (R, L, N, N) on the device
        forward_s = (time.perf_counter() - started) / len(chosen)
        heads = head_columns(collector, len(owners))
        first = {i: owners.index((i, 0)) for i in chosen}
        windows_of = {i: [r for r, (owner, _) in enumerate(owners) if owner == i] for i in chosen}
        review_probs = {
            i: probs[windows_of[i]].mean(axis=0) for i in chosen
        }  # (C,): a review's windows share its class
        captured, targets, problems, pass_s = captures_for(
            self.gradients,
            model_inputs,
            [int(review_probs[i].argmax()) for i, _ in owners],
            [labels[i] for i, _ in owners],
        )
        errors = [self._error_row(ids[i], labels[i], problems[first[i]]) for i in chosen if problems[first[i]]]
        scored = [i for i in chosen if not problems[first[i]]]
        if not scored:
            return self._errors(errors)
        n_layers = fused.shape[1]
        merged = segments.MergedBatch.of([plans[i] for i in scored], [windows_of[i] for i in scored], self.tokenizer)
        lengths = encoding["attention_mask"].sum(dim=1)  # (R,)
        captured = {"attention": fused, **norms, **captured}
        columns, method_s = {}, {}
        for name, method in self.methods.items():
            if name in self.deferred:
                continue
            begun = time.perf_counter()
            tokens = merged.scores(method.scores(captured, lengths.to(fused.device), n_layers))  # (D, L, Nm)
            raw, spread = merge_batch(tokens, merged.word_index(tokens.device), merged.n_words_max, method.signed)
            columns.update(score_arrays(name, tokens, raw, spread, merged.n_tokens, merged.n_words))
            method_s[name] = (time.perf_counter() - begun) / len(scored)
        columns.update(
            text_columns(
                [texts[i] for i in scored],
                merged.token_ids,
                merged.indexes,
                merged.n_words,
                merged.offsets,
                self.vocabulary,
            )
        )
        meta = []
        for d, i in enumerate(scored):
            seg = plans[i]
            row = review_meta(
                doc_id=ids[i],
                text=texts[i],
                label=labels[i],
                probs=review_probs[i],
                n_tokens=int(merged.n_tokens[d]),
                n_layers=n_layers,
                truncated=seg.truncated,
                fingerprint=self.info["fingerprint"],
                forward_s=forward_s,
            )
            row["seconds"].update({key: value * len(windows_of[i]) for key, value in pass_s.items()}, **method_s)
            row.update(target=targets[first[i]], **ig_summary(captured, windows_of[i]))
            if self.deferred:  # only single-input reviews get here (pipeline.score keeps windows on the actor)
                n = int(lengths[first[i]])
                row["attention"] = fused[first[i], :, :n, :n].float().cpu().numpy().ravel()
            row.update(heads[first[i]])
            meta.append(row)
        self._evaluate(meta, columns, model_inputs, [first[i] for i in scored])  # head and head_tail: one input each
        return pa.concat_tables([table_of(self.schema, meta, columns), self._errors(errors)])

    def _encode(self, inputs: list[list[int]]) -> dict:
        """Model inputs (ids with their special tokens) as one right-padded batch of tensors."""
        import torch

        width = max(len(x) for x in inputs)
        input_ids = torch.full((len(inputs), width), self.tokenizer.pad_token_id or 0, dtype=torch.long)  # (R, N)
        attention_mask = torch.zeros((len(inputs), width), dtype=torch.long)  # (R, N)
        for r, ids in enumerate(inputs):
            input_ids[r, : len(ids)] = torch.tensor(ids)
            attention_mask[r, : len(ids)] = 1
        encoding = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in self.tokenizer.model_input_names:
            encoding["token_type_ids"] = torch.zeros_like(input_ids)
        return encoding

    def _forward(self, encoding: dict, collector):
        """One forward pass with attention capture: (model inputs on the device, probs (B, C) on
        the host, fused (B, L, N, N) and {need: (B, L, N, N)} of the norm captures the methods
        read (norm-based attention, GlobEnc's), left on the device for the methods)."""
        import functools

        import torch

        from xai_ray.model import capture

        wanted = [need for need in (NORM_ATTENTION, GLOBENC) if any(m.needs == need for m in self.methods.values())]
        forward_with_attention = functools.partial(
            capture.forward_with_attention, norms=NORM_ATTENTION in wanted, globenc=GLOBENC in wanted
        )

        if self.device == "cuda":
            # Pinned host memory lets the copy overlap; bf16 matmuls, while capture keeps the
            # probabilities and their fusion in fp32 (rollout multiplies them L times).
            model_inputs = {k: v.pin_memory().to(self.device, non_blocking=True) for k, v in encoding.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, fused, *norms = forward_with_attention(
                    self.model, model_inputs, self.options.head_fusion, self.options.discard_ratio, collector
                )
        else:
            model_inputs = encoding
            logits, fused, *norms = forward_with_attention(
                self.model, model_inputs, self.options.head_fusion, self.options.discard_ratio, collector
            )
        return model_inputs, torch.softmax(logits, dim=-1).float().cpu().numpy(), fused, dict(zip(wanted, norms))

    def _evaluate(self, meta: list[dict], columns: dict, model_inputs: dict, inputs: list[int]) -> None:
        """Faithfulness of the scored reviews (``--evaluate``), each from its one model input
        (batch rows ``inputs``); the metrics read each review's word index and token scores back
        from their columns."""
        if self.evaluator is None:
            return
        for d, row in enumerate(meta):
            row["word_index"] = columns["word_index"][d].values.to_numpy(zero_copy_only=False)
            for name in self.evaluator.methods:
                row[f"scores_{name}"] = columns[f"scores_{name}"][d].values.to_numpy(zero_copy_only=False)
        self.evaluator.add_metrics(meta, *(model_inputs[k][inputs] for k in ("input_ids", "attention_mask")))

    def _head_collector(self, input_ids, attention_mask, counted: list[bool], sampled: list[bool]):
        """The per-head statistics collector of one forward pass (``counted``: the model inputs
        given statistics, ``sampled``: those compared too), or None when none is counted."""
        if not any(counted):
            return None
        from xai_ray.methods.heads import HeadCollector, position_masks

        masks = position_masks(input_ids, self.tokenizer, self.punctuation)  # (B, n, 3)
        lengths = attention_mask.sum(dim=1).tolist()
        return HeadCollector(lengths, masks, sampled, self.heads_sample_rows, counted=counted)

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
            # a stored input_x_gradient of the predicted class is the evaluation's own baseline (the same
            # function), evaluated once as that; of another class (target label or a class) it is not
            [m for m in self.methods if m not in self.deferred and (m != GRADIENT or config.run.target != "pred")],
            fractions=config.run.evaluate_fractions,
            seed=config.run.seed,
            share=config.run.evaluate_share,
        )

    def _has_tokens(self, tail: str) -> bool:
        """Whether text cut off before tokenizing holds anything the tokenizer keeps (a tail of
        zero-width or control characters, which it drops, does not count)."""
        tail = tail.strip()
        return bool(tail) and (len(tail) > 256 or bool(self.tokenizer(tail, add_special_tokens=False)["input_ids"]))

    def _error_row(self, doc_id, label, reason: str) -> dict:
        return error_row(doc_id, label, reason, self.info["fingerprint"])


def model_limit(tokenizer, model) -> int:
    """The longest input the model's position table holds. RoBERTa-style embeddings (RoBERTa,
    XLM-R, CamemBERT, RoBERTa-PreLayerNorm, Data2Vec-text, ...) number positions from their
    ``padding_idx`` + 1, so that many fewer fit: read off the embeddings, not from a list of types."""
    limit = getattr(model.config, "max_position_embeddings", None) or 512
    padding = getattr(getattr(model.base_model, "embeddings", None), "padding_idx", None)
    if isinstance(padding, int):
        limit -= padding + 1
    return int(min(limit, getattr(tokenizer, "model_max_length", limit) or limit))
