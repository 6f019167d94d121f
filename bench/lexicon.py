"""Do a store's top words read as sentiment? For each method and layer of a run, the top-k words
per predicted class (``xai-ray topk --by pred``, the lists users see) against the VADER lexicon
(Hutto & Gilbert 2014, the ``vaderSentiment`` package: valences from -4 to +4):

    evaluative   share of the top words whose |valence| >= --strong (default 1.5)
    polarity     mean valence of the top words (0 for a word the lexicon lacks), per class
    leans        whether the lists lean the wrong way: a negative mean for the positive class
                 or a positive one for the negative class
    lean         the run's own view of the same lists, no lexicon (``query.lean``): the mean
                 smoothed log odds ratio of a top word's document frequency in reviews predicted
                 as the class against the others, per class; "data leans against" when one is < 0

Usage: python bench/lexicon.py STORE [--run RUN_ID] [--k 30] [--layers last|all] [--strong 1.5] [--min-docs N]
Install the lexicon with ``pip install '.[bench]'``. Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from xai_ray.query.connection import QueryError, open_store, pick_run
from xai_ray.query.lean import topk_lean
from xai_ray.query.top_words import topk


def lexicon() -> dict[str, float]:
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    except ImportError:
        sys.exit("bench/lexicon.py needs the VADER lexicon: pip install vaderSentiment (or '.[bench]')")
    return {word.lower(): float(value) for word, value in SentimentIntensityAnalyzer().lexicon.items()}


def measure(words: pd.DataFrame, valence: dict[str, float], strong: float) -> dict:
    """One top-k list -> evaluative share and mean polarity."""
    values = [valence.get(str(w).lower(), 0.0) for w in words["word"]]
    n = len(values)
    return {
        "words": n,
        "evaluative": sum(abs(v) >= strong for v in values) / n if n else float("nan"),
        "polarity": sum(values) / n if n else float("nan"),
    }


def rows_of(con, run: dict, k: int, layers: str, valence: dict, strong: float, min_docs=None) -> list[dict]:
    out = []
    n_layers = int(run["n_layers"])
    for method in run["methods"].split(","):
        for layer in range(1, n_layers + 1) if layers == "all" else [n_layers]:
            try:
                top = topk(
                    con,
                    run_id=run["run_id"],
                    method=method,
                    layer=layer,
                    k=k,
                    by="pred",
                    exclude="punct,stop",
                    min_docs=min_docs,
                )
            except QueryError:  # a method without this layer (start_layer, token attributions)
                continue
            if top.empty:
                continue
            row = {"method": method, "layer": layer}
            everything = measure(top, valence, strong)
            row["evaluative"] = everything["evaluative"]
            for group, words in top.groupby("group"):
                found = measure(words, valence, strong)
                row[f"polarity pred={group}"] = found["polarity"]
            negative, positive = row.get("polarity pred=0"), row.get("polarity pred=1")
            row["VADER leans against"] = bool(
                (positive is not None and positive < 0) or (negative is not None and negative > 0)
            )
            # the same lists (same ranking, k, support and word classes), read by the run's own data
            lean = topk_lean(con, run["run_id"], method, layer, k, exclude="punct,stop", min_docs=min_docs)
            for found in lean.itertuples():
                row[f"lean pred={found.pred}"] = float(found.mean_lean)
            row["data leans against"] = bool(lean["flagged"].any())
            out.append(row)
    return out


def markdown(table: pd.DataFrame) -> str:
    def cell(value) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + " --- |" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--run", default=None)
    parser.add_argument("--k", type=int, default=30)
    parser.add_argument("--layers", choices=("last", "all"), default="last")
    parser.add_argument("--strong", type=float, default=1.5)
    parser.add_argument("--min-docs", type=int, default=None, help="as xai-ray topk (default: the run's)")
    args = parser.parse_args(argv)
    valence = lexicon()
    con = open_store(args.store)
    run = pick_run(con, args.run)
    table = pd.DataFrame(rows_of(con, run, args.k, args.layers, valence, args.strong, args.min_docs))
    print(f"run {run['run_id']}: top {args.k} words per predicted class, VADER |valence| >= {args.strong}\n")
    print(markdown(table) if not table.empty else "(no top-k lists)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
