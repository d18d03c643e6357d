"""Unicode property escapes ``\\p{..}`` / ``\\P{..}``: General_Category values → code-point ranges.

Source of the data: Python's :mod:`unicodedata` (``unicodedata.category``), so the Unicode version
is the interpreter's (``unicodedata.unidata_version``: 14.0.0 on Python 3.11, 15.0.0 on 3.12).
The table of every code point's category (3,968 runs on Unicode 14) is built once per process, on
the first property escape (~0.1-0.3 s: one ``category`` call per code point), and each property's
ranges are memoised.

Property names (Unicode ``PropertyValueAliases.txt``, UTS #18 RL1.2; the names ECMAScript's
``\\p{..}`` and the ``regex`` module accept for General_Category), matched loosely as UAX #44-LM3
says (case, spaces, ``_`` and ``-`` ignored):

* a value, short or long: ``Lu`` / ``Uppercase_Letter``, ``Nd`` / ``Decimal_Number`` / ``digit``,
  ``P`` / ``Punctuation`` / ``punct``, ``Cc`` / ``Control`` / ``cntrl``, ``Cn`` / ``Unassigned``...,
  the groups ``L M N P S Z C`` and ``LC`` / ``L&`` / ``Cased_Letter``;
* ``General_Category=X``, ``gc=X``;
* ``Any`` (every code point), ``ASCII`` (U+0000..U+007F), ``Assigned`` (every category but Cn).

Under the ``i`` or ``a`` flag a property escape is refused (``UnsupportedFeatureError``): engines read
``(?i)\\p{Lu}`` differently (PCRE: unaffected; the ``regex`` module: any cased letter; ECMAScript
``/iu``: both sides case-folded), and ``(?a)`` limits ``\\p`` to ASCII in the ``regex`` module only.

Anything else — scripts (``Greek``, ``Script=Latin``, ``sc=``, ``scx=``), blocks (``InBasic_Latin``),
binary properties (``Alphabetic``, ``White_Space``...) — is not known here:
:func:`property_ranges` raises ``KeyError`` and the parser turns it into a typed
``UnsupportedFeatureError`` naming the property.
"""
from __future__ import annotations

import threading
import unicodedata

__all__ = ["property_ranges", "UNICODE_VERSION"]

#: the Unicode version of the data (the interpreter's ``unicodedata``)
UNICODE_VERSION = unicodedata.unidata_version

_CATEGORIES = ("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
               "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn")

#: long names and other aliases of the General_Category values (PropertyValueAliases.txt, gc)
_ALIASES = {
    "L": ("Letter",), "LC": ("Cased_Letter", "L&"), "Lu": ("Uppercase_Letter",),
    "Ll": ("Lowercase_Letter",), "Lt": ("Titlecase_Letter",), "Lm": ("Modifier_Letter",),
    "Lo": ("Other_Letter",), "M": ("Mark", "Combining_Mark"), "Mn": ("Nonspacing_Mark",),
    "Mc": ("Spacing_Mark",), "Me": ("Enclosing_Mark",), "N": ("Number",),
    "Nd": ("Decimal_Number", "digit"), "Nl": ("Letter_Number",), "No": ("Other_Number",),
    "P": ("Punctuation", "punct"), "Pc": ("Connector_Punctuation",), "Pd": ("Dash_Punctuation",),
    "Ps": ("Open_Punctuation",), "Pe": ("Close_Punctuation",), "Pi": ("Initial_Punctuation",),
    "Pf": ("Final_Punctuation",), "Po": ("Other_Punctuation",), "S": ("Symbol",),
    "Sm": ("Math_Symbol",), "Sc": ("Currency_Symbol",), "Sk": ("Modifier_Symbol",),
    "So": ("Other_Symbol",), "Z": ("Separator",), "Zs": ("Space_Separator",),
    "Zl": ("Line_Separator",), "Zp": ("Paragraph_Separator",), "C": ("Other",),
    "Cc": ("Control", "cntrl"), "Cf": ("Format",), "Cs": ("Surrogate",), "Co": ("Private_Use",),
    "Cn": ("Unassigned",),
}
_GROUPS = {"L": ("Lu", "Ll", "Lt", "Lm", "Lo"), "LC": ("Lu", "Ll", "Lt"),
           **{g: tuple(c for c in _CATEGORIES if c[0] == g) for g in "MNPSZC"}}


def _loose(name: str) -> str:
    """UAX #44-LM3 loose matching: case, spaces, ``_`` and ``-`` ignored."""
    return "".join(ch for ch in name if ch not in " _-").lower()


_BY_LOOSE: dict[str, str] = {}
for _short, _longs in _ALIASES.items():
    for _n in (_short, *_longs):
        _BY_LOOSE[_loose(_n)] = _short

_lock = threading.Lock()
_runs: dict[str, list[tuple[int, int]]] | None = None
_memo: dict[str, tuple[tuple[int, int], ...]] = {}


def _category_runs() -> dict[str, list[tuple[int, int]]]:
    """Category → its code-point runs (sorted, maximal), built once per process."""
    global _runs
    with _lock:
        if _runs is None:
            cat = unicodedata.category
            runs: dict[str, list[tuple[int, int]]] = {c: [] for c in _CATEGORIES}
            prev, start = cat("\0"), 0
            for cp in range(1, 0x110000):
                c = cat(chr(cp))
                if c != prev:
                    runs[prev].append((start, cp - 1))
                    prev, start = c, cp
            runs[prev].append((start, 0x10FFFF))
            _runs = runs
        return _runs


def _normalized(ranges) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def property_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """The code points of the Unicode property ``name`` (the text between ``\\p{`` and ``}``).

    Parameters
    ----------
    name : str
        A General_Category value (short or long name, loosely matched), ``General_Category=X`` /
        ``gc=X``, or ``Any`` / ``ASCII`` / ``Assigned`` (module docstring).

    Returns
    -------
    ranges : tuple[tuple[int, int], ...]
        Sorted, disjoint, non-adjacent inclusive code-point ranges (surrogates included where the
        category has them: ``Cs``, ``C``, ``Any``; the UTF-8 layer drops them).

    Raises
    ------
    KeyError
        Not a property this module knows (scripts, blocks, binary properties, a misspelling).
    """
    hit = _memo.get(name)
    if hit is not None:
        return hit
    key = _loose(name)
    if "=" in key:
        prop, _, value = key.partition("=")
        if prop not in ("generalcategory", "gc"):
            raise KeyError(name)
        key = value
    if key == "any":
        out: tuple[tuple[int, int], ...] = ((0, 0x10FFFF),)
    elif key == "ascii":
        out = ((0, 0x7F),)
    else:
        runs = _category_runs()
        if key == "assigned":
            cats: tuple[str, ...] = tuple(c for c in _CATEGORIES if c != "Cn")
        else:
            short = _BY_LOOSE.get(key)
            if short is None:
                raise KeyError(name)
            cats = _GROUPS.get(short, (short,))
        out = _normalized(r for c in cats for r in runs[c])
    _memo[name] = out
    return out
