"""The collection lock a run holds while it writes: taken at once, or waited for with word of who holds it."""

from __future__ import annotations

import logging

import psycopg

from pipeline import store
from pipeline.errors import TransientError

log = logging.getLogger("pipeline.run")


def take_lock(
    conn: psycopg.Connection,
    collection: str,
    collection_id: int,
    *,
    wait: bool,
    timeout_s: float,
    explicit: bool = False,
) -> None:
    """Take the collection's lock; while it waits, say once who holds it, and give up after `timeout_s`
    (0: never) with a line that says what to do: any role that can connect can hold this lock. A holder
    whose role may write runs is taken for another run and waited for without a limit, unless the limit
    was set (`explicit`)."""
    if store.lock_collection(conn, collection_id, wait=False):
        return
    if not wait:
        raise TransientError(f"another run is writing collection {collection!r}; try again when it ends")
    holders = store.lock_holders(conn, collection_id)
    who = ", ".join(h.describe() for h in holders) or "a session that has just released it"
    if holders and all(h.writer for h in holders) and not explicit:
        timeout_s = 0  # another run (a long backfill, a model switch): queue behind it, as runs always have
    limit = f"up to {timeout_s:g} s" if timeout_s > 0 else "with no time limit"
    log.warning(
        "collection %r is locked by %s; waiting %s (CHUNKYARD_LOCK_TIMEOUT_S)", collection, who, limit
    )
    if store.lock_collection(conn, collection_id, timeout_s=timeout_s):
        return
    holders = store.lock_holders(conn, collection_id) or holders
    who = ", ".join(h.describe() for h in holders) or who
    end = "; ".join(f"SELECT pg_terminate_backend({h.pid})" for h in holders)
    raise TransientError(
        f"collection {collection!r} is still locked after {timeout_s:g} s by {who}: if that is a chunkyard run, "
        "run again when it ends (or wait longer: CHUNKYARD_LOCK_TIMEOUT_S, 0 = no limit); if it is not, end "
        f"that session{f' ({end})' if end else ''}"
    )
