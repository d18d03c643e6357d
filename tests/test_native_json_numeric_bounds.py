"""Number keywords where float arithmetic made the compiler call a range empty, cut it, or spell a
value one way only (found by a break-it helper against ``jsonschema``):

* a float ``multipleOf`` produced only integers with ``|n| <= 2**53``: ``{"type": "integer",
  "multipleOf": 1.0, "minimum": 9007199254740993}`` "matched nothing" while ``jsonschema`` accepts
  every integer there (``float(n) / 1.0`` is integral), and past ``3.0 * 2**52`` every integer is a
  multiple of ``3.0`` for it (a double from ``2**52`` on is integral);
* a bound moved next to 0 was rounded to 31 fraction digits: ``exclusiveMinimum: 0,
  exclusiveMaximum: 1e-32`` "matched nothing", ``exclusiveMaximum: 1e-32`` alone refused every
  decimal in ``(0, 1e-32)``, and ``minimum: 1e-300`` was a compile limit;
* a numeric ``const``/``enum`` value matched Python's ``repr`` only: ``{"const": 1e-9}`` took
  ``1e-09``, not ``1e-9``, ``1E-9``, ``1.0e-9`` or ``0.000000001``, which are the same number.

Oracle: ``json.loads`` + ``jsonschema`` (Draft 2020-12; a dividend past the doubles makes its
``multipleOf`` raise: never valid). Native never accepts an invalid text, says "matches nothing"
only for a range without a valid value, and accepts the valid texts of the documented subset.
"""
from __future__ import annotations

import functools
import itertools
import json
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError, InvalidConstraintError, UnsupportedFeatureError
from structgate.vocab import Vocabulary

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
#: the largest integer literal the float multipleOf zones produce (308 digits)
CAP = 10 ** 308 - 1
#: from 2**1024 - 2**970 on, float(n) (and jsonschema's n / multipleOf) raises OverflowError
FLOAT_INT_MAX = 2 ** 1024 - 2 ** 970 - 1


def _valid(schema, text: str) -> bool:
    try:
        return jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    except OverflowError:  # jsonschema's float division of an int past the doubles
        return False


@functools.lru_cache(maxsize=None)
def _backend():
    vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256], name="bytes")
    return get_backend("native", vocab, whitespace="compact")


def _accepts(g, text: str) -> bool:
    m = g.matcher()
    return m.advance(list(text.encode())) and m.is_accepting()


def _compile(schema):
    """The native grammar over a byte vocabulary; InvalidConstraintError when it "matches nothing"."""
    return _backend().compile(Constraint.json_schema(schema))


# -- float multipleOf past 2**53 -------------------------------------------------------------------
def _big_ints() -> list[int]:
    out = {0, 1, 3, 6, 7, 2 ** 53, 2 ** 53 + 4, 10 ** 20, 10 ** 100, 10 ** 300, 10 ** 300 + 1, 10 ** 305, 10 ** 307,
           CAP, CAP + 1, FLOAT_INT_MAX, FLOAT_INT_MAX + 1}
    for base in (2 ** 53, 3 * 2 ** 52, 7 * 2 ** 52, 2 ** 60, 3 * 2 ** 60, 2 ** 63, 14 * 10 ** 15, 10 ** 18):
        out |= {base + k for k in range(-3, 6)}
    return sorted(out | {-x for x in out})


BIG = [str(n) for n in _big_ints()]
ALL_INTEGERS = [1.0, 0.5, 0.25, 2.0 ** -10]  # 2**-j: every integer passes
INTEGRAL = [2.0, 3.0, 4.0, 7.0, 10.0, 16.0]  # multiples up to 2**53, everything from mo * 2**52
RECIPROCAL = [0.1, 0.01, 0.05, 1e-7, 1e-300]  # every integer whose quotient stays finite


def _compiled_zone(mo: float, n: int) -> bool:
    """``n`` lies where the documented language of a float ``multipleOf`` is exact."""
    a = abs(n)
    if a > CAP:
        return False
    if mo in ALL_INTEGERS:
        return True
    if mo in INTEGRAL:
        return a <= 2 ** 53 or a >= 2 * mo * 2 ** 52  # edge: mo * 2**52 rounded up to two digits
    return Fraction(a) < Fraction(1.6e308) * Fraction(mo)


@pytest.mark.parametrize("mo", ALL_INTEGERS + INTEGRAL + RECIPROCAL)
@pytest.mark.parametrize("bounds", [{}, {"minimum": 2 ** 53 + 1}, {"minimum": 2 ** 60, "maximum": 2 ** 64},
                                    {"maximum": -(2 ** 62)}, {"minimum": 10 ** 300}],
                         ids=["none", "min 2**53+1", "2**60..2**64", "max -2**62", "min 10**300"])
def test_float_multiple_of_past_2_53(mo, bounds):
    schema = {"type": "integer", "multipleOf": mo, **bounds}
    valid = [t for t in BIG if _valid(schema, t)]
    try:
        g = _compile(schema)
    except UnsupportedFeatureError as e:  # only where every integer in range lies in a left-out zone
        assert "multipleOf" in str(e) and not any(_compiled_zone(mo, int(t)) for t in valid), (schema, e)
        return
    for text in BIG:
        ok = _accepts(g, text)
        assert not ok or text in valid, f"accepted {text} against {schema}"
        if text in valid and _compiled_zone(mo, int(text)):
            assert ok, f"refused the valid {text} against {schema}"
    assert any(_accepts(g, t) for t in valid)


@pytest.mark.parametrize("schema, witness", [
    # the rounded dividend decides between 2**53 and 3.0 * 2**52: 2**53 + 4 is a multiple, + 1 and + 2 not
    ({"type": "integer", "multipleOf": 3.0, "minimum": 2 ** 53 + 1, "maximum": 2 ** 53 + 100}, 2 ** 53 + 4),
    # an int multipleOf merged with the equal float: both tests apply, the float one is left out past 2**53
    ({"type": "integer", "allOf": [{"multipleOf": 3}, {"multipleOf": 3.0}], "minimum": 2 ** 60}, 3 * 2 ** 60),
    # a quotient past the doubles falls to the exact test: multiples of 0.1's odd numerator pass
    ({"type": "integer", "multipleOf": 0.1, "minimum": 5 * 10 ** 307},
     3602879701896397 * (10 ** 308 // 3602879701896397)),
])
def test_range_in_a_left_out_zone_is_unsupported_not_empty(schema, witness):
    assert _valid(schema, str(witness))  # so "matches nothing" would be false
    with pytest.raises(UnsupportedFeatureError, match="multipleOf"):
        _compile(schema)


def test_float_multiple_of_one_from_2_53_through_the_backend(llama3_vocab):
    """The break-it helper's case, end to end: it was InvalidConstraintError "matches nothing"."""
    schema = {"type": "integer", "multipleOf": 1.0, "minimum": 9007199254740993}
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    for text, want in (("9007199254740993", True), (str(2 ** 64 + 1), True), (str(10 ** 300 + 7), True),
                       ("9007199254740992", False), ("9007199254740993.0", False), ("-9007199254740993", False)):
        m = g.matcher()
        assert (m.advance(llama3_vocab.encode(text)) and m.is_accepting()) == want, text
        assert not want or _valid(schema, text)


@PROPS
@given(mo=st.sampled_from(ALL_INTEGERS + INTEGRAL + RECIPROCAL + [1.5, 1e-05]),
       lo=st.one_of(st.none(), st.integers(-(2 ** 70), 2 ** 70), st.integers(2 ** 52, 2 ** 56)),
       width=st.one_of(st.none(), st.integers(0, 2 ** 10), st.integers(0, 2 ** 64)),
       picks=st.lists(st.integers(-(2 ** 66), 2 ** 66), min_size=5, max_size=12))
@example(mo=1.0, lo=2 ** 53 + 1, width=None, picks=[2 ** 53 + 1, 2 ** 60, 0, 1, 2])
@example(mo=3.0, lo=2 ** 53 + 1, width=99, picks=[2 ** 53 + 4, 2 ** 53 + 1, 0, 1, 2])
def test_float_multiple_of_is_sound_and_never_falsely_empty(mo, lo, width, picks):
    schema = {"type": "integer", "multipleOf": mo}
    if lo is not None:
        schema["minimum"] = lo
        if width is not None:
            schema["maximum"] = lo + width
    near = [b + k for b in (lo, schema.get("maximum")) if b is not None for k in range(-4, 5)]
    texts = [str(n) for n in picks + near]
    valid = {t for t in texts if _valid(schema, t)}
    try:
        g = _compile(schema)
    except UnsupportedFeatureError:
        return  # typed: a multipleOf without a sound form, or a range in a left-out zone
    except InvalidConstraintError:  # "matches nothing": then truly nothing, in particular no candidate
        assert not valid, (schema, valid)
        return
    for t in texts:
        assert not _accepts(g, t) or t in valid, f"accepted {t} against {schema}"


def test_a_left_out_piece_of_a_split_range_leaves_the_rest():
    """``not: {const: k}`` splits the integers around ``k``; a piece in the left-out zone of a float
    ``multipleOf`` is dropped, the others compile (one raising refused the whole schema)."""
    schema = {"type": "integer", "multipleOf": 3.0, "minimum": 2 ** 53, "not": {"const": 2 ** 53 + 10}}
    g = _compile(schema)
    for n, want in ((2 ** 60, True), (2 ** 53 + 10, False), (3 * 2 ** 60 + 1, True), (2 ** 53 - 1, False)):
        assert _accepts(g, str(n)) == want and (not want or _valid(schema, str(n))), n


# -- tiny and huge bounds -----------------------------------------------------------------------------
def _zeros(k: int, digit: str = "1", sign: str = "") -> str:
    """``0.`` then ``k`` zeros then ``digit``: ``digit * 10**-(k + 1)``."""
    return f"{sign}0.{'0' * k}{digit}"


@pytest.mark.parametrize("schema, accepted, refused", [
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-32}, [_zeros(32), _zeros(32, "9")],
     ["0", _zeros(31), "1e-33"]),
    ({"type": "number", "exclusiveMaximum": 1e-32}, ["0", "-1", _zeros(32), _zeros(40)], [_zeros(31), "1"]),
    ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-150}, [_zeros(150), _zeros(150, "5")],
     [_zeros(149), _zeros(151), "0"]),
    ({"type": "number", "minimum": 1e-300}, ["1", "0.5", _zeros(30)], ["0", "-1"]),
    ({"type": "number", "maximum": -5e-324}, ["-1", _zeros(30, sign="-")], ["0", "-0.0", _zeros(400, sign="-")]),
    ({"type": "number", "minimum": -1e-40, "exclusiveMaximum": -1e-41},
     [_zeros(39, sign="-"), _zeros(40, "5", sign="-")], [_zeros(40, sign="-"), _zeros(38, "2", sign="-"), "0"]),
])
def test_tiny_bounds_keep_their_decimals(schema, accepted, refused):
    g = _compile(schema)  # "matches nothing", a cut to <= 0 or a compile limit before
    for t in accepted:
        assert _valid(schema, t) and _accepts(g, t), t
    for t in refused:
        assert not _accepts(g, t), t


def test_a_range_without_a_short_decimal_is_a_typed_limit_naming_its_keywords():
    for schema in ({"type": "number", "minimum": 1e-250, "maximum": 2e-250},
                   {"type": "number", "exclusiveMinimum": 0, "maximum": 5e-324}):
        assert _valid(schema, "1.5e-250" if "minimum" in schema else "5e-324")  # not empty
        with pytest.raises(CompileLimitError) as ei:
            _compile(schema)
        assert ei.value.limit_name == "nesting_depth"
        assert ", ".join(k for k in schema if k != "type") in str(ei.value), ei.value


def _first_double(v, exclusive: bool, up: bool) -> float | None:
    """The first double the bound ``(v, exclusive)`` admits going ``up`` (None past the doubles)."""
    toward = math.inf if up else -math.inf
    try:
        g = float(v)
    except OverflowError:
        return None
    if (Fraction(g) < Fraction(v) if up else Fraction(g) > Fraction(v)) or (exclusive and g == v):
        g = math.nextafter(g, toward)
    return g if math.isfinite(g) else None


def _bound_texts(v) -> list[str]:
    """Decimal spellings at and next to the bound ``v``: its repr, its neighbours' and its exact value
    cut at several precisions (down, up, one unit beyond), plain, as the range construction writes."""
    out = set()
    f = float(v)
    with localcontext() as ctx:
        ctx.prec = 2000
        for g in (f, math.nextafter(f, math.inf), math.nextafter(f, -math.inf)):
            if not math.isfinite(g):
                continue
            d = Decimal(repr(g))
            out.add(format(d, "f") if -d.as_tuple().exponent <= 340 else repr(g))
            exact = Decimal(g)
            for p in (1, 5, 16, 17, 20, 31, 32, 33, 40, 100, 200, 330):
                q = Decimal(1).scaleb(-p)
                for r in ("ROUND_FLOOR", "ROUND_CEILING"):
                    c = exact.quantize(q, rounding=r) if exact.adjusted() + p < 400 else exact
                    out |= {format(c, "f"), format(c + q, "f"), format(c - q, "f")}
    if isinstance(v, int):
        out |= {str(v + k) for k in range(-2, 3)}
    return sorted(t for t in out if t not in ("-0",))


TINY = st.builds(lambda m, e, s: s * float(f"{m}e-{e}"), st.integers(1, 99), st.integers(28, 325),
                 st.sampled_from([1, -1]))
BOUND = st.one_of(TINY, st.sampled_from([0, 0.0, -0.0, 5e-324, -5e-324, 1e-32, 1e-31, 2.0 ** 53, 1e308, -1e308,
                                         1.7976931348623157e308, 0.1, 1.0]),
                  st.integers(2 ** 53 - 3, 2 ** 53 + 3), st.floats(allow_nan=False, allow_infinity=False))
KW_LO, KW_HI = ["minimum", "exclusiveMinimum"], ["maximum", "exclusiveMaximum"]


@PROPS
@given(lo=st.one_of(st.none(), BOUND), hi=st.one_of(st.none(), BOUND), lo_kw=st.sampled_from(KW_LO),
       hi_kw=st.sampled_from(KW_HI), t=st.sampled_from(["number", "integer"]))
@example(lo=0, hi=1e-32, lo_kw="exclusiveMinimum", hi_kw="exclusiveMaximum", t="number")
@example(lo=None, hi=1e-32, lo_kw="minimum", hi_kw="exclusiveMaximum", t="number")
@example(lo=1e-300, hi=None, lo_kw="minimum", hi_kw="maximum", t="number")
@example(lo=-0.0, hi=5e-324, lo_kw="exclusiveMinimum", hi_kw="exclusiveMaximum", t="number")
def test_bounds_are_sound_and_empty_only_when_nothing_is_valid(lo, hi, lo_kw, hi_kw, t):
    schema = {"type": t}
    if lo is not None:
        schema[lo_kw] = lo
    if hi is not None:
        schema[hi_kw] = hi
    texts = ["0", "-0", "0.0", "-0.0", "1", "-1", "0.5", "-0.5", "1e-40", "1E+400"]
    texts += [x for b in (lo, hi) if b is not None for x in _bound_texts(b)]
    valid = {x for x in texts if _valid(schema, x)}
    g_lo = None if lo is None else _first_double(lo, lo_kw.startswith("exclusive"), True)
    g_hi = None if hi is None else _first_double(hi, hi_kw.startswith("exclusive"), False)
    has_double = (g_lo is not None or lo is None) and (g_hi is not None or hi is None) and \
        (g_lo is None or g_hi is None or g_lo <= g_hi)
    try:
        g = _compile(schema)
    except InvalidConstraintError:  # "matches nothing": only when true
        assert not valid, (schema, sorted(valid)[:5])
        assert t == "integer" or not has_double, schema
        return
    except CompileLimitError as e:  # no decimal of at most 200 fraction digits: both ends next to 0
        assert e.limit_name == "nesting_depth" and t == "number", e
        assert all(abs(b) < 1e-200 for b in (lo, hi) if b is not None) and lo is not None and hi is not None, e
        return
    for x in texts:
        assert not _accepts(g, x) or x in valid, f"accepted {x} against {schema}"


# -- numeric const / enum spellings -------------------------------------------------------------------
def _sci(v) -> list[str]:
    """Scientific spellings of the number ``v``: one digit before the point, e/E, with and without ``+``,
    leading zeros in the exponent, a trailing zero in the fraction."""
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    sign, digits, e = d.as_tuple()
    c = "".join(map(str, digits)).rstrip("0") or "0"
    x = e + len(digits) - 1
    mant = ("-" if sign else "") + (c[0] + ("." + c[1:] if len(c) > 1 else ""))
    out = []
    for E in ("e", "E"):
        for s, z in (("", ""), ("+", ""), ("", "0"), ("+", "00")):
            if x < 0:
                s = "-"
            out.append(f"{mant}{E}{s}{z}{abs(x)}")
    out.append(f"{mant}{'0' if '.' in mant else '.0'}e{x}")
    return out


def _spellings(v) -> list[str]:
    """The natural JSON spellings of ``v`` the compiler documents: plain decimal (with a trailing zero),
    scientific forms, and for an integral value its integer literal and ``.0`` form."""
    big = abs(v) > 2 ** 53  # past 2**53 a value keeps the spellings of its own type (int or double)
    if isinstance(v, int) and big:
        return [str(v)]
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    out = [json.dumps(v)] + _sci(v)
    plain = format(d, "f")  # without a point an integer literal: read exactly, so only int(v) below
    if len(plain.lstrip("-").replace(".", "")) <= 40:
        out += [plain, plain + "0"] if "." in plain else [plain + ".0"]
    if (isinstance(v, int) or v.is_integer()) and not big:
        out.append(str(int(v)))
    return out


CONSTS = [1e-9, 2.5e20, 1e-5, 0.1, 123.456, -0.5, 1.5, -2.5e-7, 1e23, 1e300, 5e-324, 1.7976931348623157e308, 1e20,
          1, 100, -5, 0, 0.0, -0.0, 1.0, 2 ** 53, 99999999999999991611392, 12345678901234567890]


@pytest.mark.parametrize("v", CONSTS, ids=[repr(v) for v in CONSTS])
def test_numeric_const_matches_natural_spellings(v):
    near = ["0", "1", "-1", "1e-8", "1.1e-9", "0.00000001", "2.5e21", "25e19", "100000000000000000000000",
            "1e+300", "10e-10", "0.1e-8", "-0", "0e5", "1.50", "1.5e0", "-1e-9", "9007199254740993",
            "9007199254740992.0"]
    for schema in ({"const": v}, {"enum": ["x", v, None]},
                   {"type": "array", "items": False, "prefixItems": [{"const": v}]}):
        g = _compile(schema)
        wrap = (lambda x: f"[{x}]") if "prefixItems" in schema else (lambda x: x)
        for text in _spellings(v):
            assert _valid(schema, wrap(text)), (schema, text)
            assert _accepts(g, wrap(text)), f"refused {text} for {schema}"
        for text in near + [x + "1" for x in _spellings(v)] + ["-" + x for x in _spellings(v)]:
            assert not _accepts(g, wrap(text)) or _valid(schema, wrap(text)), f"accepted {text} for {schema}"


def test_integral_float_const_and_int_literals():
    """1e23 is the double 99999999999999991611392. Its spellings read as a double are accepted
    (``1e23``, ``100000000000000000000000.0``); integer literals are not: ``100000000000000000000000``
    is an int that differs from it, and ``99999999999999991611392``, an int equal to it, is left out
    because past 2**53 an int and a double of one value can differ under ``multipleOf``
    (:func:`test_big_twins_stay_sound_under_multiple_of`). Up to 2**53 both types are spelled."""
    g = _compile({"const": 1e23})
    for text, want in (("1e23", True), ("100000000000000000000000.0", True), ("99999999999999991611392", False),
                       ("100000000000000000000000", False), ("9.9999999999999991611392e22", False)):
        assert _accepts(g, text) == want, text  # (the last: valid, an exponent form of the int's digits)
        assert not want or _valid({"const": 1e23}, text), text
    for v, texts in ((5.0, ["5", "5.0", "5e0", "-5"]), (2 ** 53, ["9007199254740992", "9007199254740992.0"])):
        g = _compile({"const": v})
        for text in texts:
            assert _accepts(g, text) == _valid({"const": v}, text), (v, text)


@pytest.mark.parametrize("schema", [
    {"const": 1e23, "multipleOf": 10 ** 23},
    {"enum": [1.152921504606847e18], "multipleOf": 9007199254740993},
    {"type": "array", "items": {"const": 1e23, "multipleOf": 10 ** 23}},
    {"anyOf": [{"const": 1e23}], "multipleOf": 10 ** 23},
    {"allOf": [{"enum": [2.0 ** 60, 1]}, {"multipleOf": 2 ** 53 + 1}]},
    {"allOf": [{"const": 2 ** 60}, {"multipleOf": 2.0 ** 60}]},
    {"enum": [2 ** 54, 2.0 ** 54, 9007199254740993], "multipleOf": 3}])
def test_big_twins_stay_sound_under_multiple_of(schema):
    """Past 2**53 ``jsonschema`` divides a double and an int of one value differently (``1e23 % 10**23``
    rounds the divisor to the double 1e23: 0; the int 99999999999999991611392 is no multiple of
    10**23), so a value's spellings of the other type are not generated (found by a break-it
    helper: the integer literal of an integral float was accepted). Every spelling of either type
    that is accepted must be valid."""
    g = _compile(schema)
    wrap = (lambda x: f"[{x}]") if schema.get("type") == "array" else (lambda x: x)
    texts = []
    for v in (1e23, 99999999999999991611392, 10 ** 23, 2.0 ** 60, 2 ** 60, 2 ** 54, 2.0 ** 54, 9007199254740993):
        texts += [str(int(v)), str(int(v)) + ".0", repr(float(v)), f"{float(v):e}"]
    for text in texts:
        assert not _accepts(g, wrap(text)) or _valid(schema, wrap(text)), f"accepted {text} against {schema}"


def test_draft4_numbers_keep_their_types():
    """Draft 4: 1.0 is no integer, so an integer schema's const 1 is the literal 1 only; a float const
    gets every float spelling."""
    d4 = "http://json-schema.org/draft-04/schema#"
    g = _compile({"$schema": d4, "type": "integer", "enum": [1.0, 2]})
    for text, want in (("1", True), ("2", True), ("1.0", False), ("1e0", False), ("2E+0", False)):
        assert _accepts(g, text) == want, text
    g = _compile({"$schema": d4, "enum": [1e-9]})
    for text in ("1e-9", "1E-09", "0.000000001", "1.0e-9"):
        assert _accepts(g, text), text


def test_const_spellings_through_the_backend(llama3_vocab):
    """The break-it helper's cases end to end: the token matcher takes ``1e-9`` for ``const: 1e-9``."""
    be = get_backend("native", llama3_vocab)
    for schema, texts in (({"const": 1e-9}, ["1e-9", "1E-9", "1.0e-9", "0.000000001", "1e-09"]),
                          ({"enum": [1e-9, 2.5e+20]}, ["2.5e20", "250000000000000000000.0", "2.5E+20"])):
        g = be.compile(Constraint.json_schema(schema))
        for text in texts:
            m = g.matcher()
            assert m.advance(llama3_vocab.encode(text)) and m.is_accepting(), (schema, text)
            assert _valid(schema, text)


FINITE = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2 ** 70), 2 ** 70),
                   st.builds(lambda m, e: float(f"{m}e{e}"), st.integers(1, 10 ** 17), st.integers(-330, 290)))


@PROPS
@given(v=FINITE, other=FINITE, int_strict=st.booleans())
@example(v=1e-9, other=2.5e20, int_strict=False)
def test_numeric_const_property(v, other, int_strict):
    """Random numbers: every documented spelling of a value is accepted, and nothing is accepted that
    jsonschema does not accept (the spellings of a neighbour value, one digit changed)."""
    schema = {"enum": [v, other]}
    if int_strict:
        schema["$schema"] = "http://json-schema.org/draft-04/schema#"
    g = _compile(schema)
    validator = (jsonschema.Draft4Validator if int_strict else jsonschema.Draft202012Validator)(schema)

    def valid(text):
        return validator.is_valid(json.loads(text))

    texts = _spellings(v) + _spellings(other)
    for text in texts:
        if not int_strict:
            assert _accepts(g, text) and valid(text), text
    for text in texts + [t[:-1] + str((int(t[-1]) + 1) % 10) for t in texts if t[-1].isdigit()]:
        assert not _accepts(g, text) or valid(text), f"accepted {text} against {schema}"



# -- draft 4: 1 and 1.0 are one value for enum/const, two for type -----------------------------------
D4 = "http://json-schema.org/draft-04/schema#"


@pytest.mark.parametrize("branches", [
    [{"type": "integer"}, {"enum": [1.0]}], [{"type": "integer"}, {"enum": [1.0, 2]}],
    [{"type": "integer"}, {"const": 1.0}], [{"type": "number", "minimum": 0}, {"enum": [1, 2.0, -3]}],
    [{"type": "integer"}, {"enum": [1.0]}, {"enum": [2.0]}], [{"enum": [1]}, {"enum": [1.0]}]])
def test_draft4_oneof_with_twin_values_is_sound(branches):
    """A draft-4 ``oneOf`` of an integer branch and a branch listing ``1.0``: the text ``1`` is an integer
    and equal to ``1.0`` for ``enum``, so it matches both and is invalid; the disjointness proof and
    the values kept for a listed branch both look at each value's twins (break-it helper: ``1`` was
    accepted). Every order of the branches; every accepted text valid for ``jsonschema`` (Draft 4)."""
    texts = ["0", "1", "1.0", "1e0", "2", "2.0", "-3", "-3.0", "3", "0.5", "10"]
    for perm in itertools.permutations(branches):
        schema = {"$schema": D4, "oneOf": list(perm)}
        v = jsonschema.Draft4Validator(schema)
        try:
            g = _compile(schema)
        except UnsupportedFeatureError:
            continue  # a typed refusal is sound
        except InvalidConstraintError:  # "matches nothing": true here ([1] and [1.0] are one value)
            assert not any(v.is_valid(json.loads(t)) for t in texts), schema
            continue
        for t in texts:
            assert not _accepts(g, t) or v.is_valid(json.loads(t)), f"accepted {t} against {schema}"
