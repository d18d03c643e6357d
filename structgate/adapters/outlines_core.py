"""outlines-core (dottxt-ai/outlines-core >= 0.2.14) behind structgate's interface: backend
``structgate-outlines-core``.

Mapping
-------
* vocabulary: ``outlines_core.Vocabulary(eos, {token_bytes: [ids]})`` with every real,
  non-special token of ``vocab`` (duplicates share a key); specials and padding are absent, so the
  index never allows them. outlines-core takes one EOS id; the others are handled here (every EOS
  id follows the interface rule);
* kinds: ``regex`` → ``Index(regex, vocabulary)`` (a full match of the whole output);
  ``json_schema`` → ``outlines_core.json_schema.build_regex_from_schema(schema,
  whitespace_pattern, max_recursion_depth)`` then ``Index`` (``whitespace="flexible"`` →
  ``[ \\t\\n\\r]{0,max_whitespace}``, ``"compact"`` → no whitespace; ``max_recursion_depth`` passes
  through); ``choice`` → the escaped alternation. No ``grammar`` / ``json_object`` (not regular);
* the matcher walks the ``Index`` directly (``get_next_state``), keeping the state history itself,
  so rollback depth is unlimited and EOS never reaches the engine (outlines' ``Guide`` never
  advances on EOS and caps rollback at 32); masks are packed once per visited state and cached in
  the compiled grammar (the index is immutable, so the cache is shared by all matchers);
* errors: outlines-core reports ``ValueError("... error building NFA")`` without a position; the
  regex is first parsed with Python's ``re`` for a position, and constructs outlines rejects
  (look-around, backreferences, anchors other than at the ends) are reported as
  :class:`UnsupportedFeatureError`.
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any

import numpy as np

from ..backends.interface import Backend, CompiledGrammar, Constraint
from ..bitmask import bool_to_bitmask
from ..errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ..vocab import Vocabulary
from ._base import AdapterMatcher, VocabMasks, choice_regex

__all__ = ["OutlinesCoreBackend", "OutlinesCoreCompiledGrammar", "OutlinesCoreMatcher"]

_UNSUPPORTED = [
    (re.compile(r"\(\?<?[=!]"), "look-around"),
    (re.compile(r"(?<!\\)\\[1-9]"), "backreference"),
    (re.compile(r"\(\?P="), "backreference"),
    (re.compile(r"(?<!\\)\\[bB]"), "word boundary \\b"),
    (re.compile(r"(?<!\\)\\[AZz]"), "anchor \\A / \\Z"),
]


def _regex_error(pattern: str, engine_msg: str) -> Exception:
    for rx, what in _UNSUPPORTED:
        m = rx.search(pattern)
        if m:
            return UnsupportedFeatureError(what, f"outlines-core: {engine_msg}", f"position {m.start()}")
    try:
        re.compile(pattern)
    except re.error as e:
        return GrammarSyntaxError(f"outlines-core: {e.msg}", pattern, e.pos or 0)
    return GrammarSyntaxError(f"outlines-core: {engine_msg}", pattern, 0)


def strip_end_anchors(pattern: str) -> str:
    """Drop a leading ``^`` and a trailing unescaped ``$``: no-ops under whole-output matching,
    but outlines-core 0.2.14 refuses anchored patterns ("anchored universal start state doesn't
    exist")."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$"):
        k = len(pattern) - 1
        n_bs = 0
        while k - 1 - n_bs >= 0 and pattern[k - 1 - n_bs] == "\\":
            n_bs += 1
        if n_bs % 2 == 0:
            pattern = pattern[:-1]
    return pattern


class OutlinesCoreMatcher(AdapterMatcher):
    """One request's state: an outlines-core index state plus the state history."""

    def __init__(self, compiled: "OutlinesCoreCompiledGrammar", max_rollback_tokens: int = -1):
        super().__init__(compiled.vocab, compiled._masks, max_rollback_tokens)
        self._g = compiled
        self._state = compiled._initial
        self._states: list[int] = []

    def _e_fill(self, row: np.ndarray) -> None:
        row[:] = self._g._row(self._state)

    def _e_accept(self, token: int) -> bool:
        nxt = self._g._next(self._state, token)
        if nxt is None:
            return False
        self._states.append(self._state)
        self._state = nxt
        return True

    def _e_rollback(self, k: int) -> None:
        self._state = self._states[-k]
        del self._states[-k:]

    def _e_accepting(self) -> bool:
        return self._g._final(self._state)

    def _e_reset(self) -> None:
        self._state = self._g._initial
        self._states.clear()


class OutlinesCoreCompiledGrammar(CompiledGrammar):
    """An ``outlines_core.Index`` plus a per-state cache of packed mask rows (shared, thread-safe:
    entries are computed idempotently and inserted under a lock)."""

    def __init__(self, backend: "OutlinesCoreBackend", constraint: Constraint, regex: str, index: Any):
        self.vocab = backend.vocab
        self.constraint = constraint
        self.regex = regex
        self._index = index
        self._masks = backend._masks
        self._initial = int(index.get_initial_state())
        self._finals = frozenset(int(s) for s in index.get_final_states())
        self._rows: dict[int, np.ndarray] = {}
        self._trans: dict[int, dict[int, int]] = {}
        self._lock = threading.Lock()

    def _final(self, state: int) -> bool:
        return state in self._finals

    def _next(self, state: int, token: int) -> int | None:
        t = self._trans.get(state)
        if t is None:
            t = {int(k): int(v) for k, v in self._transitions().get(state, {}).items()}
            with self._lock:
                self._trans[state] = t
        return t.get(token)

    def _transitions(self) -> dict:
        tr = self.__dict__.get("_all_trans")
        if tr is None:
            tr = self._index.get_transitions()
            self.__dict__["_all_trans"] = tr
        return tr

    def _row(self, state: int) -> np.ndarray:
        r = self._rows.get(state)
        if r is None:
            ok = np.zeros(self.vocab.vocab_size, dtype=bool)
            ids = [t for t in self._index.get_allowed_tokens(state) if 0 <= t < self.vocab.vocab_size]
            ok[ids] = True
            r = bool_to_bitmask(ok)
            with self._lock:
                self._rows[state] = r
        return r

    def matcher(self, *, max_rollback_tokens: int = -1) -> OutlinesCoreMatcher:
        return OutlinesCoreMatcher(self, max_rollback_tokens)

    @property
    def memory_size_bytes(self) -> int:
        return sum(r.nbytes for r in self._rows.values())


class OutlinesCoreBackend(Backend):
    """outlines-core engine bound to one :class:`~structgate.vocab.Vocabulary`.

    Parameters
    ----------
    vocab : Vocabulary
    **options
        :class:`~structgate.backends.interface.CompileOptions` fields (``whitespace``,
        ``max_whitespace``, ``max_recursion_depth``); extra ``outlines_whitespace_pattern`` (a regex)
        overrides the whitespace pattern.
    """

    name = "structgate-outlines-core"
    supported_kinds = frozenset({"regex", "json_schema", "choice"})

    def __init__(self, vocab: Vocabulary, **options: Any) -> None:
        import outlines_core as oc

        super().__init__(vocab, **options)
        m: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in vocab.special_token_ids:
                m.setdefault(b, []).append(i)
        self._oc_vocab = oc.Vocabulary(vocab.eos_token_ids[0], m)
        self._masks = VocabMasks(vocab)

    def _unroll_depth(self) -> int:
        """Depth to which outlines-core unrolls recursive schemas: ``extra["outlines_max_recursion_depth"]``
        (default 3, outlines' own default); the shared ``max_recursion_depth`` (native's stack bound,
        default 128) would make outlines' flat regex explode."""
        return int(self.options.extra.get("outlines_max_recursion_depth", 3))

    def _whitespace(self) -> str:
        o = self.options
        if o.extra.get("outlines_whitespace_pattern") is not None:
            return str(o.extra["outlines_whitespace_pattern"])
        if o.whitespace == "compact":
            return ""
        return r"[ \t\n\r]{0,%d}" % max(1, int(o.max_whitespace))

    def schema_regex(self, schema: Any) -> str:
        """The regex outlines-core builds for ``schema`` with this backend's options.

        Raises
        ------
        GrammarSyntaxError, UnsupportedFeatureError
        """
        from outlines_core.json_schema import build_regex_from_schema

        text = json.dumps(schema, ensure_ascii=False)
        try:
            return build_regex_from_schema(text, self._whitespace(), self._unroll_depth())
        except (ValueError, TypeError) as e:
            msg = str(e)
            low = msg.lower()
            if "unsupported" in low or "not supported" in low or "not yet" in low:
                return_feature = msg.split(":", 1)[-1].strip() or msg
                raise UnsupportedFeatureError(return_feature, f"outlines-core: {msg}") from e
            pos = 0
            for w in re.findall(r"'([^']+)'|\"([^\"]+)\"", msg):
                w = next(x for x in w if x)
                i = text.find(w)
                if i >= 0:
                    pos = i
                    break
            raise GrammarSyntaxError(f"outlines-core: {msg}", text, pos) from e

    def _compile(self, constraint: Constraint) -> OutlinesCoreCompiledGrammar:
        import outlines_core as oc

        kind = constraint.kind
        if kind == "json_schema":
            regex = self.schema_regex(constraint.value)
        elif kind == "choice":
            regex = choice_regex(constraint.value)
        else:
            regex = strip_end_anchors(str(constraint.value))
        try:
            index = oc.Index(regex, self._oc_vocab)
        except (ValueError, TypeError) as e:
            msg = str(e)
            if "size limit" in msg.lower() or "too big" in msg.lower():
                raise CompileLimitError("outlines_dfa_size", "exceeded", "engine limit", msg) from e
            if kind == "regex":
                raise _regex_error(regex, msg) from e
            raise UnsupportedFeatureError("regex the JSON Schema translates to",
                                          f"outlines-core: {msg}; regex {regex[:200]!r}") from e
        return OutlinesCoreCompiledGrammar(self, constraint, regex, index)
