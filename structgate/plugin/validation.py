"""Request validation with a time budget (used by the ``sampling-validate`` patch).

vLLM validates a request's structured-output constraint in the API server, synchronously, on the
event loop that serves every stream (``SamplingParams._validate_structured_outputs`` is called from
``InputProcessor.process_inputs``). A structgate backend's :meth:`Backend.validate` is cheap for
almost every constraint (MaskBench p50 0.3 ms, p99 27 ms on native), but a few real schemas take
most of a second (``required`` lists over many properties, long ``pattern``\\ s), and for that time
no stream of that API server gets a token.

:func:`validate_bounded` runs :meth:`Backend.validate` in the calling thread with a deadline
(``$STRUCTGATE_VALIDATE_BUDGET_S``, default :data:`DEFAULT_BUDGET_S`): a trace function checks the
clock at every Python function call and, past the deadline, aborts the validation. The request is
then **deferred to the engine**, not refused: the engine compiles it anyway (off the event loop, on
vLLM's grammar thread pool) and turns every compile failure into an HTTP 400 naming the cause (ledger
entries ``engine-compile-error-reason`` / ``frontend-compile-error-400``). So a constraint the cheap
check finds bad within the budget is a 400 at once, as before; one too slow to check here is checked
where it is compiled, with the same typed error; the event loop is blocked for at most the budget
(plus one C call: a single long C-level call such as one ``re.compile`` is not interrupted; a long
Python loop of C calls is, as the check also runs at each line).

A backend whose ``validate`` is the interface's default (compile and drop: the adapters, whose
engines compile in one C/Rust call that the budget cannot cut, e.g. outlines-core's index for
``(a|b)*a(a|b){20}``, minutes) is not compiled here at all: only the constraint kind is checked and
the request is deferred (:func:`~structgate.backends.interface.has_cheap_validate`).

Deferred validations are counted as ``structgate_fallbacks_total{reason="validation_deferred"}``.

:func:`json_schema_for_engine` makes a JSON Schema given as a dict travel to the engine: vLLM sends
each request to the engine core with msgpack, which refuses an int outside ``-2**63 .. 2**64 - 1``
(``OverflowError``: an empty HTTP 500); such a schema is passed on as its JSON text instead, which
vLLM accepts for ``json`` as well.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

from .._env import env_seconds

__all__ = ["ENV_BUDGET", "DEFAULT_BUDGET_S", "budget_s", "run_with_deadline", "validate_bounded",
           "json_schema_for_engine", "MSGPACK_INT_MIN", "MSGPACK_INT_MAX"]

#: seconds one request's validation may hold the API server's event loop; 0, negative or ``inf``: no
#: bound (read as the timeout options are, :func:`structgate._env.env_seconds`)
ENV_BUDGET = "STRUCTGATE_VALIDATE_BUDGET_S"
DEFAULT_BUDGET_S = 0.05


class _DeadlineReached(BaseException):
    """Raised inside the validation when its budget ran out (a BaseException, so the validator's own
    ``except Exception`` handlers do not swallow it)."""


def budget_s() -> float:
    """The validation budget in seconds (``$STRUCTGATE_VALIDATE_BUDGET_S``, default 0.05; ``<= 0`` or
    ``inf``: no bound).

    Raises
    ------
    ValueError
        The variable is set but is not a number of seconds (names the variable).
    """
    return env_seconds(ENV_BUDGET, DEFAULT_BUDGET_S)


def run_with_deadline(fn: Callable[[], Any], budget: float) -> bool:
    """Call ``fn()`` in this thread; abort it when it runs past ``budget`` seconds.

    Returns
    -------
    bool
        True when ``fn`` returned within the budget; False when it was aborted (or when it ran past
        the budget at all, even if it then returned: its result is not trusted).

    Raises
    ------
    Exception
        Whatever ``fn`` raised within the budget (e.g. a :class:`~structgate.errors.StructgateError`).

    Notes
    -----
    The check runs at each Python function call and line (a trace function; an existing tracer
    such as a debugger's or coverage's is chained and restored; in frames it traces itself, only
    calls are checked). A ``budget`` <= 0 or ``inf`` calls ``fn`` unbounded (no tracer).
    """
    if budget is None or budget <= 0 or budget == float("inf"):
        fn()
        return True
    old = sys.gettrace()
    deadline = time.monotonic() + budget
    expired = False

    def local(frame, event, arg):
        # line events too: one long Python loop of C calls (no Python call inside) must be cut
        nonlocal expired
        if time.monotonic() > deadline:
            expired = True
            raise _DeadlineReached()
        return local

    def tracer(frame, event, arg):
        nonlocal expired
        if time.monotonic() > deadline:
            expired = True
            raise _DeadlineReached()
        if old is not None:
            inner = old(frame, event, arg)
            if inner is not None:  # the existing tracer traces this frame: keep its local tracer
                return inner
        return local

    sys.settrace(tracer)
    try:
        fn()
    except _DeadlineReached:
        return False
    except Exception:
        if expired or time.monotonic() > deadline:
            return False
        raise
    finally:
        sys.settrace(old)
        local = tracer = None  # (local returns itself: no reference cycle left for the collector)
    return not expired and time.monotonic() <= deadline


def validate_bounded(backend: Any, constraint: Any, budget: float | None = None) -> bool:
    """``backend.validate(constraint)`` with a time budget (default :func:`budget_s`).

    Returns
    -------
    bool
        True: validated. False: the budget ran out, or the backend has no check cheaper than its
        compile; the caller lets the request through and the engine's compile checks it (its
        failures are HTTP 400s too).

    Raises
    ------
    StructgateError
        The constraint is bad (found within the budget); ConstraintKindError for a kind the
        backend does not take.
    """
    from ..backends.interface import Backend, has_cheap_validate

    if has_cheap_validate(backend):
        ok = run_with_deadline(lambda: backend.validate(constraint), budget_s() if budget is None else budget)
    else:  # its validate is a full compile, possibly one long C call the budget cannot cut: the engine checks
        Backend.check_kind(backend, constraint)
        ok = False
    if not ok:
        from . import metrics

        metrics.record_fallback("validation_deferred")
    return ok


#: the ints msgpack (vLLM's request channel to the engine core) can carry: int64 and uint64
MSGPACK_INT_MIN = -(1 << 63)
MSGPACK_INT_MAX = (1 << 64) - 1


def _has_wide_int(value: Any) -> bool:
    """True when ``value`` (JSON data: dicts, lists, scalars) holds an int msgpack cannot encode.
    Iterative: a deeply nested schema never reaches the recursion limit here."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool):
            if not MSGPACK_INT_MIN <= v <= MSGPACK_INT_MAX:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def json_schema_for_engine(so: Any) -> bool:
    """Make ``so.json`` (a vLLM ``StructuredOutputsParams``) encodable for the engine core: a schema
    dict (or list) holding an int outside msgpack's range (``-2**63 .. 2**64 - 1``, e.g.
    ``{"maximum": 10**30}``) is replaced by its JSON text, which is what vLLM sends for a schema
    given as a string (the engine parses it back exactly; Python ints have no size limit). Other
    schemas, and a ``json`` that is already a string, are left as they are.

    Returns
    -------
    bool
        True when ``so.json`` was replaced.

    Raises
    ------
    ValueError, TypeError
        ``so.json`` cannot be written as JSON (not JSON data: vLLM's request models never give one).
    """
    import json

    schema = getattr(so, "json", None)
    if not isinstance(schema, (dict, list)) or not _has_wide_int(schema):
        return False
    so.json = json.dumps(schema)  # as vLLM writes a dict schema for its structured_output_key
    return True
