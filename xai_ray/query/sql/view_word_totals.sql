-- word_totals: the aggregate stage's per-word sums of each run (query.keep_word_totals), topk's fast path.
select *
from read_parquet(
    getvariable('files_word_totals'),
    hive_partitioning = true,
    hive_types = {'run_id': VARCHAR}
)
