-- chunkyard schema, version 14: one row type for every search, and a filter argument on every search.
--
-- chunkyard_search, chunkyard_fulltext_search, chunkyard_hybrid_search and chunkyard_context now return
-- rows of one composite type, chunkyard_hit (their columns were spelled out four times, and full-text
-- search returned ids and scores only); each search takes p_filter (docs/search-filters.md). A function's
-- result type cannot change in place, so every version of the search functions is dropped here and the
-- function files (re-applied after the migrations) create them again; so are the signatures of earlier
-- versions, which the function files used to drop themselves. Execute stays open to PUBLIC as before
-- (none of them is a definer function), and the type is usable by every role, as types are by default.

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace
               AND p.proname IN ('chunkyard_search', 'chunkyard_fulltext_search', 'chunkyard_hybrid_search',
                                 'chunkyard_context', 'chunkyard_hits', 'chunkyard_vector_candidates')
    LOOP
        EXECUTE format('DROP FUNCTION %s', f);
    END LOOP;
END
$$;

CREATE TYPE chunkyard_hit AS (
    chunk_id       bigint,            -- the chunk (a whole section: its best-ranked chunk)
    score          double precision,  -- the search's score; NULL for a chunk read to complete its section
    text           text,              -- the chunk's text, or the section's when whole
    source_uri     text,
    heading_path   text[],
    char_start     integer,           -- offsets into documents.normalized_text of text
    char_end       integer,
    section_id     bigint,
    parent_text    text,              -- the section's text when asked for (p_with_parent), else NULL
    metadata       jsonb,             -- the chunk's, with "whole_section" or "completes_section" when so
    tokens         integer,           -- tokens of this row (chunks.token_count; a whole section: its chunks')
    tokens_before  bigint             -- tokens of the rows before it, in order
);
COMMENT ON TYPE chunkyard_hit IS 'a row of every chunkyard search function (schema version 14)';
