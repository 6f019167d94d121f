-- A run's scored documents as a corpus again (`xai-ray evaluate` scores them anew). Parameters: $run_id.
with final as (
    select doc_id, text, label from docs where run_id = $run_id
)

select * from final order by doc_id
