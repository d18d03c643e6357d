"""Emitter for ``integer`` / ``number`` values: exact ranges, ``multipleOf``."""
from __future__ import annotations

import json
import math
import os
import sys
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import lru_cache

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ..regex.parser import parse_regex
from ._automata import CPDFA, ResidueProduct, from_ast, limit_error, minimize, product, remainder_dfa, trim
from ._charset import class_text
from ._common import (_FRACTIONAL, _MULT_INT, _NOT_INT, _NOT_MULT, DEFAULT_MAX_ENUMERATED_MULTIPLES, DEFAULT_MAX_MULTIPLE_OF, _dec,
                      _decimal_bound, _is_num, _ptr)
from ._numeric import JSON_INTEGER, JSON_NUMBER, alt, integer_range, number_range
from ._type_string import PRODUCT_VISIT_FACTOR

#: most fraction digits of a decimal bound of the range construction (it recurses once per digit):
#: a bound with more (``5e-324``, ``1e-250``) is rounded into the range (:func:`_fit_fraction_digits`)
MAX_FRACTION_DIGITS = 200
#: the fraction digits such a bound is rounded to first (more where the range needs them): 31 keeps
#: ``exclusiveMinimum: 0`` (next double ``5e-324``) a short automaton, decimals from ``1e-31``
ROUNDED_FRACTION_DIGITS = 31


#: most digits of a number :meth:`NumberMixin._fractional` writes, from its first integer digit on
FRACTIONAL_DIGITS = 15
#: most fraction digits it writes for a number below 1 (``0.000001``): the bound keeps the automaton
#: small (no double that small is an integer but 0, reached past 323 digits). Next to 1 the digits
#: are held to :data:`FRACTIONAL_DIGITS` too: ``0.99999999999999999`` is the double 1.0, an integer
#: to ``jsonschema``, so a fraction longer than that has a digit other than 9 among its first
#: :data:`FRACTIONAL_DIGITS` (then it is below ``1 - 10**-15``, far from 1.0)
FRACTIONAL_BELOW_ONE = 30


def _non_multiples_dfa(m: int) -> CPDFA:
    """JSON integer literals whose value is not a multiple of ``m`` (:func:`._automata.remainder_dfa`
    with the non-zero remainders accepting; ``0`` is a multiple of every ``m``)."""
    d = remainder_dfa(m)
    return CPDFA(d.atoms, d.delta, [False, False, False] + [r != 0 for r in range(m)])


@lru_cache(maxsize=1)
def _integer_dfa() -> CPDFA:
    """Code-point automaton of the JSON integer literals but ``-0`` (``0|-?[1-9][0-9]*``; built
    once, minimal): the unbounded range of a lazily generated remainder automaton, whose strings
    are those of the eager one (:func:`._automata.remainder_dfa`: no ``-0``) and of a bounded
    range (:func:`._numeric.integer_range`)."""
    return minimize(trim(from_ast(parse_regex("0|-?[1-9][0-9]*"), max_states=64, what="integer", where="")))


#: minimal automata of the numeric keywords (remainders, ranges, non-integers) by their parameters
#: (limits included), for the process: schemas repeat the same ``multipleOf`` / ``not multipleOf``
#: / bounds, whose products cost milliseconds each; their regex texts are kept on the automata
#: (:func:`._automata.emit`). Cleared whole past :data:`_SHARED_DFA_MAX_STATES` states in all.
_SHARED_DFAS: dict[tuple, CPDFA | None] = {}
_SHARED_DFA_MAX_STATES = 200_000
_shared_states = [0]


def _shared_dfa(key: tuple, build) -> CPDFA | None:
    """``build()`` (a trimmed, minimal automaton or None for the empty language), once per
    ``key`` for the process. What it raises (a limit, a deadline) is raised, not kept: the next
    call builds again. The automaton is shared: callers must not change it."""
    if key in _SHARED_DFAS:
        return _SHARED_DFAS[key]
    d = build()
    n = 0 if d is None else len(d.delta)
    if _shared_states[0] + n > _SHARED_DFA_MAX_STATES:
        _SHARED_DFAS.clear()
        _shared_states[0] = 0
    _SHARED_DFAS[key] = d
    _shared_states[0] += n
    return d


@lru_cache(maxsize=1)
def _fractional_dfa():
    """Code-point automaton of the decimals :meth:`NumberMixin._fractional` writes (built once)."""
    n = FRACTIONAL_DIGITS
    # below 1: up to n fraction digits, or more with a digit other than 9 among the first n (not
    # 0.99999999999999999, the double 1.0)
    below = [rf"0\.[0-9]{{0,{n - 1}}}[1-9]"] + [rf"0\.9{{{j}}}[0-8][0-9]{{0,{FRACTIONAL_BELOW_ONE - j - 2}}}[1-9]"
                                                for j in range(n)]
    parts = below + [rf"[1-9][0-9]{{{k - 1}}}\.[0-9]{{0,{n - k - 1}}}[1-9]" for k in range(1, n)]
    d = from_ast(parse_regex(rf"-?(?:{'|'.join(parts)})"), max_states=100_000, what="not integer", where="")
    return minimize(trim(d))


class NumberMixin:
    """Numbers (part of ``compiler._Compiler``)."""

    def number(self, schema, where, integer: bool):
        if schema.get(_FRACTIONAL):  # (a non-integral number is a multiple of no integer)
            return None if integer else self._fractional(schema, where)
        lo, hi = self._bounds(schema, where)
        if integer and schema.get(_NOT_INT):
            # integers but the excluded values (a folded `not`): the range split around them
            ilo, ihi = _integer_bounds(lo, hi)
            rest = {k: v for k, v in schema.items() if k not in (_NOT_INT, "minimum", "maximum", "exclusiveMinimum",
                                                                  "exclusiveMaximum")}
            pieces, cur = [], ilo
            for x in sorted(set(schema[_NOT_INT])):
                if (ilo is not None and x < ilo) or (ihi is not None and x > ihi):
                    continue
                if cur is None or cur <= x - 1:
                    pieces.append((cur, x - 1))
                cur = x + 1
            if ihi is None or cur is None or cur <= ihi:
                pieces.append((cur, ihi))
            outs, left_out = [], None
            try:
                for n, (a, b) in enumerate(pieces):
                    self.check_deadline(where)  # (a piece under a multipleOf builds its own automaton)
                    piece = dict(rest)
                    if a is not None:
                        piece["minimum"] = a
                    if b is not None:
                        piece["maximum"] = b
                    try:
                        outs.append(self.number(piece, where, integer=True))
                    except UnsupportedFeatureError as e:  # a piece in a float multipleOf's left-out zone:
                        left_out = e  # the others still compile (sound); refused if none does
                if alt(outs) is None and left_out is not None:
                    raise left_out
                return alt(outs)
            finally:  # its traceback holds this frame: no reference cycle left (returned or raised)
                left_out = None
        if schema.get(_NOT_MULT):  # (after the excluded integers: each piece of the range is one call)
            return self._not_multiples(schema, where, integer)
        if "multipleOf" in schema:
            mo = schema["multipleOf"]
            if mo <= 0:
                raise GrammarSyntaxError("multipleOf must be > 0", json.dumps(mo), 0, _ptr(where, "multipleOf"))
            if isinstance(mo, float):
                return self._float_multiple_of(mo, integer, lo, hi, where, bool(schema.get(_MULT_INT)))
            trivial = integer and (Decimal(1) / _dec(mo)) == (Decimal(1) / _dec(mo)).to_integral_value()
            if not trivial:
                if not _dec(mo) == _dec(mo).to_integral_value():
                    raise UnsupportedFeatureError("multipleOf", "a non-integer multipleOf is supported only when it "
                                                  "divides 1 on integers", _ptr(where, "multipleOf"))
                # an integer modulus: integer literals (also for "number": a sound subset, as
                # integers are written as integer literals) that are multiples of it
                return self._multiple_of(int(_dec(mo)), lo, hi, _ptr(where, "multipleOf"))
        if integer:
            ilo, ihi = _integer_bounds(lo, hi)
            if ilo is None and ihi is None:
                return JSON_INTEGER
            return integer_range(ilo, ihi)
        if lo is None and hi is None:
            return JSON_NUMBER
        # Validators parse a number written with a fraction or exponent as a binary float, so
        # 0.10000000000000001 "equals" 0.1. Each bound becomes the inclusive decimal bound at the
        # first double it admits (nextafter(b) for an exclusive b, shortest repr): x beyond that
        # decimal gives float(x) beyond b, by monotonic rounding — sound, and it only excludes
        # decimals that round onto b (see _decimal_bound).
        lo_d, hi_d = _decimal_bounds(lo, hi, schema, where)
        # Integer literals are read as exact integers and compared exactly with the bound's value
        # (Python's json + jsonschema; a float bound is the double itself: 1e23 is
        # 99999999999999991611392). The decimal bounds above are shortest spellings moved for
        # decimals, so past 2**53 they can admit integer literals beyond the bound (maximum 1e23
        # let 10**23 in) or miss ones inside it. Where the integers they admit are not exactly the
        # exact integer range, integer literals get that range and the decimal range keeps only
        # literals with a fraction part.
        ilo, ihi = _integer_bounds(lo, hi)
        admitted = _integer_bounds(None if lo_d is None else (lo_d, False), None if hi_d is None else (hi_d, False))
        if admitted != (ilo, ihi):
            ints = integer_range(ilo, ihi)
            fracs = number_range(lo_d, False, hi_d, False, fraction_required=True)
            return alt([x for x in (ints, fracs) if x is not None])
        return number_range(lo_d, False, hi_d, False)

    def _float_multiple_of(self, mo: float, integer: bool, lo, hi, where: str, int_too: bool = False) -> str | None:
        """Integer literals valid against a *float* ``multipleOf`` as validators test it:
        ``jsonschema`` computes the double ``n / mo`` (``float(n) / mo``, raising ``OverflowError``
        from ``|n| >= 2**1024 - 2**970`` on) and asks whether it is integral, falling back to the
        exact ``Fraction`` test only when the quotient overflows. So ``1`` is not a multiple of
        ``1e-05`` (``1 / 1e-05`` is 99999.99999999999) and ``9007199254740993`` not one of ``3.0``
        (the dividend rounds to ``2**53``), while every integer past ``3.0 * 2**52`` is one (a
        double from ``2**52`` on is integral). Compiled, as zones of integers (``|n|`` at most
        :data:`INT_LITERAL_CAP`, 308 digits, throughout):

        * ``mo = 2**-j`` (``1.0``, ``0.5``; on ``number`` only ``1.0``): every integer (``n / mo =
          n * 2**j``; where that overflows, the exact test passes) — exact;
        * another integral ``mo`` (``2.0``, ``3.0``): its multiples with ``|n| <= 2**53`` (dividend
          and quotient exact there), and every integer with ``|n| >= mo * 2**52`` (rounded up to two
          significant digits): the rounded dividend is at least ``mo * 2**52``, so the quotient is
          at least ``2**52``, integral. Left out: ``2**53 < |n| < mo * 2**52``, where the rounded
          dividend decides (``2**53 + 4`` is a multiple of ``3.0``, ``2**53 + 1`` and ``2**53 + 2``
          are not; for ``2**j`` the multiples of ``2**j`` are, and more);
        * ``mo < 1`` whose reciprocal ``k`` is an integer in decimal (``0.1``, ``0.01``) and whose
          double is within ``2**-54`` (relative) of that decimal: every integer whose quotient stays
          finite (to two significant digits). Up to ``2**53`` the quotient rounds to ``n * k`` (the
          half-ulp of a double is over ``2**-54`` of it), beyond it the quotient is past ``2**53``.
          Left out: integers whose quotient overflows (the exact test: multiples of the double's
          odd numerator, ``3602879701896397`` for ``0.1``).

        With ``int_too`` (an equal int ``multipleOf`` merged beside it, tested exactly) the integral
        ``mo`` keeps its multiples with ``|n| <= 2**53`` only (past ``mo * 2**52`` most integers
        pass the float test but not the exact one).

        Anything else is ``UnsupportedFeatureError``, and so is a range whose integers all lie in
        the left-out zones (not "matches nothing": validators accept some of them, or may); a range
        with no integer, or none below the overflow of ``float(n)``, is empty. Sound throughout.
        """
        w = _ptr(where, "multipleOf")
        ilo, ihi = _integer_bounds(lo, hi)
        if ilo is not None and ihi is not None and ilo > ihi:
            return None
        cap, exact = INT_LITERAL_CAP, 2 ** 53
        mant, _ = math.frexp(mo)
        if mo.is_integer() and mo > 1:
            m = int(mo)
            edge = _round_sig(m * 2 ** 52, up=True)  # from here on every integer passes
            zones = [("multiples", -exact, exact), ("all", edge, cap), ("all", -cap, -edge)]
            gaps = [(exact + 1, edge - 1), (-edge + 1, -exact - 1)]
            if int_too:
                zones, gaps = zones[:1], [(exact + 1, cap), (-cap, -exact - 1)]
        elif mant == 0.5 and (mo == 1 or (integer and mo < 1)):  # 2**-j, 1.0 included
            zones, gaps = [("all", -cap, cap)], []
        elif integer and mo < 1 and _reciprocal_exact(mo):
            top = _round_sig(_last_finite_dividend(mo), up=False)
            zones, gaps = [("all", -top, top)], [(top + 1, cap), (-cap, -top - 1)]
        elif integer:
            raise UnsupportedFeatureError("multipleOf", f"{mo!r}: validators divide in floating point; on type "
                                          "integer only integral values (3.0), powers of two (0.5) and decimal "
                                          "reciprocals with a close double (0.1, not 1e-05) are compiled", w)
        else:
            raise UnsupportedFeatureError("multipleOf", f"{mo!r}: validators divide in floating point; on type "
                                          "number only integral values (1.0, 3.0) are compiled; powers of two (0.5) "
                                          "and decimal reciprocals (0.1, 0.01) only on integer", w)
        # past the cap, up to 2**1024 - 2**970: validators test them (float(n) does not overflow);
        # beyond, jsonschema's n / mo overflows (the exact test decides; None: unbounded)
        gaps += [(cap + 1, FLOAT_INT_MAX), (-FLOAT_INT_MAX, -cap - 1), (FLOAT_INT_MAX + 1, None),
                 (None, -FLOAT_INT_MAX - 1)]

        def clip(a, b):
            a = ilo if a is None else a if ilo is None else max(a, ilo)
            b = ihi if b is None else b if ihi is None else min(b, ihi)
            return (a, b) if a is None or b is None or a <= b else None

        outs = []
        for kind, a, b in zones:
            c = clip(a, b)
            if c is None:
                continue
            outs.append(self._multiple_of(int(mo), *((x, False) for x in c), w) if kind == "multiples"
                        else integer_range(*c))
        out = alt(outs)
        if out is None:
            missed = [c for c in (clip(a, b) for a, b in gaps) if c is not None]
            if missed:
                a, b = missed[0]
                if (a is None or a < -FLOAT_INT_MAX) or (b is None or b > FLOAT_INT_MAX):
                    raise UnsupportedFeatureError("multipleOf", f"{mo!r}: every integer in range is beyond "
                                                  "the doubles, where validators cannot divide it by a float "
                                                  "(float(n) overflows); not compiled", w)
                raise UnsupportedFeatureError("multipleOf", f"{mo!r}: validators divide in binary floating point; "
                                              f"the integers in range lie where their rounding decides "
                                              f"(here from {a} to {b}), which is not compiled", w)
        return out

    def _fractional(self, schema, where: str) -> str | None:
        """Numbers in the schema's bounds whose value is not an integer (a folded ``not {type:
        integer}``): a **sound subset**, the decimals (no exponent) whose last fraction digit is not
        0 and that have at most :data:`FRACTIONAL_DIGITS` digits from the first integer digit on
        (``12.5``, ``-0.25``; below 1, up to :data:`FRACTIONAL_BELOW_ONE` fraction digits, more than
        :data:`FRACTIONAL_DIGITS` only with a digit other than 9 among the first of them: not
        ``0.99999999999999999``, the double 1.0). Validators read such a literal as a
        binary double, and a double rounds to an integer only when the fraction is below its
        spacing: 15 significant digits keep every one of them off the integers (``1.0000000000000001``
        is the integer 1.0 to ``jsonschema``, and is not generated). An integer ``multipleOf`` allows
        none of them (``None``).

        Raises
        ------
        UnsupportedFeatureError
            ``not``: a non-integer ``multipleOf`` beside it."""
        if "multipleOf" in schema:
            mo = schema["multipleOf"]
            if _is_num(mo) and mo > 0 and _dec(mo) == _dec(mo).to_integral_value():
                return None  # a multiple of an integer is an integer
            raise UnsupportedFeatureError("not", "not integer of a number with a non-integer multipleOf",
                                          _ptr(where, "multipleOf"))
        lo, hi = self._bounds(schema, where)
        lo_d, hi_d = _decimal_bounds(lo, hi, schema, where)
        key = ("fractional", lo_d, hi_d)  # (a oneOf expansion reaches the same one many times)
        if key not in self._dfa_texts:
            what, cap = "not integer", self.max_product_states

            def build():
                d = _fractional_dfa()
                if lo_d is not None or hi_d is not None:
                    rng = number_range(lo_d, False, hi_d, False, fraction_required=True)
                    d = None if rng is None else trim(product(
                        from_ast(parse_regex(rng), max_states=cap * PRODUCT_VISIT_FACTOR, what=what, where=where), d,
                        max_states=cap * PRODUCT_VISIT_FACTOR, what=what, where=where))
                return None if d is None else minimize(d)

            # (bounds by their spelling: the range text is written from it)
            d = _shared_dfa(("fractional", None if lo_d is None else str(lo_d), None if hi_d is None else str(hi_d),
                             cap), build)
            self._dfa_texts[key] = None if d is None else self._emit_dfa(d, class_text, what, where)
        return self._dfa_texts[key]

    def _not_multiples(self, schema, where: str, integer: bool) -> str | None:
        """Numbers in the schema's bounds that are a multiple of none of the integers of
        ``_NOT_MULT`` (a folded ``not {multipleOf: m}``): the integer literals outside them, exact
        (the remainder automata of :func:`._automata.remainder_dfa` with the non-zero remainders
        accepting, times the range's digit automaton and an integer ``multipleOf`` beside it), and
        unless ``integer``, the non-integral numbers (:meth:`_fractional`'s sound subset: a
        non-integral number is a multiple of no integer).

        Raises
        ------
        CompileLimitError
            ``max_multiple_of``: an excluded modulus above it.
        UnsupportedFeatureError
            ``not``: beside a non-integer ``multipleOf``, or beside excluded integer values where
            numbers are allowed (:meth:`number` splits an integer range around them first)."""
        w = _ptr(where, "not")
        ms = sorted({int(m) for m in schema[_NOT_MULT]})
        rest = {k: v for k, v in schema.items() if k != _NOT_MULT}
        mo = rest.get("multipleOf")
        if rest.get(_NOT_INT) or (mo is not None and not (isinstance(mo, int) and not isinstance(mo, bool) and mo > 0)):
            raise UnsupportedFeatureError("not", "not multipleOf beside excluded integers or a non-integer "
                                          "multipleOf", w)
        limit = int(self.opt.extra.get("max_multiple_of", DEFAULT_MAX_MULTIPLE_OF))
        for m in ms + ([mo] if mo is not None else []):
            if m > limit:
                raise CompileLimitError("max_multiple_of", m, limit, f"multipleOf at {w}: the remainder automaton "
                                        "has one state per residue; raise CompileOptions.extra['max_multiple_of'] "
                                        "to allow it", where=w)
        ilo, ihi = _integer_bounds(*self._bounds(rest, where))
        key = ("not-multiples", tuple(ms), mo, ilo, ihi, integer)
        if key not in self._dfa_texts:
            ints = None
            # (1 divides every integer, and so does a divisor of the multipleOf beside it)
            if 1 not in ms and not (mo is not None and any(mo % m == 0 for m in ms)):
                ints = self._integers_outside(ms, mo, ilo, ihi, w)
            fracs = None if integer or mo is not None else self._fractional({**rest, _FRACTIONAL: True}, where)
            self._dfa_texts[key] = alt([x for x in (ints, fracs) if x is not None])
        return self._dfa_texts[key]

    def _integers_outside(self, ms: list[int], mo: int | None, ilo, ihi, where: str) -> str | None:
        """Integer literals in ``ilo``..``ihi`` (None: unbounded) that are multiples of none of
        ``ms`` (and of ``mo`` when given): :meth:`_residue_integers` (None: no such integer)."""
        return self._residue_integers(mo, ms, ilo, ihi, "not multipleOf", where)

    #: grammar mode: a remainder automaton whose modulus (the lcm of the moduli) is above this is a
    #: :class:`._automata.ResidueProduct` (states generated when reached) instead of being built,
    #: minimised and written as rules (``CompileOptions.extra["eager_residue_max"]``)
    EAGER_RESIDUE_MAX = 1_000
    #: cells of a :class:`._automata.ResidueProduct`'s liveness table (range states × modulus, one
    #: byte each) per unit of ``max_product_states``: the table is bounded by
    #: ``RESIDUE_CELLS_PER_STATE × max_product_states`` (4,000,000 by default: ~0.5 s to compute)
    RESIDUE_CELLS_PER_STATE = 400

    def _residue_integers(self, pos: int | None, negs: list[int], ilo, ihi, what: str, where: str) -> str | None:
        """Integer literals in ``ilo``..``ihi`` (None: unbounded) that are multiples of ``pos``
        (None: any) and of none of ``negs``; None when there is none.

        The modulus is ``L = lcm(pos, *negs)``, at most ``max_multiple_of`` (default
        :data:`DEFAULT_MAX_MULTIPLE_OF`). Up to :attr:`EAGER_RESIDUE_MAX` (or in regex mode) the
        remainder automata (:func:`._automata.remainder_dfa`, the non-zero remainders accepting
        for ``negs``) are multiplied with the range's digit automaton, each step trimmed and
        minimised, and written as a regex or rules; above it (grammar mode) the product is a
        :class:`._automata.ResidueProduct` whose states are generated when the matcher reaches
        them, so compile time does not grow with the states of the product; there a range
        bounded on both sides with at most ``max_enumerated_multiples`` candidates (multiples of
        ``pos`` in it) is written as its values instead (:func:`_literals_text`).

        Raises
        ------
        CompileLimitError
            ``max_multiple_of``: ``L`` above it, or in regex mode above ``eager_residue_max``;
            ``max_product_states``: an eager product over it, or the lazy products' liveness
            tables of this compile over :attr:`RESIDUE_CELLS_PER_STATE` times it.
        """
        mods = ([pos] if pos else []) + list(negs)
        L = math.lcm(*mods) if mods else 1
        limit = int(self.opt.extra.get("max_multiple_of", DEFAULT_MAX_MULTIPLE_OF))
        eager_max = int(self.opt.extra.get("eager_residue_max", self.EAGER_RESIDUE_MAX))
        if L > min(limit, eager_max) and ilo is not None and ihi is not None:
            step = pos or 1
            first, last = -(-ilo // step), ihi // step
            if last - first + 1 <= int(self.opt.extra.get("max_enumerated_multiples", DEFAULT_MAX_ENUMERATED_MULTIPLES)):
                # a bounded range with few candidates: its values, one literal each (no automaton)
                return _literals_text([k * step for k in range(first, last + 1)
                                       if all((k * step) % m for m in negs)])
        if L > limit:
            raise CompileLimitError("max_multiple_of", L, limit, f"{what} at {where or 'the root'}: the moduli's "
                                    f"least common multiple {L} is the remainder automaton's state count; raise "
                                    "CompileOptions.extra['max_multiple_of'] to allow it", where=where or "#")
        if not self.grammar and L > eager_max:
            # regex mode writes the product as one regex (state elimination, no deadline checks
            # inside): seconds to minutes past a few thousand residues
            raise CompileLimitError("max_multiple_of", L, eager_max, f"{what} at {where or 'the root'}: regex mode "
                                    f"builds the remainder automaton of the moduli's least common multiple {L} "
                                    "eagerly; use grammar mode or raise CompileOptions.extra['eager_residue_max']",
                                    where=where or "#")
        cap = self.max_product_states
        rt = None
        if ilo is not None or ihi is not None:
            rt = integer_range(ilo, ihi)
            if rt is None:
                return None
        if self.grammar and L > eager_max:
            rng = None if rt is None else from_ast(parse_regex(rt), max_states=cap, what=what, where=where)
            d = trim(rng if rng is not None else _integer_dfa())
            if d is None:
                return None
            d = minimize(d)
            # one budget of liveness cells for the whole compile (a range split around excluded
            # values makes one product per piece)
            used = self._residue_cells
            cells = self.RESIDUE_CELLS_PER_STATE * cap
            n_cells = len(d.delta) * L
            if used + n_cells > cells:
                need = -(-(used + n_cells) // self.RESIDUE_CELLS_PER_STATE)
                raise CompileLimitError("max_product_states", need, cap, f"{what} at {where or 'the root'}: the "
                                        f"lazily generated remainder automata's liveness tables need {used + n_cells} "
                                        f"cells (range states x {L} residues; {self.RESIDUE_CELLS_PER_STATE} cells per "
                                        "unit of max_product_states); raise CompileOptions.extra['max_product_states'] "
                                        f"to {need} or narrow the range", where=where or "#")
            self._residue_cells = used + n_cells
            return self._lazy_rule("mod:", where, class_text, lambda name, _enc: ResidueProduct(
                d, pos, list(negs), name, max_cells=cells, what=what, where=where,
                tick=lambda: self.check_deadline(where)))
        # (a product with exclusions is trimmed and minimised after each step: its intermediate
        # products may visit more states than the result keeps)
        pcap = cap * PRODUCT_VISIT_FACTOR if negs else cap
        if L + 3 > pcap:
            raise limit_error("max_product_states", L + 3, pcap, what, where)

        def build():
            parts = [_non_multiples_dfa(m) for m in negs] + ([remainder_dfa(pos)] if pos else [])
            if rt is not None:
                parts.append(from_ast(parse_regex(rt), max_states=cap, what=what, where=where))
            d = parts[0]
            for q in parts[1:]:
                d = trim(product(d, q, max_states=pcap, what=what, where=where))
                if d is None:
                    return None
                d = minimize(d)
            if len(parts) == 1:
                d = trim(d)
                if d is None:
                    return None
                d = minimize(d)
            return d

        d = _shared_dfa(("residues", pos, tuple(negs), ilo, ihi, cap, pcap), build)
        return None if d is None else self._emit_dfa(d, class_text, what, where)

    def _multiple_of(self, m: int, lo, hi, where: str) -> str | None:
        """Integer literals in the bounds that are multiples of ``m`` (exact): the remainder
        automaton over decimal digits (:func:`._automata.remainder_dfa`, ``m + 3`` states)
        intersected with the digit-range automaton of the bounds. ``m`` is bounded by
        ``options.extra["max_multiple_of"]`` (default :data:`DEFAULT_MAX_MULTIPLE_OF`). A range
        bounded on both sides that holds at most ``options.extra["max_enumerated_multiples"]``
        (:data:`DEFAULT_MAX_ENUMERATED_MULTIPLES`) multiples is written as those literals
        (:func:`_literals_text`) where the automaton is refused or ``m`` is above that bound:
        ``multipleOf: 7`` between ``10**400`` and ``10**400 + 20`` (403 minimal states)."""
        ilo, ihi = _integer_bounds(lo, hi)
        if m == 1:
            return JSON_INTEGER if ilo is None and ihi is None else integer_range(ilo, ihi)
        if ilo is not None and ihi is not None and ilo > ihi:
            return None
        what = "multipleOf"
        key = ("multipleOf", m, ilo, ihi)
        if key in self._dfa_texts:
            return self._dfa_texts[key]
        few = None  # the multiples in range, when the range is bounded and holds few enough
        if ilo is not None and ihi is not None:
            first, last = -(-ilo // m), ihi // m
            if last - first + 1 <= int(self.opt.extra.get("max_enumerated_multiples", DEFAULT_MAX_ENUMERATED_MULTIPLES)):
                few = [k * m for k in range(first, last + 1)]
        limit = int(self.opt.extra.get("max_multiple_of", DEFAULT_MAX_MULTIPLE_OF))
        if m > limit:
            if few is None:
                raise CompileLimitError("max_multiple_of", m, limit, f"multipleOf at {where or 'the root'}: the "
                                        "remainder automaton has one state per residue; raise "
                                        "CompileOptions.extra['max_multiple_of'] to allow it",
                                        where=_ptr(where, "multipleOf"))
            out = _literals_text(few)
        else:
            try:
                out = self._residue_integers(m, [], ilo, ihi, what, where)
            except CompileLimitError as e:
                if few is None or e.limit_name not in ("max_automaton_rules", "max_product_states", "max_regex_size",
                                                       "max_multiple_of"):
                    raise
                out = _literals_text(few)
        self._dfa_texts[key] = out
        return out


def _literals_text(values: list[int]) -> str | None:
    """A regex text matching exactly the decimal literals of ``values`` (``str(v)``: canonical JSON
    integers, what :func:`._numeric.integer_range` writes): a trie of their characters, each run
    that all the strings of a branch share written once (a few hundred literals of 400 digits that
    differ in their last digits are one prefix and a small tree). None for no values."""
    strs = sorted({str(v) for v in values})
    if not strs:
        return None

    def trie(group: list[str]) -> str:
        # group: sorted, distinct; their common prefix, then a branch per next character
        p = os.path.commonprefix((group[0], group[-1]))  # (sorted: the group's common prefix)
        rest = [s[len(p):] for s in group]
        ends = rest[0] == ""  # (sorted: the empty rest, if any, comes first)
        if ends:
            rest = rest[1:]
        if not rest:
            return p  # (digits and '-': plain characters)
        branches, i = [], 0
        while i < len(rest):
            j = i
            while j < len(rest) and rest[j][0] == rest[i][0]:
                j += 1
            branches.append(trie(rest[i:j]))
            i = j
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if ends:
            body = ("(?:" + body + ")?") if len(branches) == 1 else body + "?"
        return p + body

    try:
        return trie(strs)
    finally:
        trie = None  # (recursive: no reference cycle left for the collector, returned or raised)


def _integer_bounds(lo, hi) -> tuple[int | None, int | None]:
    """Inclusive integer bounds from ``(value, exclusive)`` pairs (``_bounds`` output, or decimal
    bounds), from each bound's exact value (a float bound is the double itself, ``Decimal(1e23)`` =
    99999999999999991611392, never its shortest spelling): validators compare an integer instance
    with the bound exactly."""
    ilo = ihi = None
    if lo is not None:
        d = Decimal(lo[0])
        ilo = int(d.to_integral_value(rounding="ROUND_FLOOR")) + 1 if lo[1] else \
            int(d.to_integral_value(rounding="ROUND_CEILING"))
    if hi is not None:
        d = Decimal(hi[0])
        ihi = int(d.to_integral_value(rounding="ROUND_CEILING")) - 1 if hi[1] else \
            int(d.to_integral_value(rounding="ROUND_FLOOR"))
    return ilo, ihi


#: the largest integer ``float()`` converts: from ``2**1024 - 2**970`` (the midpoint to ``2**1024``,
#: which rounds up) on it raises ``OverflowError``, and so does ``jsonschema``'s ``n / multipleOf``
FLOAT_INT_MAX = 2 ** 1024 - 2 ** 970 - 1
#: the largest integer literal a float ``multipleOf`` zone produces (308 digits, below
#: :data:`FLOAT_INT_MAX`): a round bound keeps the digit-range regex small
INT_LITERAL_CAP = 10 ** 308 - 1


def _round_sig(n: int, up: bool) -> int:
    """A zone edge with a short digit-range regex: ``n`` rounded to two significant digits, up
    (``up``) or down to one less than the rounded value (``1797 -> 1699``): the zones only shrink."""
    k = max(len(str(n)) - 2, 0)
    if up:
        return -(-n // 10 ** k) * 10 ** k
    r = n // 10 ** k * 10 ** k
    return r - 1 if r != n else n


def _reciprocal_exact(mo: float) -> bool:
    """``1 / mo`` is an integer ``k`` in decimal (``0.1``, ``0.01``) and the double ``mo`` is within
    ``2**-54`` (relative) of ``1 / k``: ``n / mo`` then rounds to ``n * k`` for ``|n| <= 2**53``."""
    from fractions import Fraction

    k = Decimal(1) / _dec(mo)
    return k == k.to_integral_value() and abs(Fraction(mo) - 1 / Fraction(int(k))) < Fraction(mo) / 2 ** 54


def _last_finite_dividend(mo: float) -> int:
    """The largest ``n`` (an integral double) such that ``float(n) / mo`` is finite for every
    integer up to it: the largest double below ``(2**1024 - 2**970) * mo`` (a quotient below that
    midpoint rounds to a finite double)."""
    from fractions import Fraction

    t = Fraction(2 ** 1024 - 2 ** 970) * Fraction(mo)
    try:
        f = float(t)
    except OverflowError:
        f = sys.float_info.max
    while f >= t:
        f = math.nextafter(f, 0.0)
    return int(f)


def _fraction_digits(d: Decimal) -> int:
    return max(0, -d.as_tuple().exponent)


def _decimal_bounds(lo, hi, schema, where: str) -> tuple[Decimal | None, Decimal | None]:
    """The inclusive decimal bounds of the range ``lo``..``hi`` (``(value, exclusive)`` or None, as
    :meth:`_bounds` gives them) for decimal literals: each at the first double it admits
    (:func:`._common._decimal_bound`), fitted to :data:`MAX_FRACTION_DIGITS`
    (:func:`_fit_fraction_digits`)."""
    lo_d = None if lo is None else _decimal_bound(lo[0], lo[1], math.inf)
    hi_d = None if hi is None else _decimal_bound(hi[0], hi[1], -math.inf)
    return _fit_fraction_digits(lo_d, hi_d, schema, where)


def _fit_fraction_digits(lo_d: Decimal | None, hi_d: Decimal | None, schema, where: str):
    """The inclusive decimal bounds ``lo_d``/``hi_d`` (:func:`._common._decimal_bound`) with at
    most :data:`MAX_FRACTION_DIGITS` fraction digits each, for the range construction.

    A bound within the limit is kept. One beyond it (a bound next to 0: ``minimum: 1e-250``, or
    ``5e-324``, the next double past ``exclusiveMinimum: 0``) is rounded into the range (a lower
    bound up, an upper one down) to the fewest fraction digits from :data:`ROUNDED_FRACTION_DIGITS`
    on that leave the range a decimal: sound (fewer decimals), and never empty where the range
    has a decimal of at most :data:`MAX_FRACTION_DIGITS` fraction digits. (A fixed 31 digits made
    ``exclusiveMinimum: 0, exclusiveMaximum: 1e-32`` "match nothing".) Decimals nearer to 0 than
    the rounded bound are not produced. A range with no such decimal (``[5e-324, 5e-324]``,
    ``(0, 1e-250)``: bounded numbers are written without exponent) is
    ``CompileLimitError("nesting_depth")`` naming the bound keywords; an empty range (``lo_d >
    hi_d``) is returned as it is."""
    long = [d is not None and _fraction_digits(d) > MAX_FRACTION_DIGITS for d in (lo_d, hi_d)]
    if not any(long) or (lo_d is not None and hi_d is not None and lo_d > hi_d):
        return lo_d, hi_d
    for p in range(ROUNDED_FRACTION_DIGITS, MAX_FRACTION_DIGITS + 1):
        q = Decimal(1).scaleb(-p)
        lo = lo_d.quantize(q, rounding=ROUND_CEILING) if long[0] else lo_d
        hi = hi_d.quantize(q, rounding=ROUND_FLOOR) if long[1] else hi_d
        if lo is None or hi is None or lo <= hi:
            return lo, hi
    kws = ", ".join(k for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in schema)
    raise CompileLimitError("nesting_depth", f"[{lo_d}, {hi_d}]: no decimal of at most {MAX_FRACTION_DIGITS} "
                            "fraction digits", MAX_FRACTION_DIGITS,
                            f"the number range of {kws} at {where or '#'} holds only decimals with more "
                            "fraction digits than the range construction writes (bounded numbers are written "
                            "without exponent); widen or round the bounds")
