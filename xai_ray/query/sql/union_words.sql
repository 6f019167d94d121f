-- words of several runs seen as one run: only the rows of each document's version in docs.
with parts as (
    select *
    from read_parquet(
        getvariable('files_words'),
        hive_partitioning = true,
        union_by_name = true,  -- runs written before lift/span_id/joined existed read them as null
        hive_types = {'run_id': VARCHAR, 'method': VARCHAR, 'layer': INTEGER}
    )
),

final as (
    select
        parts.* replace (getvariable('union_label') as run_id),
        parts.run_id as source_run_id
    from parts
    semi join docs on parts.doc_id = docs.doc_id and parts.run_id = docs.source_run_id
)

select * from final
