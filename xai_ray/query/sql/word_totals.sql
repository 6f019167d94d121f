-- Per method x layer x predicted class x word, the sums the top-k statistics are made of (see
-- topk.sql): per document first (a word's mean lift and mean share over its occurrences there),
-- then the sum and sum of squares of those over the documents, occurrences and documents. Computed
-- once per run by its aggregate stage and kept beside it (view word_totals), so `topk` reads a few
-- thousand rows instead of every occurrence. One method and layer at a time (its per-document
-- groups are a twelfth of a run's, and the filter leaves the words view one slice to read).
-- Parameters: $run_id, $method, $layer.
with per_doc as (
    select
        method,
        layer,
        doc_id,
        word_key(joined, word) as word,
        sum(lift) / sum(cast(word_id = coalesce(span_id, word_id) as integer)) as lift,
        sum(score) / sum(cast(word_id = coalesce(span_id, word_id) as integer)) as share,
        sum(cast(word_id = coalesce(span_id, word_id) as integer)) as occurrences
    from words
    where run_id = $run_id and method = $method and layer = $layer
    group by method, layer, doc_id, word_key(joined, word)
),

final as (
    select
        per_doc.method,
        per_doc.layer,
        docs.pred,
        per_doc.word,
        sum(per_doc.lift) as total_lift,
        sum(per_doc.lift * per_doc.lift) as squares_lift,
        sum(per_doc.share) as total_share,
        sum(per_doc.share * per_doc.share) as squares_share,
        cast(sum(per_doc.occurrences) as bigint) as occurrences,
        count(*) as documents
    from per_doc
    inner join docs on per_doc.doc_id = docs.doc_id and docs.run_id = $run_id
    group by per_doc.method, per_doc.layer, docs.pred, per_doc.word
)

select * from final
