"""Exact regexes for integer and decimal ranges (JSON number syntax, no exponent under bounds).

All functions return regex text in structgate's native dialect (a subset of Python ``re``), or
``None`` for the empty set. Digits are written ``[0-9]``, never ``\\d``.

Algorithms
----------
* :func:`fixed_width_range` — the classic digit-by-digit split of ``[lo, hi]`` over fixed-width
  strings (the construction of e.g. the ``regex-range`` / ``to-regex-range`` libraries): split on
  the leading digit into a partial low block, a run of full middle blocks and a partial high block.
* :func:`integer_range` — JSON integers (no leading zeros, no ``-0``) in ``[lo, hi]``: split by sign,
  then by digit count, each count a :func:`fixed_width_range`.
* :func:`number_range` — JSON decimals ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` in an interval with
  inclusive/exclusive ends. The magnitude's integer part ``I`` is constrained by an integer range;
  at ``I == floor(bound)`` the fraction digits are compared to the bound's fraction digits
  lexicographically (decimal fractions compare like zero-padded digit strings), see
  :func:`_frac_between`.
* :func:`number_literal_regex` — the spellings of one number (a ``const``/``enum`` value) that a
  validator reads as equal to it: integer literal, plain decimal, scientific form.
"""
from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

__all__ = ["fixed_width_range", "integer_range", "number_range", "number_literal_regex", "alt", "JSON_NUMBER",
           "JSON_INTEGER"]

JSON_INTEGER = r"-?(?:0|[1-9][0-9]*)"
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"


def alt(parts) -> str | None:
    """``(?:a|b|...)`` of the non-None parts (deduplicated, order kept); None if there are none.
    Linear in the parts (deduplicated by a dict: a list scan per part was quadratic, 1 s of a
    20,000-value ``enum``)."""
    seen = list(dict.fromkeys(p for p in parts if p is not None))
    if not seen:
        return None
    if len(seen) == 1:
        return seen[0]
    return "(?:" + "|".join(seen) + ")"


def _digit_class(a: int, b: int, base: int) -> str:
    """Class of the digits with values a..b (hex: both letter cases)."""
    if base == 10:
        return str(a) if a == b else f"[{a}-{b}]"
    # base 16
    items = []
    lo, hi = a, min(b, 9)
    if lo <= hi:
        items.append(str(lo) if lo == hi else f"{lo}-{hi}")
    lo, hi = max(a, 10), b
    if lo <= hi:
        l, h = "abcdef"[lo - 10], "abcdef"[hi - 10]
        items.append(l if lo == hi else f"{l}-{h}")
        items.append(l.upper() if lo == hi else f"{l.upper()}-{h.upper()}")
    if len(items) == 1 and a == b and a < 10:
        return items[0]
    return "[" + "".join(items) + "]"


def _full(width: int, base: int) -> str:
    if width == 0:
        return ""
    d = _digit_class(0, base - 1, base)
    return d if width == 1 else f"{d}{{{width}}}"


@lru_cache(maxsize=4096)
def fixed_width_range(lo: int, hi: int, width: int, base: int = 10) -> str | None:
    """Regex for the ``width``-digit strings (leading zeros included) whose value is in [lo, hi].

    Parameters
    ----------
    lo, hi : int
        Inclusive bounds, ``0 <= lo``, ``hi < base**width``.
    width : int
        Number of digits (>= 0).
    base : {10, 16}
        Hex digits match both letter cases.
    """
    if lo > hi:
        return None
    if width == 0:
        return ""
    p = base ** (width - 1)
    dlo, rlo = divmod(lo, p)
    dhi, rhi = divmod(hi, p)
    if dlo == dhi:
        sub = fixed_width_range(rlo, rhi, width - 1, base)
        return _digit_class(dlo, dlo, base) + sub
    parts = []
    start, end = dlo, dhi
    if rlo != 0:
        parts.append(_digit_class(dlo, dlo, base) + fixed_width_range(rlo, p - 1, width - 1, base))
        start = dlo + 1
    tail = None
    if rhi != p - 1:
        tail = _digit_class(dhi, dhi, base) + fixed_width_range(0, rhi, width - 1, base)
        end = dhi - 1
    if start <= end:
        parts.append(_digit_class(start, end, base) + _full(width - 1, base))
    if tail is not None:
        parts.append(tail)
    return alt(parts)


def _nonneg_integer_range(a: int, b: int | None) -> str | None:
    """Canonical non-negative integers (no leading zeros) in [a, b]; b None = unbounded."""
    if a < 0:
        a = 0
    if b is not None and a > b:
        return None
    la = len(str(a))
    lb = len(str(b)) if b is not None else la
    parts = []
    for L in range(la, lb + 1):
        low = max(a, 10 ** (L - 1) if L > 1 else 0)
        high = 10**L - 1 if b is None else min(b, 10**L - 1)
        if low <= high:
            parts.append(fixed_width_range(low, high, L, 10))
    if b is None:
        parts.append(f"[1-9][0-9]{{{la},}}")
    return alt(parts)


def integer_range(lo: int | None, hi: int | None) -> str | None:
    """JSON integer literals (``-?(0|[1-9][0-9]*)``, never ``-0``) with value in [lo, hi].

    ``None`` bounds are unbounded. Returns None for the empty set. Example:
    ``integer_range(-5, None)`` matches ``-5 .. -1``, ``0`` and every positive integer.
    """
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    # negatives: magnitudes in [max(1, -hi), -lo]
    if lo is None or lo < 0:
        mlo = 1 if hi is None or hi >= 0 else -hi
        mhi = None if lo is None else -lo
        r = _nonneg_integer_range(mlo, mhi)
        if r is not None:
            parts.append("-" + _group(r))
    if hi is None or hi >= 0:
        r = _nonneg_integer_range(0 if lo is None else max(lo, 0), hi)
        if r is not None:
            parts.append(r)
    return alt(parts)


def _group(r: str) -> str:
    return r if r.startswith("(?:") and _balanced_outer(r) else f"(?:{r})" if "|" in r else r


def _balanced_outer(r: str) -> bool:
    """True when r is one group ``(?:...)`` spanning the whole string."""
    depth = 0
    esc = False
    in_cls = False
    for i, ch in enumerate(r):
        if esc:
            esc = False
            continue
        if ch == "\\":
            esc = True
        elif in_cls:
            if ch == "]":
                in_cls = False
        elif ch == "[":
            in_cls = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and i != len(r) - 1:
                return False
    return depth == 0


# -- decimals -----------------------------------------------------------------------------------
def _split(d: Decimal) -> tuple[int, str]:
    """Non-negative decimal -> (integer part, fraction digits without trailing zeros)."""
    d = d.copy_abs()  # callers pass magnitudes; Decimal("-0") is one too
    s = format(d, "f")
    if "." in s:
        ip, fp = s.split(".")
        fp = fp.rstrip("0")
    else:
        ip, fp = s, ""
    return int(ip), fp


@lru_cache(maxsize=4096)
def _frac_rest(lo: tuple[str, bool] | None, hi: tuple[str, bool] | None) -> str | None:
    """Digit strings t (possibly empty) with 0.t in the interval given by lo/hi.

    ``lo = (digits, exclusive)``: 0.t >= 0.digits (or >); ``hi`` likewise with <= / <; None =
    unbounded on that side. Digits have no trailing zeros (empty = 0).
    """
    empty_ok, nonempty = _frac_between(lo, hi)
    if nonempty is None:
        return "" if empty_ok else None
    if empty_ok:
        return f"(?:{nonempty})?"
    return nonempty


@lru_cache(maxsize=4096)
def _frac_between(lo, hi) -> tuple[bool, str | None]:
    """(empty allowed, regex of the non-empty digit strings t) with 0.t within lo/hi."""
    if lo is not None and lo == ("", False):
        lo = None
    # base cases
    if hi is not None and hi[0] == "":
        if hi[1]:  # 0.t < 0: impossible
            return False, None
        if lo is not None:  # lo is ("", True) or nonzero: 0.t <= 0 and 0.t >= lo > 0 impossible
            return False, None
        return True, "0+"
    if lo is None and hi is None:
        return True, "[0-9]+"
    if lo == ("", True) and hi is None:
        return False, "[0-9]*[1-9][0-9]*"
    empty_ok = lo is None  # t empty = 0: 0 >= lo only if lo is 0 inclusive (normalised to None)
    # hi nonempty here (or None): 0 <= hi fine, 0 < hi fine since hi > 0
    groups: dict[str | None, list[int]] = {}
    for d in range(10):
        if lo is None:
            nlo = None
        else:
            l = int(lo[0][0]) if lo[0] else 0
            if d > l:
                nlo = None
            elif d == l:
                nlo = (lo[0][1:], lo[1])
            else:
                continue
        if hi is None:
            nhi = None
        else:
            h = int(hi[0][0])
            if d < h:
                nhi = None
            elif d == h:
                nhi = (hi[0][1:], hi[1])
            else:
                continue
        rest = _frac_rest(nlo, nhi)
        if rest is None:
            continue
        groups.setdefault(rest, []).append(d)
    alts = []
    for rest, ds in groups.items():
        # ds may be non-contiguous only in theory; emit runs
        runs = []
        for d in ds:
            if runs and runs[-1][1] == d - 1:
                runs[-1][1] = d
            else:
                runs.append([d, d])
        cls = "".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
        cls = cls if len(ds) == 1 else f"[{cls}]"
        alts.append(cls + rest)
    return empty_ok, alt(alts)


def _mag_range(lo: Decimal, lo_excl: bool, hi: Decimal | None, hi_excl: bool,
               fraction_required: bool = False) -> str | None:
    """Unsigned JSON decimals ``(0|[1-9][0-9]*)(\\.[0-9]+)?`` with value in the interval (with the
    fraction part mandatory when ``fraction_required``)."""
    if hi is not None and (lo > hi or (lo == hi and (lo_excl or hi_excl))):
        return None
    il, fl = _split(lo)
    parts = []

    def with_frac(ipart: str | None, flo, fhi) -> None:
        if ipart is None:
            return
        empty_ok, ne = _frac_between(flo, fhi)
        empty_ok = empty_ok and not fraction_required
        if ne is None:
            if empty_ok:
                parts.append(ipart)
            return
        frac = rf"\.{_group(ne)}"
        parts.append(f"{_group(ipart)}(?:{frac})?" if empty_ok else f"{_group(ipart)}{frac}")

    if hi is None:
        with_frac(str(il), (fl, lo_excl), None)
        with_frac(_nonneg_integer_range(il + 1, None), None, None)
        return alt(parts)
    ih, fh = _split(hi)
    if il == ih:
        with_frac(str(il), (fl, lo_excl), (fh, hi_excl))
        return alt(parts)
    with_frac(str(il), (fl, lo_excl), None)
    if ih - il >= 2:
        with_frac(_nonneg_integer_range(il + 1, ih - 1), None, None)
    with_frac(str(ih), None, (fh, hi_excl))
    return alt(parts)


def number_range(lo: Decimal | None, lo_excl: bool, hi: Decimal | None, hi_excl: bool,
                 fraction_required: bool = False) -> str | None:
    """JSON decimals (no exponent, no ``-0``/``-0.0``) with value in the interval; None if empty.

    Parameters
    ----------
    lo, hi : decimal.Decimal | None
        Bounds (None = unbounded).
    lo_excl, hi_excl : bool
        Exclusive bound when True.
    fraction_required : bool
        Only literals with a fraction part (``1.0``, never ``1``): for callers that give integer
        literals their own (exact) range.
    """
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_excl or hi_excl))):
        return None
    parts = []
    zero = Decimal(0)
    # negative values: magnitude m = -v > 0, m in [-hi, -lo]
    if lo is None or lo < 0:
        if hi is None or hi >= 0:
            mlo, mlo_x = zero, True
        else:
            mlo, mlo_x = -hi, hi_excl
        mhi, mhi_x = (None, False) if lo is None else (-lo, lo_excl)
        r = _mag_range(mlo, mlo_x, mhi, mhi_x, fraction_required)
        if r is not None:
            parts.append("-" + _group(r))
    if hi is None or hi >= 0:
        if lo is None or lo < 0:
            plo, plo_x = zero, False
        else:
            plo, plo_x = lo, lo_excl
        r = _mag_range(plo, plo_x, hi, hi_excl, fraction_required)
        if r is not None:
            parts.append(r)
    return alt(parts)


# -- numeric const / enum values ------------------------------------------------------------------
#: most digits a plain-decimal or scientific spelling of a numeric ``const``/``enum`` value may have
#: (beyond its integer literal, always written): ``1e-300`` keeps its exponent forms, not
#: ``0.000…01``; an exactly held 300-digit integer its literal, not ``1.000…e300``
MAX_SPELLING_DIGITS = 40
#: every spelling of zero (``-0``, ``0.0``, ``0e5``, ``-0.0E-3``): all equal to 0
_ZERO = r"-?0(?:\.0+)?(?:[eE][+-]?[0-9]+)?"
_ZERO_FLOAT = r"-?0(?:\.0+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)"


def _exponent(x: int) -> str:
    """``[eE]`` and the exponent ``x`` with an optional ``+`` (``-`` when negative; ``+0``/``-0``
    for zero) and leading zeros."""
    if x > 0:
        return rf"[eE]\+?0*{x}"
    if x < 0:
        return rf"[eE]-0*{-x}"
    return r"[eE][+-]?0+"


def _spellings(d: Decimal, integer_literal: bool) -> str:
    """Regex of spellings of the magnitude ``|d|`` (``d != 0``) whose exact decimal value is
    ``|d|``: with ``integer_literal`` (``|d|`` an integer) its integer literal; the plain decimal
    with a fraction part (``0.000000001``, ``100.0``) and the normalized scientific form (one
    digit before the point: ``1e-9``, ``2.5E+20``), each with any trailing zeros in the fraction,
    the exponent with or without sign and with leading zeros, ``e`` or ``E``. A plain or
    scientific form is written only with at most :data:`MAX_SPELLING_DIGITS` digits before the
    exponent (the integer literal always)."""
    t = d.as_tuple()  # (never normalize(): it rounds to the context's 28 digits)
    c = "".join(map(str, t.digits)).lstrip("0")
    q = t.exponent + len(c) - len(c.rstrip("0"))
    c = c.rstrip("0")  # |d| = c * 10**q exactly, c without leading or trailing zeros
    exp = _exponent(q + len(c) - 1)
    plain = None
    if q >= 0:
        digits = c + "0" * q
        if integer_literal:
            plain = digits + (r"(?:\.0+)?" if len(digits) <= MAX_SPELLING_DIGITS else "")
        elif len(digits) <= MAX_SPELLING_DIGITS:
            plain = digits + r"\.0+"
    elif len(c) > -q:
        plain = c[:q] + r"\." + c[q:] + "0*"
    elif -q + 1 <= MAX_SPELLING_DIGITS:
        plain = r"0\." + "0" * (-q - len(c)) + c + "0*"
    if len(c) > MAX_SPELLING_DIGITS:
        return plain
    mant = c[0] + (rf"\.{c[1:]}0*" if len(c) > 1 else r"(?:\.0+)?")
    if plain is not None and q + len(c) - 1 == 0 and (plain == mant or plain == c + r"(?:\.0+)?"):
        return f"{plain}(?:{exp})?"  # one digit before the point: 1.5, 1.5e0; 5, 5.0, 5e0
    return alt([plain, mant + exp])


#: the largest magnitude at which a number's int and double spellings are interchangeable
#: (:func:`number_literal_regex`): every integer up to 2**53 is a double, and int and double
#: then divide alike in ``multipleOf``
TWIN_MAX = 2 ** 53


def number_literal_regex(v: int | float, int_strict: bool = False) -> str:
    """The JSON spellings of the number ``v`` (a ``const``/``enum`` value) that a validator
    (Python's ``json`` + ``jsonschema``) reads as a number equal to ``v``: an integer literal is
    read as the exact int, any other spelling as the double nearest its decimal value.

    * an int ``v``: its integer literal; for ``|v| <=`` :data:`TWIN_MAX` (2**53) also the spellings
      with a fraction or exponent (:func:`_spellings`), read as the double ``float(v)``;
    * a float ``v``: the spellings with a fraction or exponent of its shortest spelling
      (``repr``: ``1e-09``, ``2.5e+20``), which read back as ``v``; an integral ``v`` with
      ``|v| <= 2**53`` also its integer literal (``-?5`` for ``5.0``).

    Only up to 2**53 do the int and the double of one value get the same verdict from every
    keyword: beyond it ``multipleOf`` divides a double with rounding and an int exactly (the double
    ``1e23`` is a multiple of the int 10**23 for ``jsonschema``, since ``1e23 % 10**23`` rounds the
    divisor, while the int 99999999999999991611392 equal to it is not), so a value there keeps the
    spellings of its own type only;
    * zero: ``-?0``, with any fraction zeros and exponent (``-0.0``, ``0e5``).

    With ``int_strict`` (draft 4, where ``1.0`` is no integer) an int gets its integer literal only
    and a float the spellings with a fraction or exponent only. Not produced (sound, not
    exhaustive): other placements of the point (``25e19``, ``0.1e-8``), decimals that merely round
    to the double (``0.10000000000000001``), forms past :data:`MAX_SPELLING_DIGITS` digits."""
    if v == 0:
        if int_strict:
            return "-?0" if isinstance(v, int) else _ZERO_FLOAT
        return _ZERO
    sign = "-" if v < 0 else ""
    if isinstance(v, int):
        if int_strict or abs(v) > TWIN_MAX:
            return str(v)
        names = [(Decimal(v), True), (Decimal(repr(float(v))), False)]
    else:
        names = [(Decimal(repr(v)), False)]
        if v.is_integer() and abs(v) <= TWIN_MAX:  # its exact integer, also as a literal
            names.insert(0, (Decimal(int(v)), not int_strict))
    body = alt(_spellings(d, lit) for i, (d, lit) in enumerate(names) if all(d != e for e, _ in names[:i]))
    return sign + (_group(body) if sign else body)
