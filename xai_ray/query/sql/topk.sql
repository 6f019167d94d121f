-- Top-k words of one run, method and layer over all documents (xai_ray/wordstats.py defines the
-- statistic). A word is a unit of the words view: a contraction split by the tokenizer counts as
-- one word ("wasn't"), its pieces' values summed. Per document first: a word's value in a
-- document is its mean over its occurrences there ($stat: 'lift' or 'share'); the ranked
-- mean_score is the mean of those over the documents holding the word, sd their standard
-- deviation (the 95% interval is added from it). Reads only the words file of that method and
-- layer (partition pruning); which words count (support, word classes: macro_counted_word.sql)
-- is decided after aggregation, on distinct words.
-- Parameters: $run_id, $method, $layer, $stat, $min_docs, $min_count, $exclude_punct, $stopwords, $k.
with occurrences as (
    select
        doc_id,
        word_key(joined, word) as word,
        case when $stat = 'share' then score else lift end as value,
        cast(word_id = coalesce(span_id, word_id) as integer) as starts
    from words
    where run_id = $run_id and method = $method and layer = $layer
),

per_doc as (
    select word, doc_id, sum(value) / sum(starts) as value, sum(starts) as occurrences
    from occurrences
    group by word, doc_id
),

per_word as (
    select
        word,
        avg(value) as mean_score,
        stddev_samp(value) as sd,
        sum(occurrences) as occurrences,
        count(*) as documents
    from per_doc
    group by word
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
        'all' as "group",
        row_number() over (order by mean_score desc, word) as rank,
        word,
        mean_score,
        sd,
        cast(occurrences as bigint) as occurrences,
        documents
    from kept
    qualify rank <= $k
)

select * from final
order by rank
