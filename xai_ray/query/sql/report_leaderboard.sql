-- The faithfulness leaderboard of one run: every method of its faithfulness table, ranked by
-- the mean over documents of $metric (higher = more faithful, e.g. comprehensiveness_aopc).
-- A method with layers gets two rows, its best layer (highest mean; chosen on these same
-- documents, so its mean is optimistic) and its last layer, or one row when they are the same
-- layer; a method without layers (the baselines) one row. Any method name is taken as it comes.
-- A run explaining another class than the prediction (target label or a class) has two
-- input_x_gradient rows: its stored one, at its layer, and the evaluation's baseline of the
-- predicted class, without a layer, which says so.
-- sd is the sample standard deviation of the per-document values (null below two documents),
-- which the report turns into the interval of every table (query.intervals: a 95% t interval).
-- gain is the paired difference from the floor method $floor on the same documents (gain_sd its
-- standard deviation): whether a method beats the floor is read from its interval, not from two
-- overlapping intervals.
-- Parameters: $run_id, $metric, $floor.
with metric_values as (
    select method, layer, doc_id, value
    from faithfulness
    where run_id = $run_id and metric = $metric and value is not null
        -- NaN ranked above every number (no writer stores one: a file edited by hand). Read as
        -- text: a Parquet footer's statistics leave NaN out, and DuckDB folds isnan(value) to false
        and cast(value as varchar) not in ('nan', '-nan')
),

floor_values as (
    select doc_id, value as floor_value
    from metric_values
    where method = $floor
),

per_slice as (
    select
        metric_values.method,
        metric_values.layer,
        count(*) as n_docs,
        avg(metric_values.value) as mean,
        stddev_samp(metric_values.value) as sd,
        count(floor_values.floor_value) as n_paired,
        avg(metric_values.value - floor_values.floor_value) as gain,
        stddev_samp(metric_values.value - floor_values.floor_value) as gain_sd
    from metric_values
    left join floor_values on metric_values.doc_id = floor_values.doc_id
    group by metric_values.method, metric_values.layer
),

placed as (
    select
        *,
        row_number() over (partition by method, layer is null order by mean desc, layer) = 1 as is_best,
        layer = max(layer) over (partition by method) as is_last,
        count(layer) over (partition by method) > 0 as has_layers
    from per_slice
),

chosen as (
    select
        *,
        case
            -- the evaluation's input x gradient of the predicted class, beside the run's own of another class
            when layer is null and has_layers then 'baseline: predicted class'
            when layer is null then 'no layers'
            when is_best and is_last then 'best and last layer'
            when is_best then 'best layer'
            else 'last layer'
        end as which
    from placed
    where layer is null or is_best or is_last
),

final as (
    select
        cast(row_number() over (order by mean desc, method, layer) as integer) as rank,
        method,
        layer,
        which,
        mean,
        sd,
        n_docs,
        method = $floor as is_floor,
        case when method <> $floor then gain end as gain,
        case when method <> $floor then gain_sd end as gain_sd,
        n_paired
    from chosen
)

select * from final
order by rank
