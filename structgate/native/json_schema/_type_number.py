"""Emitter for ``integer`` / ``number`` values: exact ranges, ``multipleOf``."""
from __future__ import annotations

import json
import math
from decimal import Decimal

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import _dec, _exclusive_as_float, _ptr
from ._numeric import JSON_INTEGER, JSON_NUMBER, integer_range, number_range


class NumberMixin:
    """Numbers (part of ``compiler._Compiler``)."""

    def number(self, schema, where, integer: bool):
        lo, hi = self._bounds(schema, where)
        if "multipleOf" in schema:
            mo = schema["multipleOf"]
            if mo <= 0:
                raise GrammarSyntaxError("multipleOf must be > 0", json.dumps(mo), 0, _ptr(where, "multipleOf"))
            trivial = integer and (Decimal(1) / _dec(mo)) == (Decimal(1) / _dec(mo)).to_integral_value()
            if not trivial:
                raise UnsupportedFeatureError("multipleOf", "only multipleOf dividing 1 on integers",
                                              _ptr(where, "multipleOf"))
        if integer:
            ilo = ihi = None
            if lo is not None:
                d = _dec(lo[0])
                ilo = int(d.to_integral_value(rounding="ROUND_FLOOR")) + 1 if lo[1] else \
                    int(d.to_integral_value(rounding="ROUND_CEILING"))
            if hi is not None:
                d = _dec(hi[0])
                ihi = int(d.to_integral_value(rounding="ROUND_CEILING")) - 1 if hi[1] else \
                    int(d.to_integral_value(rounding="ROUND_FLOOR"))
            if ilo is None and ihi is None:
                return JSON_INTEGER
            return integer_range(ilo, ihi)
        if lo is None and hi is None:
            return JSON_NUMBER
        # Validators parse a number written with a fraction or exponent as a binary float, so
        # 0.10000000000000001 "equals" 0.1. An exclusive bound b is therefore enforced as the
        # inclusive bound nextafter(b) (shortest repr): x >= that decimal implies float(x) > b,
        # by monotonic rounding — sound, and it only excludes decimals that round onto b.
        lo_d = lo_x = hi_d = hi_x = None
        if lo is not None:
            lo_d, lo_x = _exclusive_as_float(lo[0], lo[1], math.inf)
        if hi is not None:
            hi_d, hi_x = _exclusive_as_float(hi[0], hi[1], -math.inf)
        return number_range(lo_d, bool(lo_x), hi_d, bool(hi_x))
