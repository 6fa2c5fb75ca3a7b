"""The export cache: one per user and machine, shared by data directories, each export made once, atomically.

The exporter itself is replaced by a stand-in that writes a file slowly (the real one is tested in
test_embed_backends.py): what is tested here is where exports go and what happens when processes race.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.embed.export_cache import (
    CACHE_ENV,
    EXPORT_VERSION,
    ensure_exported,
    export_cache_dir,
    export_dir,
    is_current,
)

#: A process that exports with a slow stand-in (one line per export into COUNT) and prints the folder.
_RACER = """
import sys, time
from pathlib import Path
from pipeline.embed import export_cache

model, cache, count = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

def slow_export(model, backend, dest):
    with count.open("a") as f:
        f.write(f"{backend}\\n")
    (dest / "model.xml").write_text("half")
    time.sleep(1.5)  # the other process arrives while this one is half done
    (dest / "model.xml").write_text("<net/>")

export_cache._export_in_subprocess = slow_export
export_cache.require_export_modules = lambda *a, **k: None
print(export_cache.ensure_exported(model, "openvino", cache))
"""


@pytest.fixture
def model_folder(tmp_path) -> str:
    """A model folder with weights and a config: what the export's stamp is made of."""
    folder = tmp_path / "weights" / "tiny@model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": 8}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return str(folder)


def test_the_cache_is_per_user_not_per_data_directory(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("CHUNKYARD_DATA_DIR", str(tmp_path / "a"))
    first = export_cache_dir()
    monkeypatch.setenv("CHUNKYARD_DATA_DIR", str(tmp_path / "b"))
    assert export_cache_dir() == first and not first.is_relative_to(tmp_path)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "exports"))
    assert export_cache_dir() == tmp_path / "exports"


def test_other_weights_or_exporter_get_a_folder_of_their_own(model_folder, tmp_path):
    before = export_dir(model_folder, "openvino", tmp_path)
    assert before.parent.parent == tmp_path and before.parent.name.endswith("--weights--tiny--model")
    assert before.name.startswith("openvino-int8-") and before != export_dir(model_folder, "onnx", tmp_path)
    (Path(model_folder) / "model.safetensors").write_bytes(b"\0" * 65)  # retrained: other weights
    assert export_dir(model_folder, "openvino", tmp_path) != before


def test_two_processes_exporting_at_once_make_it_once_and_a_later_data_dir_reuses_it(
    model_folder, tmp_path, monkeypatch
):
    cache, count = tmp_path / "exports", tmp_path / "exports.count"
    env = {**os.environ, "CHUNKYARD_DATA_DIR": str(tmp_path / "data-1")}
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, model_folder, str(cache), str(count)],
                         env=env, stdout=subprocess.PIPE, text=True)  # fmt: skip
        for _ in range(2)
    ]
    folders = [p.communicate(timeout=120)[0].strip() for p in racers]
    assert [p.returncode for p in racers] == [0, 0]
    folder = export_dir(model_folder, "openvino", cache)
    assert folders == [str(folder)] * 2
    assert count.read_text() == "openvino\n"  # exported once; the other waited for it
    assert (folder / "model.xml").read_text() == "<net/>" and is_current(folder, model_folder)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["version"] == EXPORT_VERSION and meta["tag"] == "openvino-int8"
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".export-")] == []  # no leftovers
    # another data directory, the same user (the cache named once, as a user would): the export is reused
    monkeypatch.setenv(CACHE_ENV, str(cache))
    monkeypatch.setenv("CHUNKYARD_DATA_DIR", str(tmp_path / "data-2"))
    assert ensure_exported(model_folder, "openvino") == folder
    assert count.read_text() == "openvino\n"
