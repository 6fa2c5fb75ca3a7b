-- Search results: one row type (chunkyard_hit, migration 014) for every search, whole sections, and the
-- context read from a ranking. Re-applied on every migrate (CREATE OR REPLACE).

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
