-- Top-k words of one run, method and layer over all documents, ranked by mean normalised score
-- over occurrences. Reads only the words file of that method and layer (partition pruning).
-- Parameters: $run_id, $method, $layer, $min_count, $k.
with occurrences as (
    select doc_id, lower(word) as word, score
    from words
    where run_id = $run_id and method = $method and layer = $layer
),

per_word as (
    select
        word,
        avg(score) as mean_score,
        count(*) as occurrences,
        count(distinct doc_id) as documents
    from occurrences
    group by word
    having count(*) >= $min_count
),

final as (
    select
        'all' as "group",
        row_number() over (order by mean_score desc, word) as rank,
        word,
        mean_score,
        occurrences,
        documents
    from per_word
    qualify rank <= $k
)

select * from final
order by rank
