-- Every published run, oldest first.
with final as (
    select * from runs
)

select * from final order by created_at
