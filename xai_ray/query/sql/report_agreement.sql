-- Agreement between explanation methods: Spearman's rank correlation, per document, between
-- the word scores of each pair of methods at one layer, as a histogram over [-1, 1] per pair
-- (n_docs rows would not fit a chart; $bins rows per pair always do), with each pair's
-- median and quartiles. Documents whose ranks are constant (one word, all ties) have no rho.
-- At most $max_docs documents, a fixed pseudo-random sample (by hash of doc_id): a few
-- thousand reviews pin the distribution down, and the ranking work stays flat as runs grow.
-- Parameters: $run_id, $layer, $bins, $max_docs.
with sample as (
    select doc_id
    from docs
    where run_id = $run_id
    order by hash(doc_id), doc_id
    limit $max_docs
),

scored as (
    select doc_id, method, word_id, score
    from words
    where run_id = $run_id and layer = $layer and doc_id in (select doc_id from sample)
),

ranked as (
    select
        doc_id,
        method,
        word_id,
        -- tied scores share their average rank, as Spearman's rho asks: first rank of the ties
        -- plus half their number less one; both windows share one sort
        rank() over by_score + (count(*) over (by_score range between current row and current row) - 1) / 2.0
            as word_rank
    from scored
    window by_score as (partition by doc_id, method order by score)
),

per_doc as (
    select a.method as method_a, b.method as method_b, a.doc_id, corr(a.word_rank, b.word_rank) as rho
    from ranked as a
    inner join ranked as b on a.doc_id = b.doc_id and a.word_id = b.word_id and a.method < b.method
    group by a.method, b.method, a.doc_id
),

valid as (
    select * from per_doc where rho is not null and not isnan(rho)
),

stats as (
    select
        method_a,
        method_b,
        count(*) as n_docs,
        median(rho) as median_rho,
        quantile_cont(rho, 0.25) as q1_rho,
        quantile_cont(rho, 0.75) as q3_rho
    from valid
    group by method_a, method_b
),

binned as (
    select
        method_a,
        method_b,
        -- rho = 1 belongs to the last bin; rounding can push |rho| a hair past 1
        greatest(0, least($bins - 1, cast(floor((rho + 1) / 2 * $bins) as integer))) as bin,
        count(*) as documents
    from valid
    group by all
),

final as (
    select
        method_a,
        method_b,
        bin,
        -1 + 2.0 * bin / $bins as bin_lo,
        -1 + 2.0 * (bin + 1) / $bins as bin_hi,
        documents,
        n_docs,
        median_rho,
        q1_rho,
        q3_rho
    from binned
    inner join stats using (method_a, method_b)
)

select * from final
order by method_a, method_b, bin
