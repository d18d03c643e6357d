r"""Lark grammars (the subset llguidance accepts) → :class:`structgate.native.ir.Grammar`.

Supported
---------
* rules ``name: expansion | expansion`` (lower-case names, optionally prefixed ``_``; modifiers
  ``?name`` / ``!name`` / ``?!name`` only shape Lark's parse tree and are accepted and ignored) and
  terminals ``NAME: ...`` (upper-case names); the start rule is ``start``;
* a definition continues on the next line when that line starts with ``|``, inside ``(...)`` /
  ``[...]``, and after a ``\`` at the end of a line; comments ``//`` and ``#`` to the end of the line;
* atoms: rule and terminal names, string literals ``"..."`` (the escapes Lark evaluates: ``\n \t \r
  \f \\ \" \xHH \uHHHH \UHHHHHHHH``; any other keeps its backslash, as in Lark: ``"\d"`` is two
  characters, ``"\/"`` too — llguidance reads literals as JSON strings instead, so ``"\/"`` is
  ``/`` there and ``\x`` / ``\U`` / ``\0`` make it refuse the grammar),
  case-insensitive literals ``"..."i``, literal ranges ``"a".."z"``, regexes ``/.../flags``
  (flags ``i m s u x``; the regex dialect is :mod:`structgate.native.regex.parser`, where ``\d \w``
  are ASCII), groups ``( ... )``;
* ``[x]`` and ``x?`` (optional), ``x*``, ``x+``, ``x ~ n``, ``x ~ n..m``; aliases ``-> name``
  (tree shaping only: ignored);
* ``%ignore TERM`` / ``%ignore "lit"`` / ``%ignore /re/`` (several are alternatives);
* ``%import common.X`` (also ``%import common.X -> Y`` and ``%import common (X, Y)``) for
  ``DIGIT HEXDIGIT INT SIGNED_INT DECIMAL FLOAT SIGNED_FLOAT NUMBER SIGNED_NUMBER ESCAPED_STRING
  LCASE_LETTER UCASE_LETTER LETTER WORD CNAME WS_INLINE WS CR LF NEWLINE``, with the definitions of
  Lark's ``common.lark`` (``ESCAPED_STRING``'s lazy regex with a look-behind is written as the
  equivalent ``"([^"\\\n]|\\[^\n])*"``).

Refused with :class:`~structgate.errors.UnsupportedFeatureError` naming the feature
---------------------------------------------------------------------------------------
rule and terminal priorities (``name.2:``), templates (``name{x}: ...`` and their uses),
``%declare``, ``%override``, ``%extend``, ``%import`` of anything but ``common``, llguidance's
extensions (``%llguidance``, ``%json``, ``%regex`` ... in any position, ``<[token]>``, rule
attributes ``name[...]:``), regex flags ``l``, and lookaround / backreferences / ``\b`` inside
regexes (from the regex parser). Anchors (``^ $ \A \Z``) in a regex: also refused (a terminal inside
a grammar has no "start/end of text").

Semantics: a scannerless grammar, not a lexer
---------------------------------------------
The result is a context-free grammar over code points in which every terminal is inlined as the
regular expression it denotes. That is the language of the grammar, but it is **not** what a
lexer-based parser (Lark's LALR/contextual lexer, llguidance's lexer) accepts wherever lexing
decides something the grammar leaves open:

* **longest match**: a lexer takes the longest prefix a terminal matches and never backtracks
  into it. ``start: A "a"`` with ``A: /a+/`` accepts ``aa`` here (``A`` = ``a``) and nowhere with
  a greedy lexer (``A`` eats both). Grammars in which a terminal can be followed by text that
  would extend it (``NAME NAME`` without a separator, ``INT`` followed by ``DIGIT``) therefore
  accept more strings here than in llguidance;
* **terminal collisions**: a lexer that sees ``if`` where both ``"if"`` and ``NAME`` fit picks
  one by priority/length; here both readings are grammatical;
* **%ignore**: ignored text ``(I1 | I2 | ...)*`` may appear **between two lexemes only** — not
  before the first lexeme, not after the last, never inside a terminal. Lark's own lexer also
  skips it before the first and after the last lexeme. llguidance never takes it before the first
  lexeme, and takes it after the last one only when the text so far is a sentence *and* another
  lexeme could follow (``start: "a" "b"?`` accepts ``"a "``; ``start: "a" "b"`` refuses ``"ab "``);
  that condition is not context-free in general, so structgate takes the strict reading (it
  accepts a subset of llguidance's strings there: a sentence followed by white space and EOS).
  Construction: every terminal occurrence in a *rule* body (named terminals, literals, regexes;
  not the insides of terminal definitions) becomes ``%ignore T``; each rule ``R`` reachable from
  the start also gets ``R/first``, its derivations whose first lexeme carries no ``%ignore``; the
  root is ``start'`` = ``start/first`` (``| ""`` when ``start`` can derive no lexeme at all).
  With a lexer, ignored text also splits what would otherwise be one lexeme; here, too, it can
  only appear at lexeme boundaries, so the two agree except where longest match (above) differs.
* **case-insensitive literals** ``"..."i`` use Python's ``re.IGNORECASE`` equivalences (what Lark
  compiles them to): ``"i"i`` also matches ``İ`` (U+0130) and ``ı`` (U+0131), ``"s"i`` ``ſ``,
  ``"k"i`` the Kelvin sign. llguidance (Unicode simple case folding) agrees on ``ſ`` and the Kelvin
  sign but not on ``İ`` / ``ı``;
* **ESCAPED_STRING** follows Lark (no raw newline inside the quotes); llguidance's version also
  takes a raw newline (``"a<LF>b"``).

Errors
------
:class:`~structgate.errors.GrammarSyntaxError` with the rule/terminal name in the message,
``position`` = 0-based offset of the offending character (for an error inside a regex: the
offending character inside the ``/.../``), ``where`` = ``"line L, column C"``. Undefined names are
reported at the reference; a recursive terminal and left recursion are typed errors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ..ir import Expr, Grammar, alt, has_anchor, chars, lit, ref, rep, seq, star
from ..regex.casefold import fold_ranges
from ..regex.parser import parse_regex

__all__ = ["parse_lark", "COMMON_TERMINALS", "START", "IGNORE_RULE"]

START = "start"
#: the root when %ignore is used
START_IGNORED = "start'"
#: the rule holding the ignored text ``(I1 | I2 | ...)*``
IGNORE_RULE = "%ignore"

#: Lark's common.lark (the terminals structgate provides to %import common.X)
_COMMON_TEXT = r'''
DIGIT: "0".."9"
HEXDIGIT: "a".."f"|"A".."F"|DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
_STRING_ESC_INNER: /([^"\\\n]|\\[^\n])*/
ESCAPED_STRING: "\"" _STRING_ESC_INNER "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR : /\r/
LF : /\n/
NEWLINE: (CR? LF)+
'''
COMMON_TERMINALS = ("DIGIT", "HEXDIGIT", "INT", "SIGNED_INT", "DECIMAL", "FLOAT", "SIGNED_FLOAT", "NUMBER",
                    "SIGNED_NUMBER", "ESCAPED_STRING", "LCASE_LETTER", "UCASE_LETTER", "LETTER", "WORD", "CNAME",
                    "WS_INLINE", "WS", "CR", "LF", "NEWLINE")
_COMMON_PREFIX = "common."

_TOKEN = re.compile(r"""
  (?P<WS>[ \t\f]+|\\[ \t]*\r?\n)
| (?P<COMMENT>//[^\n]*|\#[^\n]*)
| (?P<NL>\r?\n)
| (?P<STRING>"(?:\\.|[^"\\\n])*"i?)
| (?P<REGEXP>/(?:\\.|[^/\\\n])+/[a-zA-Z]*)
| (?P<DIRECTIVE>%[A-Za-z_]+)
| (?P<ARROW>->)
| (?P<DOTDOT>\.\.)
| (?P<NAME>[A-Za-z_][A-Za-z_0-9]*)
| (?P<NUMBER>[+-]?[0-9]+)
| (?P<PUNCT>[:|()\[\]{}+*?~.,!<>=&])
""", re.VERBOSE)

#: the escapes Lark evaluates in a literal (``eval_escaping``); any other keeps its backslash
_ESC = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "\\": "\\", '"': '"'}


@dataclass
class _Tok:
    kind: str
    text: str
    pos: int


# parse-tree nodes (lowered once every definition and %ignore is known)
@dataclass(frozen=True)
class _Name:
    name: str
    pos: int


@dataclass(frozen=True)
class _Term:
    """An inline terminal (literal / regex / range): already an IR expression."""

    expr: Expr


@dataclass(frozen=True)
class _Seq:
    items: tuple


@dataclass(frozen=True)
class _Alt:
    items: tuple


@dataclass(frozen=True)
class _Rep:
    item: object
    lo: int
    hi: int | None


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


class _Parser:
    def __init__(self, text: str):
        self.s = text
        self.defn: str | None = None  # the definition being parsed (for messages)
        self.toks = self.tokenize(text)
        self.k = 0
        self.rules: dict[str, tuple[object, int]] = {}      # name -> (tree, position)
        self.terminals: dict[str, tuple[object, int]] = {}
        self.ignores: list[tuple[object, int]] = []
        self.imports: dict[str, tuple[str, int]] = {}       # local name -> (common name, position)

    # -- errors -------------------------------------------------------------------------------------
    def err(self, msg: str, pos: int) -> GrammarSyntaxError:
        if self.defn is not None:
            msg = f"{msg} (in {self.defn})"
        return GrammarSyntaxError(msg, self.s, pos, _line_col(self.s, min(pos, len(self.s))))

    def unsupported(self, feature: str, detail: str, pos: int) -> UnsupportedFeatureError:
        where = _line_col(self.s, pos) + (f", {self.defn}" if self.defn else "")
        return UnsupportedFeatureError(feature, detail, where)

    # -- lexing -------------------------------------------------------------------------------------
    def tokenize(self, s: str) -> list[_Tok]:
        out: list[_Tok] = []
        i = 0
        n = len(s)
        while i < n:
            m = _TOKEN.match(s, i)
            if m is None:
                if s[i] == '"':
                    raise self.err("unterminated string literal", i)
                if s[i] == "/":
                    raise self.err("unterminated regex /.../", i)
                raise self.err(f"unexpected character {s[i]!r}", i)
            kind = m.lastgroup
            if kind not in ("WS", "COMMENT"):
                out.append(_Tok(kind, m.group(), i))
            i = m.end()
        out.append(_Tok("EOF", "", n))
        # drop the newlines that do not end a definition: before a '|' line, inside brackets,
        # repeated ones
        res: list[_Tok] = []
        depth = 0
        for j, t in enumerate(out):
            if t.kind == "PUNCT" and t.text in "([{":
                depth += 1
            elif t.kind == "PUNCT" and t.text in ")]}":
                depth = max(0, depth - 1)
            if t.kind == "NL":
                nxt = next((u for u in out[j + 1:] if u.kind != "NL"), None)
                if depth > 0 or (res and res[-1].kind == "NL") or not res or \
                        (nxt is not None and nxt.kind == "PUNCT" and nxt.text == "|"):
                    continue
            res.append(t)
        return res

    def peek(self, d: int = 0) -> _Tok:
        return self.toks[min(self.k + d, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.k]
        self.k = min(self.k + 1, len(self.toks) - 1)
        return t

    def expect_end(self) -> None:
        t = self.peek()
        if t.kind == "NL":
            self.next()
        elif t.kind != "EOF":
            raise self.err(f"unexpected {t.text!r}", t.pos)

    def is_p(self, t: _Tok, text: str) -> bool:
        return t.kind == "PUNCT" and t.text == text

    # -- definitions --------------------------------------------------------------------------------
    def parse(self) -> None:
        while True:
            t = self.peek()
            self.defn = None
            if t.kind == "EOF":
                return
            if t.kind == "NL":
                self.next()
            elif t.kind == "DIRECTIVE":
                self.directive()
            elif t.kind == "NAME" or (t.kind == "PUNCT" and t.text in "?!"):
                self.definition()
            else:
                raise self.err(f"expected a rule or terminal definition, got {t.text!r}", t.pos)

    def definition(self) -> None:
        while self.is_p(self.peek(), "?") or self.is_p(self.peek(), "!"):
            self.next()  # tree-shaping modifiers: no effect on the language
        t = self.next()
        if t.kind != "NAME":
            raise self.err(f"expected a rule name after the modifier, got {t.text!r}", t.pos)
        name = t.text
        terminal = self.kind_of(name, t.pos) == "terminal"
        self.defn = f"{'terminal' if terminal else 'rule'} {name!r}"
        p = self.peek()
        if self.is_p(p, "."):
            raise self.unsupported(f"{'terminal' if terminal else 'rule'} priority ({name}.N)",
                                   "priorities steer a lexer/parser; the native engine has neither", p.pos)
        if self.is_p(p, "{"):
            raise self.unsupported(f"template rule ({name}{{...}})", "Lark templates are not supported", p.pos)
        if self.is_p(p, "["):
            raise self.unsupported(f"rule attributes ({name}[...])", "llguidance's rule attributes "
                                   "(max_tokens, lazy, stop, ...) are not supported", p.pos)
        if not self.is_p(p, ":"):
            raise self.err(f"expected ':' after {name!r}, got {p.text!r}" if p.kind != "NL"
                           else f"expected ':' after {name!r}", p.pos)
        self.next()
        table = self.terminals if terminal else self.rules
        if name in table or name in self.imports:
            raise self.err(f"{name!r} is defined twice", t.pos)
        body = self.expansions(terminal)
        self.expect_end()
        table[name] = (body, t.pos)

    def kind_of(self, name: str, pos: int) -> str:
        letters = name.lstrip("_")
        if letters and letters == letters.lower() and not letters[0].isdigit():
            return "rule"
        if letters and letters == letters.upper() and not letters[0].isdigit():
            return "terminal"
        raise self.err(f"name {name!r} must be all lower-case (a rule) or all upper-case (a terminal)", pos)

    def directive(self) -> None:
        t = self.next()
        d = t.text
        self.defn = d
        if d == "%ignore":
            body = self.expansions(True)
            self.expect_end()
            self.ignores.append((body, t.pos))
        elif d == "%import":
            self.import_()
        elif d in ("%declare", "%override", "%extend"):
            raise self.unsupported(d, "not supported by the native engine", t.pos)
        else:
            raise self.unsupported(d, "unknown or llguidance-specific directive; the native engine "
                                   "supports %ignore and %import common", t.pos)

    def import_(self) -> None:
        t = self.next()
        parts = [t]
        if t.kind != "NAME":
            raise self.err(f"expected a module name after %import, got {t.text!r}", t.pos)
        while self.is_p(self.peek(), ".") and self.peek(1).kind == "NAME":
            self.next()
            parts.append(self.next())
        names: list[tuple[str, str, int]] = []  # (common name, local name, pos)
        if self.is_p(self.peek(), "("):
            if len(parts) != 1:
                raise self.err("expected '%import module (NAME, ...)'", self.peek().pos)
            self.next()
            while True:
                u = self.next()
                if u.kind != "NAME":
                    raise self.err(f"expected a name in the import list, got {u.text!r}", u.pos)
                names.append((u.text, u.text, u.pos))
                u = self.next()
                if self.is_p(u, ")"):
                    break
                if not self.is_p(u, ","):
                    raise self.err(f"expected ',' or ')' in the import list, got {u.text!r}", u.pos)
        else:
            if len(parts) < 2:
                raise self.err("expected '%import module.NAME'", t.pos)
            local = parts[-1].text
            if self.peek().kind == "ARROW":
                self.next()
                u = self.next()
                if u.kind != "NAME":
                    raise self.err(f"expected a name after '->', got {u.text!r}", u.pos)
                local = u.text
            names.append((parts[-1].text, local, parts[-1].pos))
            parts = parts[:-1]
        module = ".".join(p.text for p in parts)
        if module != "common":
            raise self.unsupported(f"%import {module}", "only %import common.X is supported", t.pos)
        for cname, local, pos in names:
            if cname not in COMMON_TERMINALS:
                raise self.unsupported(f"%import common.{cname}", "supported: " + ", ".join(COMMON_TERMINALS), pos)
            if self.kind_of(local, pos) != "terminal":
                raise self.err(f"a terminal must be imported under an upper-case name, not {local!r}", pos)
            if local in self.terminals or (local in self.imports and self.imports[local][0] != cname):
                raise self.err(f"{local!r} is defined twice", pos)
            self.imports[local] = (cname, pos)
        self.expect_end()

    # -- expressions --------------------------------------------------------------------------------
    def at_expansion_end(self, t: _Tok) -> bool:
        return t.kind in ("NL", "EOF", "ARROW") or (t.kind == "PUNCT" and t.text in "|)]")

    def expansions(self, terminal: bool, depth: int = 0):
        if depth > 200:
            raise self.err("brackets nested deeper than 200", self.peek().pos)
        items = [self.alias(terminal, depth)]
        while self.is_p(self.peek(), "|"):
            self.next()
            items.append(self.alias(terminal, depth))
        return items[0] if len(items) == 1 else _Alt(tuple(items))

    def alias(self, terminal: bool, depth: int):
        items = []
        while not self.at_expansion_end(self.peek()):
            items.append(self.expr(terminal, depth))
        if self.peek().kind == "ARROW":
            self.next()
            u = self.next()
            if u.kind != "NAME":
                raise self.err(f"expected an alias name after '->', got {u.text!r}", u.pos)
        return items[0] if len(items) == 1 else _Seq(tuple(items))

    def number(self) -> tuple[int, int]:
        u = self.next()
        if u.kind != "NUMBER" or u.text[0] in "+-":
            raise self.err(f"expected a non-negative integer, got {u.text!r}", u.pos)
        return int(u.text), u.pos

    def expr(self, terminal: bool, depth: int):
        a = self.atom(terminal, depth)
        t = self.peek()
        if t.kind == "PUNCT" and t.text in "*+?":
            self.next()
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[t.text]
            a = _Rep(a, lo, hi)
        elif self.is_p(t, "~"):
            self.next()
            lo, _ = self.number()
            hi = lo
            if self.peek().kind == "DOTDOT":
                self.next()
                hi, hpos = self.number()
                if hi < lo:
                    raise self.err(f"repetition ~{lo}..{hi}: the maximum is below the minimum", hpos)
            a = _Rep(a, lo, hi)
        u = self.peek()
        if u.kind == "PUNCT" and u.text in "*+?~":
            raise self.err(f"{u.text!r} follows another quantifier (add parentheses)", u.pos)
        return a

    def atom(self, terminal: bool, depth: int):
        t = self.next()
        if self.is_p(t, "(") or self.is_p(t, "["):
            close = ")" if t.text == "(" else "]"
            # (an empty group, "()" or "[]", is the empty string, as in Lark: its expansion is expr*)
            body = self.expansions(terminal, depth + 1)
            u = self.next()
            if not self.is_p(u, close):
                raise self.err(f"expected {close!r} to close the {t.text!r} at {_line_col(self.s, t.pos)}, "
                               f"got {u.text!r}", u.pos)
            return body if close == ")" else _Rep(body, 0, 1)
        if t.kind == "STRING":
            if self.peek().kind == "DOTDOT":
                self.next()
                u = self.next()
                if u.kind != "STRING":
                    raise self.err(f"expected a string after '..', got {u.text!r}", u.pos)
                lo, hi = self.string_value(t), self.string_value(u)
                if len(lo) != 1 or len(hi) != 1:
                    raise self.err("a literal range \"a\"..\"z\" needs one character on each side", t.pos)
                if ord(hi) < ord(lo):
                    raise self.err(f"literal range {lo!r}..{hi!r} is reversed", t.pos)
                return _Term(chars([(ord(lo), ord(hi))]))
            value = self.string_value(t)
            if t.text.endswith("i"):
                return _Term(seq(*(chars(fold_ranges(((ord(c), ord(c)),))) for c in value)))
            return _Term(lit(value))
        if t.kind == "REGEXP":
            return _Term(self.regex(t))
        if t.kind == "NAME":
            kind = self.kind_of(t.text, t.pos)
            if self.is_p(self.peek(), "{"):
                raise self.unsupported(f"template use ({t.text}{{...}})", "Lark templates are not supported",
                                       self.peek().pos)
            if terminal and kind == "rule":
                raise self.err(f"a terminal cannot reference the rule {t.text!r}", t.pos)
            return _Name(t.text, t.pos)
        if t.kind == "DIRECTIVE":
            raise self.unsupported(f"{t.text} in an expansion", "llguidance extension, not supported by the "
                                   "native engine", t.pos)
        if t.kind == "PUNCT" and t.text in "<&":
            raise self.unsupported(f"{t.text!r} in an expansion", "llguidance token references / "
                                   "operators are not supported by the native engine", t.pos)
        got = "the end of the line" if t.kind == "NL" else "the end of the grammar" if t.kind == "EOF" else repr(t.text)
        raise self.err(f"expected a name, string, regex or '(' / '[', got {got}", t.pos)

    def string_value(self, t: _Tok) -> str:
        body = t.text[1:-2] if t.text.endswith("i") else t.text[1:-1]
        out = []
        i = 0
        while i < len(body):
            c = body[i]
            if c != "\\":
                out.append(c)
                i += 1
                continue
            e = body[i + 1]
            if e in _ESC:
                out.append(_ESC[e])
                i += 2
            elif e in "xuU":
                k = {"x": 2, "u": 4, "U": 8}[e]
                digits = body[i + 2:i + 2 + k]
                if len(digits) != k or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise self.err(f"escape \\{e} needs exactly {k} hex digits", t.pos + 1 + i)
                cp = int(digits, 16)
                if cp > 0x10FFFF:
                    raise self.err(f"escape \\{e}{digits} is beyond U+10FFFF", t.pos + 1 + i)
                out.append(chr(cp))
                i += 2 + k
            else:
                out.append("\\" + e)  # as Lark: e.g. "\d" is a backslash and a d
                i += 2
        return "".join(out)

    def regex(self, t: _Tok) -> Expr:
        end = t.text.rindex("/")
        body, flags = t.text[1:end], t.text[end + 1:]
        for f in flags:
            if f not in "imsux":
                if f == "l":
                    raise self.unsupported("regex flag 'l'", "not supported", t.pos + end + 1)
                raise self.err(f"unknown regex flag {f!r}", t.pos + end + 1)
        flags = flags.replace("u", "")
        prefix = f"(?{flags})" if flags else ""
        try:
            node = parse_regex(prefix + body, where=_line_col(self.s, t.pos))
        except GrammarSyntaxError as e:
            raise self.err(f"in regex {t.text}: {e.message}", t.pos + 1 + max(0, e.position - len(prefix))) from None
        except UnsupportedFeatureError as e:
            raise self.unsupported(e.feature, f"in regex {t.text}" + (f": {e.detail}" if e.detail else ""),
                                   t.pos) from None
        if has_anchor(node):
            raise self.unsupported("regex anchor (^, $, \\A, \\Z) in a grammar terminal",
                                   f"in regex {t.text}: a terminal inside a grammar has no start/end of text",
                                   t.pos)
        return node


class _Lowerer:
    def __init__(self, p: _Parser):
        self.p = p
        self.rules: dict[str, Expr] = {}
        self.positions: dict[str, int] = {}
        self.ign = bool(p.ignores)

    def lower(self, tree, in_rule: bool) -> Expr:
        if isinstance(tree, _Term):
            return seq(ref(IGNORE_RULE), tree.expr) if in_rule and self.ign else tree.expr
        if isinstance(tree, _Name):
            target = self.resolve(tree.name, tree.pos)
            if in_rule and self.ign and tree.name.lstrip("_")[:1].isupper():
                return seq(ref(IGNORE_RULE), ref(target))
            return ref(target)
        if isinstance(tree, _Seq):
            return seq(*(self.lower(x, in_rule) for x in tree.items))
        if isinstance(tree, _Alt):
            return alt(*(self.lower(x, in_rule) for x in tree.items))
        if isinstance(tree, _Rep):
            return rep(self.lower(tree.item, in_rule), tree.lo, tree.hi)
        raise AssertionError(tree)

    def resolve(self, name: str, pos: int) -> str:
        p = self.p
        if name in p.rules or name in p.terminals:
            return name
        if name in p.imports:
            return _COMMON_PREFIX + p.imports[name][0]
        raise GrammarSyntaxError(f"undefined {'terminal' if name.lstrip('_')[:1].isupper() else 'rule'} {name!r}"
                                 + (f" (in {p.defn})" if p.defn else "")
                                 + (f"; import it with %import common.{name}" if name in COMMON_TERMINALS else ""),
                                 p.s, pos, _line_col(p.s, pos))

    def run(self) -> Grammar:
        p = self.p
        if START not in p.rules:
            raise GrammarSyntaxError(f"the grammar defines no {START!r} rule (the start rule)", p.s, 0, None)
        for name, (tree, pos) in p.terminals.items():
            p.defn = f"terminal {name!r}"
            self.rules[name] = self.lower(tree, False)
            self.positions[name] = pos
        for name, (tree, pos) in p.rules.items():
            p.defn = f"rule {name!r}"
            self.rules[name] = self.lower(tree, True)
            self.positions[name] = pos
        if self.ign:
            p.defn = "%ignore"
            self.rules[IGNORE_RULE] = star(alt(*(self.lower(t, False) for t, _ in p.ignores)))
            self.positions[IGNORE_RULE] = p.ignores[0][1]
            self.add_first_rules()
        p.defn = None
        if any(cname for cname, _ in p.imports.values()):
            self.add_common({c for c, _ in p.imports.values()})
        self.check_terminal_recursion()
        origin = {r: _line_col(p.s, pos) for r, pos in self.positions.items() if not r.startswith(_COMMON_PREFIX)}
        g = Grammar(self.rules, START_IGNORED if self.ign else START, origin, p.s, self.positions)
        return g.check()

    # -- %ignore between lexemes only ---------------------------------------------------------------
    # Every terminal occurrence in a rule is lowered as ``%ignore T``. The root must not allow
    # ignored text before the first lexeme (nor after the last: no trailing %ignore is added), so
    # each rule R gets a variant ``R/first`` = R's derivations with at least one lexeme, the first
    # one without its ``%ignore``; the root is ``start/first`` (or the empty string when ``start``
    # derives no lexeme).
    def add_first_rules(self) -> None:
        p = self.p
        null: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, (tree, _) in p.rules.items():
                if name not in null and self.nullable(tree, null):
                    null.add(name)
                    changed = True
        self.null = null
        self.todo = [START]
        done: set[str] = set()
        while self.todo:
            r = self.todo.pop()
            if r in done:
                continue
            done.add(r)
            p.defn = f"rule {r!r}"
            self.rules[r + "/first"] = self.first(p.rules[r][0])
            self.positions[r + "/first"] = p.rules[r][1]
        root = ref(START + "/first")
        self.rules[START_IGNORED] = alt(root, seq()) if START in null else root
        self.positions[START_IGNORED] = self.positions[START]

    def nullable(self, tree, null: set[str]) -> bool:
        """``tree`` derives the empty string (i.e. no lexeme; terminals count as non-empty)."""
        if isinstance(tree, _Term):
            return False
        if isinstance(tree, _Name):
            return tree.name in null
        if isinstance(tree, _Seq):
            return all(self.nullable(x, null) for x in tree.items)
        if isinstance(tree, _Alt):
            return any(self.nullable(x, null) for x in tree.items)
        return tree.lo == 0 or self.nullable(tree.item, null)

    def first(self, tree) -> Expr:
        """The derivations of ``tree`` with at least one lexeme, the first without its %ignore."""
        if isinstance(tree, _Term):
            return tree.expr
        if isinstance(tree, _Name):
            target = self.resolve(tree.name, tree.pos)
            if tree.name.lstrip("_")[:1].isupper():
                return ref(target)
            self.todo.append(tree.name)
            return ref(tree.name + "/first")
        if isinstance(tree, _Seq):
            alts = []
            for i, x in enumerate(tree.items):
                alts.append(seq(self.first(x), *(self.lower(y, True) for y in tree.items[i + 1:])))
                if not self.nullable(x, self.null):
                    break
            return alt(*alts)
        if isinstance(tree, _Alt):
            return alt(*(self.first(x) for x in tree.items))
        if tree.hi == 0:
            return alt()
        return seq(self.first(tree.item),
                   rep(self.lower(tree.item, True), max(tree.lo - 1, 0), None if tree.hi is None else tree.hi - 1))

    def add_common(self, wanted: set[str]) -> None:
        cp = _common()
        todo = list(wanted)
        seen: set[str] = set()
        while todo:
            c = todo.pop()
            if c in seen:
                continue
            seen.add(c)
            tree, _ = cp.terminals[c]
            self.rules[_COMMON_PREFIX + c] = _lower_common(tree)
            todo.extend(_names_in(tree))

    def check_terminal_recursion(self) -> None:
        p = self.p
        state: dict[str, int] = {}
        for t0 in p.terminals:
            if state.get(t0):
                continue
            stack = [(t0, iter(sorted(n.name for n in _name_nodes(p.terminals[t0][0]) if n.name in p.terminals)))]
            path = [t0]
            state[t0] = 1
            while stack:
                cur, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[cur] = 2
                    stack.pop()
                    path.pop()
                    continue
                if state.get(nxt) == 1:
                    cyc = path[path.index(nxt):] + [nxt]
                    raise GrammarSyntaxError(f"terminal {nxt!r} is recursive ({' -> '.join(cyc)}); terminals "
                                             "must be regular: make it a rule (lower-case name)",
                                             p.s, p.terminals[nxt][1], _line_col(p.s, p.terminals[nxt][1]))
                if not state.get(nxt):
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(sorted(n.name for n in _name_nodes(p.terminals[nxt][0])
                                                   if n.name in p.terminals))))


def _name_nodes(tree):
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, _Name):
            yield x
        elif isinstance(x, (_Seq, _Alt)):
            stack.extend(x.items)
        elif isinstance(x, _Rep):
            stack.append(x.item)


def _names_in(tree) -> list[str]:
    return [n.name for n in _name_nodes(tree)]


def _lower_common(tree) -> Expr:
    if isinstance(tree, _Term):
        return tree.expr
    if isinstance(tree, _Name):
        return ref(_COMMON_PREFIX + tree.name)
    if isinstance(tree, _Seq):
        return seq(*(_lower_common(x) for x in tree.items))
    if isinstance(tree, _Alt):
        return alt(*(_lower_common(x) for x in tree.items))
    if isinstance(tree, _Rep):
        return rep(_lower_common(tree.item), tree.lo, tree.hi)
    raise AssertionError(tree)


_COMMON_CACHE: list[_Parser] = []


def _common() -> _Parser:
    if not _COMMON_CACHE:
        cp = _Parser(_COMMON_TEXT)
        cp.parse()
        _COMMON_CACHE.append(cp)
    return _COMMON_CACHE[0]


def parse_lark(text: str) -> Grammar:
    """Parse a Lark grammar (the subset described in the module docstring) into a checked :class:`Grammar`.

    Parameters
    ----------
    text : str
        The grammar text; the start rule is ``start``.

    Returns
    -------
    Grammar
        Rules keep their Lark names; terminals are rules named by their upper-case names
        (imported ones ``common.NAME``); with ``%ignore``, the root is ``start'``, the ignored
        text is the rule ``%ignore`` and ``R/first`` rules exist (see the module docstring).

    Raises
    ------
    GrammarSyntaxError
        Bad syntax, an undefined or twice-defined name, no ``start`` rule, a recursive terminal, a
        terminal referencing a rule, left recursion; the message names the rule/terminal and
        ``position`` is the 0-based offset of the offending character.
    UnsupportedFeatureError
        A Lark or llguidance feature outside the subset (``feature`` names it).
    InvalidConstraintError
        The start rule matches no string.
    """
    p = _Parser(text)
    p.parse()
    return _Lowerer(p).run()
