"""``NativeBackend``: structgate's own engine behind the :class:`~structgate.backends.interface.Backend`
interface.

Pipeline: constraint → regex text (JSON Schema through :func:`structgate.native.json_schema.schema_to_regex`,
choices by escaping and alternating) → byte DFA (:func:`structgate.native.regex.compile_regex`) →
:class:`NativeCompiledGrammar` holding the DFA and its lazily filled
:class:`~structgate.native.token_index.TokenIndex`.

Supported kinds: ``regex``, ``json_schema``, ``choice``, ``json_object`` (any JSON object, through
the schema compiler's bounded-depth approximation: nesting deeper than
``options.max_recursion_depth`` is excluded).

>>> from structgate import load_vocabulary
>>> from structgate.backends.interface import Constraint
>>> b = NativeBackend(load_vocabulary("llama3"))                        # doctest: +SKIP
>>> g = b.compile(Constraint.regex(r"[0-9]{1,3}"))                     # doctest: +SKIP
>>> m = g.matcher(); m.advance(load_vocabulary("llama3").encode("42"))  # doctest: +SKIP
True
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, ClassVar

from ..backends.interface import Backend, CompiledGrammar, Constraint, CompileOptions
from ..errors import CompileLimitError
from ..vocab import Vocabulary
from .automaton import DFA
from .matcher import NativeMatcher
from .token_index import TokenIndex

__all__ = ["NativeBackend", "NativeCompiledGrammar", "choice_to_regex", "escape_regex_literal"]

#: default number of compiled grammars kept per backend (``compile_cache_size`` option)
DEFAULT_COMPILE_CACHE_SIZE = 64

_SAFE_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ ")


def escape_regex_literal(text: str) -> str:
    """A regex matching exactly ``text``: ASCII letters, digits, ``_`` and space stay as they are,
    every other ASCII character becomes ``\\xHH``, non-ASCII characters stay literal (the native
    regex dialect reads them as one code point)."""
    out = []
    for ch in text:
        if ch in _SAFE_ASCII or ord(ch) >= 0x80:
            out.append(ch)
        else:
            out.append(f"\\x{ord(ch):02x}")
    return "".join(out)


def choice_to_regex(choices) -> str:
    """Alternation of the exact choice strings: ``(?:c1|c2|...)``."""
    return "(?:" + "|".join(escape_regex_literal(c) for c in choices) + ")"


class NativeCompiledGrammar(CompiledGrammar):
    """A compiled native grammar: the DFA, its regex text and its TokenIndex. Immutable and safe to
    share between threads (the TokenIndex fills its row cache under a lock).

    Attributes
    ----------
    dfa : DFA
    regex : str
        The regex the DFA was built from.
    token_index : TokenIndex
    compile_s : float
        Wall time of the compile, seconds.
    """

    def __init__(self, constraint: Constraint, vocab: Vocabulary, regex: str, dfa: DFA,
                 token_index: TokenIndex, options: CompileOptions, compile_s: float) -> None:
        self.constraint = constraint
        self.vocab = vocab
        self.regex = regex
        self.dfa = dfa
        self.token_index = token_index
        self.options = options
        self.compile_s = compile_s

    def matcher(self, *, max_rollback_tokens: int | None = None) -> NativeMatcher:
        """A fresh matcher in the start state (``max_rollback_tokens`` defaults to the backend's
        ``options.max_rollback_tokens``; ``-1`` = unlimited)."""
        if max_rollback_tokens is None:
            max_rollback_tokens = self.options.max_rollback_tokens
        return NativeMatcher(self.token_index, max_rollback_tokens=max_rollback_tokens)

    @property
    def memory_size_bytes(self) -> int:
        return int(self.dfa.memory_size_bytes + self.token_index.memory_size_bytes)

    def __repr__(self) -> str:
        return (f"NativeCompiledGrammar(kind={self.constraint.kind!r}, states={self.dfa.n_states}, "
                f"classes={self.dfa.n_classes}, compile_ms={self.compile_s * 1e3:.1f})")


class NativeBackend(Backend):
    """structgate's byte-level DFA + TokenIndex engine.

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields; also
        ``compile_cache_size`` (int, compiled grammars kept, LRU; 0 disables the cache).

    Notes
    -----
    ``options.max_dfa_states`` bounds determinisation (:class:`CompileLimitError`);
    ``options.compile_timeout_s`` bounds the wall time of one compile (the time left is the regex
    compiler's determinisation timeout, and the total is checked between stages); both raise
    :class:`CompileLimitError`. A grammar whose start state allows no token raises
    :class:`IncompatibleVocabularyError`. Compiled grammars are cached (LRU) by
    :meth:`Constraint.cache_key`.
    """

    name: ClassVar[str] = "native"
    supported_kinds: ClassVar[frozenset[str]] = frozenset({"regex", "json_schema", "choice", "json_object"})

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        super().__init__(vocab, **options)
        self.cache_size = int(self.options.extra.get("compile_cache_size", DEFAULT_COMPILE_CACHE_SIZE))
        self._cache: "OrderedDict[str, NativeCompiledGrammar]" = OrderedDict()
        self._lock = threading.Lock()

    # -- stages -----------------------------------------------------------------------------------
    def to_regex(self, constraint: Constraint) -> str:
        """The regex text a constraint compiles through.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, ConstraintKindError
        """
        kind = constraint.kind
        if kind == "regex":
            if not isinstance(constraint.value, str):
                from ..errors import GrammarSyntaxError

                raise GrammarSyntaxError("a regex constraint needs a string", repr(constraint.value), 0)
            return constraint.value
        if kind == "choice":
            return choice_to_regex(constraint.value)
        if kind == "json_schema":
            from .json_schema import schema_to_regex

            return schema_to_regex(constraint.value, self.options)
        if kind == "json_object":
            from .json_schema import json_object_regex

            return json_object_regex(self.options)
        from ..errors import ConstraintKindError

        raise ConstraintKindError(self.name, kind, self.supported_kinds)

    def to_dfa(self, regex: str, *, deadline: float | None = None) -> DFA:
        """Determinise ``regex`` under ``options.max_dfa_states`` and the time left before
        ``deadline`` (a ``time.monotonic()`` value; None = no limit).

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, CompileLimitError
        """
        from .regex import RegexOptions, compile_regex

        timeout_s = 0.0
        if deadline is not None:
            timeout_s = deadline - time.monotonic()
            if timeout_s <= 0:
                raise CompileLimitError("compile_timeout_s", self.options.compile_timeout_s,
                                        self.options.compile_timeout_s)
        opts = RegexOptions(max_states=self.options.max_dfa_states, timeout_s=timeout_s)
        return compile_regex(regex, options=opts)

    def _check_deadline(self, t0: float) -> None:
        lim = self.options.compile_timeout_s
        if lim and lim > 0:
            el = time.monotonic() - t0
            if el > lim:
                raise CompileLimitError("compile_timeout_s", round(el, 3), lim)

    # -- Backend API --------------------------------------------------------------------------------
    def _compile(self, constraint: Constraint) -> NativeCompiledGrammar:
        key = constraint.cache_key()
        if self.cache_size > 0:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    return hit
        t0 = time.monotonic()
        lim = self.options.compile_timeout_s
        deadline = t0 + lim if lim and lim > 0 else None
        try:
            regex = self.to_regex(constraint)
            self._check_deadline(t0)
            dfa = self.to_dfa(regex, deadline=deadline)
        except RecursionError:
            raise _nesting_limit() from None
        self._check_deadline(t0)
        if not dfa.accepting.any():
            from ..errors import InvalidConstraintError

            raise InvalidConstraintError(
                f"the {constraint.kind} constraint matches nothing (unsatisfiable, e.g. an empty enum or "
                "minItems > maxItems): no output could ever be complete")
        index = TokenIndex(dfa, self.vocab)
        index.check_start()
        self._check_deadline(t0)
        g = NativeCompiledGrammar(constraint, self.vocab, regex, dfa, index, self.options,
                                  time.monotonic() - t0)
        if self.cache_size > 0:
            with self._lock:
                self._cache[key] = g
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return g

    def validate(self, constraint: Constraint) -> None:
        """Raise what :meth:`compile` would raise for the constraint itself, cheaply: constraint
        kind, schema translation (:class:`UnsupportedFeatureError`, :class:`GrammarSyntaxError`),
        regex parse, and the NFA size estimate (``CompileLimitError("max_nfa_states")``).
        Determinisation and the TokenIndex are skipped, so ``max_dfa_states`` /
        ``compile_timeout_s`` / :class:`IncompatibleVocabularyError` surface only at compile."""
        if not isinstance(constraint, Constraint):
            raise TypeError(f"validate() takes a Constraint, got {type(constraint).__name__}")
        if constraint.kind not in self.supported_kinds:
            from ..errors import ConstraintKindError

            raise ConstraintKindError(self.name, constraint.kind, self.supported_kinds)
        with self._lock:
            if constraint.cache_key() in self._cache:
                return
        from .regex import RegexOptions, ast_size, parse_regex

        try:
            node = parse_regex(self.to_regex(constraint))
        except RecursionError:
            raise _nesting_limit() from None
        lim = RegexOptions().max_nfa_states
        est = ast_size(node)
        if est > lim:
            raise CompileLimitError("max_nfa_states", est, lim,
                                    "the pattern (after expanding counted repeats) is too large")

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    @property
    def cache_len(self) -> int:
        return len(self._cache)


def _nesting_limit() -> CompileLimitError:
    """The typed error for a constraint nested deeper than the compilers' recursion allows
    (deeply nested schemas, numbers with hundreds of digits): never an untyped RecursionError."""
    import sys

    return CompileLimitError("nesting_depth", f"> {sys.getrecursionlimit()} frames", sys.getrecursionlimit(),
                             "the constraint is nested too deeply (schema nesting, anyOf chains, or number "
                             "bounds with hundreds of digits); simplify it")
