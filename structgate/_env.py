"""Numbers read from structgate's environment variables and option values, parsed and checked in one
place, so that every bad value is refused with the same kind of message (the variable's or option's
name, the value, what it must be).

Text is read as ASCII decimal only: Python's ``int()`` and ``float()`` also take other scripts'
digits (``int("٣") == 3``) and digit-group underscores (``int("1_0") == 10``), which no
configuration means; :func:`int_text` and :func:`float_text` refuse them.
"""
from __future__ import annotations

import decimal
import math
import numbers
import os
import re
from typing import Any

__all__ = ["env_int", "env_float", "env_seconds", "int_text", "float_text", "seconds_text", "int_value",
           "seconds_value", "bool_value", "option_int", "option_bool", "shown", "MAX_OPTION_INT",
           "ENV_SHARED_WALKS_BYTES", "shared_walks_bytes"]

#: the largest integer option value taken by default (engines hold counts in int32)
MAX_OPTION_INT = (1 << 31) - 1

#: an optionally signed run of ASCII digits (``re.ASCII``: ``\d`` would take every script's digits)
_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
#: an optionally signed ASCII decimal number with optional fraction and exponent (no ``_``, no
#: ``inf``/``nan``, no hexadecimal)
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
#: an optionally signed ``inf`` / ``infinity`` (any case): a time limit's "no limit"
_INF_TEXT = re.compile(r"[+-]?inf(?:inity)?", re.ASCII | re.IGNORECASE)
#: the whitespace a value's text may carry around it (ASCII only, as the digits are)
_WS = " \t\n\r\f\v"
#: a value shown in a message is cut to about this many characters
_SHOWN_MAX = 80


def shown(v: Any) -> str:
    """``repr(v)`` for a message, cut to ~80 characters; an integer (or a fraction) too long for
    Python to write in decimal (``sys.get_int_max_str_digits()``: ``repr`` raises ``ValueError``)
    is described by its size instead, so the message names the option rather than failing."""
    try:
        r = repr(v)
    except ValueError:
        if isinstance(v, numbers.Rational):
            bits = max(abs(v.numerator).bit_length(), v.denominator.bit_length())
            kind = "an integer" if isinstance(v, numbers.Integral) else f"a {type(v).__name__}"
            return f"{kind} of about {int(bits * math.log10(2)) + 1} digits"
        return f"a {type(v).__name__} too long to show"
    return r if len(r) <= _SHOWN_MAX else r[:_SHOWN_MAX - 3] + "..."


def int_text(raw: str) -> int:
    """The integer an ASCII decimal text spells (surrounding whitespace allowed).

    Raises
    ------
    ValueError
        Anything else: other scripts' digits, ``_`` separators, a fraction or exponent, empty.
    """
    t = raw.strip(_WS)
    if not _INT_TEXT.fullmatch(t):
        raise ValueError(f"not an ASCII decimal integer: {shown(raw)}")
    return int(t)


def float_text(raw: str) -> float:
    """The number an ASCII decimal text spells (``1``, ``-0.5``, ``2e-3``; surrounding whitespace
    allowed). The result may be ``inf`` when the exponent overflows; callers check finiteness.

    Raises
    ------
    ValueError
        Anything else: ``inf``, ``nan``, other scripts' digits, ``_`` separators, empty.
    """
    t = raw.strip(_WS)
    if not _FLOAT_TEXT.fullmatch(t):
        raise ValueError(f"not an ASCII decimal number: {shown(raw)}")
    return float(t)


def seconds_text(raw: str) -> float:
    """The number of seconds a time limit's text spells: ASCII decimal (:func:`float_text`) or
    ``inf`` / ``infinity`` (any case, optionally signed; no limit). Surrounding whitespace allowed.

    Raises
    ------
    ValueError
        Anything else (``nan`` among them).
    """
    t = raw.strip(_WS)
    if _INF_TEXT.fullmatch(t):
        return -math.inf if t.startswith("-") else math.inf
    return float_text(t)


def seconds_value(v: Any) -> float | None:
    """A time limit's number of seconds, as a plain ``float``: any real number (``int``, ``float``,
    :class:`~fractions.Fraction`, :class:`~decimal.Decimal`, numpy numbers; not a bool) or a text
    :func:`seconds_text` reads. ``inf`` stays ``inf`` (no limit, as ``<= 0`` is), and a number too
    large for a float is ``inf`` (``-inf`` below). None for anything else, NaN among them, for the
    caller to refuse naming the option or variable. The one reader of every timeout: the
    :class:`~structgate.backends.interface.CompileOptions` fields and the plugin's variables
    (:func:`env_seconds`)."""
    if isinstance(v, bool) or _is_numpy_bool(v):
        return None
    if isinstance(v, str):
        try:
            f = seconds_text(v)
        except ValueError:
            return None
    elif isinstance(v, decimal.Decimal):  # not a numbers.Real, though a real number
        if v.is_nan():  # (float() of a signalling NaN raises)
            return None
        f = float(v)  # past a float's range: +-inf
    elif isinstance(v, numbers.Real):
        try:
            f = float(v)
        except OverflowError:  # an int or Fraction past a float's range
            f = math.inf if v > 0 else -math.inf
    else:
        return None
    if math.isnan(f):
        return None
    if f == 0.0 and _positive(v):  # below a float's least positive value: still a limit, not "none"
        f = math.ulp(0.0)
    return f


def _positive(v: Any) -> bool:
    """Whether the real number ``v`` (or the text :func:`seconds_text` reads) is above zero."""
    if isinstance(v, str):
        t = v.strip(_WS)
        return _FLOAT_TEXT.fullmatch(t) is not None and decimal.Decimal(t) > 0
    try:
        return bool(v > 0)
    except TypeError:
        return False


def _is_numpy_bool(v: Any) -> bool:
    import numpy as np

    return isinstance(v, np.bool_)


def int_value(v: Any) -> int | None:
    """An option's integer, as a plain ``int``: an integer (``int``, a numpy integer; not a bool), a
    finite integral real of any type (JSON's ``1e3``, a numpy float, ``Fraction(6, 2)``,
    ``Decimal("5")``), or an ASCII decimal integer text (:func:`int_text`); None for anything else,
    for the caller to refuse naming the option."""
    if isinstance(v, bool) or _is_numpy_bool(v):
        return None
    if isinstance(v, numbers.Integral):  # int, numpy integers, IntEnum: as a plain int
        return int(v)
    if isinstance(v, numbers.Rational):  # Fraction: exactly (float() of a huge one overflows)
        return int(v) if v.denominator == 1 else None
    if isinstance(v, decimal.Decimal):  # not a numbers.Real, though a real number
        if not v.is_finite() or v.adjusted() > 4300:  # (Decimal("1e999999999"): no int of a billion digits)
            return None
        return int(v) if v == v.to_integral_value() else None
    if isinstance(v, numbers.Real):  # float, numpy floats
        f = float(v)
        return int(f) if math.isfinite(f) and f.is_integer() else None
    if isinstance(v, str):
        try:
            return int_text(v)
        except ValueError:
            return None
    return None


def option_int(options: Any, name: str, *, engine: str, minimum: int = 0,
               maximum: int = MAX_OPTION_INT) -> int | None:
    """The extra option ``options[name]`` as an ``int`` (:func:`int_value`), None when it is absent
    or None.

    Raises
    ------
    InvalidConstraintError
        Not an integer from ``minimum`` to ``maximum``; names the engine and the option.
    """
    from .errors import InvalidConstraintError

    v = options.get(name)
    if v is None:
        return None
    n = int_value(v)
    if n is None or not minimum <= n <= maximum:
        raise InvalidConstraintError(f"{engine} option {name!r} must be an integer from {minimum} to {maximum}, "
                                     f"got {shown(v)}")
    return n


def bool_value(v: Any) -> bool | None:
    """An option's bool: ``True``/``False`` (a numpy bool too) or the integers 0 and 1; None for
    anything else (the text ``"false"`` among them)."""
    if isinstance(v, bool) or _is_numpy_bool(v):
        return bool(v)
    if isinstance(v, numbers.Integral) and v in (0, 1):
        return bool(v)
    return None


def option_bool(options: Any, name: str, *, engine: str) -> bool | None:
    """The extra option ``options[name]`` as a ``bool`` (``True``/``False``, or JSON's 0/1), None
    when absent or None. A text such as ``"false"`` is refused rather than read as true.

    Raises
    ------
    InvalidConstraintError
        Anything else; names the engine and the option.
    """
    from .errors import InvalidConstraintError

    v = options.get(name)
    if v is None:
        return None
    b = bool_value(v)
    if b is not None:
        return b
    raise InvalidConstraintError(f"{engine} option {name!r} must be true or false, got {shown(v)}")


def env_int(name: str, default: int | None, *, minimum: int = 0, unit: str = "") -> int | None:
    """The integer in ``$name``; ``default`` when it is unset or blank.

    Parameters
    ----------
    name : str
        The variable.
    default : int | None
        Returned as is when the variable is unset or holds only whitespace.
    minimum : int
        The least value accepted.
    unit : str
        What the number counts (``"bytes"``), for the message.

    Raises
    ------
    ValueError
        Not an integer, or below ``minimum`` (the message names the variable and its value).
    """
    raw = os.environ.get(name, "").strip(_WS)
    if not raw:
        return default
    what = f"an integer >= {minimum}" + (f" ({unit})" if unit else "")
    try:
        v = int_text(raw)
    except ValueError:
        raise ValueError(f"${name} must be {what}, got {shown(raw)}") from None
    if v < minimum:
        raise ValueError(f"${name} must be {what}, got {shown(raw)}")
    return v


def env_float(name: str, default: float | None, *, minimum: float | None = None, unit: str = "seconds") -> float | None:
    """The finite number in ``$name`` (``default`` when unset or blank), at least ``minimum`` when
    given; ``unit`` names what it measures in the message.

    Raises
    ------
    ValueError
        Not a finite number, or below ``minimum`` (the message names the variable and its value).
    """
    raw = os.environ.get(name, "").strip(_WS)
    if not raw:
        return default
    what = f"a number of {unit}" + (f" >= {minimum:g}" if minimum is not None else "")
    try:
        v = float_text(raw)
    except ValueError:
        raise ValueError(f"${name} must be {what}, got {shown(raw)}") from None
    if not math.isfinite(v) or (minimum is not None and v < minimum):
        raise ValueError(f"${name} must be {what}, got {shown(raw)}")
    return v


def env_seconds(name: str, default: float | None) -> float | None:
    """The time limit in ``$name`` (``default`` when unset or blank), read as the timeout options
    are (:func:`seconds_value`): a number of seconds, ``inf`` (or ``<= 0``) meaning no limit.

    Raises
    ------
    ValueError
        Not a number of seconds (NaN among them); the message names the variable and its value.
    """
    raw = os.environ.get(name, "").strip(_WS)
    if not raw:
        return default
    v = seconds_value(raw)
    if v is None:
        raise ValueError(f"${name} must be a number of seconds (<= 0 or inf: no limit), got {shown(raw)}")
    return v


#: the native engine's budget for walks shared across grammars, bytes (read when
#: :mod:`structgate.native.pushdown` is imported; checked at the vLLM plugin's startup through the
#: native backend's ``check_options``, since that import is lazy)
ENV_SHARED_WALKS_BYTES = "STRUCTGATE_SHARED_WALKS_BYTES"


def shared_walks_bytes() -> int:
    """``$STRUCTGATE_SHARED_WALKS_BYTES`` (default 64 MiB).

    Raises
    ------
    ValueError
        Not an integer >= 0 (names the variable)."""
    return env_int(ENV_SHARED_WALKS_BYTES, 64 << 20, unit="bytes")
