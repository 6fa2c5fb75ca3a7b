"""All SQL access, and nothing but the data model: it imports `pipeline.model`, never a parser or chunker.

`ledger` holds collections, locks, runs and errors; `documents` the per-document swap, COPY, the embedding
cache and prune; `reads` search and the chunks of a collection; `evals` the results of evaluation runs.
Callers use `store.<function>`.
"""

from pipeline.store.bulk import (
    NewDocument,
    bulk_load_pays,
    bulk_mode,
    defer_vector_index,
    drop_search_indexes,
    ensure_search_indexes,
    write_documents,
)
from pipeline.store.documents import (
    as_array,
    cache_lookup,
    cache_store,
    prune,
    source_uris,
    stored_documents,
    stored_sections,
    unstemmed_languages,
    write_document,
)
from pipeline.store.evals import chunk_spans, document_texts, record_eval
from pipeline.store.ledger import (
    LockHolder,
    drop_collection,
    ensure_collection,
    finish_run,
    get_collection,
    lock_collection,
    lock_holders,
    record_error,
    record_progress,
    recount_fts_stats,
    refresh_fts_stats,
    run_errors,
    start_run,
    status,
    unlock_collection,
)
from pipeline.store.quality import changed as quality_changed
from pipeline.store.quality import quality_report, record_quality
from pipeline.store.reads import (
    SEARCH_MODES,
    WHOLE_SECTION_SHARE,
    ContextHit,
    Hit,
    Scorer,
    SearchMode,
    collection_chunks,
    collection_texts,
    context,
    search,
    search_filter,
)
from pipeline.store.vectors import (
    activate_set,
    create_set,
    drop_retired_sets,
    drop_set,
    embedding_sets,
    missing_vectors,
    set_progress,
    write_vectors,
)

__all__ = [
    "SEARCH_MODES", "WHOLE_SECTION_SHARE", "ContextHit", "Hit", "NewDocument", "Scorer", "SearchMode", "bulk_load_pays", "bulk_mode", "defer_vector_index", "drop_search_indexes",
    "ensure_search_indexes", "write_documents", "as_array", "cache_lookup", "cache_store",
    "chunk_spans", "document_texts", "record_eval", "collection_chunks", "collection_texts", "context", "drop_collection", "ensure_collection", "finish_run",
    "get_collection", "LockHolder", "lock_collection", "lock_holders", "prune", "quality_changed", "quality_report", "record_quality", "recount_fts_stats", "record_error", "record_progress", "refresh_fts_stats", "run_errors", "search", "search_filter",
    "source_uris", "start_run", "status", "stored_documents", "stored_sections", "unlock_collection", "unstemmed_languages",
    "write_document", "activate_set", "create_set", "drop_retired_sets", "drop_set",
    "embedding_sets", "missing_vectors", "set_progress", "write_vectors",
]  # fmt: skip
