-- chunkyard schema, version 5: least privilege, and optional row-level security per collection.
--
-- Two group roles (NOLOGIN; give them to login roles with GRANT):
--   chunkyard_reader  SELECT on every table, EXECUTE on the search functions: people and programs that query.
--   chunkyard_writer  SELECT, INSERT, UPDATE, DELETE and sequences: the pipeline, once the owner has migrated.
-- The owner of the schema (whoever runs `chunkyard db migrate`) keeps DDL. Roles are cluster-wide: an
-- owner without CREATEROLE gets a notice, and the grants are made for whichever roles exist.
--
-- Row-level security is off until `SELECT chunkyard_enable_rls()`; then a member of chunkyard_reader sees
-- only the collections granted to its login role or a group it belongs to
-- (`SELECT chunkyard_grant('docs', 'tenant_a')`). The
-- owner, superusers and chunkyard_writer are not restricted.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_reader') THEN
        CREATE ROLE chunkyard_reader NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        CREATE ROLE chunkyard_writer NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'chunkyard: no CREATEROLE privilege; create roles chunkyard_reader and chunkyard_writer yourself and re-run the grants of migration 005';
END
$$;

CREATE TABLE collection_readers (
    collection_id  bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    role_name      name NOT NULL,
    PRIMARY KEY (collection_id, role_name)
);

-- The collections the logged-in role may read under row-level security: those granted to a role it is a
-- member of. It runs as the owner (readers need no access to collection_readers), so it asks about
-- session_user, the login role (current_user inside it is the owner).
CREATE FUNCTION chunkyard_readable_collections() RETURNS bigint[]
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
AS $$
    SELECT coalesce(array_agg(r.collection_id), '{}')
    FROM collection_readers r
    WHERE pg_has_role(session_user, r.role_name, 'MEMBER')
$$;

CREATE FUNCTION chunkyard_grant(p_collection text, p_role name) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO collection_readers (collection_id, role_name)
    SELECT id, p_role FROM collections WHERE name = p_collection
    ON CONFLICT DO NOTHING
$$;

CREATE FUNCTION chunkyard_revoke(p_collection text, p_role name) RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM collection_readers r USING collections c
    WHERE c.id = r.collection_id AND c.name = p_collection AND r.role_name = p_role
$$;

-- Policies exist from here on but bind only where RLS is enabled (chunkyard_enable_rls below).
CREATE POLICY collections_read ON collections FOR SELECT
    USING (id IN (SELECT unnest(chunkyard_readable_collections())));
CREATE POLICY documents_read ON documents FOR SELECT
    USING (collection_id IN (SELECT unnest(chunkyard_readable_collections())));
CREATE POLICY sections_read ON sections FOR SELECT
    USING (EXISTS (SELECT 1 FROM documents d WHERE d.id = sections.document_id));
CREATE POLICY chunks_read ON chunks FOR SELECT
    USING (collection_id IN (SELECT unnest(chunkyard_readable_collections())));
CREATE POLICY runs_read ON runs FOR SELECT
    USING (collection_id IN (SELECT unnest(chunkyard_readable_collections())));
CREATE POLICY ingest_errors_read ON ingest_errors FOR SELECT
    USING (EXISTS (SELECT 1 FROM runs r WHERE r.id = ingest_errors.run_id));

DO $$
DECLARE
    t text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        FOREACH t IN ARRAY ARRAY['collections', 'documents', 'sections', 'chunks', 'runs', 'ingest_errors'] LOOP
            EXECUTE format('CREATE POLICY %I ON %I FOR ALL TO chunkyard_writer USING (true) WITH CHECK (true)',
                           t || '_write', t);
        END LOOP;
    END IF;
END
$$;

CREATE FUNCTION chunkyard_enable_rls() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['collections', 'documents', 'sections', 'chunks', 'runs', 'ingest_errors'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;

CREATE FUNCTION chunkyard_disable_rls() RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['collections', 'documents', 'sections', 'chunks', 'runs', 'ingest_errors'] LOOP
        EXECUTE format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY', t);
    END LOOP;
END
$$;

-- Grants, for the roles that exist; new tables and sequences of later migrations get the same.
DO $$
DECLARE
    s text := quote_ident(current_schema());
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_reader') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO chunkyard_reader', s);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %s TO chunkyard_reader', s);
        EXECUTE format('REVOKE SELECT ON collection_readers FROM chunkyard_reader');
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %s GRANT SELECT ON TABLES TO chunkyard_reader', s);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION chunkyard_grant(text, name), chunkyard_revoke(text, name), '
                       'chunkyard_enable_rls(), chunkyard_disable_rls() FROM PUBLIC');
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %s TO chunkyard_writer', s);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s TO chunkyard_writer', s);
        EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %s TO chunkyard_writer', s);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %s '
                       'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO chunkyard_writer', s);
        EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %s GRANT USAGE, SELECT ON SEQUENCES TO chunkyard_writer', s);
    END IF;
END
$$;
