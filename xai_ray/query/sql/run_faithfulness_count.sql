-- How many faithfulness rows a run holds (0: not evaluated yet). Parameters: $run_id.
with final as (
    select count(*) as n_rows from faithfulness where run_id = $run_id
)

select * from final
