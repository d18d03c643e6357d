"""argparse ``type=`` callables for numeric options: each turns a bad value into
``argparse.ArgumentTypeError`` (argparse then prints one line naming the option and exits 2). Text
is read as ASCII decimal (:func:`structgate._env.int_text`, :func:`~structgate._env.float_text`):
``٣``, ``1_0``, ``inf`` and ``nan`` are refused."""
from __future__ import annotations

import argparse
import math
from typing import Callable

from .._env import float_text, int_text

__all__ = ["int_in", "int_list", "number_in", "PORT"]


def _range_text(lo: float, hi: float | None, strict: bool) -> str:
    if hi is not None:
        return f"in {lo:g}-{hi:g}"
    return f"> {lo:g}" if strict else f">= {lo:g}"


def _bounded(convert, lo, hi, strict: bool, want: str):
    def parse(s: str):
        try:
            v = convert(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {want}, got {s!r}") from None
        if not math.isfinite(v) or v < lo or (strict and v == lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {want}, got {s}")
        return v

    return parse


def int_in(lo: int, hi: int | None = None, what: str = "an integer") -> Callable[[str], int]:
    """An integer ``lo <= v (<= hi)``."""
    return _bounded(int_text, lo, hi, False, f"{what} {_range_text(lo, hi, False)}")


def int_list(lo: int) -> Callable[[str], list[int]]:
    """A comma-separated list of at least one integer ``>= lo``."""
    one = int_in(lo)

    def parse(s: str) -> list[int]:
        items = [x.strip() for x in s.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {lo}, got {s!r}")
        try:
            return [one(x) for x in items]
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"each value: {e}") from None

    return parse


def number_in(lo: float, strict: bool = False, what: str = "a number") -> Callable[[str], float]:
    """A finite number ``> lo`` (``strict``) or ``>= lo``."""
    return _bounded(float_text, lo, None, strict, f"a finite {what.removeprefix('a ')} {_range_text(lo, None, strict)}")


#: a TCP port
PORT = int_in(1, 65535, "a port number")
