-- chunkyard schema, version 11: definer functions safe from a caller's temporary objects, and the embedding
-- cache closed to readers.
--
-- The search_path of every SECURITY DEFINER function is pinned by functions/90_definers.sql (re-applied after
-- every migration). chunkyard_readable_collections() was open to PUBLIC: only the roles whose rows its
-- policies filter need it. embedding_cache holds every tenant's vectors keyed by a text hash, with no
-- collection to filter by: a reader could read other tenants' vectors and confirm that a guessed text is
-- stored. Readers never need it (queries are embedded by the model, not looked up).

REVOKE EXECUTE ON FUNCTION chunkyard_readable_collections() FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_reader') THEN
        GRANT EXECUTE ON FUNCTION chunkyard_readable_collections() TO chunkyard_reader;
        REVOKE ALL ON embedding_cache FROM chunkyard_reader;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chunkyard_writer') THEN
        GRANT EXECUTE ON FUNCTION chunkyard_readable_collections() TO chunkyard_writer;
    END IF;
END
$$;
