-- Top-k words of one run for every method x layer x predicted-class slice, plus an 'all'
-- slice per method and layer: the data behind every top-k chart of the report in one scan.
-- Ranked by mean normalised score over occurrences (as topk.sql), words seen fewer than
-- $min_count times in a slice dropped. At most methods x layers x (classes + 1) x $k rows.
-- Parameters: $run_id, $min_count, $k.
with run_docs as (
    select doc_id, pred
    from docs
    where run_id = $run_id
),

-- Per document first: the join with docs then meets one row per distinct word, not per
-- occurrence, and documents are counted without a distinct aggregate.
per_doc as (
    select method, layer, doc_id, lower(word) as word, sum(score) as total_score, count(*) as occurrences
    from words
    where run_id = $run_id
    group by method, layer, doc_id, lower(word)
),

per_class as (
    select
        per_doc.method,
        per_doc.layer,
        run_docs.pred,
        per_doc.word,
        sum(per_doc.total_score) as total_score,
        sum(per_doc.occurrences) as occurrences,
        count(*) as documents
    from per_doc
    inner join run_docs on per_doc.doc_id = run_docs.doc_id
    group by per_doc.method, per_doc.layer, run_docs.pred, per_doc.word
),

-- A document has one predicted class, so the 'all' slice is a sum over the class slices
-- (documents included): no second pass over the occurrences.
slices as (
    select method, layer, cast(pred as varchar) as grp, word, total_score, occurrences, documents
    from per_class
    union all
    select method, layer, 'all' as grp, word, sum(total_score), sum(occurrences), sum(documents)
    from per_class
    group by method, layer, word
),

final as (
    select
        method,
        layer,
        grp as "group",
        row_number() over (partition by method, layer, grp order by total_score / occurrences desc, word) as rank,
        word,
        total_score / occurrences as mean_score,
        cast(occurrences as bigint) as occurrences,
        cast(documents as bigint) as documents
    from slices
    where occurrences >= $min_count
    qualify rank <= $k
)

select * from final
order by method, layer, "group", rank
