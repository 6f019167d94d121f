-- Words an explanation weighs more in reviews predicted positive (class 1) than in reviews
-- predicted negative (class 0), and the reverse: the $k largest gaps of mean normalised score
-- on each side. A gap is between two measured means, so a word must occur at least $min_count
-- times in each of the two groups.
-- Parameters: $run_id, $method, $layer, $min_count, $k.
with run_docs as (
    select doc_id, pred
    from docs
    where run_id = $run_id and pred in (0, 1)
),

occurrences as (
    select lower(words.word) as word, words.score, run_docs.pred
    from words
    inner join run_docs on words.doc_id = run_docs.doc_id
    where words.run_id = $run_id and words.method = $method and words.layer = $layer
),

per_word as (
    select
        word,
        avg(score) filter (where pred = 1) as mean_pos,
        avg(score) filter (where pred = 0) as mean_neg,
        count(*) filter (where pred = 1) as occurrences_pos,
        count(*) filter (where pred = 0) as occurrences_neg
    from occurrences
    group by word
    having count(*) filter (where pred = 1) >= $min_count and count(*) filter (where pred = 0) >= $min_count
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
    where mean_pos <> mean_neg
),

final as (
    select side, rank, word, difference, mean_pos, mean_neg, occurrences_pos, occurrences_neg
    from ranked
    where rank <= $k
)

select * from final
order by difference desc, word
