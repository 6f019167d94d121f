-- topk_lean.sql answered from the run's kept word totals (word_totals.sql: per method, layer,
-- predicted class and word, the documents holding it and the sums its mean is made of) instead of
-- every occurrence: the same lean, ranking, support and word classes, the same rows.
-- Parameters: $run_id, $method and $layer (null: every method, every layer), $stat, $min_docs,
-- $min_count, $exclude_punct, $stopwords, $k.
with run_docs as (
    select doc_id, pred
    from docs
    where run_id = $run_id
),

class_sizes as (
    select pred, count(*) as reviews, cast(sum(count(*)) over () - count(*) as bigint) as other_reviews
    from run_docs
    group by pred
),

-- documents: the reviews of the class holding the word, its document frequency there
per_class as (
    select
        method,
        layer,
        pred,
        word,
        case when $stat = 'share' then total_share else total_lift end as total,
        occurrences,
        documents
    from word_totals
    where run_id = $run_id and ($method is null or method = $method) and ($layer is null or layer = $layer)
),

frequencies as (
    select
        per_class.*,
        class_sizes.reviews,
        class_sizes.other_reviews,
        sum(per_class.documents) over (partition by per_class.method, per_class.layer, per_class.word)
        - per_class.documents as other_documents
    from per_class
    inner join class_sizes on per_class.pred = class_sizes.pred
),

-- the support and word classes decide which words rank, after the frequencies saw every word
ranked as (
    select
        *,
        case
            when other_reviews > 0
                then ln((documents + 0.5) / (reviews - documents + 0.5))
                - ln((other_documents + 0.5) / (other_reviews - other_documents + 0.5))
        end as lean,
        row_number() over (partition by method, layer, pred order by total / documents desc, word) as rank
    from frequencies
    where
        total is not null
        and counted_word(word, documents, occurrences, $min_docs, $min_count, $exclude_punct, $stopwords)
    qualify rank <= $k
),

final as (
    select
        method,
        layer,
        pred,
        cast(count(*) as bigint) as n_words,
        avg(lean) as mean_lean,
        cast(count(*) filter (where lean < 0) as bigint) as n_against,
        case when count(lean) > 0 then count(*) filter (where lean < 0) / count(lean) end as share_against,
        list(word order by rank) as words,
        any_value(reviews) as reviews,
        any_value(other_reviews) as other_reviews,
        coalesce(avg(lean) < 0, false) as flagged
    from ranked
    group by method, layer, pred
)

select * from final
order by method, layer, pred
