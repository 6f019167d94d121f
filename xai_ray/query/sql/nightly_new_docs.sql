-- The documents one night scored, as they stand in the union of nightly runs: the "new
-- documents" of the since-last-night section. Parameters: $run_id (the union), $source_run_id.
with tonight as (
    select doc_id, label, pred, probs, n_tokens, text
    from docs
    where run_id = $run_id and source_run_id = $source_run_id
),

final as (
    select
        doc_id,
        label,
        pred,
        probs[pred + 1] as confidence,
        n_tokens,
        left(coalesce(text, ''), 200) as excerpt
    from tonight
)

select * from final
order by doc_id
