-- Whether the aggregate stage kept word totals for this run. Parameters: $run_id.
with final as (
    select count(*) > 0 as found from (select 1 from word_totals where run_id = $run_id limit 1)
)

select * from final
