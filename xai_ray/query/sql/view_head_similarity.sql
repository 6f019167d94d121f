-- head_similarity: one row per run and ordered pair of heads: the mean Jensen-Shannon divergence
-- (nats) between their attention rows over the run's sample of reviews.
select *
from read_parquet(getvariable('files_head_similarity'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
