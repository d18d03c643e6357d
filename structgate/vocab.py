"""The tokenizer vocabulary as the engines see it: the exact bytes of every token id.

A :class:`Vocabulary` is built once per tokenizer and shared by every backend, so all engines see
the same token bytes, the same EOS ids and the same logits width.

Token bytes come from the tokenizer's byte mapping, never from ``decode([id])``:

* byte-level BPE (GPT-2, Llama 3, Qwen2, cl100k): each character of the token string maps back to
  one byte through the GPT-2 ``bytes_to_unicode`` table;
* SentencePiece (Llama 2, Phi-3, Gemma): ``▁`` (U+2581) is a space, ``<0xNN>`` byte-fallback
  tokens are the single byte ``0xNN``, other pieces are their UTF-8 encoding;
* tiktoken: the base64 field of each rank line is the token's bytes.

Special / control tokens (BOS, EOS, chat markers, unused slots) have **no bytes**: their entry in
:attr:`Vocabulary.token_bytes` is ``b""`` and they can never advance a pattern. Only EOS ids get the
accepting-state rule (see :mod:`structgate.backends.interface`).
"""
from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ._text import describe_lone_surrogate, lone_surrogate
from .errors import VocabularyError

__all__ = ["Vocabulary", "load_vocabulary", "bundled_tokenizers", "clear_vocabulary_cache"]


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token bytes, EOS ids, special ids and logits width of one tokenizer.

    Parameters
    ----------
    token_bytes : Sequence[bytes]
        ``token_bytes[i]`` is the exact byte string of token id ``i``; ``b""`` for special tokens.
        Its length is the tokenizer's size (``n_tokens``).
    eos_token_ids : Sequence[int]
        Ids that end generation; allowed only where the output is a complete match.
    special_token_ids : frozenset[int]
        Ids with no bytes (control tokens, including EOS). Never allowed except EOS as above: a
        special id other than EOS given bytes in ``token_bytes`` has them replaced by ``b""``.
    vocab_size : int
        Logits width (``>= n_tokens``; models pad their lm_head, e.g. Qwen2 151,936 logits for
        151,665 tokens). Ids ``n_tokens .. vocab_size-1`` are padding and never allowed.
    name : str
        Human-readable name (``"llama3"``, a path).
    encoder : Callable[[str], list[int]] | None
        Text → token ids without special tokens (for ``structgate check`` and benchmarks).
    token_names : Sequence[str] | None
        The tokenizer's own token strings, for display only.

    Raises
    ------
    VocabularyError
        ``vocab_size < n_tokens``, no EOS id, or an EOS id out of range.
    """

    token_bytes: tuple[bytes, ...]
    eos_token_ids: tuple[int, ...]
    special_token_ids: frozenset[int] = frozenset()
    vocab_size: int = 0
    name: str = ""
    encoder: Callable[[str], list[int]] | None = field(default=None, repr=False)
    token_names: tuple[str, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_bytes", tuple(bytes(b) for b in self.token_bytes))
        object.__setattr__(self, "eos_token_ids", tuple(int(i) for i in self.eos_token_ids))
        specials = frozenset(int(i) for i in self.special_token_ids) | frozenset(self.eos_token_ids)
        object.__setattr__(self, "special_token_ids", specials)
        n = len(self.token_bytes)
        # a special id is never allowed (EOS aside): it spells no bytes, whatever a hand-built or
        # converted vocabulary gave it, so that no engine's trie can match it as text
        eos = frozenset(self.eos_token_ids)
        spelled = [i for i in specials if i not in eos and 0 <= i < n and self.token_bytes[i]]
        if spelled:
            tb = list(self.token_bytes)
            for i in spelled:
                tb[i] = b""
            object.__setattr__(self, "token_bytes", tuple(tb))
        if not self.vocab_size:
            object.__setattr__(self, "vocab_size", n)
        if self.vocab_size < n:
            raise VocabularyError(f"vocab_size {self.vocab_size} is smaller than the tokenizer's {n} tokens")
        if not self.eos_token_ids:
            raise VocabularyError(f"vocabulary {self.name!r} has no EOS token id")
        for i in self.eos_token_ids:
            if not 0 <= i < n:
                raise VocabularyError(f"EOS id {i} out of range for {n} tokens")
        if self.token_names is not None:
            object.__setattr__(self, "token_names", tuple(self.token_names))

    @property
    def n_tokens(self) -> int:
        """Number of real token ids (the tokenizer's length)."""
        return len(self.token_bytes)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the token bytes, EOS ids and width: a cache key for compiled grammars."""
        fp = self.__dict__.get("_fp")
        if fp is None:
            h = hashlib.sha256()
            for b in self.token_bytes:
                h.update(len(b).to_bytes(2, "little"))
                h.update(b)
            h.update(repr((self.eos_token_ids, sorted(self.special_token_ids), self.vocab_size)).encode())
            fp = h.hexdigest()
            object.__setattr__(self, "_fp", fp)
        return fp

    def with_vocab_size(self, vocab_size: int) -> "Vocabulary":
        """The same vocabulary for a model whose logits are ``vocab_size`` wide."""
        return Vocabulary(self.token_bytes, self.eos_token_ids, self.special_token_ids, vocab_size,
                          self.name, self.encoder, self.token_names)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added).

        Raises
        ------
        VocabularyError
            The vocabulary has no encoder.
        ValueError
            ``text`` holds a lone surrogate (``"\\ud800"``): it has no UTF-8 bytes, so no token
            spells it (the message names the character and where it is).
        """
        if self.encoder is None:
            raise VocabularyError(f"vocabulary {self.name!r} has no encoder (built from bytes only)")
        i = lone_surrogate(text)
        if i is not None:
            raise ValueError(f"the text holds {describe_lone_surrogate(text, i)}: it has no UTF-8 bytes, "
                             "so it cannot be tokenized")
        return list(self.encoder(text))

    def describe(self, token_id: int) -> str:
        """``id:repr(bytes)`` for messages."""
        if 0 <= token_id < self.n_tokens:
            b = self.token_bytes[token_id]
            if not b and self.token_names:
                return f"{token_id}:<{self.token_names[token_id]}>"
            return f"{token_id}:{b!r}"
        return f"{token_id}:<padding>"

    # -- constructors: the format readers of structgate.tokenizers return the fields (VocabParts);
    # they never import this module, so vocab and tokenizers do not import each other in a cycle
    @classmethod
    def from_hf(cls, tokenizer, *, vocab_size: int | None = None, name: str | None = None,
                **kwargs) -> "Vocabulary":
        """From a Hugging Face tokenizer object (``transformers`` or ``tokenizers``) or a folder /
        ``tokenizer.json`` path. See :func:`structgate.tokenizers.from_hf` (``eos_token_ids=``)."""
        from .tokenizers.hf import read_hf

        return cls(*read_hf(tokenizer, vocab_size=vocab_size, name=name, **kwargs))

    @classmethod
    def from_gguf(cls, path, *, vocab_size: int | None = None, **kwargs) -> "Vocabulary":
        """From a GGUF file (vocab-only or a full model; ``.gguf.gz`` too). See
        :func:`structgate.tokenizers.from_gguf` (``eos_token_ids=``)."""
        from .tokenizers.gguf import read_gguf

        return cls(*read_gguf(path, vocab_size=vocab_size, **kwargs))

    @classmethod
    def from_tiktoken(cls, path, *, vocab_size: int | None = None, **kwargs) -> "Vocabulary":
        """From a tiktoken ``.tiktoken`` BPE ranks file. See :func:`structgate.tokenizers.from_tiktoken`
        (``special_tokens=``, ``pat_str=``, ``eos_token=``)."""
        from .tokenizers.tiktoken_bpe import read_tiktoken

        return cls(*read_tiktoken(path, vocab_size=vocab_size, **kwargs))


_LOADED: dict[tuple, Vocabulary] = {}
_LOAD_LOCK = threading.Lock()


def clear_vocabulary_cache() -> None:
    """Forget the vocabularies :func:`load_vocabulary` has cached (``structgate.tokenizers.clear_cache``)."""
    with _LOAD_LOCK:
        _LOADED.clear()


def load_vocabulary(spec, *, vocab_size: int | None = None) -> Vocabulary:
    """Resolve a vocabulary spec (also ``structgate.tokenizers.load``).

    Order: a bundled name (``llama3``, ``llama2``, ``cl100k``: :data:`structgate.tokenizers.BUNDLED`),
    a folder with ``tokenizer.json``, a ``.json`` file, a ``.gguf`` file, a ``.tiktoken`` (or
    ``.tiktoken.gz``) file; a ``Vocabulary`` is returned as is (widened to ``vocab_size``). Results
    are cached per ``(spec, vocab_size)`` in this process (a path's cache entry is keyed by its
    resolved path, size and mtime); a cached widening (``vocab_size``) reuses the unwidened
    vocabulary.

    Raises
    ------
    VocabularyError
        Unknown name / missing path (the message lists the bundled names), unreadable file, or
        ``vocab_size`` smaller than the tokenizer.
    """
    from .tokenizers.bundled import read_spec, spec_key

    if isinstance(spec, Vocabulary):
        return spec if vocab_size in (None, spec.vocab_size) else spec.with_vocab_size(vocab_size)
    key = spec_key(spec)
    with _LOAD_LOCK:
        base = _LOADED.get(key)
    if base is None:
        base = Vocabulary(*read_spec(os.fspath(spec)))
        with _LOAD_LOCK:
            base = _LOADED.setdefault(key, base)
    if vocab_size is None or vocab_size == base.vocab_size:
        return base
    if vocab_size < base.n_tokens:
        raise VocabularyError(f"vocab_size {vocab_size} is smaller than {base.name!r}'s {base.n_tokens} tokens")
    wkey = key + ("width", vocab_size)
    with _LOAD_LOCK:
        v = _LOADED.get(wkey)
        if v is None:
            v = _LOADED[wkey] = base.with_vocab_size(vocab_size)
    return v


def bundled_tokenizers() -> dict[str, str]:
    """Names of the tokenizers the package carries, with a one-line description each."""
    from .tokenizers.bundled import BUNDLED

    return {k: v["description"] for k, v in BUNDLED.items()}
