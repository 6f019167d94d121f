-- Every stored word score of one run with its review's text, in word order: what plausibility
-- (xai_ray.ops.plausibility) maps onto the review's whitespace tokens. raw_score is the sum of
-- the word's token scores, signed for signed methods. Parameters: $run_id.
select words.doc_id, words.method, words.layer, words.word_id, words.word, words.raw_score, docs.text
from words
inner join docs on words.run_id = docs.run_id and words.doc_id = docs.doc_id
where words.run_id = $run_id
order by words.doc_id, words.method, words.layer, words.word_id
