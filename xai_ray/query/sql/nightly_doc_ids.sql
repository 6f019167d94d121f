-- The scored documents of a run (or of a union of runs) with the sha256 of their text: what a
-- nightly job compares the corpus against to find new or changed documents.
-- Parameters: $run_id.
with run_docs as (
    select doc_id, text
    from docs
    where run_id = $run_id
),

final as (
    select doc_id, sha256(coalesce(text, '')) as text_sha256
    from run_docs
)

select * from final
order by doc_id
