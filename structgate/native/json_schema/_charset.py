"""Code-point sets and their JSON-string encodings as regexes.

A *decoded* character ``c`` of a JSON string can appear in the JSON text as (RFC 8259 §7):

* itself, unless it is ``"``, ``\\`` or a control character U+0000–U+001F;
* a two-character escape: ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``;
* ``\\uXXXX`` (hex, either case) for a BMP code point, or a UTF-16 surrogate pair
  ``\\uD8xx\\uDCxx`` for an astral one.

:func:`json_char_regex` turns a set of decoded code points into the regex of all those encodings,
so one regex "character unit" is exactly one decoded character (what ``minLength``/``maxLength``
count and what a ``pattern`` class constrains). Lone surrogates are never produced.

Sets are tuples of inclusive ``(lo, hi)`` code-point ranges, sorted and non-overlapping.
"""
from __future__ import annotations

import re

from functools import lru_cache

from ..._text import SPLIT_PAIR as _SPLIT_PAIR  # (a name the emitters import from here)
from ._numeric import alt, fixed_width_range

__all__ = ["CharSet", "normalize", "union", "complement", "intersect", "subtract", "ANY",
           "json_char_regex", "class_text", "JSON_CHAR", "STRING", "literal_string_regex"]

CharSet = tuple[tuple[int, int], ...]
MAX_CP = 0x10FFFF
ANY: CharSet = ((0, MAX_CP),)
SURROGATES: CharSet = ((0xD800, 0xDFFF),)


def _is_normal(s) -> bool:
    """Whether ``s`` is already a normalized :data:`CharSet` (a tuple of int pairs, sorted,
    neither overlapping nor adjacent), so the set operations can skip the sort."""
    if type(s) is not tuple:
        return False
    prev = -2
    for r in s:
        if type(r) is not tuple or len(r) != 2:
            return False
        a, b = r
        if type(a) is not int or type(b) is not int or a > b or a <= prev + 1:
            return False
        prev = b
    return True


def normalize(ranges) -> CharSet:
    """Sort and merge ranges (adjacent ranges merged)."""
    if _is_normal(ranges):
        return ranges
    rs = sorted((int(a), int(b)) for a, b in ranges if a <= b)
    out: list[list[int]] = []
    for a, b in rs:
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def union(*sets: CharSet) -> CharSet:
    if len(sets) == 1:
        return normalize(sets[0])
    return normalize([r for s in sets for r in s])


def complement(s: CharSet) -> CharSet:
    out = []
    prev = 0
    for a, b in normalize(s):
        if a > prev:
            out.append((prev, a - 1))
        prev = b + 1
    if prev <= MAX_CP:
        out.append((prev, MAX_CP))
    return tuple(out)


def intersect(a: CharSet, b: CharSet) -> CharSet:
    """The code points in both sets (one merge of the two normalized range lists)."""
    a, b = normalize(a), normalize(b)
    out = []
    i = j = 0
    na, nb = len(a), len(b)
    while i < na and j < nb:
        lo = a[i][0] if a[i][0] > b[j][0] else b[j][0]
        hi = a[i][1] if a[i][1] < b[j][1] else b[j][1]
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def subtract(a: CharSet, b: CharSet) -> CharSet:
    return intersect(a, complement(b))


def _cls_char(cp: int) -> str:
    """One code point written for use inside a regex character class."""
    if cp > 0xFFFF:
        return chr(cp)  # literal astral character (the dialect has \\uHHHH for BMP only)
    ch = chr(cp)
    if ch.isalnum() and cp < 0x80:
        return ch
    if ch in " !\"#%&',:;<=>@_`~/" and cp < 0x80:
        return ch
    return f"\\u{cp:04x}"


def class_text(s: CharSet, negate: bool = False) -> str:
    """``[...]`` for a non-empty set (ranges written with ``\\uHHHH`` escapes where needed)."""
    if not negate and len(s) == 1 and s[0][0] == s[0][1] and s[0][0] < 0x80:
        ch = chr(s[0][0])
        if ch.isalnum() or ch in " !\"#%&',:;<=>@_`~/":
            return ch
        if 0x20 < s[0][0] < 0x7F:
            return "\\" + ch
    body = []
    for a, b in s:
        if a == b:
            body.append(_cls_char(a))
        elif b == a + 1:
            body.append(_cls_char(a) + _cls_char(b))
        else:
            body.append(f"{_cls_char(a)}-{_cls_char(b)}")
    return ("[^" if negate else "[") + "".join(body) + "]"


_SHORT = {0x22: '"', 0x5C: "\\\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_MUST_ESCAPE: CharSet = ((0, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
_HEX = "[0-9a-fA-F]"


def _hex4(s: CharSet) -> str | None:
    return alt(fixed_width_range(a, b, 4, 16) for a, b in s)


def _astral_pairs(s: CharSet) -> str | None:
    parts = []
    for a, b in s:
        a, b = max(a, 0x10000), b
        if a > b:
            continue
        ha, la = 0xD800 + ((a - 0x10000) >> 10), 0xDC00 + ((a - 0x10000) & 0x3FF)
        hb, lb = 0xD800 + ((b - 0x10000) >> 10), 0xDC00 + ((b - 0x10000) & 0x3FF)
        u = r"\\u"
        if ha == hb:
            parts.append(f"{u}{fixed_width_range(ha, ha, 4, 16)}{u}{fixed_width_range(la, lb, 4, 16)}")
            continue
        if la != 0xDC00:
            parts.append(f"{u}{fixed_width_range(ha, ha, 4, 16)}{u}{fixed_width_range(la, 0xDFFF, 4, 16)}")
            ha += 1
        tail = None
        if lb != 0xDFFF:
            tail = f"{u}{fixed_width_range(hb, hb, 4, 16)}{u}{fixed_width_range(0xDC00, lb, 4, 16)}"
            hb -= 1
        if ha <= hb:
            parts.append(f"{u}{fixed_width_range(ha, hb, 4, 16)}{u}{fixed_width_range(0xDC00, 0xDFFF, 4, 16)}")
        if tail:
            parts.append(tail)
    return alt(parts)


@lru_cache(maxsize=1024)
def json_char_regex(s: CharSet, *, escapes: bool = True) -> str | None:
    """Regex of every JSON-string encoding of one decoded code point of ``s`` (None if empty).

    Parameters
    ----------
    s : CharSet
        Decoded code points (surrogates are ignored).
    escapes : bool
        False = only the canonical encoding of each character (plain where allowed, the short
        escape where one exists, else lowercase ``\\u00XX``): used for keys that must differ
        from a given set of strings.
    """
    s = subtract(s, SURROGATES)
    if not s:
        return None
    parts = []
    plain = subtract(s, _MUST_ESCAPE)
    if plain:
        parts.append(class_text(plain))
    short = sorted(_SHORT[c] for c in _SHORT if any(a <= c <= b for a, b in s)
                   and (escapes or c != 0x2F))
    if short:
        parts.append("\\\\" + (short[0] if len(short) == 1 and short[0] != "/" else "[" + "".join(short) + "]"))
    if escapes:
        bmp = intersect(s, ((0, 0xFFFF),))
        h = _hex4(bmp) if bmp else None
        if h is not None:
            parts.append(r"\\u" + (f"(?:{h})" if "|" in h else h))
        astral = intersect(s, ((0x10000, MAX_CP),))
        if astral:
            parts.append(_astral_pairs(astral))
    else:
        other_ctrl = [c for c in range(0x20) if c not in _SHORT and any(a <= c <= b for a, b in s)]
        if other_ctrl:  # lowercase \u00XX only
            by_hi: dict[int, list[int]] = {}
            for c in other_ctrl:
                by_hi.setdefault(c >> 4, []).append(c & 15)
            parts.append(r"\\u00" + alt(f"{h}[{''.join('0123456789abcdef'[x] for x in lo)}]"
                                        for h, lo in by_hi.items()))
    return alt(parts)


#: one decoded character in any JSON spelling (no lone surrogates): the unit of length bounds
JSON_CHAR: str = json_char_regex(ANY)
#: any JSON string, quotes included (compact form: a ``\\uXXXX`` escape may be a lone surrogate,
#: which RFC 8259's grammar allows; used where no length is counted)
STRING: str = r'"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'




def _literal_char_regex(cp: int) -> str:
    """:func:`literal_string_regex`'s spelling of one code point of a value."""
    if 0xD800 <= cp <= 0xDFFF:
        # a lone surrogate in the value: only its \\u escape can encode it
        return r"\\u" + fixed_width_range(cp, cp, 4, 16)
    if 0x20 <= cp < 0x7F and chr(cp) not in '"\\/':
        # printable ASCII: the plain spelling only (``\u0061`` for ``a`` is valid JSON but no
        # model writes it; excluding it keeps key/enum regexes small and is sound)
        return class_text(((cp, cp),))
    return json_char_regex(((cp, cp),))


class _LiteralChars(dict):
    """Code point -> :func:`_literal_char_regex`, filled on first use: the table
    :func:`literal_string_regex` translates a value with (one ``str.translate``, C speed, instead of
    a call per character; enum- and key-heavy schemas spell thousands of literals)."""

    __slots__ = ()

    def __missing__(self, cp: int) -> str:
        v = self[cp] = _literal_char_regex(cp)
        return v


_LITERAL_CHARS = _LiteralChars()


def literal_string_regex(value: str) -> str:
    """Regex of JSON encodings of exactly the string ``value`` (quotes included): printable ASCII
    characters spelled plainly, every other character in any of its encodings. A value holding a
    high surrogate followed by a low one (two lone surrogates, possible in a Python ``str``) is the
    decoded value of no JSON text (a decoder joins the escaped pair into one character): a regex
    that matches nothing."""
    if _SPLIT_PAIR.search(value):
        from ._common import NEVER

        return NEVER
    if len(_LITERAL_CHARS) > 4096:  # (astral and CJK values: the table stays bounded)
        _LITERAL_CHARS.clear()
    return '"' + value.translate(_LITERAL_CHARS) + '"'
