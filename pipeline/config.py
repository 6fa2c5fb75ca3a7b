"""Typed settings (env prefix CHUNKYARD_) and validated chunking profiles, one place for both."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.errors import ConfigError

#: Units a size can be measured in. "model" is the embedding model's own word pieces.
Unit = Literal["cl100k_base", "o200k_base", "model", "chars", "words"]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: What a chunk's embedded context holds (`Chunker.context_for`): nothing; the document title; the nearest
#: heading; title and nearest heading; title and the full heading path.
ContextMode = Literal["none", "title", "heading", "title_heading", "path"]
#: Stored profiles from before `context` was a choice, and their fingerprints (unchanged: no re-chunk).
CONTEXT_FROM_BOOL: dict[bool, ContextMode] = {True: "path", False: "none"}

class Settings(BaseSettings):
    """Process-wide settings; every field can be set as CHUNKYARD_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="CHUNKYARD_", extra="ignore")

    database_url: str | None = Field(
        default=None, description="Any Postgres with pgvector; unset = the embedded server."
    )
    data_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("chunkyard")),
        description="Where the embedded Postgres keeps its data directory.",
    )
    model: str = Field(default=DEFAULT_MODEL, description="sentence-transformers model name or path.")
    device: str | None = Field(default=None, description="torch device for embedding; None = auto.")
    embed_backend: Literal["auto", "torch", "openvino", "onnx"] = Field(
        default="auto",
        description="auto: torch on a GPU, else OpenVINO int8 when the `fast` extra is installed, else torch.",
    )
    embed_batch_size: int = Field(default=64, ge=1)
    files_per_batch: int = Field(default=32, ge=1, description="Files per flow task.")
    dask_address: str | None = Field(
        default=None, description="Dask scheduler (tcp://host:8786) that runs flow tasks; unset = local."
    )
    dask_workers: int = Field(
        default=0, ge=0, description="Local Dask worker processes for flow tasks; 0 = threads, no Dask."
    )
    collection: str = "default"
    db_retry_seconds: float = Field(
        default=60.0, ge=0, description="How long a run waits for a lost database to come back (seconds)."
    )
    lock_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description="How long a run waits for another session to release its collection's lock (seconds); "
        "0 = no limit. Any role that can connect can take that lock: the wait names who holds it. Unless set, "
        "a holder that may write runs (another chunkyard run) is waited for without a limit.",
    )
    follow_external_links: bool = Field(
        default=False, description="Ingest files that links inside a folder point to outside it."
    )
    pdf_passwords: SecretStr | None = Field(
        default=None,
        description="Passwords tried in turn on encrypted PDFs: comma-separated, or @FILE with one per line.",
    )
    pdf_max_pages: int = Field(default=5000, ge=1, description="A PDF with more pages is refused (a bomb).")
    pdf_max_decompressed_mb: int = Field(
        default=1024, ge=1, description="A PDF whose streams inflate to more than this is refused (a bomb)."
    )
    file_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds one file may take to parse and chunk (in a worker process); a file over it "
        "fails and the run goes on. 0 = no time bound; with file_max_mb 0 too, files are parsed in-process.",
    )
    rerank_model: str | None = Field(
        default=None,
        description="A local sentence-transformers CrossEncoder folder that reorders search, context and eval "
        "candidates; unset = no reranking (none is shipped).",
    )
    # 40: the cross-encoder's cost grows with the candidates (bench/rerank_cost.py); 40 chunks of ~144 tokens
    # are the first ~5,800 tokens of a ranking, past a context budget's usual few thousand and 8x a top-5.
    rerank_candidates: int = Field(
        default=40, ge=1, le=1000, description="Candidates the reranker scores (at least k are)."
    )
    file_max_mb: int = Field(
        default=2048,
        ge=0,
        description="MiB of memory (RSS) the worker parsing and chunking a file may hold; a file over it "
        "fails and the run goes on. 0 = no memory bound.",
    )

    @property
    def pgdata(self) -> Path:
        """The embedded server's data directory."""
        return self.data_dir / "pgdata"


class _Chunker(BaseModel):
    """Fields every chunker config has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(default=256, ge=8, description="Token budget per chunk, in `unit`.")
    unit: Unit = "cl100k_base"
    # Title and nearest heading (README "What is embedded with a chunk"): on FastAPI's docs it retrieves as
    # well as the full path or better, and a renamed heading re-embeds only the chunks right below it (the
    # full path re-embedded 2926 chunks on one release step where 1213 had new text; this 1396).
    context: ContextMode = Field(
        default="title_heading",
        description="What is embedded before the span (never part of it): none, the document title, the "
        "nearest heading, title and nearest heading, or title and full heading path. true/false = path/none.",
    )

    @field_validator("context", mode="before")
    @classmethod
    def _context_from_bool(cls, v: object) -> object:
        """Profiles stored before the option was a choice say true (today's "path") or false ("none")."""
        return CONTEXT_FROM_BOOL.get(v, v) if isinstance(v, bool) else v


class FixedConfig(_Chunker):
    """Windows of `size` units with `overlap` units shared between neighbours."""

    kind: Literal["fixed"] = "fixed"
    overlap: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> FixedConfig:
        if self.overlap >= self.size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than size ({self.size})")
        return self


DEFAULT_SEPARATORS = ("\n\n", "\n", "。", "！", "？", ". ", "! ", "? ", "; ", ", ", " ", "")


class RecursiveConfig(FixedConfig):
    """Split by a separator hierarchy, merge small pieces up to the budget."""

    kind: Literal["recursive"] = "recursive"  # type: ignore[assignment]
    separators: tuple[str, ...] = DEFAULT_SEPARATORS
    keep_whole: int = Field(
        default=0,
        ge=0,
        description="A paragraph (a piece at the first separator; markdown: a paragraph block) of up to this "
        "many units is one chunk of its own rather than cut, even over `size`; 0 = off.",
    )


class SentenceConfig(_Chunker):
    """Whole sentences grouped up to the budget, `overlap` sentences shared."""

    kind: Literal["sentence"] = "sentence"
    overlap: int = Field(default=0, ge=0, description="Sentences repeated at the start of the next chunk.")
    language: str = Field(default="auto", description="Sentences in this language; 'auto': the section's own.")


class SemanticConfig(_Chunker):
    """Breakpoints where the similarity of neighbouring sentence windows drops."""

    kind: Literal["semantic"] = "semantic"
    mode: Literal["percentile", "stddev", "absolute"] = "percentile"
    threshold: float = Field(default=90.0, description="Percentile, number of std devs, or a distance.")
    window: int = Field(default=1, ge=1, description="Sentences on each side compared at a breakpoint.")
    min_size: int = Field(
        default=32, ge=0, description="Pieces smaller than this are merged into a neighbour."
    )
    language: str = Field(default="auto", description="Sentences in this language; 'auto': the section's own.")


class MarkdownConfig(RecursiveConfig):
    """Heading-aware: sections from headings; fences and table rows never split; table header repeated."""

    kind: Literal["markdown"] = "markdown"  # type: ignore[assignment]


class HtmlConfig(RecursiveConfig):
    """Header-aware HTML: sections from h1-h6; <pre> and tables kept whole where they fit."""

    kind: Literal["html"] = "html"  # type: ignore[assignment]


class CodeConfig(_Chunker):
    """Syntax-tree boundaries (functions, classes, methods); line-aware fallback for oversized nodes."""

    kind: Literal["code"] = "code"
    size: int = Field(default=384, ge=8)


class ChatConfig(_Chunker):
    """Speaker turns grouped up to `max_turns` and the budget."""

    kind: Literal["chat"] = "chat"
    max_turns: int = Field(default=4, ge=1)
    overlap: int = Field(default=0, ge=0, description="Turns repeated at the start of the next chunk.")


class HierarchicalConfig(_Chunker):
    """Small children for retrieval inside parents of about `parent_size` units, returned as context."""

    kind: Literal["hierarchical"] = "hierarchical"
    size: int = Field(default=192, ge=8)
    overlap: int = Field(default=0, ge=0)
    parent_size: int = Field(default=1024, ge=64)


ChunkerConfig = Annotated[
    FixedConfig
    | RecursiveConfig
    | SentenceConfig
    | SemanticConfig
    | MarkdownConfig
    | HtmlConfig
    | CodeConfig
    | ChatConfig
    | HierarchicalConfig,
    Field(discriminator="kind"),
]

DocType = Literal["markdown", "html", "text", "code", "chat", "pdf", "docx"]


class Profile(BaseModel):
    """Which chunker each document type gets; stored with the collection it produced."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Small children, measured (bench/eval_chroma.py, README "Evaluation"): 144 cl100k tokens without overlap
    # retrieves as much of the answers as 250-token windows with hybrid search, in half the text (IoU 8.2 vs 3.5
    # on Chroma's benchmark); a paragraph of up to 256 is not cut but kept whole (keep_whole: on Chroma's
    # benchmark recall 83.6 -> 85.5 at k = 5 with IoU 8.1 -> 8.2, higher at every token budget, no corpus
    # lower). The section they sit in is the parent a search returns as context (--parent).
    # Code by syntax tree, 256; chat 4 turns. The model's input limit (254 word pieces for all-MiniLM-L6-v2,
    # context included) is enforced on top.
    markdown: ChunkerConfig = MarkdownConfig(size=144, overlap=0, keep_whole=256)
    html: ChunkerConfig = HtmlConfig(size=144, overlap=0, keep_whole=256)
    text: ChunkerConfig = RecursiveConfig(size=144, overlap=0, keep_whole=256)
    code: ChunkerConfig = CodeConfig(size=256)
    chat: ChunkerConfig = ChatConfig(max_turns=4, size=256)
    # PDF and Word text comes out as paragraphs, markdown tables and headings (parse/pdf.py, docx.py):
    # the markdown chunker keeps tables whole where they fit, at the same size as markdown.
    pdf: ChunkerConfig = MarkdownConfig(size=144, overlap=0, keep_whole=256)
    docx: ChunkerConfig = MarkdownConfig(size=144, overlap=0, keep_whole=256)
    section_tokens: int = Field(
        default=1024,
        ge=64,
        description="Sections longer than this (cl100k) are cut into content-defined sub-sections.",
    )
    language: str = Field(
        default="auto",
        description="The documents' language (ISO 639-1: 'de', 'da', 'zh', ...) for full-text search and "
        "sentences; 'auto' detects it per document, and per section where a document mixes languages.",
    )
    languages: dict[str, str] = Field(
        default_factory=dict,
        description="Per-source languages: a glob on the path or file name -> a code or 'auto' ('*.de.md' = 'de').",
    )

    @field_validator("language")
    @classmethod
    def _language(cls, v: str) -> str:
        from pipeline.language import check_code

        return check_code(v)

    @field_validator("languages")
    @classmethod
    def _languages(cls, v: dict[str, str]) -> dict[str, str]:
        from pipeline.language import check_code

        return {pattern: check_code(code) for pattern, code in v.items()}

    def for_type(self, doc_type: DocType) -> ChunkerConfig:
        """The chunker config the router picks for one document type."""
        return getattr(self, doc_type)

    def section_tokens_for(self, doc_type: DocType) -> int:
        """Largest section (parent) size for a type: a hierarchical chunker's parent_size wins."""
        cfg = self.for_type(doc_type)
        return cfg.parent_size if isinstance(cfg, HierarchicalConfig) else self.section_tokens

    def fingerprint_for(self, doc_type: DocType) -> str:
        """Hash of exactly the settings that shape chunks of this type: a change re-chunks only them."""
        chunker = self.for_type(doc_type).model_dump(mode="json")
        legacy = {mode: flag for flag, mode in CONTEXT_FROM_BOOL.items()}
        if chunker.get("context") in legacy:  # hashed as when it was a bool: collections keep their rows
            chunker["context"] = legacy[chunker["context"]]
        if chunker.get("keep_whole") == 0:  # off: hashed as before the option existed (no re-chunk)
            del chunker["keep_whole"]
        if chunker.get("language") == "auto":  # English sections split as with "en"; any other language is in
            chunker["language"] = "en"  # the section's fingerprint (incremental.fingerprint): no re-chunk
        payload = {
            "chunker": chunker,
            "sections": self.section_tokens_for(doc_type),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def language_key(self) -> str:
        """What a stored document's key adds for the language settings: a change reads the files again."""
        by_path = json.dumps(self.languages, sort_keys=True) if self.languages else ""
        return f":lang={self.language}" + (":" + hashlib.sha256(by_path.encode()).hexdigest()[:8] if by_path else "")

    def as_json(self) -> dict:
        """The validated profile as plain JSON, as stored in collections.profile."""
        return self.model_dump(mode="json")


#: Longest collection name: it names a Prefect deployment and shows in every table.
MAX_COLLECTION_NAME = 200


def check_collection_name(name: str) -> str:
    """A collection name as given, or a ConfigError saying what is wrong with it."""
    if not name or not name.strip():
        raise ConfigError("--collection: the name is empty; give a name such as 'docs'")
    if len(name) > MAX_COLLECTION_NAME:
        raise ConfigError(f"--collection: the name has {len(name)} characters; at most {MAX_COLLECTION_NAME}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ConfigError("--collection: the name contains control characters")
    return name


def strategy_profile(strategy: str, **params: object) -> Profile:
    """A profile that applies one strategy to every document type (`--strategy X`)."""
    try:
        cfg = _ADAPTER.validate_python({"kind": strategy, **params})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, f"--strategy {strategy}")) from exc
    return Profile(**{t: cfg for t in ("markdown", "html", "text", "code", "chat", "pdf", "docx")})


def load_profile(path: Path | str | None) -> Profile:
    """Read a TOML profile; a typo is an error that names the field."""
    if path is None:
        return Profile()
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"profile {p}: file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"profile {p}: not valid TOML ({exc})") from exc
    return profile_from_dict(data, origin=str(p))


def profile_from_dict(data: dict, *, origin: str = "profile") -> Profile:
    """Validate a profile given as a dict (TOML file, stored JSON)."""
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, origin)) from exc


def _explain(exc: ValidationError, origin: str) -> str:
    """One line per problem, naming the field path."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        lines.append(f"{origin}: {loc}: {err['msg']}" if loc else f"{origin}: {err['msg']}")
    return "\n".join(lines)


from pydantic import TypeAdapter  # noqa: E402

_ADAPTER: TypeAdapter = TypeAdapter(ChunkerConfig)
