-- words of runs in store layout 3: one row per run, document, method, layer and word. A word is
-- stored on its first token's row (the rows with a span_id), whose score column holds the word's
-- raw score; its share is that / the document's divisor (float32 division, bit for bit the
-- scorer's share) unless the part kept the share itself; lift is the share x the word's unit
-- weight, in double then rounded to float, as layout 1 stored it.
-- (This file is one method and layer's select, filled in for each by query.views.)
select
    doc_id,
    word_id,
    word,
    @share@ as score,
    "score:@slice@" as raw_score,
    cast(cast(@share@ as double) * unit_weight as float) as lift,
    span_id,
    joined,
    cast(@layer@ as integer) as layer,
    cast('@method@' as varchar) as method,
    run_id
from @scan@  -- this slice's parts (query.views.SCAN)
where span_id is not null and "divisor:@slice@" is not null  -- a word's row, in a part holding this slice
