-- A word as the top-k statistics count it: the one definition every query that groups words calls
-- (topk.sql, topk_grouped.sql, word_totals.sql, word_totals_wide.sql, report_topk_all.sql,
-- report_contrast.sql, topk_lean.sql), created on every connection (query.connection). The words
-- view's unit (a contraction the tokenizer split is one word, `joined`), lower-cased, in Unicode's
-- composed form (NFC: "café" typed as e + U+0301 is the "café" of U+00E9, which an uncased
-- tokenizer reads as the same token). NFC costs 1.2x a bare lower() over 5 M words; folding U+2019
-- into "'" too cost 1.75x, so the stop-word list holds both apostrophes instead (query.wordstats).
create or replace macro word_key(joined, word) as (
    lower(nfc_normalize(coalesce(joined, word)))
)
