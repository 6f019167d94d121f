-- Mean Jensen-Shannon divergence between every ordered pair of the run's heads (the head map).
with final as (
    select layer_a, head_a, layer_b, head_b, jsd, n_docs, n_rows
    from head_similarity
    where run_id = $run_id
)
select * from final order by layer_a, head_a, layer_b, head_b
