"""The one interface every structured-output engine implements.

Three nouns, split compile from match (as XGrammar and outlines-core do):

* :class:`Backend` — bound to one :class:`~structgate.vocab.Vocabulary`; ``compile(constraint)``
  returns a
* :class:`CompiledGrammar` — immutable, cacheable, safe to share between threads; ``matcher()``
  returns a
* :class:`Matcher` — mutable, one per request: fill a bitmask row, advance, validate, rollback.

EOS and termination rules (the same for every backend, whatever the engine's own convention)
---------------------------------------------------------------------------------------------
Let ``s`` be the matcher's state after the accepted tokens.

1. A non-special token ``t`` is allowed in ``s`` iff its bytes, fed from ``s``, keep the output a
   prefix of some complete match (never reach a dead state). Tokens with no bytes (special /
   control tokens other than EOS) and padding ids ``>= vocab.n_tokens`` are **never** allowed.
2. Every EOS id is allowed iff ``s`` is *accepting*: the output so far is a complete match
   (:meth:`Matcher.is_accepting`).
3. ``s`` is *final* (:meth:`Matcher.is_final`) when it is accepting and no non-EOS token is allowed:
   the mask then allows EOS only, so the request finishes at the next step.
4. Advancing by an EOS id in an accepting state *terminates* the matcher
   (:meth:`Matcher.is_terminated` becomes True). A terminated matcher allows only EOS; advancing it
   by EOS again returns True and changes nothing; any other token returns False.
5. ``advance(tokens)`` is atomic: it returns False and leaves the state exactly as it was if any
   token is not allowed (including EOS in a non-accepting state). It never raises for a rejected
   token (only for API misuse, e.g. a negative id).
6. ``rollback(n)`` undoes the last ``n`` accepted tokens exactly, including an accepted EOS (a
   terminated matcher can be rolled back). Rolling back more than the history raises
   :class:`~structgate.errors.MatcherStateError`. The history kept is at least
   ``max_rollback_tokens`` (default unlimited: ``-1``).
7. ``validate(tokens)`` returns the length of the longest allowed prefix of ``tokens`` without
   changing the state (EOS counts as a token, per rules 2 and 4).
8. ``reset()`` returns to the start state with empty history.

The bitmask layout is the one in :mod:`structgate.bitmask`.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterable, Literal, Mapping, Sequence

import numpy as np

from .. import _jsontext
from ..bitmask import as_numpy_row
from ..errors import ConstraintKindError, MatcherStateError
from ..vocab import Vocabulary

__all__ = ["Constraint", "ConstraintKind", "CompileOptions", "Backend", "CompiledGrammar", "Matcher",
           "CONSTRAINT_KINDS", "has_cheap_validate", "warm_start_row"]

ConstraintKind = Literal["regex", "json_schema", "json_object", "choice", "grammar", "structural_tag"]
CONSTRAINT_KINDS: tuple[str, ...] = ("regex", "json_schema", "json_object", "choice", "grammar",
                                     "structural_tag")


@dataclass(frozen=True)
class Constraint:
    """What the output must match.

    Attributes
    ----------
    kind : {"regex", "json_schema", "json_object", "choice", "grammar", "structural_tag"}
    value : str | dict | tuple[str, ...] | None
        The regex text; the JSON Schema (a dict or a boolean; JSON text is parsed, once: text
        holding a JSON string is refused); the choice strings; the
        grammar text (Lark for llguidance, GBNF/EBNF for xgrammar; the native engine has no
        ``grammar`` kind yet); ``None`` for json_object;
        the structural-tag spec (dict; JSON text is parsed, once, as for a JSON Schema) for
        structural_tag.
    grammar_format : str | None
        For ``grammar``: ``"lark"``, ``"ebnf"``/``"gbnf"`` or None (backend default).
    """

    kind: str
    value: Any = None
    grammar_format: str | None = None

    def __post_init__(self) -> None:
        from ..errors import GrammarSyntaxError, InvalidConstraintError

        if self.kind not in CONSTRAINT_KINDS:
            raise InvalidConstraintError(f"unknown constraint kind {self.kind!r}; expected one of {CONSTRAINT_KINDS}")
        if self.kind in ("regex", "grammar") and not isinstance(self.value, str):
            raise InvalidConstraintError(f"a {self.kind} constraint needs a string, got {type(self.value).__name__}")
        if self.kind == "json_schema" and isinstance(self.value, (str, bytes)):
            text = self.value
            try:
                object.__setattr__(self, "value", _jsontext.loads(text))
            except UnicodeDecodeError as e:
                raise InvalidConstraintError(f"JSON Schema bytes are not UTF-8: {e.reason} at byte {e.start}") from None
            except json.JSONDecodeError as e:
                raise GrammarSyntaxError(f"JSON Schema is not valid JSON: {e.msg}", str(self.value), e.pos)
            except RecursionError:
                raise _too_deep(_text_depth(self.value), "JSON Schema") from None
            if isinstance(self.value, str):
                # the text held a JSON string: not a schema. It is decoded once, here: a backend given
                # the string would read it as schema text again ('"true"' as the schema true)
                text = text.decode("utf-8") if isinstance(text, bytes) else text
                raise GrammarSyntaxError("a schema must be a JSON object or a boolean", text,
                                         len(text) - len(text.lstrip()))
        if self.kind == "structural_tag" and isinstance(self.value, (str, bytes)):
            text = self.value.decode("utf-8", "replace") if isinstance(self.value, bytes) else self.value
            try:
                object.__setattr__(self, "value", _jsontext.loads(self.value))
            except UnicodeDecodeError as e:
                raise InvalidConstraintError(f"structural_tag bytes are not UTF-8: {e.reason} at byte {e.start}") from None
            except json.JSONDecodeError as e:
                raise GrammarSyntaxError(f"structural_tag is not valid JSON: {e.msg}", text, e.pos) from None
            except RecursionError:
                raise _too_deep(_text_depth(text), "structural_tag") from None
            if isinstance(self.value, str):  # decoded once, here (as a JSON Schema's text, above)
                raise InvalidConstraintError("structural_tag /: must be a JSON object, got a JSON string")
        if self.kind == "choice":
            if isinstance(self.value, (str, bytes)):
                # tuple("yes") would be the three choices "y", "e", "s"
                raise InvalidConstraintError(f"a choice constraint needs a list of strings, got the string "
                                             f"{self.value[:60]!r}; write [{self.value[:60]!r}] for one choice")
            choices = tuple(self.value or ())
            if not choices or not all(isinstance(c, str) for c in choices):
                raise InvalidConstraintError("a choice constraint needs a non-empty list of strings")
            object.__setattr__(self, "value", choices)

    @classmethod
    def regex(cls, pattern: str) -> "Constraint":
        return cls("regex", pattern)

    @classmethod
    def json_schema(cls, schema: dict | str | bool) -> "Constraint":
        return cls("json_schema", schema)

    @classmethod
    def choice(cls, choices: Iterable[str]) -> "Constraint":
        """One of ``choices`` exactly. Raises InvalidConstraintError for an empty list, an item
        that is not a string, or a bare string (which is not a list of choices)."""
        return cls("choice", choices if isinstance(choices, (str, bytes)) else tuple(choices))

    @classmethod
    def grammar(cls, text: str, grammar_format: str | None = None) -> "Constraint":
        return cls("grammar", text, grammar_format)

    @classmethod
    def json_object(cls) -> "Constraint":
        return cls("json_object", None)

    def cache_key(self) -> str:
        """A stable string key for compile caches.

        Raises
        ------
        CompileLimitError
            ``nesting_depth``: the value nests arrays/objects deeper than Python's recursion
            limit lets ``json`` write it (the compilers' own nesting limit, checked first here).
        InvalidConstraintError
            The value is not JSON (a ``set``, a ``float`` key next to string keys, a cycle).
        """
        v = self.value
        if isinstance(v, (dict, list, bool)) or v is None:
            try:
                v = json.dumps(v, sort_keys=True)
            except RecursionError:
                raise _too_deep(_value_depth(v), "JSON Schema" if self.kind == "json_schema"
                                else f"{self.kind} constraint") from None
            except (TypeError, ValueError) as e:
                from ..errors import InvalidConstraintError

                raise InvalidConstraintError(f"the {self.kind} constraint's value is not JSON: {e}") from None
        return f"{self.kind}\x00{self.grammar_format}\x00{v}"


def _nesting_limit():
    """The typed error for a constraint nested deeper than the compilers' recursion allows
    (deeply nested schemas, numbers with hundreds of digits): never an untyped RecursionError.
    (The native backend and the JSON Schema compiler's public functions raise it.)"""
    import sys

    from ..errors import CompileLimitError

    return CompileLimitError("nesting_depth", f"> {sys.getrecursionlimit()} frames", sys.getrecursionlimit(),
                             "the constraint is nested too deeply (schema nesting, anyOf chains, or number "
                             "bounds with hundreds of digits); simplify it")


def _too_deep(depth: int, what: str):
    """The typed error for a constraint value nested deeper than ``json`` can read or write
    within Python's recursion limit: ``CompileLimitError("nesting_depth")``, the limit every
    compiler reports for a constraint nested too deeply (never an untyped RecursionError)."""
    import sys

    from ..errors import CompileLimitError

    return CompileLimitError("nesting_depth", f"{depth} nested arrays/objects", sys.getrecursionlimit(),
                             f"the {what} is nested too deeply to be read (Python's recursion limit, "
                             "in frames); simplify it")


def _value_depth(v) -> int:
    """Deepest nesting of lists and dicts in ``v`` (iterative: any depth)."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            x = x.values()
        elif not isinstance(x, (list, tuple)):
            continue
        deepest = max(deepest, d)
        stack.extend((y, d + 1) for y in x if isinstance(y, (dict, list, tuple)))
    return deepest


def _text_depth(text: str | bytes) -> int:
    """Deepest nesting of ``[``/``{`` in a JSON text, brackets inside strings not counted."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    deepest = depth = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


#: the largest ``CompileOptions.max_whitespace``: llguidance's adapter keeps one vocabulary row per
#: run length (16 KiB each for Llama 3) and outlines-core expands ``{0,n}`` into its index, so a run
#: bound in the millions exhausts memory or never compiles (a break-it, 2026-12-07)
MAX_WHITESPACE = 1024


@dataclass(frozen=True)
class CompileOptions:
    """Options every backend understands (each maps them onto its engine; unknown ones are ignored).

    Attributes
    ----------
    whitespace : {"compact", "flexible"}
        JSON whitespace between tokens. ``compact`` = minified JSON: no whitespace at all, separators
        ``,`` and ``:`` (vLLM's ``disable_any_whitespace``). ``flexible`` = between any two JSON
        tokens, 0 to ``max_whitespace`` characters of ``[ \t\n\r]`` (so ``json.dumps`` output with
        its ``", "`` / ``": "`` separators and shallow ``indent=2`` output both match).
    max_whitespace : int
        Bound on consecutive whitespace in ``flexible`` mode (unbounded whitespace lets a model loop);
        at most :data:`MAX_WHITESPACE` (1024).
    additional_properties : bool
        Policy for objects whose schema does not say ``additionalProperties``: False = only the
        listed properties (the usual structured-output choice), True = follow the spec (any extra key).
    property_order : {"declared", "any"}
        Native engine: order of an object's listed ``properties``. ``declared`` (default) = the
        schema's order, each optional property free to be left out (what XGrammar and llguidance
        generate). ``any`` = every order (JSON objects are unordered: a valid document written in
        another key order is accepted, e.g. when validating outputs of another system), for objects
        of at most ``max_any_order_properties`` listed properties (``2**n`` rules per object);
        larger objects keep the declared order. ``any`` costs mask time: a key position admits
        every remaining key (first-visit masks ~3x slower on small all-required objects).
    max_any_order_properties : int
        Native engine: the largest object ``property_order="any"`` applies to (default 4).
    max_dfa_states : int
        Native engine: cap on the states of one grammar's automaton — the configurations of the
        lazily determinised pushdown automaton, created as masks and advances first reach them (and
        the eager DFA of a regex with inner anchors); :class:`CompileLimitError` beyond it.
    compile_timeout_s : float
        Wall-clock limit on one compile, seconds (``<= 0`` disables).
    step_timeout_s : float
        Native engine: limit, seconds of the calling thread's CPU time, on the work one matcher
        step does the first time it meets a part of the grammar (``<= 0`` disables; default 2).
        CPU time, not wall-clock, so that a loaded machine, other threads holding the GIL (vLLM's
        compile threads) or the grammar's lock do not fail a step that does little work. The native engine builds its
        automaton lazily, so computing a mask row (``fill_bitmask``, each row of a batched fill,
        ``is_final``) or the transitions of an ``advance`` / ``validate`` token may do real work;
        past the limit that call raises :class:`~structgate.errors.CompileLimitError`
        (``step_timeout_s``) and changes no state (the vLLM plugin then fails that request alone,
        :mod:`structgate.plugin.grammar_failure`). MaskBench's slowest first-visit mask is
        ~0.55 s (bench/README.md); a highly ambiguous grammar can take minutes, in the serving
        engine's step. The start's mask, computed with the compile (``warm_start``), counts
        toward ``compile_timeout_s`` instead. The limit is per row: a batched fill of ``k`` new
        rows may take up to ``k`` times it (``forced_tokens``' chain is one step). Work done
        before the limit is kept in units (a closure, a configuration, a table row); a unit longer
        than the limit never completes, so retrying such a step fails alike.
    max_rollback_tokens : int
        History kept per matcher for rollback; ``-1`` = unlimited.
    max_recursion_depth : int
        Native engine: stack depth bound of the pushdown matcher (recursive ``$ref``, nested
        free-form JSON, recursive grammar rules): outputs nesting rule calls deeper than this are
        excluded (a sound, explicit bound; default 128).
    threads : int
        Compile threads for engines that have a pool (XGrammar, llguidance); 1 = single-threaded.
    cache_size_bytes : int
        Compiled-grammar cache size for engines that have one; ``-1`` = engine default.

    Integer fields take an ``int``, a finite integral ``float`` (JSON's ``1e5``) or ASCII decimal
    text, stored as ``int``, at most ``2**31 - 1`` (``cache_size_bytes``: ``2**63 - 1``;
    ``max_whitespace``: :data:`MAX_WHITESPACE`);
    ``additional_properties`` takes ``True``/``False`` or 0/1 (the text ``"false"`` is refused);
    the timeouts take any real number (``int``, ``float``, ``Fraction``, ``Decimal``, numpy's; not a
    bool) or its text (ASCII decimal, or ``inf``), stored as ``float``, ``inf`` meaning no limit as
    ``<= 0`` does (a number past a float's range is ``inf``; NaN is refused), read as
    ``$STRUCTGATE_COMPILE_TIMEOUT_S`` is (:func:`structgate._env.seconds_value`). Anything else is an
    :class:`~structgate.errors.InvalidConstraintError` naming the field.
    """

    whitespace: str = "flexible"
    max_whitespace: int = 4
    additional_properties: bool = False
    property_order: str = "declared"
    max_any_order_properties: int = 4
    max_dfa_states: int = 200_000
    compile_timeout_s: float = 60.0
    step_timeout_s: float = 2.0
    max_rollback_tokens: int = -1
    max_recursion_depth: int = 128
    threads: int = 1
    cache_size_bytes: int = -1
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from ..errors import InvalidConstraintError

        if self.whitespace not in ("flexible", "compact"):
            raise InvalidConstraintError(f"option whitespace must be 'flexible' or 'compact', got {self.whitespace!r}")
        if self.property_order not in ("any", "declared"):
            raise InvalidConstraintError(f"option property_order must be 'any' or 'declared', got {self.property_order!r}")
        from .._env import MAX_OPTION_INT, bool_value, int_value, seconds_value, shown

        # integers: ints, integral floats (JSON's 1e3) or ASCII decimal text, as the extras take
        # them (structgate._env.int_value), stored as ints; bounded so that no engine meets a
        # number its own integer type cannot hold (xgrammar: int64 for cache_size_bytes)
        for name, lo, hi in (("max_whitespace", 0, MAX_WHITESPACE), ("max_dfa_states", 0, MAX_OPTION_INT),
                             ("max_recursion_depth", 0, MAX_OPTION_INT), ("threads", 0, MAX_OPTION_INT),
                             ("max_any_order_properties", 0, MAX_OPTION_INT),
                             ("max_rollback_tokens", -1, MAX_OPTION_INT), ("cache_size_bytes", -1, (1 << 63) - 1)):
            v = getattr(self, name)
            n = int_value(v)
            if n is None or not lo <= n <= hi:
                what = "a non-negative integer" if lo == 0 else f"an integer >= {lo}"
                raise InvalidConstraintError(f"option {name} must be {what} (at most {hi}), got {shown(v)}")
            if n is not v:
                object.__setattr__(self, name, n)
        v = self.additional_properties
        b = bool_value(v)
        if b is None:
            raise InvalidConstraintError(f"option additional_properties must be true or false, got {shown(v)}")
        object.__setattr__(self, "additional_properties", b)
        for name in ("compile_timeout_s", "step_timeout_s"):
            # any real number (a Fraction, a Decimal, numpy's) or its text, as the variables take it
            # (structgate._env.seconds_value), stored as a float: inf is no limit, NaN is refused
            v = getattr(self, name)
            f = seconds_value(v)
            if f is None:
                raise InvalidConstraintError(f"option {name} must be a number of seconds (<= 0 or inf: no limit), "
                                             f"got {shown(v)}")
            object.__setattr__(self, name, f)

    def updated(self, **kw) -> "CompileOptions":
        known = {k: v for k, v in kw.items() if k in self.__dataclass_fields__ and k != "extra"}
        extra = {k: v for k, v in kw.items() if k not in self.__dataclass_fields__}
        return replace(self, **known, extra={**self.extra, **extra})


class Matcher(ABC):
    """Per-request cursor over a :class:`CompiledGrammar`. Not thread-safe; one per request.

    Follow the EOS/termination rules in this module's docstring. Subclasses implement the
    ``_``-prefixed primitives; the public methods here add argument checks.
    """

    #: the vocabulary the grammar was compiled for
    vocab: Vocabulary

    # -- primitives --------------------------------------------------------------------------
    @abstractmethod
    def _fill_row(self, row: np.ndarray) -> bool:
        """Write the allowed-token bits into ``row`` (int32, ``(ceil(V/32),)``, writable view);
        return True if any token of the ``V`` is forbidden (the row must be applied)."""

    @abstractmethod
    def advance(self, token_ids: int | Sequence[int]) -> bool:
        """Accept one token id or a sequence (atomically; rule 5). Returns False if rejected."""

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (rule 6).

        Raises
        ------
        MatcherStateError
            ``num_tokens`` exceeds the recorded history, or is negative.
        """

    @abstractmethod
    def is_accepting(self) -> bool:
        """True when the output so far is a complete match (EOS allowed now)."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """True after an EOS id was accepted (rule 4)."""

    @abstractmethod
    def reset(self) -> None:
        """Back to the start state, empty history."""

    # -- derived (override for speed) -------------------------------------------------------------
    def is_final(self) -> bool:
        """Accepting and no non-EOS token allowed (rule 3); always True once terminated."""
        if self.is_terminated():
            return True
        if not self.is_accepting():
            return False
        words = np.empty((self.vocab.vocab_size + 31) // 32, dtype=np.int32)
        self._fill_row(words)
        u = words.view(np.uint32)
        for e in self.vocab.eos_token_ids:
            u[e >> 5] &= np.uint32(~(1 << (e & 31)) & 0xFFFFFFFF)
        return not words.any()

    def fill_bitmask(self, bitmask: Any, row: int = 0) -> bool:
        """Fill row ``row`` of a caller-owned bitmask with the allowed tokens. Does not change state.

        Parameters
        ----------
        bitmask : numpy.ndarray | torch.Tensor
            int32, shape ``(batch, ceil(vocab_size/32))``, CPU, rows contiguous; bit ``t % 32`` of
            word ``t // 32`` = token ``t`` allowed.
        row : int
            The row to write.

        Returns
        -------
        need_apply : bool
            True if some token is forbidden (the row is not all ``-1``).

        Raises
        ------
        BitmaskError
            Wrong dtype, shape, device or row index.
        """
        out = as_numpy_row(bitmask, row, self.vocab.vocab_size)
        return self._fill_row(out)

    #: True when :meth:`row_source` is implemented: the matcher's mask is a cached row that a
    #: batch hook can gather together with other requests' rows in one vectorised copy
    supports_row_gather: ClassVar[bool] = False

    def row_source(self) -> tuple[Any, int]:
        """``(source, state)`` for batched fills (only when :attr:`supports_row_gather`).

        ``source.fill_rows(states, out)`` (int64 ``(k,)`` states, ``out`` int32 ``(k,
        ceil(V/32))``) copies their rows, computing missing ones, atomically with respect to other
        threads using the source (no row evicted between its lookup and its copy, and a batch
        may hold more states than the source caches); ``state == -1`` means terminated (the row
        then allows EOS only). Requests sharing one ``source`` are filled by one
        ``source.fill_rows(states, bitmask[rows])``, which is how the vLLM scheduler hook fills
        native requests. (``source.slots(states)`` indexing ``source.rows`` is the same gather
        for a single-threaded reader: the indices hold only until the next row is computed.)
        Raises NotImplementedError when unsupported."""
        raise NotImplementedError(f"{type(self).__name__} does not expose cached rows")

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted ids allowed now (int64, for tests and debugging; slow path)."""
        from ..bitmask import allowed_ids

        words = np.empty((self.vocab.vocab_size + 31) // 32, dtype=np.int32)
        self._fill_row(words)
        return allowed_ids(words, self.vocab.vocab_size)

    def validate(self, token_ids: Sequence[int]) -> int:
        """Length of the longest allowed prefix of ``token_ids``; the state is unchanged (rule 7)."""
        n = 0
        pushed = 0  # tokens that entered the history (EOS after termination does not, rule 4)
        try:
            for t in token_ids:
                was_terminated = self.is_terminated()
                if not self.advance(int(t)):
                    break
                n += 1
                if not was_terminated:
                    pushed += 1
        finally:
            if pushed:
                self.rollback(pushed)
        return n

    def forced_tokens(self, max_n: int) -> list[int]:
        """The grammar-forced tokens from the current state; the state is unchanged.

        The longest run ``t1 .. tk`` (``k <= max_n``) such that, from the current state, each step's
        mask allows **exactly one** token id and that id is not EOS (so the state is not accepting):
        the constrained sampler must pick ``t1``, then ``t2``, ... whatever the logits. Proposing
        them as speculative drafts is therefore accepted with probability 1 and leaves every output
        unchanged (greedy or sampled). Empty when terminated, accepting, or when more than one token
        is allowed now.

        Generic definition (this default; backends override it for speed and must return the same
        list, which the conformance kit checks): fill the row, count the allowed ids, advance by the
        only one, repeat; then roll the advanced tokens back (or advance a :meth:`fork`, when the
        matcher has one), so the state and history are exactly as before.

        Parameters
        ----------
        max_n : int
            Upper bound on the run length (``>= 0``; vLLM passes ``num_speculative_tokens``).

        Returns
        -------
        tokens : list[int]

        Raises
        ------
        MatcherStateError
            ``max_n`` negative.
        """
        max_n = int(max_n)
        if max_n < 0:
            raise MatcherStateError(f"max_n must be >= 0, got {max_n}")
        if max_n == 0 or self.is_terminated():
            return []
        fork = getattr(self, "fork", None)
        m = fork() if callable(fork) else self
        if m is self:  # advance + rollback: stay within the kept history
            cap = getattr(self, "max_rollback_tokens", -1)
            if isinstance(cap, int) and cap >= 0:
                max_n = min(max_n, cap)
        words = np.empty((self.vocab.vocab_size + 31) // 32, dtype=np.int32)
        out: list[int] = []
        try:
            while len(out) < max_n and not m.is_accepting():
                m._fill_row(words)
                nz = np.flatnonzero(words)
                if len(nz) != 1:
                    break
                w = int(words[nz[0]]) & 0xFFFFFFFF
                if w & (w - 1):  # two bits in one word
                    break
                t = int(nz[0]) * 32 + w.bit_length() - 1
                if t >= self.vocab.vocab_size or t in self.vocab.eos_token_ids or not m.advance(t):
                    break
                out.append(t)
        finally:
            if m is self and out:
                self.rollback(len(out))
        return out

    def forced_bytes(self) -> bytes:
        """Bytes every continuation of the output must start with, as far as the engine can say
        (XGrammar's ``find_jump_forward_string``); the state is unchanged.

        Tokenization-free, so *not* a draft by itself: re-tokenizing these bytes changes what the
        model sees. The default returns the bytes of :meth:`forced_tokens` (``max_n=64``), a prefix
        of the true forced string (every forced token's bytes are forced); ``b""`` when the engine
        cannot say more.
        """
        return b"".join(self.vocab.token_bytes[t] for t in self.forced_tokens(64))

    @staticmethod
    def _as_list(token_ids: int | Sequence[int]) -> list[int]:
        if isinstance(token_ids, (int, np.integer)) and not isinstance(token_ids, bool):
            ids = [int(token_ids)]
        elif isinstance(token_ids, (str, bytes)) or not hasattr(token_ids, "__iter__"):
            raise MatcherStateError(f"token ids must be an int or a sequence of ints, got {type(token_ids).__name__}")
        else:
            ids = []
            for t in token_ids:
                if not isinstance(t, (int, np.integer)) or isinstance(t, bool):
                    raise MatcherStateError(f"token id must be an int, got {type(t).__name__} {t!r}")
                ids.append(int(t))
        for t in ids:
            if t < 0:
                raise MatcherStateError(f"token id must be >= 0, got {t}")
        return ids


class CompiledGrammar(ABC):
    """Immutable result of :meth:`Backend.compile`; share it between requests and threads."""

    vocab: Vocabulary
    constraint: Constraint

    @abstractmethod
    def matcher(self, *, max_rollback_tokens: int = -1) -> Matcher:
        """A fresh matcher in the start state."""

    @property
    def memory_size_bytes(self) -> int:
        """Approximate memory held by this compiled grammar, bytes (0 if unknown)."""
        return 0

    def warm_start(self) -> None:
        """Do now the work the first mask fill would do first, raising what it would raise
        (:func:`warm_start_row`). Default: nothing (engines whose compile computes the first mask,
        or that cache no masks)."""


class Backend(ABC):
    """A structured-output engine bound to one vocabulary.

    Subclasses set :attr:`name` and :attr:`supported_kinds`, and implement :meth:`_compile`.
    ``compile`` checks the constraint kind, then calls ``_compile``.

    Parameters
    ----------
    vocab : Vocabulary
        Token bytes, EOS ids and logits width every mask is built for.
    **options
        Keyword overrides of :class:`CompileOptions`; other keys land in ``options.extra`` when
        the backend declares them (``extra_options``, or its registry spec's ``options``). The
        extras may also be given as one mapping, ``extra={"max_product_states": 20_000}`` (the
        spelling ``CompileOptions(extra=...)`` and the docs use); its keys are checked alike. A
        key given both ways takes its ``extra`` value (as ``CompileOptions.updated`` merges them).

    Raises
    ------
    InvalidConstraintError
        An option name neither a :class:`CompileOptions` field nor a declared extra of this or
        another registered backend (with a did-you-mean; see
        :func:`structgate.backends.registry.check_option_names`), or ``extra`` that is not a mapping.

    Notes
    -----
    A backend whose constructor checks option *values* (a process count, a size limit) should also
    do those checks in the classmethod :meth:`check_options`, which needs no vocabulary: the vLLM
    plugin calls it at server startup with ``$STRUCTGATE_BACKEND_OPTIONS`` (see
    :func:`structgate.plugin.bridge.check_backend_options`), so that a bad value stops the server
    instead of failing every structured request. Let the constructor and ``check_options`` share
    one parsing function, so that they cannot disagree.
    """

    name: ClassVar[str] = "?"
    supported_kinds: ClassVar[frozenset[str]] = frozenset()
    #: engine-specific option names read from ``options.extra`` (None: not declared here)
    extra_options: ClassVar[frozenset[str] | None] = None
    #: extras that must be integers >= 0 / bools (``true``/``false`` or 0/1): checked by value by the
    #: constructor and by the default :meth:`check_options` (:func:`structgate._env.option_int`,
    #: :func:`~structgate._env.option_bool`), so a text ``"false"`` is refused, not read as true
    int_extras: ClassVar[tuple[str, ...]] = ()
    bool_extras: ClassVar[tuple[str, ...]] = ()

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        from .registry import check_option_names

        self.vocab = vocab
        if "extra" in options:
            from collections.abc import Mapping

            from ..errors import InvalidConstraintError

            ex = options.pop("extra")
            if not isinstance(ex, Mapping):
                raise InvalidConstraintError(f"backend option extra must be a mapping of extra option names to "
                                             f"values, got {type(ex).__name__}")
            options = {**options, **ex}
        check_option_names(type(self), options)
        type(self).check_typed_extras(options)
        self.options = CompileOptions().updated(**options)

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Check the values of this backend's options without a vocabulary: raise what the
        constructor would raise for them. ``options`` is flat, as the constructor merges them
        (:class:`CompileOptions` fields and extras; the ``extra`` mapping already folded in, its
        keys winning), and may hold other backends' extras (the user's ``$STRUCTGATE_BACKEND_OPTIONS``
        is shared by every engine a request may choose): check only the options this backend
        reads, and the environment variables they default from, and let the others pass. A
        default the vLLM plugin sets for one engine (``outlines_compile_processes=1`` for
        ``structgate-outlines-core``, :data:`structgate.plugin.bridge.ENGINE_DEFAULTS`) is given
        to that engine alone, never checked by or passed to another. Called by the vLLM plugin at
        startup for the server's engine and every other installed one, after the option names and
        the :class:`CompileOptions` values are checked.
        Default: :meth:`check_typed_extras` (an override that adds checks should call it too).

        Raises
        ------
        InvalidConstraintError
            A bad value; the message names the option (or the variable it came from).
        """
        cls.check_typed_extras(options)

    @classmethod
    def check_typed_extras(cls, options: Mapping[str, Any]) -> None:
        """Check the :attr:`int_extras` (integers >= 0: ints, integral floats, ASCII decimal text)
        and :attr:`bool_extras` (``True``/``False``, 0/1) present in the flat ``options``.

        Raises
        ------
        InvalidConstraintError
            A bad value; names the backend and the option.
        """
        from .._env import option_bool, option_int

        for k in cls.int_extras:
            option_int(options, k, engine=cls.name)
        for k in cls.bool_extras:
            option_bool(options, k, engine=cls.name)

    def engine_cache_stats(self) -> dict[str, dict[str, int]]:
        """Process-wide caches the engine shares across its compiled grammars (not the compiled
        grammars themselves), by cache name: a dict of the figures the engine knows among
        ``"entries"``, ``"bytes"`` (approximate) and ``"hits"`` / ``"misses"`` (lookups since the
        process started), ints. Cheap: the vLLM plugin reads it every second for ``/metrics``
        (``structgate_engine_cache_*``). Default: none."""
        return {}

    def compile(self, constraint: Constraint) -> CompiledGrammar:
        """Compile ``constraint`` for this backend's vocabulary.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError, CompileLimitError, ConstraintKindError
        """
        if not isinstance(constraint, Constraint):
            raise TypeError(f"compile() takes a Constraint, got {type(constraint).__name__}")
        self.check_kind(constraint)
        return self._compile(constraint)

    def forget(self, constraint: Constraint) -> None:
        """Drop what this backend cached for ``constraint`` (its compiled grammar), so the next
        :meth:`compile` builds it afresh; grammars already handed out keep working. The vLLM
        plugin calls it when a grammar fails during decoding (a limit met by the automaton that
        all requests of the constraint share). Default: nothing cached, nothing to do."""

    def check_kind(self, constraint: Constraint) -> None:
        """Raise :class:`~structgate.errors.ConstraintKindError` when this backend does not take
        ``constraint.kind`` (:attr:`supported_kinds`)."""
        if constraint.kind not in self.supported_kinds:
            raise ConstraintKindError(self.name, constraint.kind, self.supported_kinds)

    @abstractmethod
    def _compile(self, constraint: Constraint) -> CompiledGrammar:
        ...

    def validate(self, constraint: Constraint) -> None:
        """Raise the typed error ``compile`` would raise, without keeping anything (frontends call
        this to reject a bad request early). Default: compile and drop. A backend whose check is
        cheaper than its compile overrides this (see :func:`has_cheap_validate`: a server does not
        run the default on its event loop, it leaves the check to the compile)."""
        self.compile(constraint)


def warm_start_row(compiled: CompiledGrammar) -> CompiledGrammar:
    """``compiled`` after :meth:`CompiledGrammar.warm_start`: the mask of its start state computed
    and cached where the engine caches rows (the native engine; other engines' grammars pass
    through untouched).

    The native compile leaves that mask to the first fill (as XGrammar's and llguidance's compiles
    do: ``PushdownIndex.check_start``). Callers that want the work, and what it may raise (a
    ``CompileLimitError`` met within the first token's lookahead, ``compile_timeout_s`` counted from
    the compile's start), inside the compile call this right after :meth:`Backend.compile`: the
    vLLM bridge (the compile job runs off the engine step and its errors fail only that request)
    and ``structgate-auto`` (such a limit moves the constraint on to the next engine of the
    chain)."""
    w = getattr(compiled, "warm_start", None)  # (a third-party grammar may not subclass ours)
    if w is not None:
        w()
    return compiled


def has_cheap_validate(backend: Any) -> bool:
    """Whether ``backend``'s class overrides :meth:`Backend.validate` with a check of its own.

    The default compiles the constraint, which for an engine behind one C/Rust call (outlines-core's
    index, XGrammar's compiler) cannot be cut short and may take minutes (``(a|b)*a(a|b){20}`` on
    outlines-core); servers validate such backends only by constraint kind and leave the rest to the
    compile, whose errors reach the client as well.
    """
    validate = getattr(type(backend), "validate", None)
    return validate is not None and validate is not Backend.validate
