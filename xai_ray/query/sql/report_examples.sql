-- Example reviews for the per-layer charts and highlighted text: per true label, one correct
-- and one wrong prediction among reviews with at least $min_tokens tokens, picked by $pick:
-- 'shortest' (fewest tokens: charts stay readable) or 'confident' (the highest probability of
-- the predicted class, any number of classes: the model's surest calls, right and wrong).
-- Ties go to the smaller doc_id.
-- Parameters: $run_id, $min_tokens, $pick ('shortest' | 'confident').
with candidates as (
    select
        doc_id,
        label,
        pred,
        probs[pred + 1] as confidence,
        n_tokens,
        truncated,
        text,
        label = pred as correct,
        row_number() over (
            partition by label, label = pred
            order by case $pick when 'confident' then -probs[pred + 1] else n_tokens end, doc_id
        ) as pick
    from docs
    where run_id = $run_id and label is not null and n_tokens >= $min_tokens
),

final as (
    select doc_id, label, pred, confidence, n_tokens, truncated, text, correct
    from candidates
    where pick = 1
)

select * from final
order by label desc, correct desc
