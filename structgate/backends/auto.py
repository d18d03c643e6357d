"""``structgate-auto``: native where it can, another engine where it cannot — per constraint.

Each constraint is compiled by the first engine of a *chain* (default ``native`` →
``structgate-llguidance`` → ``structgate-xgrammar``, only the installed ones) that does not refuse
it with one of the *fallback errors* (default :class:`~structgate.errors.UnsupportedFeatureError`
and :class:`~structgate.errors.ConstraintKindError`: a valid constraint the engine cannot enforce
exactly, or a kind it lacks). Any other error — a syntax error, a compile limit, an unsatisfiable
schema — is the answer for that constraint and is raised at once (another engine would not make a
malformed request valid, and a limit is a limit).

The compiled grammar says which engine served it: :attr:`AutoCompiledGrammar.served_by` (and
:attr:`AutoCompiledGrammar.fallbacks`, the refusals before it), and one log line per fallback on
the ``structgate.auto`` logger (INFO)::

    structgate-auto: json_schema served by structgate-llguidance (native: UnsupportedFeatureError: ...)

The name is ``structgate-auto`` (alias ``sg-auto``) because vLLM's own ``auto`` keeps its meaning
under ``--structured-output-backend auto``.

Options (``**options`` extras; through vLLM: ``STRUCTGATE_BACKEND_OPTIONS``)
--------------------------------------------------------------------------
``auto_chain`` : list[str] | str
    Engine names (registry names or aliases) in order; a comma-separated string works too.
    Engines that are not installed are left out; naming an unknown engine is an error.
``auto_fallback_on`` : list[str] | str
    Error class names of :mod:`structgate.errors` that move to the next engine (default
    ``["UnsupportedFeatureError", "ConstraintKindError"]``; ``CompileLimitError`` is a common addition).

Every other option is passed to each engine unchanged.

The same object also serves a per-request engine choice (:meth:`AutoBackend.compile_with`): the
vLLM bridge wraps its engine in :meth:`AutoBackend.wrap` when a request names another engine, so a
batch may hold matchers of several engines; :meth:`fill_bitmask_batch` hands each engine its own.
A request that names ``structgate-auto`` itself gets the full chain (the options' ``auto_chain``,
default :data:`DEFAULT_CHAIN`), with fallback, not the wrapped engine alone.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, ClassVar, Mapping, Sequence

from .. import errors as _errors
from .._env import shown
from ..errors import ConstraintKindError, InvalidConstraintError, StructgateError, UnsupportedFeatureError
from ..vocab import Vocabulary
from .interface import (CONSTRAINT_KINDS, Backend, CompiledGrammar, Constraint, Matcher, has_cheap_validate,
                        warm_start_row)

__all__ = ["AutoBackend", "AutoCompiledGrammar", "DEFAULT_CHAIN", "DEFAULT_FALLBACK_ON"]

logger = logging.getLogger("structgate.auto")

#: the default engine order
DEFAULT_CHAIN: tuple[str, ...] = ("native", "structgate-llguidance", "structgate-xgrammar")
#: the default errors that move a constraint to the next engine
DEFAULT_FALLBACK_ON: tuple[str, ...] = ("UnsupportedFeatureError", "ConstraintKindError")

_OWN_OPTIONS = ("auto_chain", "auto_fallback_on")


def _names(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [x.strip() for x in value.split(",") if x.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
        items = [x.strip() for x in value]
    else:
        raise InvalidConstraintError(f"option {what} must be a list of names or a comma-separated string, "
                                     f"got {shown(value)}")
    if not items:
        raise InvalidConstraintError(f"option {what} is empty")
    return tuple(items)


class AutoCompiledGrammar(CompiledGrammar):
    """A grammar compiled by one engine of the chain.

    Attributes
    ----------
    served_by : str
        Registry name of the engine that compiled it (``"native"``, ``"structgate-llguidance"``, ...).
    inner : CompiledGrammar
        That engine's compiled grammar.
    fallbacks : tuple[tuple[str, str], ...]
        ``(engine, "ErrorClass: message")`` for each engine that refused the constraint first.
    """

    def __init__(self, inner: CompiledGrammar, served_by: str, owner: Backend,
                 fallbacks: tuple[tuple[str, str], ...] = ()) -> None:
        self.inner = inner
        self.served_by = served_by
        self.fallbacks = fallbacks
        self.vocab = inner.vocab
        self.constraint = inner.constraint
        self._owner = owner

    def warm_start(self) -> None:
        warm_start_row(self.inner)

    def matcher(self, **kw: Any) -> Matcher:
        """The serving engine's own matcher (so engine-specific fast paths still apply), tagged
        with its engine (``matcher.sg_engine``) for :meth:`AutoBackend.fill_bitmask_batch`."""
        m = self.inner.matcher(**kw)
        try:
            m.sg_engine = self._owner  # type: ignore[attr-defined]
            m.sg_served_by = self.served_by  # type: ignore[attr-defined]
        except AttributeError:  # a matcher with __slots__: batch fill then goes row by row
            pass
        return m

    @property
    def memory_size_bytes(self) -> int:
        return self.inner.memory_size_bytes

    def __repr__(self) -> str:
        return f"AutoCompiledGrammar(served_by={self.served_by!r}, inner={self.inner!r})"


class AutoBackend(Backend):
    """Compile with the first engine of a chain that does not refuse the constraint.

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields and engine extras (passed to
        every engine), plus ``auto_chain`` and ``auto_fallback_on`` (module docstring).

    Attributes
    ----------
    chain : tuple[str, ...]
        The installed engines, in order (registry names).
    fallback_on : tuple[type[StructgateError], ...]

    Raises
    ------
    InvalidConstraintError
        A malformed option, an unknown error class name, or no installed engine in the chain.
    BackendNotFoundError
        A chain entry is not a registered name.
    """

    name: ClassVar[str] = "structgate-auto"
    supported_kinds: ClassVar[frozenset[str]] = frozenset(CONSTRAINT_KINDS)
    #: options given to one engine only, by engine registry name, under the options given (a host's
    #: defaults for the engine that reads them: the vLLM plugin's ``outlines_compile_processes=1``
    #: for ``structgate-outlines-core``, :func:`structgate.plugin.bridge.engine_defaults`); the other
    #: engines never see them. Empty by default; set on the instance before its first compile
    engine_defaults: Mapping[str, Mapping[str, Any]] = {}

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        super().__init__(vocab, **options)
        self._engine_options = {k: v for k, v in options.items() if k not in _OWN_OPTIONS}
        self.chain, self._skipped, self.fallback_on = self.parse_options(self.options.extra)
        self._engines: dict[str, Backend] = {}
        self._lock = threading.Lock()
        #: False for an AutoBackend made by :meth:`wrap` (a chain of one engine: the server's)
        self._configured = True
        self._full: AutoBackend | None = None

    @classmethod
    def parse_options(cls, extra: dict) -> tuple[tuple[str, ...], list[tuple[str, str]],
                                                 tuple[type[StructgateError], ...]]:
        """``(chain, skipped, fallback_on)`` of the ``auto_chain`` / ``auto_fallback_on`` options in
        ``extra`` (defaults :data:`DEFAULT_CHAIN`, :data:`DEFAULT_FALLBACK_ON`): the installed
        engines in order, ``(engine, reason)`` for those left out as not installed, the error
        classes. Needs no vocabulary (the vLLM plugin checks ``STRUCTGATE_BACKEND_OPTIONS`` with it
        at startup).

        Raises
        ------
        InvalidConstraintError
            A malformed option, an unknown error class name, structgate-auto in its own chain, or
            no installed engine in the chain.
        BackendNotFoundError
            A chain entry is not a registered name.
        """
        from .registry import get_backend_spec

        wanted = _names(extra.get("auto_chain", DEFAULT_CHAIN), "auto_chain")
        chain: list[str] = []
        skipped: list[tuple[str, str]] = []
        for n in wanted:
            spec = get_backend_spec(n)  # BackendNotFoundError for a typo
            if spec.name == cls.name:
                raise InvalidConstraintError("option auto_chain must not contain structgate-auto itself")
            ok, reason = spec.availability()
            if ok and spec.name not in chain:
                chain.append(spec.name)
            elif not ok:
                skipped.append((spec.name, reason))
        if not chain:
            raise InvalidConstraintError(f"option auto_chain: none of {list(wanted)} is installed "
                                         f"({'; '.join(f'{n}: {r}' for n, r in skipped)})")
        fb = []
        for n in _names(extra.get("auto_fallback_on", DEFAULT_FALLBACK_ON), "auto_fallback_on"):
            err = getattr(_errors, n, None)
            if not (isinstance(err, type) and issubclass(err, StructgateError)):
                raise InvalidConstraintError(f"option auto_fallback_on: {n!r} is not an error class of "
                                             "structgate.errors")
            fb.append(err)
        return tuple(chain), skipped, tuple(fb)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """:meth:`Backend.check_options`: :meth:`parse_options`, then the ``check_options`` of each
        engine of the chain with the options each engine gets (all but ``auto_chain`` /
        ``auto_fallback_on``), since an engine is built with them at its first use.

        Raises
        ------
        InvalidConstraintError, BackendNotFoundError
            As :meth:`parse_options`, or as an engine's ``check_options`` (its message names the
            engine and the option).
        """
        from .registry import check_option_values

        chain, _, _ = cls.parse_options(options)
        engine_options = {k: v for k, v in options.items() if k not in _OWN_OPTIONS}
        for name in chain:
            check_option_values(name, engine_options)

    # -- engines -------------------------------------------------------------------------------
    @classmethod
    def wrap(cls, backend: Backend, *, engine_options: Mapping[str, Any] | None = None,
             engine_defaults: Mapping[str, Mapping[str, Any]] | None = None) -> "AutoBackend":
        """An AutoBackend whose chain is ``backend`` alone (the instance itself, same vocabulary,
        options and caches); :meth:`compile_with` adds other engines on demand, built with
        ``engine_options`` (default: ``backend``'s options) and each with its own
        ``engine_defaults`` (:attr:`engine_defaults`)."""
        self = cls.__new__(cls)
        Backend.__init__(self, backend.vocab)
        self.options = backend.options
        if engine_options is not None:
            self._engine_options = dict(engine_options)
        else:
            self._engine_options = {**{k: getattr(backend.options, k) for k in backend.options.__dataclass_fields__
                                       if k != "extra"}, **backend.options.extra}
        if engine_defaults:
            self.engine_defaults = {k: dict(v) for k, v in engine_defaults.items()}
        self.chain = (backend.name,)
        self._skipped = []
        self.fallback_on = tuple(getattr(_errors, n) for n in DEFAULT_FALLBACK_ON)
        self._engines = {backend.name: backend}
        self._lock = threading.Lock()
        self._configured = False
        self._full = None
        return self

    def _full_chain(self) -> "AutoBackend":
        """What the name ``structgate-auto`` means for this object: itself, or for a :meth:`wrap`
        (chain of one engine) an AutoBackend configured as ``get_backend("structgate-auto", vocab,
        **options)`` would be (``auto_chain`` / ``auto_fallback_on`` from the wrapped engine's
        options, else the defaults), built on first use. It shares this object's engines (the same
        instances and caches, the wrapped one included).

        Raises
        ------
        InvalidConstraintError, BackendNotFoundError
            A malformed ``auto_chain`` / ``auto_fallback_on`` option (as :class:`AutoBackend`).
        """
        if self._configured:
            return self
        with self._lock:
            if self._full is None:
                full = AutoBackend(self.vocab, **self._engine_options)
                full.engine_defaults = self.engine_defaults
                full._engines = self._engines  # one set of engines (guarded by one lock)
                full._lock = self._lock
                self._full = full
            return self._full

    def forget(self, constraint: Constraint) -> None:
        """:meth:`Backend.forget` in every engine of the chain created so far."""
        with self._lock:
            engines = list(self._engines.values())
        for e in engines:
            e.forget(constraint)

    def engine_cache_stats(self) -> dict[str, dict[str, int]]:
        """The process-wide caches of the engines built so far, each name prefixed with its
        engine's (``native/shared_walks``)."""
        with self._lock:
            engines = dict(self._engines)
        return {f"{n}/{k}": v for n, be in engines.items() for k, v in be.engine_cache_stats().items()}

    def engine(self, name: str) -> Backend:
        """The engine ``name`` (registry name or alias) for this vocabulary, built on first use.

        Raises
        ------
        BackendNotFoundError, BackendUnavailableError
        """
        from .registry import get_backend, get_backend_spec

        key = get_backend_spec(name).name
        if key == self.name:
            return self._full_chain()
        be = self._engines.get(key)
        if be is None:
            with self._lock:
                be = self._engines.get(key)
                if be is None:
                    own = self.engine_defaults.get(key)
                    be = get_backend(key, self.vocab, **({**own, **self._engine_options} if own
                                                         else self._engine_options))
                    self._engines[key] = be
        return be

    # -- compile ---------------------------------------------------------------------------------
    def _compile(self, constraint: Constraint) -> AutoCompiledGrammar:
        refused: list[tuple[str, StructgateError]] = []
        try:
            for name in self.chain:
                be = self.engine(name)
                try:
                    # the start's mask inside the try: a limit met within the first token's lookahead
                    # moves the constraint on, as one met by the compile itself does
                    inner = warm_start_row(be.compile(constraint))
                except self.fallback_on as e:
                    refused.append((name, e))
                    continue
                fallbacks = tuple((n, f"{type(e).__name__}: {e}") for n, e in refused)
                if refused:
                    logger.info("structgate-auto: %s served by %s (%s)", constraint.kind, name,
                                "; ".join(f"{n}: {m}" for n, m in fallbacks))
                else:
                    logger.debug("structgate-auto: %s served by %s", constraint.kind, name)
                return AutoCompiledGrammar(inner, name, be, fallbacks)
            raise self._refused(constraint, refused)
        finally:
            # the refusals' tracebacks hold this frame: no reference cycle left (a fallback compile
            # succeeds, and under STRUCTGATE_GC_FREEZE_AFTER_COMPILE a cycle would be frozen for good)
            refused = None

    def _refused(self, constraint: Constraint, refused: list[tuple[str, StructgateError]]) -> StructgateError:
        if all(isinstance(e, ConstraintKindError) for _, e in refused):
            return ConstraintKindError(self.name, constraint.kind,
                                       set().union(*(e.supported for _, e in refused)))  # type: ignore[attr-defined]
        detail = "; ".join(f"{n}: {type(e).__name__}: {e}" for n, e in refused)
        # a wrap (one server engine, :meth:`wrap`) is no chain the user configured: name the engine
        who = (f"the {self.chain[0]} engine cannot" if len(self.chain) == 1 and not self._configured
               else f"no engine of the chain ({', '.join(self.chain)}) can")
        err = UnsupportedFeatureError(f"{constraint.kind} constraint {who} enforce", detail)
        err.__cause__ = refused[0][1]
        return err

    def compile_with(self, name: str, constraint: Constraint) -> AutoCompiledGrammar:
        """Compile with engine ``name`` only (a per-request choice; no fallback), or, for
        ``structgate-auto`` (alias ``sg-auto``), with the full chain and its fallback
        (:meth:`_full_chain`: also on a :meth:`wrap`, whose own chain is the wrapped engine alone).

        Raises
        ------
        BackendNotFoundError, BackendUnavailableError
            No such engine / not installed.
        GrammarSyntaxError, UnsupportedFeatureError, CompileLimitError, ConstraintKindError
            From that engine.
        """
        be = self.engine(name)
        if isinstance(be, AutoBackend):  # structgate-auto: the configured chain
            return be.compile(constraint)
        return AutoCompiledGrammar(be.compile(constraint), be.name, be)

    def validate(self, constraint: Constraint) -> None:
        """Raise what :meth:`compile` would raise, using each engine's cheap ``validate``; an engine
        without one (its ``validate`` would compile) is checked by constraint kind only and its
        compile decides the rest."""
        if not isinstance(constraint, Constraint):
            raise TypeError(f"validate() takes a Constraint, got {type(constraint).__name__}")
        refused: list[tuple[str, StructgateError]] = []
        try:
            for name in self.chain:
                eng = self.engine(name)
                try:
                    if has_cheap_validate(eng):
                        eng.validate(constraint)
                    else:  # its validate would compile: kind only, its compile decides the rest
                        eng.check_kind(constraint)
                    return
                except self.fallback_on as e:
                    refused.append((name, e))
            raise self._refused(constraint, refused)
        finally:
            refused = None  # (the refusals' tracebacks hold this frame: no reference cycle left)

    def served_by(self, constraint: Constraint) -> str:
        """The engine :meth:`compile` picks for ``constraint`` (compiles it)."""
        return self.compile(constraint).served_by

    # -- batched fill ----------------------------------------------------------------------------
    def fill_bitmask_batch(self, pairs: Sequence[tuple[Matcher, int]], bitmask: Any) -> None:
        """Fill several rows: each engine's matchers through that engine's ``fill_bitmask_batch``
        when it has one, the rest row by row.

        Parameters
        ----------
        pairs : sequence of (Matcher, int)
            Matchers from this backend's grammars and the bitmask row each fills.
        bitmask : numpy.ndarray | torch.Tensor
            int32 ``(batch, ceil(vocab_size/32))``, CPU.

        Raises
        ------
        BitmaskError
            Wrong dtype / shape / row.
        """
        groups: dict[int, tuple[Any, list]] = {}
        single = []
        for m, row in pairs:
            eng = getattr(m, "sg_engine", None)
            if eng is not None and hasattr(eng, "fill_bitmask_batch"):
                groups.setdefault(id(eng), (eng, []))[1].append((m, row))
            else:
                single.append((m, row))
        for eng, items in groups.values():
            eng.fill_bitmask_batch(items, bitmask)
        for m, row in single:
            m.fill_bitmask(bitmask, row)
