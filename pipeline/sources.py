"""Discover source files, read their bytes, detect their type, give each a stable source id."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import InputError

#: File suffix -> (document type, code language or None).
SUFFIXES: dict[str, tuple[str, str | None]] = {
    ".md": ("markdown", None),
    ".markdown": ("markdown", None),
    ".mdx": ("markdown", None),
    ".html": ("html", None),
    ".htm": ("html", None),
    ".xhtml": ("html", None),
    ".txt": ("text", None),
    ".text": ("text", None),
    ".rst": ("text", None),
    ".log": ("text", None),
    ".py": ("code", "python"),
    ".pyi": ("code", "python"),
    ".js": ("code", "javascript"),
    ".mjs": ("code", "javascript"),
    ".cjs": ("code", "javascript"),
    ".jsx": ("code", "javascript"),
    ".ts": ("code", "typescript"),
    ".tsx": ("code", "tsx"),
    ".go": ("code", "go"),
    ".rs": ("code", "rust"),
    ".java": ("code", "java"),
}

#: Folders never worth indexing.
SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache"}

#: Refuse files larger than this: almost surely not documentation.
MAX_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True)
class SourceFile:
    """One file to ingest: where it is, its stable id, and what kind of document it is."""

    path: Path
    uri: str
    doc_type: str
    language: str | None = None


@dataclass(frozen=True)
class Skipped:
    """A file discovery passed over, with the reason shown to the user."""

    uri: str
    reason: str


def source_uri(path: Path) -> str:
    """Stable id of a file: its absolute path as a file URI (links are not followed: a link is its own file)."""
    return Path(os.path.abspath(path)).as_uri()


def detect(path: Path) -> tuple[str, str | None] | None:
    """Document type and language from the file name; None if unsupported."""
    return SUFFIXES.get(path.suffix.lower())


def discover(paths: Iterable[Path | str]) -> tuple[list[SourceFile], list[Skipped], list[InputError]]:
    """All supported files under the given paths, sorted; unsupported ones skipped, missing ones errors."""
    found: dict[str, SourceFile] = {}
    skipped: list[Skipped] = []
    errors: list[InputError] = []
    for raw in paths:
        root = Path(raw).expanduser()
        if not root.exists() and not root.is_symlink():
            errors.append(InputError(str(raw), "no such file or directory", stage="discover"))
            continue
        for path in _walk(root, errors):
            kind = detect(path)
            if kind is None:
                skipped.append(
                    Skipped(source_uri(path), f"unsupported file type {path.suffix or '(none)'!r}")
                )
                continue
            sf = SourceFile(path=path, uri=source_uri(path), doc_type=kind[0], language=kind[1])
            found.setdefault(sf.uri, sf)
    return sorted(found.values(), key=lambda s: s.uri), skipped, errors


def _walk(root: Path, errors: list[InputError]) -> Iterator[Path]:
    """Files below root (or root itself), skipping hidden and tool folders."""
    if not root.is_dir():
        yield root  # a file, a broken link or a pipe: read_bytes says what is wrong with it
        return

    def onerror(exc: OSError) -> None:
        errors.append(
            InputError(str(exc.filename), f"cannot list directory ({exc.strerror})", stage="discover")
        )

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name


def read_bytes(src: SourceFile) -> bytes:
    """The file's bytes, or an InputError that says why they cannot be read."""
    try:
        st = src.path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise InputError(src.uri, "is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(src.uri, "not a regular file (a pipe, socket or device): nothing to read")
        size = st.st_size
        if size > MAX_BYTES:
            raise InputError(src.uri, f"file is {size / 1e6:.0f} MB, over the {MAX_BYTES // 2**20} MiB limit")
        return src.path.read_bytes()
    except InputError:
        raise
    except FileNotFoundError as exc:
        raise InputError(src.uri, "file vanished or is a broken link") from exc
    except PermissionError as exc:
        raise InputError(src.uri, "permission denied: make the file readable for this user") from exc
    except OSError as exc:
        raise InputError(src.uri, f"cannot read file ({exc.strerror or exc})") from exc
