"""Read one source file's bytes through one checked open: the load stage's only door to the disk.

A file under a folder is opened at its real path only if that lies inside the folder, without following a
link at the last step; special files (FIFOs, devices, sockets) and files over the size limit are refused
with an InputError that says why. A file caught mid-rewrite (read empty while its stored version is not)
is read again once (`reread_empty`).
"""

from __future__ import annotations

import errno
import os
import stat
import time

from pipeline.errors import InputError, SkipFile
from pipeline.sources import MAX_BYTES, SourceFile, not_followed

#: A file that reads empty while its stored version is not, and was written during the run or this many
#: seconds before it began, is taken to be caught mid-rewrite (truncated, not yet written): its rows stay
#: for this run.
EMPTY_GRACE_S = 60.0
#: How long to wait before reading such a file a second time.
EMPTY_PAUSE_S = 0.5
EMPTY_NOW = (
    "read as empty (0 bytes) while being rewritten, it seems: its stored version is kept for this run "
    f"(a file emptied over {EMPTY_GRACE_S:.0f} s before a run began loses its rows)"
)

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def read_bytes(src: SourceFile) -> bytes:
    """The file's bytes through one checked open, or an InputError that says why they cannot be read.

    Every read of a source file comes here (resume, load, preview): a file under a folder is opened at its
    real path only if that lies inside the folder, without following a link at the last step, and the
    kernel's own name of the opened file is checked again (the race: a file swapped for a link after
    discovery). What was opened must be a regular file under the size limit, and the bytes come from
    that same descriptor. A link out of the folder is SkipFile, as at discovery. O_NONBLOCK: a FIFO
    never blocks the run.
    """
    try:
        fd = _open_checked(src)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise InputError(src.uri, "is a directory, not a file")
            if not stat.S_ISREG(st.st_mode):
                raise InputError(src.uri, "not a regular file (a pipe, socket or device): nothing to read")
            if st.st_size > MAX_BYTES:
                raise InputError(src.uri, _too_big(st.st_size))
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:  # it grew while being read
                raise InputError(src.uri, _too_big(len(data)))
            return data
        finally:
            os.close(fd)
    except (InputError, SkipFile):
        raise
    except FileNotFoundError as exc:
        raise InputError(src.uri, "file vanished or is a broken link") from exc
    except PermissionError as exc:
        raise InputError(src.uri, "permission denied: make the file readable for this user") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(
                src.uri, "a symlink loop (a link that leads back to itself): nothing to read"
            ) from exc
        raise InputError(src.uri, f"cannot read file ({exc.strerror or exc})") from exc


def reread_empty(src: SourceFile, *, since: float = 0.0) -> bytes | None:
    """A file read as 0 bytes whose stored version is not: read once more after a short pause (a writer
    that truncates, then writes); None if still empty and written during the run (begun at `since`) or
    EMPTY_GRACE_S before it (mid-rewrite: keep the stored rows for now, the next run sees the truth), else
    what the second read found (b"": emptied for real, its rows go). Bounded: one pause, one run."""
    time.sleep(EMPTY_PAUSE_S)
    data = read_bytes(src)
    if data:
        return data
    try:
        mtime = os.stat(src.path).st_mtime
    except OSError:
        return data
    begun = min(since or time.time(), time.time())
    return None if mtime >= begun - EMPTY_GRACE_S else data


def _too_big(size: int) -> str:
    return f"file is {size / 1e6:.0f} MB, over the {MAX_BYTES // 2**20} MiB limit"


def _open_checked(src: SourceFile) -> int:
    """A read-only descriptor of the file, never of something outside `src.root` (see `read_bytes`)."""
    if src.root is None:  # given directly (or links followed): the user named what it points at
        st = os.stat(src.path)
        _refuse_special(src, st.st_mode)
        return os.open(src.path, _OPEN_FLAGS)
    real_root = os.path.realpath(src.root)
    real = os.path.realpath(src.path)
    if not _inside(real, real_root):
        raise SkipFile(src.uri, not_followed(real))
    _refuse_special(src, os.stat(real).st_mode)  # before opening: a device is never opened at all
    fd = os.open(real, _OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0))  # ELOOP if it became a link since
    opened = _fd_path(fd)  # a folder on the way swapped for a link between realpath and open
    if opened is not None and not _inside(opened, real_root):
        os.close(fd)
        raise SkipFile(src.uri, not_followed(opened))
    return fd


def _refuse_special(src: SourceFile, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise InputError(src.uri, "is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(src.uri, "not a regular file (a pipe, socket or device): nothing to read")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _fd_path(fd: int) -> str | None:
    """The path the kernel holds for an open descriptor (Linux /proc); None where it cannot say."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


# ------------------------------------------------------------- which files a run takes, in which batches
