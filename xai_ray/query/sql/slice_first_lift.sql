-- The lift of one word of a run's slice (null in the first versions' layout-1 runs, which stored
-- none): one row read, not the slice. Parameters: $run_id, $method, $layer.
with final as (
    select lift
    from words
    where run_id = $run_id and method = $method and layer = $layer
    limit 1
)

select * from final
