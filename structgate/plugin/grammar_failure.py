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
token (vLLM then ends the request with ``FINISHED_ERROR``, which the scheduler wrapper below turns
into a stop). Nothing of it reaches the other requests,
and the grammar's ``on_failure`` callback (set by the bridge) drops the shared compiled grammar from
the caches, so the next request of that constraint compiles afresh instead of meeting the same
limit in the automaton every request of it grew.

The client is told why its output ended: :func:`fail_grammar` (or, when its caller did not know the
request, the bridge's next ``accept_tokens``: :func:`attribute`) records the request's ``stop_reason``
text, :func:`decode_error_reason` (``"structgate decode error: CompileLimitError(step_timeout_s):
<message>"``), in :data:`reasons`, a bounded :class:`FailureReasons`. The ledger entry
``engine-compile-error-reason`` (:mod:`structgate.plugin.patches`, wrapping
``Scheduler.update_from_output``) pops it into the request's finished output, where both endings
become ``finish_reason="stop"`` with that ``stop_reason``: the EOS, and the ``FINISHED_ERROR`` of a
refused token, turned into a stop before that token (so the API server answers HTTP 200 with the
partial output instead of a 500); it also drops the reasons of requests aborted
(``Scheduler.finish_requests``, wrapped by the same entry) at once and prunes the record of
requests freed any other way without a finished output (docs/vllm.md, "A grammar that fails
during decoding").

Only :class:`~structgate.errors.StructgateError` is handled so (:func:`is_request_failure`): a
:class:`~structgate.errors.BitmaskError` is a wrong buffer from the caller (the same for every
request) and any other exception is a bug; both still raise.
"""
from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any, Container, Sequence

import numpy as np

from ..backends.interface import Matcher
from ..errors import BitmaskError, MatcherStateError, StructgateError

__all__ = ["FailedMatcher", "fail_grammar", "log_failure", "attribute", "is_request_failure", "describe", "failures",
           "DECODE_ERROR_MARKER", "decode_error_reason", "FailureReasons", "reasons"]

logger = logging.getLogger("structgate.plugin")

#: grammars failed so far in this process (the scheduler hook compares it before and after a step)
failures = 0

#: prefix of the ``stop_reason`` the engine attaches to a request whose grammar failed during decoding
DECODE_ERROR_MARKER = "structgate decode error: "


def is_request_failure(e: BaseException) -> bool:
    """True for an error that fails one request's grammar (a typed structgate error that is not a
    :class:`~structgate.errors.BitmaskError`); False for the others, which must still raise."""
    return isinstance(e, StructgateError) and not isinstance(e, BitmaskError)


def describe(e: BaseException) -> str:
    """``CompileLimitError(max_dfa_states): <message>``: the error's type, limit (or kind), message."""
    what = getattr(e, "limit_name", None) or getattr(e, "kind", None)
    return f"{type(e).__name__}({what}): {e}" if what else f"{type(e).__name__}: {e}"


def decode_error_reason(e: BaseException) -> str:
    """The ``stop_reason`` text of a request whose grammar failed during decoding by ``e``:
    ``"structgate decode error: CompileLimitError(step_timeout_s): <message>"``."""
    return DECODE_ERROR_MARKER + describe(e)


class FailureReasons:
    """Request id -> ``stop_reason`` text of the requests whose grammar failed during decoding, from
    the failure until the scheduler sends that request's finished output (the ledger entry
    ``engine-compile-error-reason`` wraps ``Scheduler.update_from_output``: :meth:`pop`, then
    :meth:`prune`; an abort, ``Scheduler.finish_requests``: :meth:`pop`). Thread-safe (vLLM fills
    large batches' rows in a thread pool).

    Nothing stays for long: an entry is popped when its request's finished output goes out;
    :meth:`prune` forgets the requests that can no longer finish (freed or aborted without an
    output: their grammar is gone); and at most ``max_len`` entries are kept (the oldest go first;
    :attr:`dropped` counts them), so even a request that never meets the scheduler wrapper (an
    engine without it) cannot make it grow.

    Parameters
    ----------
    max_len : int
        Entries kept at most (>= 1).

    Raises
    ------
    ValueError
        ``max_len`` < 1.
    """

    def __init__(self, max_len: int = 1024) -> None:
        if int(max_len) < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len = int(max_len)
        #: entries dropped for the bound so far
        self.dropped = 0
        self._d: "OrderedDict[str, tuple[str, Any]]" = OrderedDict()  # rid -> (text, weakref to grammar | None)
        self._lock = threading.Lock()

    def note(self, request_id: str, text: str, grammar: Any = None) -> None:
        """Remember ``text`` for ``request_id`` (replacing an older entry), held while ``grammar`` (the
        request's grammar object; None: unknown) lives; drops the oldest entries past ``max_len``."""
        try:
            ref = weakref.ref(grammar) if grammar is not None else None
        except TypeError:  # not weak-referenceable: pruned by request id only
            ref = None
        with self._lock:
            self._d[request_id] = (text, ref)
            self._d.move_to_end(request_id)
            while len(self._d) > self.max_len:
                self._d.popitem(last=False)
                self.dropped += 1

    def get(self, request_id: str) -> str | None:
        """The text for ``request_id`` (kept), or None."""
        e = self._d.get(request_id)
        return e[0] if e is not None else None

    def pop(self, request_id: str) -> str | None:
        """The text for ``request_id`` (forgotten), or None."""
        with self._lock:
            e = self._d.pop(request_id, None)
        return e[0] if e is not None else None

    def prune(self, live: Container[str]) -> int:
        """Forget the requests that can no longer finish: those whose grammar is gone, and those not
        in ``live`` (the scheduler's request ids) whose grammar is unknown. A request not in ``live``
        whose grammar lives is kept (another engine of this process may hold it). Returns how many
        were forgotten."""
        with self._lock:
            gone = [rid for rid, (_, ref) in self._d.items()
                    if (ref() is None if ref is not None else rid not in live)]
            for rid in gone:
                del self._d[rid]
        return len(gone)

    def ids(self) -> list[str]:
        """The request ids held, oldest first."""
        with self._lock:
            return list(self._d)

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._d


#: the requests of this process whose grammar failed during decoding, until their output finishes
reasons = FailureReasons()


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
        Why (its traceback dropped once logged: :func:`drop_traceback`).
    request_id : str | None
        The request whose grammar failed, once known (:func:`attribute`); its reason is then in
        :data:`reasons`.
    """

    supports_row_gather = False

    def __init__(self, inner: Matcher, error: BaseException) -> None:
        self.inner = inner
        self.error = error
        self.request_id: str | None = None
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


def log_failure(grammar: Any, error: BaseException, request_id: str | None = None) -> None:
    """The one warning of a grammar that failed during decoding (the error's traceback at DEBUG)."""
    backend = getattr(grammar, "backend_name", None) or "?"
    logger.warning("structgate %s: request %s: its grammar failed during decoding: %s. It now allows only EOS, "
                   "so this request ends; other requests are not affected (as vLLM's guidance backend does "
                   "on a matcher error).", backend, request_id if request_id is not None else "(id unknown)",
                   describe(error))
    log_traceback(grammar, error, request_id)


def log_traceback(grammar: Any, error: BaseException, request_id: str | None = None) -> None:
    """The traceback of a decode failure, at DEBUG only (the warning says what failed)."""
    if error.__traceback__ is not None and logger.isEnabledFor(logging.DEBUG):
        logger.debug("structgate %s: request %s: where the grammar failed",
                     getattr(grammar, "backend_name", None) or "?", request_id, exc_info=error)


def drop_traceback(error: BaseException) -> None:
    """Drop ``error``'s traceback, once it was logged (:func:`log_traceback`, at DEBUG) and nothing
    re-raises it. A failed grammar keeps its error (:attr:`FailedMatcher.error`), whose traceback
    holds the frames of the failing call: the grammar's own (``self``, whose matcher is the
    :class:`FailedMatcher` holding the error: a reference cycle), the matcher's, the shared
    compiled grammar's index. Kept, the failed request's grammar would outlive the request until
    the cyclic collector ran (for good where a compile froze it meanwhile:
    ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE``). The type, message and attributes stay."""
    seen, todo = set(), [error]
    while todo:  # (the chained causes' frames too)
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo += (e.__cause__, e.__context__)


def fail_grammar(grammar: Any, error: BaseException, request_id: str | None = None, *, log: bool = True) -> Matcher:
    """Mark ``grammar`` (a vLLM grammar object over a structgate matcher, ``.matcher``) failed with
    ``error`` and return its new matcher (a :class:`FailedMatcher`). The first call per grammar logs
    one warning (:func:`log_failure`; ``log=False``: the caller logs it, as the bridge's
    ``accept_tokens`` does in the line that names the token the failed grammar refuses) and counts
    ``structgate_decode_failures_total``; later calls return the same matcher.
    An error that is not a request's failure (:func:`is_request_failure`) is re-raised instead.

    ``request_id``: named in the warning when the caller knows it, and then the request whose
    finished output carries :func:`decode_error_reason` as its ``stop_reason`` (:func:`attribute`;
    a caller that does not know it leaves it to the bridge's next ``accept_tokens``).
    """
    global failures
    if not is_request_failure(error):
        raise error
    m = grammar.matcher
    if isinstance(m, FailedMatcher):
        attribute(grammar, request_id)
        return m
    failed = FailedMatcher(m, error)
    grammar.matcher = failed
    failures += 1
    attribute(grammar, request_id)
    backend = getattr(grammar, "backend_name", None) or "?"
    if log:
        log_failure(grammar, error, request_id)
        drop_traceback(error)  # logged; the caller handles it (what is not a request's failure was re-raised)
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


def attribute(grammar: Any, request_id: str | None) -> None:
    """Name the request of ``grammar`` if it has failed (its ``.matcher`` a :class:`FailedMatcher`)
    and its request is not known yet: :data:`reasons` then holds that request's ``stop_reason``
    text until its finished output goes out. Nothing for a grammar that has not failed, an unknown
    ``request_id`` (None) or a request already named."""
    m = getattr(grammar, "matcher", None)
    if request_id is None or not isinstance(m, FailedMatcher) or m.request_id is not None:
        return
    m.request_id = request_id
    reasons.note(request_id, decode_error_reason(m.error), grammar)
