-- Top-k words per group of documents (true label, predicted class, or correct/wrong) for one
-- run, method and layer, ranked by mean normalised score over occurrences.
-- Parameters: $run_id, $method, $layer, $by ('label' | 'pred' | 'correct'), $min_count, $k.
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
    select words.doc_id, lower(words.word) as word, words.score, run_docs.grp
    from words
    inner join run_docs on words.doc_id = run_docs.doc_id
    where words.run_id = $run_id and words.method = $method and words.layer = $layer
),

per_word as (
    select
        grp,
        word,
        avg(score) as mean_score,
        count(*) as occurrences,
        count(distinct doc_id) as documents
    from occurrences
    group by grp, word
    having count(*) >= $min_count
),

final as (
    select
        grp as "group",
        row_number() over (partition by grp order by mean_score desc, word) as rank,
        word,
        mean_score,
        occurrences,
        documents
    from per_word
    qualify rank <= $k
)

select * from final
order by "group", rank
