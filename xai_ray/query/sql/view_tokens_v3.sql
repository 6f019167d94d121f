-- tokens of runs in store layout 3: one row per run, document, method, layer and token position.
-- A token's score is its own column where set (the first token of a word of several tokens, whose
-- row's score column holds the word's raw score), else the row's score (a case, not a coalesce:
-- the own column is null in whole row groups, and DuckDB's case skips them cheaper); a word
-- without a token has a row without a position or token, which is no token (the filter reads
-- the token, which token queries read anyway, rather than the position, which most do not).
-- (This file is one method and layer's select, filled in for each by query.views.)
select
    doc_id,
    position,
    token,
    word_id,
    case when "token_score:@slice@" is null then "score:@slice@" else "token_score:@slice@" end as score,
    cast(@layer@ as integer) as layer,
    cast('@method@' as varchar) as method,
    run_id
from @scan@  -- this slice's parts (query.views.SCAN)
where token is not null and "score:@slice@" is not null
