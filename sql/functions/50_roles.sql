-- Granting a collection to a role under row-level security (migration 005). Re-applied on every migrate.
-- A grant of a collection or to a role that does not exist is an error: it used to do nothing, silently,
-- and a typo left a tenant without access (or the grant waiting for a role created later by someone else).
CREATE OR REPLACE FUNCTION chunkyard_grant(p_collection text, p_role name) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT c.id INTO v_id FROM collections c WHERE c.name = p_collection;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'chunkyard_grant: no collection %', quote_literal(p_collection)
            USING ERRCODE = 'undefined_object', HINT = 'SELECT name FROM collections lists them';
    END IF;
    IF to_regrole(quote_ident(p_role)) IS NULL THEN
        RAISE EXCEPTION 'chunkyard_grant: no role %', quote_literal(p_role)
            USING ERRCODE = 'undefined_object', HINT = 'create it first: CREATE ROLE ... IN ROLE chunkyard_reader';
    END IF;
    INSERT INTO collection_readers (collection_id, role_name) VALUES (v_id, p_role) ON CONFLICT DO NOTHING;
END
$$;
