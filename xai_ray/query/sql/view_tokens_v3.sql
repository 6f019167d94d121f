-- tokens of runs in store layout 3: one row per run, document, method, layer and token position.
-- A token's score is its own column where set (the first token of a word of several tokens, whose
-- row's score column holds the word's raw score), else the row's score; a word without a token
-- has a row without a position, which is no token.
-- (This file is one method and layer's select, filled in for each by query.views.)
select
    doc_id,
    position,
    token,
    word_id,
    coalesce("token_score:@slice@", "score:@slice@") as score,
    cast(@layer@ as integer) as layer,
    cast('@method@' as varchar) as method,
    run_id
from @scan@  -- this slice's parts (query.views.SCAN)
where position is not null and "score:@slice@" is not null
