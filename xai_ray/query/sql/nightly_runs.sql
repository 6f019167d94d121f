-- The published runs whose id starts with $prefix (the nightly job's), with their manifests.
-- Parameters: $prefix.
with nightly as (
    select run_id, manifest
    from runs
    where starts_with(run_id, $prefix)
),

final as (
    select * from nightly
)

select * from final
order by run_id
