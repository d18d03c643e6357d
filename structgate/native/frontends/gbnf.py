r"""GBNF (llama.cpp) and XGrammar's EBNF → :class:`structgate.native.ir.Grammar`.

Notation (both dialects)
------------------------
* ``name ::= body`` rules; the start rule is ``root``;
* alternation ``|``, concatenation by juxtaposition, grouping ``( ... )``;
* quantifiers ``*``, ``+``, ``?``, ``{m}``, ``{m,}``, ``{m,n}`` on the element before them
  (a string literal counts as one element: ``"ab"*`` repeats ``ab``);
* string literals ``"..."``; character classes ``[...]`` with ranges ``a-z`` and negation
  ``[^...]`` (the complement over all code points U+0000..U+10FFFF; a ``-`` first, last or escaped
  is literal); ``.`` is any code point (newline included, as in llama.cpp);
* escapes in literals and classes: ``\xHH``, ``\uHHHH``, ``\UHHHHHHHH`` (exactly that many hex
  digits), ``\n \t \r \f \v \a \b \0 \e``, and ``\\ \" \' \[ \] \- \/ \^ \$ \. \* \+ \? \( \) \{ \} \|``
  for the character itself (llama.cpp knows ``\x \u \U \n \t \r \\ \" \[ \]``; the others are
  XGrammar's and are accepted in both dialects); any other escape is an error;
* comments: ``#`` to the end of the line;
* names: letters, digits, ``_`` and ``-`` (llama.cpp allows no ``_``; XGrammar does, and
  ``json-schema-to-grammar`` output of both uses ``-``); in the ``ebnf`` dialect also ``.`` after
  the first character (``a.b`` is one name) and a name may not start with a digit.

Where a rule ends
-----------------
* ``gbnf`` (llama.cpp's parser, exactly): a newline ends the rule unless it comes right after
  ``::=`` or ``|`` or inside parentheses. A continuation line that does not start with ``|`` or
  lie inside a group is an error (llama.cpp says "expecting ::="; here: the rule name and the
  position of the stray line).
* ``ebnf`` (XGrammar): newlines are ordinary white space; a rule ends where the next
  ``name ::=`` starts (or at the end of the text). Every layout llama.cpp accepts means the same
  thing here, so this is also the dialect :func:`~structgate.native.frontends.parse_grammar`
  picks when none is given.

What XGrammar's EBNF has beyond GBNF, and what structgate does with it
----------------------------------------------------------------------
* the root rule name is configurable in XGrammar (``root_rule_name``); here it is always
  ``root`` (pass ``root=`` to :func:`parse_gbnf` for another);
* lookahead assertions ``rule ::= body (= lookahead)``: refused with
  :class:`~structgate.errors.UnsupportedFeatureError` (feature ``"lookahead assertion (= ...)"``);
* rule attributes ``name[max_tokens=..., capture=...] ::= ...`` and the macros ``TagDispatch(...)``,
  ``Token(...)``, ``ExcludeToken(...)``, ``TokenTagDispatch(...)``, ``Regex(...)``: refused with
  :class:`~structgate.errors.UnsupportedFeatureError` naming them;
* XGrammar has no ``.``: its lexer reads ``.`` as a name character. Here a ``.`` that is not part
  of a name is "any code point" in both dialects;
* XGrammar refuses a quantifier on a quantifier (``a**``); llama.cpp re-applies it. ``ebnf``
  follows XGrammar (error), ``gbnf`` llama.cpp (``(a*)*``);
* XGrammar refuses raw newlines inside literals and classes; so does ``ebnf``. ``gbnf`` takes
  them as characters, as llama.cpp does;
* a rule defined twice: llama.cpp keeps the last definition silently, XGrammar refuses; both
  dialects here raise :class:`~structgate.errors.GrammarSyntaxError`;
* ``[]`` (an empty class) is an error here in both dialects (it could only match nothing).

Errors
------
:class:`~structgate.errors.GrammarSyntaxError` with the rule name in the message, the 0-based
character offset of the offending character in ``position`` and ``"line L, column C"`` in
``where``; an undefined rule is reported at the reference. Left recursion (``a ::= a "x" | "y"``) is
refused by :meth:`Grammar.check` with a typed error naming the cycle (it is never looped on).
"""
from __future__ import annotations

from ...errors import GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError
from ..ir import Expr, Grammar, alt, chars, lit, ref, rep, seq
from ..regex.parser import MAX_CP, Chars, negate_ranges

__all__ = ["parse_gbnf", "MAX_NESTING"]

#: deepest parenthesis nesting accepted (deeper is a GrammarSyntaxError, never a RecursionError)
MAX_NESTING = 200

_SIMPLE = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7, "b": 8, "0": 0, "e": 27}
_SELF = set("\\\"'[]-/^$.*+?(){}|")
_HEXLEN = {"x": 2, "u": 4, "U": 8}
_HEXDIGITS = set("0123456789abcdefABCDEF")
_MACROS = ("TagDispatch", "Token", "ExcludeToken", "TokenTagDispatch", "Regex")
ANY_CHAR = Chars(((0, MAX_CP),))


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


class _Parser:
    def __init__(self, text: str, dialect: str):
        self.s = text
        self.n = len(text)
        self.ebnf = dialect == "ebnf"
        self.rule: str | None = None
        self.rules: dict[str, Expr] = {}
        self.positions: dict[str, int] = {}
        self.refs: list[tuple[str, int, str]] = []  # (name, position, rule containing it)

    # -- helpers ------------------------------------------------------------------------------------
    def err(self, msg: str, pos: int) -> GrammarSyntaxError:
        if self.rule is not None:
            msg = f"{msg} (in rule {self.rule!r})"
        return GrammarSyntaxError(msg, self.s, pos, _line_col(self.s, min(pos, self.n)))

    def unsupported(self, feature: str, detail: str, pos: int) -> UnsupportedFeatureError:
        where = _line_col(self.s, pos) + (f", rule {self.rule!r}" if self.rule else "")
        return UnsupportedFeatureError(feature, detail, where)

    def space(self, i: int, newline_ok: bool) -> int:
        s, n = self.s, self.n
        while i < n:
            c = s[i]
            if c == " " or c == "\t" or (newline_ok and (c == "\n" or c == "\r")):
                i += 1
            elif c == "#":
                while i < n and s[i] not in "\r\n":
                    i += 1
            else:
                break
        return i

    def is_name_char(self, c: str, first: bool) -> bool:
        if c.isascii() and (c.isalpha() or c == "_" or c == "-"):
            return True
        if c.isascii() and c.isdigit():
            return not (first and self.ebnf)
        return self.ebnf and c == "." and not first

    def name_end(self, i: int) -> int:
        j = i
        while j < self.n and self.is_name_char(self.s[j], j == i):
            j += 1
        return j

    def rule_starts_at(self, i: int) -> bool:
        """``ebnf``: a ``name ::=`` begins at ``i`` (ends the current rule's body)."""
        j = self.name_end(i)
        if j == i:
            return False
        j = self.space(j, True)
        return self.s.startswith("::=", j) or (j < self.n and self.s[j] == "[" and self._attr_then_assign(j))

    def _attr_then_assign(self, j: int) -> bool:
        k = self.s.find("]", j)
        if k < 0 or "\n" in self.s[j:k]:
            return False
        return self.s.startswith("::=", self.space(k + 1, False))

    # -- grammar ------------------------------------------------------------------------------------
    def parse(self, root: str) -> Grammar:
        i = self.space(0, True)
        while i < self.n:
            i = self.parse_rule(i)
        self.rule = None
        for name, pos, in_rule in self.refs:
            if name not in self.rules:
                self.rule = in_rule
                raise self.err(f"undefined rule {name!r}", pos)
        self.rule = None
        if root not in self.rules:
            raise self.err(f"the grammar defines no {root!r} rule (the start rule)", 0)
        origin = {r: _line_col(self.s, p) for r, p in self.positions.items()}
        return Grammar(self.rules, root, origin, self.s, dict(self.positions)).check()

    def parse_rule(self, start: int) -> int:
        s = self.s
        end = self.name_end(start)
        prev, self.rule = self.rule, None
        stray = ("" if self.ebnf or prev is None else
                 f"; the rule {prev!r} ended at the end of the line before (a GBNF rule continues on the "
                 "next line only after '::=' or '|' or inside parentheses)")
        if end == start:
            raise self.err(f"expected a rule name, got {s[start]!r}{stray}", start)
        name = s[start:end]
        j = self.space(end, self.ebnf)
        if j < self.n and s[j] == "[" and self._attr_then_assign(j):
            raise self.unsupported("rule attributes name[...] ::=", "XGrammar's max_tokens / capture "
                                   "attributes are not supported by the native engine", j)
        if not s.startswith("::=", j):
            got = repr(s[j]) if j < self.n else "the end of the grammar"
            raise self.err(f"expected '::=' after the name {name!r}, got {got}{stray}", j)
        self.rule = name
        if name in self.rules:
            raise self.err(f"rule {name!r} is defined twice (first at {_line_col(s, self.positions[name])})",
                           start)
        self.positions[name] = start
        self.rules[name] = None  # type: ignore[assignment]  # placeholder (duplicate detection)
        body, j = self.parse_alternates(self.space(j + 3, True), False, 0)
        self.rules[name] = body
        if self.ebnf:
            if s.startswith("(=", j):
                raise self.unsupported("lookahead assertion (= ...)", "XGrammar's rule lookahead "
                                       "assertions are not supported by the native engine", j)
            if j < self.n and not self.rule_starts_at(j):
                raise self.err(f"unexpected {s[j]!r}", j)
            return self.space(j, True)
        if j < self.n:
            if s[j] == "\r":
                j += 2 if s.startswith("\r\n", j) else 1
            elif s[j] == "\n":
                j += 1
            else:
                raise self.err(f"unexpected {s[j]!r}, expected the end of the rule's line", j)
        return self.space(j, True)

    def parse_alternates(self, i: int, nested: bool, depth: int) -> tuple[Expr, int]:
        items = []
        body, i = self.parse_sequence(i, nested, depth)
        items.append(body)
        while i < self.n and self.s[i] == "|":
            body, i = self.parse_sequence(self.space(i + 1, True), nested, depth)
            items.append(body)
        return alt(*items), i

    def parse_sequence(self, i: int, nested: bool, depth: int) -> tuple[Expr, int]:
        s, n = self.s, self.n
        nl = nested or self.ebnf
        items: list[Expr] = []
        last_quantified = False  # the last item is a quantifier's result (ebnf: no quantifier on it)
        while i < n:
            c = s[i]
            if c == '"':
                e, i = self.parse_literal(i)
            elif c == "[":
                e, i = self.parse_class(i)
            elif c == "(":
                if self.ebnf and s.startswith("(=", i):
                    break
                if depth >= MAX_NESTING:
                    raise self.err(f"parentheses nested deeper than {MAX_NESTING}", i)
                e, j = self.parse_alternates(self.space(i + 1, True), True, depth + 1)
                if j >= n or s[j] != ")":
                    got = repr(s[j]) if j < n else "the end of the grammar"
                    raise self.err(f"expected ')' to close the '(' at {_line_col(s, i)}, got {got}", j)
                i = j + 1
            elif c == ".":  # never the first character of a name
                e, i = ANY_CHAR, i + 1
            elif self.is_name_char(c, True):
                if self.ebnf and self.rule_starts_at(i):
                    break
                j = self.name_end(i)
                name = s[i:j]
                if self.ebnf and name in _MACROS and s.startswith("(", self.space(j, True)):
                    raise self.unsupported(f"XGrammar macro {name}(...)", "not supported by the native engine", i)
                self.refs.append((name, i, self.rule or ""))
                e, i = ref(name), j
            elif c in "*+?{":
                if not items:
                    raise self.err(f"quantifier {c!r} has nothing to repeat", i)
                if self.ebnf and last_quantified:
                    raise self.err(f"quantifier {c!r} follows another quantifier", i)
                if c == "{":
                    lo, hi, i = self.parse_bounds(i)
                else:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                    i += 1
                items[-1] = rep(items[-1], lo, hi)
                last_quantified = True
                i = self.space(i, nl)
                continue
            else:
                break
            items.append(e)
            last_quantified = False
            i = self.space(i, nl)
        return seq(*items), i

    def parse_bounds(self, i: int) -> tuple[int, int | None, int]:
        s, n = self.s, self.n
        open_at = i
        j = self.space(i + 1, True)

        def integer(k: int) -> tuple[int, int]:
            e = k
            while e < n and s[e].isascii() and s[e].isdigit():
                e += 1
            if e == k:
                got = repr(s[k]) if k < n else "the end of the grammar"
                raise self.err(f"expected an integer in the repetition '{{' at {_line_col(s, open_at)}, got {got}", k)
            return int(s[k:e]), e

        lo, j = integer(j)
        j = self.space(j, True)
        if j < n and s[j] == "}":
            return lo, lo, j + 1
        if j >= n or s[j] != ",":
            got = repr(s[j]) if j < n else "the end of the grammar"
            raise self.err(f"expected ',' or '}}' in a repetition, got {got}", j)
        j = self.space(j + 1, True)
        hi = None
        if j < n and s[j].isascii() and s[j].isdigit():
            hi_at = j
            hi, j = integer(j)
            if hi < lo:
                raise self.err(f"repetition {{{lo},{hi}}}: the maximum is below the minimum", hi_at)
            j = self.space(j, True)
        if j >= n or s[j] != "}":
            got = repr(s[j]) if j < n else "the end of the grammar"
            raise self.err(f"expected '}}' to close a repetition, got {got}", j)
        return lo, hi, j + 1

    def parse_char(self, i: int, what: str, open_at: int) -> tuple[int, int]:
        """One (possibly escaped) character at ``i`` → (code point, next index)."""
        s, n = self.s, self.n
        if i >= n:
            raise self.err(f"unterminated {what} (opened at {_line_col(s, open_at)})", open_at)
        c = s[i]
        if c in "\r\n" and self.ebnf:
            raise self.err(f"a newline inside a {what} (XGrammar's EBNF does not allow it; write \\n)", i)
        if c != "\\":
            return ord(c), i + 1
        if i + 1 >= n:
            raise self.err(f"unterminated {what} (opened at {_line_col(s, open_at)})", open_at)
        e = s[i + 1]
        if e in _HEXLEN:
            k = _HEXLEN[e]
            digits = s[i + 2:i + 2 + k]
            if len(digits) != k or not set(digits) <= _HEXDIGITS:
                raise self.err(f"escape \\{e} needs exactly {k} hex digits", i)
            cp = int(digits, 16)
            if cp > MAX_CP:
                raise self.err(f"escape \\{e}{digits} is beyond U+10FFFF", i)
            return cp, i + 2 + k
        if e in _SIMPLE:
            return _SIMPLE[e], i + 2
        if e in _SELF:
            return ord(e), i + 2
        raise self.err(f"unknown escape \\{e}", i)

    def parse_literal(self, i: int) -> tuple[Expr, int]:
        open_at = i
        i += 1
        out = []
        while True:
            if i >= self.n:
                raise self.err(f"unterminated string literal (opened at {_line_col(self.s, open_at)})", open_at)
            if self.s[i] == '"':
                break
            cp, i = self.parse_char(i, "string literal", open_at)
            out.append(chr(cp))
        return lit("".join(out)), i + 1

    def parse_class(self, i: int) -> tuple[Expr, int]:
        s, n = self.s, self.n
        open_at = i
        i += 1
        negated = i < n and s[i] == "^"
        if negated:
            i += 1
        ranges = []
        while True:
            if i >= n:
                raise self.err(f"unterminated character class (opened at {_line_col(s, open_at)})", open_at)
            if s[i] == "]":
                break
            at = i
            lo, i = self.parse_char(i, "character class", open_at)
            hi = lo
            if i + 1 < n and s[i] == "-" and s[i + 1] != "]":
                hi, i = self.parse_char(i + 1, "character class", open_at)
                if hi < lo:
                    raise self.err(f"character range {chr(lo)!r}-{chr(hi)!r} is reversed", at)
            ranges.append((lo, hi))
        if not ranges:
            raise self.err("empty character class [] (it matches nothing)", open_at)
        cs = chars(ranges)
        if negated:
            cs = Chars(negate_ranges(cs.ranges))
        return cs, i + 1


def parse_gbnf(text: str, *, dialect: str = "gbnf", root: str = "root") -> Grammar:
    """Parse a GBNF (llama.cpp) or XGrammar EBNF grammar into a checked :class:`Grammar`.

    Parameters
    ----------
    text : str
        The grammar text.
    dialect : {"gbnf", "ebnf"}
        ``"gbnf"``: llama.cpp's rule boundaries (a rule ends at the end of its line, see the module
        docstring); ``"ebnf"``: XGrammar's (a rule ends where the next ``name ::=`` starts).
    root : str, default "root"
        The start rule.

    Returns
    -------
    Grammar
        One rule per grammar rule (groups and quantifiers stay inside the rule's expression);
        ``origin`` / ``positions`` give each rule's definition (``"line L, column C"`` / offset).

    Raises
    ------
    GrammarSyntaxError
        Bad syntax, an undefined or twice-defined rule, no root rule, left recursion; the message
        names the rule, ``position`` is the 0-based offset of the offending character.
    UnsupportedFeatureError
        XGrammar extensions: lookahead assertions ``(= ...)``, rule attributes, macros.
    InvalidConstraintError
        The root rule matches no string at all.
    """
    if dialect not in ("gbnf", "ebnf"):
        raise InvalidConstraintError(f"dialect must be 'gbnf' or 'ebnf', got {dialect!r}")
    return _Parser(text, dialect).parse(root)
