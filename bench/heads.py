"""What do the per-head statistics cost the scoring stage?

    python bench/heads.py MODEL DATA N [--max-length 128] [--repeats 3]

Scores the same N reviews with the scoring stage (xai_ray.scoring.actor.Scorer, raw + rollout) with
heads off, heads on (statistics of every review), heads on with statistics on 1 review in 8 (a
run's ``heads_docs`` sample, chosen by ``data.head_docs``), and heads on with every review in the
head-similarity sample (the worst case of the Jensen-Shannon pass), alternating the variants ``--repeats``
times in one process so a busy machine slows them alike; prints the best docs/s of each and
the overhead relative to heads off. Then the Jensen-Shannon pass alone on one review's kept rows
(every head of every layer x ``heads_sample_rows`` rows x the review's length): the previous
pairwise form (kept below as code) against ``jsd_sums``, alternated, best of ``--repeats``, and
their largest difference. Last, each row's log Z (for the entropy), on every layer's attention of the
first 16 reviews: two max-reductions over the block (the previous form, kept below) against
``row_log_z`` (the [CLS] key's probability), alternated, best of ``--repeats``; with the share of
rows whose [CLS] probability is too faint to use.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

TINY = 1e-30


def jsd_sums_pairwise(heads: torch.Tensor) -> torch.Tensor:
    """The previous ``jsd_sums``: each pair's mixture formed, floored and its entropy taken directly."""
    heads = heads.float()
    count = heads.shape[0]
    entropy = -(heads * heads.clamp_min(TINY).log()).sum(dim=-1)  # (P, R)
    out = torch.zeros(count, count, dtype=torch.float64)
    for i in range(count - 1):
        mixed = (heads[i : i + 1] + heads[i + 1 :]) / 2  # (P-i-1, R, m)
        mixed_entropy = -(mixed * mixed.clamp_min(TINY).log()).sum(dim=-1)  # (P-i-1, R)
        row = (mixed_entropy - (entropy[i : i + 1] + entropy[i + 1 :]) / 2).clamp_min(0).sum(dim=1).double()
        out[i, i + 1 :] = row
        out[i + 1 :, i] = row
    return out


def log_z_two_max(probs: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The previous log Z of each row: the largest score less the log of the largest probability."""
    return scores.amax(dim=-1) - probs.amax(dim=-1).log()


def time_log_z(model_name: str, texts, max_length: int, repeats: int) -> None:
    """Both forms of each row's log Z on real attention (scores: log p plus a random offset per row)."""
    from xai_ray.methods.heads import FAINT, row_log_z
    from xai_ray.model.loading import load_model

    loaded = load_model(model_name, attn_implementation="eager")
    generator = torch.Generator().manual_seed(0)
    blocks = []
    for text in texts:
        encoded = loaded.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.inference_mode():
            attention = loaded.model(**encoded, output_attentions=True).attentions
        for layer in attention:
            probs = layer[0].float()  # (H, n, n)
            offset = torch.randn(*probs.shape[:2], 1, generator=generator) * 5  # (H, n, 1)
            blocks.append((probs, probs.clamp_min(1e-38).log() + offset))
    faint = sum(int((p[..., 0] < FAINT).sum()) for p, _ in blocks) / sum(p[..., 0].numel() for p, _ in blocks)
    best = {"two max-reductions (before)": float("inf"), "row_log_z (now)": float("inf")}
    for _ in range(repeats):
        for name, form in zip(best, (log_z_two_max, row_log_z)):
            started = time.perf_counter()
            for probs, scores in blocks:
                form(probs, scores)
            best[name] = min(best[name], time.perf_counter() - started)
    gap = max((log_z_two_max(p, s) - row_log_z(p, s)).abs().max().item() for p, s in blocks)
    print(f"log Z of {len(blocks)} layers' rows: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in best.items()))
    print(
        f"log Z: before/now {best['two max-reductions (before)'] / best['row_log_z (now)']:.2f}x; "
        f"faint [CLS] rows {faint:.1%}; largest difference {gap:.1e} nats"
    )


def time_jsd(model_name: str, text: str, max_length: int, rows: int, repeats: int) -> None:
    """Both forms of the Jensen-Shannon pass on one review's kept rows, alternated."""
    from xai_ray.methods.heads import jsd_sums
    from xai_ray.model.loading import load_model

    loaded = load_model(model_name, attn_implementation="eager")
    encoded = loaded.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        attention = loaded.model(**encoded, output_attentions=True).attentions
    heads = torch.cat([layer[0, :, :rows].float() for layer in attention])  # (L*H, R, n)
    best = {"pairwise (before)": float("inf"), "jsd_sums (now)": float("inf")}
    results = {}
    for _ in range(repeats):
        for name, form in (("pairwise (before)", jsd_sums_pairwise), ("jsd_sums (now)", jsd_sums)):
            started = time.perf_counter()
            got = form(heads)
            best[name] = min(best[name], time.perf_counter() - started)
            results[name] = got
    gap = (results["pairwise (before)"] - results["jsd_sums (now)"]).abs().max().item()
    shape = "x".join(str(x) for x in heads.shape)
    print(f"jsd of one review's kept rows ({shape}): " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in best.items()))
    print(
        f"jsd: before/now {best['pairwise (before)'] / best['jsd_sums (now)']:.2f}x; largest difference {gap:.1e} nats"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("n", type=int)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from xai_ray.config import RunConfig
    from xai_ray.data.corpus import read_corpus
    from xai_ray.data.head_docs import head_docs
    from xai_ray.scoring.actor import Scorer

    corpus = read_corpus(args.data, limit=args.n, seed=0)
    base = {"model": args.model, "max_length": args.max_length, "methods": ["raw", "rollout"], "cpus_per_actor": 1}
    # the run's choice of 1 review in 8, by rank in the corpus (none compared: statistics alone)
    eighth = head_docs(len(corpus), RunConfig(heads_docs=max(1, len(corpus) // 8), heads_sample=0))
    counted = eighth.marks(np.arange(len(corpus)))["heads_stats"]
    every = np.ones(len(corpus), dtype=bool)
    on = Scorer({**base, "heads": True})
    variants = {  # name: (scorer, every review compared, reviews with statistics)
        "heads off": (Scorer({**base, "heads": False}), False, every),
        "heads on": (on, False, every),
        "heads on, stats 1 in 8": (on, False, counted),
        "heads on, all sampled": (Scorer({**base, "heads": True, "heads_sample_rows": args.max_length}), True, every),
    }
    seconds = {name: [] for name in variants}
    for _ in range(args.repeats):
        spent = dict.fromkeys(variants, 0.0)
        # Variants take turns batch by batch, so a machine whose load drifts slows them alike
        for start in range(0, len(corpus), 64):  # the pipeline's batch_size
            for name, (scorer, sampled, stats) in variants.items():
                part = corpus.iloc[start : start + 64]
                batch = {
                    "doc_id": part.doc_id.values,
                    "text": part.text.values,
                    "label": part.label.values,
                    "heads_sample": np.full(len(part), sampled),
                    "heads_stats": stats[start : start + 64],
                }
                started = time.perf_counter()
                scorer(batch)
                spent[name] += time.perf_counter() - started
        for name in variants:
            seconds[name].append(spent[name])
    off = min(seconds["heads off"])
    for name, times in seconds.items():
        best = min(times)
        print(
            f"{name:24s} {len(corpus) / best:8.1f} docs/s  best {best:7.2f} s  "
            f"({(best / off - 1) * 100:+.1f}% vs heads off; runs {', '.join(f'{t:.2f}' for t in times)})"
        )
    torch.set_num_threads(1)  # one thread, as a CPU actor runs
    longest = max(corpus.text.values, key=len)
    time_jsd(args.model, longest, args.max_length, variants["heads on"][0].config.run.heads_sample_rows, args.repeats)
    time_log_z(args.model, list(corpus.text.values[:16]), args.max_length, args.repeats)


if __name__ == "__main__":
    main()
