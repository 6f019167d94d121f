-- Whether the connection has a view or table of this name (sections of later features). Parameters: $relation.
with relations as (
    select view_name as name from duckdb_views()
    union all
    select table_name as name from duckdb_tables()
),

final as (
    select count(*) > 0 as found from relations where name = $relation
)

select * from final
