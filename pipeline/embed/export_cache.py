"""Where exported models are kept, once per user and machine, and how each is made exactly once.

Every data directory of a user shares one cache: the per-user cache folder (`~/.cache/chunkyard/models` on
Linux, platformdirs' `user_cache_dir`), or the folder the environment variable `CHUNKYARD_EXPORT_CACHE`
names. An export's folder is named by the model, the backend and a hash of the exporter version and the
weights' stamp, so other weights or a newer exporter get a folder of their own and never replace one that a
running process reads. It is written in a temporary folder beside it and renamed into place under a file
lock: processes exporting at once make it once (the others wait and reuse it), and none sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

from pipeline.embed.keys import BACKEND_TAGS, EXPORT_MODULES, EXTRAS, base_model
from pipeline.embed.meta import model_path
from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

#: The environment variable that moves the export cache.
CACHE_ENV = "CHUNKYARD_EXPORT_CACHE"

#: Bump when the exported graph changes: an older export is redone (in a folder of its own), never loaded.
EXPORT_VERSION = 1


def export_cache_dir() -> Path:
    """The folder exports are kept in: CHUNKYARD_EXPORT_CACHE, else the per-user cache folder's `models`."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("chunkyard")) / "models"


def source_stamp(model: str) -> str:
    """What identifies the local weights an export was made from (names, sizes, config)."""
    root = Path(model_path(model))
    files = sorted(p for p in root.glob("*") if p.suffix in (".safetensors", ".bin", ".json") and p.is_file())
    return ";".join(f"{p.name}:{p.stat().st_size}" for p in files)


def export_dir(model: str, backend: str, cache_dir: Path | None = None) -> Path:
    """The folder an export lives in: one per model, backend (the tag names the quantisation), exporter
    version and weights."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", model.strip("/"))[-120:]
    made_of = hashlib.sha256(f"{EXPORT_VERSION}\n{source_stamp(model)}".encode()).hexdigest()[:12]
    return (cache_dir or export_cache_dir()) / slug / f"{BACKEND_TAGS[backend]}-{made_of}"


def is_current(folder: Path, model: str) -> bool:
    """Whether a finished export of these weights, by this exporter version, is in the folder."""
    meta = folder / "meta.json"
    if not meta.exists():
        return False
    m = json.loads(meta.read_text())
    return m.get("version") == EXPORT_VERSION and m.get("source") == source_stamp(model)


def require_export_modules(model: str, backend: str, *, cache_dir: Path | None = None) -> None:
    """Refuse up front, before a run creates anything, a backend whose model must still be exported when the
    export's modules are missing (the export subprocess failed with a traceback, after an empty set was made)."""
    need = EXPORT_MODULES.get(backend, ())
    missing = [m for m in need if find_spec(m) is None]
    if not missing or is_current(export_dir(model, backend, cache_dir), model):
        return  # exported already: running it needs only the run-time modules
    raise ConfigError(
        f"CHUNKYARD_EMBED_BACKEND={backend} exports {base_model(model)} once first, which needs "
        f"{', '.join(missing)}: pip install 'chunkyard[{EXTRAS[backend]}]'"
    )


def ensure_exported(model: str, backend: str, cache_dir: Path | None = None) -> Path:
    """The export's folder, exporting first if needed (one process at a time; others wait and reuse it)."""
    from filelock import FileLock

    folder = export_dir(model, backend, cache_dir)
    if is_current(folder, model):
        return folder
    # a missing module is said in one line, not in the export subprocess's traceback
    require_export_modules(model, backend, cache_dir=cache_dir)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if is_current(folder, model):
            return folder
        log.warning("exporting %s for the %s backend once, into %s (about a minute)", model, backend, folder)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
        tmp.chmod(0o755)
        try:
            _export_in_subprocess(model, backend, tmp)
            meta = {"model": model, "backend": backend, "tag": BACKEND_TAGS[backend]}
            meta |= {"version": EXPORT_VERSION, "source": source_stamp(model)}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            if folder.exists():  # an unfinished one (no meta.json): nobody can be reading it
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _export_in_subprocess(model: str, backend: str, dest: Path) -> None:
    """Export in a child process: torch and NNCF never share a process with the model that then runs
    (a compiled OpenVINO model destroyed in a process that had run them hung in its stream threads' join)."""
    import subprocess
    import sys

    code = "import sys; from pipeline.embed.export import export; export(*sys.argv[1:])"
    proc = subprocess.run(
        [sys.executable, "-c", code, model, backend, str(dest)], stdin=subprocess.DEVNULL, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"exporting {model} for {backend} failed (exit {proc.returncode}); see above")
