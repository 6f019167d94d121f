-- The run's per-head statistics, one row per layer x head (report section "heads").
with final as (
    select layer, head, entropy, entropy_norm, cls_entropy, to_cls, to_sep, to_punct, to_self, to_prev, to_next,
           n_docs, n_rows
    from heads
    where run_id = $run_id
)
select * from final order by layer, head
