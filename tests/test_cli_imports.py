"""Commands that embed nothing load no model runtime (issue 26): `chunk` took 10-22 s because counting word
pieces went through transformers, which imports torch. Each runs in a fresh interpreter, as a user's would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline.ingest import run_ingest

#: Packages that take seconds to import and that only embedding (or the transformers wrapper) needs.
RUNTIMES = ("torch", "transformers", "sentence_transformers", "openvino", "onnxruntime")

_PROBE = f"""
import atexit, sys
def _report():
    sys.stderr.write("LOADED: " + ",".join(m for m in {RUNTIMES!r} if m in sys.modules) + "\\n")
atexit.register(_report)
from pipeline.cli import main
sys.argv = ["chunkyard", *sys.argv[1:]]
main()
"""


@pytest.fixture
def stored(docs, database_url):
    """The sample folder ingested (in this process: the commands under test only read it)."""
    run_ingest([str(docs)], collection="default")
    return docs


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["ingest", "--help"],
        ["status"],
        ["chunk", "{docs}/getting-started.md"],
        ["chunk", "{docs}/textstats.py"],
        ["search", "--mode", "fulltext", "postgres"],
    ],
    ids=lambda a: " ".join(a).replace("{docs}/", ""),
)
def test_a_command_that_embeds_nothing_imports_no_model_runtime(args, stored, database_url, tmp_path):
    argv = [a.format(docs=stored) for a in args]
    env = {**os.environ, "CHUNKYARD_DATABASE_URL": database_url, "CHUNKYARD_DATA_DIR": str(tmp_path / "data")}
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    loaded = [ln for ln in res.stderr.splitlines() if ln.startswith("LOADED: ")]
    assert loaded == ["LOADED: "], f"{' '.join(args)} imported {loaded}"


def test_the_model_tokenizer_read_without_transformers_counts_as_transformers_does():
    """The tokenizer.json read directly is the one transformers builds (same serialization, same counts)."""
    from pipeline.tokens import ModelCounter, hf_tokenizer, rust_tokenizer_json

    via_transformers = hf_tokenizer().backend_tokenizer.to_str()
    assert rust_tokenizer_json() == rust_tokenizer_json()  # cached
    import json

    def rules(spec: str) -> dict:  # truncation and padding: the counter turns both off
        return {k: v for k, v in json.loads(spec).items() if k not in ("truncation", "padding")}

    assert rules(rust_tokenizer_json()) == rules(via_transformers)
    text = "Postgres stores the chunks; pgvector indexes them. Ünïcode, 中文 and emoji 🙂 too."
    assert ModelCounter().count(text) == len(hf_tokenizer()(text, add_special_tokens=False)["input_ids"])
