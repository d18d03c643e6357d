"""Shared machinery of the engine adapters: the interface's EOS / termination / history rules on
top of an engine that only knows "accept a non-EOS token", "roll back k tokens" and "fill a mask".

Every adapter matcher handles EOS itself and never passes an EOS id to its engine: the engines
disagree there (XGrammar terminates and then refuses to fill a mask; llguidance stops and keeps a
stop reason; outlines-core's Guide never advances on EOS), and the interface has one rule
(:mod:`structgate.backends.interface`, rules 2-8). The engine sees only ordinary tokens, so engine
rollback counts = accepted non-EOS tokens.

Masks are sanitised after the engine fills them: padding ids (``>= n_tokens``) and special ids other
than EOS are cleared, EOS bits are set iff the matcher is accepting. This costs one vectorised AND
over ``ceil(V/32)`` words (a few microseconds at 128k tokens) and makes the contract hold even where
an engine's own convention differs; :mod:`structgate.diff` compares the sanitised masks.
"""
from __future__ import annotations

import json
import re
from abc import abstractmethod
from typing import Any, Sequence

import numpy as np

from ..backends.interface import Matcher
from ..errors import MatcherStateError
from ..vocab import Vocabulary

__all__ = ["json_pointer", "VocabMasks", "AdapterMatcher", "regex_escape", "choice_regex", "apply_additional_properties_default",
           "find_lookaround", "position_of_line_col"]


class VocabMasks:
    """Per-vocabulary constant masks, computed once.

    Attributes
    ----------
    keep : numpy.ndarray
        int32 ``(ceil(V/32),)``: 1 bits for ids an engine may allow (real, non-special tokens).
    eos_words : list[tuple[int, int]]
        ``(word index, int32 bit)`` for each EOS id.
    eos_row : numpy.ndarray
        int32 ``(ceil(V/32),)`` with only the EOS bits set.
    """

    def __init__(self, vocab: Vocabulary):
        from ..bitmask import bool_to_bitmask

        ok = np.zeros(vocab.vocab_size, dtype=bool)
        ok[: vocab.n_tokens] = True
        for i in vocab.special_token_ids:
            ok[i] = False
        self.keep = bool_to_bitmask(ok)
        eos = np.zeros(vocab.vocab_size, dtype=bool)
        eos[list(vocab.eos_token_ids)] = True
        self.eos_row = bool_to_bitmask(eos)
        self.eos_set = frozenset(vocab.eos_token_ids)
        self.n_words = (vocab.vocab_size + 31) // 32
        #: every id of the V allowed (for need_apply)
        self.full = bool_to_bitmask(np.ones(vocab.vocab_size, dtype=bool))

    def sanitise(self, row: np.ndarray, accepting: bool) -> bool:
        """Clear padding/special bits, set EOS iff ``accepting``; return need_apply."""
        np.bitwise_and(row, self.keep, out=row)
        if accepting:
            np.bitwise_or(row, self.eos_row, out=row)
        return bool((row != self.full).any())


class AdapterMatcher(Matcher):
    """Base of the adapter matchers. Subclasses implement the ``_e_*`` engine primitives, which
    never see EOS ids:

    * ``_e_fill(row)``: write the engine's mask for the current state into ``row`` (int32 words);
    * ``_e_accept(token) -> bool``: accept one non-special real token; on False the engine state
      must be unchanged;
    * ``_e_rollback(k)``: undo the last ``k`` engine tokens;
    * ``_e_accepting() -> bool``: the output so far is a complete match;
    * ``_e_reset()``: back to the start state.
    """

    def __init__(self, vocab: Vocabulary, masks: VocabMasks, max_rollback_tokens: int = -1):
        self.vocab = vocab
        self._masks = masks
        self._specials = vocab.special_token_ids
        self._n = vocab.n_tokens
        self._max_rb = int(max_rollback_tokens)
        self._hist: list[bool] = []  # True = engine token, False = EOS
        self._terminated = False

    # -- engine primitives --------------------------------------------------------------------
    @abstractmethod
    def _e_fill(self, row: np.ndarray) -> None: ...

    @abstractmethod
    def _e_accept(self, token: int) -> bool: ...

    @abstractmethod
    def _e_rollback(self, k: int) -> None: ...

    @abstractmethod
    def _e_accepting(self) -> bool: ...

    @abstractmethod
    def _e_reset(self) -> None: ...

    # -- interface ----------------------------------------------------------------------------
    def _fill_row(self, row: np.ndarray) -> bool:
        if self._terminated:
            row[:] = self._masks.eos_row
            return True
        self._e_fill(row)
        return self._masks.sanitise(row, self._e_accepting())

    def advance(self, token_ids: int | Sequence[int]) -> bool:
        ids = self._as_list(token_ids)
        eos = self._masks.eos_set
        if self._terminated:
            return all(t in eos for t in ids)
        n_engine = 0
        n_hist = 0
        terminated = False
        ok = True
        for t in ids:
            if terminated:
                if t in eos:
                    continue
                ok = False
                break
            if t in eos:
                if self._e_accepting():
                    terminated = True
                    self._hist.append(False)
                    n_hist += 1
                    continue
                ok = False
                break
            if t >= self._n or t in self._specials or not self._e_accept(t):
                ok = False
                break
            self._hist.append(True)
            n_hist += 1
            n_engine += 1
        if not ok:
            if n_engine:
                self._e_rollback(n_engine)
            if n_hist:
                del self._hist[-n_hist:]
            return False
        self._terminated = terminated
        if self._max_rb >= 0 and len(self._hist) > 2 * self._max_rb + 64:
            del self._hist[: len(self._hist) - self._max_rb]
        return True

    def validate(self, token_ids: Sequence[int]) -> int:
        """Longest allowed prefix of ``token_ids`` (rule 7); EOS ids after an accepted EOS count
        (rule 4) without entering the history. The state is unchanged."""
        ids = self._as_list(token_ids)
        eos = self._masks.eos_set
        n = pushed = 0
        try:
            for t in ids:
                if self._terminated:
                    if t not in eos:
                        break
                    n += 1
                    continue
                if not self.advance(t):
                    break
                n += 1
                pushed += 1
        finally:
            if pushed:
                self.rollback(pushed)
        return n

    def rollback(self, num_tokens: int) -> None:
        n = int(num_tokens)
        if n < 0:
            raise MatcherStateError(f"rollback count must be >= 0, got {n}")
        if n > len(self._hist):
            raise MatcherStateError(f"cannot roll back {n} tokens: only {len(self._hist)} in the history")
        if n == 0:
            return
        k = sum(self._hist[-n:])
        del self._hist[-n:]
        self._terminated = False  # an EOS, if any, is the last entry: it was popped
        if k:
            self._e_rollback(k)

    def is_accepting(self) -> bool:
        return self._terminated or self._e_accepting()

    def _e_forced_bytes(self) -> bytes | None:
        """The engine's own forced byte string (XGrammar's ``find_jump_forward_string``, llguidance's
        ``compute_ff_bytes``), or None when it has none."""
        return None

    def forced_bytes(self) -> bytes:
        """The engine's forced bytes, checked against the mask: they must agree with the bytes of
        :meth:`forced_tokens` (one a prefix of the other), else the mask's bytes are returned (and
        the longer of the two when they agree)."""
        tb = super().forced_bytes()
        if self._terminated:
            return b""
        eb = self._e_forced_bytes()
        if not eb or not (eb.startswith(tb) or tb.startswith(eb)):
            return tb
        return eb if len(eb) >= len(tb) else tb

    def is_terminated(self) -> bool:
        return self._terminated

    def reset(self) -> None:
        self._e_reset()
        self._hist.clear()
        self._terminated = False


# -- helpers shared by the adapters -------------------------------------------------------------
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


def regex_escape(s: str) -> str:
    """Escape ``s`` for the Rust ``regex`` / XGrammar / Python ``re`` dialects alike (only
    metacharacters are escaped, so no engine sees an escape it does not know)."""
    out = []
    for ch in s:
        if ch in _REGEX_META:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def choice_regex(choices: Sequence[str]) -> str:
    """A regex matching exactly one of ``choices`` (escaped, in order)."""
    return "(" + "|".join(regex_escape(c) for c in choices) + ")"


_SUBSCHEMA_DICTS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_ONE = ("items", "additionalItems", "contains", "not", "if", "then", "else", "propertyNames",
                  "unevaluatedItems")
_SUBSCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf")


def apply_additional_properties_default(schema: Any, value: bool = False) -> Any:
    """Copy of ``schema`` where every schema that lists ``properties`` and says nothing
    about extra keys (no ``additionalProperties`` / ``unevaluatedProperties`` / ``patternProperties``)
    gets ``additionalProperties: value``.

    Branches of ``allOf`` / ``anyOf`` / ``oneOf`` whose parent also lists ``properties`` are left
    alone (closing them would forbid the parent's keys), and so is a parent whose branches may add
    keys of their own; a parent whose branches only add ``required`` (e.g. ``anyOf: [{"required":
    ["a"]}, {"required": ["b"]}]``) is closed. This approximates the policy XGrammar's
    ``strict_mode`` implements as ``unevaluatedProperties: false``.
    """

    def walk(s: Any, in_composed_with_parent_props: bool) -> Any:
        if not isinstance(s, dict):
            return s
        out = dict(s)
        # only schemas that list properties are closed: a bare {"type": "object"} stays any-object
        # (what native, XGrammar's strict_mode and outlines-core do)
        is_obj = isinstance(s.get("properties"), dict)
        if (is_obj and not in_composed_with_parent_props and "additionalProperties" not in s
                and "unevaluatedProperties" not in s and "patternProperties" not in s
                and "$ref" not in s and not _branches_add_keys(s)):
            out["additionalProperties"] = value
        for k in _SUBSCHEMA_DICTS:
            if isinstance(s.get(k), dict):
                out[k] = {kk: walk(vv, False) for kk, vv in s[k].items()}
        for k in _SUBSCHEMA_ONE:
            if isinstance(s.get(k), dict):
                out[k] = walk(s[k], False)
        if isinstance(s.get("additionalProperties"), dict):
            out["additionalProperties"] = walk(s["additionalProperties"], False)
        has_props = "properties" in s
        for k in _SUBSCHEMA_LISTS:
            if isinstance(s.get(k), list):
                out[k] = [walk(x, has_props or k == "allOf") for x in s[k]]
        return out

    try:
        return walk(schema, False)
    finally:
        walk = None  # (recursive: no reference cycle left for the collector, returned or raised)


_KEY_KEYWORDS = ("properties", "patternProperties", "additionalProperties", "unevaluatedProperties", "$ref",
                 "allOf", "anyOf", "oneOf", "if", "then", "else", "dependentSchemas")


def _branches_add_keys(s: dict) -> bool:
    """True if an ``allOf``/``anyOf``/``oneOf`` branch of ``s`` may admit keys of its own (closing
    ``s`` would then forbid them); branches with only ``required`` and the like do not."""
    for k in ("allOf", "anyOf", "oneOf"):
        for b in s.get(k) or ():
            if not isinstance(b, dict) or any(kw in b for kw in _KEY_KEYWORDS):
                return True
    return False


_LOOKAROUND = re.compile(r"\(\?<?[=!]")


def find_lookaround(schema: Any, pointer: str = "") -> tuple[str, int] | None:
    """JSON pointer and offset of the first ``pattern`` / ``patternProperties`` key using a
    look-around (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), or None."""
    if isinstance(schema, dict):
        p = schema.get("pattern")
        if isinstance(p, str):
            m = _LOOKAROUND.search(p)
            if m:
                return f"{pointer}/pattern", m.start()
        pp = schema.get("patternProperties")
        if isinstance(pp, dict):
            for key in pp:
                m = _LOOKAROUND.search(key)
                if m:
                    return f"{pointer}/patternProperties/{key}", m.start()
        for k, v in schema.items():
            if k in ("enum", "const", "default", "examples"):
                continue
            r = find_lookaround(v, f"{pointer}/{k}")
            if r:
                return r
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            r = find_lookaround(v, f"{pointer}/{i}")
            if r:
                return r
    return None


def json_pointer(where: str, *parts: Any) -> str:
    """``where`` extended by ``parts`` (keys or indices), each escaped as RFC 6901 says (``~`` as
    ``~0``, ``/`` as ``~1``)."""
    return where + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def position_of_line_col(text: str, line: int, col: int) -> int:
    """0-based offset of 1-based ``line`` / ``col`` in ``text`` (clamped)."""
    lines = text.split("\n")
    line = max(1, min(line, len(lines)))
    off = sum(len(x) + 1 for x in lines[: line - 1])
    return min(len(text), off + max(0, col - 1))


def schema_text(schema: Any) -> str:
    return json.dumps(schema, ensure_ascii=False)
