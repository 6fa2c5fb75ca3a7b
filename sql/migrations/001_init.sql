-- chunkyard schema, version 1. Frozen once released: change the schema in a new numbered file.
-- Offsets are a contract: substr(documents.normalized_text, char_start + 1, char_end - char_start) = chunks.text

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE collections (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    profile     jsonb NOT NULL,              -- the validated chunking profile that produced the chunks
    model       text NOT NULL,               -- embedding model name
    dim         integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runs (
    id             bigserial PRIMARY KEY,
    collection_id  bigint REFERENCES collections (id) ON DELETE CASCADE,
    kind           text NOT NULL DEFAULT 'ingest',   -- ingest | reindex | prune | eval
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    status         text NOT NULL DEFAULT 'running',  -- running | completed | failed | crashed
    params         jsonb NOT NULL DEFAULT '{}'::jsonb,
    counts         jsonb NOT NULL DEFAULT '{}'::jsonb,
    timings        jsonb NOT NULL DEFAULT '{}'::jsonb
);

CREATE TABLE documents (
    id               bigserial PRIMARY KEY,
    collection_id    bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    source_uri       text NOT NULL,
    content_hash     text NOT NULL,            -- sha256 of the raw bytes: unchanged file = skipped unparsed
    text_hash        text NOT NULL,            -- sha256 of normalized_text
    doc_type         text NOT NULL,
    chunk_key        text NOT NULL,            -- chunker settings + model used for this type: a change re-chunks
    mime             text NOT NULL,
    title            text NOT NULL DEFAULT '',
    metadata         jsonb NOT NULL DEFAULT '{}'::jsonb,
    normalized_text  text NOT NULL,
    deleted_at       timestamptz,              -- set by a soft prune; NULL = live
    last_run_id      bigint REFERENCES runs (id) ON DELETE SET NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (collection_id, source_uri)
);

CREATE TABLE sections (
    id            bigserial PRIMARY KEY,
    document_id   bigint NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    parent_id     bigint REFERENCES sections (id) ON DELETE SET NULL,
    ordinal       integer NOT NULL,
    level         integer NOT NULL DEFAULT 0,
    kind          text NOT NULL DEFAULT 'body',
    heading_path  text[] NOT NULL DEFAULT '{}',
    content_hash  text NOT NULL,               -- sha256 of the section text
    fingerprint   text NOT NULL,               -- content + heading path + chunker settings + model
    char_start    integer NOT NULL,
    char_end      integer NOT NULL,
    CHECK (char_start <= char_end)
);
CREATE INDEX sections_document_idx ON sections (document_id, ordinal);
CREATE INDEX sections_parent_idx ON sections (parent_id);

CREATE TABLE chunks (
    id            bigserial PRIMARY KEY,
    section_id    bigint NOT NULL REFERENCES sections (id) ON DELETE CASCADE,
    document_id   bigint NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    collection_id bigint NOT NULL REFERENCES collections (id) ON DELETE CASCADE,
    ordinal       integer NOT NULL,            -- order within the section
    text          text NOT NULL,
    context       text NOT NULL DEFAULT '',    -- embedded before the text (title, heading path), not part of the span
    content_hash  text NOT NULL,               -- sha256 of text
    embed_hash    text NOT NULL,               -- sha256 of the embedded text (context + text): the cache key
    char_start    integer NOT NULL,
    char_end      integer NOT NULL,
    token_count   integer NOT NULL,
    metadata      jsonb NOT NULL DEFAULT '{}'::jsonb,
    model         text NOT NULL,
    embedding     vector(384) NOT NULL,
    tsv           tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
    CHECK (char_start < char_end)
);
CREATE INDEX chunks_section_idx ON chunks (section_id, ordinal);
CREATE INDEX chunks_document_idx ON chunks (document_id);
CREATE INDEX chunks_collection_idx ON chunks (collection_id);
CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops);
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);

CREATE TABLE embedding_cache (
    model       text NOT NULL,
    text_hash   text NOT NULL,
    embedding   vector(384) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, text_hash)
);

CREATE TABLE ingest_errors (
    id          bigserial PRIMARY KEY,
    run_id      bigint REFERENCES runs (id) ON DELETE CASCADE,
    source_uri  text NOT NULL,
    stage       text NOT NULL,
    error       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ingest_errors_run_idx ON ingest_errors (run_id);
