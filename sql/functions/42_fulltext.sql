-- Full-text search: the query's lexemes in each of the collection's languages, candidates from the GIN
-- index, Okapi BM25 over them. Re-applied on every migrate (CREATE OR REPLACE).

-- The lexemes of a query: the query analysed with the full-text configuration of each language the
-- collection holds (its chunks were analysed with theirs), CJK runs as bigrams as chunks have them.
CREATE OR REPLACE FUNCTION chunkyard_query_lexemes(p_query_text text, p_languages text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (SELECT coalesce(array_agg(DISTINCT w.lexeme), '{}')
        FROM unnest(p_languages) AS l(language)
        CROSS JOIN LATERAL unnest(tsvector_to_array(
            to_tsvector(chunkyard_fts_config(l.language), chunkyard_fts_prepare(p_query_text)))) AS w(lexeme));

-- A lexeme as a tsquery operand, quoted so that no character is read as an operator.
CREATE OR REPLACE FUNCTION chunkyard_tsquery_word(p_lexeme text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN '''' || replace(replace(p_lexeme, '\', '\\'), '''', '''''') || '''';

-- Which chunks BM25 scores: a tsquery over the query's lexemes (rarest first, with their IDF and document
-- frequency). When all their matches are at most p_budget chunks, any of the words (exact BM25). Otherwise
-- a weighted quorum over the (up to) 6 rarest words: a chunk must hold words whose IDF adds up to a
-- threshold, the lowest one whose expected number of matches (words taken as independent) fits the budget,
-- and one that no chunk reaches without one of the rarest words (MaxScore's essential lists), so the index
-- scan costs about the posting lists of those words, not of the frequent ones, however large the collection.
-- Chunks holding only frequent words are left out: they score low, and they are most of a large collection.
CREATE OR REPLACE FUNCTION chunkyard_fts_candidates(
    p_terms text[], p_idf float8[], p_df float8[], p_n float8, p_budget integer
)
RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    WITH t AS (
        SELECT u.i, u.w, u.idf, least(greatest(u.df / p_n, 1e-9), 1 - 1e-9) AS p
        FROM unnest(p_terms, p_idf, p_df) WITH ORDINALITY AS u(w, idf, df, i)
        WHERE u.i <= 6
    ),
    masks AS (
        SELECT m.m, sum(t.idf) FILTER (WHERE m.m & (1 << (t.i - 1)::int) <> 0) AS mass,
               min(t.idf) FILTER (WHERE m.m & (1 << (t.i - 1)::int) <> 0) AS least_idf,
               exp(sum(ln(CASE WHEN m.m & (1 << (t.i - 1)::int) <> 0 THEN t.p ELSE 1 - t.p END))) AS prob
        FROM generate_series(1, (1 << (SELECT count(*) FROM t)::int) - 1) AS m(m) CROSS JOIN t
        GROUP BY m.m
    ),
    ranked AS (
        SELECT masks.*, sum(masks.prob) OVER (ORDER BY masks.mass DESC, masks.m) * p_n AS expected
        FROM masks
    ),
    required AS (
        -- the rarest words whose posting lists add up to at most 10 budgets (the rarest one at least): every
        -- candidate must hold one of them, so the GIN scan reads those lists and only skips through the rest
        SELECT coalesce(sum(t.idf) FILTER (WHERE t.i > greatest(1, (
                   SELECT count(*) FROM (SELECT sum(t2.p) OVER (ORDER BY t2.i) * p_n AS cum FROM t t2) c
                   WHERE c.cum <= 10.0 * p_budget))), 0) AS rest_mass
        FROM t
    ),
    threshold AS (
        -- the lowest mass whose masks (and all heavier ones) are expected to match within the budget, and
        -- above the mass of the words outside the required ones
        SELECT greatest(coalesce(min(r.mass) FILTER (WHERE r.expected <= p_budget), max(r.mass)),
                        (SELECT rest_mass FROM required) + 1e-9) AS tau
        FROM ranked r
    )
    SELECT CASE
        WHEN sum(p_df_all.df) <= p_budget
        THEN (SELECT string_agg(chunkyard_tsquery_word(x.w), ' | ')::tsquery FROM unnest(p_terms) AS x(w))
        ELSE (SELECT string_agg('(' || (SELECT string_agg(chunkyard_tsquery_word(t.w), ' & ')
                                        FROM t WHERE r.m & (1 << (t.i - 1)::int) <> 0) || ')', ' | ')::tsquery
              FROM ranked r, threshold th
              WHERE r.mass >= th.tau AND r.mass - r.least_idf < th.tau)
        END
    FROM unnest(p_df) AS p_df_all(df)
$$;

-- Okapi BM25 over the chunks' full-text vectors (each in its language's configuration): the top p_k chunks
-- for the words of the query, as (chunk_id, score). IDF comes from fts_terms and the collection's stored
-- lengths (kept current by triggers), candidates from the GIN index (chunkyard_fts_candidates: every match
-- when they are few, a weighted quorum of the rarest words when they are many), ranked by BM25 with each
-- chunk's length estimated from its count of distinct words; the best 2 * p_k + 20 are scored with their
-- exact lengths, and those exact scores are returned. The ranking of chunkyard_fulltext_search and of the
-- full-text half of chunkyard_hybrid_search.
-- p_filter (05_search_filter.sql): candidates pass it. The quorum's budget grows as the share of the
-- collection the filter's documents hold shrinks (every match is scored when they hold at most 4000 chunks);
-- a filter on language or metadata alone keeps the budget, so a rare match may be missed.
CREATE OR REPLACE FUNCTION chunkyard_bm25(
    p_collection      text,
    p_query_text      text,
    p_k               integer DEFAULT 5,
    p_k1              double precision DEFAULT 1.2,
    p_b               double precision DEFAULT 0.75,
    p_max_candidates  integer DEFAULT 1000,
    p_filter          jsonb DEFAULT NULL
)
RETURNS TABLE (chunk_id bigint, score double precision)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
DECLARE
    v_coll    bigint;
    v_n       float8;
    v_avgdl   float8;
    v_ratio   float8;
    v_terms   text[];
    v_idf     float8[];
    v_df      float8[];
    v_query   tsquery;
    v_langs   text[];
    v_budget  float8 := p_max_candidates;
    f         record;
BEGIN
    SELECT c.id, c.fts_chunks, c.fts_avg_len, c.fts_len_total::float8 / nullif(c.fts_lexemes_total, 0), c.languages
    INTO v_coll, v_n, v_avgdl, v_ratio, v_langs
    FROM collections c WHERE c.name = p_collection;
    IF coalesce(v_n, 0) = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO f FROM chunkyard_search_filter(v_coll, p_filter);
    IF f.chunks = 0 THEN
        RETURN;
    END IF;
    IF f.chunks <= 4000 THEN
        v_budget := 'Infinity';
    ELSIF f.chunks IS NOT NULL THEN
        v_budget := p_max_candidates * v_n / f.chunks;
    END IF;
    SELECT array_agg(t.lexeme ORDER BY t.df, t.lexeme),
           array_agg(ln(1 + (greatest(v_n, t.df) - t.df + 0.5) / (t.df + 0.5)) ORDER BY t.df, t.lexeme),
           array_agg(t.df::float8 ORDER BY t.df, t.lexeme)
    INTO v_terms, v_idf, v_df
    FROM fts_terms t
    WHERE t.collection_id = v_coll AND t.df > 0
      AND t.lexeme = ANY (chunkyard_query_lexemes(p_query_text, v_langs));
    IF v_terms IS NULL THEN
        RETURN;
    END IF;
    v_query := chunkyard_fts_candidates(v_terms, v_idf, v_df, v_n, least(v_budget, 2147483647)::integer);
    RETURN QUERY
    WITH q AS (
        SELECT u.w, u.idf FROM unnest(v_terms, v_idf) AS u(w, idf)
    ),
    cand AS (  -- BM25 with the length estimated from the number of distinct words (one detoast per chunk)
        SELECT c.id, c.tsv, c.document_id, (
                   SELECT sum(q.idf * f.tf * (p_k1 + 1)
                              / (f.tf + p_k1 * (1 - p_b + p_b * length(c.tsv) * v_ratio / v_avgdl)))
                   FROM unnest(ts_filter(setweight(c.tsv, 'A', v_terms), '{a}')) u
                   CROSS JOIN LATERAL (SELECT coalesce(array_length(u.positions, 1), 1)::float8 AS tf) f
                   JOIN q ON q.w = u.lexeme
               ) AS s
        FROM chunks c
        -- "+ 0": the GIN index finds the candidates, never a scan of the collection's rows (a generic plan
        -- cannot tell a large collection from a small one)
        WHERE c.collection_id + 0 = v_coll AND c.tsv @@ v_query
          AND (f.documents IS NULL OR c.document_id = ANY (f.documents))
        ORDER BY s DESC, c.id
    ),
    live AS (  -- the best of them whose document is not soft-deleted (and that pass the filter)
        SELECT cand.id, cand.tsv FROM cand
        WHERE CASE WHEN f.filtered
                   THEN EXISTS (SELECT 1 FROM chunks k JOIN documents d ON d.id = k.document_id
                                WHERE k.id = cand.id
                                  AND chunkyard_filter_admits(k.document_id, k.language, k.metadata, d.metadata,
                                                              d.deleted_at, f.documents, f.languages, f.metadata))
                   ELSE (SELECT d.deleted_at FROM documents d WHERE d.id = cand.document_id) IS NULL END
        LIMIT 2 * p_k + 20
    ),
    exact AS (
        SELECT l.id, (
            SELECT sum(q.idf * f.tf * (p_k1 + 1) / (f.tf + p_k1 * (1 - p_b + p_b * dl.n / v_avgdl)))::float8
            FROM unnest(ts_filter(setweight(l.tsv, 'A', v_terms), '{a}')) u
            CROSS JOIN LATERAL (SELECT coalesce(array_length(u.positions, 1), 1)::float8 AS tf) f
            JOIN q ON q.w = u.lexeme
        ) AS score
        FROM live l
        CROSS JOIN LATERAL (SELECT sum(coalesce(array_length(u.positions, 1), 1))::float8 AS n
                            FROM unnest(l.tsv) u) dl
    )
    SELECT e.id, e.score FROM exact e
    ORDER BY e.score DESC, e.id
    LIMIT p_k;
END
$$;

-- BM25 full-text search (chunkyard_bm25) with the rows of every search: the top p_k chunks for the words of
-- the query, any language the collection holds. p_whole_section is NULL (chunks only) by default here, so
-- that a caller reading the ranking (ids and scores, as before schema version 14) gets every chunk; 0.5
-- returns sections mostly retrieved whole, as the other searches do by default.
CREATE OR REPLACE FUNCTION chunkyard_fulltext_search(
    p_collection      text,
    p_query_text      text,
    p_k               integer DEFAULT 5,
    p_k1              double precision DEFAULT 1.2,
    p_b               double precision DEFAULT 0.75,
    p_max_candidates  integer DEFAULT 1000,
    p_with_parent     boolean DEFAULT false,
    p_whole_section   double precision DEFAULT NULL,
    p_filter          jsonb DEFAULT NULL
)
RETURNS SETOF chunkyard_hit
LANGUAGE sql STABLE
AS $$
    SELECT h.*
    FROM (SELECT array_agg(f.chunk_id ORDER BY f.score DESC, f.chunk_id) AS ids,
                 array_agg(f.score ORDER BY f.score DESC, f.chunk_id) AS scores
          FROM chunkyard_bm25(p_collection, p_query_text, p_k, p_k1, p_b, p_max_candidates, p_filter) f) t
    CROSS JOIN LATERAL chunkyard_hits(t.ids, t.scores, p_with_parent, p_whole_section) h
$$;
