"""Discover source files, detect their type, give each a stable source id (reading them: `pipeline.reading`)."""

from __future__ import annotations

import glob
import os
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
    """One file to ingest: where it is, its stable id, and what kind of document it is.

    `root` is the folder it was found under: a read never leaves it, whatever the file has become since
    (a link swapped in after discovery). None for a path given directly, or when links are followed.
    """

    path: Path
    uri: str
    doc_type: str
    language: str | None = None
    root: Path | None = None


@dataclass(frozen=True)
class Skipped:
    """A file discovery passed over, with the reason shown to the user.

    `forget`: its stored rows must go (a link out of the folder is never indexed, whatever was read before).
    """

    uri: str
    reason: str
    forget: bool = False


class UnlistedFolder(InputError):
    """A folder discovery could not list: its files are unknown, so what is stored under it is kept.

    `keep` goes into a run's `seen` set: an entry ending in "/" marks every document below it seen.
    """

    def __init__(self, path: str | Path, why: str) -> None:
        super().__init__(
            source_uri(Path(path)),
            f"cannot list directory ({why}); its stored documents are kept until it can be listed",
            stage="discover",
        )
        self.keep = seen_below(Path(path))


def source_uri(path: Path) -> str:
    """Stable id of a file: its absolute path as a file URI (links are not followed: a link is its own file).

    The path's raw bytes are percent-encoded (a name that is not UTF-8 stays exact): `uri_path` inverts it.
    """
    return Path(os.path.abspath(path)).as_uri()


def seen_below(folder: Path) -> str:
    """The `seen` entry that keeps every stored document under a folder (no file URI ends in "/")."""
    return source_uri(folder).rstrip("/") + "/"


def shown(path: str | Path) -> str:
    """A path as text for messages and the database: bytes that are not UTF-8 as \\xNN, never a surrogate."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def detect(path: Path) -> tuple[str, str | None] | None:
    """Document type and language from the file name; None if unsupported."""
    return SUFFIXES.get(path.suffix.lower())


def discover(
    paths: Iterable[Path | str], *, follow_external_links: bool = False
) -> tuple[list[SourceFile], list[Skipped], list[InputError]]:
    """All supported files under the given paths, sorted; unsupported ones skipped, missing ones errors.

    A link inside a folder that points outside it is skipped and reported (its target may be anything
    on the machine) unless `follow_external_links`; a path given directly is always read. A folder that
    cannot be listed is an `UnlistedFolder` error.
    """
    found: dict[str, SourceFile] = {}
    skipped: list[Skipped] = []
    errors: list[InputError] = []
    for raw in paths:
        root = Path(raw).expanduser()
        if not root.exists() and not root.is_symlink():
            errors.append(InputError(shown(raw), "no such file or directory", stage="discover"))
            continue
        for path, within in _walk(root, errors, skipped, follow=follow_external_links):
            sf = _source(path, within)
            if isinstance(sf, Skipped):
                skipped.append(sf)
            else:
                found.setdefault(sf.uri, sf)
    return sorted(found.values(), key=lambda s: s.uri), skipped, errors


def _walk(
    root: Path, errors: list[InputError], skipped: list[Skipped], *, follow: bool
) -> Iterator[tuple[Path, Path | None]]:
    """Files below root (or root itself) with the folder their reads must stay in; hidden and tool
    folders skipped, and links that leave root."""
    if not root.is_dir():
        yield root, None  # a file, a broken link or a pipe: read_bytes says what is wrong with it
        return
    real_root = root.resolve()
    within = None if follow else Path(os.path.abspath(root))

    def onerror(exc: OSError) -> None:
        errors.append(UnlistedFolder(exc.filename, exc.strerror or str(exc)))

    def leaves(p: Path) -> Path | None:
        """The outside target of a link that leaves root; None for anything else (a loop: read_bytes says)."""
        try:
            if not p.is_symlink():
                return None
            target = p.resolve()
        except (RuntimeError, OSError):  # a symlink loop (Python 3.11: RuntimeError), a path too long
            return None
        return None if target == real_root or target.is_relative_to(real_root) else target

    seen_dirs = {real_root}
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=follow):
        keep = []
        for d in sorted(dirnames):
            p = Path(dirpath) / d
            if d in SKIP_DIRS or d.startswith("."):
                continue
            try:
                if p.is_symlink():
                    target = leaves(p)
                    if target is not None and not follow:
                        skipped.append(Skipped(source_uri(p), not_followed(target), forget=True))
                        continue
                    if target is None or p.resolve() in seen_dirs:
                        continue  # inside root it is walked anyway; a cycle is walked once
            except OSError as exc:  # e.g. its path is too long: it cannot be listed either
                errors.append(UnlistedFolder(p, exc.strerror or str(exc)))
                continue
            seen_dirs.add(p.resolve())
            keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            p = Path(dirpath) / name
            target = leaves(p) if not follow else None
            if target is not None:
                skipped.append(Skipped(source_uri(p), not_followed(target), forget=True))
                continue
            yield p, within


def not_followed(target: Path | str) -> str:
    return (
        f"a link to {shown(target)}, outside the folder: not followed "
        "(--follow-external-links, or CHUNKYARD_FOLLOW_EXTERNAL_LINKS=1, ingests it)"
    )


def root_of(path: str | Path, roots: Sequence[str]) -> Path | None:
    """The folder a discovered path was found under: the deepest of the run's folders above it (None:
    a path given directly). Discovery joins names onto the folder as given, so the test is lexical."""
    ap = os.path.abspath(path)
    best: str | None = None
    for r in roots:
        ar = os.path.abspath(r)
        if ap.startswith(ar.rstrip("/") + "/") and (best is None or len(ar) > len(best)):
            best = ar
    return Path(best) if best is not None else None


def typed(
    paths: Iterable[str | Path], *, roots: Sequence[str] = ()
) -> tuple[list[SourceFile], list[Skipped]]:
    """Paths known to be files (a reindex's stored ones) as source files, with the folder each was found
    under, without walking anything (the read checks what each path is now)."""
    files: list[SourceFile] = []
    skipped: list[Skipped] = []
    for raw in paths:
        path = Path(raw)
        sf = _source(path, root_of(path, roots))
        (skipped if isinstance(sf, Skipped) else files).append(sf)  # type: ignore[arg-type]
    return files, skipped


def _source(path: Path, root: Path | None) -> SourceFile | Skipped:
    """A path as a typed source file found under `root`, or skipped for its unsupported type."""
    kind = detect(path)
    if kind is None:
        return Skipped(source_uri(path), f"unsupported file type {shown(path.suffix) or '(none)'!r}")
    return SourceFile(path, source_uri(path), kind[0], kind[1], root=root)


# ---------------------------------------------------------------------------------- the one checked open

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
    """The local path of a file URI, to the byte (a name that is not UTF-8 too); None for any other kind."""
    from urllib.parse import unquote_to_bytes, urlparse

    u = urlparse(uri)
    return Path(os.fsdecode(unquote_to_bytes(u.path))) if u.scheme == "file" else None
