-- heads: one row per run, layer and head: mean attention statistics (entropy in nats over all rows
-- and the [CLS] row; mass on [CLS], [SEP], punctuation, the same, previous and next token) over the
-- run's heads_docs sample of reviews (every review of a smaller run), with the documents and rows
-- behind them.
select *
from read_parquet(getvariable('files_heads'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
