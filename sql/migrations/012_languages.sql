-- chunkyard schema, version 12: full-text search in each document's language.
--
-- A chunk's lexemes were made with the English configuration whatever its language: German and Russian words
-- were not stemmed in their own language, and Chinese, with no spaces, became one "word" per clause that no
-- query matched. Now each document has a language (ISO 639-1, detected by the pipeline or set in the profile,
-- '' when it has no letters), each chunk the language of its section (a document may mix them), and the
-- chunk's lexemes are made with the Postgres configuration of that language (chunkyard_fts_config: danish,
-- german, russian, ...; `simple` where Postgres has no stemmer). Chinese, Japanese and Korean runs become
-- overlapping character bigrams first (chunkyard_fts_prepare), as Lucene's CJK analyzer makes them, so a
-- query matches inside a sentence. A query is analysed once with each language the collection holds
-- (collections.languages), so one SQL call, chunkyard_fulltext_search(collection, query), serves any
-- language. BM25 statistics stay exact: they count whatever lexemes the chunks hold.
--
-- Chunks stored before this version were analysed as English: they keep language 'en' and the same lexemes
-- (for English text, the new expression gives the same vector as the old one); the pipeline reads stored
-- files again once to detect their language, and only sections in another language are written again
-- (their embeddings come from the cache). The column is rewritten here and the statistics recounted.

-- The Postgres text-search configuration of a language (ISO 639-1); `simple` (lower-casing, no stemming,
-- no stop words) for a language Postgres has no configuration for, and for '' (no letters). Immutable: it
-- names built-in configurations only, and a stored full-text vector depends on it.
CREATE FUNCTION chunkyard_fts_config(p_language text) RETURNS regconfig
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE p_language
    WHEN 'ar' THEN 'arabic'::regconfig     WHEN 'hy' THEN 'armenian'::regconfig
    WHEN 'eu' THEN 'basque'::regconfig     WHEN 'ca' THEN 'catalan'::regconfig
    WHEN 'da' THEN 'danish'::regconfig     WHEN 'nl' THEN 'dutch'::regconfig
    WHEN 'en' THEN 'english'::regconfig    WHEN 'et' THEN 'estonian'::regconfig
    WHEN 'fi' THEN 'finnish'::regconfig    WHEN 'fr' THEN 'french'::regconfig
    WHEN 'de' THEN 'german'::regconfig     WHEN 'el' THEN 'greek'::regconfig
    WHEN 'hi' THEN 'hindi'::regconfig      WHEN 'hu' THEN 'hungarian'::regconfig
    WHEN 'id' THEN 'indonesian'::regconfig WHEN 'ga' THEN 'irish'::regconfig
    WHEN 'it' THEN 'italian'::regconfig    WHEN 'lt' THEN 'lithuanian'::regconfig
    WHEN 'ne' THEN 'nepali'::regconfig     WHEN 'no' THEN 'norwegian'::regconfig
    WHEN 'nb' THEN 'norwegian'::regconfig  WHEN 'nn' THEN 'norwegian'::regconfig
    WHEN 'pt' THEN 'portuguese'::regconfig WHEN 'ro' THEN 'romanian'::regconfig
    WHEN 'ru' THEN 'russian'::regconfig    WHEN 'sr' THEN 'serbian'::regconfig
    WHEN 'es' THEN 'spanish'::regconfig    WHEN 'sv' THEN 'swedish'::regconfig
    WHEN 'ta' THEN 'tamil'::regconfig      WHEN 'tr' THEN 'turkish'::regconfig
    WHEN 'yi' THEN 'yiddish'::regconfig
    ELSE 'simple'::regconfig
END;

-- Text as the full-text parser should see it: each run of Chinese, Japanese or Korean characters becomes its
-- overlapping character bigrams ("全文搜索" -> "全文 文搜 搜索"; a lone character stays itself); other text
-- is unchanged. The same function prepares chunks and queries, so both sides always agree.
CREATE FUNCTION chunkyard_fts_prepare(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE
    WHEN p_text !~ '[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]' THEN p_text
    ELSE (SELECT string_agg(
                     CASE WHEN m.p[1] IS NULL THEN m.p[2]
                          WHEN length(m.p[1]) = 1 THEN m.p[1]
                          ELSE (SELECT string_agg(substr(m.p[1], i, 2), ' ' ORDER BY i)
                                FROM generate_series(1, length(m.p[1]) - 1) AS i)
                     END, ' ' ORDER BY m.n)
          FROM regexp_matches(p_text, '([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)'
                                      '|([^\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+)', 'g')
               WITH ORDINALITY AS m(p, n))
END;

ALTER TABLE documents ADD COLUMN language text NOT NULL DEFAULT '';
ALTER TABLE collections ADD COLUMN languages text[] NOT NULL DEFAULT '{en}';
ALTER TABLE chunks ADD COLUMN language text NOT NULL DEFAULT 'en';
COMMENT ON COLUMN documents.language IS 'the language of most of the text (ISO 639-1); '''' when it has no letters';
COMMENT ON COLUMN chunks.language IS 'the language of the chunk''s section: its full-text configuration (chunkyard_fts_config)';
COMMENT ON COLUMN collections.languages IS 'the languages of its chunks: a query is analysed with each';

-- the one function whose body is bound to chunks.tsv (BEGIN ATOMIC); re-created with the functions
DROP FUNCTION IF EXISTS chunkyard_refresh_fts_stats(bigint);
ALTER TABLE chunks DROP COLUMN tsv;  -- drops chunks_tsv_idx with it
ALTER TABLE chunks
    ADD COLUMN tsv tsvector GENERATED ALWAYS AS (
        to_tsvector(chunkyard_fts_config(language), chunkyard_fts_prepare(search_context || E'\n' || text))
    ) STORED;
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);

-- A statement that inserts chunks of a language the collection has not held adds it to collections.languages
-- (chunkyard_refresh_fts_stats recounts them exactly).
CREATE OR REPLACE FUNCTION chunkyard_fts_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM chunkyard_fts_apply(1, array_agg(n.collection_id), array_agg(n.tsv))
    FROM new_rows n WHERE n.tsv <> ''::tsvector HAVING count(*) > 0;
    UPDATE collections c
    SET languages = ARRAY(SELECT DISTINCT x FROM unnest(c.languages || l.langs) AS x ORDER BY x)
    FROM (SELECT n.collection_id, array_agg(DISTINCT n.language) AS langs FROM new_rows n
          GROUP BY n.collection_id) l
    WHERE c.id = l.collection_id AND NOT (c.languages @> l.langs);
    RETURN NULL;
END
$$;

-- the BM25 statistics of every collection, from the new vectors (English text: the same as before): marked
-- stale here, recounted by chunkyard_refresh_fts_stats once the functions are in place (pipeline/db.py)
UPDATE collections SET fts_chunks = NULL;
