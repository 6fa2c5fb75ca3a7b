-- chunkyard schema, version 6: row-level security covers the BM25 statistics too, so a reader limited to
-- some collections cannot read the words and frequencies of the others (fts_terms came with version 4).

CREATE POLICY fts_terms_read ON fts_terms FOR SELECT
    USING (collection_id IN (SELECT unnest(chunkyard_readable_collections())));

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        CREATE POLICY fts_terms_write ON fts_terms FOR ALL TO chunkyard_writer USING (true) WITH CHECK (true);
    END IF;
    -- a database that already has row-level security on keeps it consistent
    IF (SELECT relrowsecurity FROM pg_class WHERE oid = 'chunks'::regclass) THEN
        ALTER TABLE fts_terms ENABLE ROW LEVEL SECURITY;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION chunkyard_enable_rls() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['collections', 'documents', 'sections', 'chunks', 'runs', 'ingest_errors', 'fts_terms']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION chunkyard_disable_rls() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['collections', 'documents', 'sections', 'chunks', 'runs', 'ingest_errors', 'fts_terms']
    LOOP
        EXECUTE format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;
