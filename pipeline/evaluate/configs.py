"""What to score: configurations from `--strategy KIND:k=v,...` specs or TOML profiles, with eval-only switches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.config import Profile, load_profile, profile_from_dict, strategy_profile
from pipeline.errors import ConfigError

DocTypeChoice = Literal["auto", "text", "markdown"]

#: The separators of Chroma's recursive configurations (LangChain's, with sentence punctuation).
CHROMA_SEPARATORS = ("\n\n", "\n", ".", "?", "!", " ", "")

#: A model limit no chunk reaches: the chunkers never re-split, so the model truncates (Chroma's runs).
NO_MODEL_LIMIT = 10**9


@dataclass(frozen=True)
class EvalConfig:
    """One configuration to score: a profile, how the corpora are typed, and eval-only switches."""

    label: str
    profile: Profile
    doc_type: DocTypeChoice = "auto"
    model_truncates: bool = False  # eval-only: no re-split at the model's input limit; the model truncates
    spec: str = ""

    @property
    def model_limit(self) -> int | None:
        """The chunkers' model limit for this configuration (None: the model's own, chunks re-split)."""
        return NO_MODEL_LIMIT if self.model_truncates else None


_EVAL_KEYS = {"label", "as", "truncate", "section_tokens"}


def parse_config(
    spec: str, *, doc_type: DocTypeChoice = "auto", section_tokens: int | None = None
) -> EvalConfig:
    """`KIND[:k=v,...]` or `default[:...]`: chunker params plus label, as, truncate, section_tokens."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    params = _parse_params(rest, spec)
    label = str(params.pop("label", spec))
    as_type = params.pop("as", doc_type)
    if as_type not in ("auto", "text", "markdown"):
        raise ConfigError(f"--strategy {spec}: as={as_type!r}; expected auto, text or markdown")
    truncate = params.pop("truncate", False)
    if not isinstance(truncate, bool):
        raise ConfigError(f"--strategy {spec}: truncate must be true or false")
    sec = params.pop("section_tokens", section_tokens)
    if params.get("separators") == "chroma":
        params["separators"] = list(CHROMA_SEPARATORS)
    if kind == "default":
        if params:
            raise ConfigError(
                f"--strategy {spec}: `default` takes only {', '.join(sorted(_EVAL_KEYS))}; "
                f"got {', '.join(sorted(params))} (use a TOML --profile to change its chunkers)"
            )
        profile = Profile()
    else:
        profile = strategy_profile(kind, **params)
    return EvalConfig(label, _with_sections(profile, sec, spec), as_type, truncate, spec)


def profile_config(
    path: str, *, doc_type: DocTypeChoice = "auto", section_tokens: int | None = None, truncate: bool = False
) -> EvalConfig:
    """A configuration from a TOML profile file (or `default`), labelled by the file's stem."""
    profile = Profile() if path == "default" else load_profile(path)
    label = "default" if path == "default" else Path(path).stem
    return EvalConfig(label, _with_sections(profile, section_tokens, path), doc_type, truncate, path)


def _with_sections(profile: Profile, section_tokens: Any, origin: str) -> Profile:
    """The profile with another section size: Chroma chunked whole corpora, one section each."""
    if section_tokens is None:
        return profile
    return profile_from_dict({**profile.as_json(), "section_tokens": section_tokens}, origin=origin)


def _parse_params(rest: str, spec: str) -> dict[str, Any]:
    """`a=1,b=[x, y],c=text` split at top-level commas; values are JSON where they parse."""
    out: dict[str, Any] = {}
    parts, depth, cur, quote = [], 0, [], False
    for ch in rest:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "[{":
            depth += 1
        elif not quote and ch in "]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    for item in (p.strip() for p in parts):
        if not item:
            continue
        if "=" not in item:
            raise ConfigError(f"--strategy {spec}: {item!r} is not NAME=VALUE")
        k, v = (x.strip() for x in item.split("=", 1))
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def config_meta(cfg: EvalConfig) -> dict:
    """What a result records about the configuration that produced it."""
    return {
        "spec": cfg.spec,
        "doc_type": cfg.doc_type,
        "model_truncates": cfg.model_truncates,
        "profile": cfg.profile.as_json(),
    }
