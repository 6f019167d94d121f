-- words: one row per run, document, method, layer and word (special tokens excluded). Stored
-- once per word with a share and a raw float column per method and layer (store layout 2); lift is
-- the share x the word's unit weight, in double then rounded to float, as layout 1 stored it.
-- (This file is one method and layer's select, filled in for each by query.views.)
select
    doc_id,
    word_id,
    word,
    "score:@slice@" as score,
    "raw_score:@slice@" as raw_score,
    cast(cast("score:@slice@" as double) * unit_weight as float) as lift,
    span_id,
    joined,
    cast(@layer@ as integer) as layer,
    cast('@method@' as varchar) as method,
    run_id
from @scan@  -- this slice's parts (query.views.SCAN)
where "score:@slice@" is not null
