-- faithfulness: one row per run, document, method, layer and metric (runs made with --evaluate).
-- layer is null for the baselines (input_x_gradient, random); value is null where the metric is
-- undefined (a rank correlation over a constant ranking). Metric definitions: xai_ray/faithfulness.py.
select *
from read_parquet(getvariable('files_faithfulness'), hive_partitioning = true, hive_types = {'run_id': VARCHAR})
