-- errors: one row per document that could not be processed (doc id, stage, reason).
select *
from read_parquet(getvariable('files_errors'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
