"""The top words of a run under the old statistic and the new one, side by side (README table).

Old: the report's earlier headline: mean share (`words.score`) over occurrences, words
seen at least min(max(n/20, 2), 20) times, punctuation counted as words, contractions split.
New: `xai_ray.query.top_words.topk` with its defaults (lift per review, then the mean over reviews, the
default minimum documents, 95% t interval) and punctuation left out, as the report draws it.
Prints a Markdown table and a few facts about what changed.
Usage: python bench/topk_old_new.py --store DIR [--run ID] [--method rollout] [--k 20]
"""

from __future__ import annotations

import argparse

from xai_ray.query.connection import open_store, pick_run
from xai_ray.query.top_words import topk
from xai_ray.query.wordstats import default_min_docs

OLD = """
with per_word as (
    select lower(word) as word, avg(score) as mean_score, count(*) as occurrences,
           count(distinct doc_id) as documents, avg(n_words) as mean_length
    from words join docs using (run_id, doc_id)
    where run_id = $run_id and method = $method and layer = $layer
    group by lower(word) having count(*) >= $min_count
)
select row_number() over (order by mean_score desc, word) as rank, * from per_word
order by mean_score desc, word limit $k
"""

MEAN_LENGTH = """
select avg(n_words) as mean_length from docs where run_id = $run_id
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True)
    parser.add_argument("--run", dest="run_id")
    parser.add_argument("--method", default="rollout")
    parser.add_argument("--k", type=int, default=20)
    args = parser.parse_args()
    con = open_store(args.store)
    run = pick_run(con, args.run_id)
    n_docs, layer = int(run["n_docs"]), int(run["n_layers"])
    min_count = int(min(max(n_docs // 20, 2), 20))
    old = con.execute(
        OLD, {"run_id": run["run_id"], "method": args.method, "layer": layer, "min_count": min_count, "k": args.k}
    ).df()
    new = topk(con, run["run_id"], args.method, layer, args.k, exclude="punct")
    words = con.execute(
        "select lower(coalesce(joined, word)) as word, doc_id from words "
        "where run_id = $run_id and method = $method and layer = $layer",
        {"run_id": run["run_id"], "method": args.method, "layer": layer},
    ).df()
    lengths = con.execute("select doc_id, n_words from docs where run_id = $run_id", {"run_id": run["run_id"]}).df()
    length_of = words.drop_duplicates().merge(lengths, on="doc_id").groupby("word").n_words.mean()
    corpus_length = con.execute(MEAN_LENGTH, {"run_id": run["run_id"]}).fetchone()[0]

    print(
        f"run {run['run_id']}: {n_docs} reviews, {args.method}, layer {layer}; mean review length "
        f"{corpus_length:.0f} words"
    )
    print(f"old: mean share over occurrences, >= {min_count} occurrences, punctuation kept")
    print(
        f"new: mean lift per review, >= {default_min_docs(n_docs)} reviews (the default), punctuation left out, "
        "95% t interval\n"
    )
    print(
        "| rank | old: word | mean share | occ. | docs | mean length | new: word | mean lift [95% CI] "
        "| docs | mean length |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
    for i in range(args.k):
        o = old.iloc[i] if i < len(old) else None
        n = new.iloc[i] if i < len(new) else None
        left = (
            f"`{o.word}` | {o.mean_score:.4f} | {o.occurrences} | {o.documents} | {o.mean_length:.0f}"
            if o is not None
            else " | | | | "
        )
        right = (
            f"`{n.word}` | {n.mean_score:.2f} [{n.ci_low:.2f}, {n.ci_high:.2f}] | {n.documents} | "
            f"{length_of.get(n.word, float('nan')):.0f}"
            if n is not None
            else " | | | "
        )
        print(f"| {i + 1} | {left} | {right} |")
    both = set(old.word) & set(new.word)
    punct = [w for w in old.word if not any(ch.isalnum() for ch in w)]
    print(
        f"\nin both top {args.k}: {len(both)} ({', '.join(sorted(both)) or 'none'}); punctuation in the old "
        f"top {args.k}: {len(punct)} ({' '.join(punct)}); mean review length of the old top {args.k}'s reviews "
        f"{old.mean_length.mean():.0f} vs the new top {args.k}'s "
        f"{length_of.reindex(new.word).mean():.0f} (corpus {corpus_length:.0f})"
    )
    # rank i + 1's interval reaches rank i's: the data do not tell their order apart
    overlap = sum(1 for high, low in zip(new.ci_high.iloc[1:], new.ci_low.iloc[:-1]) if high >= low)
    print(f"adjacent new ranks whose 95% intervals overlap: {overlap} of {max(len(new) - 1, 0)}")


if __name__ == "__main__":
    main()
