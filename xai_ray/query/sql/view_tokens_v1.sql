-- tokens of runs in store layout 1 (one file per method and layer): one row per run, document, method, layer and token position.
-- The columns are named, in the order every layout's select gives them.
with final as (
    select doc_id, position, token, word_id, score, layer, method, run_id
    from read_parquet(
        getvariable('files_tokens'),
        hive_partitioning = true,
        hive_types = {'run_id': VARCHAR, 'method': VARCHAR, 'layer': INTEGER}
    )
)

select * from final
