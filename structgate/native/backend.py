"""``NativeBackend``: structgate's own engine behind the :class:`~structgate.backends.interface.Backend`
interface.

Pipeline (native v2): constraint → :class:`~structgate.native.ir.Grammar` (rules with references:
a regex through :func:`~structgate.native.regex.parse_regex`, choices as literal alternatives, JSON
Schema through :func:`structgate.native.json_schema.schema_to_grammar`, GBNF/Lark grammars and
structural tags through :mod:`structgate.native.frontends`) → one Thompson NFA with call/return
states (:func:`~structgate.native.pushdown.build_grammar_nfa`) → a lazily determinised pushdown
automaton and its token masks (:class:`~structgate.native.pushdown.PushdownIndex`). Nothing is
determinised up front; recursion is exact up to ``options.max_recursion_depth`` stack frames.

A regex with anchors in the middle (``a^b``, ``(^a|b)``) is the one case compiled the v1 way, an
eager minimal DFA with its :class:`~structgate.native.token_index.TokenIndex` (anchors are zero-width
assertions the pushdown NFA does not have).

Supported kinds: ``regex``, ``json_schema``, ``choice``, ``json_object``, and ``grammar`` /
``structural_tag`` when their front ends are installed (they are part of the package).

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
from dataclasses import replace
from typing import Any, ClassVar, Mapping

from ..backends.interface import Backend, CompiledGrammar, Constraint, CompileOptions, _nesting_limit
from .._env import MAX_OPTION_INT, option_int
from ..errors import CompileLimitError, InvalidConstraintError
from ..vocab import Vocabulary
from ..worker_pool import WorkerPool, worker_count
from .automaton import DFA, START
from .ir import Grammar
from .matcher import NativeMatcher
from .token_index import TokenIndex

__all__ = ["NativeBackend", "NativeCompiledGrammar", "choice_to_regex", "escape_regex_literal"]

#: default number of compiled grammars kept per backend (``compile_cache_size`` option)
DEFAULT_COMPILE_CACHE_SIZE = 64

def _has_frontend(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(f"structgate.native.frontends.{name}") is not None
    except ImportError:
        return False


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


def _check_timeout(elapsed_s: float, limit_s: float | None) -> None:
    """``CompileLimitError("compile_timeout_s")`` when ``elapsed_s`` (seconds) is over ``limit_s``
    (``None`` or ``<= 0``: no limit)."""
    if limit_s and limit_s > 0 and elapsed_s > limit_s:
        raise CompileLimitError("compile_timeout_s", round(elapsed_s, 3), limit_s)


class NativeCompiledGrammar(CompiledGrammar):
    """A compiled native grammar: its IR, NFA and lazily filled token index. Immutable from the
    outside and safe to share between threads (the index fills its caches under a lock).

    Attributes
    ----------
    grammar : Grammar | None
        The IR (None for the eager-DFA path).
    token_index : PushdownIndex | TokenIndex
        Masks and transitions (integer states: 0 dead, 1 start, -1 terminated).
    dfa : DFA | None
        Only for the eager path (a regex with inner anchors).
    regex : str | None
        The regex text for ``regex`` constraints.
    compile_s : float
        Wall time of the compile, seconds.
    """

    def __init__(self, constraint: Constraint, vocab: Vocabulary, token_index, options: CompileOptions,
                 compile_s: float, *, grammar=None, dfa: DFA | None = None, regex: str | None = None) -> None:
        self.constraint = constraint
        self.vocab = vocab
        self.grammar = grammar
        self.dfa = dfa
        self.regex = regex
        self.token_index = token_index
        self.options = options
        self.compile_s = compile_s

    def matcher(self, *, max_rollback_tokens: int | None = None) -> NativeMatcher:
        """A fresh matcher in the start state (``max_rollback_tokens`` defaults to the backend's
        ``options.max_rollback_tokens``; ``-1`` = unlimited)."""
        if max_rollback_tokens is None:
            max_rollback_tokens = self.options.max_rollback_tokens
        return NativeMatcher(self.token_index, max_rollback_tokens=max_rollback_tokens)

    def warm_start(self) -> None:
        """Compute and cache the start state's mask now (:meth:`CompiledGrammar.warm_start`): the
        compile leaves it to the first fill when the start's table row already proves a token
        allowed (``PushdownIndex.check_start``). Raises as the compile would: a limit met within
        the first token's lookahead (``CompileLimitError``), ``compile_timeout_s`` when the compile
        and this take longer together (preemptive for the grammar engine's lazy work, which stops
        at the compile's deadline: ``PushdownIndex.bounded``; checked after for the eager DFA's
        index), ``nesting_depth`` for a Python recursion overflow."""
        t0 = time.monotonic()
        lim = self.options.compile_timeout_s
        bounded = getattr(self.token_index, "bounded", None)  # (the eager DFA's index: no lazy work)
        try:
            if bounded is None:
                self.token_index.n_allowed(START)
            else:
                # preemptive: the lazy work stops at the compile's deadline (its limit's error)
                deadline = t0 - self.compile_s + lim if lim and lim > 0 else None
                with bounded(deadline, "compile_timeout_s", lim, t0 - self.compile_s):
                    self.token_index.n_allowed(START)
        except RecursionError:
            raise _nesting_limit() from None
        _check_timeout(self.compile_s + (time.monotonic() - t0), lim)

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held by this grammar: its index's tables and cached rows (which include the eager
        path's transition tables; the DFA's own copy is not counted twice). The per-vocabulary
        tries shared by every grammar are not included."""
        return int(self.token_index.memory_size_bytes)

    def __repr__(self) -> str:
        ti = self.token_index
        return (f"NativeCompiledGrammar(kind={self.constraint.kind!r}, states={ti.n_states}, "
                f"compile_ms={self.compile_s * 1e3:.1f})")


def _share_json_string(grammar):
    """Match every unconstrained JSON string through one called rule ``__json_string`` (its masks,
    which allow most of the vocabulary, are then computed once per grammar instead of once per
    string position; only tokens that close the string mid-token are checked against the stack)."""
    from .ir import share_subtrees

    targets = {n: t for n, t in (("__json_string", _json_string_ast()), ("__json_key_tail", _key_tail_ast()))
               if n not in grammar.rules}
    return share_subtrees(grammar, targets) if targets else grammar


def _key_tail_ast():
    """The end of an object key that is not one of the listed names (``KEY_TAIL``: any canonical
    characters, then the closing quote): shared like the JSON string, so the free keys of
    ``additionalProperties`` are walked once per grammar (the JSON compiler's own parsed rule)."""
    from .json_schema._grammar import KEY_TAIL_RULE, shared_rule_ir

    return shared_rule_ir(KEY_TAIL_RULE)


_warmed: "weakref.WeakSet" = None  # vocabularies whose JSON-string trie is built


def _warm_json_string_trie(vocab: Vocabulary) -> None:
    """Build the trie of the JSON string rule's byte partition for ``vocab`` (once per process and
    vocabulary; every JSON schema's strings walk it)."""
    global _warmed
    import weakref

    if _warmed is None:
        _warmed = weakref.WeakSet()
    if vocab in _warmed:
        return
    from .ir import Grammar, Ref
    from .pushdown import build_grammar_nfa, class_trie

    g = Grammar({"root": Ref("__json_string"), "__json_string": _json_string_ast()}, "root",
                keep_calls={"__json_string"})
    gn = build_grammar_nfa(g.check())
    for r, name in enumerate(gn.rule_names):
        if name == "__json_string":
            class_trie(vocab, gn.rule_classes[r], gn.byte_classes)
    _warmed.add(vocab)


def _json_string_ast():
    """The JSON string rule's body (the JSON compiler's own parsed ``__json_string``)."""
    from .json_schema._grammar import STRING_RULE, shared_rule_ir

    return shared_rule_ir(STRING_RULE)


class NativeBackend(Backend):
    """structgate's pushdown engine (grammar IR → NFA with a stack → lazy token masks).

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields; also
        ``compile_cache_size`` (int, compiled grammars kept, LRU; 0 disables the cache),
        ``inline_max_size`` (int, size up to which a shared non-recursive rule is inlined),
        ``row_budget_bytes`` (int, cached mask rows kept per grammar, bytes; at least 16 rows are
        kept whatever the budget; -1 unlimited),
        ``compile_processes`` (int, default ``$STRUCTGATE_COMPILE_PROCESSES`` or 0: that many worker
        processes build grammars and their NFAs, so a long compile neither holds this process's GIL
        nor outlives ``compile_timeout_s``; see :class:`CompilePool`).

    Notes
    -----
    ``options.max_recursion_depth`` bounds the stack (pushes beyond it are not taken);
    ``options.max_dfa_states`` bounds the configurations of one grammar
    (:class:`CompileLimitError`); ``options.compile_timeout_s`` bounds one compile. A grammar whose
    start allows no token raises :class:`IncompatibleVocabularyError`. Compiled grammars are cached
    (LRU) by :meth:`Constraint.cache_key`.
    """

    name: ClassVar[str] = "native"
    supported_kinds: ClassVar[frozenset[str]] = frozenset(
        {"regex", "json_schema", "choice", "json_object"}
        | ({"grammar"} if _has_frontend("gbnf") else set())
        | ({"structural_tag"} if _has_frontend("structural_tag") else set()))

    #: extras that must be integers (limits and sizes); checked when the backend is made
    INT_EXTRAS = ("compile_cache_size", "inline_max_size", "compile_processes", "row_budget_bytes", "max_regex_size", "regex_unroll_depth",
                  "rule_inline_max_chars", "shared_inline_max_chars", "automaton_inline_max_chars",
                  "max_automaton_rules", "max_multiple_of", "eager_residue_max", "max_enumerated_multiples",
                  "max_product_states", "max_pattern_regions")

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        super().__init__(vocab, **options)
        # the integer extras as ints from here on (the compilers read them with int())
        self.options = replace(self.options, extra={**self.options.extra, **self.parse_int_extras(self.options.extra)})
        (self.cache_size, self.inline_max_size, self.row_budget_bytes,
         self.compile_processes) = self.parse_options(self.options.extra)
        if self.compile_processes > 0:
            CompilePool.get(self.compile_processes).warm()  # workers start now, not at the first compile
        self._cache: "OrderedDict[str, NativeCompiledGrammar]" = OrderedDict()
        self._lock = threading.Lock()
        # per-vocabulary preprocessing, once per process (as XGrammar's TokenizerInfo): the token
        # trie and its quotient by the standard byte classes every grammar walks
        from .pushdown import STANDARD_BYTE_CLASSES, class_trie

        from .pushdown import _flat_tokens

        class_trie(vocab, STANDARD_BYTE_CLASSES)._preorder()
        _flat_tokens(vocab)
        _warm_json_string_trie(vocab)
        # Python's \d \w \s code-point sets for patterns (54 ms), not in the first request using one
        from .json_schema._pattern import _py_unicode_sets

        _py_unicode_sets()
        # the JSON Schema compiler checks enum/const values with jsonschema: import it here (about
        # 0.3 s, its attrs classes) rather than inside the first request that needs it
        import jsonschema  # noqa: F401

    @classmethod
    def parse_int_extras(cls, extra: Mapping[str, Any]) -> dict[str, int]:
        """The :attr:`INT_EXTRAS` given in ``extra``, each as an ``int``: an integer, a finite
        integral float (JSON's ``1e3``) or an ASCII decimal integer string
        (:func:`structgate._env.option_int`; ``"٣"``, ``"1_0"``, ``"3.0"`` are refused), from 0 to
        :data:`~structgate._env.MAX_OPTION_INT` (``row_budget_bytes``: -1, unlimited, to 2**62;
        ``compile_processes`` is left to :meth:`parse_options`, which reads its variable too).

        Raises
        ------
        InvalidConstraintError
            A value that is none of these, or out of range; names the option.
        """
        out: dict[str, int] = {}
        for k in cls.INT_EXTRAS:
            if k == "compile_processes":  # parse_options reads it (worker_count), with its variable
                continue
            lo, hi = (-1, 1 << 62) if k == "row_budget_bytes" else (0, MAX_OPTION_INT)
            n = option_int(extra, k, engine="native", minimum=lo, maximum=hi)
            if n is not None:
                out[k] = n
        return out

    @classmethod
    def parse_options(cls, extra: Mapping[str, Any]) -> tuple[int, int, int, int]:
        """``(compile_cache_size, inline_max_size, row_budget_bytes, compile_processes)`` of the
        extras ``extra`` (defaults filled in; ``compile_processes`` from
        ``$STRUCTGATE_COMPILE_PROCESSES`` when not given), after checking that every
        :attr:`INT_EXTRAS` given is an integer. Needs no vocabulary: the constructor and
        :meth:`check_options` (the vLLM plugin's startup check) both use it.

        Raises
        ------
        InvalidConstraintError
            An :attr:`INT_EXTRAS` value that is not an integer, ``row_budget_bytes`` below -1, or
            ``compile_processes`` (or the variable) not an integer from 0 to 32; names the option or
            the variable.
        """
        extra = {**extra, **cls.parse_int_extras(extra)}
        cache_size = extra.get("compile_cache_size", DEFAULT_COMPILE_CACHE_SIZE)
        inline_max_size = extra.get("inline_max_size", 4096)
        row_budget_bytes = extra.get("row_budget_bytes", 256 << 20)
        compile_processes = worker_count(extra.get("compile_processes"), engine="native", option="compile_processes",
                                         env=ENV_COMPILE_PROCESSES, in_process="compile in this process",
                                         maximum=MAX_COMPILE_PROCESSES)
        return cache_size, inline_max_size, row_budget_bytes, compile_processes

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """:meth:`Backend.check_options`: :meth:`parse_options` (the constructor's checks), and the
        ``formats`` policy every JSON Schema compile checks
        (:func:`~structgate.native.json_schema.compiler.format_policy`).

        Raises
        ------
        InvalidConstraintError
            As :meth:`parse_options`.
        UnsupportedFeatureError
            ``formats`` is not ``"default"``, ``"strict"`` or ``"lenient"``.
        InvalidConstraintError
            ``$STRUCTGATE_SHARED_WALKS_BYTES`` is not an integer >= 0.
        """
        from .._env import shared_walks_bytes
        from .json_schema.compiler import format_policy

        cls.parse_options(options)
        format_policy(options.get("formats", "default"))
        try:  # read when the engine's pushdown module is first imported (lazily, at a first compile)
            shared_walks_bytes()
        except ValueError as e:
            raise InvalidConstraintError(str(e)) from None

    # -- stages -----------------------------------------------------------------------------------
    def to_grammar(self, constraint: Constraint):
        """The :class:`~structgate.native.ir.Grammar` of a constraint (checked).

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, InvalidConstraintError, ConstraintKindError
        """
        from .ir import Grammar, alt, lit

        kind = constraint.kind
        if kind == "regex":
            from .regex import parse_regex
            from .regex.nfa import _strip_edge_anchors

            root = _strip_edge_anchors(parse_regex(constraint.value))
            return Grammar({"root": root}, "root", source=constraint.value).check()
        if kind == "choice":
            return Grammar({"root": alt(*(lit(c) for c in constraint.value))}, "root").check()
        if kind == "json_schema":
            from . import json_schema as js

            if hasattr(js, "schema_to_grammar"):
                # the compiler calls the shared string and key-tail rules itself
                return js.schema_to_grammar(constraint.value, self.options).check()
            return _share_json_string(self._regex_grammar(js.schema_to_regex(constraint.value, self._v1_options())))
        if kind == "json_object":
            from . import json_schema as js

            if hasattr(js, "json_object_grammar"):
                return js.json_object_grammar(self.options).check()
            return _share_json_string(self._regex_grammar(js.json_object_regex(self._v1_options())))
        if kind == "grammar" and "grammar" in self.supported_kinds:
            from .frontends import parse_grammar

            return parse_grammar(constraint.value, constraint.grammar_format).check()
        if kind == "structural_tag" and "structural_tag" in self.supported_kinds:
            from .frontends.structural_tag import structural_tag_to_grammar

            return structural_tag_to_grammar(constraint.value, self.options).check()
        from ..errors import ConstraintKindError

        raise ConstraintKindError(self.name, kind, self.supported_kinds)

    def _v1_options(self) -> CompileOptions:
        # the flat-regex JSON compiler unrolls recursion to this depth (used only without schema_to_grammar)
        return self.options.updated(max_recursion_depth=min(self.options.max_recursion_depth, 3))

    @staticmethod
    def _regex_grammar(regex: str):
        from .ir import Grammar
        from .regex import parse_regex
        from .regex.nfa import _strip_edge_anchors

        return Grammar({"root": _strip_edge_anchors(parse_regex(regex))}, "root").check()

    def to_dfa(self, regex: str, *, deadline: float | None = None) -> DFA:
        """Eager minimal DFA of ``regex`` (the v1 path, used for regexes with inner anchors).

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
        _check_timeout(time.monotonic() - t0, self.options.compile_timeout_s)

    # -- Backend API --------------------------------------------------------------------------------
    def _compile(self, constraint: Constraint) -> NativeCompiledGrammar:
        key = constraint.cache_key()
        if self.cache_size > 0:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    return hit
        from .pushdown import no_gc

        with no_gc():
            return self._compile_uncached(constraint, key)

    def _compile_uncached(self, constraint: Constraint, key: str) -> NativeCompiledGrammar:
        t0 = time.monotonic()
        lim = self.options.compile_timeout_s
        deadline = t0 + lim if lim and lim > 0 else None
        try:
            gnfa = grammar = None
            if self.compile_processes > 0:
                # grammar IR and NFA in a worker process (this process's GIL stays free); the
                # eager-DFA case (anchors inside a regex) comes back as None and is built here
                gnfa, waited = CompilePool.get(self.compile_processes).build(
                    constraint, self.options, self.inline_max_size, self.supported_kinds, deadline)
                t0 += waited  # a worker's start is not charged to the compile
                deadline = None if deadline is None else deadline + waited
                if isinstance(gnfa, Grammar):  # rules generated on demand: the NFA is built here
                    from .pushdown import build_grammar_nfa

                    grammar, gnfa = gnfa, build_grammar_nfa(gnfa, inline_max_size=self.inline_max_size, lazy=True)
            if gnfa is None:
                # called rules are built when first reached (the pool's workers ship whole NFAs)
                grammar, gnfa = _grammar_and_nfa(self, constraint, self.inline_max_size,
                                                 lambda: self._check_deadline(t0), lazy=True)
                if gnfa is None:
                    # zero-width assertions inside the pattern: the eager DFA implements them
                    g = self._compile_eager(constraint, grammar, deadline, t0)
                    return self._remember(key, g)
            from .pushdown import PushdownIndex

            self._check_deadline(t0)
            index = PushdownIndex(gnfa, self.vocab, max_depth=self.options.max_recursion_depth,
                                  max_states=max(self.options.max_dfa_states, 2),
                                  row_budget_bytes=self.row_budget_bytes,
                                  step_timeout_s=self.options.step_timeout_s)
            with index.bounded(deadline, "compile_timeout_s", lim, t0):
                index.check_start()
        except RecursionError:
            raise _nesting_limit() from None
        self._check_deadline(t0)
        g = NativeCompiledGrammar(constraint, self.vocab, index, self.options, time.monotonic() - t0,
                                  grammar=grammar, regex=constraint.value if constraint.kind == "regex" else None)
        return self._remember(key, g)

    def _compile_eager(self, constraint: Constraint, grammar, deadline, t0) -> NativeCompiledGrammar:
        from .regex import RegexOptions, compile_ast

        timeout_s = 0.0
        if deadline is not None:
            timeout_s = max(deadline - time.monotonic(), 1e-6)
        dfa = compile_ast(grammar.rules[grammar.root],
                          options=RegexOptions(max_states=self.options.max_dfa_states, timeout_s=timeout_s),
                          pattern=constraint.value if isinstance(constraint.value, str) else "")
        self._check_deadline(t0)
        if not dfa.accepting.any():
            raise InvalidConstraintError(f"the {constraint.kind} constraint matches nothing: no output could "
                                         "ever be complete")
        index = TokenIndex(dfa, self.vocab)
        index.check_start()
        return NativeCompiledGrammar(constraint, self.vocab, index, self.options, time.monotonic() - t0,
                                     grammar=grammar, dfa=dfa,
                                     regex=constraint.value if constraint.kind == "regex" else None)

    def _remember(self, key: str, g: NativeCompiledGrammar) -> NativeCompiledGrammar:
        if self.cache_size > 0:
            with self._lock:
                self._cache[key] = g
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return g

    def engine_cache_stats(self) -> dict[str, dict[str, int]]:
        """Process-wide caches every native grammar shares (:meth:`Backend.engine_cache_stats`):
        ``shared_walks`` (mask walks inside call-free rules, under
        ``$STRUCTGATE_SHARED_WALKS_BYTES``), ``class_tries`` (the vocabulary's class-quotiented
        tries, an LRU of 16), ``regex_nodes`` (the hash-consed expression nodes of the regex
        parser, cleared whole at 2^18 entries; their bytes are not counted) and
        ``numeric_automata`` (the JSON Schema compiler's minimal automata of numeric keywords, by
        their parameters, cleared whole past 200,000 states; bytes: 8 per transition cell)."""
        from .json_schema._type_number import _SHARED_DFAS
        from .pushdown import engine_cache_stats
        from .regex.parser import _INTERN

        out = engine_cache_stats()
        out["regex_nodes"] = {"entries": len(_INTERN)}
        dfas = [d for d in list(_SHARED_DFAS.values()) if d is not None]
        out["numeric_automata"] = {"entries": len(_SHARED_DFAS),
                                   "bytes": 8 * sum(len(d.delta) * max(1, len(d.atoms)) for d in dfas)}
        return out

    def validate(self, constraint: Constraint) -> None:
        """Raise what :meth:`compile` would raise for the constraint itself, cheaply: constraint
        kind, translation to the grammar IR (:class:`UnsupportedFeatureError`,
        :class:`GrammarSyntaxError`, :class:`InvalidConstraintError`) and the grammar checks; for a
        JSON Schema only the compiler pass (every keyword checked, rule texts not parsed: about a
        tenth of a compile). The NFA and the token index are not built, so
        :class:`IncompatibleVocabularyError`, an unsatisfiable schema and ``compile_timeout_s``
        surface only at compile (the vLLM plugin turns those into HTTP 400 too)."""
        if not isinstance(constraint, Constraint):
            raise TypeError(f"validate() takes a Constraint, got {type(constraint).__name__}")
        if constraint.kind not in self.supported_kinds:
            from ..errors import ConstraintKindError

            raise ConstraintKindError(self.name, constraint.kind, self.supported_kinds)
        with self._lock:
            if constraint.cache_key() in self._cache:
                return
        from .pushdown import check_size, count_large_repeats
        from .regex import RegexOptions

        try:
            if constraint.kind == "json_schema":
                from .json_schema import check_schema

                check_schema(constraint.value, self.options)  # the compiler pass, no IR: cheap
                return
            # the size the compile will build: large counted repeats are counters, not copies,
            # except on the eager DFA's path (one rule with anchors inside), which expands them
            from .ir import has_anchor

            grammar = self.to_grammar(constraint)
            if not (len(grammar.rules) == 1 and has_anchor(grammar.rules[grammar.root])):
                grammar = count_large_repeats(grammar)[0]
            check_size(grammar, RegexOptions().max_nfa_states)
        except RecursionError:
            raise _nesting_limit() from None

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def forget(self, constraint: Constraint) -> None:
        """Drop the cached compiled grammar of ``constraint`` (:meth:`Backend.forget`)."""
        key = constraint.cache_key()
        with self._lock:
            self._cache.pop(key, None)

    @property
    def cache_len(self) -> int:
        return len(self._cache)


ENV_COMPILE_PROCESSES = "STRUCTGATE_COMPILE_PROCESSES"
#: upper bound of ``compile_processes`` (each worker is a Python process of ~100 MB)
MAX_COMPILE_PROCESSES = 32


class _Frontend:
    """The vocabulary-free half of :class:`NativeBackend` (constraint → grammar IR), for workers."""

    def __init__(self, options: CompileOptions, kinds: frozenset) -> None:
        self.options = options
        self.supported_kinds = kinds

    to_grammar = NativeBackend.to_grammar
    _v1_options = NativeBackend._v1_options
    _regex_grammar = staticmethod(NativeBackend._regex_grammar)


def _grammar_and_nfa(frontend, constraint: Constraint, inline_max_size: int, check=None, lazy: bool = False):
    """``(grammar IR, grammar NFA)`` of ``constraint`` through ``frontend.to_grammar`` (a
    :class:`NativeBackend` or a :class:`_Frontend`); the NFA is None when the eager-DFA path
    applies (one rule with anchors inside). ``check()``, when given, runs between the two stages
    (the deadline). Raises what ``to_grammar`` and :func:`~.pushdown.build_grammar_nfa` raise."""
    from .ir import has_anchor
    from .pushdown import build_grammar_nfa

    grammar = frontend.to_grammar(constraint)
    if check is not None:
        check()
    if len(grammar.rules) == 1 and has_anchor(grammar.rules[grammar.root]):
        return grammar, None
    return grammar, build_grammar_nfa(grammar, inline_max_size=inline_max_size, lazy=lazy)


def _build_in_worker(constraint: Constraint, options: CompileOptions, inline_max_size: int, kinds: frozenset):
    """Worker side of :class:`CompilePool`: the grammar NFA of ``constraint``; its grammar IR
    (:class:`~.ir.Grammar`) when the NFA generates rules on demand (the caller builds the NFA:
    lazy, milliseconds); or None when the caller compiles it (the eager-DFA path: anchors inside a
    regex; an IR holding a lazily generated automaton). Typed errors are raised as in-process
    (they pickle, :class:`~structgate.errors.StructgateError`)."""
    from .pushdown import no_gc

    with no_gc():
        try:
            grammar, gnfa = _grammar_and_nfa(_Frontend(options, kinds), constraint, inline_max_size)
            if gnfa is None or not gnfa._dynamic:
                return gnfa
            # rules generated on demand are built by closures over the grammar, which stay in the
            # process that matches: the IR goes back when it pickles (the counters of large
            # repeats are added by the NFA build), else (a length-counted pattern's automaton in
            # the IR) the caller compiles from the constraint
            return None if gnfa.ir_lazy else grammar
        except RecursionError:
            raise _nesting_limit() from None


def _warm_worker() -> None:
    from ..worker_pool import ignore_sigint

    ignore_sigint()
    import structgate.native.json_schema  # noqa: F401  (imports and tables before the first job)
    import structgate.native.pushdown  # noqa: F401


class CompilePool(WorkerPool):
    """Worker processes that build grammars (constraint → grammar IR → grammar NFA) for the native
    backend, one pool per process and size (``compile_processes``); the mechanism is
    :class:`structgate.worker_pool.WorkerPool`, shared with outlines-core's index pool.

    Why: the engine core of vLLM is one Python process; a compile in a thread there holds the GIL
    for its whole length in pure Python, so every running request's step waits (issue 15's stall).
    In a worker the compile runs on another core and only the NFA (flat integer lists) is pickled
    back; the token index, which needs the vocabulary's trie, is built in the caller (a few ms).
    ``compile_timeout_s`` is enforced preemptively: a compile past its deadline has its workers
    terminated (the pool is rebuilt on the next compile) and raises
    ``CompileLimitError("compile_timeout_s")``; a worker that dies (memory) raises
    ``CompileLimitError("compile_process")``. Workers are started with ``spawn`` (no fork of a
    multi-threaded engine) and import the compiler once (:func:`_warm_worker`).
    """

    _pools: dict[int, "CompilePool"] = {}
    _lock = threading.Lock()

    def __init__(self, n: int) -> None:
        super().__init__(n, n, initializer=_warm_worker, warm_job=_warm_worker)

    @classmethod
    def get(cls, n: int) -> "CompilePool":
        return cls._get_or_make(n, lambda: cls(n))

    def build(self, constraint: Constraint, options: CompileOptions, inline_max_size: int, kinds: frozenset,
              deadline: float | None):
        """``(grammar NFA, seconds waited for the workers' start)``: the NFA of ``constraint`` built
        in a worker (None: build it in the caller).

        Raises
        ------
        StructgateError
            What the in-process compile raises (re-raised from the worker).
        CompileLimitError
            ``compile_timeout_s`` past ``deadline`` (``time.monotonic()``), ``compile_process`` when
            the worker died.
        """
        lim = options.compile_timeout_s
        return self.run(_build_in_worker, (constraint, options, inline_max_size, kinds), deadline,
                        lambda: CompileLimitError("compile_timeout_s", lim, lim, "the compile was stopped in its "
                                                  "worker process"))
