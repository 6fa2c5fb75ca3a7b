-- Search functions users call directly. Re-applied on every migrate (CREATE OR REPLACE).

-- A changed result type cannot be replaced in place: drop the versions whose result lacks the chunk's
-- metadata (the last column since schema version 4) before creating them again.
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('chunkyard_search', 'chunkyard_hybrid_search')
               AND p.pronamespace = current_schema()::regnamespace
               AND pg_get_function_result(p.oid) NOT LIKE '%metadata jsonb)'
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$$;

-- Top-k chunks of one collection by cosine similarity, with the parent section's text on request.
CREATE OR REPLACE FUNCTION chunkyard_search(
    p_collection      text,
    p_query           vector,
    p_k               integer DEFAULT 5,
    p_with_parent     boolean DEFAULT false
)
RETURNS TABLE (
    chunk_id      bigint,
    score         double precision,
    text          text,
    source_uri    text,
    heading_path  text[],
    char_start    integer,
    char_end      integer,
    section_id    bigint,
    parent_text   text,
    metadata      jsonb
)
LANGUAGE sql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
SET hnsw.ef_search = 100
AS $$
    WITH top AS (
        SELECT c.id, c.embedding <=> p_query AS dist, c.text, c.document_id, c.section_id,
               c.char_start, c.char_end, c.metadata
        FROM chunks c
        JOIN collections col ON col.id = c.collection_id AND col.name = p_collection
        JOIN documents dd ON dd.id = c.document_id AND dd.deleted_at IS NULL
        ORDER BY c.embedding <=> p_query
        LIMIT p_k
    )
    SELECT t.id, 1 - t.dist, t.text, d.source_uri, s.heading_path, t.char_start, t.char_end, t.section_id,
           CASE WHEN p_with_parent
                THEN substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) END,
           t.metadata
    FROM top t
    JOIN documents d ON d.id = t.document_id
    JOIN sections s ON s.id = t.section_id
    ORDER BY t.dist, t.id
$$;

-- Corpus statistics for BM25, stored on the collection (the pipeline refreshes them after every run;
-- call it yourself after writing chunks by other means). Searching works without them, only slower.
CREATE OR REPLACE FUNCTION chunkyard_refresh_fts_stats(p_collection_id bigint)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    UPDATE collections col
    SET fts_chunks = s.n, fts_avg_len = s.avg_len
    FROM (
        SELECT count(*) AS n,
               avg((SELECT sum(coalesce(array_length(u.positions, 1), 1)) FROM unnest(c.tsv) u)) AS avg_len
        FROM chunks c
        JOIN documents d ON d.id = c.document_id AND d.deleted_at IS NULL
        WHERE c.collection_id = p_collection_id AND c.tsv <> ''::tsvector
    ) s
    WHERE col.id = p_collection_id
$$;

-- Okapi BM25 over the chunks' full-text vectors (English stemming, stop words dropped): the top p_k chunks
-- matching ANY word of the query. Document frequencies come from the GIN index at query time, so the
-- figures are always current; the corpus size and mean length come from the collection's stored statistics.
CREATE OR REPLACE FUNCTION chunkyard_fulltext_search(
    p_collection      text,
    p_query_text      text,
    p_k               integer DEFAULT 5,
    p_k1              double precision DEFAULT 1.2,
    p_b               double precision DEFAULT 0.75
)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE sql STABLE
AS $$
    WITH col AS (
        SELECT c.id,
               coalesce(c.fts_chunks, (SELECT count(*) FROM chunks x WHERE x.collection_id = c.id))::float8 AS n,
               coalesce(c.fts_avg_len, (
                   SELECT avg((SELECT sum(coalesce(array_length(u.positions, 1), 1)) FROM unnest(x.tsv) u))
                   FROM chunks x WHERE x.collection_id = c.id), 1)::float8 AS avgdl
        FROM collections c WHERE c.name = p_collection
    ),
    terms AS (
        SELECT DISTINCT x.lexeme AS w,
               -- a lexeme as a tsquery operand, quoted so that no character is read as an operator
               ('''' || replace(replace(x.lexeme, '\', '\\'), '''', '''''') || '''')::tsquery AS tq
        FROM unnest(to_tsvector('english', p_query_text)) x
    ),
    idf AS (
        SELECT t.w, t.tq, ln(1 + (greatest(col.n, f.df) - f.df + 0.5) / (f.df + 0.5)) AS idf
        FROM terms t
        CROSS JOIN col
        CROSS JOIN LATERAL (
            SELECT count(*)::float8 AS df FROM chunks c
            WHERE c.collection_id = col.id AND c.tsv @@ t.tq
        ) f
        WHERE f.df > 0
    ),
    cand AS (
        SELECT c.id, c.tsv
        FROM chunks c
        CROSS JOIN col
        JOIN documents dd ON dd.id = c.document_id AND dd.deleted_at IS NULL
        WHERE c.collection_id = col.id
          AND c.tsv @@ (SELECT string_agg(idf.tq::text, ' | ')::tsquery FROM idf)
    )
    SELECT cand.id,
           sum(idf.idf * tf.n * (p_k1 + 1)
               / (tf.n + p_k1 * (1 - p_b + p_b * dl.n / col.avgdl)))::float8 AS score
    FROM cand
    CROSS JOIN col
    CROSS JOIN LATERAL (SELECT sum(coalesce(array_length(u.positions, 1), 1))::float8 AS n
                        FROM unnest(cand.tsv) u) dl
    CROSS JOIN LATERAL unnest(cand.tsv) u
    JOIN idf ON idf.w = u.lexeme
    CROSS JOIN LATERAL (SELECT coalesce(array_length(u.positions, 1), 1)::float8 AS n) tf
    GROUP BY cand.id
    ORDER BY score DESC, cand.id
    LIMIT p_k
$$;

-- Hybrid: vector similarity and BM25 full-text search fused. The candidates are the top p_candidates of
-- each; by default ('convex') each candidate's cosine similarity and BM25 score are min-max scaled over the
-- candidates and mixed as p_alpha * vector + (1 - p_alpha) * full text (a candidate outside the full-text
-- top scores 0 there). 'rrf' is reciprocal rank fusion (sum of 1 / (p_rrf_k + rank)). On Chroma's chunking
-- benchmark convex fusion retrieved more of the answers than RRF with the same candidates (README).
-- The signature of version 1 (RRF over ts_rank) would make calls ambiguous next to this one.
DROP FUNCTION IF EXISTS chunkyard_hybrid_search(text, vector, text, integer, boolean, integer, integer);

CREATE OR REPLACE FUNCTION chunkyard_hybrid_search(
    p_collection      text,
    p_query           vector,
    p_query_text      text,
    p_k               integer DEFAULT 5,
    p_with_parent     boolean DEFAULT false,
    p_fusion          text DEFAULT 'convex',
    p_alpha           double precision DEFAULT 0.5,
    p_rrf_k           integer DEFAULT 60,
    p_candidates      integer DEFAULT 50
)
RETURNS TABLE (
    chunk_id      bigint,
    score         double precision,
    text          text,
    source_uri    text,
    heading_path  text[],
    char_start    integer,
    char_end      integer,
    section_id    bigint,
    parent_text   text,
    metadata      jsonb
)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
SET hnsw.ef_search = 100
AS $$
#variable_conflict use_column
BEGIN
    IF p_fusion NOT IN ('convex', 'rrf') THEN
        RAISE EXCEPTION 'chunkyard_hybrid_search: p_fusion must be ''convex'' or ''rrf'', not %', quote_nullable(p_fusion)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_alpha IS NULL OR p_alpha < 0 OR p_alpha > 1 THEN
        RAISE EXCEPTION 'chunkyard_hybrid_search: p_alpha must be between 0 and 1, not %', quote_nullable(p_alpha)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH vec AS (
        SELECT v.id, 1 - v.dist AS sim, row_number() OVER (ORDER BY v.dist, v.id) AS r
        FROM (SELECT c.id, c.embedding <=> p_query AS dist
              FROM chunks c
              JOIN collections col ON col.id = c.collection_id AND col.name = p_collection
              JOIN documents dd ON dd.id = c.document_id AND dd.deleted_at IS NULL
              ORDER BY c.embedding <=> p_query
              LIMIT p_candidates) v
    ),
    fts AS (
        SELECT f.chunk_id AS id, f.score AS bm25, row_number() OVER (ORDER BY f.score DESC, f.chunk_id) AS r
        FROM chunkyard_fulltext_search(p_collection, p_query_text, p_candidates) f
    ),
    cand AS (
        SELECT u.id, max(u.vr) AS vr, max(u.fr) AS fr, max(u.bm25) AS bm25
        FROM (SELECT vec.id, vec.r AS vr, NULL::bigint AS fr, NULL::float8 AS bm25 FROM vec
              UNION ALL
              SELECT fts.id, NULL, fts.r, fts.bm25 FROM fts) u
        GROUP BY u.id
    ),
    -- the exact cosine similarity of every candidate, full-text ones included
    feat AS (
        SELECT cand.id, cand.vr, cand.fr, 1 - (c.embedding <=> p_query) AS sim, coalesce(cand.bm25, 0) AS bm25
        FROM cand JOIN chunks c ON c.id = cand.id
    ),
    scaled AS (
        SELECT feat.*,
               coalesce((feat.sim - min(feat.sim) OVER ()) / nullif(max(feat.sim) OVER () - min(feat.sim) OVER (), 0), 0) AS sim01,
               coalesce((feat.bm25 - min(feat.bm25) OVER ()) / nullif(max(feat.bm25) OVER () - min(feat.bm25) OVER (), 0), 0) AS bm2501
        FROM feat
    ),
    fused AS (
        SELECT s.id,
               CASE WHEN p_fusion = 'rrf'
                    THEN coalesce(1.0 / (p_rrf_k + s.vr), 0) + coalesce(1.0 / (p_rrf_k + s.fr), 0)
                    ELSE p_alpha * s.sim01 + (1 - p_alpha) * s.bm2501 END::float8 AS score
        FROM scaled s
        ORDER BY score DESC, s.id
        LIMIT p_k
    )
    SELECT c.id, f.score, c.text, d.source_uri, s.heading_path, c.char_start, c.char_end, c.section_id,
           CASE WHEN p_with_parent
                THEN substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) END,
           c.metadata
    FROM fused f
    JOIN chunks c ON c.id = f.id
    JOIN documents d ON d.id = c.document_id
    JOIN sections s ON s.id = c.section_id
    ORDER BY f.score DESC, c.id;
END
$$;
