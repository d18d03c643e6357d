"""Regex text → AST (the dialect of structgate's native engine).

The parser is an explicit-stack (iterative) recursive-descent parser, so patterns of any nesting
depth (generated JSON-Schema regexes of 100 KB and more) parse without ``RecursionError``.

AST
---
* :class:`Chars` — a set of code points, as sorted, disjoint, non-adjacent inclusive ranges
  (an empty set matches nothing);
* :class:`Concat` — a sequence (``Concat(())`` is the empty string);
* :class:`Alt` — an alternation;
* :class:`Repeat` — ``item{min,max}``, ``max=None`` for unbounded;
* :class:`Anchor` — ``"start"`` (``^``, ``\\A``) or ``"end"`` (``$``, ``\\Z``, ``\\z``): true
  start / end of the text (no multiline mode, and ``$`` does **not** match before a final
  newline, as in ECMAScript).

Syntax and semantics
--------------------
* ``|``, concatenation, ``(...)``, ``(?:...)``, ``(?P<name>...)`` and ``(?<name>...)`` (all groups
  are plain groups), ``(?#comment)``;
* quantifiers ``* + ? {m} {m,} {m,n} {,n}`` (Python's forms) and their lazy forms ``*? +? ?? {m,n}?``
  (laziness does not change a full-match language: accepted and ignored). A ``{`` that does not
  start a valid quantifier is a literal (``a{``, ``{x}``, ``a{1,2``). A quantifier on nothing
  (``*a``, ``a|*``, ``^*``) or on a quantifier (``a**``, ``a{2}{3}``) is a
  :class:`~structgate.errors.GrammarSyntaxError`, like Python's ``re``; ``{m,n}`` with ``m > n`` too.
  Possessive quantifiers (``a*+``) raise :class:`~structgate.errors.UnsupportedFeatureError`;
* classes ``[...]`` with ranges and escapes, ``]`` first is a literal, ``-`` first or last is a
  literal; negation ``[^...]`` is the complement over **all** code points U+0000..U+10FFFF
  (surrogates have no UTF-8 encoding and never match);
* ``.`` = any code point except ``\\n`` (with the ``s`` flag: any code point);
* ``\\d \\w \\s \\D \\W \\S`` have **ECMAScript semantics without the u flag** (the JSON Schema regex
  dialect): ``\\d = [0-9]``, ``\\w = [A-Za-z0-9_]`` (ASCII only), ``\\s`` = the ECMAScript
  WhiteSpace + LineTerminator set ``[\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f
  \\u205f\\u3000\\ufeff]``. (Python's ``re`` agrees on ``\\d \\w`` with ``re.ASCII``.)
* escapes ``\\n \\t \\r \\f \\v \\a \\0`` (and Python octal ``\\0oo``, ``\\ooo``), ``\\xHH``, ``\\x{H..}``,
  ``\\uHHHH`` (an escaped UTF-16 surrogate pair ``\\uD83D\\uDE00`` is one code point, as in
  ECMAScript), ``\\u{H..}``, ``\\UHHHHHHHH``, ``\\N{NAME}``, ``\\cX`` (control), any escaped
  non-alphanumeric character is itself; inside a class ``\\b`` is backspace (U+0008);
* Unicode General_Category escapes ``\\p{Lu}``, ``\\p{Letter}``, ``\\p{gc=Nd}``, ``\\pL``, ``\\P{..}``,
  ``\\p{^..}``, ``\\p{Any}``, ``\\p{ASCII}``, ``\\p{Assigned}`` (names matched loosely; data from Python's
  :mod:`unicodedata`, see :mod:`.unicode_props`), inside and outside classes, not under ``(?i)`` or
  ``(?a)`` (refused: engines read them differently there);
* anchors ``^ $ \\A \\Z \\z`` anywhere: the DFA matches the whole text, so anchors at the ends are
  no-ops and anchors elsewhere are exact zero-width assertions (``a^b`` matches nothing,
  ``^a$|^b$`` is ``a|b``);
* inline flags ``(?i)`` (case-insensitive, Python's Unicode simple case equivalence, see
  :mod:`.casefold`; ``\\W \\D \\S`` stay the complements of the case-closed ``\\w \\d \\s``),
  ``(?s)``, ``(?x)`` (verbose), ``(?a)``, ``(?m)`` (harmless unless an anchor is used under it) at
  the start of the pattern, and scoped ``(?i:...)``, ``(?-i:...)``.

Unsupported (raise :class:`~structgate.errors.UnsupportedFeatureError` naming the construct and
its position): backreferences (``\\1``, ``(?P=n)``, ``\\k<n>``), lookaround (``(?=``, ``(?!``,
``(?<=``, ``(?<!``), word boundaries ``\\b \\B``, atomic groups, conditionals, possessive
quantifiers, Unicode properties other than General_Category (scripts, blocks, binary properties),
the ``u``/``L`` flags and anchors in multiline mode.

Opt-in (``parse_regex(..., calls=True)``, for grammar front ends): the subroutine call
``(?&name)`` parses to :class:`structgate.native.ir.Ref` (a reference to a grammar rule).

Errors in the text raise :class:`~structgate.errors.GrammarSyntaxError` with the 0-based position
of the offending construct.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Union

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from .casefold import fold_ranges, fold_ranges_ascii

__all__ = ["Node", "Chars", "Concat", "Alt", "Repeat", "Anchor", "parse_regex", "EMPTY",
           "DIGIT", "WORD", "SPACE", "normalize_ranges", "negate_ranges", "ast_size"]

MAX_CP = 0x10FFFF


@dataclass(frozen=True, slots=True)
class Chars:
    """One code point out of ``ranges``: sorted, disjoint, non-adjacent ``(lo, hi)`` inclusive."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Concat:
    """``items`` one after the other; ``Concat(())`` matches the empty string."""

    items: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class Alt:
    """Any one of ``items``."""

    items: tuple["Node", ...]


@dataclass(frozen=True, slots=True)
class Repeat:
    """``item`` repeated ``min`` to ``max`` times (``max=None``: unbounded)."""

    item: "Node"
    min: int
    max: int | None


@dataclass(frozen=True, slots=True)
class Anchor:
    """Zero-width assertion: ``kind="start"`` (start of text) or ``"end"`` (end of text)."""

    kind: str


Node = Union[Chars, Concat, Alt, Repeat, Anchor]
EMPTY = Concat(())

DIGIT = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
         (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))


def normalize_ranges(ranges) -> tuple[tuple[int, int], ...]:
    """Sort and merge overlapping / adjacent inclusive ranges."""
    rs = sorted(ranges)
    out: list[list[int]] = []
    for lo, hi in rs:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def negate_ranges(ranges) -> tuple[tuple[int, int], ...]:
    """Complement of normalized ``ranges`` over U+0000..U+10FFFF."""
    out = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return tuple(out)


_DOT = ((0, 9), (11, MAX_CP))
_ANY = ((0, MAX_CP),)
_CLASS_ESC = {"d": DIGIT, "w": WORD, "s": SPACE}
#: under the ``a`` flag: ``\\s`` is ASCII whitespace, as Python's ``re.ASCII`` reads it (``\\d`` and
#: ``\\w`` are ASCII already, ECMAScript's reading)
_CLASS_ESC_ASCII = {"d": DIGIT, "w": WORD, "s": ((0x09, 0x0D), (0x20, 0x20))}
_SIMPLE_ESC = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "a": 7}
_HEX = "0123456789abcdefABCDEF"
_OCT = "01234567"
_QUANT_START = "*+?{"
_FLAG_LETTERS = "aiLmsux"
_CALL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")


def _is_hi_surrogate(cp: int) -> bool:
    return 0xD800 <= cp <= 0xDBFF


class _Flags:
    """The inline flags in force. ``ignorecase`` is False, True (Unicode simple case folding) or
    ``"ascii"`` (``i`` with ``a``: ASCII letters only, as Python's ``re`` folds under ``re.ASCII``);
    it is part of every parse cache's key."""

    __slots__ = ("dotall", "verbose", "multiline", "ignorecase", "ascii")

    def __init__(self, dotall=False, verbose=False, multiline=False, ignorecase=False, ascii=False):
        self.dotall = dotall
        self.verbose = verbose
        self.multiline = multiline
        self.ignorecase = ignorecase
        self.ascii = ascii

    def copy(self) -> "_Flags":
        return _Flags(self.dotall, self.verbose, self.multiline, self.ignorecase, self.ascii)


def _fold(ranges, ignorecase):
    """``ranges`` closed under the case equivalence of ``ignorecase`` (:attr:`_Flags.ignorecase`)."""
    return fold_ranges_ascii(ranges) if ignorecase == "ascii" else fold_ranges(ranges)


import re as _re

#: the largest repeat count ``{m,n}`` takes, as in Python's ``re`` (its bound is 2**32 - 1, exclusive)
MAX_REPEAT = 0xFFFFFFFE
#: the text of a comment ``(?#...)`` after ``(?#``: escapes are units, as Python's ``re`` reads
#: them (``\\)`` does not end it); the first other ``)`` does
_COMMENT_BODY = r"(?:\\.|[^)\\])*"
#: the rest of a comment after ``(?#``, its closing ``)`` included (:meth:`_Parser._group_open`)
_COMMENT_REST = _re.compile(_COMMENT_BODY + r"\)", _re.S)
#: a character class as one token: ``[``, an optional ``^``, a ``]`` first taken literally, then
#: escapes and other characters up to the closing ``]``
_CLASS_RX = r"\[\^?\]?(?:\\.|[^\]\\])*\]"
#: a character class at a token boundary of the pattern (:meth:`_Parser` reads its end from it)
_CLASS_TOKEN = _re.compile(_CLASS_RX, _re.S)
#: the pattern's tokens up to the next parenthesis: everything before it (escapes, classes and
#: comments as tokens, whose parentheses are not the pattern's; runs of other characters;
#: possessive, so nothing is read twice) and the parenthesis, or the end of the text (an empty
#: group): one match per parenthesis, where a match per token spent half its time on the classes
#: of JSON whitespace
_PAREN_SCAN = _re.compile(r"(?:[^()\[\\]+|\\.|" + _CLASS_RX + r"|\(\?#" + _COMMENT_BODY
                          + r"\)?|[^()])*+([()]|\Z)", _re.S)
#: parsed classes and ``(?:...)`` groups by their text and flags, shared by every parse: generated
#: patterns (JSON Schema rules) repeat the same pieces hundreds of times
_PIECES: dict[tuple, Node] = {}
_VERBOSE_FLAG = _re.compile(r"\(\?[a-zA-Z-]*x")
_PIECES_MAX = 50_000
#: pieces shorter than this are parsed directly (a lookup would not pay)
_PIECE_MIN = 12
#: ``(?:...)`` groups longer than this are parsed directly, not cached: each key is the group's text,
#: so caching every level of a deeply nested group (a flat object of 20,000 optional properties nests
#: its alternatives 20,000 deep, 3 MB of text) kept the sum of the levels' lengths, tens of GB
_PIECE_MAX = 8192


#: the opening of a named group (``(?P<`` or ``(?<`` not followed by ``=``/``!``)
_NAMED_GROUP = re.compile(r"\(\?P?<(?![=!])")


def _scan(pattern: str) -> dict[int, int]:
    """``(`` index -> matching ``)`` index, from one regex scan (C speed) with :data:`_PAREN_SCAN`'s
    tokens (a parenthesis inside an escape, a class or a comment is none); unbalanced parentheses
    are left out (the parser reports them). The parser reads a class's end where it meets one
    (:data:`_CLASS_TOKEN`)."""
    groups: dict[int, int] = {}
    stack: list[int] = []
    for m in _PAREN_SCAN.finditer(pattern):
        t = m.group(1)
        if not t:
            break
        if t == "(":
            stack.append(m.end() - 1)
        elif stack:
            groups[stack.pop()] = m.end() - 1
    return groups


#: hash-consing table of every parse in the process (:func:`intern_node`), cleared whole when it
#: reaches :data:`_INTERN_MAX` entries
_INTERN: dict[tuple, Node] = {}
_INTERN_MAX = 1 << 18


def intern_node(node: Node) -> Node:
    """Hash-cons ``node`` (its children already interned): structurally equal subtrees become one
    object, within a pattern and across the patterns of the process (rule texts of one grammar,
    recurring shapes of other grammars), so the NFA builder compiles a repeated subexpression with
    the same continuation once and per-node memos (sizes, scans) share their entries. A key holds
    the ids of the children its node pins, so no id in a key is reused while the key exists (the
    table is only ever cleared whole)."""
    if isinstance(node, Chars):
        key = (0, node.ranges)
    elif isinstance(node, Concat):
        key = (1, tuple(map(id, node.items)))
    elif isinstance(node, Alt):
        key = (2, tuple(map(id, node.items)))
    elif isinstance(node, Repeat):
        key = (3, id(node.item), node.min, node.max)
    elif isinstance(node, Anchor):
        key = (4, node.kind)
    else:  # ir.Ref (calls=True)
        key = (5, node.name)
    hit = _INTERN.get(key)
    if hit is not None:
        return hit
    if len(_INTERN) >= _INTERN_MAX:
        _INTERN.clear()
    return _INTERN.setdefault(key, node)


#: a run of characters the main loop reads as plain literals (outside verbose mode)
_LITERAL_RUN = re.compile(r"[^()|*+?{^$\[.\\]+")
_NOT_LITERAL = "()|*+?{^$[.\\"
#: a plain character's :func:`intern_node` key (its one-code-point set's), by character
_LITERAL_KEYS: dict[str, tuple] = {}


def _literal_atom(ch: str) -> Node:
    """The interned one-character set of ``ch`` (read through the intern table, so always the
    table's node: the parser's plain-literal runs)."""
    k = _LITERAL_KEYS.get(ch)
    if k is None:
        if len(_LITERAL_KEYS) >= 1 << 16:
            _LITERAL_KEYS.clear()
        cp = ord(ch)
        k = _LITERAL_KEYS[ch] = (0, ((cp, cp),))
    a = _INTERN.get(k)
    return a if a is not None else intern_node(Chars(k[1]))


class _Parser:
    def __init__(self, pattern: str, where: str | None, calls: bool = False):
        if not isinstance(pattern, str):
            raise TypeError(f"a regex pattern must be str, got {type(pattern).__name__}")
        self.p = pattern
        self.n = len(pattern)
        self.where = where
        self.calls = calls
        # piece cache: not with (?x) anywhere (comments and spaces change what a piece means)
        self._cache_ok = self.n >= 64 and _VERBOSE_FLAG.search(pattern) is None
        if self._cache_ok:
            self._groups = _scan(pattern)
        self._pending: dict[int, tuple] = {}
        self._names: dict[str, int] = {}  # group name -> position of its definition

    # -- errors -----------------------------------------------------------------------------------
    def err(self, msg: str, pos: int) -> GrammarSyntaxError:
        return GrammarSyntaxError(msg, self.p, pos, self.where)

    def unsupported(self, feature: str, pos: int, detail: str = "") -> UnsupportedFeatureError:
        loc = f"position {pos} of regex {self._short()}"
        if self.where:
            loc += f" in {self.where}"
        return UnsupportedFeatureError(feature, detail, loc, text=self.p, position=pos)

    def _short(self) -> str:
        return repr(self.p if len(self.p) <= 60 else self.p[:57] + "...")

    # -- main loop ---------------------------------------------------------------------------------
    def parse(self) -> Node:
        p, n = self.p, self.n
        flags = _Flags()
        i = 0
        seen = ""  # the letters the leading global groups turned on
        # leading global flags (?sxamu), comments before or between them ignored as by Python's re
        while p.startswith("(?#", i) or (p.startswith("(?", i) and i + 2 < n and p[i + 2] in _FLAG_LETTERS + "-"):
            if p.startswith("(?#", i):
                m = _COMMENT_REST.match(p, i + 3)
                if m is None:
                    break  # the main loop reports the unterminated comment
                i = m.end()
                continue
            j, on, off, scoped = self._parse_flags(i)
            if scoped:
                break
            self._apply_flags(flags, on, off, i)
            seen += on
            if "a" in seen and "u" in seen:  # as Python's re, across the leading groups too
                raise self.err("ASCII and UNICODE flags are incompatible", i)
            i = j
        frames: list[tuple] = []
        alts: list[Node] = []
        items: list[Node] = []
        piece = None  # (key, end) of a class piece being parsed, stored once it is (see "[")
        while i < n:
            c = p[i]
            if flags.verbose and (c in " \t\n\r\f\v" or c == "#"):
                i = self._skip_verbose(i)
                continue
            atom: Node | None = None
            if not flags.verbose and not flags.ignorecase and c not in _NOT_LITERAL:
                # a run of plain characters (keys, enum values): each its interned one-character
                # set; the run's last character is left to the general path below when a
                # quantifier (or a comment before one) may follow it
                j = _LITERAL_RUN.match(p, i).end()
                if j < n and (p[j] in _QUANT_START or p.startswith("(?#", j)):
                    j -= 1
                if j > i:
                    items.extend(map(_literal_atom, p[i:j]))
                    i = j
                    continue
            if c == "(" and self.calls and p.startswith("(?&", i):
                atom, i = self._call(i)
            elif c == "(" and self._cache_ok and p.startswith("(?:", i) and i in self._groups \
                    and _PIECE_MIN <= self._groups[i] - i <= _PIECE_MAX and not flags.verbose \
                    and not _NAMED_GROUP.search(p, i, self._groups[i]):  # (names are checked by parsing)
                key = (p[i:self._groups[i] + 1], flags.dotall, flags.ignorecase, flags.multiline, flags.ascii,
                       self.calls)
                hit = _PIECES.get(key)
                if hit is not None:
                    atom = hit
                    i = self._groups[i] + 1
                else:
                    self._pending[i] = key
                    frames.append((alts, items, flags, i))
                    alts, items = [], []
                    flags = flags.copy()
                    i += 3
                    continue
            elif c == "(":
                j, kind, new_flags = self._group_open(i, flags)
                if kind == "skip":  # comment
                    i = j
                    continue
                frames.append((alts, items, flags, i))
                alts, items = [], []
                flags = new_flags
                i = j
                continue
            elif c == ")":
                if not frames:
                    raise self.err("unbalanced parenthesis", i)
                node = self._finish(alts, items)
                alts, items, flags, _open_pos = frames.pop()
                atom = node
                i += 1
                key = self._pending.pop(_open_pos, None)
                if key is not None and len(_PIECES) < _PIECES_MAX:
                    _PIECES[key] = node
            elif c == "|":
                alts.append(self._concat(items))
                items = []
                i += 1
                continue
            elif c in "*+?":
                raise self.err("nothing to repeat", i)
            elif c == "{":
                if self._try_quant(i) is not None:
                    raise self.err("nothing to repeat", i)
                atom = Chars(((0x7B, 0x7B),))
                i += 1
            elif c == "^" or c == "$":
                if flags.multiline:
                    raise self.unsupported(f"anchor {c!r} in multiline mode", i)
                items.append(self.mk(Anchor("start" if c == "^" else "end")))
                i += 1
                self._no_quant_after_anchor(i, flags)
                continue
            elif c == "[":
                m = _CLASS_TOKEN.match(p, i) if self._cache_ok else None
                end = m.end() if m is not None else -1
                if end > i:
                    # a class with its quantifier (``[ \t\n\r]{0,4}``: JSON whitespace is 40 % of
                    # the characters of a schema's rule texts) as one interned piece
                    j = end
                    if j < n:
                        q = p[j]
                        if q == "*" or q == "+" or q == "?":
                            j += 1
                        elif q == "{":
                            k = p.find("}", j)
                            j = k + 1 if k > 0 else j
                    if j == end:  # no quantifier right after the class: one after a comment is its own
                        k = self._skip_ignored(end, flags)
                        if k > end and k < n and p[k] in _QUANT_START and self._try_quant(k) is not None:
                            j = -1  # not a piece: the general path below applies that quantifier
                    if j >= n or (j >= 0 and p[j] != "?" and p[j] != "+"):  # not lazy / possessive
                        pkey = ("[q", p[i:j], flags.ignorecase, flags.ascii)
                        hit = _PIECES.get(pkey)
                        if hit is not None:
                            items.append(hit)
                            i = self._skip_ignored(j, flags)
                            if i < n and p[i] in _QUANT_START and self._try_quant(i) is not None:
                                raise self.err("multiple repeat", i)
                            continue
                        piece = (pkey, j)
                if end - i >= _PIECE_MIN:
                    key = (p[i:end], flags.ignorecase, flags.ascii)
                    hit = _PIECES.get(key)
                    if hit is None:
                        hit, i2 = self._parse_class(i, flags.ignorecase, flags.ascii)
                        if i2 == end and len(_PIECES) < _PIECES_MAX:
                            _PIECES[key] = hit
                        atom, i = hit, i2
                    else:
                        atom, i = hit, end
                else:
                    atom, i = self._parse_class(i, flags.ignorecase, flags.ascii)
            elif c == ".":
                atom = Chars(_ANY if flags.dotall else _DOT)
                i += 1
            elif c == "\\":
                atom, i = self._escape(i, flags)
                if isinstance(atom, Anchor):
                    items.append(self.mk(atom))
                    self._no_quant_after_anchor(i, flags)
                    continue
            else:
                cp = ord(c)
                atom = Chars(((cp, cp),))
                i += 1
            if flags.ignorecase and isinstance(atom, Chars) and c not in "[.\\)":
                atom = Chars(_fold(atom.ranges, flags.ignorecase))
            # quantifiers
            i = self._skip_ignored(i, flags)
            if i < n and p[i] in _QUANT_START:
                q = self._try_quant(i)
                if q is not None:
                    lo, hi, j = q
                    if j < n and p[j] == "?":
                        j += 1
                    elif j < n and p[j] == "+":
                        raise self.unsupported("possessive quantifier", j, "a*+ / a++ / a?+")
                    atom = _repeat(self.mk(atom), lo, hi)
                    i = self._skip_ignored(j, flags)
                    if i < n and p[i] in _QUANT_START and self._try_quant(i) is not None:
                        raise self.err("multiple repeat", i)
            items.append(self.mk(atom))
            if piece is not None:
                if i == piece[1] and len(_PIECES) < _PIECES_MAX:
                    _PIECES[piece[0]] = items[-1]
                piece = None
        if frames:
            raise self.err("missing ), unterminated subpattern", frames[-1][3])
        return self._finish(alts, items)

    def _call(self, i: int):
        """``(?&name)`` at ``i`` (only with ``calls=True``): a :class:`structgate.native.ir.Ref`."""
        from ..ir import Ref  # late: structgate.native.ir imports this module

        p = self.p
        k = p.find(")", i + 3)
        if k < 0:
            raise self.err("missing ), unterminated subroutine call (?&name)", i)
        name = p[i + 3:k]
        if not _CALL_NAME.fullmatch(name):
            raise self.err(f"bad rule name {name!r} in subroutine call (expected [A-Za-z_][A-Za-z0-9_.:/-]*)",
                           i + 3)
        return Ref(name), k + 1

    def _no_quant_after_anchor(self, i: int, flags: _Flags) -> None:
        i = self._skip_ignored(i, flags)
        if i < self.n and self.p[i] in _QUANT_START and self._try_quant(i) is not None:
            raise self.err("nothing to repeat", i)

    def _skip_verbose(self, i: int) -> int:
        p, n = self.p, self.n
        while i < n:
            c = p[i]
            if c in " \t\n\r\f\v":
                i += 1
            elif c == "#":
                while i < n and p[i] != "\n":
                    i += 1
            else:
                break
        return i

    def _skip_ignored(self, i: int, flags: _Flags) -> int:
        """Past what Python's ``re`` ignores between an item and its quantifier: ``(?#...)``
        comments (``a(?#c)*`` is ``a*``) and, under ``(?x)``, whitespace and ``#`` comments. An
        unterminated comment is left for the main loop to report."""
        p = self.p
        while True:
            j = self._skip_verbose(i) if flags.verbose else i
            if p.startswith("(?#", j):
                m = _COMMENT_REST.match(p, j + 3)
                if m is None:
                    return j
                j = m.end()
            if j == i:
                return i
            i = j

    def mk(self, node: Node) -> Node:
        """:func:`intern_node`."""
        return intern_node(node)


    def _concat(self, items: list[Node]) -> Node:
        if len(items) == 1:
            return items[0]
        return self.mk(Concat(tuple(items)))

    def _finish(self, alts: list[Node], items: list[Node]) -> Node:
        last = self._concat(items)
        if not alts:
            return last
        return self.mk(Alt(tuple(alts) + (last,)))

    # -- quantifiers -------------------------------------------------------------------------------
    def _try_quant(self, i: int):
        """``(min, max, end)`` if a quantifier starts at ``i``, None if ``{`` is a literal."""
        p, n = self.p, self.n
        c = p[i]
        if c == "*":
            return 0, None, i + 1
        if c == "+":
            return 1, None, i + 1
        if c == "?":
            return 0, 1, i + 1
        # '{'
        j = i + 1
        if j < n and p[j] == "}":
            return None
        k = j
        while k < n and p[k].isascii() and p[k].isdigit():
            k += 1
        lo_s = p[j:k]
        if k < n and p[k] == ",":
            k2 = k + 1
            while k2 < n and p[k2].isascii() and p[k2].isdigit():
                k2 += 1
            hi_s = p[k + 1:k2]
            k = k2
        else:
            hi_s = lo_s
        if not (k < n and p[k] == "}"):
            return None
        lo = int(lo_s) if lo_s else 0
        hi = int(hi_s) if hi_s else None
        if hi is not None and hi < lo:
            raise self.err("min repeat greater than max repeat", i)
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise self.err("the repetition number is too large", i)
        return lo, hi, k + 1

    # -- groups ------------------------------------------------------------------------------------
    def _parse_flags(self, i: int):
        """Parse ``(?flags)`` / ``(?flags-flags:``; returns (end, on, off, scoped)."""
        p, n = self.p, self.n
        j = i + 2
        on = ""
        off = ""
        while j < n and p[j] in _FLAG_LETTERS:
            on += p[j]
            j += 1
        if j < n and p[j] == "-":
            j += 1
            while j < n and p[j] in _FLAG_LETTERS:
                off += p[j]
                j += 1
            if not off:
                raise self.err("missing flag", j)
        if j >= n:
            raise self.err("missing -, : or )", j)
        if p[j] == ")":
            if off:
                raise self.err("missing :", j)
            return j + 1, on, off, False
        if p[j] == ":":
            return j + 1, on, off, True
        raise self.err("unknown flag" if p[j].isalpha() else "missing -, : or )", j)

    def _apply_flags(self, flags: _Flags, on: str, off: str, pos: int) -> None:
        for letter, value in [(x, True) for x in on] + [(x, False) for x in off]:
            if letter == "s":
                flags.dotall = value
            elif letter == "x":
                flags.verbose = value
            elif letter == "m":
                flags.multiline = value
            elif letter == "a":
                if not value:  # as Python's re: "cannot turn off flags 'a', 'u' and 'L'"
                    raise self.err("cannot turn off flag 'a'", pos)
                flags.ascii = True  # ASCII classes are the default; \\p{..} under it is refused, and i folds ASCII letters only
            elif letter == "i":
                flags.ignorecase = value
            elif letter == "u":  # str patterns are Unicode already (a no-op); a group's u undoes an outer a
                if not value:
                    raise self.err("cannot turn off flag 'u'", pos)
                if "a" in on:
                    raise self.err("bad inline flags: flags 'a' and 'u' are incompatible", pos)
                flags.ascii = False
            else:
                raise self.unsupported(f"regex flag {letter!r}", pos)
        if flags.ignorecase:
            flags.ignorecase = "ascii" if flags.ascii else True

    def _group_open(self, i: int, flags: _Flags):
        """Parse a group opener at ``i``; returns (index after it, kind, flags inside)."""
        p, n = self.p, self.n
        if not p.startswith("(?", i):
            return i + 1, "group", flags
        j = i + 2
        if j >= n:
            raise self.err("unexpected end of pattern", j)
        c = p[j]
        if c == ":":
            return j + 1, "group", flags
        if c == "P":
            if j + 1 < n and p[j + 1] == "<":
                return self._named_group(j + 2, i), "group", flags
            if j + 1 < n and p[j + 1] == "=":
                raise self.unsupported("backreference (?P=name)", i)
            raise self.err("unknown extension ?P" + (p[j + 1] if j + 1 < n else ""), i + 1)
        if c == "<":
            if j + 1 < n and p[j + 1] == "=":
                raise self.unsupported("lookbehind (?<=...)", i)
            if j + 1 < n and p[j + 1] == "!":
                raise self.unsupported("negative lookbehind (?<!...)", i)
            return self._named_group(j + 1, i), "group", flags
        if c == "=":
            raise self.unsupported("lookahead (?=...)", i)
        if c == "!":
            raise self.unsupported("negative lookahead (?!...)", i)
        if c == ">":
            raise self.unsupported("atomic group (?>...)", i)
        if c == "(":
            raise self.unsupported("conditional group (?(...)...)", i)
        if c == "#":
            m = _COMMENT_REST.match(p, j)
            if m is None:
                raise self.err("missing ), unterminated comment", i)
            return m.end(), "skip", flags
        if c in _FLAG_LETTERS or c == "-":
            k, on, off, scoped = self._parse_flags(i)
            if not scoped:
                raise self.err("global flags not at the start of the expression", i)
            new = flags.copy()
            self._apply_flags(new, on, off, i)
            return k, "group", new
        raise self.err(f"unknown extension ?{c}", i + 1)

    def _named_group(self, j: int, i: int) -> int:
        p = self.p
        k = p.find(">", j)
        if k < 0:
            raise self.err("missing >, unterminated name", j)
        name = p[j:k]
        if not name:
            raise self.err("missing group name", j)
        if not name.isidentifier():
            raise self.err(f"bad character in group name {name!r}", j)
        if name in self._names:  # as Python's re: a name names one group
            raise self.err(f"redefinition of group name {name!r} (defined at position {self._names[name]})", j)
        self._names[name] = j
        return k + 1

    # -- escapes -----------------------------------------------------------------------------------
    def _hex(self, i: int, j: int, count: int, what: str) -> tuple[int, int]:
        """Exactly ``count`` hex digits at ``j``; ``i`` = position of the backslash."""
        s = self.p[j:j + count]
        if len(s) < count or any(ch not in _HEX for ch in s):
            raise self.err(f"incomplete escape {self.p[i:j + count]}", i)
        return int(s, 16), j + count

    def _braced_hex(self, i: int, j: int) -> tuple[int, int]:
        """``{H..}`` at ``j`` (the ``{``)."""
        k = self.p.find("}", j)
        s = self.p[j + 1:k] if k > 0 else ""
        if k < 0 or not s or len(s) > 8 or any(ch not in _HEX for ch in s):
            raise self.err("bad escape: expected {hex digits}", i)
        cp = int(s, 16)
        if cp > MAX_CP:
            raise self.err(f"bad escape: code point {s} beyond U+10FFFF", i)
        return cp, k + 1

    def _code_escape(self, i: int, in_class: bool, ignorecase: bool = False, ascii: bool = False):
        """Escapes that denote a single code point or a class; returns (kind, value, end) with
        kind "char" (value = code point) or "set" (value = ranges), or None if not one of them."""
        p, n = self.p, self.n
        c = p[i + 1]
        j = i + 2
        if c in _CLASS_ESC:
            return "set", (_CLASS_ESC_ASCII if ascii else _CLASS_ESC)[c], j
        if c in "DWS":
            return "nset", (_CLASS_ESC_ASCII if ascii else _CLASS_ESC)[c.lower()], j
        if c in _SIMPLE_ESC:
            return "char", _SIMPLE_ESC[c], j
        if c == "x":
            if j < n and p[j] == "{":
                cp, j = self._braced_hex(i, j)
                return "char", cp, j
            cp, j = self._hex(i, j, 2, "\\x")
            return "char", cp, j
        if c == "u":
            if j < n and p[j] == "{":
                cp, j = self._braced_hex(i, j)
                return "char", cp, j
            cp, j = self._hex(i, j, 4, "\\u")
            if _is_hi_surrogate(cp) and p.startswith("\\u", j):
                try:
                    lo, k = self._hex(j, j + 2, 4, "\\u")
                except GrammarSyntaxError:
                    lo = -1
                if 0xDC00 <= lo <= 0xDFFF:
                    return "char", 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), k
            return "char", cp, j
        if c == "U":
            cp, j = self._hex(i, j, 8, "\\U")
            if cp > MAX_CP:
                raise self.err(f"bad escape {p[i:j]}", i)
            return "char", cp, j
        if c == "N":
            if j < n and p[j] == "{":
                k = p.find("}", j)
                if k > j + 1:
                    name = p[j + 1:k]
                    try:
                        return "char", ord(unicodedata.lookup(name)), k + 1
                    except KeyError:
                        raise self.err(f"undefined character name {name!r}", i) from None
            raise self.err("missing {NAME} after \\N", i)
        if c == "c":
            if j < n and p[j].isascii() and p[j].isalpha():
                return "char", ord(p[j]) % 32, j + 1
            raise self.err("bad escape \\c: expected a letter", i)
        if c in "pP":
            return self._property(i, c == "P", ignorecase, ascii)
        if c == "0" or (in_class and c in _OCT):
            k = j
            while k < n and k < j + 2 and p[k] in _OCT:
                k += 1
            cp = int(p[i + 1:k], 8)
            if cp > 0o377:
                raise self.err(f"octal escape value {p[i:k]} outside of range 0-0o377", i)
            return "char", cp, k
        return None

    def _property(self, i: int, negated: bool, ignorecase: bool, ascii: bool = False):
        """``\\p{NAME}`` / ``\\P{NAME}`` / ``\\pL`` / ``\\p{^NAME}`` at ``i`` (the backslash): a
        Unicode General_Category set (:mod:`.unicode_props`); returns ("set" | "nset", ranges, end)."""
        from .unicode_props import UNICODE_VERSION, property_ranges

        p, j = self.p, i + 2
        if j >= self.n:
            raise self.err(f"missing property name after \\{p[i + 1]}", i)
        if p[j] == "{":
            k = p.find("}", j)
            if k < 0:
                raise self.err(f"missing }} after \\{p[i + 1]}{{", i)
            name, end = p[j + 1:k], k + 1
            if name.startswith("^"):  # PCRE / regex: \p{^L} is \P{L}
                name, negated = name[1:], not negated
        else:
            name, end = p[j], j + 1  # \pL: a one-letter name
        if not name:
            raise self.err(f"empty property name in {p[i:end]}", i)
        if ignorecase or ascii:
            # engines disagree: PCRE leaves \\p unaffected by caseless matching, the regex module
            # reads (?i)\\p{Lu} as any cased letter, ECMAScript's /iu folds both sides; (?a) limits
            # \\p to ASCII in the regex module only
            raise self.unsupported(f"Unicode property {p[i:end]} under the {'i' if ignorecase else 'a'} flag", i,
                                   "engines read it differently; write the case variants or ranges out")
        try:
            ranges = property_ranges(name)
        except KeyError:
            raise self.unsupported(
                f"Unicode property {p[i:end]}", i,
                f"known: the General_Category values (short or long names, gc=X), Any, ASCII, Assigned, of "
                f"Unicode {UNICODE_VERSION}; scripts, blocks and binary properties are not") from None
        return ("nset" if negated else "set"), ranges, end

    def _escape(self, i: int, flags: _Flags):
        """Escape outside a class at ``i`` (the backslash); returns (node, end)."""
        p, n = self.p, self.n
        if i + 1 >= n:
            raise self.err("bad escape (end of pattern)", i)
        c = p[i + 1]
        r = self._code_escape(i, False, flags.ignorecase, flags.ascii)
        if r is not None:
            kind, val, j = r
            if kind == "set":
                return Chars(_fold(val, flags.ignorecase) if flags.ignorecase else val), j
            if kind == "nset":  # \D \W \S: complement of the (case-closed) positive set
                return Chars(negate_ranges(_fold(val, flags.ignorecase) if flags.ignorecase else val)), j
            return Chars(_fold(((val, val),), flags.ignorecase) if flags.ignorecase else ((val, val),)), j
        j = i + 2
        if c in "123456789":
            # Python: three octal digits are an octal escape, otherwise a group reference
            if (j + 1 < n and c in _OCT and p[j] in _OCT and p[j + 1] in _OCT):
                cp = int(p[i + 1:j + 2], 8)
                if cp > 0o377:
                    raise self.err(f"octal escape value {p[i:j + 2]} outside of range 0-0o377", i)
                return Chars(_fold(((cp, cp),), flags.ignorecase) if flags.ignorecase else ((cp, cp),)), j + 2
            raise self.unsupported("backreference \\" + c, i)
        if c == "b":
            raise self.unsupported("word boundary \\b", i)
        if c == "B":
            raise self.unsupported("non-word boundary \\B", i)
        if c == "k":
            raise self.unsupported("backreference \\k<name>", i)
        if c in "AZz":
            if flags.multiline and c == "Z":
                pass
            return Anchor("start" if c == "A" else "end"), j
        if c.isascii() and c.isalnum():
            raise self.err(f"bad escape \\{c}", i)
        cp = ord(c)
        return Chars(((cp, cp),)), j

    # -- classes -----------------------------------------------------------------------------------
    def _class_item(self, i: int, ignorecase: bool = False, ascii: bool = False):
        p = self.p
        c = p[i]
        if c != "\\":
            return "char", ord(c), i + 1
        if i + 1 >= self.n:
            raise self.err("unterminated character set", i)
        r = self._code_escape(i, True, ignorecase, ascii)
        if r is not None:
            return r
        e = p[i + 1]
        if e == "b":
            return "char", 8, i + 2
        if e.isascii() and e.isalnum():
            raise self.err(f"bad escape \\{e}", i)
        return "char", ord(e), i + 2

    def _parse_class(self, start: int, ignorecase: bool = False, ascii: bool = False):
        p, n = self.p, self.n
        i = start + 1
        negate = False
        if i < n and p[i] == "^":
            negate = True
            i += 1
        ranges: list[tuple[int, int]] = []
        neg_sets: list[tuple[tuple[int, int], ...]] = []
        first = True
        while True:
            if i >= n:
                raise self.err("unterminated character set", start)
            if p[i] == "]" and not first:
                i += 1
                break
            first = False
            item_pos = i
            kind, val, i = self._class_item(i, ignorecase, ascii)
            if i + 1 < n and p[i] == "-" and p[i + 1] != "]":
                kind2, val2, i = self._class_item(i + 1, ignorecase, ascii)
                if kind != "char" or kind2 != "char":
                    raise self.err(f"bad character range {p[item_pos:i]}", item_pos)
                if val2 < val:
                    raise self.err(f"bad character range {p[item_pos:i]}", item_pos)
                ranges.append((val, val2))
            elif kind == "set":
                ranges.extend(val)
            elif kind == "nset":
                neg_sets.append(val)
            else:
                ranges.append((val, val))
        rs = normalize_ranges(ranges)
        if ignorecase:
            rs = _fold(rs, ignorecase)
        for base in neg_sets:  # \D \W \S items: complement of the (case-closed) positive set
            rs = normalize_ranges(rs + negate_ranges(_fold(base, ignorecase) if ignorecase else base))
        if negate:
            rs = negate_ranges(rs)
        return Chars(rs), i


def _repeat(atom: Node, lo: int, hi: int | None) -> Node:
    return repeat_node(atom, lo, hi, intern_node)


#: :func:`empty_when` per node id (the node pinned in the value); cleared whole when full
_NULLABLE: dict[int, tuple] = {}
_NULLABLE_MAX = 1 << 16
#: :func:`_nonempty` builds the empty-free form of a concatenation of this many nullable items or
#: fewer flat (one alternative per item, the items after it shared as right-nested pairs: that
#: many levels of nesting); a longer one is split in two halves, recursively (a balanced tree of
#: such runs: O(log n) levels, O(n) new nodes)
NONEMPTY_CONCAT_MAX = 64
#: :func:`_nonempty` leaves a concatenation of more items than this as it is (its empty string
#: included: the same language, the repeat's cost of old, e.g. ``max_nfa_states`` for a large
#: count). A configuration inside a concatenation of ``n`` nullable items holds O(n) NFA items
#: whatever its form (``x(?:a?b?c?...)y`` alone: 8,000 items ~3 s to the second mask, 20,000 out
#: of memory), so past this many the rewritten repeat would trade a typed refusal for that cost
#: (``(?:a?b?c?...){0,300}``: 1,000 items ~1.6 s for five characters, 4,000 ~27 s)
NONEMPTY_CONCAT_ITEMS_MAX = 1024

#: The empty string's contexts, for :func:`empty_when`: a position of the text is in one of four
#: worlds, bit ``at_start + 2 * at_end`` (``at_start``: the position is 0; ``at_end``: it is the
#: text's length; both: the empty text). A node's mask has the bits of the worlds where it matches
#: the empty string at that position. Anchors only assert, so every mask is monotone: nothing
#: (0), ``^`` (:data:`W_START`), ``$`` (:data:`W_END`), ``^$`` (:data:`W_BOTH`), ``^|$`` (``W_START |
#: W_END``) or everywhere (:data:`W_ALL`).
W_START = 0b1010
W_END = 0b1100
W_BOTH = 0b1000
W_ALL = 0b1111


def empty_when(node, leaf=None, memo: dict | None = None) -> int:
    """Where ``node`` matches the empty string: a mask of worlds (see :data:`W_ALL`). A
    concatenation: the worlds of all its items; an alternation: of any; a repeat with ``min == 0``:
    all (else its body's); an anchor: its own (``^``: :data:`W_START`, ``$``: :data:`W_END`); a code
    point set: none. Leaves other than regex nodes (``ir.Ref``, ``ir.ByteSet``, ``ir.LazyRule``)
    count as none, so a 0 is "not known to" (a reference may name a nullable rule), unless
    ``leaf(node)`` gives their masks (a grammar's nullable rules); then ``memo`` (a dict kept by
    the caller for that ``leaf``) holds the values instead of the process-wide memo. Iterative;
    memoised per node.

    Evaluated left to right with short circuits at the absorbing values: a concatenation stops at
    its first item with mask 0, an alternation at its first with :data:`W_ALL` (a monotone mask
    with the middle world's bit is ``W_ALL``). A generated rule's optional member
    ``(?:[ \t\n\r]{0,4},"key":VALUE)?`` is decided at its comma, without walking VALUE (the full
    walk of every optional group's body was 15 % of a slow schema's parse)."""
    t = type(node)
    if t is Anchor:
        return W_START if node.kind == "start" else W_END
    if not (t is Concat or t is Alt or t is Repeat):
        return 0 if leaf is None or t is Chars else leaf(node)
    table = _NULLABLE if leaf is None else memo
    hit = table.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    stack = [[node, 0, -1]]  # frames: node, index of the item being evaluated, value so far (-1: none)
    ret = None  # the value of the frame just finished
    while stack:
        fr = stack[-1]
        n = fr[0]
        tn = type(n)
        if tn is Repeat and n.min == 0:
            v = W_ALL
        else:  # (a repeat with min >= 1: its body's mask, as a concatenation of one item)
            is_alt = tn is Alt
            stop = W_ALL if is_alt else 0  # the absorbing value
            acc = fr[2] if fr[2] >= 0 else (0 if is_alt else W_ALL)
            i = fr[1]
            if ret is not None:
                acc = (acc | ret) if is_alt else (acc & ret)
                ret = None
                i += 1
            items = (n.item,) if tn is Repeat else n.items
            pushed = False
            while acc != stop and i < len(items):
                x = items[i]
                tx = type(x)
                if tx is Repeat and x.min == 0:
                    r = W_ALL
                elif tx is Concat or tx is Alt or tx is Repeat:
                    h = table.get(id(x))
                    if h is None or h[0] is not x:
                        fr[1], fr[2] = i, acc
                        stack.append([x, 0, -1])
                        pushed = True
                        break
                    r = h[1]
                elif tx is Anchor:
                    r = W_START if x.kind == "start" else W_END
                else:
                    r = 0 if leaf is None or tx is Chars else leaf(x)
                acc = (acc | r) if is_alt else (acc & r)
                i += 1
            if pushed:
                continue
            v = acc
        stack.pop()
        if len(table) >= _NULLABLE_MAX and leaf is None:
            table.clear()
        table[id(n)] = (n, v)
        ret = v
    return ret


def surely_nullable(node) -> bool:
    """Whether ``node`` matches the empty string in every context (:func:`empty_when` is
    :data:`W_ALL`): a concatenation of such items, an alternation with one, a repeat with ``min ==
    0`` or such a body. Anchors and leaves other than regex nodes count as not (a False is "not
    known to be")."""
    return empty_when(node) == W_ALL


def _assertion(mask: int, mk):
    """A zero-width node that matches exactly in the worlds of the monotone ``mask`` (non-zero):
    the empty string, ``^``, ``$``, ``^$`` or ``^|$``."""
    if mask == W_ALL:
        return EMPTY
    start, end = mk(Anchor("start")), mk(Anchor("end"))
    if mask == W_START:
        return start
    if mask == W_END:
        return end
    if mask == W_BOTH:
        return mk(Concat((start, end)))
    if mask == W_START | W_END:
        return mk(Alt((start, end)))
    raise AssertionError(f"not a monotone empty-string mask: {mask:#06b}")


def _guarded(mask: int, node, mk, after: bool = False):
    """``node`` preceded (``after``: followed) by the assertion of ``mask`` (none for :data:`W_ALL`)."""
    if mask == W_ALL:
        return node
    a = _assertion(mask, mk)
    return mk(Concat((node, a) if after else (a, node)))


#: :func:`_nonempty` rewrites this many levels of nesting at most; below, a body is kept as it is
#: (its empty string included: the same language, only the repeat's cost of old). A recursion, so
#: a bound well under Python's stack (a 500-deep nullable nest failed with RecursionError)
NONEMPTY_DEPTH_MAX = 200


def _nonempty(node, mk, memo: dict, depth: int = 0, ctx=None):
    """An expression ``y`` with ``L(y) ⊆ L(node)`` and ``node = y | [E]`` (as languages in every
    context), where ``E`` is :func:`empty_when` ``(node)``'s assertion (:func:`_assertion`): the
    empty string is left out of ``node`` wherever :func:`empty_when` sees it, within
    :data:`NONEMPTY_DEPTH_MAX` levels. ``None`` when ``y`` is nothing (``node`` matches only
    zero-width). ``node`` itself when it never matches empty (or lies deeper). ``mk`` makes
    (interns) each new node; ``memo`` by node id for one call of :func:`repeat_node`. ``ctx``, for
    a grammar's references: ``(ew, prime)``, ``ew(node)`` its :func:`empty_when` with the
    grammar's nullable rules, ``prime(leaf, depth)`` the empty-free form of a leaf ``ew`` calls
    nullable (the same contract)."""
    ew = empty_when if ctx is None else ctx[0]
    if depth > NONEMPTY_DEPTH_MAX or not ew(node):
        return node
    k = id(node)
    if k in memo:
        return memo[k]
    t = type(node)
    if t is Anchor:
        out = None
    elif t is Alt:  # (a | [Ea]) | (b | [Eb]) = (a | b) | [Ea | Eb]
        parts: list = []
        for x in node.items:
            y = _nonempty(x, mk, memo, depth + 1, ctx)
            if y is not None and y not in parts:
                parts.append(y)
        out = None if not parts else parts[0] if len(parts) == 1 else mk(Alt(tuple(parts)))
    elif t is Repeat:
        y = _nonempty(node.item, mk, memo, depth + 1, ctx)
        out = None if y is None or node.max == 0 else \
            _repeat_parts(y, ew(node.item), node.min, node.max, mk, True)
    elif t is Concat:
        out = node if len(node.items) > NONEMPTY_CONCAT_ITEMS_MAX else _concat_nonempty(node.items, mk, memo, depth, ctx)
    else:  # a leaf that ctx's ew calls nullable (a reference to a nullable rule)
        out = ctx[1](node, depth)
    memo[k] = out
    return out


def _concat_nonempty(items, mk, memo: dict, depth: int, ctx=None):
    """:func:`_nonempty` of the concatenation of ``items`` (each of which may match empty: their
    :func:`empty_when` masks are all non-zero). ``a1 a2..ak`` with ``a1 = a1' | [E1]`` is
    ``a1' a2..ak | [E1] (a2..ak)' | [E1 & E(a2..ak)]``: its empty-free form has one alternative per
    item, ``[E1 & .. & E(i-1)] ai' a(i+1)..ak``. Up to :data:`NONEMPTY_CONCAT_MAX` items it is built
    flat (the tails shared as right-nested pairs); a longer run is split in halves ``L R``:
    ``(L R)' = L' R | [E(L)] R'``, each half a node of its own (so the NFA builder builds each half
    once per continuation: O(n) states, O(log n) levels)."""
    ew = empty_when if ctx is None else ctx[0]
    n = len(items)
    if n > NONEMPTY_CONCAT_MAX:
        h = n // 2
        left, right = _concat_tree(items[:h], mk), _concat_tree(items[h:], mk)
        parts = []
        y = _nonempty(left, mk, memo, depth + 1, ctx)
        if y is not None:
            parts.append(mk(Concat((y, right))))
        y = _nonempty(right, mk, memo, depth + 1, ctx)
        if y is not None:
            parts.append(_guarded(ew(left), y, mk))
        return None if not parts else parts[0] if len(parts) == 1 else mk(Alt(tuple(parts)))
    masks = [ew(x) for x in items]
    alts: list = []
    tail = None  # a_i .. a_k as right-nested pairs, so the NFA builder shares each tail
    for i in range(n - 1, -1, -1):
        y = _nonempty(items[i], mk, memo, depth + 1, ctx)
        if y is not None:
            alts.append(y if tail is None else mk(Concat((y, tail))))
        tail = items[i] if tail is None else mk(Concat((items[i], tail)))
    alts.reverse()  # now alts[j] starts with the j-th item that has a non-empty form
    out: list = []
    prefix, j = W_ALL, 0
    for i in range(n):
        y = _nonempty(items[i], mk, memo, depth + 1, ctx)  # (memoised)
        if y is not None:
            out.append(_guarded(prefix, alts[j], mk))
            j += 1
        prefix &= masks[i]
    return None if not out else out[0] if len(out) == 1 else mk(Alt(tuple(out)))


def _concat_tree(items, mk):
    """The concatenation of ``items`` as one node: flat up to :data:`NONEMPTY_CONCAT_MAX` items,
    else two halves (a balanced tree of flat runs; the same language)."""
    n = len(items)
    if n == 1:
        return items[0]
    if n <= NONEMPTY_CONCAT_MAX:
        return mk(Concat(tuple(items)))
    h = n // 2
    return mk(Concat((_concat_tree(items[:h], mk), _concat_tree(items[h:], mk))))


def _collapse(item, lo: int, hi: int | None, mk):
    """``item{lo,hi}``, with a repeat ``z{1,h}`` as ``item`` folded into one: ``(z{1,h}){lo,hi}`` is
    ``z{lo,h*hi}`` (``k`` copies give ``k`` to ``k*h`` of ``z``, and those ranges leave no gap),
    which is unambiguous where the nested form is not. ``EMPTY`` for ``hi == 0``."""
    if hi == 0:
        return EMPTY
    if type(item) is Repeat and item.min == 1:
        h = None if item.max is None or hi is None else item.max * hi
        item = item.item
    else:
        h = hi
    if lo == 1 and h == 1:
        return item
    return mk(Repeat(item, lo, h))


def _repeat_parts(y, mask: int, lo: int, hi: int | None, mk, nonempty: bool):
    """``x{lo,hi}`` for ``x = y | [E]`` (``y``: :func:`_nonempty` of ``x``, not None; ``mask``:
    ``E``'s worlds, non-zero); with ``nonempty``, its own empty-free form. A copy of ``x`` that
    matches empty can stand anywhere when ``E`` always holds, and can be left out when ``lo == 0``:
    then ``x{lo,hi}`` is ``y{0,hi}``. Else (``lo >= 1``) it can stand only at a gap where ``E``
    holds, and a gap between two non-empty copies is neither the text's start nor its end: it is
    the first gap or the last one, so ``x{lo,hi}`` is ``y{lo,hi} | [E] y{0,lo-1} | y{0,lo-1} [E]``
    (the first part dropped when ``E`` needs the end, the last when ``E`` needs the start: both
    when it needs both, leaving ``[E]`` for no non-empty copy)."""
    if lo == 0 or mask == W_ALL:
        return _collapse(y, 1 if nonempty else 0, hi, mk)
    parts = [_collapse(y, lo, hi, mk)]
    low = _collapse(y, 1 if nonempty else 0, lo - 1, mk) if lo > 1 else (None if nonempty else EMPTY)
    at_first, at_last = mask & 0b0010, mask & 0b0100  # E holds at a start (end) that is not the end (start)
    if low is not None and (at_first or at_last):
        if at_first:
            parts.append(low if low is EMPTY else _guarded(mask, low, mk))
        if at_last:
            parts.append(low if low is EMPTY else _guarded(mask, low, mk, after=True))
    elif not nonempty:  # E needs the start and the end: no non-empty copy at all
        parts.append(_assertion(mask, mk))
    out: list = []
    for p in parts:
        if p is EMPTY:
            p = _assertion(mask, mk)
        if p not in out:
            out.append(p)
    return out[0] if len(out) == 1 else mk(Alt(tuple(out)))


def repeat_node(item, lo: int, hi: int | None, mk=None):
    """The expression ``item{lo,hi}`` (``hi=None``: unbounded), simplified: ``EMPTY`` for ``hi ==
    0``, ``item`` for ``{1,1}``, and an ``item`` that may match the empty string (:func:`empty_when`)
    repeated with the empty string left out of it: ``x{m,n}`` of a nullable ``x`` is ``x'{0,n}``
    where ``x'`` is ``x`` without the empty string (``(?:\\s|){0,700}`` is ``\\s{0,700}``, ``(?:a?)*``
    is ``a*``, ``((?:x?)*){0,3}`` is ``x*``); where ``x`` matches empty only through an anchor,
    the empty copies stand at the repeat's first or last gap (:func:`_repeat_parts`:
    ``(?:^|\\s){0,700}`` is ``\\s{0,700}``, ``(?:^|a){3,5}`` is ``a{3,5}|^a{0,2}``). The same
    language; without it each of the ``n`` copies could be skipped by an empty path, so every
    configuration held O(n) NFA items (seconds for the first mask of ``(?:\\s|){0,700}``; for the
    eager DFA of ``(?:^|\\s){0,700}``). ``mk``: makes each new node (the regex parser interns
    them); None keeps them as built.

    Returns
    -------
    Node
        A :class:`Repeat`, ``item`` itself, ``EMPTY``, or a node built from ``item``'s parts.
    """
    mk = mk or (lambda n: n)
    if hi == 0:
        return EMPTY
    mask = empty_when(item)
    if mask:
        y = _nonempty(item, mk, {})
        if y is None:  # only zero-width: [E] for lo >= 1
            return EMPTY if lo == 0 or mask == W_ALL else _assertion(mask, mk)
        return _repeat_parts(y, mask, lo, hi, mk, False)
    if lo == 1 and hi == 1:
        return item
    return mk(Repeat(item, lo, hi))


def parse_regex(pattern: str, *, where: str | None = None, calls: bool = False) -> Node:
    """Parse ``pattern`` into an AST (see the module docstring for the dialect).

    Parameters
    ----------
    pattern : str
        The regex text (any code points, including NUL).
    where : str | None
        Where the pattern came from (e.g. a JSON pointer), copied into errors.
    calls : bool, default: False
        Accept PCRE's subroutine call ``(?&name)`` (``name`` matching
        ``[A-Za-z_][A-Za-z0-9_.:/-]*``); it parses to :class:`structgate.native.ir.Ref` ``(name)``,
        a reference to a rule of a :class:`structgate.native.ir.Grammar` (it may be quantified:
        ``(?&item)*``). Without it ``(?&`` stays a :class:`~structgate.errors.GrammarSyntaxError`
        ("unknown extension").

    Returns
    -------
    node : Chars | Concat | Alt | Repeat | Anchor (and ``ir.Ref`` leaves with ``calls=True``)

    Raises
    ------
    GrammarSyntaxError
        Invalid syntax (``.position`` is the 0-based offset of the offending construct).
    UnsupportedFeatureError
        Valid syntax outside the regular subset (backreferences, lookaround, ``\\b``...).
    """
    return _Parser(pattern, where, calls).parse()


def ast_size(node: Node) -> int:
    """Number of code-point-set leaves after expanding counted repeats (an NFA size estimate);
    iterative, memoised on shared subtrees, saturates at 2**62."""
    cap = 1 << 62
    memo: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(node, False)]
    out: list[int] = []
    while stack:
        nd, done = stack.pop()
        if isinstance(nd, (Chars, Anchor)) or not isinstance(nd, (Concat, Alt, Repeat)):
            out.append(1)  # leaves (an ir.Ref / ir.ByteSet counts as one)
            continue
        if not done:
            hit = memo.get(id(nd))
            if hit is not None:
                out.append(hit)
                continue
            stack.append((nd, True))
            if isinstance(nd, Repeat):
                stack.append((nd.item, False))
            else:
                for it in nd.items:
                    stack.append((it, False))
            continue
        if isinstance(nd, Repeat):
            k = out.pop()
            mult = max(nd.min, nd.max if nd.max is not None else nd.min + 1, 1)
            r = min(cap, k * mult + 1)
        else:
            cnt = len(nd.items)
            r = min(cap, (sum(out[len(out) - cnt:]) if cnt else 0) + 1)
            del out[len(out) - cnt:]
        memo[id(nd)] = r
        out.append(r)
    return out[0]
