-- chunkyard schema, version 4: BM25 statistics kept current by the database, so no query counts matches.
-- fts_terms holds each collection's document frequencies (chunks containing a lexeme); collections hold the
-- chunk count and total lengths. Statement-level triggers on chunks update both in the writing transaction
-- (COPY included, and rows written by hand), so a search reads IDF with one index lookup per query word.
-- Statistics count every chunk row, soft-deleted documents' too (as Lucene counts deleted documents until
-- a merge); chunkyard_refresh_fts_stats(collection id) recounts a collection from its rows.
-- Also: chunk metadata written before this version is a JSON string holding the object; it becomes the object.

CREATE TABLE fts_terms (
    collection_id  bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    lexeme         text NOT NULL,
    df             integer NOT NULL,          -- chunks of the collection whose tsv contains the lexeme
    PRIMARY KEY (collection_id, lexeme)
);

ALTER TABLE collections
    ADD COLUMN fts_len_total      bigint NOT NULL DEFAULT 0,   -- sum of chunk lengths in indexed words
    ADD COLUMN fts_lexemes_total  bigint NOT NULL DEFAULT 0;   -- sum of distinct indexed words per chunk

COMMENT ON TABLE fts_terms IS 'BM25 document frequencies per collection and lexeme, kept by triggers on chunks';

-- Length of a full-text vector in words (BM25's document length): positions summed over lexemes.
CREATE FUNCTION chunkyard_tsv_len(tsvector) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) FROM unnest($1) u);

-- Add (p_sign = 1) or remove (-1) the statistics of a set of chunks given as (collection_id, tsv) rows.
-- Rows are locked in (collection, lexeme) order, so concurrent writers never deadlock on them.
-- Chunks deleted with their collection change nothing (its statistics go with it).
CREATE FUNCTION chunkyard_fts_apply(p_sign integer, p_collection bigint[], p_tsv tsvector[]) RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
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

CREATE FUNCTION chunkyard_fts_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM chunkyard_fts_apply(1, array_agg(n.collection_id), array_agg(n.tsv))
    FROM new_rows n WHERE n.tsv <> ''::tsvector HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE FUNCTION chunkyard_fts_on_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM chunkyard_fts_apply(-1, array_agg(o.collection_id), array_agg(o.tsv))
    FROM old_rows o WHERE o.tsv <> ''::tsvector HAVING count(*) > 0;
    RETURN NULL;
END
$$;

-- A changed text changes the full-text vector: its old statistics go, its new ones come (an update that
-- moves offsets only, as every incremental run makes, changes nothing here).
CREATE FUNCTION chunkyard_fts_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM chunkyard_fts_apply(-1, array_agg(o.collection_id), array_agg(o.tsv))
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    WHERE o.tsv <> ''::tsvector AND (o.tsv, o.collection_id) IS DISTINCT FROM (n.tsv, n.collection_id)
    HAVING count(*) > 0;
    PERFORM chunkyard_fts_apply(1, array_agg(n.collection_id), array_agg(n.tsv))
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    WHERE n.tsv <> ''::tsvector AND (o.tsv, o.collection_id) IS DISTINCT FROM (n.tsv, n.collection_id)
    HAVING count(*) > 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION chunkyard_fts_on_insert();
CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION chunkyard_fts_on_delete();
CREATE TRIGGER chunks_fts_update AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkyard_fts_on_update();

-- The statistics of the chunks already stored.
INSERT INTO fts_terms (collection_id, lexeme, df)
SELECT c.collection_id, w.lexeme, count(*)
FROM chunks c CROSS JOIN LATERAL unnest(tsvector_to_array(c.tsv)) AS w(lexeme)
GROUP BY c.collection_id, w.lexeme;
UPDATE collections col
SET fts_chunks = coalesce(s.n, 0), fts_len_total = coalesce(s.len, 0), fts_lexemes_total = coalesce(s.lex, 0),
    fts_avg_len = s.len::float8 / nullif(s.n, 0)
FROM collections c2
LEFT JOIN (SELECT collection_id, count(*) AS n, sum(chunkyard_tsv_len(tsv)) AS len, sum(length(tsv)) AS lex
           FROM chunks WHERE tsv <> ''::tsvector GROUP BY collection_id) s ON s.collection_id = c2.id
WHERE col.id = c2.id;

UPDATE chunks SET metadata = (metadata #>> '{}')::jsonb WHERE jsonb_typeof(metadata) = 'string';
