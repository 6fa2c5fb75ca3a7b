"""The release sequence of bench/incremental.py and its peers on it: CocoIndex's text_embedding example and
LangChain's indexing API (`index()` + SQLRecordManager), each counting what its embedder is asked."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

#: FastAPI docs releases in order, the last one twice (a run with no change).
STEPS = ["0.135.0", "0.140.0", "0.141.1", "0.141.1"]


def sync(src: Path, dst: Path) -> None:
    """Make dst hold exactly src's files (like `git checkout TAG` in a working tree)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def database_uri(uri: str, name: str) -> str:
    """The same server's URI with another database (`postgresql://user:@/db?host=/socket/dir` or host:port)."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(uri)._replace(path=f"/{name}"))


class CountingModel:
    """What SentenceTransformer gives CocoIndex's embedder: vectors from a hash, and a count of texts."""

    def __init__(self) -> None:
        self.asked = 0

    def encode(self, texts: list[str], **_: object):
        import zlib

        import numpy as np

        self.asked += len(texts)
        out = np.empty((len(texts), 384), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(384)
            out[i] = v / np.linalg.norm(v)
        return out

    def get_sentence_embedding_dimension(self) -> int:
        return 384


def cocoindex_example(sourcedir: Path, uri: str, state: Path, *, model: object):
    """CocoIndex's text_embedding example as an App: the markdown files under `sourcedir`, RecursiveSplitter
    (markdown, 600 bytes, no overlap), its SentenceTransformerEmbedder (memoized `embed`, batched `_embed`),
    rows in table coco_bench.doc_embeddings of database "cocoindex" (created here) on the server of `uri`.

    `model` is what the embedder's `_get_model` gives: a SentenceTransformer (the local all-MiniLM-L6-v2)
    or anything with its `encode` and `get_sentence_embedding_dimension`. Stop the engine with
    `cocoindex.stop_blocking()` when done."""
    import dataclasses
    import pathlib
    from typing import Annotated

    import psycopg

    os.environ["COCOINDEX_DB"] = str(state)  # its own state (LMDB), before it starts
    os.environ.setdefault("COCOINDEX_DISABLE_USAGE_TRACKING", "1")
    import asyncpg
    import cocoindex as coco
    from cocoindex.connectors import localfs, postgres
    from cocoindex.ops.sentence_transformers import SentenceTransformerEmbedder
    from cocoindex.ops.text import RecursiveSplitter
    from cocoindex.resources.file import PatternFilePathMatcher
    from cocoindex.resources.id import IdGenerator
    from numpy.typing import NDArray

    with psycopg.connect(database_uri(uri, "postgres"), autocommit=True) as c:
        c.execute('CREATE DATABASE "cocoindex"')
    with psycopg.connect(database_uri(uri, "cocoindex"), autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
    socket_dir = dict(p.split("=", 1) for p in uri.split("?", 1)[1].split("&"))["host"]

    class GivenModelEmbedder(SentenceTransformerEmbedder):
        """CocoIndex's own embedder (memoized `embed`, batched `_embed`) over the given model."""

        def _get_model(self):  # type: ignore[override]
            return model

    pg_db = coco.ContextKey[asyncpg.Pool]("bench_pg_db")
    embedder = coco.ContextKey[SentenceTransformerEmbedder]("bench_embedder")
    splitter = RecursiveSplitter()
    # the example's row (a dataclass made here so its annotations are objects, not strings)
    row_type = dataclasses.make_dataclass(
        "DocEmbedding",
        [("id", int), ("filename", str), ("chunk_start", int), ("chunk_end", int), ("text", str),
         ("embedding", Annotated[NDArray, embedder])],
    )  # fmt: skip

    @coco.lifespan
    async def lifespan(builder: coco.EnvironmentBuilder):
        async with asyncpg.create_pool(host=socket_dir, user="postgres", database="cocoindex") as pool:
            builder.provide(pg_db, pool)
            builder.provide(embedder, GivenModelEmbedder("sentence-transformers/all-MiniLM-L6-v2"))
            yield

    @coco.fn
    async def process_chunk(chunk, filename, id_gen, table) -> None:
        table.declare_row(
            row=row_type(
                id=await id_gen.next_id(chunk.text),
                filename=str(filename),
                chunk_start=chunk.start.char_offset,
                chunk_end=chunk.end.char_offset,
                text=chunk.text,
                embedding=await coco.use_context(embedder).embed(chunk.text),
            )
        )

    @coco.fn(memo=True)
    async def process_file(file, table) -> None:
        text = await file.read_text()
        chunks = splitter.split(text, chunk_size=600, chunk_overlap=0, language="markdown")
        await coco.map(process_chunk, chunks, file.file_path.path, IdGenerator(), table)

    @coco.fn
    async def app_main(sourcedir: pathlib.Path) -> None:
        schema = await postgres.TableSchema.from_class(row_type, primary_key=["id"])
        table = await postgres.mount_table_target(
            pg_db, "doc_embeddings", schema, pg_schema_name="coco_bench"
        )
        files = localfs.walk_dir(
            sourcedir, recursive=True, path_matcher=PatternFilePathMatcher(included_patterns=["**/*.md"])
        )
        await coco.mount_each(process_file, files.items(), table)

    return coco.App(coco.AppConfig(name="ChunkyardBench"), app_main, sourcedir=sourcedir)


def cocoindex_rows(uri: str) -> int:
    """Rows in the example's table."""
    import psycopg

    with psycopg.connect(database_uri(uri, "cocoindex")) as c:
        (n,) = c.execute("SELECT count(*) FROM coco_bench.doc_embeddings").fetchone()
    return n


def cocoindex_steps(data: Path, work: Path, server, tmp: Path) -> list[dict]:
    """CocoIndex's text_embedding example on the same sequence, counting what its embedder is asked."""
    model = CountingModel()
    app = cocoindex_example(work, server.get_uri(), tmp / "cocoindex-state", model=model)
    import cocoindex as coco

    rows = []
    try:
        for tag in STEPS:
            sync(data / tag, work)
            before = model.asked
            t0 = time.perf_counter()
            app.update_blocking()
            wall = time.perf_counter() - t0
            n = cocoindex_rows(server.get_uri())
            rows.append({"step": tag, "wall": wall, "chunks_embedded": model.asked - before, "rows": n})
    finally:
        coco.stop_blocking()
    return rows


class CountingEmbeddings:
    """LangChain Embeddings counting the texts it is asked to embed: the real model, or (`real=False`)
    a deterministic stand-in, since the count, not the vectors, is what this comparison measures."""

    def __init__(self, *, real: bool) -> None:
        self.real = real
        self.count = 0
        if real:
            from pipeline.embed import get_embedder

            self.model = get_embedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.count += len(texts)
        if self.real:
            return self.model.encode(texts).tolist()
        import hashlib

        return [[b / 255 for b in hashlib.sha256(t.encode()).digest()] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def langchain_steps(data: Path, work: Path, *, with_start_index: bool, real: bool) -> list[dict]:
    """The same chunks (chunkyard's router) fed to LangChain's index(), which re-splits every file."""
    import warnings

    warnings.filterwarnings("ignore")
    from langchain_community.indexes._sql_record_manager import SQLRecordManager
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.indexing import index
    from langchain_core.vectorstores import InMemoryVectorStore

    from pipeline.chunkers.router import Router
    from pipeline.config import Profile
    from pipeline.normalize import normalize
    from pipeline.reading import read_bytes
    from pipeline.sources import discover

    emb = CountingEmbeddings(real=real)
    Embeddings.register(CountingEmbeddings)
    store = InMemoryVectorStore(emb)  # type: ignore[arg-type]
    db = Path(tempfile.mkdtemp()) / "records.sqlite"
    rm = SQLRecordManager("fastapi", db_url=f"sqlite:///{db}")
    rm.create_schema()
    router = Router(Profile())
    rows = []
    for tag in STEPS:
        sync(data / tag, work)
        t0 = time.perf_counter()
        files, _, _ = discover([work])
        docs = []
        for f in files:
            doc = normalize(f, read_bytes(f))
            chunker = router.chunker_for(doc.doc_type)
            for _, chunks in chunker.chunk_document(doc):
                for ch in chunks:
                    meta = {"source": f.uri}
                    if with_start_index:
                        meta["start_index"] = ch.start
                    docs.append(Document(page_content=ch.embed_text, metadata=meta))
        before = emb.count
        res = index(docs, rm, store, cleanup="incremental", source_id_key="source", batch_size=256)
        wall = time.perf_counter() - t0
        rows.append({"step": tag, "wall": wall, "chunks_embedded": emb.count - before, **res})
    return rows
