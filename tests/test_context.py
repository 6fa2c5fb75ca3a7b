"""The embedded context as a profile choice: what each `context` value embeds, what an edited heading re-embeds,
and stored profiles from when the option was a bool (true/false) reading as before, with the same fingerprints."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pipeline.chunkers import REGISTRY
from pipeline.config import CodeConfig, MarkdownConfig, Profile, profile_from_dict, strategy_profile
from pipeline.errors import ConfigError
from pipeline.model import Document
from pipeline.normalize import normalize
from pipeline.sources import SourceFile

MODES = ("none", "title", "heading", "title_heading", "path")

NOTES = """# Release Notes

Every release, newest first.

## {version}

### Fixes

* Fix the reload of settings when the environment file changes.
* Fix a crash on an empty request body.

### Docs

* Explain how to run the app behind a proxy.

## 0.109.0

Only internal changes.
"""

TABLE = """# Field guide

## Elements

| Number | Symbol |
| ---: | --- |
""" + "".join(f"| {n} | X{n} |\n" for n in range(1, 60))


def md(text: str, name: str = "notes.md") -> Document:
    return normalize(SourceFile(Path(name), f"memory:{name}", "markdown"), text.encode())


def contexts(doc: Document, mode: str, size: int = 144) -> dict[str, str]:
    """Chunk text's first line -> its context, under one `context` choice."""
    chunker = REGISTRY["markdown"](MarkdownConfig(size=size, context=mode))
    return {c.text.split("\n", 1)[0]: c.context for _, cs in chunker.chunk_document(doc) for c in cs}


def test_each_choice_embeds_what_it_names():
    doc = md(NOTES.format(version="0.110.1"))
    assert doc.title == "Release Notes"
    got = {mode: contexts(doc, mode)["### Fixes"] for mode in MODES}
    assert got == {
        "none": "",
        "title": "Release Notes",
        "heading": "Fixes",
        "title_heading": "Release Notes > Fixes",
        "path": "Release Notes > 0.110.1 > Fixes",
    }
    # a section right under the title: its nearest heading is the title, said once
    intro = {mode: contexts(doc, mode)["# Release Notes"] for mode in MODES}
    assert intro == {
        "none": "",
        "title": "Release Notes",
        "heading": "Release Notes",
        "title_heading": "Release Notes",
        "path": "Release Notes",
    }


def test_a_renamed_parent_heading_re_embeds_only_under_the_full_path():
    """The FastAPI release notes gained dates ("0.110.1" -> "0.110.1 (2024-04-02)"): with the nearest heading
    only the chunk under the renamed heading itself changes; with the full path every chunk below it does."""
    before, after = md(NOTES.format(version="0.110.1")), md(NOTES.format(version="0.110.1 (2024-04-02)"))
    for mode in MODES:
        chunker = REGISTRY["markdown"](MarkdownConfig(size=144, context=mode))
        old = {c.embed_text for _, cs in chunker.chunk_document(before) for c in cs}
        new = [c for _, cs in chunker.chunk_document(after) for c in cs]
        changed = sorted(c.text.split("\n", 1)[0] for c in new if c.embed_text not in old)
        if mode == "path":
            assert changed == ["## 0.110.1 (2024-04-02)", "### Docs", "### Fixes"]
        else:
            assert changed == ["## 0.110.1 (2024-04-02)"]  # its own text changed, nothing below it


def test_table_header_rows_stay_in_the_context_of_every_choice_but_none():
    doc = md(TABLE, "guide.md")
    for mode in MODES:
        chunker = REGISTRY["markdown"](MarkdownConfig(size=64, context=mode))
        rows = [
            c for _, cs in chunker.chunk_document(doc) for c in cs if c.text.startswith("| ") and c.start > 60
        ]
        assert rows
        for c in rows:
            if mode == "none":
                assert c.context == ""
            else:
                assert c.context.endswith("| Number | Symbol |\n| ---: | --- |")


def test_code_keeps_its_own_context_unless_none():
    src = "import os\n\n\nclass Store:\n    def path(self) -> str:\n        return os.getcwd()\n"
    doc = normalize(SourceFile(Path("store.py"), "memory:store.py", "code", "python"), src.encode())
    for mode in MODES:
        chunker = REGISTRY["code"](CodeConfig(size=256, context=mode))
        ctx = {c.context for _, cs in chunker.chunk_document(doc) for c in cs}
        assert ctx == {""} if mode == "none" else all(x.startswith("# ") for x in ctx)


def test_stored_bool_profiles_read_as_before_with_the_same_fingerprints():
    stored = Profile().as_json()
    for flag, mode in ((True, "path"), (False, "none")):
        old = {**stored, "markdown": {**stored["markdown"], "context": flag}}
        prof = profile_from_dict(old)
        assert prof.markdown.context == mode
        # the fingerprint hashes the chunker as it was stored when `context` was a bool: no re-chunk
        payload = {"chunker": {**prof.markdown.model_dump(mode="json"), "context": flag}, "sections": 1024}
        want = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
        assert prof.fingerprint_for("markdown") == want
        as_mode = profile_from_dict({**stored, "markdown": {**stored["markdown"], "context": mode}})
        assert as_mode.fingerprint_for("markdown") == want
    # the other choices are new values: their own fingerprints, each different
    fps = {profile_from_dict({**stored, "markdown": {**stored["markdown"], "context": m}}).fingerprint_for("markdown")
           for m in MODES}  # fmt: skip
    assert len(fps) == len(MODES)


def test_profiles_stored_before_keep_whole_keep_their_fingerprints():
    """keep_whole off (0, as every profile stored before the option reads) is hashed as before it existed."""
    stored = {"kind": "markdown", "size": 144, "overlap": 0, "context": "title_heading"}
    prof = profile_from_dict({"markdown": stored})
    payload = {"chunker": {k: v for k, v in prof.markdown.model_dump(mode="json").items() if k != "keep_whole"},
               "sections": 1024}  # fmt: skip
    assert prof.markdown.keep_whole == 0
    assert prof.fingerprint_for("markdown") == hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    on = profile_from_dict({"markdown": {**stored, "keep_whole": 256}})
    assert on.fingerprint_for("markdown") != prof.fingerprint_for("markdown") == Profile(
        markdown=MarkdownConfig(size=144, overlap=0)).fingerprint_for("markdown")  # fmt: skip


def test_context_is_a_choice_named_in_errors_and_params():
    assert strategy_profile("markdown", size=144, context=False).markdown.context == "none"
    assert strategy_profile("markdown", size=144, context="heading").markdown.context == "heading"
    with pytest.raises(ConfigError, match=r"markdown.*context"):
        profile_from_dict({"markdown": {"kind": "markdown", "context": "chapter"}})


def test_the_default_is_title_and_nearest_heading():
    """Chosen on retrieval and re-embeds (docs/architecture.md): a stored `true` stays the full path, so it keeps its rows."""
    assert Profile().markdown.context == Profile().text.context == "title_heading"
    assert profile_from_dict({"markdown": {"kind": "markdown", "context": True}}).markdown.context == "path"
    assert Profile().fingerprint_for("markdown") != profile_from_dict(
        {"markdown": {"kind": "markdown", "size": 144, "overlap": 0, "context": True}}
    ).fingerprint_for("markdown")  # a collection on the old default is re-chunked once by the new one
