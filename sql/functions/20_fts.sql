-- The BM25 statistics' bookkeeping (tables and triggers: migration 004). Re-applied on every migrate.

-- Add (p_sign = 1) or remove (-1) the statistics of a set of chunks given as (collection_id, tsv) rows.
-- A transaction that rewrites a document runs this twice (its old chunks deleted, its new ones inserted),
-- each time locking fts_terms rows in lexeme order; two such transactions could then each hold a row the
-- other wants. The collection's transaction-scoped advisory lock, taken first, makes them queue instead
-- (from the first statistics update to commit: the end of a document's transaction). Chunks deleted with
-- their collection change nothing (its statistics go with it).
CREATE OR REPLACE FUNCTION chunkyard_fts_apply(p_sign integer, p_collection bigint[], p_tsv tsvector[])
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT pg_advisory_xact_lock(hashtext('chunkyard:fts'), c.id::integer)
    FROM (SELECT DISTINCT u.id FROM unnest(p_collection) AS u(id) ORDER BY u.id) c;
    INSERT INTO fts_terms AS t (collection_id, lexeme, df)
    SELECT r.collection_id, w.lexeme, p_sign * count(*)
    FROM unnest(p_collection, p_tsv) AS r(collection_id, tsv)
    CROSS JOIN LATERAL unnest(tsvector_to_array(r.tsv)) AS w(lexeme)
    WHERE r.collection_id IN (SELECT id FROM collections)  -- not one being deleted
    GROUP BY r.collection_id, w.lexeme
    ORDER BY r.collection_id, w.lexeme
    ON CONFLICT (collection_id, lexeme) DO UPDATE SET df = t.df + EXCLUDED.df;
    UPDATE collections c
    SET fts_chunks = coalesce(c.fts_chunks, 0) + p_sign * s.n,
        fts_len_total = c.fts_len_total + p_sign * s.len,
        fts_lexemes_total = c.fts_lexemes_total + p_sign * s.lex,
        fts_avg_len = (c.fts_len_total + p_sign * s.len)::float8
                      / nullif(coalesce(c.fts_chunks, 0) + p_sign * s.n, 0)
    FROM (SELECT r.collection_id, count(*) AS n, sum(chunkyard_tsv_len(r.tsv)) AS len, sum(length(r.tsv)) AS lex
          FROM unnest(p_collection, p_tsv) AS r(collection_id, tsv)
          GROUP BY r.collection_id) s
    WHERE c.id = s.collection_id;
    DELETE FROM fts_terms t
    WHERE t.df <= 0 AND p_sign < 0 AND t.collection_id = ANY (p_collection);
END;
