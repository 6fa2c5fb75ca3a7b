"""A model switch: a collection's chunks embedded into a new embedding set while search reads the active one.

Every chunk row is reused; only vectors are new (from the embedding cache where it has them). Vectors are
written in batches, each committed, into the new set's own partition (no index while it fills); the HNSW
index is built once at the end, and the new set replaces the active one in one transaction. A crash leaves
the old set serving and the new one 'building': the next switch to the same model goes on where it stopped.
"""

from __future__ import annotations

from pipeline import db, store
from pipeline.embed import base_model, cache_key, embed_with_cache, get_embedder, model_dim, model_languages
from pipeline.errors import ConfigError
from pipeline.model import NoProgress, Progress, RunContext, Stats, embedded_text

#: Chunks embedded and written per committed batch.
BATCH = 256


def switch_model(ctx: RunContext, key: str, batch: int = BATCH, progress: Progress | None = None) -> Stats:
    """Fill (or go on filling) a building set of embedding key `key` with a vector for every chunk of the
    collection, index it, and make it the active set; a dry run only counts what that would take."""
    progress = progress or NoProgress()
    stats = Stats()
    assert ctx.collection_id is not None
    cid = ctx.collection_id
    with db.connection(ctx.url) as conn:
        sets = store.embedding_sets(conn, cid)
        active, building = sets.get("active"), sets.get("building")
        if active is not None and active.model == key:
            stats.counts["chunks"] = store.set_progress(conn, cid, None, key)["chunks"]
            stats.counts["already_active"] = 1
            return stats
        if building is not None and building.model != key:
            building = None  # a switch to another model, given up: dropped below (not in a dry run)
        if ctx.dry_run:
            have = store.set_progress(conn, cid, building.id if building else None, key)
            stats.counts.update(have)
            stats.counts["to_embed"] = have["chunks"] - have["have_vector"] - have["in_cache"]
            return stats
        store.drop_retired_sets(conn, cid, building_not_of=key)
        if building is None:
            try:
                dim = model_dim(base_model(key))
            except Exception as exc:
                raise ConfigError(f"model {base_model(key)}: cannot be loaded here ({exc})") from exc
            building = store.create_set(conn, cid, model=key, dim=dim, run_id=ctx.run_id, index=False,
                                        languages=model_languages(key))  # fmt: skip
        else:
            stats.counts["resumed"] = 1
        todo = store.set_progress(conn, cid, building.id, cache_key(key))
        stats.counts["chunks"] = todo["chunks"]
        stats.counts["vectors_kept"] = todo["have_vector"]
        progress.add_total("embed", todo["chunks"] - todo["have_vector"])
        after = 0
        with stats.timed("embed"):
            while rows := store.missing_vectors(conn, cid, building.id, after=after, limit=batch):
                after = rows[-1][0]
                texts = [embedded_text(context, text) for _, _, context, text in rows]
                vectors, fresh = embed_with_cache(
                    texts,
                    lookup=lambda hs: store.cache_lookup(conn, cache_key(key), hs),
                    embedder=lambda: get_embedder(key, ctx.device, ctx.embed_batch_size),
                )
                if fresh:
                    store.cache_store(conn, cache_key(key), {h: vectors[h] for h in fresh})
                # keyed by each chunk's stored embed_hash: the hash of the same embedded text
                store.write_vectors(conn, building.id, [(chunk_id, vectors[h]) for chunk_id, h, _, _ in rows])
                stats.counts["chunks_embedded"] += len(fresh)
                stats.counts["chunks_cached"] += len(rows) - len(fresh)
                progress.advance("embed", len(rows))
                if ctx.run_id is not None:
                    store.record_progress(conn, ctx.run_id, dict(stats.counts))
        with stats.timed("index"):
            store.ensure_search_indexes(conn, [building.id])
        store.activate_set(conn, building.id)
        stats.counts["switched"] = 1
        if active is not None and not store.drop_set(conn, active.id):
            stats.counts["old_set_kept"] = 1  # searches held it: the collection's next run drops it
    return stats
