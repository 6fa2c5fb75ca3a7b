-- chunkyard schema, version 13: the languages of an embedding set's model.
--
-- Hybrid search fuses cosine similarity with BM25. A model trained on English only (the default,
-- all-MiniLM-L6-v2) places Chinese or Russian text almost at random, and a fixed mix of the two halves then
-- lets that weak half pull the ranking below full text alone (issue 25). The search needs to know which
-- languages the model was trained on: the `language:` of its model card (README.md front matter), which
-- the pipeline reads where the model is and records with each set it creates. NULL: not known (no card, or
-- a set made before this version by another model), and the search then applies no language rule.
ALTER TABLE embedding_sets ADD COLUMN languages text[];
COMMENT ON COLUMN embedding_sets.languages IS
    'languages the model was trained on (its model card''s language:), NULL when not known';

-- Sets made before this version by the shipped model: its card says `language: en`.
UPDATE embedding_sets SET languages = '{en}'
WHERE split_part(model, '@', 1) IN ('sentence-transformers/all-MiniLM-L6-v2', 'all-MiniLM-L6-v2');
