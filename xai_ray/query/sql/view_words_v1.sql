-- words of runs in store layout 1 (one file per method and layer): one row per run, document, method, layer and word.
select *
from read_parquet(
    getvariable('files_words'),
    hive_partitioning = true,
    union_by_name = true,  -- runs written before lift/span_id/joined existed read them as null
    hive_types = {'run_id': VARCHAR, 'method': VARCHAR, 'layer': INTEGER}
)
