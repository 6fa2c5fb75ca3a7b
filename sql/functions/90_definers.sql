-- Applied last, after every other function file. Every SECURITY DEFINER function of the schema runs as the
-- schema's owner, so it gets a pinned search_path: pg_catalog (implicitly first), this schema, and pg_temp
-- last. Without it a caller's temporary table, view or function named like ours (collection_readers,
-- embedding_sets, ...) is found first and runs or answers as the owner. Taken from the catalogue, so a
-- definer function added later is pinned too (tests/test_security.py fails for one that is not); each one
-- is also closed to PUBLIC here, and opened to chunkyard_reader or chunkyard_writer where it is defined.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef
             ORDER BY 1 LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
