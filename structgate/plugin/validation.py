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
(``OverflowError``: an empty HTTP 500) and a string holding a lone surrogate (``"\\ud800"``: msgpack
strings are UTF-8, ``UnicodeEncodeError``); such a schema is passed on as its JSON text instead (a
lone surrogate as its ``\\u`` escape), which vLLM accepts for ``json`` as well; a structural tag's
text likewise (:func:`structural_tag_for_engine`). A lone surrogate in a field that is not JSON text
(``regex``, ``grammar``, a ``choice``, ``whitespace_pattern``) has no such spelling: the request is
refused naming the field (:func:`check_utf8_for_engine`, an HTTP 400).
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable

from .._env import env_seconds
from .._text import SPLIT_PAIR as _SPLIT_PAIR, describe_lone_surrogate, escape_lone_surrogates, lone_surrogate

__all__ = ["ENV_BUDGET", "DEFAULT_BUDGET_S", "budget_s", "run_with_deadline", "validate_bounded",
           "json_schema_for_engine", "structural_tag_for_engine", "check_utf8_for_engine", "MSGPACK_INT_MIN",
           "MSGPACK_INT_MAX"]

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


def _first(value: Any, hit: Callable[[Any], bool]) -> tuple[str, Any] | None:
    """``(JSON pointer, item)`` of the first key or scalar of ``value`` (JSON data: dicts, lists,
    scalars) for which ``hit`` is true; None when there is none. Iterative: a deeply nested schema
    never reaches the recursion limit here."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            for k, x in reversed(v.items()):
                p = f"{at}/{str(k).replace('~', '~0').replace('/', '~1')}"
                if hit(k):
                    return p, k
                stack.append((x, p))
        elif isinstance(v, (list, tuple)):
            stack.extend((x, f"{at}/{i}") for i, x in reversed(list(enumerate(v))))
        elif hit(v):
            return at, v
    return None


def _wide_int(v: Any) -> bool:
    """An int msgpack cannot encode."""
    return isinstance(v, int) and not isinstance(v, bool) and not MSGPACK_INT_MIN <= v <= MSGPACK_INT_MAX


def _has_surrogate(v: Any) -> bool:
    return isinstance(v, str) and lone_surrogate(v) is not None




def json_schema_for_engine(so: Any) -> bool:
    """Make ``so.json`` (a vLLM ``StructuredOutputsParams``) encodable for the engine core: a schema
    dict (or list) holding an int outside msgpack's range (``-2**63 .. 2**64 - 1``, e.g.
    ``{"maximum": 10**30}``) or a lone surrogate (``{"const": "\\ud800"}``: msgpack writes strings as
    UTF-8, which has none) is replaced by its JSON text, which is what vLLM sends for a schema given
    as a string (the engine parses it back exactly; Python ints have no size limit; a lone surrogate
    is written as its ``\\u`` escape). A schema text holding a lone surrogate (inside a JSON string,
    the only place JSON text may hold one) gets it as its escape: the same JSON. Other schemas are
    left as they are.

    Returns
    -------
    bool
        True when ``so.json`` was replaced.

    Raises
    ------
    InvalidConstraintError
        A high and a low surrogate as two characters (only a Python caller can build them; the
        escapes would read back as one character): named as :func:`check_utf8_for_engine` does.
    ValueError, TypeError
        ``so.json`` cannot be written as JSON (not JSON data: vLLM's request models never give one).
    """
    import json

    schema = getattr(so, "json", None)
    if isinstance(schema, str):
        if lone_surrogate(schema) is None:
            return False
        _refuse_split_pair(schema, "structured_outputs.json")
        so.json = escape_lone_surrogates(schema)
        return True
    if not isinstance(schema, (dict, list)):
        return False
    found = _first(schema, lambda v: _wide_int(v) or _has_surrogate(v))
    if found is None:
        return False
    split = _first(schema, lambda v: isinstance(v, str) and _SPLIT_PAIR.search(v) is not None)
    if split is not None:
        _refuse_split_pair(split[1], f"structured_outputs.json at {split[0] or '/'}")
    so.json = json.dumps(schema)  # as vLLM writes a dict schema for its structured_output_key
    return True


def _refuse_split_pair(text: str, where: str) -> None:
    m = _SPLIT_PAIR.search(text)
    if m is not None:
        _refuse(f"{where} holds a surrogate pair as two characters (U+{ord(text[m.start()]):04X} "
                f"U+{ord(text[m.start() + 1]):04X} at character {m.start()}; JSON's escapes of them would read "
                "back as one character)")


def _refuse(what: str) -> None:
    from ..errors import InvalidConstraintError

    raise InvalidConstraintError(f"{what}: a string with no UTF-8 encoding cannot be passed to vLLM's engine "
                                 "(its requests travel as msgpack, whose strings are UTF-8)")


def check_utf8_for_engine(so: Any) -> None:
    """Refuse a constraint field of ``so`` (a vLLM ``StructuredOutputsParams``) that holds a lone
    surrogate and is not JSON text: ``regex``, ``grammar``, a ``choice`` item, ``whitespace_pattern``.
    vLLM's request encoder (msgpack, whose strings are UTF-8) would raise UnicodeEncodeError after
    validation: an empty HTTP 500. (``json`` and ``structural_tag`` are JSON text: their lone
    surrogates travel as ``\\u`` escapes, :func:`json_schema_for_engine`, :func:`structural_tag_for_engine`.)

    Raises
    ------
    InvalidConstraintError
        Naming the field (``structured_outputs.choice[1]``), the character and where it is.
    """
    fields = [(f"structured_outputs.{f}", getattr(so, f, None)) for f in ("regex", "grammar", "whitespace_pattern")]
    fields += [(f"structured_outputs.choice[{i}]", c) for i, c in enumerate(getattr(so, "choice", None) or ())]
    for where, text in fields:
        if isinstance(text, str):
            i = lone_surrogate(text)
            if i is not None:
                _refuse(f"{where} holds {describe_lone_surrogate(text, i)}")


def structural_tag_for_engine(so: Any) -> bool:
    """``so.structural_tag`` (JSON text) with each lone surrogate written as its ``\\u`` escape (the
    same JSON; msgpack cannot carry the raw character). True when it was replaced.

    Raises
    ------
    InvalidConstraintError
        A high and a low surrogate as two characters (see :func:`json_schema_for_engine`)."""
    text = getattr(so, "structural_tag", None)
    if not isinstance(text, str) or lone_surrogate(text) is None:
        return False
    _refuse_split_pair(text, "structured_outputs.structural_tag")
    so.structural_tag = escape_lone_surrogates(text)
    return True
