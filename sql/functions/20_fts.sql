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

-- Recount a collection's BM25 statistics (fts_terms, chunk count, lengths, languages) from its rows: the one
-- recount. Triggers on chunks keep them current, so this is a repair, not a routine step: a migration that
-- changes chunks.tsv marks the statistics stale (collections.fts_chunks NULL) and the migrations runner
-- recounts those with this function once the function files are applied (store.recount_fts_stats), as does
-- the end of a run that finds them missing (a bulk load).
CREATE OR REPLACE FUNCTION chunkyard_refresh_fts_stats(p_collection_id bigint)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    DELETE FROM fts_terms WHERE collection_id = p_collection_id;
    INSERT INTO fts_terms (collection_id, lexeme, df)
    SELECT p_collection_id, w.lexeme, count(*)
    FROM chunks c CROSS JOIN LATERAL unnest(tsvector_to_array(c.tsv)) AS w(lexeme)
    WHERE c.collection_id = p_collection_id
    GROUP BY w.lexeme;
    UPDATE collections col
    SET fts_chunks = s.n, fts_len_total = coalesce(s.len, 0), fts_lexemes_total = coalesce(s.lex, 0),
        fts_avg_len = s.len::float8 / nullif(s.n, 0)
    FROM (SELECT count(*) AS n, sum(chunkyard_tsv_len(c.tsv)) AS len, sum(length(c.tsv)) AS lex
          FROM chunks c WHERE c.collection_id = p_collection_id AND c.tsv <> ''::tsvector) s
    WHERE col.id = p_collection_id;
    UPDATE collections col
    SET languages = coalesce((SELECT array_agg(DISTINCT c.language ORDER BY c.language) FROM chunks c
                              WHERE c.collection_id = p_collection_id), '{en}')
    WHERE col.id = p_collection_id;
END;
