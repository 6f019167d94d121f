-- Whether a method's top words per predicted class lean toward that class or against it, from
-- the run's own data (no lexicon). A word leans toward class c when the reviews the model
-- predicts as c hold it more often than the reviews it predicts otherwise:
--   lean(w, c) = ln((a + 0.5) / (n_c - a + 0.5)) - ln((b + 0.5) / (n_o - b + 0.5))
-- the log odds ratio of w's document frequency, a of the n_c reviews predicted c against b of the
-- n_o reviews predicted any other class, with 0.5 added to each of the four counts (Haldane-
-- Anscombe) so that a word in every review or in none of one side stays finite. 0 = as frequent
-- on both sides; ln 9 ~ 2.2 = 9:1 odds in favour of c at 4 reviews a side. With no review
-- predicted otherwise (n_o = 0: a one-class corpus) there is nothing to compare: lean is null,
-- the class's mean lean is null and it is never flagged.
-- Per (method, layer, predicted class): the top $k words ranked as topk_grouped.sql ranks them by
-- predicted class (mean per-review $stat, macro_counted_word.sql's support and word classes), the
-- mean lean of those words toward the class, how many lean against it (lean < 0), and flagged =
-- a mean lean below 0 (exactly 0, a tie, is not flagged). From the words and docs views; the
-- same answer from the kept word totals is topk_lean_totals.sql.
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
    where run_id = $run_id and ($method is null or method = $method) and ($layer is null or layer = $layer)
    group by method, layer, doc_id, word_key(joined, word)
),

-- documents: the reviews of the class holding the word, its document frequency there
per_class as (
    select
        per_doc.method,
        per_doc.layer,
        run_docs.pred,
        per_doc.word,
        sum(per_doc.value) as total,
        sum(per_doc.occurrences) as occurrences,
        count(*) as documents
    from per_doc
    inner join run_docs on per_doc.doc_id = run_docs.doc_id
    group by per_doc.method, per_doc.layer, run_docs.pred, per_doc.word
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
