-- The filter every search function takes, p_filter (docs/search-filters.md). Re-applied on every migrate.
--
-- p_filter is a JSON object; every key given must hold (AND), a list holds when any of its values does (OR):
--   source         a pattern or a list of them, over documents.source_uri (chunkyard_source_regex)
--   documents      document ids (documents.id), a number or a list: for a question about known documents
--   doc_type       documents.doc_type ('markdown', 'pdf', 'code', ...)
--   language       chunks.language, the ISO 639-1 code of the chunk's section ('' for no letters)
--   metadata       an object the chunk's metadata or its document's contains (jsonb @>)
--   updated_since  a timestamp: documents written (new or changed) at or after it (documents.updated_at)
-- NULL or '{}' filters nothing. An unknown key or a value of the wrong shape is an error naming it; a filter
-- that matches nothing returns no rows.

-- A source pattern as a regular expression over source_uri: `*` any characters but '/', `**` any characters,
-- `**/` any folders (none included), `?` one character but '/'; anything else literal. As in .gitignore, a
-- pattern matches at the start of the URI or after any '/', and a pattern that names a folder matches the
-- files below it: 'docs' and 'docs/**' match file:///home/me/docs/a.md, '*.md' every Markdown file,
-- '/home/me/docs/*.md' the ones directly in that folder (characters percent-encoded as in the URI).
CREATE OR REPLACE FUNCTION chunkyard_source_regex(p_pattern text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN '(^|/)' || coalesce((
    SELECT string_agg(CASE m.t[1] WHEN '**/' THEN '(.*/)?' WHEN '**' THEN '.*' WHEN '*' THEN '[^/]*'
                                  WHEN '?' THEN '[^/]'
                                  ELSE regexp_replace(m.t[1], '([.^$+(){}|\\\[\]])', '\\\1', 'g') END,
                      '' ORDER BY m.n)
    FROM regexp_matches(p_pattern, '(\*\*/|\*\*|\*|\?|[^*?]+)', 'g') WITH ORDINALITY AS m(t, n)), '')
    || '(/.*)?$';

-- The value of one key of a filter as a list of texts: a string (or number) is a list of one; NULL when the
-- key is absent or null. Anything else is an error naming the key.
CREATE OR REPLACE FUNCTION chunkyard_filter_list(p_filter jsonb, p_key text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v jsonb := p_filter -> p_key;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(v) IN ('string', 'number') THEN
        v := jsonb_build_array(v);
    END IF;
    IF jsonb_typeof(v) <> 'array'
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(v) e WHERE jsonb_typeof(e) NOT IN ('string', 'number')) THEN
        RAISE EXCEPTION 'p_filter: "%" must be a string or a list of strings, not %', p_key, v
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN ARRAY(SELECT e #>> '{}' FROM jsonb_array_elements(v) e);
END
$$;

-- A filter resolved for one collection: the live documents it admits (NULL when it names no document key:
-- source, documents, doc_type, updated_since), the languages and the metadata a chunk must have (NULL: any),
-- whether anything is filtered, and how many chunks the admitted documents hold (counted up to 20001; NULL
-- without document keys): at most 4000, the searches read every one of them rather than search an index.
CREATE OR REPLACE FUNCTION chunkyard_search_filter(
    p_collection_id  bigint,
    p_filter         jsonb,
    OUT documents    bigint[],
    OUT languages    text[],
    OUT metadata     jsonb,
    OUT filtered     boolean,
    OUT chunks       bigint
)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_key    text;
    v_src    text[];
    v_ids    bigint[];
    v_types  text[];
    v_since  timestamptz;
BEGIN
    filtered := p_filter IS NOT NULL AND jsonb_typeof(p_filter) <> 'null' AND p_filter <> '{}'::jsonb;
    IF NOT filtered THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_filter) <> 'object' THEN
        RAISE EXCEPTION 'p_filter must be a JSON object (docs/search-filters.md), not %', p_filter
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(p_filter) AS k
    WHERE k NOT IN ('source', 'documents', 'doc_type', 'language', 'metadata', 'updated_since') LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION 'p_filter: unknown key "%"; expected source, documents, doc_type, language, metadata or updated_since', v_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_src := chunkyard_filter_list(p_filter, 'source');
    v_types := chunkyard_filter_list(p_filter, 'doc_type');
    languages := chunkyard_filter_list(p_filter, 'language');
    BEGIN
        v_ids := chunkyard_filter_list(p_filter, 'documents')::bigint[];
        v_since := (p_filter ->> 'updated_since')::timestamptz;
    EXCEPTION WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow THEN
        RAISE EXCEPTION 'p_filter: "documents" must be document ids and "updated_since" a timestamp (%)', SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;
    metadata := p_filter -> 'metadata';
    IF metadata IS NOT NULL AND jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'p_filter: "metadata" must be a JSON object, not %', metadata
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_src IS NULL AND v_ids IS NULL AND v_types IS NULL AND v_since IS NULL THEN
        RETURN;
    END IF;
    documents := ARRAY(
        SELECT d.id FROM documents d
        WHERE d.collection_id = p_collection_id AND d.deleted_at IS NULL
          AND (v_ids IS NULL OR d.id = ANY (v_ids))
          AND (v_types IS NULL OR d.doc_type = ANY (v_types))
          AND (v_since IS NULL OR d.updated_at >= v_since)
          AND (v_src IS NULL OR d.source_uri ~ ANY (ARRAY(SELECT chunkyard_source_regex(s) FROM unnest(v_src) s)))
        ORDER BY d.id);
    chunks := (SELECT count(*) FROM (SELECT 1 FROM chunks k WHERE k.document_id = ANY (documents) LIMIT 20001) x);
END
$$;

-- Whether a chunk passes a resolved filter (chunkyard_search_filter's documents, languages, metadata), from its
-- row and its document's (k, d below): the one predicate every search applies to what it reads. A plain
-- expression, so the planner inlines it into the search's own plan (a call per chunk read cost 20 to 100 us).
CREATE OR REPLACE FUNCTION chunkyard_filter_admits(
    p_document_id     bigint,       -- k.document_id
    p_language        text,         -- k.language
    p_chunk_metadata  jsonb,        -- k.metadata
    p_doc_metadata    jsonb,        -- d.metadata
    p_deleted_at      timestamptz,  -- d.deleted_at
    p_documents       bigint[],
    p_languages       text[],
    p_metadata        jsonb
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT p_deleted_at IS NULL
           AND (p_documents IS NULL OR p_document_id = ANY (p_documents))
           AND (p_languages IS NULL OR p_language = ANY (p_languages))
           AND (p_metadata IS NULL OR p_chunk_metadata @> p_metadata OR p_doc_metadata @> p_metadata)
$$;
