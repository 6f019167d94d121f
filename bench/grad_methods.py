"""What do the gradient methods cost next to the capture forward, on CPU?

    python bench/grad_methods.py [--model minilm] [--data IMDB] [--n 64] [--max-length 128] [--repeats 3]

Tokenizes N reviews, cuts them into the scorer's token-budget batches, and per batch runs, in
turns (so a busy machine slows them alike): the capture forward (``forward_with_attention``, what
every run pays for raw/rollout/flow), the attention-gradient pass that grad_rollout and
attn_x_grad share (one forward + backward, ``scoring.gradient_pass``, chunked as the scorer does)
plus both methods' array math per review, the input x gradient pass, and integrated gradients
(``--ig-steps``). Prints each one's seconds per review (best of ``--repeats``) and its ratio to
the capture forward; the target is grad_rollout + attn_x_grad <= 3x.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--data", default=str(IMDB))
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ig-steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a scoring actor uses cpus_per_actor)")
    parser.add_argument("--token-budget", type=int, default=8192)
    args = parser.parse_args()

    import torch

    from xai_ray.data.corpus import read_corpus
    from xai_ray.methods import get_method
    from xai_ray.model.batching import token_budget_batches
    from xai_ray.model.capture import forward_with_attention
    from xai_ray.model.loading import load_model
    from xai_ray.scoring.gradient_pass import GradientPasses

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    tokenizer.padding_side = "right"
    texts = read_corpus(args.data, limit=args.n, seed=0).text.tolist()
    lengths = [len(x) for x in tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]]
    mean_tokens = float(np.mean(lengths))
    batches = [
        dict(
            tokenizer(
                [texts[i] for i in batch],
                truncation=True,
                max_length=args.max_length,
                padding=True,
                return_tensors="pt",
            )
        )
        for batch in token_budget_batches(lengths, args.token_budget)
    ]
    methods = {name: get_method(name) for name in ("grad_rollout", "attn_x_grad")}
    passes = {
        "grad_rollout + attn_x_grad": GradientPasses(model, methods, "pred", {}, 1, args.token_budget),
        "input_x_gradient": GradientPasses(
            model, {"m": get_method("input_x_gradient")}, "pred", {}, 1, args.token_budget
        ),
        f"integrated_gradients ({args.ig_steps} steps)": GradientPasses(
            model, {"m": get_method("integrated_gradients")}, "pred", {}, args.ig_steps, args.token_budget
        ),
    }
    seconds = {name: [] for name in ["capture forward", *passes]}
    for _ in range(args.repeats):
        spent = dict.fromkeys(seconds, 0.0)
        for encoding in batches:
            started = time.perf_counter()
            logits, _ = forward_with_attention(model, encoding)
            spent["capture forward"] += time.perf_counter() - started
            targets = logits.argmax(dim=1).tolist()
            for name, gradient_pass in passes.items():
                started = time.perf_counter()
                captured, _ = gradient_pass.capture(encoding, targets)
                if name.startswith("grad_rollout"):  # the methods' own array math, per review
                    for found in captured:
                        for method in methods.values():
                            method.explain(found, model.config.num_hidden_layers)
                spent[name] += time.perf_counter() - started
        for name in seconds:
            seconds[name].append(spent[name])
    forward = min(seconds["capture forward"])
    print(
        f"model {args.model}, {args.n} IMDB reviews, max_length {args.max_length} (mean {mean_tokens:.0f} tokens),"
        f" {args.threads} torch thread(s), CPU; best of {args.repeats}, turns per batch"
    )
    print("| pass | ms per review | x capture forward |")
    print("|---|---:|---:|")
    for name, times in seconds.items():
        best = min(times)
        print(f"| {name} | {1000 * best / args.n:.1f} | {best / forward:.2f} |")


if __name__ == "__main__":
    main()
