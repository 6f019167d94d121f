-- Top-k words of one run for every method x layer x predicted-class slice, plus an 'all'
-- slice per method and layer: the data behind every top-k chart of the report in one scan.
-- Ranked as topk.sql: per document first (a word's mean $stat over its occurrences in the
-- document), then the mean over the documents of the slice holding the word, with the standard
-- deviation over them for the interval; which words count in a slice (support, word classes) is
-- macro_counted_word.sql's.
-- At most methods x layers x (classes + 1) x $k rows.
-- Parameters: $run_id, $stat, $min_docs, $min_count, $exclude_punct, $stopwords, $k.
with run_docs as (
    select doc_id, pred
    from docs
    where run_id = $run_id
),

per_doc as (
    select
        method,
        layer,
        doc_id,
        word_key(joined, word) as word,
        sum(case when $stat = 'share' then score else lift end)
        / sum(cast(word_id = coalesce(span_id, word_id) as integer)) as value,
        sum(cast(word_id = coalesce(span_id, word_id) as integer)) as occurrences
    from words
    where run_id = $run_id
    group by method, layer, doc_id, word_key(joined, word)
),

-- Sums, not means: a document has one predicted class, so the 'all' slice adds the class
-- slices' sums up (documents included) with no second pass over the documents.
per_class as (
    select
        per_doc.method,
        per_doc.layer,
        per_doc.word,
        run_docs.pred,
        sum(per_doc.value) as total,
        sum(per_doc.value * per_doc.value) as total_squares,
        sum(per_doc.occurrences) as occurrences,
        count(*) as documents
    from per_doc
    inner join run_docs on per_doc.doc_id = run_docs.doc_id
    group by per_doc.method, per_doc.layer, per_doc.word, run_docs.pred
),

slices as (
    select method, layer, cast(pred as varchar) as grp, word, total, total_squares, occurrences, documents
    from per_class
    union all
    select
        method, layer, 'all' as grp, word, sum(total), sum(total_squares), sum(occurrences), sum(documents)
    from per_class
    group by method, layer, word
),

kept as (
    select
        method,
        layer,
        grp,
        word,
        total / documents as mean_score,
        case
            when documents > 1
                then sqrt(greatest(total_squares - total * total / documents, 0) / (documents - 1))
        end as sd,
        occurrences,
        documents
    from slices
    where
        total is not null
        and counted_word(word, documents, occurrences, $min_docs, $min_count, $exclude_punct, $stopwords)
),

final as (
    select
        method,
        layer,
        grp as "group",
        row_number() over (partition by method, layer, grp order by mean_score desc, word) as rank,
        word,
        mean_score,
        sd,
        cast(occurrences as bigint) as occurrences,
        cast(documents as bigint) as documents
    from kept
    qualify rank <= $k
)

select * from final
order by method, layer, "group", rank
