"""chunkyard: document ingestion into Postgres + pgvector, one module per stage."""
