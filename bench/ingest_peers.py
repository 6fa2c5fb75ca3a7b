"""The peers of bench/ingest_speed.py, one per process, as a user would run them: a corpus of markdown files
into a Postgres of the embedded server, the local all-MiniLM-L6-v2 through sentence-transformers on CPU.

    python -m bench.ingest_peers llamaindex CORPUS --url URL --work DIR [--batch 64]
    python -m bench.ingest_peers cocoindex CORPUS --url URL --work DIR

ingest_speed times the whole process (start-up, imports, model load, read, split, embed, write), like its
`chunkyard ingest` row. Every text the model was asked to embed, as it saw it, is written to DIR/texts.json
(ingest_speed encodes them again with the model alone: each system against its own bound); the last line
of stdout is a JSON summary: rows stored, texts embedded, model calls. Needs the bench extra.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.incremental_peers import cocoindex_example, cocoindex_rows, database_uri

#: LlamaIndex's table (PGVectorStore prefixes "data_") and database.
LLAMA_TABLE = "ingest_speed"
LLAMA_DB = "llamaindex"
#: The size of LlamaIndex's SentenceSplitter, in its own unit (cl100k tokens): chunkyard's markdown size.
LLAMA_CHUNK_SIZE = 144


class RecordingModel:
    """A SentenceTransformer that keeps every text it is asked to encode (the bound is computed on them)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.texts: list[str] = []
        self.calls = 0

    def encode(self, texts: list[str], **kw: Any) -> Any:
        self.texts += texts
        self.calls += 1
        return self.model.encode(texts, **kw)

    def get_sentence_embedding_dimension(self) -> int:  # the name CocoIndex calls (renamed in ST 6)
        dim = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        return dim()


def load_model() -> RecordingModel:
    """The local all-MiniLM-L6-v2, torch on CPU (the peers have no OpenVINO path of their own)."""
    from sentence_transformers import SentenceTransformer

    from pipeline.embed.meta import model_path

    return RecordingModel(SentenceTransformer(str(model_path()), device="cpu"))


def llamaindex(corpus: Path, url: str, batch: int) -> tuple[int, RecordingModel]:
    """LlamaIndex's IngestionPipeline: SimpleDirectoryReader -> MarkdownNodeParser -> SentenceSplitter
    (144 cl100k tokens, no overlap) -> the model (batches of `batch`) -> PGVectorStore in its own database."""
    import psycopg
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter
    from llama_index.vector_stores.postgres import PGVectorStore

    class SentenceTransformerEmbedding(BaseEmbedding):
        """The same SentenceTransformer object behind LlamaIndex's embedding interface (no hub download)."""

        _model: Any = PrivateAttr()

        def __init__(self, model: RecordingModel, **kw: Any) -> None:
            super().__init__(model_name="all-MiniLM-L6-v2", **kw)
            self._model = model

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            vecs = self._model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
            return vecs.tolist()

        def _get_text_embedding(self, text: str) -> list[float]:
            return self._get_text_embeddings([text])[0]

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

    with psycopg.connect(database_uri(url, "postgres"), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{LLAMA_DB}"')
    with psycopg.connect(database_uri(url, LLAMA_DB), autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    target = database_uri(url, LLAMA_DB).split("://", 1)[1]
    store = PGVectorStore.from_params(
        connection_string=f"postgresql+psycopg2://{target}",
        async_connection_string=f"postgresql+asyncpg://{target}",
        table_name=LLAMA_TABLE,
        embed_dim=384,
    )
    model = load_model()
    pipeline = IngestionPipeline(
        transformations=[
            MarkdownNodeParser(),
            SentenceSplitter(chunk_size=LLAMA_CHUNK_SIZE, chunk_overlap=0),
            SentenceTransformerEmbedding(model, embed_batch_size=batch),
        ],
        vector_store=store,
    )
    docs = SimpleDirectoryReader(str(corpus), recursive=True, required_exts=[".md"]).load_data()
    pipeline.run(documents=docs)
    with psycopg.connect(database_uri(url, LLAMA_DB)) as c:
        (rows,) = c.execute(f'SELECT count(*) FROM "data_{LLAMA_TABLE}"').fetchone()
    return rows, model


def cocoindex(corpus: Path, url: str, work: Path) -> tuple[int, RecordingModel]:
    """CocoIndex's text_embedding example (bench/incremental_peers.py), one cold update, its state in `work`."""
    model = load_model()
    app = cocoindex_example(corpus, url, work / "cocoindex-state", model=model)
    import cocoindex as coco

    try:
        app.update_blocking()
    finally:
        coco.stop_blocking()
    return cocoindex_rows(url), model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("peer", choices=["llamaindex", "cocoindex"])
    ap.add_argument("corpus", type=Path)
    ap.add_argument(
        "--url", required=True, help="Any database URI of the server (its databases are made here)."
    )
    ap.add_argument("--work", type=Path, required=True, help="Folder for the peer's state and texts.json.")
    ap.add_argument(
        "--batch", type=int, default=64, help="LlamaIndex's embed_batch_size (CocoIndex: its own 64)."
    )
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    if a.peer == "llamaindex":
        rows, model = llamaindex(a.corpus, a.url, a.batch)
    else:
        rows, model = cocoindex(a.corpus, a.url, a.work)
    (a.work / "texts.json").write_text(json.dumps(model.texts))
    print(json.dumps({"rows": rows, "texts": len(model.texts), "calls": model.calls}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
