"""Emitter for ``string`` values: length bounds in code points, ``pattern``, ``format``, strings
excluded by a folded ``not``; canonical keys that are not one of a list of names."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._automata import from_ast, length_dfa, product, trim
from ._charset import ANY, STRING, json_char_regex, subtract
from ._common import _NOT_STR, _is_num, _ptr
from ._formats import FORMAT_LENGTH
from ._numeric import alt
from ._pattern import parse_pattern, pattern_ast, pattern_body_regex


class StringMixin:
    """Strings (part of ``compiler._Compiler``)."""

    def string(self, schema, where):
        for kw in ("minLength", "maxLength"):
            if kw in schema and not (isinstance(schema[kw], int) and not isinstance(schema[kw], bool)
                                     and schema[kw] >= 0):
                if _is_num(schema[kw]) and float(schema[kw]).is_integer() and schema[kw] >= 0:
                    continue
                raise GrammarSyntaxError(f"{kw} must be a non-negative integer", json.dumps(schema[kw]), 0,
                                         _ptr(where, kw))
        lmin = int(schema.get("minLength", 0))
        lmax = int(schema["maxLength"]) if "maxLength" in schema else None
        if lmax is not None and lmin > lmax:
            return None
        length = None if (lmin == 0 and lmax is None) else (lmin, lmax)
        if schema.get(_NOT_STR):
            if length is not None or "pattern" in schema:
                raise UnsupportedFeatureError("not", "not enum of strings together with a length bound or "
                                              "pattern", _ptr(where, "not"))
            return _key_not_in(schema[_NOT_STR])
        if "pattern" in schema:
            w = _ptr(where, "pattern")
            branches = parse_pattern(schema["pattern"], w)
            try:
                body = pattern_body_regex(branches, length, w)
            except UnsupportedFeatureError as e:
                if e.feature != "pattern with minLength/maxLength":
                    raise
                body = self._pattern_with_length(schema["pattern"], branches, lmin, lmax, w)
            return None if body is None else f'"{body}"'
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in self.formats:
            flen = FORMAT_LENGTH.get(fmt)
            if length is None or (flen and lmin <= flen[0] and (lmax is None or flen[1] <= lmax)):
                return f'"{self.formats[fmt]}"'
            # format is an annotation in 2020-12: with a length bound we cannot intersect, drop it
        char = json_char_regex(ANY)
        if length is None:
            return STRING
        if lmax is None:
            q = "*" if lmin == 0 else ("+" if lmin == 1 else f"{{{lmin},}}")
        elif lmin == lmax:
            q = f"{{{lmin}}}"
        else:
            q = f"{{{lmin},{lmax}}}"
        if lmax == 0:
            return '""'
        return f'"(?:{char}){q}"'

    def _pattern_with_length(self, pattern: str, branches, lmin: int, lmax: int | None, where: str) -> str | None:
        """String bodies whose decoded value matches ``pattern`` and has ``lmin``..``lmax`` code
        points (exact): the product of the pattern's code-point automaton with a counter
        (:func:`._automata.length_dfa`), bounded by ``options.extra["max_product_states"]``, each
        symbol written in every JSON spelling (lone surrogates excluded, as under any length bound)."""
        key = ("pattern-length", pattern, lmin, lmax)
        if key in self._dfa_texts:
            return self._dfa_texts[key]
        what, cap = "pattern with minLength/maxLength", self.max_product_states
        d = from_ast(pattern_ast(branches), max_states=cap, what=what, where=where)
        d = trim(product(d, length_dfa(lmin, lmax), max_states=cap, what=what, where=where))
        out = self._emit_dfa(d, json_char_regex, what, where)
        self._dfa_texts[key] = out
        return out


def _key_not_in(names: list[str]) -> str:
    """Canonically encoded JSON strings (quotes included) whose decoded value is not in names."""
    trie: dict = {}
    for n in names:
        node = trie
        for ch in n:
            node = node.setdefault(ch, {})
        node[None] = True
    tail = KEY_TAIL  # any canonical characters, then the closing quote

    def rec(node) -> str:
        # every branch ends the string itself, so the open-ended branches all end in the same
        # KEY_TAIL text: the native backend matches it through one shared rule
        parts = []
        chars = [c for c in node if c is not None]
        other = subtract(ANY, tuple((ord(c), ord(c)) for c in sorted(chars)))
        o = json_char_regex(tuple(sorted(set(other))), escapes=False) if other else None
        if o is not None:
            parts.append(f"{o}{tail}")
        for c in chars:
            enc = json_char_regex(((ord(c), ord(c)),), escapes=False)
            if enc is not None:  # a lone surrogate in a name has no canonical spelling
                parts.append(enc + rec(node[c]))
        if None not in node:  # not a listed name: the string may end here
            parts.append('"')
        return alt(parts) if parts else "(?!)"

    return '"' + rec(trie)


#: the end of a JSON string in canonical spelling: any characters, then the closing quote
KEY_TAIL = f'(?:{json_char_regex(ANY, escapes=False)})*"'
