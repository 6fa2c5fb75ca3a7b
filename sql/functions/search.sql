-- Search functions users call directly. Re-applied on every migrate (CREATE OR REPLACE).

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
    parent_text   text
)
LANGUAGE sql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
SET hnsw.ef_search = 100
AS $$
    WITH top AS (
        SELECT c.id, c.embedding <=> p_query AS dist, c.text, c.document_id, c.section_id,
               c.char_start, c.char_end
        FROM chunks c
        JOIN collections col ON col.id = c.collection_id AND col.name = p_collection
        JOIN documents dd ON dd.id = c.document_id AND dd.deleted_at IS NULL
        ORDER BY c.embedding <=> p_query
        LIMIT p_k
    )
    SELECT t.id, 1 - t.dist, t.text, d.source_uri, s.heading_path, t.char_start, t.char_end, t.section_id,
           CASE WHEN p_with_parent
                THEN substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) END
    FROM top t
    JOIN documents d ON d.id = t.document_id
    JOIN sections s ON s.id = t.section_id
    ORDER BY t.dist, t.id
$$;

-- Hybrid: vector similarity and Postgres full-text search fused by reciprocal rank fusion.
CREATE OR REPLACE FUNCTION chunkyard_hybrid_search(
    p_collection      text,
    p_query           vector,
    p_query_text      text,
    p_k               integer DEFAULT 5,
    p_with_parent     boolean DEFAULT false,
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
    parent_text   text
)
LANGUAGE sql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
SET hnsw.ef_search = 100
AS $$
    WITH col AS (SELECT id FROM collections WHERE name = p_collection),
    vec AS (
        SELECT c.id, row_number() OVER (ORDER BY c.embedding <=> p_query, c.id) AS r
        FROM (SELECT c.id, c.embedding FROM chunks c
              JOIN col ON c.collection_id = col.id
              JOIN documents dd ON dd.id = c.document_id AND dd.deleted_at IS NULL
              ORDER BY c.embedding <=> p_query LIMIT p_candidates) c
    ),
    -- ANY of the query's words, English stop words dropped: a question rarely has ALL its words in one chunk
    -- (with AND semantics 463 of Chroma's 472 questions matched nothing and hybrid was vector search).
    q AS (
        SELECT coalesce(to_tsquery('simple', string_agg(quote_literal(w), ' | ')), ''::tsquery) AS tsq
        FROM unnest(tsvector_to_array(to_tsvector('simple', p_query_text))) AS w
        WHERE length(to_tsvector('english', w)) > 0
    ),
    -- ts_rank with length normalization 1 (divide by 1 + log length), so long chunks do not win by size.
    fts AS (
        SELECT c.id, row_number() OVER (ORDER BY ts_rank(c.tsv, q.tsq, 1) DESC, c.id) AS r
        FROM chunks c
        JOIN col ON c.collection_id = col.id
        JOIN documents dd ON dd.id = c.document_id AND dd.deleted_at IS NULL
        CROSS JOIN q
        WHERE c.tsv @@ q.tsq
        ORDER BY ts_rank(c.tsv, q.tsq, 1) DESC, c.id
        LIMIT p_candidates
    ),
    fused AS (
        SELECT id, sum(1.0 / (p_rrf_k + r)) AS score
        FROM (SELECT id, r FROM vec UNION ALL SELECT id, r FROM fts) u
        GROUP BY id
        ORDER BY score DESC, id
        LIMIT p_k
    )
    SELECT c.id, f.score::double precision, c.text, d.source_uri, s.heading_path, c.char_start, c.char_end,
           c.section_id,
           CASE WHEN p_with_parent
                THEN substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) END
    FROM fused f
    JOIN chunks c ON c.id = f.id
    JOIN documents d ON d.id = c.document_id
    JOIN sections s ON s.id = c.section_id
    ORDER BY f.score DESC, c.id
$$;
