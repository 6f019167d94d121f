-- Words an explanation weighs more in reviews predicted positive (class 1) than in reviews
-- predicted negative (class 0), and the reverse (two-class models only: the report leaves this
-- out for more classes, where classes 0 and 1 are no opposites): the $k largest gaps of the mean per-document
-- $stat (as topk.sql) on each side. A gap is between two measured means, so a word must be in
-- at least $min_docs documents (and $min_count occurrences) of each of the two groups
-- (macro_counted_word.sql, given the smaller group's support).
-- Parameters: $run_id, $method, $layer, $stat, $min_docs, $min_count, $exclude_punct, $stopwords, $k.
with run_docs as (
    select doc_id, pred
    from docs
    where run_id = $run_id and pred in (0, 1)
),

per_doc as (
    select
        doc_id,
        word_key(joined, word) as word,
        sum(case when $stat = 'share' then score else lift end)
        / sum(cast(word_id = coalesce(span_id, word_id) as integer)) as value,
        sum(cast(word_id = coalesce(span_id, word_id) as integer)) as occurrences
    from words
    where run_id = $run_id and method = $method and layer = $layer
    group by doc_id, word_key(joined, word)
),

per_word as (
    select
        per_doc.word,
        avg(per_doc.value) filter (where run_docs.pred = 1) as mean_pos,
        avg(per_doc.value) filter (where run_docs.pred = 0) as mean_neg,
        sum(per_doc.occurrences) filter (where run_docs.pred = 1) as occurrences_pos,
        sum(per_doc.occurrences) filter (where run_docs.pred = 0) as occurrences_neg,
        count(*) filter (where run_docs.pred = 1) as documents_pos,
        count(*) filter (where run_docs.pred = 0) as documents_neg
    from per_doc
    inner join run_docs on per_doc.doc_id = run_docs.doc_id
    group by per_doc.word
),

ranked as (
    select
        *,
        mean_pos - mean_neg as difference,
        case when mean_pos > mean_neg then 'positive' else 'negative' end as side,
        row_number() over (
            partition by mean_pos > mean_neg order by abs(mean_pos - mean_neg) desc, word
        ) as rank
    from per_word
    where
        mean_pos <> mean_neg
        -- support in each group: the smaller group's must pass
        and counted_word(
            word,
            least(documents_pos, documents_neg),
            least(occurrences_pos, occurrences_neg),
            $min_docs,
            $min_count,
            $exclude_punct,
            $stopwords
        )
),

final as (
    select
        side, rank, word, difference, mean_pos, mean_neg, cast(occurrences_pos as bigint) as occurrences_pos,
        cast(occurrences_neg as bigint) as occurrences_neg, documents_pos, documents_neg
    from ranked
    where rank <= $k
)

select * from final
order by difference desc, word
