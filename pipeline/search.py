"""Search a collection the way users do in SQL: embed the question, call the search functions."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import psycopg

from pipeline import db, store
from pipeline.config import Settings
from pipeline.errors import ConfigError
from pipeline.rerank import scorer
from pipeline.sources import source_uri
from pipeline.store import SEARCH_MODES, Hit, SearchMode


def search(
    query: str,
    *,
    settings: Settings,
    collection: str = "default",
    k: int = 5,
    mode: SearchMode = "hybrid",
    with_parent: bool = False,
    whole_sections: float | None = store.WHOLE_SECTION_SHARE,
    budget: int | None = None,
    filters: dict | None = None,
    rerank: bool | None = None,
) -> list[Hit]:
    """Top-k chunks of a collection for a question (the model is loaded only when vectors are needed, after
    the collection is found: its own embedding key, and no thread left running on an error exit); a
    section at least `whole_sections` retrieved comes back whole (None: chunks only). With `budget`, a
    context of that many tokens instead (`store.context`: chunks in rank order, a section at least
    `whole_sections` read completed in document order), whatever k. `filters`: the chunks searched
    (`store.search_filter`; docs/search-filters.md). With CHUNKYARD_RERANK_MODEL set (`rerank` None: as
    set; False: off; True: it must be set), its cross-encoder reorders the top candidates first (`pipeline.rerank`)."""
    if mode not in SEARCH_MODES:
        raise ConfigError(f"--mode {mode!r}: expected one of {', '.join(SEARCH_MODES)}")
    if rerank is False:
        settings = settings.model_copy(update={"rerank_model": None})
    elif rerank and not settings.rerank_model:
        raise ConfigError("--rerank: no reranker is set; set CHUNKYARD_RERANK_MODEL to a local CrossEncoder folder")
    # The model loads only once the collection is found, in this thread: a load started in the background
    # before that raced the error exit (a missing collection or database exited while the loading thread
    # was in OpenVINO's native code: SIGABRT, once SIGSEGV; issue 29, defect 10).
    with db.connection(db.database_url(settings)) as conn:
        for attempt in range(3):
            if (coll := store.get_collection(conn, collection)) is None:
                raise ConfigError(
                    f"no collection {collection!r}: run `chunkyard ingest PATH -c {collection}` first"
                )
            vec = None
            if mode != "fulltext":
                from pipeline.embed import query_embedder  # the collection's backend: OpenVINO needs no torch

                vec = query_embedder(coll.embed_model, settings).encode([query])[0]
            rr, n = scorer(query, settings), settings.rerank_candidates  # None: no reranker configured
            try:
                if budget is not None:
                    return list(store.context(
                        conn, collection, vec, budget=budget, query_text=query, mode=mode,
                        with_parent=with_parent, whole_sections=whole_sections, filters=filters, rerank=rr, candidates=n,
                    ))  # fmt: skip
                return store.search(
                    conn, collection, vec, k=k, query_text=query, mode=mode, with_parent=with_parent,
                    whole_sections=whole_sections, filters=filters, rerank=rr, candidates=n,
                )  # fmt: skip
            except psycopg.errors.DataException:
                conn.rollback()
                now = store.get_collection(conn, collection)
                if attempt == 2 or now is None or now.embed_model == coll.embed_model:
                    raise
                # the collection switched models between reading its model and searching: embed again
    raise AssertionError("unreachable")


def cli_filters(
    source: list[str], documents: list[int], doc_type: list[str], language: list[str], metadata: str | None,
    since: str | None,
) -> dict | None:
    """The filter of `chunkyard search`'s options (`store.search_filter`); a path that exists names its file
    or folder (as its URI), anything else is a pattern."""
    meta = None
    if metadata is not None:
        try:
            meta = json.loads(metadata)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--metadata {metadata!r}: not JSON ({exc.msg})") from exc
        if not isinstance(meta, dict):
            raise ConfigError(f"--metadata {metadata!r}: expected a JSON object, e.g. '{{\"page\": 3}}'")
    when = None
    if since is not None:
        try:
            when = datetime.fromisoformat(since)
        except ValueError as exc:
            raise ConfigError(f"--since {since!r}: expected an ISO date or time, e.g. 2026-01-31") from exc
    patterns = [source_uri(Path(s)) if Path(s).exists() else s for s in source]
    return store.search_filter(source=patterns, documents=documents, doc_type=doc_type, language=language,
                               metadata=meta, updated_since=when)  # fmt: skip
