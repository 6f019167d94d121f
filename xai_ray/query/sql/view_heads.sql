-- heads: one row per run, layer and head: mean attention statistics over every scored review
-- (entropy in nats over all rows and the [CLS] row; mass on [CLS], [SEP], punctuation, the same,
-- previous and next token) with the documents and rows behind them.
select *
from read_parquet(getvariable('files_heads'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
