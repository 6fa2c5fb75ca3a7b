-- Embedding sets (schema version 7): a collection's vectors of one model, in a partition of chunk_vectors of
-- their own, indexed for their dimension. Re-applied on every migrate (CREATE OR REPLACE).

-- A new set of a collection, with its partition (RLS policies as the parent's) and, unless p_index is false
-- (a set about to be bulk-filled), its HNSW index. SECURITY DEFINER: the pipeline's writer role creates a
-- collection's set without holding DDL rights itself (its search_path is pinned by 90_definers.sql).
CREATE OR REPLACE FUNCTION chunkyard_create_embedding_set(
    p_collection_id  bigint,
    p_model          text,
    p_dim            integer,
    p_status         text DEFAULT 'building',
    p_run_id         bigint DEFAULT NULL,
    p_index          boolean DEFAULT true
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
AS $$
DECLARE
    v_set  bigint;
    v_tab  text;
BEGIN
    IF p_dim IS NULL OR p_dim < 1 OR p_dim > 16000 THEN
        RAISE EXCEPTION 'chunkyard: an embedding dimension must be between 1 and 16000, not %', p_dim
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO embedding_sets (collection_id, model, dim, status, run_id, activated_at)
    VALUES (p_collection_id, p_model, p_dim, p_status, p_run_id, CASE WHEN p_status = 'active' THEN now() END)
    RETURNING id INTO v_set;
    v_tab := 'chunk_vectors_' || v_set;
    EXECUTE format('CREATE TABLE %I PARTITION OF chunk_vectors FOR VALUES IN (%s)', v_tab, v_set);
    -- read directly (as the search functions do), a partition applies its own policies, not its parent's
    EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING (EXISTS (SELECT 1 FROM chunks c WHERE c.id = chunk_id))',
                   v_tab || '_read', v_tab);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        EXECUTE format('CREATE POLICY %I ON %I FOR ALL TO chunkyard_writer USING (true) WITH CHECK (true)',
                       v_tab || '_write', v_tab);
    END IF;
    IF (SELECT relrowsecurity FROM pg_class WHERE oid = 'chunks'::regclass) THEN
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', v_tab);
    END IF;
    IF p_index THEN
        PERFORM chunkyard_vector_index(v_set, true);
    END IF;
    RETURN v_set;
END
$$;

-- Build (p_build) or drop the HNSW index of a set's partition: a bulk load drops it and builds it once after.
CREATE OR REPLACE FUNCTION chunkyard_vector_index(p_set_id bigint, p_build boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
AS $$
DECLARE
    v_dim  integer;
    v_ext  text;
    v_tab  text := 'chunk_vectors_' || p_set_id;
BEGIN
    SELECT s.dim INTO v_dim FROM embedding_sets s WHERE s.id = p_set_id;
    IF v_dim IS NULL OR to_regclass(v_tab) IS NULL THEN
        RETURN false;
    END IF;
    IF p_build THEN
        -- the vector type and operator class named in the extension's own schema (not on the pinned path)
        SELECT e.extnamespace::regnamespace::text INTO v_ext FROM pg_extension e WHERE e.extname = 'vector';
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I USING hnsw ((embedding::%s.vector(%s)) %s.vector_cosine_ops)',
                       v_tab || '_hnsw', v_tab, v_ext, v_dim, v_ext);
    ELSE
        EXECUTE format('DROP INDEX IF EXISTS %I', v_tab || '_hnsw');
    END IF;
    RETURN true;
END
$$;

-- Drop a set that no search reads (retired, or a building set given up) with its partition. Dropping a
-- partition waits for the searches still reading it: after p_lock_timeout it gives up (returns false) and the
-- collection's next run drops it.
CREATE OR REPLACE FUNCTION chunkyard_drop_embedding_set(p_set_id bigint, p_lock_timeout text DEFAULT '2s')
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
AS $$
BEGIN
    IF (SELECT s.status FROM embedding_sets s WHERE s.id = p_set_id) = 'active' THEN
        RAISE EXCEPTION 'chunkyard: embedding set % is the active one of its collection', p_set_id
            USING ERRCODE = 'object_in_use';
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    EXECUTE format('DROP TABLE IF EXISTS %I', 'chunk_vectors_' || p_set_id);
    DELETE FROM embedding_sets WHERE id = p_set_id;
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;

-- Make a complete set the one search reads, in the caller's transaction: the collection's active set is
-- retired (its partition dropped afterwards with chunkyard_drop_embedding_set).
CREATE OR REPLACE FUNCTION chunkyard_activate_embedding_set(p_set_id bigint) RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    UPDATE embedding_sets SET status = 'retired'
    WHERE status = 'active' AND id <> p_set_id
      AND collection_id = (SELECT s.collection_id FROM embedding_sets s WHERE s.id = p_set_id);
    UPDATE embedding_sets SET status = 'active', activated_at = now() WHERE id = p_set_id;
    UPDATE collections c SET dim = s.dim, updated_at = now()
    FROM embedding_sets s WHERE s.id = p_set_id AND c.id = s.collection_id;
END;

DO $$
BEGIN
    REVOKE EXECUTE ON FUNCTION chunkyard_create_embedding_set(bigint, text, integer, text, bigint, boolean),
        chunkyard_vector_index(bigint, boolean), chunkyard_drop_embedding_set(bigint, text) FROM PUBLIC;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        GRANT EXECUTE ON FUNCTION chunkyard_create_embedding_set(bigint, text, integer, text, bigint, boolean),
            chunkyard_vector_index(bigint, boolean), chunkyard_drop_embedding_set(bigint, text) TO chunkyard_writer;
    END IF;
END
$$;

-- The active vectors of every collection, with their model: what to join the chunk table with in SQL.
CREATE OR REPLACE VIEW chunk_embeddings WITH (security_invoker = true) AS
SELECT v.chunk_id, s.collection_id, s.model, s.dim, v.embedding
FROM chunk_vectors v JOIN embedding_sets s ON s.id = v.set_id AND s.status = 'active';

-- The p_n chunks nearest to p_query in a collection's active set (cosine distance), live documents only,
-- through the set's HNSW index (iterative scans go on until p_n rows pass the soft-delete filter). A search
-- that meets a set switched and dropped under it reads the new active set.
-- With p_filter (05_search_filter.sql) the index scan goes on until p_n chunks pass the filter too, up to
-- hnsw.max_scan_tuples of them; when the filter admits few chunks (documents holding at most 4000), or the
-- scan stopped short of p_n, every chunk that passes is measured instead (exact, and never short of p_n
-- when that many pass).
CREATE OR REPLACE FUNCTION chunkyard_vector_candidates(
    p_collection  text,
    p_query       vector,
    p_n           integer,
    p_filter      jsonb DEFAULT NULL
)
RETURNS TABLE (chunk_id bigint, dist double precision)
LANGUAGE plpgsql STABLE ROWS 10
SET hnsw.iterative_scan = 'relaxed_order'
SET hnsw.ef_search = 100
SET hnsw.max_scan_tuples = 50000
-- the filter's selectivity is unknown to the planner, which then prefers scanning and sorting the whole set
-- for p_n of 50 on a small collection (100 ms at 10k chunks against 5 ms through the index)
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_set    bigint;
    v_dim    integer;
    v_model  text;
    v_coll   bigint;
    v_ids    bigint[];
    v_dists  float8[];
    f        record;
BEGIN
    FOR attempt IN 1..3 LOOP
        SELECT s.id, s.dim, s.model, c.id INTO v_set, v_dim, v_model, v_coll
        FROM embedding_sets s JOIN collections c ON c.id = s.collection_id
        WHERE c.name = p_collection AND s.status = 'active';
        IF v_set IS NULL THEN
            RETURN;
        END IF;
        IF vector_dims(p_query) <> v_dim THEN
            RAISE EXCEPTION 'chunkyard: collection % is embedded with % (% dimensions); the query vector has %',
                p_collection, v_model, v_dim, vector_dims(p_query) USING ERRCODE = 'data_exception';
        END IF;
        SELECT * INTO f FROM chunkyard_search_filter(v_coll, p_filter);
        BEGIN
            IF NOT f.filtered THEN
                RETURN QUERY EXECUTE format(
                    'SELECT v.chunk_id, (v.embedding::vector(%1$s) <=> $1)::float8 FROM %2$I v
                     WHERE (SELECT d.deleted_at FROM chunks k JOIN documents d ON d.id = k.document_id
                            WHERE k.id = v.chunk_id) IS NULL
                     ORDER BY v.embedding::vector(%1$s) <=> $1 LIMIT $2',
                    v_dim, 'chunk_vectors_' || v_set) USING p_query, p_n;
                RETURN;
            END IF;
            IF NOT coalesce(f.chunks <= 4000, false) THEN
                EXECUTE format(
                    'SELECT array_agg(x.id ORDER BY x.dist, x.id), array_agg(x.dist ORDER BY x.dist, x.id)
                     FROM (SELECT v.chunk_id AS id, (v.embedding::vector(%1$s) <=> $1)::float8 AS dist FROM %2$I v
                           WHERE EXISTS (SELECT 1 FROM chunks k JOIN documents d ON d.id = k.document_id
                                         WHERE k.id = v.chunk_id
                                           AND chunkyard_filter_admits(k.document_id, k.language, k.metadata,
                                                   d.metadata, d.deleted_at, $3, $4, $5))
                           ORDER BY v.embedding::vector(%1$s) <=> $1 LIMIT $2) x',
                    v_dim, 'chunk_vectors_' || v_set)
                INTO v_ids, v_dists USING p_query, p_n, f.documents, f.languages, f.metadata;
                IF coalesce(cardinality(v_ids), 0) >= p_n THEN
                    RETURN QUERY SELECT * FROM unnest(v_ids, v_dists);
                    RETURN;
                END IF;
            END IF;
            -- every chunk that passes, measured (OFFSET 0: not through the index, which would stop early)
            RETURN QUERY EXECUTE format(
                'SELECT x.id, x.dist
                 FROM (SELECT v.chunk_id AS id, (v.embedding::vector(%1$s) <=> $1)::float8 AS dist FROM %2$I v
                       WHERE v.chunk_id IN (SELECT k.id FROM chunks k JOIN documents d ON d.id = k.document_id
                                            WHERE (k.document_id = ANY ($3) OR $3 IS NULL AND k.collection_id = $6)
                                              AND chunkyard_filter_admits(k.document_id, k.language, k.metadata,
                                                      d.metadata, d.deleted_at, $3, $4, $5))
                       OFFSET 0) x
                 ORDER BY x.dist, x.id LIMIT $2',
                v_dim, 'chunk_vectors_' || v_set)
            USING p_query, p_n, f.documents, f.languages, f.metadata, v_coll;
            RETURN;
        EXCEPTION WHEN undefined_table THEN
            NULL;  -- switched to another set meanwhile: read the new one
        END;
    END LOOP;
END
$$;

-- Exact cosine distances of the given chunks to p_query in the collection's active set.
CREATE OR REPLACE FUNCTION chunkyard_vector_distances(p_collection text, p_query vector, p_ids bigint[])
RETURNS TABLE (chunk_id bigint, dist double precision)
LANGUAGE plpgsql STABLE ROWS 50
AS $$
#variable_conflict use_column
DECLARE
    v_set  bigint;
    v_dim  integer;
BEGIN
    FOR attempt IN 1..3 LOOP
        SELECT s.id, s.dim INTO v_set, v_dim
        FROM embedding_sets s JOIN collections c ON c.id = s.collection_id
        WHERE c.name = p_collection AND s.status = 'active';
        IF v_set IS NULL OR vector_dims(p_query) <> v_dim THEN
            RETURN;  -- chunkyard_vector_candidates says why
        END IF;
        BEGIN
            RETURN QUERY EXECUTE format(
                'SELECT v.chunk_id, (v.embedding::vector(%1$s) <=> $1)::float8 FROM %2$I v WHERE v.chunk_id = ANY ($2)',
                v_dim, 'chunk_vectors_' || v_set) USING p_query, p_ids;
            RETURN;
        EXCEPTION WHEN undefined_table THEN
            NULL;
        END;
    END LOOP;
END
$$;
