-- errors of several runs seen as one run: a document's latest error, kept only when no run at
-- least as recent scored it (a later success supersedes an earlier failure).
with parts as (
    select *
    from read_parquet(getvariable('files_errors'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
),

ranked as (
    select
        *,
        list_position(getvariable('union_runs'), run_id) as run_rank,
        row_number() over (
            partition by doc_id order by list_position(getvariable('union_runs'), run_id) desc
        ) as version_rank
    from parts
),

final as (
    select
        ranked.* exclude (version_rank, run_rank) replace (getvariable('union_label') as run_id),
        ranked.run_id as source_run_id
    from ranked
    where
        version_rank = 1
        and not exists (
            select 1
            from docs
            where
                docs.doc_id = ranked.doc_id
                and list_position(getvariable('union_runs'), docs.source_run_id) >= ranked.run_rank
        )
)

select * from final
