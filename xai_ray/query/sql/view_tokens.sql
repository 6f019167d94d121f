-- tokens: one row per run, document, method, layer and token position, whatever store layout a
-- run was written in: query.views unions one select per method and layer of each layout's runs.
-- This file is the select for runs in store layout 2 (a row per token, a float column per method
-- and layer); view_tokens_v3.sql is layout 3's (this version's), view_tokens_v1.sql layout 1's.
-- (This file is one method and layer's select, filled in for each by query.views.)
select
    doc_id,
    position,
    token,
    word_id,
    "score:@slice@" as score,
    cast(@layer@ as integer) as layer,
    cast('@method@' as varchar) as method,
    run_id
from @scan@  -- this slice's parts (query.views.SCAN)
where "score:@slice@" is not null
