"""A request's grammar that fails during decoding: the request ends, the engine goes on.

Engines may do real work the first time a mask or a transition is needed: the native engine builds
its configuration automaton lazily, so a limit (``CompileLimitError("max_dfa_states")`` from
:class:`~structgate.native.pushdown.PushdownIndex`, ``row_budget_bytes``, ...) can be met for the
first time in the middle of a request, in a mask fill or an advance. In vLLM those calls run in the
engine core's step (the scheduler hook's batched fill, the bridge's ``fill_bitmask`` /
``accept_tokens`` / ``validate_tokens`` / ``rollback``, the forced-token drafter), where an
exception kills the engine core: every running request fails (``EngineDeadError``).

So, as vLLM's own ``guidance`` backend does when llguidance's matcher reports an error
(``vllm/v1/structured_output/backend_guidance.py``: the error is logged once as a warning and the
matcher then only allows EOS), the failing request's grammar is *marked failed*:
:func:`fail_grammar` logs one warning (the error: which limit; the request when known), counts it
(``structgate_decode_failures_total``) and replaces the grammar's ``.matcher`` with a
:class:`FailedMatcher` whose language from then on is EOS alone. Its rows allow only the EOS ids, it
accepts EOS (and is then terminated, and vLLM ends the request as for any EOS) and refuses any other
token (vLLM then ends the request with ``FINISHED_ERROR``). Nothing of it reaches the other requests,
and the grammar's ``on_failure`` callback (set by the bridge) drops the shared compiled grammar from
the caches, so the next request of that constraint compiles afresh instead of meeting the same
limit in the automaton every request of it grew.

Only :class:`~structgate.errors.StructgateError` is handled so (:func:`is_request_failure`): a
:class:`~structgate.errors.BitmaskError` is a wrong buffer from the caller (the same for every
request) and any other exception is a bug; both still raise.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from ..backends.interface import Matcher
from ..errors import BitmaskError, MatcherStateError, StructgateError

__all__ = ["FailedMatcher", "fail_grammar", "is_request_failure", "describe", "failures"]

logger = logging.getLogger("structgate.plugin")

#: grammars failed so far in this process (the scheduler hook compares it before and after a step)
failures = 0


def is_request_failure(e: BaseException) -> bool:
    """True for an error that fails one request's grammar (a typed structgate error that is not a
    :class:`~structgate.errors.BitmaskError`); False for the others, which must still raise."""
    return isinstance(e, StructgateError) and not isinstance(e, BitmaskError)


def describe(e: BaseException) -> str:
    """``CompileLimitError(max_dfa_states): <message>``: the error's type, limit (or kind), message."""
    what = getattr(e, "limit_name", None) or getattr(e, "kind", None)
    return f"{type(e).__name__}({what}): {e}" if what else f"{type(e).__name__}: {e}"


class FailedMatcher(Matcher):
    """The matcher of a grammar that failed during decoding: only EOS from now on.

    Follows the interface's EOS rules for a language that is EOS alone: the row allows exactly the
    EOS ids; :meth:`advance` accepts EOS (then :meth:`is_terminated`; EOS after that changes
    nothing) and refuses any other token. :meth:`rollback` undoes the accepted EOS first, then
    tokens accepted before the failure (in the wrapped matcher, which keeps the history), but the
    grammar stays failed.

    It is no engine's matcher: the scheduler hook fills its row on its own, never through an
    engine's batched fill, and never prefetches it.

    Attributes
    ----------
    inner : Matcher
        The matcher that failed (its state is the one before the failing call).
    error : StructgateError
        Why.
    """

    supports_row_gather = False

    def __init__(self, inner: Matcher, error: BaseException) -> None:
        self.inner = inner
        self.error = error
        self.vocab = inner.vocab
        self._eos = frozenset(self.vocab.eos_token_ids)
        self._terminated = False
        allowed = np.zeros(self.vocab.vocab_size, dtype=bool)
        allowed[[e for e in self._eos if e < self.vocab.vocab_size]] = True
        from ..bitmask import bool_to_bitmask

        self._row = bool_to_bitmask(allowed)

    def _fill_row(self, row: np.ndarray) -> bool:
        row[:] = self._row
        return True

    def advance(self, token_ids: int | Sequence[int]) -> bool:
        ids = self._as_list(token_ids)
        if any(t not in self._eos for t in ids):
            return False
        if ids:
            self._terminated = True
        return True

    def rollback(self, num_tokens: int) -> None:
        if num_tokens < 0:
            raise MatcherStateError(f"num_tokens must be >= 0, got {num_tokens}")
        if num_tokens and self._terminated:
            self._terminated = False
            num_tokens -= 1
        if num_tokens:
            self.inner.rollback(num_tokens)

    def is_accepting(self) -> bool:
        return True

    def is_terminated(self) -> bool:
        return self._terminated

    def reset(self) -> None:
        """Back to before any token; the grammar stays failed (a reset request would meet the same
        limit again)."""
        self._terminated = False
        self.inner.reset()

    def forced_tokens(self, max_n: int) -> list[int]:
        if int(max_n) < 0:
            raise MatcherStateError(f"max_n must be >= 0, got {max_n}")
        return []  # EOS is never a forced draft

    def __repr__(self) -> str:
        return f"FailedMatcher({describe(self.error)}, terminated={self._terminated})"


def fail_grammar(grammar: Any, error: BaseException, request_id: str | None = None) -> Matcher:
    """Mark ``grammar`` (a vLLM grammar object over a structgate matcher, ``.matcher``) failed with
    ``error`` and return its new matcher (a :class:`FailedMatcher`). The first call per grammar logs
    one warning and counts ``structgate_decode_failures_total``; later calls return the same matcher.
    An error that is not a request's failure (:func:`is_request_failure`) is re-raised instead.

    ``request_id``: named in the warning when the caller knows it.
    """
    global failures
    if not is_request_failure(error):
        raise error
    m = grammar.matcher
    if isinstance(m, FailedMatcher):
        return m
    failed = FailedMatcher(m, error)
    grammar.matcher = failed
    failures += 1
    backend = getattr(grammar, "backend_name", None) or "?"
    logger.warning("structgate %s: request %s: its grammar failed during decoding: %s. It now allows only EOS, "
                   "so this request ends; other requests are not affected (as vLLM's guidance backend does "
                   "on a matcher error).", backend, request_id if request_id is not None else "(id unknown)",
                   describe(error))
    from . import metrics

    metrics.record_decode_failure(backend, getattr(error, "kind", None) or "error",
                                  getattr(error, "limit_name", None) or "")
    cb = getattr(grammar, "on_failure", None)
    if cb is not None:  # the bridge drops the shared compiled grammar from its caches
        try:
            cb(error)
        except Exception:  # noqa: BLE001 - never inside the engine step
            logger.debug("structgate: on_failure callback failed", exc_info=True)
    return failed
