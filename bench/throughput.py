"""Does explaining a corpus cost about what predicting it costs?

    python bench/throughput.py MODEL DATA N [--max-length 512] [--e2e-n 2000] [--skip e]
        [--device cpu|cuda] [--set KEY=VALUE ...]

On the same N reviews and model, each variant in its own process (clean peak memory), prints:
  (a) our scoring stage: capture + raw + rollout + words (xai_ray.scoring.actor.Scorer)
  (b) the bare forward pass, fused SDPA attention, no capture
  (c) eager attention with output_attentions=True and nothing else
  (d) the seed write-up's loop: one review at a time padded to max length, eager attention,
      full-matrix rollout, then its unique-token x unique-token mean matrix
  (f) a lean one-at-a-time loop: no padding, rollout only (no target; shows what batching buys)
  (e) the whole `xai-ray run` (Ray start-up, actors, Parquet, DuckDB summary), on --e2e-n reviews
then docs/s, the ratios a/b, a/c, a/d, e/a, and each variant's peak RSS. `--memory` instead
compares peak RSS of (a) and (b) on one batch of 32 x 512 tokens of a random 12-layer,
12-head, hidden-768 BERT. Run (e) inside a loopback-only network namespace (Ray).

On CUDA (``--device cuda``, the default where one is present) (a), (b) and (f) run on the GPU:
(a) and (b) in bf16 autocast with pinned copies, as the scoring actor runs, after one warm-up
batch each; (f) in fp32, as a user's first loop would; (d) is left out. (e) is the same command
as on CPU: its actors find the GPU themselves. ``--set KEY=VALUE`` goes to (a)'s scorer and to
(e)'s ``xai-ray run`` alike (e.g. ``--set max_tokens_per_batch=65536``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def texts_for(data: str, n: int) -> tuple[list[str], list[str]]:
    from xai_ray.data.corpus import read_corpus

    corpus = read_corpus(data, limit=n, seed=0)
    return corpus.doc_id.tolist(), corpus.text.tolist()


BUDGET = int(os.environ.get("XAI_BENCH_BUDGET", "8192"))


def batches(tokenizer, texts, max_length, budget=BUDGET):
    """Length-sorted batches under a padded-token budget, the same for every variant."""
    lengths = [len(x) for x in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    group = []
    for i in order:
        if group and lengths[group[0]] * (len(group) + 1) > budget:
            yield [texts[j] for j in group]
            group = []
        group.append(i)
    yield [texts[j] for j in group]


def settings(pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` pairs as the scorer's config values (numbers where they parse)."""
    out = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        for kind in (int, float):
            try:
                out[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            out[key] = value
    return out


def run_variant(variant: str, args, n: int) -> dict:
    import torch

    from xai_ray.model.loading import load_model

    cuda = args.device == "cuda"
    torch.set_num_threads(os.cpu_count() or 1)
    ids, texts = texts_for(args.data, n)
    if variant == "a":
        from xai_ray.scoring.actor import Scorer

        config = {
            "model": args.model,
            "max_length": args.max_length,
            "methods": ["raw", "rollout"],
            "cpus_per_actor": os.cpu_count(),
            "max_tokens_per_batch": BUDGET,
            "gpus_per_actor": 1 if cuda else 0,
        }
        scorer = Scorer({**config, **settings(args.set)})
        if cuda:  # one warm-up batch: CUDA context, cuBLAS handles, kernel choices
            scorer({"doc_id": ids[:32], "text": texts[:32], "label": [None] * 32})
        start = time.perf_counter()
        scorer({"doc_id": ids, "text": texts, "label": [None] * len(ids)})
        return {"seconds": time.perf_counter() - start}
    attn = {"b": "sdpa", "c": "eager", "d": "eager", "f": "eager"}[variant]
    loaded = load_model(args.model, attn_implementation=attn, device=args.device)
    model, tok = loaded.model, loaded.tokenizer
    budget = settings(args.set).get("max_tokens_per_batch", BUDGET)

    def forward(group):
        enc = tok(group, truncation=True, max_length=args.max_length, padding=True, return_tensors="pt")
        if cuda:  # as the scoring actor runs: pinned copies, bf16 autocast
            enc = {k: v.pin_memory().to("cuda", non_blocking=True) for k, v in enc.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return model(**enc, output_attentions=(variant == "c")).logits.float().cpu()
        return model(**enc, output_attentions=(variant == "c")).logits

    with torch.inference_mode():
        if cuda and variant in "bc":
            forward(texts[:32])  # warm-up, as for (a)
        start = time.perf_counter()
        if variant in "bc":
            for group in batches(tok, texts, args.max_length, budget):
                forward(group)
        else:
            for text in texts:
                seed_style_review(
                    model, tok, text, args.max_length, pad=(variant == "d"), words=(variant == "d"), device=args.device
                )
        if cuda:
            torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - start}


def seed_style_review(model, tok, text, max_length, pad: bool, words: bool, device: str = "cpu"):
    """The seed write-up's loop for one review: padded to max_length (its token filter drops
    [PAD]), eager attention, full-matrix rollout with I added and rows renormalised, then a
    unique-token x unique-token matrix of mean rollout values, filled pair by pair."""
    import numpy as np
    import torch

    enc = tok(text, truncation=True, max_length=max_length, return_tensors="pt", padding="max_length" if pad else False)
    attentions = model(**{k: v.to(device) for k, v in enc.items()}, output_attentions=True).attentions
    n_tok = enc["input_ids"].shape[1]
    eye = torch.eye(n_tok, device=device)
    rollout = eye
    for layer in attentions:
        avg = layer.mean(dim=1).squeeze(0) + eye
        avg = avg / avg.sum(dim=-1, keepdim=True)
        rollout = avg @ rollout
    if not words:
        return rollout.cpu()
    rollout = rollout.numpy()
    positions: dict[str, list[int]] = {}
    for index, token in enumerate(tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())):
        if token not in tok.all_special_tokens:
            positions.setdefault(token, []).append(index)
    keys = list(positions)
    merged = np.zeros((len(keys), len(keys)))
    for a, rows in enumerate(keys):
        for b, cols in enumerate(keys):
            merged[a, b] = rollout[np.ix_(positions[rows], positions[cols])].mean()
    return merged / merged.sum(axis=1, keepdims=True)


def run_memory(variant: str) -> dict:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    import xai_ray.model.capture as capture
    from xai_ray.model.attention_record import record_attention

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    attn = capture.CAPTURE if variant == "a" else "sdpa"
    config = BertConfig(
        num_hidden_layers=12,
        num_attention_heads=12,
        hidden_size=768,
        intermediate_size=3072,
        num_labels=2,
        attn_implementation=attn,
    )
    model = record_attention(BertForSequenceClassification(config).eval(), attn)
    ids = torch.randint(1000, 20000, (32, 512))
    mask = torch.ones_like(ids)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.inference_mode():
        if variant == "a":
            from xai_ray.methods import get_method

            logits, fused = capture.forward_with_attention(model, {"input_ids": ids, "attention_mask": mask})
            fused = fused.numpy()  # (B, L, n, n)
            for method in (get_method("raw"), get_method("rollout")):
                for doc in fused:
                    method.attribute(doc)
        else:
            model(input_ids=ids, attention_mask=mask)
    return {"seconds": time.perf_counter() - start, "rss_before_kb": before}


def run_e2e(model_name: str, data: str, n: int, max_length: int, pairs: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as store:
        start = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "xai_ray.cli",
                "run",
                "--data",
                data,
                "--limit",
                str(n),
                "--model",
                model_name,
                "--max-length",
                str(max_length),
                "--store",
                store,
                "--no-report",
            ]
            + [flag for pair in pairs for flag in ("--set", pair)],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - start
        if done.returncode:
            sys.exit(f"(e) failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return {"seconds": seconds}


def child(args) -> None:
    if args.memory:
        result = run_memory(args.variant)
    elif args.variant == "e":
        result = run_e2e(args.model, args.data, args.n, args.max_length, args.set)
    else:
        result = run_variant(args.variant, args, args.n)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def spawn(args, variant: str, n: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        args.model,
        args.data,
        str(n),
        "--max-length",
        str(args.max_length),
        "--variant",
        variant,
        "--device",
        args.device,
    ]
    cmd += [flag for pair in args.set for flag in ("--set", pair)] + (["--memory"] if args.memory else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"variant {variant} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", default="minilm")
    parser.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/imdb/train.parquet"))
    parser.add_argument("n", nargs="?", type=int, default=500)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--e2e-n", type=int, default=2000)
    parser.add_argument("--skip", default="", help="variants to leave out, e.g. 'de'")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda where present")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="to (a)'s scorer and (e)'s run")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.variant:
        return child(args)
    if args.memory:
        a, b = spawn(args, "a", 0), spawn(args, "b", 0)
        print(
            f"batch 32 x 512, random 12-layer/12-head/768 BERT: peak RSS (a) capture+raw+rollout "
            f"{a['peak_rss_mb']:.0f} MB, (b) SDPA forward {b['peak_rss_mb']:.0f} MB, ratio a/b "
            f"{a['peak_rss_mb'] / b['peak_rss_mb']:.2f} (target <= 1.5); seconds a {a['seconds']:.1f}, b {b['seconds']:.1f}"
        )
        return
    names = {
        "a": "(a) xai-ray scoring (raw+rollout)",
        "b": "(b) bare forward, SDPA",
        "c": "(c) eager + output_attentions",
        "d": "(d) seed loop: 1 at a time, padded, words",
        "e": f"(e) whole xai-ray run ({args.e2e_n} docs)",
        "f": "(f) 1 at a time, unpadded, rollout only",
    }
    rates = {}
    if args.device == "cuda":
        import torch

        args.skip += "d"  # the seed's word loop is host work only; it says nothing of the GPU
        where = f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
    else:
        where = "CPU"
    print(f"model {args.model}, {args.n} IMDB reviews, max length {args.max_length}, {os.cpu_count()} CPUs, {where}")
    if args.set:
        print("settings: " + " ".join(args.set))
    print(f"{'variant':<40}{'docs/s':>9}{'seconds':>9}{'peak MB':>9}")
    for v in "abcdfe":
        if v in args.skip:
            continue
        n = args.e2e_n if v == "e" else args.n
        result = spawn(args, v, n)
        rates[v] = n / result["seconds"]
        print(f"{names[v]:<40}{rates[v]:>9.2f}{result['seconds']:>9.1f}{result['peak_rss_mb']:>9.0f}", flush=True)
    for top, bottom, target in (
        ("a", "b", ">= 0.6 (goal 0.75)"),
        ("a", "c", ">= 1.2"),
        ("a", "d", ">= 2 on CPU"),
        ("a", "f", "(no target: a lean loop, not the seed's)"),
        ("e", "a", ">= 0.8"),
        (
            "e",
            "b",
            ">= 0.75 at 600 reviews, >= 0.85 at 5,000 (the whole run against the bare forward; same n with --e2e-n N)",
        ),
        ("e", "f", ">= 1.0 at 5,000 reviews (the whole run against the one-at-a-time loop without padding)"),
        ("e", "d", ">= 2 (the whole run against the naive loop)"),
    ):
        if top in rates and bottom in rates:
            print(f"ratio {top}/{bottom}: {rates[top] / rates[bottom]:.2f}   target {target}")


if __name__ == "__main__":
    main()
