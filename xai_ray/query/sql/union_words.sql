-- words of several runs seen as one run: only the rows of each document's version in docs.
with parts as (
    -- every run's rows, whatever its store layout (query.views)
    @parts@
),

final as (
    select
        parts.* replace (getvariable('union_label') as run_id),
        parts.run_id as source_run_id
    from parts
    semi join docs on parts.doc_id = docs.doc_id and parts.run_id = docs.source_run_id
)

select * from final
