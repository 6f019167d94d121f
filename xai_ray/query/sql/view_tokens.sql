-- tokens: one row per run, document, method, layer and token position. Stored once per token
-- with a float column per method and layer (store layout 2), so a query over one method and layer
-- reads the token columns and that one float column.
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
