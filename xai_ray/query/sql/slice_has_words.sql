-- Whether a run holds any word of one method and layer (a layout-1 run's manifest lists no
-- slices, and a method may leave layers out): one row read at most. Parameters: $run_id, $method, $layer.
with final as (
    select count(*) > 0 as found
    from (
        select 1
        from words
        where run_id = $run_id and method = $method and layer = $layer
        limit 1
    )
)

select * from final
