-- topk.sql (and topk_grouped.sql by predicted class) answered from the run's kept word totals
-- (word_totals.sql) instead of every occurrence: the same statistic, support and word classes.
-- Parameters: $run_id, $method, $layer, $by ('all' | 'pred'), $stat, $min_docs, $min_count,
-- $exclude_punct, $stopwords, $k.
with slices as (
    select
        case when $by = 'pred' then cast(pred as varchar) else 'all' end as grp,
        word,
        sum(case when $stat = 'share' then total_share else total_lift end) as total,
        sum(case when $stat = 'share' then squares_share else squares_lift end) as total_squares,
        sum(occurrences) as occurrences,
        sum(documents) as documents
    from word_totals
    where run_id = $run_id and method = $method and layer = $layer
    group by grp, word
),

kept as (
    select
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
        grp as "group",
        row_number() over (partition by grp order by mean_score desc, word) as rank,
        word,
        mean_score,
        sd,
        cast(occurrences as bigint) as occurrences,
        cast(documents as bigint) as documents
    from kept
    qualify rank <= $k
)

select * from final
order by "group", rank
