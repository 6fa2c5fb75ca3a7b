-- Vector and hybrid search, the functions users call most. Re-applied on every migrate (CREATE OR REPLACE).

-- Top-k chunks of one collection by cosine similarity, with the parent section's text on request: the
-- nearest in the collection's active embedding set (chunkyard_vector_candidates: its HNSW index, live
-- documents only), whatever the model's dimension. A section at least p_whole_section retrieved comes back
-- whole (chunkyard_whole_sections; its text and offsets, metadata "whole_section": true); NULL: chunks only.
-- p_filter: the chunks searched (05_search_filter.sql; docs/search-filters.md), k of them still returned
-- when that many pass.
CREATE OR REPLACE FUNCTION chunkyard_search(
    p_collection      text,
    p_query           vector,
    p_k               integer DEFAULT 5,
    p_with_parent     boolean DEFAULT false,
    p_whole_section   double precision DEFAULT 0.5,
    p_filter          jsonb DEFAULT NULL
)
RETURNS SETOF chunkyard_hit
LANGUAGE sql STABLE
AS $$
    SELECT h.*
    FROM (SELECT array_agg(v.chunk_id ORDER BY v.dist, v.chunk_id) AS ids,
                 array_agg(1 - v.dist ORDER BY v.dist, v.chunk_id) AS scores
          FROM chunkyard_vector_candidates(p_collection, p_query, p_k, p_filter) v) t
    CROSS JOIN LATERAL chunkyard_hits(t.ids, t.scores, p_with_parent, p_whole_section) h
$$;

-- The weight of the vector half of hybrid search by default (p_fusion 'auto') for a query whose candidates
-- are p_ids: p_alpha, or 0 when most of them are chunks in a language the collection's embedding model was
-- not trained on (chunks.language against the active set's embedding_sets.languages, read from the model
-- card by the pipeline; a chunk with no letters counts for neither); p_alpha when the model's languages are
-- not known. At 0, full text ranks alone and the cosine similarity only orders what it scores alike (the
-- chunks it did not find). An English-only model (the default) places Chinese or Russian text almost at
-- random, and at an even mix that half pulls hybrid search below full text alone (bench/fusion.py).
-- Judged on the query's own candidates, not on the collection's languages: a few chunks detected as another
-- language do not change an English collection's searches, and in a collection of two languages each query
-- is weighed by the language its candidates are in.
CREATE OR REPLACE FUNCTION chunkyard_vector_weight(p_collection text, p_ids bigint[], p_alpha double precision)
RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (SELECT CASE WHEN 2 * count(*) FILTER (WHERE c.language <> '' AND NOT (c.language = ANY (m.languages)))
                         > count(*)
                    THEN 0 ELSE p_alpha END
        FROM (SELECT s.languages FROM embedding_sets s JOIN collections col ON col.id = s.collection_id
              WHERE col.name = p_collection AND s.status = 'active' AND s.languages IS NOT NULL) m
        CROSS JOIN chunks c
        WHERE c.id = ANY (p_ids));

-- Hybrid: vector similarity and BM25 full-text search fused. The candidates are the top p_candidates of
-- each; each candidate's cosine similarity and BM25 score are min-max scaled over the candidates and mixed
-- as w * vector + (1 - w) * full text (a candidate outside the full-text top scores 0 there). By default
-- ('auto') w is chunkyard_vector_weight: p_alpha, or 0 (full text alone) when most candidates are in a
-- language the embedding model was not trained on; 'convex' is w = p_alpha always (the default before schema
-- version 13); ties go to the higher cosine similarity. 'rrf' is reciprocal rank fusion (sum of
-- 1 / (p_rrf_k + rank)). Measured offline over the same candidates on 16 question sets (bench/fusion.py),
-- 'auto' is never more than 1 point of recall at k = 5 below the better of its own two halves, where the
-- even mix fell 5.4 below full text on Russian; z-score and distribution-based scaling, RRF and per-query
-- weights from the two lists' agreement, peaks or the query's word coverage each fell further below a half
-- on some set.
-- p_filter (05_search_filter.sql): both halves search the chunks that pass it.
CREATE OR REPLACE FUNCTION chunkyard_hybrid_search(
    p_collection      text,
    p_query           vector,
    p_query_text      text,
    p_k               integer DEFAULT 5,
    p_with_parent     boolean DEFAULT false,
    p_fusion          text DEFAULT 'auto',
    p_alpha           double precision DEFAULT 0.5,
    p_rrf_k           integer DEFAULT 60,
    p_candidates      integer DEFAULT 50,
    p_whole_section   double precision DEFAULT 0.5,
    p_filter          jsonb DEFAULT NULL
)
RETURNS SETOF chunkyard_hit
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_fusion IS NULL OR p_fusion NOT IN ('auto', 'convex', 'rrf') THEN
        RAISE EXCEPTION 'chunkyard_hybrid_search: p_fusion must be ''auto'', ''convex'' or ''rrf'', not %', quote_nullable(p_fusion)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_alpha IS NULL OR p_alpha < 0 OR p_alpha > 1 THEN
        RAISE EXCEPTION 'chunkyard_hybrid_search: p_alpha must be between 0 and 1, not %', quote_nullable(p_alpha)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH vec AS (
        SELECT v.chunk_id AS id, 1 - v.dist AS sim, row_number() OVER (ORDER BY v.dist, v.chunk_id) AS r
        FROM chunkyard_vector_candidates(p_collection, p_query, p_candidates, p_filter) v
    ),
    fts AS (
        SELECT f.chunk_id AS id, f.score AS bm25, row_number() OVER (ORDER BY f.score DESC, f.chunk_id) AS r
        FROM chunkyard_bm25(p_collection, p_query_text, p_candidates, p_filter => p_filter) f
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
        SELECT cand.id, cand.vr, cand.fr, coalesce(1 - x.dist, 0) AS sim, coalesce(cand.bm25, 0) AS bm25
        FROM cand
        LEFT JOIN chunkyard_vector_distances(p_collection, p_query, (SELECT array_agg(c2.id) FROM cand c2)) x
               ON x.chunk_id = cand.id
    ),
    -- the vector half's weight: p_alpha, or by the candidates' language ('auto', chunkyard_vector_weight)
    weight AS (
        SELECT CASE WHEN p_fusion = 'auto'
                    THEN chunkyard_vector_weight(p_collection, array_agg(cand.id), p_alpha)
                    ELSE p_alpha END AS alpha
        FROM cand
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
                    ELSE w.alpha * s.sim01 + (1 - w.alpha) * s.bm2501 END::float8 AS score,
               CASE WHEN p_fusion = 'rrf' THEN 0 ELSE s.sim END AS tie
        FROM scaled s CROSS JOIN weight w
    ),
    top AS (
        SELECT f.id, f.score, row_number() OVER (ORDER BY f.score DESC, f.tie DESC, f.id) AS rk
        FROM fused f
        ORDER BY rk
        LIMIT p_k
    )
    SELECT h.*
    FROM (SELECT array_agg(f.id ORDER BY f.rk) AS ids, array_agg(f.score ORDER BY f.rk) AS scores FROM top f) t
    CROSS JOIN LATERAL chunkyard_hits(t.ids, t.scores, p_with_parent, p_whole_section) h;
END
$$;
