-- chunkyard schema, version 7: any embedding model, per collection, and model changes without downtime.
--
-- A collection's vectors are an *embedding set*: one model, one dimension. Its vectors live in a partition of
-- chunk_vectors of its own (chunk_vectors_<set id>), with an HNSW index for its dimension, so collections of
-- 384- and 768-dimensional models live side by side, each searched through its own index. Exactly one set of
-- a collection is 'active' (what search reads); a 'building' one is filled by `chunkyard reindex --model`
-- while search keeps serving the active one, and replaces it in one transaction when complete. Chunk rows are
-- shared by every set: only vectors are new.
--
-- Why a partition per set rather than one table with a partial index per collection: a set's vectors go
-- with one DROP (a retired model leaves no dead rows to vacuum), a set is written and indexed on its own, and
-- each partition's index has a plain typed expression; `chunk_vectors` stays one name to query in SQL.
--
-- chunks.embedding and chunks.model move out: every existing collection gets a set holding its vectors.
-- collections.model is now the model the chunks were *sized* with (its tokenizer bounds chunk lengths, and
-- it is part of their fingerprints); the embedding model is the active set's.

CREATE TABLE embedding_sets (
    id             bigserial PRIMARY KEY,
    collection_id  bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    model          text NOT NULL,              -- embedding key: model, and backend tag when not torch
    dim            integer NOT NULL CHECK (dim BETWEEN 1 AND 16000),
    status         text NOT NULL DEFAULT 'building' CHECK (status IN ('building', 'active', 'retired')),
    run_id         bigint REFERENCES runs (id) ON DELETE SET NULL,   -- the run that built it
    created_at     timestamptz NOT NULL DEFAULT now(),
    activated_at   timestamptz
);
CREATE UNIQUE INDEX embedding_sets_active ON embedding_sets (collection_id) WHERE status = 'active';
CREATE UNIQUE INDEX embedding_sets_building ON embedding_sets (collection_id) WHERE status = 'building';

CREATE TABLE chunk_vectors (
    chunk_id   bigint NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    set_id     bigint NOT NULL,
    embedding  vector NOT NULL,
    PRIMARY KEY (chunk_id, set_id)
) PARTITION BY LIST (set_id);

-- The embedding cache holds vectors of any dimension (keyed by model, as before).
ALTER TABLE embedding_cache ALTER COLUMN embedding TYPE vector;

-- Existing collections: one active set each, with the vectors their chunks hold.
DO $$
DECLARE
    c record;
    v_set bigint;
BEGIN
    FOR c IN SELECT id, model, dim FROM collections ORDER BY id LOOP
        INSERT INTO embedding_sets (collection_id, model, dim, status, activated_at)
        VALUES (c.id, c.model, c.dim, 'active', now()) RETURNING id INTO v_set;
        EXECUTE format('CREATE TABLE %I PARTITION OF chunk_vectors FOR VALUES IN (%s)', 'chunk_vectors_' || v_set, v_set);
        EXECUTE format('INSERT INTO %I (chunk_id, set_id, embedding) SELECT id, %s, embedding FROM chunks WHERE collection_id = %s',
                       'chunk_vectors_' || v_set, v_set, c.id);
        EXECUTE format('CREATE INDEX %I ON %I USING hnsw ((embedding::vector(%s)) vector_cosine_ops)',
                       'chunk_vectors_' || v_set || '_hnsw', 'chunk_vectors_' || v_set, c.dim);
    END LOOP;
END
$$;

ALTER TABLE chunks DROP COLUMN embedding;  -- drops chunks_embedding_hnsw with it
ALTER TABLE chunks DROP COLUMN model;

-- Row-level security: a reader sees the sets and vectors of the collections it may read.
CREATE POLICY embedding_sets_read ON embedding_sets FOR SELECT
    USING (collection_id IN (SELECT unnest(chunkyard_readable_collections())));
CREATE POLICY chunk_vectors_read ON chunk_vectors FOR SELECT
    USING (EXISTS (SELECT 1 FROM chunks c WHERE c.id = chunk_vectors.chunk_id));
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        CREATE POLICY embedding_sets_write ON embedding_sets FOR ALL TO chunkyard_writer USING (true) WITH CHECK (true);
        CREATE POLICY chunk_vectors_write ON chunk_vectors FOR ALL TO chunkyard_writer USING (true) WITH CHECK (true);
    END IF;
    IF (SELECT relrowsecurity FROM pg_class WHERE oid = 'chunks'::regclass) THEN
        ALTER TABLE embedding_sets ENABLE ROW LEVEL SECURITY;
        ALTER TABLE chunk_vectors ENABLE ROW LEVEL SECURITY;
    END IF;
END
$$;

-- Every table with a chunkyard policy, from here on (embedding sets' partitions included): later tables need
-- only their policies.
CREATE FUNCTION chunkyard_set_rls(p_on boolean) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT DISTINCT p.tablename FROM pg_policies p WHERE p.schemaname = current_schema() ORDER BY 1 LOOP
        EXECUTE format('ALTER TABLE %I %s ROW LEVEL SECURITY', t, CASE WHEN p_on THEN 'ENABLE' ELSE 'DISABLE' END);
    END LOOP;
END
$$;
REVOKE EXECUTE ON FUNCTION chunkyard_set_rls(boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION chunkyard_enable_rls() RETURNS void LANGUAGE sql VOLATILE
AS $$ SELECT chunkyard_set_rls(true) $$;

CREATE OR REPLACE FUNCTION chunkyard_disable_rls() RETURNS void LANGUAGE sql VOLATILE
AS $$ SELECT chunkyard_set_rls(false) $$;
