-- words of runs in store layout 1 (one file per method and layer): one row per run, document, method, layer and word.
-- The columns are named, in the order every layout's select gives them: the first versions wrote
-- no lift, span_id or joined, and a union by name with a typed empty row reads them as null
-- where no file of the view has them (union_by_name alone leaves such a column out, and the
-- view's union of layouts would then fail on every query).
with scanned as (
    select *
    from read_parquet(
        getvariable('files_words'),
        hive_partitioning = true,
        union_by_name = true,  -- a file without lift/span_id/joined beside one with them: null there
        hive_types = {'run_id': VARCHAR, 'method': VARCHAR, 'layer': INTEGER}
    )
    union all by name
    select
        cast(null as float) as lift,
        cast(null as integer) as span_id,
        cast(null as varchar) as joined
    where false
),

final as (
    select doc_id, word_id, word, score, raw_score, lift, span_id, joined, layer, method, run_id
    from scanned
)

select * from final
