"""What each run key means, grouped by the section of a run it belongs to: the text of
``xai-ray run --help-config`` and of docs/reference/config.md, from the same declarations the values
are checked against (the field's type, ``config.RULES``).

The keys stay flat where a user types them (``--set ig_steps=32``, a flat YAML file, the manifest's
``config``): a key names one thing wherever it appears. The sections group them for reading, and a
method's own options sit under that method.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

import yaml

from xai_ray.config import RULES, RunConfig
from xai_ray.keys import type_name

# section -> keys, in the order help-config prints them; "methods: NAME" lists a method's own options.
SECTIONS = {
    "corpus": ("data", "split", "text_column", "label_column", "id_column", "clean_html", "limit", "seed"),
    "model": ("model", "allow_pickle", "trust_remote_code", "max_length", "long_text", "window_stride"),
    "methods": ("methods", "target"),
    "methods: attention-based (raw, rollout, flow, grad_rollout, attn_x_grad)": ("head_fusion", "discard_ratio"),
    "methods: rollout, norm_rollout, globenc and flow": ("residual", "start_layer"),
    "methods: integrated_gradients": ("ig_steps", "ig_tolerance"),
    "per-head statistics": ("heads", "heads_docs", "heads_sample", "heads_sample_rows"),
    "execution": (
        "batch_size",
        "max_tokens_per_batch",
        "actors",
        "gpus_per_actor",
        "cpus_per_actor",
        "defer_flow",
        "driver_rows",
    ),
    "outputs": ("store", "run_id", "report", "top_k", "part_rows", "store_layout", "shared_store", "extra"),
    "evaluation": (
        "evaluate",
        "evaluate_fractions",
        "evaluate_share",
        "rationales",
        "rationale_units",
        "max_error_share",
    ),
}

MEANINGS = {
    "data": "the corpus: Hub dataset id, Parquet/CSV/JSONL file, Parquet folder, aclImdb folder or .tar.gz",
    "split": "the split of a Hub dataset or aclImdb folder (train, test)",
    "text_column": "the column holding each document's text",
    "label_column": "the column holding the true class (0/1...); missing: labels are null",
    "id_column": "the column holding each document's id (read as text); missing: row numbers",
    "clean_html": "turn HTML line breaks (<br />, as IMDB writes them) into spaces before scoring; other markup stays text",
    "limit": "score a seeded random sample of this many documents (null: all)",
    "seed": "seed of the sample, of untrained classifier heads and of the heads_docs and heads_sample samples",
    "model": "Hub id, local Hugging Face model folder, or 'minilm' (the packaged all-MiniLM-L6-v2)",
    "allow_pickle": "allow loading pytorch_model.bin (pickle) weights; safetensors only otherwise",
    "trust_remote_code": "allow a model folder's own Python code to run",
    "max_length": "tokens the model sees at once, [CLS] and [SEP] included (capped at the model's limit)",
    "long_text": "reviews longer than max_length: head (the first tokens), head_tail (first quarter + the end), "
    "window (overlapping windows merged per word), auto (what the model was fine-tuned with, "
    "recorded by `xai-ray finetune`; head for other models)",
    "window_stride": "long_text=window: tokens from one window's start to the next (null: half a window)",
    "methods": "explanation methods, comma-separated: raw, norm (attention weighted by the norm of what "
    "each token sends), rollout, norm_rollout, globenc (norms through the residual and both layer "
    "norms, rolled out), flow, grad_rollout, attn_x_grad, input_x_gradient, "
    "integrated_gradients, lrp (relevance propagation conserved through attention and layer norm)",
    "residual": "how rollout, norm_rollout and flow mix in the residual: half (0.5W + 0.5I) or none "
    "(globenc measures the residual itself and ignores it)",
    "head_fusion": "how a layer's heads are fused: mean, max or min (max/min rows renormalised)",
    "discard_ratio": "share of each head row's lowest weights dropped before fusion ([CLS] never), in [0, 1)",
    "start_layer": "first layer (1-based) rollout, norm_rollout and globenc multiply from; lower layers are not "
    "stored for them",
    "target": "the class that grad_rollout, attn_x_grad, input_x_gradient, integrated_gradients and lrp explain: "
    "pred (the predicted class), label (the true class; unlabelled documents become errors), "
    "a class index or one of the model's label names",
    "ig_steps": "integrated_gradients: Gauss-Legendre nodes along the path from the zero word-embedding baseline",
    "ig_tolerance": "integrated_gradients: a path interval whose attributions miss f's change along it by more than"
    " this x its length (log-probability) is split and integrated again, up to 6 splits a review; 0: never",
    "heads": "measure per-head statistics (the heads and head_similarity views)",
    "heads_docs": "documents with per-head statistics, a seeded random sample of the run's documents (the same "
    "on resume, whatever the batches or actors); 0: every document",
    "heads_sample": "documents whose heads are compared pairwise (Jensen-Shannon), the first of the heads_docs "
    "sample (never more than it holds); 0: none",
    "heads_sample_rows": "query rows per sampled document in that comparison",
    "batch_size": "documents handed to an actor at once",
    "max_tokens_per_batch": "padded tokens per forward pass: the memory knob",
    "actors": "scoring actors; 0: one per GPU, else one per cpus_per_actor CPUs",
    "gpus_per_actor": "GPUs each actor holds (null: where the cluster has GPUs, 1/4 of one with 16+ CPUs per GPU, 1/2 with 8+, else 1; 0 without GPUs)",
    "cpus_per_actor": "CPUs each actor holds (and torch threads it uses)",
    "driver_rows": "a run that selects at most this many rows (--limit, or a Parquet or aclImdb source's size) "
    "from local files of at most 256 MiB reads and screens them in the driver and hands them to the actors "
    "itself and writes their parts, without Ray Data's executions (5,000 IMDB reviews on 2 CPUs: 0.87x the "
    "streamed run's time); 0: always stream the corpus through Ray Data",
    "defer_flow": "run flow in its own CPU stage (null: only when actors hold GPUs)",
    "store": "the store folder or object-store URI (s3://, gs://, file://) runs are published into",
    "run_id": "the run's id (null: a UTC timestamp plus a random suffix)",
    "report": "write report.html into the run folder",
    "top_k": "words per top-k list in the run's log summary and aggregates",
    "part_rows": "rows of the largest table slice per committed part (the granularity of --resume)",
    "store_layout": "how a new run keeps its scores: 3 (about a third of layout 1's bytes; a word on its first "
    "token's row) or 2 (words in rows of their own: about twice layout 3's bytes, token scans about a third "
    "faster); both read the same, and a resumed run keeps its own",
    "shared_store": "the store folder is mounted on every node (a shared file system), so Ray workers on any "
    "node write the run's parts; false: workers on the driver's node write them (a URI store: always)",
    "extra": "free-form mapping kept in the manifest (nightly and URI stores record theirs here)",
    "evaluate": "also measure faithfulness (comprehensiveness, sufficiency, rank correlations) of every method",
    "evaluate_fractions": "shares of tokens removed or kept by the faithfulness metrics (0.005 to 1, named at two decimals)",
    "evaluate_share": "share of documents evaluated, picked by a hash of doc_id, in (0, 1]",
    "rationales": "the corpus column holding each review's human rationale (a 0/1 list per whitespace token, "
    "or [start, end] pairs): plausibility (AUPRC, token F1, IOU F1) of every method is stored in faithfulness "
    "(null: not measured; Parquet, CSV or JSON lines sources)",
    "rationale_units": "what a rationale's [start, end] pairs count: tokens (whitespace tokens, end excluded) or chars",
    "max_error_share": "exit with status 3 when more than this share of documents failed (null: only when all did)",
}


def help_config() -> str:
    """Every key of ``RunConfig``, section by section, with its default, meaning, type and accepted values."""
    lines = [
        "Every key below can be given in the --config YAML or as --set KEY=VALUE (values read as YAML).",
        "Precedence: defaults < YAML < flags < --set.",
    ]
    declared = {f.name: f for f in fields(RunConfig)}
    for section, keys in SECTIONS.items():
        lines += ["", f"[{section}]"]
        for key in keys:
            f = declared[key]
            default = f.default_factory() if f.default_factory is not MISSING else f.default  # type: ignore[misc]
            shown = (
                yaml.safe_dump(list(default) if isinstance(default, tuple) else default, default_flow_style=True)
                .strip()
                .removesuffix("...")
                .strip()
            )
            rule = RULES.get(key)
            accepted = rule.describe() if rule else ""
            lines.append(f"  {key} (default: {shown})")
            lines.append(f"      {MEANINGS.get(key, '(undocumented)')}")
            lines.append(f"      type: {type_name(str(f.type))}" + (f"; accepted: {accepted}" if accepted else ""))
    return "\n".join(lines)
