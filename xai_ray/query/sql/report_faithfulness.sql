-- Faithfulness values of one run, one row per document, method, layer and metric: what the
-- report summarizes per method, layer and metric (query.intervals.faithfulness_summary: the mean
-- and its 95% t interval over documents). Undefined values (null) are left out. Parameters: $run_id.
with final as (
    select method, layer, metric, doc_id, value
    from faithfulness
    where run_id = $run_id and value is not null
)

select * from final
