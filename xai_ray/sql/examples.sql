-- Example reviews for the per-layer charts: per true label, the shortest correct and the
-- shortest wrong prediction among reviews with at least $min_tokens tokens.
-- Parameters: $run_id, $min_tokens.
with candidates as (
    select
        doc_id,
        label,
        pred,
        prob_pos,
        n_tokens,
        label = pred as correct,
        row_number() over (partition by label, label = pred order by n_tokens, doc_id) as pick
    from docs
    where run_id = $run_id and label is not null and n_tokens >= $min_tokens
),

final as (
    select doc_id, label, pred, prob_pos, n_tokens, correct
    from candidates
    where pick = 1
)

select * from final
order by label desc, correct desc
