-- One stored review for `xai-ray explain --doc-id`: its text and what the run made of it.
-- Parameters: $run_id, $doc_id.
with final as (
    select doc_id, text, label, pred, prob_pos, n_tokens, truncated
    from docs
    where run_id = $run_id and doc_id = $doc_id
)
select * from final
