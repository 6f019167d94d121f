-- docs of several runs seen as one run named getvariable('union_label'): each document once, in
-- its latest version (runs ranked by their order in getvariable('union_runs')); the run that
-- scored it is kept in source_run_id.
with parts as (
    select *
    from read_parquet(
        getvariable('files_docs'),
        hive_partitioning = true,
        union_by_name = true,  -- runs written before target/ig_delta/ig_completeness_error existed read them as null
        hive_types = {'run_id': VARCHAR}
    )
),

ranked as (
    select
        *,
        row_number() over (
            partition by doc_id order by list_position(getvariable('union_runs'), run_id) desc
        ) as version_rank
    from parts
),

final as (
    select
        * exclude (version_rank) replace (getvariable('union_label') as run_id),
        run_id as source_run_id
    from ranked
    where version_rank = 1
)

select * from final
