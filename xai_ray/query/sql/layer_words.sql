-- Per-layer word scores of one document for every method: the data behind layer x word charts.
-- Parameters: $run_id, $doc_id.
with final as (
    select method, layer, word_id, word, score
    from words
    where run_id = $run_id and doc_id = $doc_id
)

select * from final
order by method, layer, word_id
