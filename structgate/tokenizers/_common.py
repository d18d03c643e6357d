"""Shared helpers of the tokenizer readers: GGUF/HF end-of-generation texts, GPT-2's byte table,
SentencePiece piece bytes, and :func:`_assemble`, which turns per-id bytes / specials / EOS ids into
the fields of a :class:`~structgate.vocab.Vocabulary` (:class:`VocabParts`).

The readers (:mod:`.hf`, :mod:`.spm`, :mod:`.gguf`, :mod:`.tiktoken_bpe`, :mod:`.bundled`) return
:class:`VocabParts`, never a ``Vocabulary``: the class is built from them by
:mod:`structgate.vocab` (``Vocabulary.from_hf`` ...) and by the public functions of
:mod:`structgate.tokenizers`, so ``structgate.vocab`` and ``structgate.tokenizers`` do not import
each other (``vocab`` uses the readers; the ``tokenizers`` package uses ``vocab``).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Iterable, NamedTuple

import numpy as np

from ..errors import VocabularyError


class VocabParts(NamedTuple):
    """The fields of a :class:`~structgate.vocab.Vocabulary`, in its constructor's order
    (``Vocabulary(*parts)``); see that class for their meaning."""

    token_bytes: tuple[bytes, ...]
    eos_token_ids: tuple[int, ...]
    special_token_ids: frozenset[int]
    vocab_size: int
    name: str
    encoder: Callable[[str], list[int]] | None
    token_names: tuple[str, ...] | None


#: Texts of tokens that end generation (llama.cpp's EOG list in ``llama-vocab.cpp``, plus Gemma 4's
#: ``<turn|>``). As llama.cpp does, a GGUF token or HF *added* token with one of these texts is
#: treated as a control token (no bytes) and an EOS id, whatever its declared type.
EOG_TOKEN_NAMES: frozenset[str] = frozenset({
    "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_utterance>", "<turn|>",
})


#: EOS texts used only when a tokenizer names no EOS at all (a bare ``tokenizers.Tokenizer``).
_EOS_FALLBACK_NAMES = frozenset({"</s>", "<eos>", "<|eos|>", "[EOS]"})


_PAD_RE = re.compile(r"\[PAD\d+\]\Z")


@lru_cache(maxsize=None)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character table (256 entries).

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards in byte
    order. Source: ``bytes_to_unicode`` in openai/gpt-2 ``src/encoder.py``.
    """
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@lru_cache(maxsize=None)
def _bytelevel_translate() -> dict[int, int]:
    # byte-level char -> the Latin-1 char of its byte, so ``s.translate(T).encode("latin-1")``
    return {ord(ch): b for b, ch in bytes_to_unicode().items()}


def _bytelevel_bytes(token: str) -> bytes | None:
    """Bytes of a byte-level BPE token string, or None if a character is outside the table."""
    t = token.translate(_bytelevel_translate())
    try:
        return t.encode("latin-1")
    except UnicodeEncodeError:
        return None


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>\Z")


def _spm_bytes(piece: str) -> bytes:
    """Bytes of a SentencePiece piece: ``<0xNN>`` → that byte, ``▁`` → space, else UTF-8."""
    if len(piece) == 6 and piece.startswith("<0x"):
        m = _BYTE_PIECE.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


def _assemble(entries: dict[int, bytes], specials: set[int], names: dict[int, str], eos: Iterable[int],
              *, n_tokens: int | None, vocab_size: int | None, name: str, encoder) -> VocabParts:
    """The :class:`VocabParts` of ids ``0 .. n_tokens-1`` (default: max id + 1): ``entries[i]`` are
    token bytes, ``specials`` and EOS ids get ``b""``, ids no entry or special covers are special.

    Raises
    ------
    VocabularyError
        No tokens, no EOS id, ``vocab_size < n_tokens``.
    """
    if n_tokens is None:
        n_tokens = max(entries.keys() | specials) + 1 if (entries or specials) else 0
    if n_tokens == 0:
        raise VocabularyError(f"tokenizer {name!r} has no tokens")
    tb = [b""] * n_tokens
    tn = [""] * n_tokens
    present = np.zeros(n_tokens, dtype=bool)
    for i, b in entries.items():
        if i < n_tokens:
            tb[i] = b
            present[i] = True
    for i, s in names.items():
        if i < n_tokens:
            tn[i] = s
    sp = {i for i in specials if i < n_tokens}
    for i in sp:
        tb[i] = b""
        present[i] = True
    holes = np.nonzero(~present)[0]
    sp.update(int(i) for i in holes)  # ids with no token at all are never allowed
    eos_ids = sorted({int(i) for i in eos if 0 <= int(i) < n_tokens})
    if not eos_ids:  # a bare tokenizer without config: the conventional EOS texts
        eos_ids = sorted(i for i in sp if tn[i] in _EOS_FALLBACK_NAMES)
    for i in eos_ids:  # EOS is a control token: no bytes
        tb[i] = b""
    if not eos_ids:
        raise VocabularyError(f"tokenizer {name!r} has no EOS token: no eos_token in its config and no special "
                              f"token named like an end of generation (e.g. </s>, <|endoftext|>, <|eot_id|>); "
                              f"pass eos_token_ids=")
    if vocab_size is not None and vocab_size < n_tokens:
        raise VocabularyError(f"vocab_size {vocab_size} is smaller than tokenizer {name!r}'s {n_tokens} tokens")
    return VocabParts(tuple(tb), tuple(eos_ids), frozenset(sp), vocab_size or n_tokens, name, encoder, tuple(tn))
