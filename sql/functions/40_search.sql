-- Search functions users call directly. Re-applied on every migrate (CREATE OR REPLACE).

-- p_whole_section, the share of a section at which a search returns it whole and a context completes it:
-- NULL (no section rule) or above 0 and at most 1.
CREATE OR REPLACE FUNCTION chunkyard_check_share(p_share double precision) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_share IS NOT NULL AND NOT (p_share > 0 AND p_share <= 1) THEN
        RAISE EXCEPTION 'p_whole_section must be NULL (chunks only, no section completed) or a share of a section above 0 and at most 1, not %',
            p_share USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- Sections returned whole: given chunk ids in rank order, a section whose ranked chunks cover at least
-- p_share of its characters is returned whole at the rank of its best chunk (whole = true, with the
-- section's text and offsets, outer whitespace stripped), and its other chunks are dropped; with p_share
-- NULL every chunk comes back as itself (text and offsets NULL: the chunk's own). What the search functions
-- apply to their top k (p_whole_section): when most of a section is retrieved, the answer is usually the
-- section.
CREATE OR REPLACE FUNCTION chunkyard_whole_sections(p_ids bigint[], p_share double precision)
RETURNS TABLE (chunk_id bigint, rank bigint, whole boolean, text text, char_start integer, char_end integer)
LANGUAGE plpgsql STABLE
AS $$
#variable_conflict use_column
BEGIN
    PERFORM chunkyard_check_share(p_share);
    RETURN QUERY
    WITH hit AS (
        SELECT u.id, u.ord, c.section_id, (c.char_end - c.char_start)::float8 AS len,
               (s.char_end - s.char_start)::float8 AS sec_len
        FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
        JOIN chunks c ON c.id = u.id
        JOIN sections s ON s.id = c.section_id
    ),
    sec AS (
        SELECT h.section_id, min(h.ord) AS first,
               coalesce(p_share IS NOT NULL AND sum(h.len) >= p_share * max(h.sec_len), false) AS whole
        FROM hit h
        GROUP BY h.section_id
    ),
    kept AS (
        SELECT h.id, h.ord, x.whole, h.section_id
        FROM hit h JOIN sec x ON x.section_id = h.section_id
        WHERE NOT x.whole OR h.ord = x.first
    )
    -- a section that is no more than its one retrieved chunk comes back as that chunk
    SELECT k.id, k.ord, t.cs IS NOT NULL, t.txt, t.cs, t.ce
    FROM kept k
    JOIN chunks c ON c.id = k.id
    LEFT JOIN LATERAL (
        SELECT btrim(r.raw, E' \t\n\r\f\v') AS txt,
               r.s + length(r.raw) - length(ltrim(r.raw, E' \t\n\r\f\v')) AS cs,
               r.e - (length(r.raw) - length(rtrim(r.raw, E' \t\n\r\f\v'))) AS ce
        FROM (SELECT substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) AS raw,
                     s.char_start AS s, s.char_end AS e
              FROM sections s JOIN documents d ON d.id = s.document_id
              WHERE k.whole AND s.id = k.section_id) r
    ) t ON (t.cs, t.ce) IS DISTINCT FROM (c.char_start, c.char_end)
    ORDER BY k.ord;
END
$$;

-- The rows every search returns (chunkyard_hit), from its ranked chunk ids and their scores: the chunk (or its
-- section whole, chunkyard_whole_sections at p_whole_section), file, heading path, offsets, the parent
-- section's text on request, the chunk's metadata ("whole_section": true on a section), and what each row
-- costs in tokens (a whole section: the tokens of its chunks) with the tokens of the rows before it, in rank
-- order.
CREATE OR REPLACE FUNCTION chunkyard_hits(
    p_ids             bigint[],
    p_scores          double precision[],
    p_with_parent     boolean,
    p_whole_section   double precision
)
RETURNS SETOF chunkyard_hit
LANGUAGE sql STABLE
AS $$
    SELECT c.id, p_scores[w.rank], coalesce(w.text, c.text), d.source_uri, s.heading_path,
           coalesce(w.char_start, c.char_start), coalesce(w.char_end, c.char_end), c.section_id,
           CASE WHEN p_with_parent
                THEN substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) END,
           CASE WHEN w.whole THEN c.metadata || '{"whole_section": true}' ELSE c.metadata END,
           t.n, (sum(t.n) OVER (ORDER BY w.rank) - t.n)::bigint
    FROM chunkyard_whole_sections(p_ids, p_whole_section) w
    JOIN chunks c ON c.id = w.chunk_id
    JOIN documents d ON d.id = c.document_id
    JOIN sections s ON s.id = c.section_id
    CROSS JOIN LATERAL (
        SELECT CASE WHEN w.whole
                    THEN (SELECT sum(k.token_count)::integer FROM chunks k WHERE k.section_id = c.section_id)
                    ELSE c.token_count END AS n
    ) t
    ORDER BY w.rank
$$;

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

-- A context of p_budget tokens read from a ranking (chunk ids in rank order with their scores, from any
-- search above asked for chunks only, p_whole_section => NULL): the chunks in rank order, and once the
-- chunks read from one section cover at least p_whole_section of its characters (the share at which the
-- searches return a section whole), the rest of that section at once, in document order, every chunk
-- counted against the budget. Rows in reading order, each with its tokens (chunks.token_count, the
-- collection's unit: cl100k tokens by default) and the tokens read before it; reading stops once the budget
-- is spent, so the last row may go past it (a caller that needs exactly p_budget cuts that row's text).
-- p_budget NULL: every chunk of the ranking; p_whole_section NULL: no section completed. Rows read to
-- complete a section have a NULL score and metadata "completes_section": true.
CREATE OR REPLACE FUNCTION chunkyard_context(
    p_ids             bigint[],
    p_scores          double precision[],
    p_budget          integer,
    p_whole_section   double precision DEFAULT 0.5,
    p_with_parent     boolean DEFAULT false
)
RETURNS SETOF chunkyard_hit
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_read   bigint[] := '{}';   -- chunk ids in reading order
    v_rank   integer[] := '{}';  -- their rank in p_ids; NULL for a chunk read to complete its section
    v_scores float8[] := '{}';   -- their scores (p_scores at their rank)
    v_secs   bigint[] := '{}';   -- sections met so far, with the characters of theirs read (v_cov)
    v_cov    float8[] := '{}';
    v_spent  bigint := 0;
    v_at     integer;
    r        record;
    c        record;
BEGIN
    PERFORM chunkyard_check_share(p_whole_section);
    IF p_budget IS NOT NULL AND p_budget <= 0 THEN
        RAISE EXCEPTION 'p_budget must be NULL (no limit) or a positive number of tokens, not %', p_budget
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR r IN SELECT u.id, u.ord::integer AS ord, ch.section_id AS sec, ch.token_count AS n,
                    (ch.char_end - ch.char_start)::float8 AS len, (s.char_end - s.char_start)::float8 AS sec_len
             FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
             JOIN chunks ch ON ch.id = u.id
             JOIN sections s ON s.id = ch.section_id
             ORDER BY u.ord
    LOOP
        EXIT WHEN p_budget IS NOT NULL AND v_spent >= p_budget;
        CONTINUE WHEN r.id = ANY (v_read);
        v_read := v_read || r.id;
        v_rank := v_rank || r.ord;
        v_scores := v_scores || p_scores[r.ord];
        v_spent := v_spent + r.n;
        CONTINUE WHEN p_whole_section IS NULL;
        v_at := array_position(v_secs, r.sec);
        IF v_at IS NULL THEN
            v_secs := v_secs || r.sec;
            v_cov := v_cov || r.len;
            v_at := cardinality(v_secs);
        ELSE
            v_cov[v_at] := v_cov[v_at] + r.len;
        END IF;
        IF r.sec_len > 0 AND v_cov[v_at] >= p_whole_section * r.sec_len THEN
            -- every chunk of the section is read now, so it is never met (nor completed) again
            FOR c IN SELECT ch.id, ch.token_count AS n
                     FROM chunks ch
                     WHERE ch.section_id = r.sec AND NOT (ch.id = ANY (v_read))
                     ORDER BY ch.char_start, ch.id
            LOOP
                v_read := v_read || c.id;
                v_rank := v_rank || NULL::integer;
                v_scores := v_scores || NULL::float8;
                v_spent := v_spent + c.n;
            END LOOP;
        END IF;
    END LOOP;
    -- the rows every search returns (chunkyard_hits, each chunk as itself, with what it costs)
    RETURN QUERY
    SELECT h.chunk_id, h.score, h.text, h.source_uri, h.heading_path, h.char_start, h.char_end, h.section_id,
           h.parent_text,
           CASE WHEN o.rk IS NULL THEN h.metadata || '{"completes_section": true}' ELSE h.metadata END,
           h.tokens, h.tokens_before
    FROM unnest(v_read, v_rank) WITH ORDINALITY AS o(id, rk, pos)
    JOIN chunkyard_hits(v_read, v_scores, p_with_parent, NULL) h ON h.chunk_id = o.id
    -- a section completed near the end of the budget is read only until the budget is spent
    WHERE p_budget IS NULL OR h.tokens_before < p_budget
    ORDER BY o.pos;
END
$$;
