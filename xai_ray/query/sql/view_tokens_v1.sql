-- tokens of runs in store layout 1 (one file per method and layer): one row per run, document, method, layer and token position.
select *
from read_parquet(
    getvariable('files_tokens'),
    hive_partitioning = true,
    hive_types = {'run_id': VARCHAR, 'method': VARCHAR, 'layer': INTEGER}
)
