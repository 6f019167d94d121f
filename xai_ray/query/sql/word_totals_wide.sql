-- word_totals.sql for a run in store layout 3, several slices (method x layer) in one scan of the
-- run's parts: each word's key is made once instead of once per slice, and every slice's
-- per-document sums are columns of one group. The same rows as word_totals.sql slice by slice
-- (tests/test_store_layouts.py); a document counts in a slice where its part holds the slice (a
-- divisor), as the words view reads it.
-- query.word_totals repeats each block between "each slice" and "end" once per slice of the scan
-- (so no comment may end a block's last line), filling in @i@ (its position), @method@ and @layer@
-- (checked against schemas.SLICE), @slice@ and @share@ (its share on a word's row: raw score /
-- divisor, or the share a part kept).
-- Parameters: $run_id, $files (the run's parts).
with word_rows as (
    select
        doc_id,
        word_key(joined, word) as word,
        unit_weight,
        -- each slice, joined by commas:
        @share@ as share_@i@,
        case
            when "divisor:@slice@" is not null then cast(word_id = coalesce(span_id, word_id) as integer)
        end as occurrence_@i@
        -- end
    from read_parquet($files, hive_partitioning = false, union_by_name = true)
    where span_id is not null  -- a word's row
),

-- a word's mean lift and share over its occurrences in a document
per_doc as (
    select
        doc_id,
        word,
        -- each slice, joined by commas:
        sum(occurrence_@i@) as occurrences_@i@,
        sum(cast(cast(share_@i@ as double) * unit_weight as float)) / sum(occurrence_@i@) as lift_@i@,
        sum(share_@i@) / sum(occurrence_@i@) as share_@i@
        -- end
    from word_rows
    group by doc_id, word
),

-- the documents holding a word in a slice are those with its occurrences there
per_class as (
    select
        docs.pred,
        per_doc.word,
        -- each slice, joined by commas:
        sum(per_doc.lift_@i@) as total_lift_@i@,
        sum(per_doc.lift_@i@ * per_doc.lift_@i@) as squares_lift_@i@,
        sum(per_doc.share_@i@) as total_share_@i@,
        sum(per_doc.share_@i@ * per_doc.share_@i@) as squares_share_@i@,
        sum(per_doc.occurrences_@i@) as occurrences_@i@,
        count(per_doc.occurrences_@i@) as documents_@i@
        -- end
    from per_doc
    inner join docs on per_doc.doc_id = docs.doc_id and docs.run_id = $run_id
    group by docs.pred, per_doc.word
),

final as (
    -- each slice, joined by union all:
    select
        '@method@' as method,
        cast(@layer@ as integer) as layer,
        pred,
        word,
        total_lift_@i@ as total_lift,
        squares_lift_@i@ as squares_lift,
        total_share_@i@ as total_share,
        squares_share_@i@ as squares_share,
        cast(occurrences_@i@ as bigint) as occurrences,
        documents_@i@ as documents
    from per_class
    where documents_@i@ > 0
    -- end
)

select * from final
