-- words: one row per run, document, method, layer and word (special tokens excluded), whatever store
-- layout a run was written in: query.views unions one select per method and layer of each layout's
-- runs. lift is the share x the word's unit weight, in double then rounded to float. This file is
-- the select for runs in store layout 2 (a row per word, a share and a raw float column per method
-- and layer); view_words_v3.sql is layout 3's (this version's), view_words_v1.sql layout 1's.
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
