"""Chat logs and transcripts: recognising one, and where its speaker turns begin."""

from __future__ import annotations

import re

#: A speaker turn at a line start: an optional `[timestamp]`, then `Speaker:` and a space.
TURN = re.compile(r"^\s*(?:\[[^\]\n]{1,40}\]\s*)?([A-Za-z][\w .'@-]{0,39}):\s", re.M)


def looks_like_chat(text: str) -> bool:
    """A transcript: most non-empty lines start with `Speaker:` and a few speakers recur."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if len(lines) < 4:
        return False
    speakers = [m.group(1).strip().lower() for m in (TURN.match(ln) for ln in lines) if m]
    return len(speakers) >= 0.6 * len(lines) and len(set(speakers)) <= max(2, len(speakers) // 3)


def chat_turns(text: str, start: int, end: int) -> list[int]:
    """Offsets where a new speaker turn begins inside [start, end)."""
    return [m.start() for m in TURN.finditer(text, start, end)]
