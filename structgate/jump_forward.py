"""Jump-forward over grammar-forced *bytes*, re-tokenized at safe boundaries (issue 12, item 3).

:meth:`~structgate.backends.interface.Matcher.forced_tokens` is exact but, with a byte-level BPE
vocabulary such as Llama 3's, rarely non-empty: every byte is a token and the mask allows every
tokenization, so a forced string of two or more bytes allows at least two tokens. The forced
*bytes* are longer (``": "``, a key, an enum tail); turning them into tokens means choosing a
tokenization, which is where jump-forward changes what the model sees.

This module follows llguidance's rules (``docs/fast_forward.md`` of guidance-ai/llguidance,
"Safely converting FF-strings to FF-tokens"):

1. walk the forced bytes from the matcher's state (:func:`forced_byte_walk`): a byte is forced when
   EOS is not allowed and every allowed token starts with that byte;
2. tokenize them canonically (the vocabulary's encoder, i.e. the model's tokenizer);
3. withhold trailing tokens a longer token could extend: find the first byte offset ``idx`` within
   the last ``lookback_tokens`` tokens' bytes at which the grammar allows a token that spans past
   the end of the forced bytes; drop every token that ends after ``idx``.

The result (:func:`safe_forced_draft`) is *not* necessarily what the constrained sampler would
pick: forcing it into the sequence (llguidance's ff-tokens, SGLang's compressed FSM) changes the
output distribution. structgate only proposes it as a speculative **draft**; vLLM's rejection
sampler then accepts or rejects each token against the target model's masked distribution (see
:mod:`structgate.plugin.drafter`, mode ``bytes``).

Sources: guidance-ai/llguidance ``docs/fast_forward.md`` (the algorithm); XGrammar's
``find_jump_forward_string`` (the forced-byte notion).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import MatcherStateError

__all__ = ["forced_byte_walk", "safe_forced_draft", "vocab_tables"]

_TABLES: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def vocab_tables(vocab: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-vocabulary arrays, cached by fingerprint.

    Returns
    -------
    first_byte : np.ndarray, int16, shape ``(vocab_size,)``
        First byte of each token, -1 for tokens without bytes (special, padding).
    length : np.ndarray, int32, shape ``(vocab_size,)``
        Byte length of each token (0 for special / padding ids).
    byte_token : np.ndarray, int64, shape ``(256,)``
        Id of the single-byte token of each byte value, -1 where the vocabulary has none.
    """
    key = vocab.fingerprint
    hit = _TABLES.get(key)
    if hit is not None:
        return hit
    n = int(vocab.vocab_size)
    first = np.full(n, -1, dtype=np.int16)
    length = np.zeros(n, dtype=np.int32)
    byte_token = np.full(256, -1, dtype=np.int64)
    specials = vocab.special_token_ids
    for i, b in enumerate(vocab.token_bytes):
        if not b or i in specials:
            continue
        first[i] = b[0]
        length[i] = len(b)
        if len(b) == 1 and byte_token[b[0]] < 0:
            byte_token[b[0]] = i
    _TABLES[key] = (first, length, byte_token)
    return first, length, byte_token


def forced_byte_walk(matcher: Any, max_bytes: int) -> tuple[bytes, list[int]]:
    """The forced bytes from ``matcher``'s state and, at each of their offsets, the longest token
    the grammar allows there; the matcher's state is unchanged (the walk advances a fork).

    Position ``i`` is forced when EOS is not allowed and every allowed token starts with the same
    byte; the walk then advances by that byte's single-byte token (allowed by any byte-level
    grammar that allows a longer token starting with it) and stops where the vocabulary has no
    such token, at ``max_bytes``, or at the first unforced position.

    Parameters
    ----------
    matcher : Matcher
        Needs ``fork``, ``allowed_token_ids``, ``advance``, ``is_terminated`` and ``vocab``.
    max_bytes : int
        Walk at most this many bytes (``>= 0``).

    Returns
    -------
    forced : bytes
    longest : list[int]
        ``longest[i]``: byte length of the longest token allowed at offset ``i`` (``len(forced)``
        entries).

    Raises
    ------
    MatcherStateError
        ``max_bytes`` negative.
    """
    max_bytes = int(max_bytes)
    if max_bytes < 0:
        raise MatcherStateError(f"max_bytes must be >= 0, got {max_bytes}")
    if max_bytes == 0 or matcher.is_terminated():
        return b"", []
    cache, key = _walk_cache(matcher)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None and (hit[2] or len(hit[0]) >= max_bytes):
            return hit[0][:max_bytes], hit[1][:max_bytes]
    vocab = matcher.vocab
    first, length, byte_token = vocab_tables(vocab)
    eos = np.asarray(vocab.eos_token_ids, dtype=np.int64)
    m = matcher.fork()
    complete = False
    out = bytearray()
    longest: list[int] = []
    while len(out) < max_bytes:
        ids = np.asarray(m.allowed_token_ids(), dtype=np.int64)
        if ids.size == 0 or np.isin(eos, ids).any():
            complete = True
            break
        fb = first[ids]
        b = int(fb[0])
        if b < 0 or int(fb.min()) != b or int(fb.max()) != b:
            complete = True
            break
        t = int(byte_token[b])
        if t < 0 or not m.advance(t):
            complete = True
            break
        out.append(b)
        longest.append(int(length[ids].max()))
    res = bytes(out)
    if cache is not None:
        cache[key] = (res, longest, complete)
    return res, list(longest)


def _walk_cache(matcher: Any) -> tuple[dict | None, Any]:
    """A per-grammar cache of walks keyed by the matcher's state, where the matcher exposes an
    immutable shared index (native: ``token_index`` and an int ``state``); else ``(None, None)``."""
    ti = getattr(matcher, "token_index", None)
    state = getattr(matcher, "state", None)
    if ti is None or not isinstance(state, (int, np.integer)) or not hasattr(ti, "__dict__"):
        return None, None
    cache = ti.__dict__.get("_sg_forced_byte_walks")
    if cache is None:
        cache = ti.__dict__.setdefault("_sg_forced_byte_walks", {})
    return cache, int(state)


def _utf8_prefix(data: bytes) -> tuple[str, int]:
    """The longest prefix of ``data`` that is valid UTF-8 (an incomplete last character cut)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8"), cut
        except UnicodeDecodeError:
            continue
    return "", 0


def safe_forced_draft(matcher: Any, max_tokens: int, *, max_bytes: int | None = None,
                      lookback_tokens: int = 4) -> list[int]:
    """Canonical tokenization of the safe prefix of the forced bytes (llguidance's rule); the
    matcher's state is unchanged.

    Steps: :func:`forced_byte_walk` (at most ``max_bytes``, default ``16 * max_tokens``); cut to
    valid UTF-8; encode with ``matcher.vocab.encode`` (the model's tokenizer; a result whose bytes
    differ from the input — a normalizing tokenizer — gives no draft); let ``E`` be the encoded
    byte length and ``W`` the byte length of the last ``lookback_tokens`` tokens; the first offset
    ``idx`` in ``[E - W, E)`` where the grammar allows a token longer than ``E - idx`` (one that
    could span the end) is the boundary, and every token ending after ``idx`` is withheld; then at
    most ``max_tokens`` tokens, truncated to the longest prefix the matcher accepts.

    Parameters
    ----------
    matcher : Matcher
        The request's matcher (its ``vocab`` needs an encoder).
    max_tokens : int
        Draft length cap (``>= 0``; vLLM's ``num_speculative_tokens``).
    max_bytes : int, optional
        Forced-byte walk cap.
    lookback_tokens : int
        llguidance's ``max_tokens`` of the boundary check (4 there; 2 already removed every
        non-canonical forced sequence on MaskBench with the Llama 3 tokenizer, per that document).

    Returns
    -------
    tokens : list[int]
        Empty when nothing is forced or nothing is safe.

    Raises
    ------
    MatcherStateError
        ``max_tokens`` or ``max_bytes`` negative.
    """
    max_tokens = int(max_tokens)
    if max_tokens < 0:
        raise MatcherStateError(f"max_tokens must be >= 0, got {max_tokens}")
    if max_tokens == 0:
        return []
    forced, longest = forced_byte_walk(matcher, 16 * max_tokens if max_bytes is None else max_bytes)
    if not forced:
        return []
    text, end = _utf8_prefix(forced)
    if not text:
        return []
    vocab = matcher.vocab
    try:
        toks = vocab.encode(text)
    except Exception:  # no encoder: no draft rather than a wrong one
        return []
    tb = vocab.token_bytes
    ends: list[int] = []
    pos = 0
    for t in toks:
        if not 0 <= t < len(tb) or not tb[t]:
            return []
        pos += len(tb[t])
        ends.append(pos)
    if pos != end or b"".join(tb[t] for t in toks) != forced[:end]:
        return []
    window = end - (ends[-1 - lookback_tokens] if len(ends) > lookback_tokens else 0)
    idx = end
    for i in range(max(0, end - window), end):
        if longest[i] > end - i:
            idx = i
            break
    keep = [t for t, e in zip(toks, ends) if e <= idx][:max_tokens]
    if not keep:
        return []
    n = matcher.validate(keep)
    return keep[:n]
