-- docs: one row per scored document of every published run.
select *
from read_parquet(
    getvariable('files_docs'),
    hive_partitioning = true,
    union_by_name = true,  -- runs written before target/ig_delta/ig_completeness_error existed read them as null
    hive_types = {'run_id': VARCHAR}
)
