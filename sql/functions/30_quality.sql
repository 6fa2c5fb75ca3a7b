-- Chunk quality figures of a collection (its live documents), computed at the end of every run and stored
-- in runs.quality (migration 008); the view chunkyard_run_quality shows them as typed rows. Re-applied on
-- every migrate. pipeline/store/quality.py passes the thresholds (one place for them).
--
-- One object per document type and one for 'all', each holding counts (shares are derived from them):
--   documents, sections, chunks        live rows
--   tokens_mean/_p50/_p95/_max         chunks.token_count, in the unit of the type's chunker
--   budget                             the profile's size for the type (null for 'all')
--   at_budget                          chunks with token_count >= p_fill * budget: the chunk ended because the
--                                      budget was (about) full, not at a boundary of the text
--   tiny                               chunks with token_count < p_tiny
--   duplicates                         chunks whose content_hash occurs more than once among the collection's
--                                      live chunks (every copy counts); duplicate_texts: those distinct hashes
--   empty_sections                     sections without a chunk; chunks_per_section_mean/_p50/_max over all
--   text_chars                         length of the normalized texts (boilerplate is dropped before: not in it)
--   uncovered_chars                    characters of the normalized text inside no chunk's span
--   uncovered_text_chars               of those, the ones that are not whitespace: must be 0
--   histogram                          chunks per token bucket: bucket 0 is < p_edges[1], bucket i is
--                                      [p_edges[i], p_edges[i+1]), the last >= the last edge
-- Characters of a text that are not whitespace, whitespace as Python's str.isspace has it (what chunks are
-- stripped of: pipeline/model.py strip_span), whatever the database's locale.
CREATE OR REPLACE FUNCTION chunkyard_nonspace_chars(p_text text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN length(regexp_replace(p_text, '[\s\u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+', '', 'g'));

CREATE OR REPLACE FUNCTION chunkyard_quality_figures(
    p_collection bigint, p_tiny integer, p_fill double precision, p_edges integer[]
) RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    WITH d AS (
        SELECT id, doc_type, normalized_text AS t
        FROM documents WHERE collection_id = p_collection AND deleted_at IS NULL
    ),
    budget AS (
        SELECT p.key AS doc_type, (p.value ->> 'size')::integer AS size
        FROM collections c CROSS JOIN LATERAL jsonb_each(c.profile) AS p
        WHERE c.id = p_collection AND jsonb_typeof(p.value) = 'object'
    ),
    -- reach: the furthest end of the document's chunks before this one, so that a chunk overlapping the one
    -- before (an overlap setting) counts only its new part towards the covered text
    k AS (
        SELECT w.document_id, w.section_id, w.char_start, w.char_end, w.token_count, w.content_hash, w.doc_type,
               count(*) OVER (PARTITION BY w.content_hash) AS copies,
               CASE WHEN w.char_end > w.reach
                    THEN chunkyard_nonspace_chars(substr(w.text, greatest(w.char_start, w.reach) - w.char_start + 1))
                    ELSE 0 END AS new_nonspace
        FROM (SELECT k.document_id, k.section_id, k.char_start, k.char_end, k.token_count, k.content_hash, k.text,
                     d.doc_type,
                     coalesce(max(k.char_end) OVER (PARTITION BY k.document_id ORDER BY k.char_start, k.char_end
                                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS reach
              FROM chunks k JOIN d ON d.id = k.document_id
              WHERE k.collection_id = p_collection) w
    ),
    groups AS (
        SELECT 'all'::text AS g UNION SELECT DISTINCT doc_type FROM d
    ),
    -- every row counts twice: under its document type and under 'all'
    chunk_fig AS (
        SELECT x.g,
               count(*) AS chunks,
               round(avg(k.token_count), 1) AS tokens_mean,
               percentile_disc(0.5) WITHIN GROUP (ORDER BY k.token_count) AS tokens_p50,
               percentile_disc(0.95) WITHIN GROUP (ORDER BY k.token_count) AS tokens_p95,
               max(k.token_count) AS tokens_max,
               count(*) FILTER (WHERE k.token_count >= p_fill * b.size) AS at_budget,
               count(*) FILTER (WHERE k.token_count < p_tiny) AS tiny,
               count(*) FILTER (WHERE k.copies > 1) AS duplicates,
               count(DISTINCT k.content_hash) FILTER (WHERE k.copies > 1) AS duplicate_texts
        FROM k LEFT JOIN budget b ON b.doc_type = k.doc_type
        CROSS JOIN LATERAL (VALUES (k.doc_type), ('all')) AS x(g)
        GROUP BY x.g
    ),
    hist AS (
        SELECT h.g, jsonb_agg(coalesce(n.n, 0) ORDER BY h.bucket) AS histogram
        FROM (SELECT g, bucket FROM groups, generate_series(0, cardinality(p_edges)) AS bucket) h
        LEFT JOIN (
            SELECT x.g, width_bucket(k.token_count, p_edges) AS bucket, count(*) AS n
            FROM k CROSS JOIN LATERAL (VALUES (k.doc_type), ('all')) AS x(g)
            GROUP BY 1, 2
        ) n ON n.g = h.g AND n.bucket = h.bucket
        GROUP BY h.g
    ),
    per_section AS (
        SELECT d.doc_type, count(k.section_id) AS n
        FROM sections s JOIN d ON d.id = s.document_id
        LEFT JOIN k ON k.section_id = s.id
        GROUP BY s.id, d.doc_type
    ),
    section_fig AS (
        SELECT x.g,
               count(*) AS sections,
               count(*) FILTER (WHERE s.n = 0) AS empty_sections,
               round(avg(s.n), 2) AS chunks_per_section_mean,
               percentile_disc(0.5) WITHIN GROUP (ORDER BY s.n) AS chunks_per_section_p50,
               max(s.n) AS chunks_per_section_max
        FROM per_section s CROSS JOIN LATERAL (VALUES (s.doc_type), ('all')) AS x(g)
        GROUP BY x.g
    ),
    -- uncovered: characters in no chunk's span (multirange arithmetic, no text read); uncovered text: the
    -- document's characters that are not whitespace, less those its chunks cover (one pass over each text:
    -- cutting every gap out of a long text instead took 40 s on 12k chunks)
    covered AS (
        SELECT document_id, range_agg(int4range(char_start, char_end)) AS spans, sum(new_nonspace) AS nonspace
        FROM k GROUP BY document_id
    ),
    doc_cov AS MATERIALIZED (  -- materialized: each text is read once, not once per group it counts in
        SELECT d.doc_type, length(d.t) AS chars,
               length(d.t) - coalesce((SELECT sum(upper(r) - lower(r)) FROM unnest(c.spans) AS r), 0) AS uncovered,
               chunkyard_nonspace_chars(d.t) - coalesce(c.nonspace, 0) AS uncovered_text
        FROM d LEFT JOIN covered c ON c.document_id = d.id
    ),
    doc_fig AS (
        SELECT x.g, count(*) AS documents, sum(c.chars) AS text_chars, sum(c.uncovered) AS uncovered_chars,
               sum(c.uncovered_text) AS uncovered_text_chars
        FROM doc_cov c CROSS JOIN LATERAL (VALUES (c.doc_type), ('all')) AS x(g)
        GROUP BY x.g
    )
    SELECT jsonb_object_agg(g.g, jsonb_build_object(
               'documents', coalesce(df.documents, 0),
               'sections', coalesce(sf.sections, 0),
               'chunks', coalesce(cf.chunks, 0),
               'tokens_mean', cf.tokens_mean,
               'tokens_p50', cf.tokens_p50,
               'tokens_p95', cf.tokens_p95,
               'tokens_max', cf.tokens_max,
               'budget', b.size,
               'at_budget', coalesce(cf.at_budget, 0),
               'tiny', coalesce(cf.tiny, 0),
               'duplicates', coalesce(cf.duplicates, 0),
               'duplicate_texts', coalesce(cf.duplicate_texts, 0),
               'empty_sections', coalesce(sf.empty_sections, 0),
               'chunks_per_section_mean', sf.chunks_per_section_mean,
               'chunks_per_section_p50', sf.chunks_per_section_p50,
               'chunks_per_section_max', sf.chunks_per_section_max,
               'text_chars', coalesce(df.text_chars, 0),
               'uncovered_chars', coalesce(df.uncovered_chars, 0),
               'uncovered_text_chars', coalesce(df.uncovered_text_chars, 0),
               'histogram', h.histogram,
               'histogram_edges', to_jsonb(p_edges)))
    FROM groups g
    LEFT JOIN chunk_fig cf ON cf.g = g.g
    LEFT JOIN section_fig sf ON sf.g = g.g
    LEFT JOIN doc_fig df ON df.g = g.g
    LEFT JOIN hist h ON h.g = g.g
    LEFT JOIN budget b ON b.doc_type = g.g
$$;
