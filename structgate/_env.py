"""Numbers read from structgate's environment variables, parsed and checked in one place, so that
every variable's bad value is refused with the same kind of message (the variable's name, the value,
what it must be)."""
from __future__ import annotations

import math
import os

__all__ = ["env_int", "env_float"]


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
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = f"an integer >= {minimum}" + (f" ({unit})" if unit else "")
    try:
        v = int(raw)
    except ValueError:
        raise ValueError(f"${name} must be {what}, got {raw!r}") from None
    if v < minimum:
        raise ValueError(f"${name} must be {what}, got {raw!r}")
    return v


def env_float(name: str, default: float | None, *, minimum: float | None = None, unit: str = "seconds") -> float | None:
    """The finite number in ``$name`` (``default`` when unset or blank), at least ``minimum`` when
    given; ``unit`` names what it measures in the message.

    Raises
    ------
    ValueError
        Not a finite number, or below ``minimum`` (the message names the variable and its value).
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = f"a number of {unit}" + (f" >= {minimum:g}" if minimum is not None else "")
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"${name} must be {what}, got {raw!r}") from None
    if not math.isfinite(v) or (minimum is not None and v < minimum):
        raise ValueError(f"${name} must be {what}, got {raw!r}")
    return v
