"""Number keywords where float arithmetic made the compiler call a range empty or cut it (found
by a break-it helper against ``jsonschema``):

* a float ``multipleOf`` produced only integers with ``|n| <= 2**53``: ``{"type": "integer",
  "multipleOf": 1.0, "minimum": 9007199254740993}`` "matched nothing" while ``jsonschema`` accepts
  every integer there (``float(n) / 1.0`` is integral), and past ``3.0 * 2**52`` every integer is a
  multiple of ``3.0`` for it (a double from ``2**52`` on is integral).

Oracle: ``json.loads`` + ``jsonschema`` (Draft 2020-12; a dividend past the doubles makes its
``multipleOf`` raise: never valid). Native never accepts an invalid text, says "matches nothing"
only for a range without a valid value, and accepts the valid texts of the documented subset.
"""
from __future__ import annotations

import functools
import json
from fractions import Fraction

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from structgate import Constraint, get_backend
from structgate.errors import InvalidConstraintError, UnsupportedFeatureError
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

