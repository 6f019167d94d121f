-- One run's headline numbers: documents, accuracy, mean class probabilities, truncation, errors.
-- Parameters: $run_id.
with run_docs as (
    select * from docs where run_id = $run_id
),

run_errors as (
    -- documents the run could not score; an evaluation's or a rationale's error row is about a
    -- document that was scored (it is in docs), and the run's manifest counts them apart
    select count(*) as n_errors
    from errors
    where run_id = $run_id and stage not in ('evaluate', 'plausibility')
),

final as (
    select
        count(*) as n_docs,
        count(label) as n_labelled,
        avg(case when label is not null then cast(label = pred as double) end) as accuracy,
        avg(prob_pos) as mean_prob_pos,
        avg(1 - prob_pos) as mean_prob_neg,
        sum(cast(truncated as integer)) as n_truncated,
        avg(n_tokens) as mean_tokens,
        (select n_errors from run_errors) as n_errors
    from run_docs
)

select * from final
