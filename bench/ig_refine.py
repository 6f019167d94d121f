"""Does refining integrated gradients' path where it misses buy completeness, and at what cost?

    python bench/ig_refine.py [--model minilm] [--fit-head 300] [--data IMDB] [--n 48] [--max-length 128]

On N IMDB reviews (a seeded sample, cut at ``--max-length``, predicted class explained), in
batches of 8, integrated gradients two ways in turn, one thread: ``ig_steps`` Gauss-Legendre nodes
over the whole path (``ig_tolerance`` 0, the path before refinement existed) and the path refined
where a review's attributions miss f(input) - f(baseline) by more than ``--tolerance`` (the
default, 0.01). Prints, per way, the completeness error |sum of attributions - (f(x) - f(0))|
(median, 90th percentile, largest, the share of reviews within the tolerance), the median |f(x) -
f(0)|, CPU seconds per review and their ratio.

Refining matters where the model's path is sharp: the packaged MiniLM's untrained head is nearly
flat along it. ``--fit-head N`` (the default, 300) gives the model a trained head first, in this
process: a logistic regression (``--head-l2``, default 1e-5; full-batch L-BFGS) of the labels of N other IMDB reviews
(the sample's next N rows) on the pooled output, written as the two-class head's logits
(-z/2, +z/2); ``--fit-head 0`` keeps the model's own head (a fine-tuned folder:
``xai-ray finetune --config jobs/finetune.yaml --out models/minilm-imdb``).
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
    parser.add_argument("--ig-steps", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--fit-head", type=int, default=300, help="reviews to fit a logistic head on; 0: keep it")
    parser.add_argument("--head-l2", type=float, default=1e-5, help="the fitted head's L2 penalty")
    args = parser.parse_args()

    import pyarrow.parquet as pq
    import torch

    from xai_ray.data.text import clean_text
    from xai_ray.methods.integrated_gradients import completeness_error
    from xai_ray.model.gradients import integrated_gradients
    from xai_ray.model.loading import load_model

    torch.set_num_threads(1)
    loaded = load_model(args.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    table = pq.read_table(args.data, columns=["text", "label"])
    rows = np.random.default_rng(0).permutation(table.num_rows)[: args.n + args.fit_head]  # the file is sorted by label
    table = table.take(rows)
    texts = [clean_text(t) for t in table.column("text").to_pylist()]
    if args.fit_head:
        labels = table.column("label").to_pylist()[args.n :]
        fit_head(model, tokenizer, texts[args.n :], labels, args.max_length, args.head_l2)
    texts = texts[: args.n]
    batches = []
    for start in range(0, len(texts), args.batch):
        tokenizer.padding_side = "right"
        encoded = tokenizer(
            texts[start : start + args.batch],
            padding=True,
            truncation=True,
            max_length=args.max_length,
            return_tensors="pt",
        )
        with torch.no_grad():
            predicted = model(**encoded).logits.argmax(dim=-1).tolist()
        batches.append((encoded["input_ids"], encoded["attention_mask"], predicted))

    ways = {"whole path": 0.0, f"refined at {args.tolerance:g}": args.tolerance}
    found = {way: {"errors": [], "gaps": [], "seconds": 0.0} for way in ways}
    for ids, mask, targets in batches:
        for way, tolerance in ways.items():  # in turn: a busy machine slows both alike
            started = time.process_time()
            scores, f_input, f_baseline = integrated_gradients(
                model, ids, mask, targets, args.ig_steps, rows_per_pass=64, tolerance=tolerance
            )
            found[way]["seconds"] += time.process_time() - started
            for b in range(len(targets)):
                found[way]["errors"].append(completeness_error(scores[b], f_input[b], f_baseline[b]))
                found[way]["gaps"].append(abs(f_input[b] - f_baseline[b]))

    print(f"{args.model}, {len(texts)} IMDB reviews at {args.max_length} tokens, {args.ig_steps} nodes, one thread")
    print(f"{'path':<22}{'median':>10}{'p90':>10}{'max':>10}{'within':>9}{'|f(x)-f(0)|':>13}{'s/review':>10}")
    for way, result in found.items():
        errors = np.asarray(result["errors"])
        within = float(np.mean(errors <= args.tolerance))
        print(
            f"{way:<22}{np.median(errors):>10.4f}{np.quantile(errors, 0.9):>10.4f}{errors.max():>10.4f}"
            f"{within:>9.0%}{np.median(result['gaps']):>13.3f}{result['seconds'] / len(texts):>10.3f}"
        )
    plain, refined = (found[way] for way in ways)
    print(
        f"ig_refine: p90 completeness error {np.quantile(plain['errors'], 0.9):.4f} -> "
        f"{np.quantile(refined['errors'], 0.9):.4f}; cost {refined['seconds'] / plain['seconds']:.2f}x"
    )


def fit_head(model, tokenizer, texts: list[str], labels: list[int], max_length: int, l2: float) -> None:
    """Give a two-class BERT classifier a trained head: logistic regression of ``labels`` on the
    pooled output of ``texts``, written as logits (-z/2, +z/2) so softmax gives its probability."""
    import torch

    tokenizer.padding_side = "right"
    pooled = []
    with torch.no_grad():
        for start in range(0, len(texts), 32):
            encoded = tokenizer(
                texts[start : start + 32], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            hidden = model.bert(encoded["input_ids"], encoded["attention_mask"])  # (b, n, hidden): a lean BERT
            pooled.append(model.bert.pooler(getattr(hidden, "last_hidden_state", hidden)))  # (b, hidden)
    x, y = torch.cat(pooled).double(), torch.tensor(labels, dtype=torch.float64)  # (N, hidden), (N,)
    w = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)  # weights, then the bias
    solver = torch.optim.LBFGS([w], max_iter=500, line_search_fn="strong_wolfe")

    def loss():
        solver.zero_grad()
        z = x @ w[:-1] + w[-1]  # (N,)
        value = torch.nn.functional.binary_cross_entropy_with_logits(z, y) + l2 * (w[:-1] ** 2).sum()
        value.backward()
        return value

    solver.step(loss)
    accuracy = float(((x @ w[:-1] + w[-1] > 0).double() == y).double().mean())
    print(f"fitted a logistic head on {len(texts)} reviews (training accuracy {accuracy:.2f})")
    head = model.classifier
    with torch.no_grad():
        head.weight.copy_(torch.stack([-w[:-1], w[:-1]]).float() / 2)
        head.bias.copy_(torch.stack([-w[-1], w[-1]]).float() / 2)


if __name__ == "__main__":
    main()
