"""How many operations does one captured forward dispatch? (on a GPU, each is a kernel launch)

    python bench/capture_ops.py [MODEL] [DATA] [--batch 64] [--max-length 512] [--device cpu|cuda]

One batch of IMDB reviews, padded to its longest, through the same model in one process:
  plain      the bare forward, fused SDPA, no capture
  loop       the per-document capture (the CPU's path), per-head statistics on
  batched    the batched capture (the GPU's path), per-head statistics on
  batched-   the batched capture, per-head statistics off
Counts the ATen operations each dispatches (``torch.profiler``, views included) and the best of
``--repeats`` wall times, then the ratios batched/loop and batched/plain. On a CPU the counts are
the point (the loop is the faster path there); on CUDA the times are too.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="minilm")
    parser.add_argument("data", nargs="?", default=str(ROOT.parent / "shared/data/imdb/train.parquet"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu")
    args = parser.parse_args()

    import torch
    import transformers

    from xai_ray.data.corpus import read_corpus
    from xai_ray.methods.heads import HeadCollector, position_masks
    from xai_ray.model import capture
    from xai_ray.model.loading import load_model

    transformers.logging.set_verbosity_error()
    loaded = load_model(args.model, device=args.device)
    model, tokenizer = loaded.model, loaded.tokenizer
    texts = read_corpus(args.data, limit=args.batch, seed=0).text.tolist()
    encoding = tokenizer(texts, truncation=True, max_length=args.max_length, padding=True, return_tensors="pt")
    encoding = {k: v.to(args.device) for k, v in encoding.items()}
    lengths = encoding["attention_mask"].sum(dim=1).tolist()
    masks = position_masks(encoding["input_ids"].cpu(), tokenizer)

    def heads():
        return HeadCollector(lengths, masks, [False] * len(lengths))

    variants = {
        "plain": lambda: model(**encoding),
        "loop": lambda: capture.forward_with_attention(model, dict(encoding), heads=heads(), batched=False),
        "batched": lambda: capture.forward_with_attention(model, dict(encoding), heads=heads(), batched=True),
        "batched-": lambda: capture.forward_with_attention(model, dict(encoding), batched=True),
    }
    ops, seconds = {}, {}
    with torch.inference_mode():
        for name, forward in variants.items():
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                forward()
            ops[name] = sum(e.count for e in profile.key_averages() if e.key.startswith("aten::"))
            seconds[name] = min(_timed(forward, args.device) for _ in range(args.repeats))
    print(f"{args.model}, {len(texts)} reviews padded to {encoding['input_ids'].shape[1]} tokens, {args.device}")
    for name in variants:
        print(f"  {name:<10} {ops[name]:>8} ATen ops  {seconds[name]:8.3f} s")
    print(
        f"capture_ops: batched/loop ops {ops['batched'] / ops['loop']:.3f}, time {seconds['batched'] / seconds['loop']:.2f}; "
        f"batched/plain ops {ops['batched'] / ops['plain']:.2f}, time {seconds['batched'] / seconds['plain']:.2f}"
    )


def _timed(forward, device: str) -> float:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    forward()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
