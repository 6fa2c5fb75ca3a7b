"""Discover source files, read their bytes, detect their type, give each a stable source id."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
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
    ".pdf": ("pdf", None),
    ".docx": ("docx", None),
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


def discover(
    paths: Iterable[Path | str], *, follow_external_links: bool = False
) -> tuple[list[SourceFile], list[Skipped], list[InputError]]:
    """All supported files under the given paths, sorted; unsupported ones skipped, missing ones errors.

    A link inside a folder that points outside it is skipped and reported (its target may be anything
    on the machine) unless `follow_external_links`; a path given directly is always read.
    """
    found: dict[str, SourceFile] = {}
    skipped: list[Skipped] = []
    errors: list[InputError] = []
    for raw in paths:
        root = Path(raw).expanduser()
        if not root.exists() and not root.is_symlink():
            errors.append(InputError(str(raw), "no such file or directory", stage="discover"))
            continue
        for path in _walk(root, errors, skipped, follow=follow_external_links):
            kind = detect(path)
            if kind is None:
                skipped.append(
                    Skipped(source_uri(path), f"unsupported file type {path.suffix or '(none)'!r}")
                )
                continue
            sf = SourceFile(path=path, uri=source_uri(path), doc_type=kind[0], language=kind[1])
            found.setdefault(sf.uri, sf)
    return sorted(found.values(), key=lambda s: s.uri), skipped, errors


def _walk(root: Path, errors: list[InputError], skipped: list[Skipped], *, follow: bool) -> Iterator[Path]:
    """Files below root (or root itself), skipping hidden and tool folders and links that leave root."""
    if not root.is_dir():
        yield root  # a file, a broken link or a pipe: read_bytes says what is wrong with it
        return
    real_root = root.resolve()

    def onerror(exc: OSError) -> None:
        errors.append(
            InputError(str(exc.filename), f"cannot list directory ({exc.strerror})", stage="discover")
        )

    def leaves(p: Path) -> Path | None:
        """The outside target of a link that leaves root; None for anything else."""
        if not p.is_symlink():
            return None
        target = p.resolve()
        return None if target == real_root or target.is_relative_to(real_root) else target

    seen_dirs = {real_root}
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=follow):
        keep = []
        for d in sorted(dirnames):
            p = Path(dirpath) / d
            if d in SKIP_DIRS or d.startswith("."):
                continue
            if p.is_symlink():
                target = leaves(p)
                if target is not None and not follow:
                    skipped.append(Skipped(source_uri(p), _not_followed(target)))
                    continue
                if target is None or p.resolve() in seen_dirs:
                    continue  # inside root it is walked anyway; a cycle is walked once
            seen_dirs.add(p.resolve())
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            p = Path(dirpath) / name
            target = leaves(p) if not follow else None
            if target is not None:
                skipped.append(Skipped(source_uri(p), _not_followed(target)))
                continue
            yield p


def _not_followed(target: Path) -> str:
    return (
        f"a link to {target}, outside the folder: not followed "
        "(--follow-external-links, or CHUNKYARD_FOLLOW_EXTERNAL_LINKS=1, ingests it)"
    )


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


# ------------------------------------------------------------- which files a run takes, in which batches


def expand_sources(sources: Sequence[str]) -> tuple[list[str], list[InputError]]:
    """Paths and glob patterns (`docs/**/*.md`) as paths; a pattern that matches nothing is an error."""
    paths: list[str] = []
    errors: list[InputError] = []
    for s in sources:
        if not any(c in s for c in "*?["):
            paths.append(s)
            continue
        hits = sorted(glob.glob(os.path.expanduser(s), recursive=True))
        if not hits:
            errors.append(InputError(s, "no files match this pattern", stage="discover"))
        paths += hits
    return paths, errors


def filter_modified(
    paths: Sequence[str], *, since: datetime | None = None, until: datetime | None = None
) -> list[str]:
    """Files last modified in [since, until): a backfill over a date range."""
    if since is None and until is None:
        return list(paths)
    lo = since.timestamp() if since else float("-inf")
    hi = until.timestamp() if until else float("inf")
    out = []
    for p in paths:
        try:
            mtime = Path(p).lstat().st_mtime
        except OSError:
            out.append(p)  # let the load stage report it
            continue
        if lo <= mtime < hi:
            out.append(p)
    return out


def cut_batches(paths: Sequence[str], *, max_files: int, max_bytes: int | None = None) -> list[list[str]]:
    """Batches of at most max_files files and about max_bytes bytes, biggest first: big ones start early."""
    if max_bytes is None:
        return [list(paths[i : i + max_files]) for i in range(0, len(paths), max_files)]

    def size(p: str) -> int:
        try:
            return Path(p).lstat().st_size
        except OSError:
            return 0

    batches: list[list[str]] = []
    cur: list[str] = []
    cur_bytes = 0
    for n, p in sorted(((size(p), p) for p in paths), key=lambda t: (-t[0], t[1])):
        if cur and (len(cur) >= max_files or cur_bytes + n > max_bytes):
            batches.append(cur)
            cur, cur_bytes = [], 0
        cur.append(p)
        cur_bytes += n
    if cur:
        batches.append(cur)
    return batches


def uri_path(uri: str) -> Path | None:
    """The local path of a file URI; None for any other kind of source."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    u = urlparse(uri)
    return Path(url2pathname(u.path)) if u.scheme == "file" else None
