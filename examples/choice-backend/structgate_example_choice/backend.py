"""A choice-only engine: the output must be exactly one of a list of strings.

Algorithm: the state is the byte string generated so far (always a prefix of some choice).
Token ``t`` is allowed in state ``p`` iff ``p + bytes(t)`` is still a prefix of some choice, i.e.
``bytes(t)`` is a non-empty prefix of one of the remaining suffixes ``c[len(p):]``. So the allowed
set is found by looking up every prefix of every remaining suffix in a ``bytes -> ids`` table:
O(total suffix length) per state, independent of the vocabulary size. Masks are cached per state.

EOS/termination follow structgate's interface rules (``structgate.backends.interface``): EOS is
allowed iff ``p`` is one of the choices; after EOS only EOS; ``advance`` is atomic; ``rollback``
restores states exactly, across an accepted EOS.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from structgate.backends.interface import Backend, CompiledGrammar, Constraint, Matcher
from structgate.errors import MatcherStateError
from structgate.vocab import Vocabulary

__all__ = ["ChoiceBackend", "ChoiceGrammar", "ChoiceMatcher"]


class ChoiceBackend(Backend):
    """Backend ``example-choice``: ``choice`` constraints only."""

    name = "example-choice"
    supported_kinds = frozenset({"choice"})

    def __init__(self, vocab: Vocabulary, **options) -> None:
        super().__init__(vocab, **options)
        table: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in vocab.special_token_ids:
                table.setdefault(b, []).append(i)
        self._ids_by_bytes = {k: np.asarray(v, dtype=np.int64) for k, v in table.items()}
        self._max_len = max(map(len, table)) if table else 0

    def _compile(self, constraint: Constraint) -> "ChoiceGrammar":
        return ChoiceGrammar(self, constraint)


class ChoiceGrammar(CompiledGrammar):
    """The choices as UTF-8 bytes plus a per-state mask cache (thread-safe)."""

    def __init__(self, backend: ChoiceBackend, constraint: Constraint):
        self.vocab = backend.vocab
        self.constraint = constraint
        self._choices = tuple(sorted({c.encode("utf-8") for c in constraint.value}))
        self._complete = frozenset(self._choices)
        self._prefixes = frozenset(c[:k] for c in self._choices for k in range(len(c) + 1))
        self._backend = backend
        self._rows: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()
        eos = np.zeros((self.vocab.vocab_size + 31) // 32 * 32, dtype=bool)
        eos[list(self.vocab.eos_token_ids)] = True
        self._eos_row = np.packbits(eos.reshape(-1, 32), axis=1, bitorder="little").view(np.int32).ravel()

    def matcher(self, *, max_rollback_tokens: int = -1) -> "ChoiceMatcher":
        return ChoiceMatcher(self)

    def row(self, state: bytes) -> np.ndarray:
        """Packed int32 mask row of ``state`` (cached)."""
        r = self._rows.get(state)
        if r is not None:
            return r
        V = self.vocab.vocab_size
        ok = np.zeros((V + 31) // 32 * 32, dtype=bool)
        table = self._backend._ids_by_bytes
        n = len(state)
        for c in self._choices:
            if len(c) > n and c.startswith(state):
                rest = c[n:]
                for k in range(1, min(len(rest), self._backend._max_len) + 1):
                    ids = table.get(rest[:k])
                    if ids is not None:
                        ok[ids] = True
        if state in self._complete:
            ok[list(self.vocab.eos_token_ids)] = True
        r = np.packbits(ok.reshape(-1, 32), axis=1, bitorder="little").view(np.int32).ravel()
        with self._lock:
            self._rows[state] = r
        return r


class ChoiceMatcher(Matcher):
    """State = bytes generated so far; history = previous states (and the EOS marker)."""

    def __init__(self, grammar: ChoiceGrammar):
        self.vocab = grammar.vocab
        self._g = grammar
        self._state = b""
        self._hist: list[bytes | None] = []  # previous state per accepted token; None marks EOS
        self._terminated = False

    def _fill_row(self, row: np.ndarray) -> bool:
        row[:] = self._g._eos_row if self._terminated else self._g.row(self._state)
        return True  # a choice list never allows every token

    def advance(self, token_ids: int | Sequence[int]) -> bool:
        ids = self._as_list(token_ids)
        eos = self.vocab.eos_token_ids
        state, terminated, pushed = self._state, self._terminated, []
        for t in ids:
            if terminated:
                if t in eos:
                    continue
                return False
            if t in eos:
                if state not in self._g._complete:
                    return False
                pushed.append(None)
                terminated = True
                continue
            if t >= self.vocab.n_tokens or t in self.vocab.special_token_ids:
                return False
            nxt = state + self.vocab.token_bytes[t]
            if nxt not in self._g._prefixes:
                return False
            pushed.append(state)
            state = nxt
        if self._terminated:
            return True  # only EOS ids: nothing changes (rule 4)
        self._hist.extend(pushed)
        self._state, self._terminated = state, terminated
        return True

    def validate(self, token_ids: Sequence[int]) -> int:
        n = 0
        saved = (self._state, self._terminated, len(self._hist))
        for t in self._as_list(token_ids):
            if not self.advance(t):
                break
            n += 1
        self._state, self._terminated = saved[0], saved[1]
        del self._hist[saved[2]:]
        return n

    def rollback(self, num_tokens: int) -> None:
        n = int(num_tokens)
        if n < 0 or n > len(self._hist):
            raise MatcherStateError(f"cannot roll back {n} tokens (history holds {len(self._hist)})")
        for _ in range(n):
            prev = self._hist.pop()
            if prev is None:
                self._terminated = False
            else:
                self._state = prev

    def is_accepting(self) -> bool:
        return self._terminated or self._state in self._g._complete

    def is_terminated(self) -> bool:
        return self._terminated

    def reset(self) -> None:
        self._state, self._terminated = b"", False
        self._hist.clear()
