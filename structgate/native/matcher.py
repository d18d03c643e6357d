"""The native matcher: a DFA state plus a history of states, masks from a shared TokenIndex.

Implements :class:`structgate.backends.interface.Matcher` with the EOS/termination rules of
:mod:`structgate.backends.interface`:

* the current state is ``history[-1]``; an accepted EOS pushes the pseudo-state
  :data:`~structgate.native.token_index.TERMINATED` (``-1``), so rollback across termination is an
  ordinary pop;
* ``advance`` walks every token first and commits the new states only if all were allowed (atomic);
* masks are row copies from the :class:`~structgate.native.token_index.TokenIndex` of the compiled
  grammar, which a batch hook can gather for many matchers at once through :attr:`NativeMatcher.state`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..backends.interface import Matcher
from ..errors import MatcherStateError
from .automaton import DEAD, START
from .token_index import TERMINATED, TokenIndex

__all__ = ["NativeMatcher"]


class NativeMatcher(Matcher):
    """Per-request cursor over a native compiled grammar. Not thread-safe; one per request.

    Parameters
    ----------
    token_index : TokenIndex
        The compiled grammar's index (shared, thread-safe).
    max_rollback_tokens : int
        Tokens of history kept for :meth:`rollback`; ``-1`` = unlimited.

    Attributes
    ----------
    token_index : TokenIndex
    state : int
        Current DFA state (``>= 1``), or ``-1`` (:data:`TERMINATED`) after an accepted EOS.
    """

    def __init__(self, token_index: TokenIndex, *, max_rollback_tokens: int = -1) -> None:
        if max_rollback_tokens < -1:
            raise MatcherStateError(f"max_rollback_tokens must be >= -1, got {max_rollback_tokens}")
        self.token_index = token_index
        self.vocab = token_index.vocab
        self.max_rollback_tokens = int(max_rollback_tokens)
        self._eos = frozenset(self.vocab.eos_token_ids)
        self._is_accepting = token_index.is_accepting
        self._history: list[int] = [START]

    supports_row_gather = True

    def row_source(self):
        """``(token_index, state)``: see :meth:`Matcher.row_source`."""
        return self.token_index, self._history[-1]

    # -- state ------------------------------------------------------------------------------------
    @property
    def state(self) -> int:
        """Current DFA state, or ``-1`` once terminated (use with :meth:`TokenIndex.fill_rows`)."""
        return self._history[-1]

    @property
    def history(self) -> tuple[int, ...]:
        """States after each kept accepted token, oldest first (``history[0]`` is the base)."""
        return tuple(self._history)

    def is_accepting(self) -> bool:
        s = self._history[-1]
        return self._is_accepting(s)

    def is_terminated(self) -> bool:
        return self._history[-1] == TERMINATED

    def is_final(self) -> bool:
        s = self._history[-1]
        if s == TERMINATED:
            return True
        return self._is_accepting(s) and not self.token_index.has_non_eos(s)

    # -- primitives ---------------------------------------------------------------------------------
    def _fill_row(self, row: np.ndarray) -> bool:
        return self.token_index.fill_row(self._history[-1], row)

    def _step(self, state: int, t: int) -> int:
        """Next state after token ``t`` from ``state`` (TERMINATED for EOS), or DEAD if rejected."""
        if state == TERMINATED:
            return TERMINATED if t in self._eos else DEAD
        if t in self._eos:
            return TERMINATED if self._is_accepting(state) else DEAD
        return self.token_index.next_state(state, t)

    def advance(self, token_ids: int | Sequence[int]) -> bool:
        """Accept one token id or a sequence, atomically (all or nothing).

        Returns
        -------
        accepted : bool
            False (state unchanged) if any token is not allowed: padding / special ids, bytes that
            leave the language, EOS in a non-accepting state, any non-EOS after termination.

        Raises
        ------
        MatcherStateError
            A negative token id.
        """
        ids = self._as_list(token_ids)
        s = self._history[-1]
        new: list[int] = []
        for t in ids:
            if s == TERMINATED and t in self._eos:
                continue  # EOS after termination: allowed, changes nothing
            s = self._step(s, t)
            if s == DEAD:
                return False
            new.append(s)
        if new:
            h = self._history
            h.extend(new)
            if self.max_rollback_tokens >= 0 and len(h) > self.max_rollback_tokens + 1:
                del h[: len(h) - self.max_rollback_tokens - 1]
        return True

    def validate(self, token_ids: Sequence[int]) -> int:
        """Length of the longest allowed prefix of ``token_ids``; does not change the state."""
        ids = self._as_list(token_ids)
        s = self._history[-1]
        n = 0
        for t in ids:
            if not (s == TERMINATED and t in self._eos):
                s = self._step(s, t)
                if s == DEAD:
                    break
            n += 1
        return n

    def forced_tokens(self, max_n: int) -> list[int]:
        """Grammar-forced tokens from the current state (see
        :meth:`structgate.backends.interface.Matcher.forced_tokens`); the state is unchanged.

        Walks the index: a state forces a token when it is not accepting and its cached row allows
        exactly one id (``n_allowed == 1``); the token is that row's only bit, the next state
        ``next_state``. Chains are cached per start state in a dict on the shared index (states
        and rows are immutable), so a repeated query is one dict lookup.

        Raises
        ------
        MatcherStateError
            ``max_n`` negative.
        CompileLimitError
            ``step_timeout_s``: the chain's rows and transitions, computed together as one step,
            took longer than the limit (state and cache unchanged).
        """
        max_n = int(max_n)
        if max_n < 0:
            raise MatcherStateError(f"max_n must be >= 0, got {max_n}")
        s = self._history[-1]
        if max_n == 0 or s == TERMINATED:
            return []
        ti = self.token_index
        cache = ti.__dict__.get("_sg_forced_chains")
        if cache is None:
            cache = ti.__dict__.setdefault("_sg_forced_chains", {})
        hit = cache.get(s)
        if hit is not None and (hit[1] or len(hit[0]) >= max_n):
            return hit[0][:max_n]
        one_step = getattr(ti, "one_step", None)  # (the eager DFA's index does no lazy work)
        if one_step is None:
            chain, complete = self._forced_chain(ti, s, max_n)
        else:
            with one_step():  # the rows and transitions of the whole chain: one step's time limit
                chain, complete = self._forced_chain(ti, s, max_n)
        cache[s] = (chain, complete)
        return list(chain)

    @staticmethod
    def _forced_chain(ti, s: int, max_n: int) -> tuple[list[int], bool]:
        """:meth:`forced_tokens`' walk: ``(tokens, complete)``."""
        chain: list[int] = []
        cur = s
        complete = False
        while len(chain) < max_n:
            if cur == TERMINATED or ti.is_accepting(cur) or ti.n_allowed(cur) != 1:
                complete = True
                break
            row = ti.row(cur)
            w = int(np.flatnonzero(row)[0])
            bits = int(row[w]) & 0xFFFFFFFF
            t = w * 32 + bits.bit_length() - 1
            nxt = ti.next_state(cur, t)
            if nxt == DEAD:  # cannot happen for an allowed token; stop rather than draft it
                complete = True
                break
            chain.append(t)
            cur = nxt
        return chain, complete

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (an accepted EOS counts as one).

        Raises
        ------
        MatcherStateError
            ``num_tokens`` negative or larger than the kept history.
        """
        n = int(num_tokens)
        kept = len(self._history) - 1
        if n < 0 or n > kept:
            raise MatcherStateError(
                f"cannot roll back {n} tokens: history holds {kept} (max_rollback_tokens="
                f"{self.max_rollback_tokens})")
        if n:
            del self._history[-n:]

    def reset(self) -> None:
        self._history = [START]

    def fork(self) -> "NativeMatcher":
        """An independent matcher in the same state with a copy of the history (parallel sampling,
        beam search); both share the grammar's TokenIndex."""
        m = NativeMatcher(self.token_index, max_rollback_tokens=self.max_rollback_tokens)
        m._history = list(self._history)
        return m

    def num_tokens_rollbackable(self) -> int:
        """How many tokens :meth:`rollback` can undo now."""
        return len(self._history) - 1

    def __repr__(self) -> str:
        return (f"NativeMatcher(state={self.state}, accepting={self.is_accepting()}, "
                f"terminated={self.is_terminated()}, history={len(self._history) - 1})")
