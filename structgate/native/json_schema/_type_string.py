"""Emitter for ``string`` values: length bounds in code points, ``pattern``, ``format``, strings
excluded by a folded ``not``; canonical keys that are not one of a list of names."""
from __future__ import annotations

import json
from functools import lru_cache

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ..regex.parser import parse_regex
from ._automata import (CPDFA, complement, from_ast, length_dfa, length_shape, limit_error, literals_ast, matches,
                        minimize, product, trim)
from ._charset import ANY, STRING, json_char_regex, subtract
from ._common import _NOT_PATTERNS, _NOT_STR, _PATTERNS, _is_num, _is_whole, _ptr
from ._formats import (EMAIL_LOCAL, ENCODED_FORMATS, FORMAT_LENGTH, FORMAT_MAX_LENGTH, email_domain_subset,
                       email_subset_shape, format_length_implied, hostname_subset)
from ._numeric import alt
from ._pattern import parse_pattern, pattern_ast, pattern_body_regex


class StringMixin:
    """Strings (part of ``compiler._Compiler``)."""

    def string(self, schema, where):
        for kw in ("minLength", "maxLength"):
            if kw in schema and not (isinstance(schema[kw], int) and not isinstance(schema[kw], bool)
                                     and schema[kw] >= 0):
                if _is_num(schema[kw]) and _is_whole(schema[kw]) and schema[kw] >= 0:
                    continue
                raise GrammarSyntaxError(f"{kw} must be a non-negative integer", json.dumps(schema[kw]), 0,
                                         _ptr(where, kw))
        lmin = int(schema.get("minLength", 0))
        lmax = int(schema["maxLength"]) if "maxLength" in schema else None
        if lmax is not None and lmin > lmax:
            return None
        length = None if (lmin == 0 and lmax is None) else (lmin, lmax)
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in self.refused_formats:
            raise self.refused_format(fmt, _ptr(where, "format"))
        if not (isinstance(fmt, str) and fmt in self.formats):
            fmt = None  # not asserted: an annotation (unknown, or lenient)
        not_names, not_patterns = schema.get(_NOT_STR) or [], schema.get(_NOT_PATTERNS) or []
        if not_names and length is None and "pattern" not in schema and not not_patterns:
            if fmt is not None:
                return self._format_not_in(fmt, not_names, _ptr(where, "not"))
            return self.key_not_in(not_names)
        cap = FORMAT_MAX_LENGTH.get(fmt) if fmt is not None else None
        if cap is not None and (lmax is None or lmax > cap):  # the format's own bound (hostname: 253)
            if lmin > cap:
                return None
            lmax, length = cap, (lmin, cap)
        if len(schema.get(_PATTERNS) or ()) > 1 or not_names or not_patterns:
            pats = schema.get(_PATTERNS) or ([schema["pattern"]] if "pattern" in schema else [])
            body = self._patterns_with(pats, fmt, lmin, lmax, _ptr(where, "pattern" if pats else "not"),
                                       not_patterns=not_patterns, not_names=not_names)
            return None if body is None else f'"{body}"'
        if "pattern" in schema:
            w = _ptr(where, "pattern")
            branches = parse_pattern(schema["pattern"], w)
            if fmt is not None:
                body = self._patterns_with([schema["pattern"]], fmt, lmin, lmax, w)
                return None if body is None else f'"{body}"'
            try:
                body = pattern_body_regex(branches, length, w)
            except UnsupportedFeatureError as e:
                if e.feature != "pattern with minLength/maxLength":
                    raise
                body = self._patterns_with([schema["pattern"]], None, lmin, lmax, w)
            return None if body is None else f'"{body}"'
        if fmt is not None:
            wf = _ptr(where, "format")
            if length is None or format_length_implied(fmt, lmin, lmax):
                return self.string_body_rule(self._format_body(fmt, wf), wf)
            return self.string_body_rule(self._format_with_length(fmt, lmin, lmax, wf), wf)
        char = json_char_regex(ANY)
        if length is None:
            return self.any_string
        if lmax is None:
            q = "*" if lmin == 0 else ("+" if lmin == 1 else f"{{{lmin},}}")
        elif lmin == lmax:
            q = f"{{{lmin}}}"
        else:
            q = f"{{{lmin},{lmax}}}"
        if lmax == 0:
            return '""'
        return self.string_rule(f"__json_string_{lmin}_{'' if lmax is None else lmax}", f'"(?:{char}){q}"')

    def _format_dfa(self, fmt: str, what: str, where: str):
        """The code-point automaton of ``format`` ``fmt``'s regex, trimmed and minimal
        (``max_product_states`` states at most, else ``CompileLimitError`` naming ``what`` and
        ``where``). Built once per process (:data:`_FORMAT_DFAS`): the automata are never changed
        in place, and ``hostname`` (its length product, for the 253-character bound) reaches it on
        every compile."""
        key = (self.formats[fmt], self.max_product_states)
        d = _FORMAT_DFAS.get(key)
        if d is None:
            d = minimize(trim(from_ast(_format_ast(key[0]), max_states=key[1], what=what, where=where)))
            d.minimal = True  # (read by _refs.RefsMixin._length_product: not minimised again)
            _FORMAT_DFAS[key] = d
        return d

    def _format_body(self, fmt: str, where: str) -> str | None:
        """The JSON text (between the quotes) of the strings of ``format`` ``fmt``: its regex itself,
        or for :data:`._formats.ENCODED_FORMATS` (characters JSON escapes, non-ASCII ones) its
        code-point automaton written in every JSON spelling of each character (as a ``pattern``
        is), so a ``"`` inside a JSON Pointer is ``\\"`` and an astral character in a URI template
        may be a surrogate-pair escape."""
        if fmt not in ENCODED_FORMATS:
            return self.formats[fmt]
        key = ("format-body", fmt)
        if key not in self._dfa_texts:
            what = f"format {fmt!r}"
            d = self._format_dfa(fmt, what, where)
            self._dfa_texts[key] = self._emit_dfa(trim(d), json_char_regex, what, where)
        return self._dfa_texts[key]

    def _format_with_length(self, fmt: str, lmin: int, lmax: int | None, where: str) -> str | None:
        """String bodies of ``format`` ``fmt`` with ``lmin``..``lmax`` code points, ``where`` = the
        ``format`` keyword's pointer (the bound is not implied by :data:`._formats.FORMAT_LENGTH`).

        Exact where it fits: the product of the format regex's code-point automaton with a counter
        (as :meth:`_patterns_with`; bounded by ``max_product_states``, written inline or as
        at most ``max_automaton_rules`` rules), in canonical spelling like the unbounded format.
        Beyond those limits, ``email`` and ``hostname`` with ``minLength`` at most their shortest
        string (5, 1) become a documented **sound subset** whose longest string meets ``maxLength``
        (:meth:`_format_length_subset`); any other format or bound re-raises the
        :class:`~structgate.errors.CompileLimitError` (its hint names ``format`` and ``where``):
        the format is never dropped."""
        key = ("format-length", fmt, lmin, lmax)
        if key in self._dfa_texts:
            return self._dfa_texts[key]
        what = f"format {fmt!r} with minLength/maxLength"
        try:
            d = self._format_dfa(fmt, what, where)
            out = self._length_product(d, lmin, lmax, _canonical_char, what, where)
        except CompileLimitError:
            if lmax is None or fmt not in ("email", "hostname") or lmin > FORMAT_LENGTH[fmt][0]:
                raise
            out = self._format_length_subset(fmt, lmax, where)
        self._dfa_texts[key] = out
        return out

    def _format_length_subset(self, fmt: str, lmax: int, where: str) -> str | None:
        """The sound subset of ``email`` / ``hostname`` under ``maxLength`` ``lmax`` (used when the
        exact product is over the limits; ``minLength`` is at most the format's shortest string):

        * ``hostname``: 1..K labels of 1..b characters, ``K*(b+1) - 1 <= lmax``
          (:func:`._formats.hostname_subset`; 253, the most :meth:`string` passes, → 4 labels of 62);
        * ``email``: a dot-atom local part of 1..a characters (exact: its product with a counter),
          ``@``, 2..K labels of 1..b characters, ``a + K*(b+1) <= lmax``
          (:func:`._formats.email_subset_shape`; 1024 → a = 64, 15 labels of 63; 255 → a = 63,
          4 labels of 47).

        Every string has at most ``lmax`` code points and is in the format, so every accepted
        instance is valid; valid instances with more labels, longer labels or a longer local part
        (that still fit ``lmax``) are not generated."""
        if fmt == "hostname":
            return hostname_subset(lmax)
        shape = email_subset_shape(lmax)
        if shape is None:
            return None
        a, k, b = shape
        what, cap = "format 'email' local part with maxLength", self.max_product_states
        d = from_ast(_format_ast(EMAIL_LOCAL), max_states=cap, what=what, where=where)
        local = self._emit_dfa(trim(product(d, length_dfa(1, a, max_states=cap, what=what, where=where), max_states=cap, what=what, where=where)),
                               _canonical_char, what, where)
        return f"(?:{local})@{email_domain_subset(k, b)}"

    def _format_not_in(self, fmt: str, names: list[str], where: str) -> str | None:
        """JSON strings (quotes included) of ``format`` ``fmt`` whose value is not in ``names`` (a
        folded ``not`` of string ``enum``/``const``): exact, the format's automaton times the
        complement of the names', in canonical spelling (as :func:`_key_not_in`); names outside the
        format are left out (none left: the format's own regex); a format's own length bound
        (:data:`._formats.FORMAT_MAX_LENGTH`) is intersected as :meth:`_length_product`. Bounded like every product (the
        ``email`` automaton alone has 252 states: with a name in it, more than the default
        ``max_automaton_rules`` in ``schema_to_grammar``, a typed CompileLimitError)."""
        key = ("format-not-in", fmt, tuple(names))
        if key not in self._dfa_texts:
            what, cap = f"format {fmt!r} with not", self.max_product_states
            d = self._format_dfa(fmt, what, where)
            top = FORMAT_MAX_LENGTH.get(fmt)
            # the others the format excludes already
            names = [n for n in names if matches(d, n) and (top is None or len(n) <= top)]
            if not names:
                self._dfa_texts[key] = (self._format_body(fmt, where) if top is None
                                        else self._format_with_length(fmt, 0, top, where))
            else:
                d = product(d, complement(from_ast(literals_ast(names), max_states=cap, what=what, where=where)),
                            max_states=cap, what=what, where=where)
                self._dfa_texts[key] = (self._emit_dfa(trim(d), _canonical_char, what, where) if top is None
                                        else self._length_product(d, 0, top, _canonical_char, what, where))
        body = self._dfa_texts[key]
        return None if body is None else f'"{body}"'

    def _patterns_with(self, patterns: list[str], fmt: str | None, lmin: int, lmax: int | None,
                       where: str, not_patterns=(), not_names=()) -> str | None:
        """String bodies (between the quotes) matching every pattern of ``patterns`` (one, or
        ``allOf`` members with different ``pattern``s, :meth:`._merge.MergeMixin.merge`), format
        ``fmt`` (None: no asserted format) and ``lmin``..``lmax`` code points — what
        :func:`._pattern.pattern_body_regex` cannot write as one regex. Exact: the product of their
        code-point automata (smallest first, each step trimmed and minimised), the format's, and a
        counter (:meth:`_length_product`); a pattern that is only a length bound over one set
        (``^.{60}$``, :func:`._automata.length_shape`) joins the counter instead of multiplying the
        states. Each symbol in every JSON spelling, canonical with a format (as the unbounded
        format regexes are). ``not_patterns`` (a folded ``not {pattern: P}``) and ``not_names`` (a
        folded ``not`` of string ``enum``/``const``) intersect the complements of their automata:
        the value, decoded, matches none of them (a pattern read as what *either* ECMA-262 or
        Python's ``re`` matches, so a string the two readings dispute is left out: sound for both). ``where`` = the (merged) schema's ``pattern``
        pointer (``not`` without a pattern).

        Raises
        ------
        CompileLimitError
            ``max_product_states`` / ``max_automaton_rules``, its hint naming the patterns (and
            the format) and ``where``."""
        key = ("patterns", tuple(patterns), fmt, lmin, lmax, tuple(not_patterns), tuple(not_names))
        if key in self._dfa_texts:
            return self._dfa_texts[key]
        what = (f"{len(patterns)} patterns of allOf members" if len(patterns) > 1
                else f"pattern with format {fmt!r}" if patterns and fmt is not None
                else "pattern with minLength/maxLength" if patterns else "not")
        if (len(patterns) > 1 or not patterns) and fmt is not None:
            what += f" with format {fmt!r}"
        if patterns and (not_patterns or not_names):
            what += " and not"
        cap = self.max_product_states
        # the states one step visits (a pattern's subset construction, a product's pairs) may be
        # far more than what is left once it is trimmed and minimised: the construction is bounded
        # at PRODUCT_VISIT_FACTOR x the limit, each automaton kept at the limit
        visit = cap * PRODUCT_VISIT_FACTOR

        # each pattern's minimal automaton once per compile (the branches of a oneOf or an anyOf
        # of not patterns meet the same ones: MaskBench Handwritten---string5 built 15 for 7)
        memo = self.__dict__.setdefault("_minimal_patterns", {})

        def minimal(key, node):
            if key not in memo:
                a = trim(from_ast(node(), max_states=visit, what=what, where=where))
                memo[key] = None if a is None else minimize(a)
            return memo[key]

        def held(a):
            if len(a.delta) > cap:
                raise limit_error("max_product_states", len(a.delta), cap, what, where)
            return a

        autos = []
        for pat in patterns:
            a = minimal((pat, False, visit), lambda: pattern_ast(parse_pattern(pat, where)))
            if a is None:
                self._dfa_texts[key] = None
                return None
            shape = length_shape(a)
            if shape is not None:  # a length bound spelled as a pattern: the counter, never a factor
                a, plmin, plmax = shape
                lmin = max(lmin, plmin)
                lmax = plmax if lmax is None else (lmax if plmax is None else min(lmax, plmax))
                if lmax is not None and lmin > lmax:
                    self._dfa_texts[key] = None
                    return None
            autos.append(held(a))
        excluded = [minimal(("names", tuple(not_names), visit), lambda: literals_ast(list(not_names)))] if not_names else []
        # an excluded pattern is read as what either ECMA-262 or Python's re matches (a superset;
        # ``$`` also before a final newline): no string either reading excludes is generated
        excluded += [minimal((pat, True, visit), lambda: pattern_ast(parse_pattern(pat, where, upper=True), upper=True))
                     for pat in not_patterns]
        for a in excluded:
            if a is None:  # (a pattern that matches nothing excludes nothing)
                continue
            a = trim(complement(a))
            if a is None:  # every string excluded (a pattern such as "" matches them all)
                self._dfa_texts[key] = None
                return None
            autos.append(held(minimize(a)))
        if not autos:
            autos.append(CPDFA([ANY], [[0]], [True]))
        # smallest automata first, each intermediate product trimmed and minimised (what is left of
        # a product of unanchored patterns is often far smaller than the pairs it visits)
        autos.sort(key=lambda a: len(a.delta))
        d = autos[0]
        for a in autos[1:]:
            d = trim(product(d, a, max_states=visit, what=what, where=where))
            if d is None:
                self._dfa_texts[key] = None
                return None
            d = held(minimize(d))
        enc = json_char_regex
        if fmt is not None:
            d = product(d, self._format_dfa(fmt, what, where), max_states=cap, what=what, where=where)
            enc = _canonical_char
        if fmt is not None and format_length_implied(fmt, lmin, lmax):
            t = trim(d)
            out = None if t is None else self._emit_dfa(t, enc, what, where)
        else:
            out = self._length_product(d, lmin, lmax, enc, what, where)
        self._dfa_texts[key] = out
        return out


#: the pairs one step of a patterns product may visit, as a multiple of ``max_product_states`` (the
#: minimised automaton it leaves is held to the limit itself): MaskBench ``Handwritten---string5``
#: visits 16,810 pairs for a product whose minimal automaton is far smaller
PRODUCT_VISIT_FACTOR = 8

#: (format regex, max_product_states) -> its trimmed, minimal automaton (:meth:`StringMixin._format_dfa`)
_FORMAT_DFAS: dict = {}


@lru_cache(maxsize=None)
def _format_ast(regex: str):
    """Code-point AST of a :data:`._formats.FORMAT_REGEX` text (Python ``re`` spelling, which the
    engine's regex parser reads: classes, ``(?:..)``, ``{m,n}``, escaped ``.`` and ``-``)."""
    return parse_regex(regex)


def _canonical_char(cs):
    """One code point of ``cs`` in its canonical JSON spelling (every format character is printable
    ASCII other than ``"`` and ``\\``: written plainly, as the unbounded format regexes are)."""
    return json_char_regex(cs, escapes=False)


def names_trie(names) -> dict:
    """The character trie of ``names``: nested dicts by character, ``None: True`` where a name ends."""
    trie: dict = {}
    for n in names:
        node = trie
        for ch in n:
            node = node.setdefault(ch, {})
        node[None] = True
    return trie


def _key_not_in(names: list[str]) -> str:
    """Canonically encoded JSON strings (quotes included) whose decoded value is not in names."""
    trie = names_trie(names)
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

    try:
        return '"' + rec(trie)
    finally:
        rec = None  # (recursive: no reference cycle left for the collector, returned or raised)


#: the end of a JSON string in canonical spelling: any characters, then the closing quote
KEY_TAIL = f'(?:{json_char_regex(ANY, escapes=False)})*"'
