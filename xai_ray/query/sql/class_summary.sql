-- One run's classes, one row per class index of the model's output: the mean probability the
-- model gives it over all scored documents, and how many documents are predicted as it,
-- labelled as it, and both (so precision and recall of every class follow).
-- Parameters: $run_id.
with per_class as (
    select
        unnest(generate_series(0, len(probs) - 1)) as class,
        unnest(probs) as prob,
        label,
        pred
    from docs
    where run_id = $run_id
),

final as (
    select
        class,
        avg(prob) as mean_prob,
        count(*) filter (where pred = class) as predicted,
        count(*) filter (where label = class) as labelled,
        count(*) filter (where label = class and pred = class) as correct
    from per_class
    group by class
)

select * from final
order by class
