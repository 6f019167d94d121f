-- Top-k words per group of documents (true label, predicted class, or correct/wrong) for one
-- run, method and layer; the statistic, support and word classes as in topk.sql.
-- Parameters: $run_id, $method, $layer, $by ('label' | 'pred' | 'correct'), $stat, $min_docs,
-- $min_count, $exclude_punct, $stopwords, $k.
with run_docs as (
    select
        doc_id,
        case $by
            when 'label' then cast(label as varchar)
            when 'pred' then cast(pred as varchar)
            when 'correct' then cast(label = pred as varchar)
        end as grp
    from docs
    where run_id = $run_id
),

occurrences as (
    select
        doc_id,
        word_key(joined, word) as word,
        case when $stat = 'share' then score else lift end as value,
        cast(word_id = coalesce(span_id, word_id) as integer) as starts
    from words
    where run_id = $run_id and method = $method and layer = $layer
),

-- Per document first: the join with docs then meets one row per distinct word of a document.
per_doc as (
    select word, doc_id, sum(value) / sum(starts) as value, sum(starts) as occurrences
    from occurrences
    group by word, doc_id
),

per_word as (
    select
        run_docs.grp,
        per_doc.word,
        avg(per_doc.value) as mean_score,
        stddev_samp(per_doc.value) as sd,
        sum(per_doc.occurrences) as occurrences,
        count(*) as documents
    from per_doc
    inner join run_docs on per_doc.doc_id = run_docs.doc_id
    group by run_docs.grp, per_doc.word
),

kept as (
    select *
    from per_word
    where
        mean_score is not null
        and counted_word(word, documents, occurrences, $min_docs, $min_count, $exclude_punct, $stopwords)
),

final as (
    select
        grp as "group",
        row_number() over (partition by grp order by mean_score desc, word) as rank,
        word,
        mean_score,
        sd,
        cast(occurrences as bigint) as occurrences,
        documents
    from kept
    qualify rank <= $k
)

select * from final
order by "group", rank
