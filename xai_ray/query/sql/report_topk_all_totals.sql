-- report_topk_all.sql answered from the run's kept word totals (word_totals.sql) instead of every
-- occurrence: the same top-k words of every method x layer x predicted-class slice and the 'all'
-- slice per method and layer, with the same statistic, support and word classes.
-- Parameters: $run_id, $stat, $min_docs, $min_count, $exclude_punct, $stopwords, $k.
with per_class as (
    select
        method,
        layer,
        word,
        pred,
        case when $stat = 'share' then total_share else total_lift end as total,
        case when $stat = 'share' then squares_share else squares_lift end as total_squares,
        occurrences,
        documents
    from word_totals
    where run_id = $run_id
),

-- a document has one predicted class, so the 'all' slice adds the class slices' sums up
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
