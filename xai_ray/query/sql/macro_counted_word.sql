-- Which words count in a top-k list: the one definition every top-k query calls (topk.sql,
-- topk_grouped.sql, topk_totals.sql, report_topk_all.sql, report_topk_all_totals.sql,
-- report_contrast.sql, topk_lean.sql, topk_lean_totals.sql), created on every connection
-- (query.connection). A word counts when it is in at least min_docs documents and has at least
-- min_count occurrences, and is not a word class left out: with exclude_punct, a word made only of
-- Unicode punctuation or symbols (categories P* and S*); a word of stopwords (the caller's list,
-- lower case; empty to keep them). The queries pass their bound parameters in.
create or replace macro counted_word(word, documents, occurrences, min_docs, min_count, exclude_punct, stopwords) as (
    documents >= min_docs
    and occurrences >= min_count
    and not (exclude_punct and regexp_full_match(word, '[\pP\pS]+'))
    and not list_contains(stopwords, word)
)
