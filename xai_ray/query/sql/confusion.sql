-- Confusion counts of one run: true label x predicted class.
-- Parameters: $run_id.
with final as (
    select label, pred, count(*) as documents
    from docs
    where run_id = $run_id and label is not null
    group by label, pred
)

select * from final
order by label, pred
