"""A deliberately misbehaving backend for testing the benchmark harness (not an engine).

``FaultyBackend`` allows every non-special token and is always accepting (so valid instances pass
and invalid ones are *accepted*: invalidation errors), unless the JSON Schema carries an
``"x-fault"`` key, which makes it misbehave on purpose:

=================  ===========================================================================
``"sleep"``         compile sleeps for an hour (→ timeout in the compile phase)
``"sleep-walk"``    the first ``fill_bitmask`` sleeps for an hour (→ timeout in the walk phase)
``"oom"``           compile allocates until ``MemoryError`` (→ oom, under ``--max-memory-mb``)
``"abort-oom"``     prints a Rust-style ``memory allocation of N bytes failed`` and aborts (→ oom)
``"abort"``         ``os.abort()`` during compile (→ crash)
``"unsupported"``   raises :class:`~structgate.errors.UnsupportedFeatureError` (→ compile error)
``"engine-error"``  raises ``RuntimeError`` (→ compile error of kind ``engine:RuntimeError``)
``"reject-all"``    compiles; the mask allows only EOS (valid instances → validation errors)
=================  ===========================================================================

Use it as ``--backends structgate_bench.fakes:FaultyBackend``.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from structgate.backends.interface import Backend, CompiledGrammar, Matcher
from structgate.errors import MatcherStateError, UnsupportedFeatureError

__all__ = ["FaultyBackend", "EnumBackend"]


class _FakeMatcher(Matcher):
    def __init__(self, vocab, allow_all: bool, sleep_first: bool):
        self.vocab = vocab
        self._hist: list[int] = []
        self._term = False
        self._sleep_first = sleep_first
        words = np.zeros((vocab.vocab_size + 31) // 32, dtype=np.int32)
        if allow_all:
            allowed = np.zeros(vocab.vocab_size, dtype=bool)
            allowed[: vocab.n_tokens] = True
            for i in vocab.special_token_ids:
                allowed[i] = False
            from structgate.bitmask import bool_to_bitmask

            words = bool_to_bitmask(allowed)
        self._words = words
        self._eos_only = np.zeros_like(words)
        from structgate.bitmask import bool_to_bitmask

        eos = np.zeros(vocab.vocab_size, dtype=bool)
        eos[list(vocab.eos_token_ids)] = True
        self._eos_words = bool_to_bitmask(eos)

    def _fill_row(self, row):
        if self._sleep_first:
            time.sleep(3600)
        if self._term:
            row[:] = self._eos_words
        else:
            np.bitwise_or(self._words, self._eos_words, out=row)
        return True

    def advance(self, token_ids):
        ids = self._as_list(token_ids)
        eos = set(self.vocab.eos_token_ids)
        allowed_w = self._words
        for t in ids:
            if t in eos:
                continue
            if self._term or t >= self.vocab.vocab_size or not (int(allowed_w[t >> 5]) >> (t & 31)) & 1:
                return False
        for t in ids:
            self._hist.append(t)
            if t in eos:
                self._term = True
        return True

    def rollback(self, num_tokens):
        if num_tokens < 0 or num_tokens > len(self._hist):
            raise MatcherStateError(f"cannot roll back {num_tokens} of {len(self._hist)} tokens")
        for _ in range(num_tokens):
            t = self._hist.pop()
            if t in self.vocab.eos_token_ids:
                self._term = False

    def is_accepting(self):
        return True

    def is_terminated(self):
        return self._term

    def reset(self):
        self._hist.clear()
        self._term = False


class _FakeGrammar(CompiledGrammar):
    def __init__(self, vocab, constraint, allow_all, sleep_first):
        self.vocab = vocab
        self.constraint = constraint
        self._allow_all = allow_all
        self._sleep_first = sleep_first

    def matcher(self, *, max_rollback_tokens: int = -1):
        return _FakeMatcher(self.vocab, self._allow_all, self._sleep_first)


class FaultyBackend(Backend):
    """See the module docstring. Supports every constraint kind."""

    name = "faulty"
    supported_kinds = frozenset({"regex", "json_schema", "json_object", "choice", "grammar"})

    def _compile(self, constraint):
        fault = constraint.value.get("x-fault") if isinstance(constraint.value, dict) else None
        if fault == "sleep":
            time.sleep(3600)
        elif fault == "oom":
            hog = []  # untouched pages: fast, but they count against RLIMIT_AS
            while True:
                hog.append(np.empty(512 * 1024 * 1024, dtype=np.uint8))
        elif fault == "abort-oom":
            sys.stderr.write("memory allocation of 68719476736 bytes failed\n")
            sys.stderr.flush()
            os.abort()
        elif fault == "abort":
            os.abort()
        elif fault == "unsupported":
            raise UnsupportedFeatureError("x-fault", "requested by the schema", "/x-fault")
        elif fault == "engine-error":
            raise RuntimeError("engine exploded")
        return _FakeGrammar(self.vocab, constraint, allow_all=fault != "reject-all", sleep_first=fault == "sleep-walk")


# ---------------------------------------------------------------------------------------------
class _EnumMatcher(Matcher):
    """Exact matcher over a finite set of byte strings (brute force over the vocabulary)."""

    def __init__(self, vocab, texts: frozenset[bytes]):
        self.vocab = vocab
        self._texts = texts
        self._prefixes = frozenset(t[:i] for t in texts for i in range(len(t) + 1))
        self._out = b""
        self._hist: list[int] = []
        self._term = False

    def _ok(self, out: bytes, t: int) -> bool:
        b = self.vocab.token_bytes[t] if t < self.vocab.n_tokens else b""
        return bool(b) and (out + b) in self._prefixes

    def _fill_row(self, row):
        allowed = np.zeros(self.vocab.vocab_size, dtype=bool)
        if not self._term:
            out = self._out
            for t, b in enumerate(self.vocab.token_bytes):
                if b and (out + b) in self._prefixes:
                    allowed[t] = True
        if self._term or self._out in self._texts:
            allowed[list(self.vocab.eos_token_ids)] = True
        from structgate.bitmask import bool_to_bitmask

        row[:] = bool_to_bitmask(allowed)
        return True

    def advance(self, token_ids):
        ids = self._as_list(token_ids)
        out, term = self._out, self._term
        for t in ids:
            if t in self.vocab.eos_token_ids and (term or out in self._texts):
                term = True
            elif term or not self._ok(out, t):
                return False
            else:
                out += self.vocab.token_bytes[t]
        self._out, self._term = out, term
        self._hist += ids
        return True

    def rollback(self, num_tokens):
        if num_tokens < 0 or num_tokens > len(self._hist):
            raise MatcherStateError(f"cannot roll back {num_tokens} of {len(self._hist)} tokens")
        keep = self._hist[: len(self._hist) - num_tokens]
        self.reset()
        self.advance(keep) if keep else None

    def is_accepting(self):
        return self._term or self._out in self._texts

    def is_terminated(self):
        return self._term

    def reset(self):
        self._out, self._hist, self._term = b"", [], False


class _EnumGrammar(CompiledGrammar):
    def __init__(self, vocab, constraint, texts):
        self.vocab, self.constraint, self._texts = vocab, constraint, texts

    def matcher(self, *, max_rollback_tokens: int = -1):
        return _EnumMatcher(self.vocab, self._texts)


class EnumBackend(Backend):
    """An *exact* reference engine for JSON Schemas made of ``enum`` / ``const`` only: the language
    is the ``json.dumps`` texts of the listed values. Masks are computed by brute force over the
    vocabulary (slow, exact): it checks the harness's walk, bit tests and EOS rule."""

    name = "enum-reference"
    supported_kinds = frozenset({"json_schema"})

    def _compile(self, constraint):
        import json

        s = constraint.value
        if not isinstance(s, dict) or not ({"enum", "const"} & set(s)):
            raise UnsupportedFeatureError("schema without enum/const", "the reference engine handles enum/const only")
        values = s["enum"] if "enum" in s else [s["const"]]
        return _EnumGrammar(self.vocab, constraint, frozenset(json.dumps(v).encode() for v in values))
