"""JSON Schema ``pattern`` (ECMA-262 regex) → regex over the JSON-*encoded* string body.

A ``pattern`` constrains the decoded string value and is an unanchored search (JSON Schema
2020-12 §6.3.3). We parse the ECMAScript pattern into a small AST over decoded code points, then
emit each character set as :func:`~._charset.json_char_regex` (so ``\\S`` can produce ``\\"`` but
never a raw ``"``), and add ``(?:any char)*`` on each side that is not anchored.

Semantics chosen to be *sound for both* ECMAScript and Python ``re`` (the ``jsonschema`` oracle):
every escape has a lower set (what both dialects match) and an upper set (what either matches);
a positive class uses the lower sets and a negated class the complement of the upper sets.
``\\d`` = ``[0-9]``, ``\\w`` = ``[A-Za-z0-9_]``, ``\\s`` = ECMAScript white space ∩ Python's, ``.``
excludes ``\\n \\r \\u2028 \\u2029``.

Unsupported (raise :class:`UnsupportedFeatureError`): lookaround, backreferences, ``\\b``/``\\B``,
``\\p{..}``, anchors other than a leading ``^`` / trailing ``$`` of a top-level alternative, and the
escapes the two dialects read differently on every string: an escaped surrogate pair
``\\uD83D\\uDE00`` (one character in ECMA-262, two lone surrogates in ``re``) and ``\\u{...}`` (a code
point in ECMA-262's u-mode only, an error in ``re``). Where only ``re`` refuses a construct ECMA-262
reads one way (``\\cX``, named groups ``(?<n>...)``), the ECMA-262 reading is taken.
Malformed patterns raise :class:`GrammarSyntaxError` with ``where`` = the keyword's JSON pointer.
"""
from __future__ import annotations

import re
import sys
from functools import lru_cache

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._charset import ANY, CharSet, complement, intersect, json_char_regex, normalize, union
from ._common import MAX_COUNT

__all__ = ["parse_pattern", "pattern_body_regex", "pattern_ast", "ast_length_bounds", "INF"]

INF = sys.maxsize

# AST: ("set", lower) | ("cat", tuple) | ("alt", tuple) | ("rep", node, min, max|INF) | ("bol",) | ("eol",)

_DIGIT = ((0x30, 0x39),)
_WORD = normalize([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
_ECMA_SPACE = normalize([(9, 13), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                         (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
                         (0xFEFF, 0xFEFF)])
_LINE_TERM = normalize([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])


@lru_cache(maxsize=None)
def _py_unicode_sets() -> tuple[CharSet, CharSet, CharSet]:
    """(Python ``\\d``, ``\\w``, ``\\s`` for str patterns), computed once by running those
    escapes of Python's own ``re`` over every code point (one string of all 0x110000, surrogates
    included): the runs it matches are the ranges, so the sets are ``re``'s by construction, in
    ~0.1 s instead of the ~1 s a per-code-point predicate loop takes."""
    import numpy as np

    every = np.arange(0x110000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    return tuple(normalize([(m.start(), m.end() - 1) for m in re.finditer(esc + "+", every)])
                 for esc in (r"\d", r"\w", r"\s"))


def _escape_sets(letter: str) -> tuple[CharSet, CharSet]:
    """(lower, upper) sets of a class escape."""
    if letter in "dD":
        lo, up = _DIGIT, None
        idx = 0
    elif letter in "wW":
        lo, up = _WORD, None
        idx = 1
    else:
        lo, up = None, None
        idx = 2
    if letter in "dw":
        return lo, union(lo, _py_unicode_sets()[idx])
    if letter == "s":
        py = _py_unicode_sets()[2]
        return intersect(_ECMA_SPACE, py), union(_ECMA_SPACE, py)
    # negated escapes: lower = complement(upper of positive), upper = complement(lower of positive)
    plo, pup = _escape_sets(letter.lower())
    return complement(pup), complement(plo)


class _Parser:
    def __init__(self, pattern: str, where: str | None, upper: bool = False):
        self.p = pattern
        self.i = 0
        self.where = where
        #: build the *upper* sets (what either dialect matches) instead of the lower ones: a superset
        #: of the pattern's strings, for proofs that two patterns share no string (oneOf)
        self.upper = upper

    def err(self, msg: str, pos: int | None = None):
        raise GrammarSyntaxError(f"invalid pattern: {msg}", self.p, self.i if pos is None else pos,
                                 self.where)

    def unsupported(self, feature: str, pos: int | None = None):
        pos = self.i if pos is None else pos
        raise UnsupportedFeatureError(feature, f"in pattern {self.p!r} at position {pos}", self.where,
                                      text=self.p, position=pos)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def parse(self):
        node = self.alternation()
        if self.i < len(self.p):
            self.err("unbalanced ')'")
        return node

    def alternation(self):
        branches = [self.concat()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.concat())
        return branches[0] if len(branches) == 1 else ("alt", tuple(branches))

    def concat(self):
        items = []
        while self.i < len(self.p) and self.peek() not in "|)":
            items.append(self.quantified())
        return items[0] if len(items) == 1 else ("cat", tuple(items))

    def quantified(self):
        start = self.i
        atom = self.atom()
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                lo, hi = {"*": (0, INF), "+": (1, INF), "?": (0, 1)}[c]
                self.i += 1
            elif c == "{":
                q = self._brace_quantifier()
                if q is None:
                    break
                lo, hi = q
            else:
                break
            if atom[0] in ("bol", "eol"):
                self.err("nothing to repeat", start)
            if self.peek() == "?":  # lazy: same language
                self.i += 1
            atom = ("rep", atom, lo, hi)
            if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._looks_quantifier()):
                self.err("nothing to repeat")
        return atom

    def _looks_quantifier(self) -> bool:
        save = self.i
        try:
            return self._brace_quantifier() is not None
        finally:
            self.i = save

    def _check_repeat(self, n: int, pos: int) -> None:
        """A repeat count past :data:`._common.MAX_COUNT` (the regex parser's bound, as Python's
        re's), which the generated regex shares: the error at the pattern's own position, not
        inside the generated text."""
        if n > MAX_COUNT:
            self.err("the repetition number is too large", pos)

    def _brace_quantifier(self):
        """Parse {m}, {m,}, {m,n} at self.i; None (position unchanged) if not a quantifier."""
        j = self.i + 1
        p = self.p
        k = j
        while k < len(p) and p[k].isdigit() and p[k].isascii():
            k += 1
        if k == j:
            if k < len(p) and p[k] == ",":
                m = k + 1
                while m < len(p) and p[m].isdigit() and p[m].isascii():
                    m += 1
                if m < len(p) and p[m] == "}":
                    # ECMA-262 reads `{,n}` as literal text, Python's re (which validators such as
                    # `jsonschema` use) as a repeat {0,n}: no meaning both agree on.
                    self.unsupported("quantifier {,n} (literal in ECMA-262, a repeat in Python re)")
            return None
        lo = int(p[j:k])
        if k < len(p) and p[k] == "}":
            self._check_repeat(lo, j)
            self.i = k + 1
            return lo, lo
        if k >= len(p) or p[k] != ",":
            return None
        k += 1
        m = k
        while m < len(p) and p[m].isdigit() and p[m].isascii():
            m += 1
        if m >= len(p) or p[m] != "}":
            return None
        hi = int(p[k:m]) if m > k else INF
        if hi < lo:
            self.err("numbers out of order in {} quantifier", self.i)
        self._check_repeat(lo, j)
        if hi != INF:
            self._check_repeat(hi, k)
        self.i = m + 1
        return lo, hi

    def atom(self):
        c = self.peek()
        if c == "":
            self.err("unexpected end of pattern")
        if c == "(":
            return self.group()
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            self.i += 1
            return ("set", complement(((0x0A, 0x0A),) if self.upper else _LINE_TERM))  # Python: all but \n
        if c == "^":
            self.i += 1
            return ("bol",)
        if c == "$":
            self.i += 1
            return ("eol",)
        if c in "*+?":
            self.err("nothing to repeat")
        if c == "{" and self._looks_quantifier():
            self.err("nothing to repeat")
        if c == "\\":
            return self.escape_atom()
        if c == ")":
            self.err("unbalanced ')'")
        self.i += 1
        cp = ord(c)
        return ("set", ((cp, cp),))

    def group(self):
        start = self.i
        self.i += 1
        if self.peek() == "?":
            nxt = self.peek(1)
            if nxt == ":":
                self.i += 2
            elif nxt in ("=", "!"):
                self.unsupported("lookahead (?=...)/(?!...)", start)
            elif nxt == "<" and self.peek(2) in ("=", "!"):
                self.unsupported("lookbehind (?<=...)/(?<!...)", start)
            elif nxt == "<":
                end = self.p.find(">", self.i)
                name = self.p[self.i + 2:end] if end > 0 else ""
                if end < 0 or not name or not (name[0].isalpha() or name[0] in "_$") or \
                        not all(ch.isalnum() or ch in "_$" for ch in name):
                    self.err("invalid group name")
                self.i = end + 1
            else:
                self.err("invalid group")
        node = self.alternation()
        if self.peek() != ")":
            self.err("missing ')'", start)
        self.i += 1
        return node

    def _hex(self, n: int) -> int:
        s = self.p[self.i:self.i + n]
        if len(s) != n or not all(ch in "0123456789abcdefABCDEF" for ch in s):
            self.err(f"expected {n} hex digits")
        self.i += n
        return int(s, 16)

    def _escape_cp(self, in_class: bool):
        """Parse after a backslash; return a CharSet (lower) and upper set, advancing."""
        c = self.peek()
        if c == "":
            self.err("pattern ends with a backslash")
        self.i += 1
        if c in "dDwWsS":
            return _escape_sets(c)
        simple = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
        if c in simple:
            s = ((simple[c],) * 2,)
            return s, s
        if c == "b":
            if in_class:
                return ((8, 8),), ((8, 8),)
            self.unsupported("word boundary \\b", self.i - 2)
        if c == "B":
            self.unsupported("word boundary \\B", self.i - 2)
        if c == "0" and not self.peek().isdigit():
            return ((0, 0),), ((0, 0),)
        if c.isdigit():
            self.unsupported("backreference or octal escape \\" + c, self.i - 2)
        if c == "x":
            cp = self._hex(2)
            return ((cp, cp),), ((cp, cp),)
        if c == "u":
            if self.peek() == "{":
                # a code point in ECMA-262's u-mode, but "u" repeated in its default mode (Annex B),
                # and an error in Python's re: no one reading
                self.unsupported("code point escape \\u{...} (a code point only in ECMA-262's u-mode; an "
                                 "error in Python re)", self.i - 2)
            cp = self._hex(4)
            if 0xD800 <= cp <= 0xDBFF and re.match(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}", self.p[self.i:self.i + 6]):
                # \uD83D\uDE00 is one character (U+1F600) in ECMA-262 but two lone surrogates in Python's
                # re, which no decoded JSON string holds (the decoder joins an escaped pair): the two
                # dialects disagree on every string, so neither reading is sound for the other
                self.unsupported("surrogate pair escape \\uD8xx\\uDCxx (one character in ECMA-262, two lone "
                                 "surrogates in Python re); write the character itself", self.i - 6)
            return ((cp, cp),), ((cp, cp),)
        if c == "c":
            # control escape: ECMA-262 reads it alike in both modes; Python's re refuses it (so
            # validators raise, and no reading of theirs is contradicted)
            l = self.peek()
            if l.isascii() and l.isalpha():
                self.i += 1
                cp = ord(l) % 32
                return ((cp, cp),), ((cp, cp),)
            self.err("invalid \\c escape")
        if c in "pP":
            self.unsupported("Unicode property escape \\p{...}", self.i - 2)
        if c == "k":
            self.unsupported("named backreference \\k<...>", self.i - 2)
        if c.isascii() and c.isalnum():
            self.err(f"unknown escape \\{c}", self.i - 2)
        if c == "-" and not in_class:
            # identity escape of '-' is valid in both dialects outside a class too
            pass
        cp = ord(c)  # identity escape: \! \. \/ \- ...
        return ((cp, cp),), ((cp, cp),)

    def escape_atom(self):
        self.i += 1
        lo, up = self._escape_cp(in_class=False)
        return ("set", up if self.upper else lo)

    def char_class(self):
        start = self.i
        self.i += 1
        negate = False
        if self.peek() == "^":
            negate = True
            self.i += 1
        lower: list = []
        upper: list = []
        first = True
        while True:
            c = self.peek()
            if c == "":
                self.err("unterminated character class", start)
            if c == "]" and not first:
                self.i += 1
                break
            if c == "]" and first:
                # ECMAScript: [] is the empty class, [^] any character; Python's re (which validators
                # such as jsonschema use) reads that ] as a literal member: refused, like {,n}
                self.unsupported("character class [] / [^] (empty / any in ECMA-262, a literal ] in Python re)")
            first = False
            a_pos = self.i  # a range's errors point at its start, as Python's re does
            a_lo, a_up, a_single = self._class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                b_lo, b_up, b_single = self._class_atom()
                if a_single is None or b_single is None:
                    self.err("invalid character class range (class escape as endpoint)", a_pos)
                if a_single > b_single:
                    self.err("character class range out of order", a_pos)
                lower.append(((a_single, b_single),))
                upper.append(((a_single, b_single),))
            else:
                lower.append(a_lo)
                upper.append(a_up)
        lo = union(*lower) if lower else ()
        up = union(*upper) if upper else ()
        if negate:
            return complement(lo if self.upper else up)
        return up if self.upper else lo

    def _class_atom(self):
        c = self.peek()
        if c == "\\":
            self.i += 1
            lo, up = self._escape_cp(in_class=True)
            single = lo[0][0] if len(lo) == 1 and lo[0][0] == lo[0][1] and lo == up else None
            return lo, up, single
        self.i += 1
        cp = ord(c)
        return ((cp, cp),), ((cp, cp),), cp


def parse_pattern(pattern: str, where: str | None = None, upper: bool = False):
    """Parse an ECMA-262 pattern into ``(ast, anchored_start, anchored_end)`` per top-level branch.

    ``upper=True`` builds every character set as what *either* dialect matches (a superset of the
    pattern's strings; see :func:`pattern_ast` for ``$``), for disjointness proofs; the default
    lower sets (what both match) are the sound subset the emitters use.

    Returns
    -------
    list[tuple[node, bool, bool]]
        One entry per top-level alternative: the branch AST without its leading ``^`` / trailing
        ``$``, and whether each side was anchored.

    Raises
    ------
    GrammarSyntaxError
        Malformed pattern (unbalanced group, bad escape, bad quantifier, ...).
    UnsupportedFeatureError
        Lookaround, backreferences, word boundaries, ``\\p{}``, anchors in the middle.
    """
    if not isinstance(pattern, str):
        raise GrammarSyntaxError("pattern must be a string", repr(pattern), 0, where)
    parser = _Parser(pattern, where, upper)
    ast = parser.parse()
    branches = ast[1] if ast[0] == "alt" else (ast,)
    out = []
    for b in branches:
        items = list(b[1]) if b[0] == "cat" else [b]
        a_start = a_end = False
        while items and items[0] == ("bol",):
            items.pop(0)
            a_start = True
        while items and items[-1] == ("eol",):
            items.pop()
            a_end = True
        node = ("cat", tuple(items))
        if _has_anchor(node):
            raise UnsupportedFeatureError("anchor ^/$ inside a pattern",
                                          f"only a leading ^ and trailing $ are supported: {pattern!r}",
                                          where)
        out.append((node, a_start, a_end))
    return out


def _has_anchor(node) -> bool:
    k = node[0]
    if k in ("bol", "eol"):
        return True
    if k in ("cat", "alt"):
        return any(_has_anchor(n) for n in node[1])
    if k == "rep":
        return _has_anchor(node[1])
    return False


def ast_length_bounds(node) -> tuple[int, int]:
    """(min, max) decoded length of the strings ``node`` matches (max may be INF)."""
    k = node[0]
    if k == "set":
        return (1, 1) if node[1] else (INF, 0)  # empty set: impossible
    if k == "cat":
        lo = hi = 0
        for n in node[1]:
            a, b = ast_length_bounds(n)
            lo = min(INF, lo + a)
            hi = INF if (hi == INF or b == INF) else hi + b
        return lo, hi
    if k == "alt":
        bs = [ast_length_bounds(n) for n in node[1]]
        return min(b[0] for b in bs), max(b[1] for b in bs)
    if k == "rep":
        a, b = ast_length_bounds(node[1])
        if a == INF:  # impossible inner
            return (0, 0) if node[2] == 0 else (INF, 0)
        lo = min(INF, a * node[2])
        hi = INF if (node[3] == INF and b > 0) or b == INF else b * (node[3] if node[3] != INF else 0)
        return lo, hi
    return 0, 0


def _emit(node) -> str | None:
    k = node[0]
    if k == "set":
        r = json_char_regex(node[1])
        return None if r is None else r
    if k == "cat":
        out = []
        for n in node[1]:
            r = _emit(n)
            if r is None:
                return None
            out.append(r)
        return "".join(out)
    if k == "alt":
        rs = [r for r in (_emit(n) for n in node[1]) if r is not None]
        if not rs:
            return None
        if "" in rs:
            rest = [r for r in rs if r != ""]
            return f"(?:{'|'.join(rest)})?" if rest else ""
        return rs[0] if len(rs) == 1 else f"(?:{'|'.join(rs)})"
    if k == "rep":
        _, inner, lo, hi = node
        r = _emit(inner)
        if r is None or r == "":
            return "" if (lo == 0 or r == "") else None
        if hi == 0:
            return ""
        g = f"(?:{r})"
        if (lo, hi) == (0, INF):
            return g + "*"
        if (lo, hi) == (1, INF):
            return g + "+"
        if (lo, hi) == (0, 1):
            return g + "?"
        if hi == INF:
            return g + f"{{{lo},}}"
        if lo == hi:
            return g if lo == 1 else g + f"{{{lo}}}"
        return g + f"{{{lo},{hi}}}"
    raise AssertionError(node)


def pattern_body_regex(branches, length: tuple[int, int | None] | None = None,
                       where: str | None = None) -> str | None:
    """Regex of the JSON string *body* (no quotes) whose decoded value matches the pattern.

    Parameters
    ----------
    branches : list
        :func:`parse_pattern` output.
    length : (min, max|None) | None
        Decoded-length bounds to intersect with (``minLength``/``maxLength``). Supported when the
        pattern's own length range already satisfies them, or when a branch is anchored on both
        sides and is one character-set repeat (``^[a-z]{2,}$``); otherwise UnsupportedFeatureError.
    """
    any_char = json_char_regex(ANY)
    any_star = f"(?:{any_char})*"
    outs = []
    for node, a_s, a_e in branches:
        if length is not None:
            node = _intersect_length(node, a_s, a_e, length, where)
            if node is None:
                continue
        r = _emit(node)
        if r is None:
            continue
        outs.append(("" if a_s else any_star) + r + ("" if a_e else any_star))
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else "(?:" + "|".join(outs) + ")"


def _intersect_length(node, a_s, a_e, length, where):
    lmin, lmax = length
    lmax_ = INF if lmax is None else lmax
    pmin, pmax = ast_length_bounds(node)
    if not (a_s and a_e):
        pmax = INF
    if pmin > pmax:
        return node  # impossible branch, _emit drops it
    if pmin >= lmin and pmax <= lmax_:
        return node
    if pmax < lmin or pmin > lmax_:
        return None  # no string of the branch has an allowed length
    items = node[1] if node[0] == "cat" else (node,)
    if a_s and a_e and len(items) == 1 and items[0][0] == "rep" and items[0][1][0] == "set":
        _, inner, lo, hi = items[0]
        lo2, hi2 = max(lo, lmin), min(hi, lmax_)
        if lo2 > hi2:
            return None
        return ("rep", inner, lo2, hi2)
    if a_s and a_e and len(items) == 1 and items[0][0] == "set":
        return node if lmin <= 1 <= lmax_ else None
    raise UnsupportedFeatureError("pattern with minLength/maxLength",
                                  "cannot intersect this pattern with a length bound", where)


def pattern_ast(branches, upper: bool = False):
    """The decoded strings the pattern matches (:func:`parse_pattern` output) as a regex AST of
    :mod:`structgate.native.regex.parser` (``Chars``/``Concat``/``Alt``/``Repeat`` over code
    points; an unanchored side becomes ``.*`` over every code point): the input of
    :mod:`._automata`. ``upper=True`` (with ``parse_pattern(..., upper=True)`` output): a superset,
    where a trailing ``$`` also allows one final ``\n`` (Python's ``$`` matches before it)."""
    from ..regex.parser import Alt, Chars, Concat, Repeat

    any_star = Repeat(Chars(ANY), 0, None)

    def conv(n):
        k = n[0]
        if k == "set":
            return Chars(tuple(n[1]))
        if k == "cat":
            return Concat(tuple(conv(x) for x in n[1]))
        if k == "alt":
            return Alt(tuple(conv(x) for x in n[1]))
        if k == "rep":
            return Repeat(conv(n[1]), n[2], None if n[3] == INF else n[3])
        raise AssertionError(n)

    out = []
    try:
        for node, a_s, a_e in branches:
            end = [Repeat(Chars(((0x0A, 0x0A),)), 0, 1)] if upper else []
            items = ([] if a_s else [any_star]) + [conv(node)] + (end if a_e else [any_star])
            out.append(Concat(tuple(items)))
    finally:
        conv = None  # (recursive: no reference cycle left for the collector, returned or raised)
    return out[0] if len(out) == 1 else Alt(tuple(out))
