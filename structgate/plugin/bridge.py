"""vLLM's ``StructuredOutputBackend`` / ``StructuredOutputGrammar`` on top of structgate's interface.

vLLM (engine-core process) calls, per engine: ``compile_grammar(request_type, grammar_spec,
stop_token_ids)``, ``allocate_token_bitmask(n)``, ``destroy()``; per request: ``accept_tokens``,
``validate_tokens``, ``rollback``, ``fill_bitmask``, ``is_terminated``, ``reset``. This module maps
them onto :class:`~structgate.backends.interface.Backend` / ``CompiledGrammar`` / ``Matcher``:

================================  =======================================================
vLLM request kind                 structgate :class:`~structgate.Constraint`
================================  =======================================================
JSON (``response_format``         ``json_schema`` (the schema dict)
json_schema, ``json``)
JSON_OBJECT                       ``json_object``
REGEX                             ``regex``
CHOICE                            ``choice`` (the list of strings)
GRAMMAR                           ``grammar`` (format ``lark`` if vLLM's
                                  ``grammar_is_likely_lark`` says so, else ``gbnf``)
STRUCTURAL_TAG                    ``structural_tag`` (the parsed JSON spec)
================================  =======================================================

A backend that lacks a kind raises :class:`~structgate.errors.ConstraintKindError`: the API server
answers HTTP 400 (see :mod:`structgate.plugin.patches`), the engine fails only that request.

Semantics match vLLM's xgrammar adapter: tokens after termination are ignored by
``accept_tokens``; ``validate_tokens`` stops after an accepted EOS; rollback restores the exact
state (also across termination).

A grammar that fails *during decoding* (a structgate error from a mask fill, an advance, a
validation or a rollback: the native engine meets a limit such as ``max_dfa_states`` the first time
it builds a configuration) fails only its own request: as vLLM's guidance backend does on a
matcher error, it logs a warning once and from then on allows only EOS
(:mod:`structgate.plugin.grammar_failure`), instead of raising into vLLM's engine core, which would
kill the engine and every other request with it.

For the batched scheduler hook: the grammar object exposes ``.matcher`` (the structgate Matcher)
and the backend ``.sg_backend`` (the structgate Backend).

Counters: when ``STRUCTGATE_STATS_FILE`` is set, every compile, rejected token and rollback appends
one JSON line ``{"pid", "backend", "event", "n"}`` to that file (tests use it to check that
speculative decoding exercised rollback).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from .. import _jsontext
from .._env import env_int, env_seconds
from ..backends.interface import Constraint, warm_start_row
from ..errors import StructgateError
from .grammar_failure import FailedMatcher, attribute, drop_traceback, fail_grammar, log_failure, log_traceback
from .grammar_failure import describe as describe_failure

logger = logging.getLogger("structgate.plugin")

__all__ = ["StructgateVllmBackend", "StructgateVllmGrammar", "constraint_from_params", "kind_label",
           "constraint_from_key", "build_vocabulary", "build_backend", "backend_options", "engine_defaults",
           "options_for", "ENGINE_DEFAULTS", "record", "cache_limits", "log_fallback", "check_backend_options"]

ENV_STATS = "STRUCTGATE_STATS_FILE"
ENV_OPTIONS = "STRUCTGATE_BACKEND_OPTIONS"
#: wall-clock limit of one compile, seconds (CompileOptions.compile_timeout_s); a compile over it
#: fails that request with CompileLimitError("compile_timeout_s") -> HTTP 400
ENV_COMPILE_TIMEOUT = "STRUCTGATE_COMPILE_TIMEOUT_S"

#: compiled grammars kept per engine, least recently used evicted (``$STRUCTGATE_GRAMMAR_CACHE_ENTRIES``)
CACHE_ENTRIES = 256
#: approximate bytes of compiled grammars kept per engine, least recently used evicted past it
#: (``$STRUCTGATE_GRAMMAR_CACHE_BYTES``); sizes as :func:`structgate.plugin.metrics.grammar_nbytes`
#: measures them at the compile and again as :meth:`StructgateVllmBackend.cache_stats` refreshes
#: them (native grammars grow as their rows are computed). The newest grammar is always kept.
CACHE_BYTES = 1 << 30
ENV_CACHE_ENTRIES = "STRUCTGATE_GRAMMAR_CACHE_ENTRIES"
ENV_CACHE_BYTES = "STRUCTGATE_GRAMMAR_CACHE_BYTES"


#: constraints whose compile failed with an error that does not depend on the moment (syntax,
#: unsupported, invalid, a state limit; not the compile time limit nor an internal error), kept so
#: that the same constraint again (another request, each of ``n > 1`` samples) fails at once with the
#: same error instead of compiling again (still counted as a failure: each refused request is);
#: least recently failed evicted
FAILED_ENTRIES = 256


#: limits whose error depends on the moment, not on the constraint: time (wall clock, the thread's
#: CPU time under contention), a compile worker that died (killed, out of memory), rows held by other
#: requests' matchers. A compile that fails with one of these is not remembered as failed.
TRANSIENT_LIMITS = frozenset({"compile_timeout_s", "step_timeout_s", "compile_process", "row_budget_bytes"})


def _same_every_time(e: BaseException) -> bool:
    """True for a compile error that the same constraint, vocabulary and options always give (a
    typed error whose limit, if any, is not in :data:`TRANSIENT_LIMITS`)."""
    return isinstance(e, StructgateError) and getattr(e, "limit_name", None) not in TRANSIENT_LIMITS


def cache_limits() -> tuple[int, int]:
    """``(entries, bytes)``: the compiled-grammar cache's bounds (:data:`CACHE_ENTRIES`,
    :data:`CACHE_BYTES`, or their variables).

    Raises
    ------
    ValueError
        A variable is set but is not a positive integer (names the variable).
    """
    return (env_int(ENV_CACHE_ENTRIES, CACHE_ENTRIES, minimum=1),
            env_int(ENV_CACHE_BYTES, CACHE_BYTES, minimum=1, unit="bytes"))


_stats_lock = threading.Lock()


def record(event: str, backend: str, n: int = 1, **extra: Any) -> None:
    """Append a counter line to ``$STRUCTGATE_STATS_FILE`` (no-op when unset)."""
    path = os.environ.get(ENV_STATS)
    if not path:
        return
    line = json.dumps({"pid": os.getpid(), "backend": backend, "event": event, "n": int(n), **extra})
    with _stats_lock, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# -- constraints ---------------------------------------------------------------------------------
def _grammar_format(text: str) -> str:
    try:
        from vllm.v1.structured_output.utils import grammar_is_likely_lark
    except ImportError:  # pragma: no cover
        return "lark" if ":" in text and "::=" not in text else "gbnf"
    return "lark" if grammar_is_likely_lark(text) else "gbnf"


def constraint_from_params(so: Any) -> Constraint:
    """The :class:`~structgate.Constraint` of a vLLM ``StructuredOutputsParams``.

    Raises
    ------
    GrammarSyntaxError
        ``json`` / ``structural_tag`` text that is not JSON.
    ValueError
        No constraint field set.
    """
    if so.json is not None:
        return Constraint.json_schema(so.json)
    if so.json_object:
        return Constraint.json_object()
    if so.regex is not None:
        return Constraint.regex(so.regex)
    if so.choice is not None:
        return Constraint.choice(so.choice)
    if so.grammar is not None:
        return Constraint.grammar(so.grammar, _grammar_format(so.grammar))
    if so.structural_tag is not None:
        return Constraint("structural_tag", so.structural_tag)
    raise ValueError("no structured-output constraint set")


def kind_label(request_kind: str) -> str:
    """structgate's constraint kind (``json_schema``, ``regex``, ...) of a vLLM request kind: a
    ``StructuredOutputOptions`` name (``JSON``) or a ``StructuredOutputsParams`` field (``json``); the
    ``kind`` label of the metrics."""
    k = str(request_kind).lower()
    return "json_schema" if k == "json" else k


def constraint_from_key(request_type: Any, grammar_spec: str) -> Constraint:
    """The constraint of vLLM's ``(StructuredOutputOptions, spec)`` key (engine side)."""
    kind = getattr(request_type, "name", str(request_type))
    if kind == "JSON":
        return Constraint.json_schema(grammar_spec)
    if kind == "JSON_OBJECT":
        return Constraint.json_object()
    if kind == "REGEX":
        return Constraint.regex(grammar_spec)
    if kind == "CHOICE":
        choices = json.loads(grammar_spec) if isinstance(grammar_spec, str) else grammar_spec
        return Constraint.choice(choices)
    if kind == "GRAMMAR":
        return Constraint.grammar(grammar_spec, _grammar_format(grammar_spec))
    if kind == "STRUCTURAL_TAG":
        return Constraint("structural_tag", grammar_spec)
    raise ValueError(f"unknown vLLM structured-output request type {request_type!r}")


# -- structgate-auto fallbacks in the server log ---------------------------------------------------
_fallbacks_logged: set[tuple[str, str]] = set()
_fallbacks_lock = threading.Lock()


def log_fallback(kind: str, compiled: Any) -> bool:
    """Log that ``structgate-auto`` served a ``kind`` constraint with a later engine of its chain
    (``compiled.fallbacks`` not empty), as ``structgate-auto: json_schema served by
    structgate-llguidance (native: UnsupportedFeatureError: ...)``, on vLLM's logger
    (``vllm.structgate``, INFO) so that it shows in the server's log with vLLM's own lines: once per
    constraint kind and serving engine in each process, later ones at DEBUG (``structgate_compile_seconds``
    counts every compile by serving engine). The ``structgate.auto`` logger's line (the same text,
    every fallback) has no handler in a vLLM server (vLLM configures only its own logger); when vLLM's
    logging is not configured (``VLLM_CONFIGURE_LOGGING=0``) that line is the one to see and nothing
    is logged here. Returns True when this call logged at INFO. Never raises."""
    fallbacks = getattr(compiled, "fallbacks", ()) or ()
    served = getattr(compiled, "served_by", None)
    if not fallbacks or not served:
        return False
    try:
        if not logging.getLogger("vllm").handlers:
            return False
        with _fallbacks_lock:
            first = (kind, served) not in _fallbacks_logged
            _fallbacks_logged.add((kind, served))
        why = "; ".join(f"{n}: {m}" for n, m in fallbacks)
        logging.getLogger("vllm.structgate").log(logging.INFO if first else logging.DEBUG,
                                                 "structgate-auto: %s served by %s (%s)", kind, served, why)
        return first
    except Exception:  # noqa: BLE001 - a log line never fails a compile
        return False


# -- vocabulary / backend ----------------------------------------------------------------------
def _generation_eos_ids(model_config: Any) -> list[int]:
    ids: list[int] = []
    try:
        gen = model_config.try_get_generation_config() if model_config is not None else {}
        eos = (gen or {}).get("eos_token_id")
        if isinstance(eos, int):
            ids.append(eos)
        elif isinstance(eos, (list, tuple)):
            ids.extend(int(i) for i in eos)
    except Exception:  # noqa: BLE001 - generation config is optional
        pass
    try:
        hf_eos = getattr(model_config.hf_config, "eos_token_id", None) if model_config is not None else None
        if isinstance(hf_eos, int):
            ids.append(hf_eos)
        elif isinstance(hf_eos, (list, tuple)):
            ids.extend(int(i) for i in hf_eos)
    except Exception:  # noqa: BLE001
        pass
    return sorted(set(ids))


def build_vocabulary(tokenizer: Any, vocab_size: int | None = None, model_config: Any = None):
    """The structgate :class:`~structgate.Vocabulary` of a vLLM tokenizer: token bytes from the
    tokenizer's byte mapping, EOS = the tokenizer's EOS / end-of-generation tokens plus the model's
    ``generation_config`` / ``config.json`` ``eos_token_id``, width ``vocab_size`` (the logits
    width, default ``model_config.get_vocab_size()``).

    Raises
    ------
    VocabularyError
    """
    from ..tokenizers import from_hf

    if vocab_size is None and model_config is not None:
        vocab_size = model_config.get_vocab_size()
    hf = getattr(tokenizer, "tokenizer", None)  # some vLLM wrappers hold the HF tokenizer
    tok = tokenizer if hasattr(tokenizer, "backend_tokenizer") or hf is None else hf
    n = len(tokenizer)
    extra = [i for i in _generation_eos_ids(model_config) if 0 <= i < n]  # ids past the tokenizer: none
    return from_hf(tok, vocab_size=vocab_size, eos_token_ids=extra)


#: worker processes that build outlines-core indexes under vLLM (``outlines_compile_processes``)
#: unless ``$STRUCTGATE_BACKEND_OPTIONS`` or ``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES`` says otherwise
OUTLINES_COMPILE_PROCESSES = 1

#: the plugin's own defaults, each for the one engine that reads it: option -> (engine registry name,
#: value). They are given to that engine alone (:func:`engine_defaults`), never to the others (a
#: third-party engine never sees, checks or is blamed for them), and only where the user set
#: nothing (the option in ``$STRUCTGATE_BACKEND_OPTIONS``, at the top level or in ``extra``, or the
#: variable it defaults from)
ENGINE_DEFAULTS: dict[str, tuple[str, str, Any]] = {
    "outlines_compile_processes": ("structgate-outlines-core", "STRUCTGATE_OUTLINES_COMPILE_PROCESSES",
                                   OUTLINES_COMPILE_PROCESSES),
}


def backend_options(vllm_config: Any = None) -> dict:
    """structgate compile options for the vLLM engine, as the user gave them: ``$STRUCTGATE_BACKEND_OPTIONS``
    (a JSON object of :class:`~structgate.CompileOptions` fields and engine extras),
    ``compile_timeout_s`` from ``$STRUCTGATE_COMPILE_TIMEOUT_S`` (seconds, ``inf`` or ``<= 0``: no
    limit, read as the option is) unless the JSON sets it, plus ``whitespace="compact"`` when the
    config says ``disable_any_whitespace``. Every engine a request may run gets these (and checks
    them at startup, :func:`check_backend_options`).

    The plugin's defaults for one engine (:data:`ENGINE_DEFAULTS`) are not among them: see
    :func:`engine_defaults`.

    Raises
    ------
    ValueError
        Either variable is malformed (names the variable).
    """
    opts: dict = {}
    raw = os.environ.get(ENV_OPTIONS)
    if raw:
        try:
            given = _jsontext.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{ENV_OPTIONS} is not a JSON object: {e}") from None
        if not isinstance(given, dict):
            raise ValueError(f"{ENV_OPTIONS} is not a JSON object: got {type(given).__name__} {raw!r}")
        opts.update(given)
    t = env_seconds(ENV_COMPILE_TIMEOUT, None)
    if t is not None:
        opts.setdefault("compile_timeout_s", t)
    so_cfg = getattr(vllm_config, "structured_outputs_config", None)
    if getattr(so_cfg, "disable_any_whitespace", False):
        opts.setdefault("whitespace", "compact")
    return opts


def engine_defaults(options: Any = None) -> dict[str, dict[str, Any]]:
    """The plugin's defaults (:data:`ENGINE_DEFAULTS`) the user did not set in ``options`` (default
    :func:`backend_options`) or by their variable, by the engine (registry name) that alone gets
    them: ``{"structgate-outlines-core": {"outlines_compile_processes": 1}}`` unless
    ``outlines_compile_processes`` or ``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES`` is given.
    outlines-core's index build (one Rust call that cannot be cut in process) then runs in a worker
    process, which ``compile_timeout_s`` terminates, so a pathological regex costs the engine core
    neither a grammar thread nor a core for minutes; the worker starts at the first outlines-core
    compile.

    Raises
    ------
    ValueError
        ``options`` is None and a variable of :func:`backend_options` is malformed.
    """
    if options is None:
        options = backend_options()
    given_extra = options.get("extra")
    out: dict[str, dict[str, Any]] = {}
    for key, (engine, env, value) in ENGINE_DEFAULTS.items():
        if key in options or (isinstance(given_extra, dict) and key in given_extra) or os.environ.get(env):
            continue
        out.setdefault(engine, {})[key] = value
    return out


def options_for(name: str, options: dict, defaults: dict[str, dict[str, Any]]) -> dict:
    """The options engine ``name`` (a registry name or alias) is built with: ``options`` under its
    own plugin defaults (``defaults[name]``, :func:`engine_defaults`), which no other engine gets."""
    from ..backends.registry import get_backend_spec

    own = defaults.get(get_backend_spec(name).name)
    return {**own, **options} if own else dict(options)


def check_backend_options(name: str, vllm_config: Any = None) -> dict:
    """Check :func:`backend_options` for structgate backend ``name`` without a vocabulary, at
    startup (the ``config-backend-names`` and ``cli-flag`` patches call it when the server's backend
    is configured), so that a typo in ``$STRUCTGATE_BACKEND_OPTIONS`` stops the server instead of
    failing every structured request with an HTTP 400 that blames the client. It checks what the
    backend's constructor checks before it uses the vocabulary: option names (those of
    :class:`~structgate.CompileOptions`, the backend's declared extras and any registered backend's,
    as :func:`~structgate.backends.registry.check_option_names`), the option values
    :class:`~structgate.CompileOptions` checks, ``auto_chain`` / ``auto_fallback_on`` when the
    backend is ``structgate-auto`` or the options give them (a per-request ``structgate-auto`` uses
    them on any structgate server), and the values the backend's own
    :meth:`~structgate.backends.interface.Backend.check_options` checks (a backend class that has
    that classmethod: native's integer extras and ``compile_processes`` / ``$STRUCTGATE_COMPILE_PROCESSES``,
    outlines-core's ``outlines_compile_processes`` / ``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES``;
    ``structgate-auto`` checks each engine of its chain), and those checks of every other installed
    structgate backend too, since a request may choose it (``vllm_xargs.structured_output_backend``). As the backend does, a key given both at
    the top level and in ``extra`` takes its ``extra`` value. Returns the options.

    Raises
    ------
    ValueError
        Either variable is malformed, or an option is unknown or has a bad value; the message names
        the variable and the option (or the variable the option's default came from).
    """
    from collections.abc import Mapping

    from ..backends.auto import AutoBackend
    from ..backends.interface import CompileOptions
    from ..backends.registry import check_option_names, check_option_values, get_backend_spec, list_backends

    opts = backend_options(vllm_config)
    spec = get_backend_spec(name)
    flat = dict(opts)
    if "extra" in flat:  # as Backend.__init__ takes it
        ex = flat.pop("extra")
        if not isinstance(ex, Mapping):
            raise ValueError(f"{ENV_OPTIONS}: option extra must be a JSON object of extra option names to "
                             f"values, got {type(ex).__name__}")
        flat.update(ex)
    try:
        try:
            factory = spec.load_factory()
        except ImportError:  # not installed: check_backend_name reports it
            factory = None
        if isinstance(factory, type):
            check_option_names(factory, flat)
        CompileOptions().updated(**flat)  # the values its __post_init__ checks
        if spec.name != AutoBackend.name and any(k in flat for k in ("auto_chain", "auto_fallback_on")):
            AutoBackend.parse_options(flat)
    except (StructgateError, TypeError, ValueError) as e:
        raise ValueError(f"{ENV_OPTIONS}={os.environ.get(ENV_OPTIONS, '')!r} is not valid for "
                         f"structured-output backend {spec.name!r}: {e}") from None
    try:  # the backend's own value checks (Backend.check_options)
        check_option_values(spec.name, flat)
    except (StructgateError, TypeError, ValueError) as e:
        raise ValueError(f"the options of structured-output backend {spec.name!r} are not valid "
                         f"({ENV_OPTIONS}={os.environ.get(ENV_OPTIONS, '')!r}): {e}") from None
    # a request may choose any other installed structgate engine (vllm_xargs, request_backend.py),
    # which gets these options too: its value checks run now, not at its first request
    # (structgate-auto last: it checks its chain's engines, which are named directly before it)
    for info in sorted(list_backends(), key=lambda i: (i.name == AutoBackend.name, i.name)):
        if info.name == spec.name or not info.available:
            continue
        try:
            check_option_values(info.name, flat)
        except (StructgateError, TypeError, ValueError) as e:
            raise ValueError(f"the options are not valid for structured-output backend {info.name!r}, which a "
                             f"request may choose (vllm_xargs.structured_output_backend) "
                             f"({ENV_OPTIONS}={os.environ.get(ENV_OPTIONS, '')!r}): {e}") from None
        except Exception as e:  # noqa: BLE001 - another engine that cannot even load (a third-party
            # module failing at import, a bug in its check): its own requests will fail; this
            # server's backend is not blocked by it
            logger.warning("structgate: structured-output backend %r (which a request may choose) could not "
                           "check its options: %s: %s; requests choosing it may fail", info.name,
                           type(e).__name__, e)
    return opts


def build_backend(name: str, tokenizer: Any, *, model_config: Any = None, vllm_config: Any = None,
                  vocab_size: int | None = None):
    """Build structgate backend ``name`` for a vLLM tokenizer (frontend validation and engine), with
    :func:`backend_options` and, for that engine alone, its :func:`engine_defaults` (a
    ``structgate-auto`` hands each engine of its chain its own, :attr:`AutoBackend.engine_defaults
    <structgate.backends.auto.AutoBackend.engine_defaults>`)."""
    from ..backends.auto import AutoBackend
    from ..backends.registry import get_backend

    if model_config is None and vllm_config is not None:
        model_config = vllm_config.model_config
    vocab = build_vocabulary(tokenizer, vocab_size, model_config)
    opts = backend_options(vllm_config)
    defaults = engine_defaults(opts)
    be = get_backend(name, vocab, **options_for(name, opts, defaults))
    if isinstance(be, AutoBackend):
        be.engine_defaults = defaults
    return be


class _RefusalLogFilter(logging.Filter):
    """Drops vLLM's own line for a sampled token a structgate grammar refused (``Unexpected: grammar
    rejected tokens [...] for request X. Terminating request.``, an ERROR of the scheduler's logger)
    when structgate has just logged that refusal itself at WARNING or above, in one line that also
    says why (:meth:`StructgateVllmGrammar._log_refusal`): one refused token, one line. Any other
    record passes, and so does vLLM's line for a request structgate did not log or logged at INFO
    only (a grammar whose failure was warned already: INFO is not shown under vLLM's default logging,
    so vLLM's line is the visible one).

    It depends on vLLM's logger name and wording (:attr:`LOGGER`, :attr:`PREFIX`), which the ledger
    entry :attr:`ENTRY` checks (:mod:`structgate.plugin.patches`); when that check failed the filter
    is off: never installed, vLLM's line is written (two lines per refusal)."""

    PREFIX = "Unexpected: grammar rejected tokens"
    #: the vLLM logger that writes it (``vllm.v1.core.sched.scheduler``'s ``init_logger(__name__)``)
    LOGGER = "vllm.v1.core.sched.scheduler"
    #: the optional ledger entry that checks both against the installed vLLM
    ENTRY = "scheduler-refusal-log-filter"

    def __init__(self) -> None:
        super().__init__()
        self._ids: "OrderedDict[str, None]" = OrderedDict()  # request ids structgate logged, bounded
        self._lock = threading.Lock()
        self._installed = False

    def note(self, request_id: str) -> None:
        """Drop vLLM's next line for ``request_id`` (installs the filter the first time); nothing
        when the ledger entry :attr:`ENTRY` failed."""
        from . import ledger

        if self.ENTRY in ledger.errors():
            return
        with self._lock:
            self._ids[request_id] = None
            while len(self._ids) > 1024:
                self._ids.popitem(last=False)
            if not self._installed:
                self._installed = True
                logging.getLogger(self.LOGGER).addFilter(self)

    def discard(self, request_id: str) -> None:
        """vLLM's next line for ``request_id`` is written (an earlier :meth:`note` is undone)."""
        with self._lock:
            self._ids.pop(request_id, None)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._ids or not isinstance(record.msg, str) or not record.msg.startswith(self.PREFIX):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        with self._lock:
            return not any(isinstance(a, str) and self._ids.pop(a, 0) is None for a in args)


_refusal_filter = _RefusalLogFilter()

#: ``active`` while ``StructuredOutputManager.grammar_bitmask`` runs in this thread (the ledger
#: entry metrics-mask-fill's wrapper enters :func:`mask_fill`): an ``accept_tokens`` there is fed
#: draft tokens (the fill advances through a request's scheduled drafts and rolls them back), never
#: sampled ones, whichever loop fills: the scheduler hook's or, with it off, vLLM's own
_fill_state = threading.local()


class mask_fill:
    """Context manager: this thread is filling the step's bitmask (see :data:`_fill_state`);
    nests."""

    __slots__ = ("_prev",)

    def __enter__(self):
        self._prev = getattr(_fill_state, "active", False)
        _fill_state.active = True
        return self

    def __exit__(self, *exc):
        _fill_state.active = self._prev
        return False


def in_mask_fill() -> bool:
    """True inside :class:`mask_fill` in this thread."""
    return getattr(_fill_state, "active", False)


# -- vLLM classes ------------------------------------------------------------------------------
try:
    from vllm.v1.structured_output.backend_types import StructuredOutputBackend as _VBackend
    from vllm.v1.structured_output.backend_types import StructuredOutputGrammar as _VGrammar
except ImportError:  # pragma: no cover - vLLM absent: the module still imports (docs, tests)
    class _VGrammar:  # type: ignore[no-redef]
        pass

    @dataclass
    class _VBackend:  # type: ignore[no-redef]
        vllm_config: Any
        tokenizer: Any
        vocab_size: int


class StructgateVllmGrammar(_VGrammar):
    """One request's grammar state: a structgate :class:`~structgate.Matcher` behind vLLM's API.

    Attributes
    ----------
    matcher : structgate.Matcher
    backend_name : str
    num_processed_tokens : int
        Tokens accepted so far (rollback decrements).
    """

    def __init__(self, matcher, backend_name: str, eos_ids: frozenset[int], on_failure=None):
        self.matcher = matcher
        self.backend_name = backend_name
        self._eos = eos_ids
        #: called with the error when this grammar fails during decoding
        #: (:func:`~structgate.plugin.grammar_failure.fail_grammar`): the backend drops the shared
        #: compiled grammar from its caches (:meth:`StructgateVllmBackend._forget`)
        self.on_failure = on_failure
        self.num_processed_tokens = 0
        self._warned = False

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by ``tokens``; tokens after termination are ignored. False if one is rejected
        (the state then stays after the last accepted token, as in vLLM's xgrammar adapter).

        Inside the step's bitmask fill (:func:`in_mask_fill`: the scheduler hook's speculative fill,
        :func:`~structgate.plugin.scheduler_hook._accept_draft`, or vLLM's own fill loop with the
        hook off) the tokens are drafts, not sampled ones: a refusal is still one line
        (:meth:`_log_refusal`), but it fails nothing, so vLLM's line for a later sampled token is
        not dropped for it and that token still gets its own line.

        An advance that raises a structgate error (a limit met the first time a transition is
        needed) fails this request's grammar (:mod:`structgate.plugin.grammar_failure`): that token
        and any but EOS after it are rejected, so vLLM ends this request alone. A grammar that failed
        where the request was not known (a mask fill through vLLM's own loop, a validate, a
        rollback) is attributed to ``request_id`` here (:func:`~structgate.plugin.grammar_failure.attribute`),
        so the request's finished output names the failure."""
        m = self.matcher
        if m.__class__ is FailedMatcher and m.request_id is None:
            attribute(self, request_id)
        failed_now = None
        try:
            for t in tokens:
                if m.is_terminated():
                    break
                try:
                    ok = m.advance(int(t))
                except StructgateError as e:
                    m = self._fail(e, request_id, log=False)  # logged below, with what became of the token
                    failed_now = e
                    ok = m.advance(int(t))
                if not ok:
                    if in_mask_fill():
                        self._log_refusal(request_id, int(t), failed_now, draft=True)
                    elif not self._warned:
                        self._warned = True
                        self._log_refusal(request_id, int(t), failed_now)
                    record("reject", self.backend_name)
                    return False
                if failed_now is not None:  # the EOS the failed grammar allows: the failure's own warning
                    log_failure(self, failed_now, request_id)
                    drop_traceback(failed_now)
                    failed_now = None
                self.num_processed_tokens += 1
            return True
        finally:
            # logged (or not to be logged): its traceback holds this frame, and this frame (self)
            # the failed matcher that keeps the error: no reference cycle left
            if failed_now is not None:
                drop_traceback(failed_now)
            failed_now = None

    #: the bridge's grammar logs its refused tokens itself (:meth:`_log_refusal`), the draft tokens
    #: of a bitmask fill too (:func:`in_mask_fill`); the scheduler hook logs those of other grammars
    logs_refusals = True

    def _log_refusal(self, request_id: str, token: int, failed_now: BaseException | None,
                     draft: bool = False) -> None:
        """One line for a sampled token this grammar refuses (request, token, why): a WARNING when
        its grammar failed during decoding by this very advance (the failure's one warning; the
        request then ends with ``stop_reason`` naming the failure; the traceback at DEBUG), INFO
        when that failure was warned already, an ERROR for a grammar that has not failed (a mask
        was not applied, or left no legal token). vLLM's own line for the same refusal is dropped
        (:data:`_refusal_filter`) when ours is WARNING or above; after an INFO line of ours (not shown
        under vLLM's default logging) vLLM's ERROR line is written.

        ``draft``: a draft token of the speculative fill (``draft token 1:b'b' refused ...``), at the
        same levels; it fails nothing (the later rows of the step repeat the last valid row, or allow
        only EOS once the grammar failed), so no vLLM line is dropped for it."""
        tok = self.matcher.vocab.describe(token)
        m = self.matcher
        if isinstance(m, FailedMatcher):
            # the failure's one WARNING when it happened in this advance; INFO when it was warned
            # already (a mask fill failed, and this token was sampled without that row)
            level = logging.WARNING if failed_now is not None else logging.INFO
            logger.log(level, "structgate %s: request %s: %s %s refused: its grammar failed during decoding (%s) and "
                       "%s; other requests are not affected", self.backend_name, request_id,
                       "draft token" if draft else "token", tok, describe_failure(m.error),
                       "allows only EOS from this step on, so the request ends (its stop_reason names the failure)"
                       if draft else "allows only EOS, so the request ends here (finish_reason stop, its "
                       "stop_reason names the failure)")
            if failed_now is not None:
                log_traceback(self, failed_now, request_id)
        elif draft:
            level = logging.ERROR
            logger.error("structgate %s: request %s: draft token %s refused by its grammar in the speculative "
                         "bitmask fill (drafts are validated before they are scheduled); the later rows of this "
                         "step repeat the last valid row", self.backend_name, request_id, tok)
        else:
            level = logging.ERROR
            logger.error("structgate %s: request %s: token %s refused by its grammar, so the request fails "
                         "(FINISHED_ERROR): the mask was not applied or left no legal token (another logits "
                         "processor forbade the grammar's only tokens?)", self.backend_name, request_id, tok)
        if draft:
            return  # a refused draft fails nothing: vLLM's line for a later sampled token stays its own
        # vLLM's ERROR line is dropped only for a line of ours that is as visible: under vLLM's default
        # logging structgate's INFO lines are not shown, so an INFO line (the failure warned already)
        # leaves vLLM's line alone, as does a line the ``structgate`` logger's level holds back
        if level >= logging.WARNING and logger.isEnabledFor(level):
            _refusal_filter.note(request_id)
        else:
            _refusal_filter.discard(request_id)

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest accepted prefix of ``tokens`` (stops after an accepted EOS). Does not change
        the matcher state. A structgate error fails the grammar (then only EOS validates)."""
        m = self.matcher
        if m.is_terminated() or not tokens:
            return []
        ids = [int(t) for t in tokens]
        try:
            n = m.validate(ids)
        except StructgateError as e:
            n = self._fail(e).validate(ids)
        for i in range(n):
            if int(tokens[i]) in self._eos:
                n = i + 1
                break
        return list(tokens[:n])

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (also across termination, and across a
        failure: the grammar stays failed)."""
        if num_tokens <= 0:
            return
        try:
            self.matcher.rollback(num_tokens)
        except StructgateError as e:
            self._fail(e)
        self.num_processed_tokens -= num_tokens
        record("rollback", self.backend_name, num_tokens)

    def fill_bitmask(self, bitmask: Any, idx: int) -> None:
        """Write row ``idx`` of vLLM's int32 bitmask ``(rows, ceil(vocab/32))`` (CPU tensor).

        A structgate error while computing the mask (other than a :class:`BitmaskError`: a wrong
        buffer) fails this request's grammar: the row allows only EOS, now and at later steps."""
        try:
            self.matcher.fill_bitmask(bitmask, idx)
        except StructgateError as e:
            self._fail(e).fill_bitmask(bitmask, idx)

    def _fail(self, e: StructgateError, request_id: str | None = None, *, log: bool = True):
        """Mark this grammar failed by ``e`` and return its new matcher (EOS only), or re-raise ``e``
        when it is not a request's failure (a :class:`~structgate.errors.BitmaskError`)."""
        return fail_grammar(self, e, request_id, log=log)

    def _failed(self) -> bool:
        return isinstance(self.matcher, FailedMatcher)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self.num_processed_tokens = 0


@dataclass
class StructgateVllmBackend(_VBackend):
    """vLLM engine-level backend that compiles with structgate backend ``backend_name``.

    Attributes
    ----------
    sg_backend : structgate.Backend
        The structgate backend (bound to the model's vocabulary, logits width ``vocab_size``).
    """

    backend_name: str = "native"
    sg_backend: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.sg_backend = build_backend(self.backend_name, self.tokenizer, vllm_config=self.vllm_config,
                                        vocab_size=self.vocab_size)
        self._eos = frozenset(self.sg_backend.vocab.eos_token_ids)
        self._cache: "OrderedDict[str, Any]" = OrderedDict()
        self._cache_bytes: dict[str, int] = {}
        self._failed: "OrderedDict[str, tuple]" = OrderedDict()  # key -> its compile's error (kind, class, args)
        self._cache_lock = threading.Lock()
        self._cache_max_entries, self._cache_max_bytes = cache_limits()
        spec = getattr(self.vllm_config, "speculative_config", None)
        self.num_speculative_tokens = int(getattr(spec, "num_speculative_tokens", 0) or 0)
        from . import metrics

        metrics.register_cache(self.backend_name, self.cache_stats)
        stats = getattr(self.sg_backend, "engine_cache_stats", None)
        if callable(stats):  # (a third-party engine written against an older interface may lack it)
            metrics.register_engine_caches(self.backend_name, stats)
        logger.info("structgate: structured-output backend %r (%s) for vocabulary of %d tokens, width %d",
                    self.backend_name, type(self.sg_backend).__name__, self.sg_backend.vocab.n_tokens,
                    self.sg_backend.vocab.vocab_size)
        from . import log_startup

        log_startup("engine", backends=[self.backend_name])

    #: cached grammars whose size :meth:`cache_stats` measures again per call (oldest first):
    #: native grammars grow as their rows are computed, and the metrics writer calls it every second
    REFRESH_PER_STATS = 8

    def cache_stats(self) -> dict:
        """``{"entries": n, "bytes": approximate size}`` of the compiled-grammar cache. Each call
        measures :attr:`REFRESH_PER_STATS` entries again (the least recently measured), so the
        figure follows grammars that grow after their compile at a bounded cost per call."""
        from . import metrics

        with self._cache_lock:
            keys = list(itertools.islice(self._cache_bytes, self.REFRESH_PER_STATS))
            for k in keys:
                g = self._cache.get(k)
                size = self._cache_bytes.pop(k)
                if g is not None:
                    size = metrics.grammar_nbytes(g)
                    self._cache_bytes[k] = size  # measured last: at the end of the order
            self._evict_locked()  # grammars that grew may have taken the cache over its byte bound
            return {"entries": len(self._cache), "bytes": sum(self._cache_bytes.values())}

    def compile_grammar(self, request_type: Any, grammar_spec: str,
                        stop_token_ids: set[int] | None = None, *,
                        backend_name: str | None = None) -> StructgateVllmGrammar:
        """Compile (cached by constraint) and return a fresh per-request grammar.

        ``backend_name``: a per-request engine choice (:mod:`structgate.plugin.request_backend`);
        None or the server's own name compiles with the server's backend. The compile metrics and
        the grammar's ``backend_name`` name the engine that served it (``served_by`` of
        ``structgate-auto`` grammars).

        Raises
        ------
        StructgateError
            The constraint does not compile, or ``backend_name`` is unknown / not installed (fails
            only this request).
        """
        import time

        from . import metrics

        engine = backend_name or self.backend_name  # the engine that compiles (and may refuse) it
        try:
            c = constraint_from_key(request_type, grammar_spec)
        except Exception as e:
            metrics.record_compile_failure(engine, kind_label(getattr(request_type, "name", request_type)),
                                           getattr(e, "kind", "syntax"))
            raise
        other = backend_name is not None and backend_name != self.backend_name
        key = (f"{backend_name}\x00" if other else "") + c.cache_key()
        with self._cache_lock:
            compiled = self._cache.get(key)
            failed = self._failed.get(key) if compiled is None else None
            if compiled is not None:
                self._cache.move_to_end(key)
        metrics.record_cache(self.backend_name, compiled is not None or failed is not None)
        if failed is not None:  # the same constraint failed before, for a reason that does not change
            kind, rebuild, args = failed
            metrics.record_compile_failure(engine, c.kind, kind)  # each refused request counts
            raise rebuild(*args)
        if compiled is None:
            t0 = time.perf_counter()
            try:
                from .gc_policy import run_compile

                compiled = run_compile(lambda: warm_start_row(self._compile_with(backend_name, c) if other
                                                              else self.sg_backend.compile(c)))
            except Exception as e:
                metrics.record_compile_failure(engine, c.kind, getattr(e, "kind", None) or "internal")
                if _same_every_time(e):
                    with self._cache_lock:
                        # what rebuilds it, not the error: its traceback would pin the frames
                        # of the compile (and this one: a reference cycle through self)
                        self._failed[key] = (e.kind, *e.__reduce__()[:2])
                        while len(self._failed) > FAILED_ENTRIES:
                            self._failed.popitem(last=False)
                raise
            metrics.record_compile(getattr(compiled, "served_by", self.backend_name), c.kind,
                                   time.perf_counter() - t0)
            log_fallback(c.kind, compiled)
            size = metrics.grammar_nbytes(compiled)
            with self._cache_lock:
                self._cache[key] = compiled
                self._cache_bytes[key] = size
                self._evict_locked()
            record("compile", self.backend_name, kind=c.kind,
                   served_by=getattr(compiled, "served_by", self.backend_name))
        return StructgateVllmGrammar(compiled.matcher(), getattr(compiled, "served_by", self.backend_name), self._eos,
                                     on_failure=lambda _e, k=key, g=compiled, c=c: self._forget(k, g, c))

    def _forget(self, key: str, compiled: Any, constraint: Constraint) -> None:
        """Drop ``compiled`` (cached under ``key``) from this backend's cache and the engine's, after
        one of its requests failed during decoding. The requests of one constraint share one compiled
        grammar and its lazily built automaton: a limit that one request met (``max_dfa_states``
        counts the configurations every request reached) would fail every later request of that
        constraint as soon as it reached a new state. The next request compiles afresh; requests
        already running keep the grammar they hold."""
        with self._cache_lock:
            if self._cache.get(key) is compiled:
                del self._cache[key]
                self._cache_bytes.pop(key, None)
            be = self.sg_backend
        try:
            be.forget(constraint)
        except Exception:  # noqa: BLE001 - a third-party engine's cache never breaks the step
            logger.debug("structgate: forget() failed", exc_info=True)

    def _evict_locked(self) -> None:
        """Drop least recently used grammars while the cache is over either bound (holding the lock).
        Requests already running keep their matchers (and so their grammar) until they finish."""
        total = sum(self._cache_bytes.values())
        while len(self._cache) > 1 and (len(self._cache) > self._cache_max_entries or total > self._cache_max_bytes):
            old, _ = self._cache.popitem(last=False)
            total -= self._cache_bytes.pop(old, 0)

    def _compile_with(self, name: str, constraint: Constraint):
        """Compile with engine ``name`` (a per-request choice). The server's backend is wrapped once
        in :class:`~structgate.backends.auto.AutoBackend` (same instance, vocabulary and caches), so
        one batched bitmask fill serves matchers of several engines. ``structgate-auto`` compiles
        with the full chain (``auto_chain`` of ``$STRUCTGATE_BACKEND_OPTIONS``, default native ->
        structgate-llguidance -> structgate-xgrammar, the server's engine instance reused), with
        fallback, as on a ``structgate-auto`` server; any other name compiles with that engine alone.

        Raises
        ------
        StructgateError
            The engine (or every engine of the chain) refuses the constraint; an unknown or
            uninstalled name.
        """
        from ..backends.auto import AutoBackend

        with self._cache_lock:
            if not isinstance(self.sg_backend, AutoBackend):
                # the engines a request may choose get the user's options, each with only its own
                # plugin defaults (the server's engine may hold another's)
                opts = backend_options(self.vllm_config)
                self.sg_backend = AutoBackend.wrap(self.sg_backend, engine_options=opts,
                                                   engine_defaults=engine_defaults(opts))
            router = self.sg_backend
        compiled = router.compile_with(name, constraint)
        logger.info("structgate: request-chosen backend %r serves a %s constraint", compiled.served_by,
                    constraint.kind)
        return compiled

    def allocate_token_bitmask(self, max_num_seqs: int):
        """int32 CPU tensor ``(max_num_seqs, ceil(vocab_size/32))`` filled with -1 (all allowed)."""
        import torch

        return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def destroy(self) -> None:
        with self._cache_lock:
            self._cache.clear()
            self._cache_bytes.clear()
            self._failed.clear()
