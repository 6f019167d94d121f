-- docs: one row per scored document of every published run.
select *
from read_parquet(getvariable('files_docs'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
