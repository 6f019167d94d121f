"""What do norm-based attention and GlobEnc add to the capture forward, on CPU?

    python bench/norm_capture.py [--model minilm] [--data IMDB] [--n 48] [--max-length 128] [--repeats 3]

Tokenizes N reviews, cuts them into the scorer's token-budget batches, and per batch runs, in
turns (so a busy machine slows them alike): the capture forward every attention method reads
(``forward_with_attention``), the same forward with the norm-based attention that ``norm``
and ``norm_rollout`` read (``norms=True``), and with GlobEnc's norms that ``globenc`` reads
(``globenc=True``). Prints each one's seconds per review (best of ``--repeats``) and its ratio
to the plain capture forward, on the per-document path a CPU takes and on the batched path a
GPU takes.
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
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a scoring actor uses cpus_per_actor)")
    parser.add_argument("--token-budget", type=int, default=8192)
    args = parser.parse_args()

    import torch

    from xai_ray.data.corpus import read_corpus
    from xai_ray.model.batching import token_budget_batches
    from xai_ray.model.capture import forward_with_attention
    from xai_ray.model.loading import load_model

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    tokenizer.padding_side = "right"
    texts = read_corpus(args.data, limit=args.n, seed=0).text.tolist()
    lengths = [len(x) for x in tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]]
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
    extras = {"": {}, ", with norms": {"norms": True}, ", with globenc": {"globenc": True}}
    passes = {
        f"{path}{extra}": (path, path == "batched", asked)
        for path in ("per-document", "batched")
        for extra, asked in extras.items()
    }
    seconds = {name: [] for name in passes}
    for _ in range(args.repeats):
        spent = dict.fromkeys(passes, 0.0)
        for encoding in batches:
            for name, (_, batched, asked) in passes.items():
                started = time.perf_counter()
                forward_with_attention(model, encoding, batched=batched, **asked)
                spent[name] += time.perf_counter() - started
        for name in passes:
            seconds[name].append(spent[name])
    print(
        f"model {args.model}, {args.n} IMDB reviews, max_length {args.max_length} (mean {np.mean(lengths):.0f} "
        f"tokens), {args.threads} torch thread(s), CPU; best of {args.repeats}, turns per batch"
    )
    print("| capture forward | ms per review | x the same path without norms |")
    print("|---|---:|---:|")
    for name, times in seconds.items():
        plain = min(seconds[passes[name][0]])  # the same path, nothing extra
        print(f"| {name} | {1000 * min(times) / args.n:.1f} | {min(times) / plain:.2f} |")


if __name__ == "__main__":
    main()
