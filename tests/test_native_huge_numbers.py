"""Integers beyond the doubles in a JSON Schema's numeric keywords (``const``/``enum`` values and
``multipleOf`` together, bounds past 2**53 and past the doubles).

jsonschema's ``multipleOf`` divides in floating point: ``10**400 / 0.5`` and ``0.5 % 10**400``
raise ``OverflowError``. The compiler checks ``enum``/``const`` values with jsonschema, so such a
schema failed to compile with "the schema cannot be evaluated" (a ``GrammarSyntaxError`` for a valid
schema); it now uses jsonschema's verdict where jsonschema reaches one and the exact ``Fraction``
test where it overflows (``compiler.exact_multiple_of``). A float ``multipleOf`` whose range holds
only integers beyond the doubles said "matches nothing" (10**400 is a multiple of 0.5): now
``UnsupportedFeatureError`` naming ``multipleOf``.

Oracle: ``json.loads`` + jsonschema (Draft 2020-12) where it evaluates, Python's exact ``Fraction``
where it raises ``OverflowError``.
"""
from __future__ import annotations

import json
from fractions import Fraction

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.errors import InvalidConstraintError, StructgateError, UnsupportedFeatureError
from structgate.testing import tiny_vocabulary

H = 10 ** 400
B = 2 ** 53


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab)


def _valid(schema, instance) -> bool:
    """jsonschema's verdict; where it overflows, the schema without ``multipleOf`` and the exact test."""
    try:
        return jsonschema.Draft202012Validator(schema).is_valid(instance)
    except OverflowError:
        pass
    if isinstance(schema, dict) and "not" in schema:
        rest = {k: x for k, x in schema.items() if k != "not"}
        return _valid(rest, instance) and not _valid(schema["not"], instance)
    if isinstance(schema, dict) and "anyOf" in schema:
        rest = {k: x for k, x in schema.items() if k != "anyOf"}
        return _valid(rest, instance) and any(_valid(b, instance) for b in schema["anyOf"])
    rest = {k: x for k, x in schema.items() if k != "multipleOf"}
    mo = schema["multipleOf"]
    return (jsonschema.Draft202012Validator(rest).is_valid(instance)
            and (Fraction(instance) / Fraction(mo)).denominator == 1)


#: (schema, candidate instances): every one compiles, and accepts exactly the valid candidates
EXACT = [
    ({"multipleOf": H, "enum": [H, 3, 0.5, -H, 0]}, [H, 3, 0.5, -H, 0, 2 * H]),
    ({"multipleOf": 0.5, "const": H}, [H, 0, H + 1]),
    ({"multipleOf": 0.3, "enum": [H, 3, 0.6, 0.7]}, [H, 3, 0.6, 0.7]),
    ({"multipleOf": 1e308, "enum": [H, 10 ** 308, 0, 3 * H]}, [H, 10 ** 308, 0, 3 * H]),
    ({"multipleOf": 2.5e-300, "enum": [H, 0.5, -H - 1]}, [H, 0.5, -H - 1]),
    ({"multipleOf": 3 * 10 ** 400, "enum": [H, 3 * H, 0.25, 6 * H]}, [H, 3 * H, 0.25, 6 * H]),
    ({"multipleOf": H, "anyOf": [{"const": H}, {"const": 0.5}, {"const": 2 * H + 1}]}, [H, 0.5, 2 * H + 1]),
    ({"not": {"multipleOf": 0.5}, "enum": [H, 0.25, 7]}, [H, 0.25, 7]),
    ({"type": "integer", "multipleOf": 0.75, "enum": [H, 3 * H + 3, 4]}, [H, 3 * H + 3, 4]),
    ({"type": "number", "multipleOf": 7, "enum": [7 * H, H, 3.5, 14]}, [7 * H, H, 3.5, 14]),
]


@pytest.mark.parametrize("schema,cands", EXACT, ids=[json.dumps(s)[:60] for s, _ in EXACT])
def test_multiple_of_beside_huge_values_is_exact(schema, cands, vocab, native):
    compiled = native.compile(Constraint.json_schema(schema))
    for x in cands:
        assert accepts(compiled, vocab, json.dumps(x)) == _valid(schema, x), (schema, x)


def test_float_multiple_of_over_integers_beyond_the_doubles_is_typed(native):
    """Every integer in range is a multiple of 0.5 (exactly), but beyond the doubles validators
    cannot divide it: not compiled, named, instead of "matches nothing"."""
    for schema in ({"type": "integer", "multipleOf": 0.5, "minimum": H},
                   {"type": "integer", "multipleOf": 3.0, "maximum": -H},
                   {"type": "integer", "multipleOf": 0.1, "minimum": H, "maximum": H + 10}):
        with pytest.raises(UnsupportedFeatureError) as e:
            native.compile(Constraint.json_schema(schema))
        assert e.value.feature == "multipleOf", (schema, e.value)


HUGE_VALUES = [H, -(10 ** 500), 10 ** 300, B + 1, 0.5, 1e308, 2.5e-300]
SIBLINGS = [{"type": "integer"}, {"enum": [H, 3, 0.5, -H, 10 ** 300]}, {"const": 0.5},
            {"anyOf": [{"const": H}, {"const": 7}]}, {"not": {"const": H}}, {"enum": [1e308, 2.5e-300, 6, B + 1]}]
CANDIDATES = [H, -H, H + 1, 2 * H, 10 ** 300, 10 ** 300 + 1, -(10 ** 500), B, B + 1, B + 2, 0, 3, 6, 7, 0.5, 2.5]


def _matrix():
    for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        for val in HUGE_VALUES:
            if kw == "multipleOf" and val <= 0:
                continue
            for sib in SIBLINGS:
                yield {kw: val, **sib}


MATRIX = list(_matrix())


def test_huge_numbers_compile_soundly_or_fail_typed(vocab, native):
    """Each keyword with each huge value beside each sibling: the compile succeeds or raises a typed
    error (never "the schema cannot be evaluated", never an untyped exception; "matches nothing" only
    where no candidate is valid); what compiles accepts no invalid candidate, and every valid
    candidate of a finite value list (enum/const)."""
    for schema in MATRIX:
        try:
            compiled = native.compile(Constraint.json_schema(schema))
        except InvalidConstraintError:
            assert not any(_valid(schema, x) for x in CANDIDATES), schema
            continue
        except StructgateError as e:
            assert "cannot be evaluated" not in str(e), (schema, e)
            continue
        listed = "enum" in schema or "const" in schema or "anyOf" in schema
        for x in CANDIDATES:
            ok, valid = accepts(compiled, vocab, json.dumps(x)), _valid(schema, x)
            assert valid or not ok, f"accepted {x} against {schema}"
            if listed:
                assert ok == valid, f"{'rejected' if valid else 'accepted'} {x} against {schema}"


#: regression guards, passing before: bounds past 2**53 (exact since d8a4365) through not, anyOf,
#: oneOf, allOf and if/then/else: no invalid integer literal accepted, every valid one accepted
PAST_2_53 = [
    {"type": "integer", "minimum": B + 1, "maximum": B + 7},
    {"type": "integer", "exclusiveMinimum": B + 1, "exclusiveMaximum": B + 7},
    {"type": "number", "minimum": B + 1, "exclusiveMaximum": float(B + 4)},
    {"type": "integer", "not": {"minimum": B + 1}},
    {"type": "integer", "not": {"minimum": B + 1, "maximum": B + 5}},
    {"type": "integer", "anyOf": [{"minimum": B + 1, "maximum": B + 3}, {"minimum": B + 5, "maximum": B + 6}]},
    {"type": "integer", "oneOf": [{"maximum": B + 1}, {"minimum": float(B)}]},
    {"type": "integer", "allOf": [{"exclusiveMinimum": B + 1}, {"minimum": float(B + 2)}], "maximum": B + 6},
    {"type": "integer", "if": {"minimum": B + 2}, "then": {"maximum": B + 3}, "else": {"maximum": B - 1}},
    {"type": "integer", "minimum": B + 1, "maximum": B + 40, "multipleOf": 3},
    {"type": "integer", "minimum": H - 5, "maximum": H + 5},
    {"enum": [B + 1, B + 2, float(B)], "maximum": B + 1},
]


@pytest.mark.parametrize("schema", PAST_2_53, ids=[json.dumps(s)[:70] for s in PAST_2_53])
def test_bounds_past_2_53_exact_on_integer_literals(schema, vocab, native):
    compiled = native.compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    centres = {B, H}
    for x in range(-12, 48):
        for c in centres:
            text = str(c + x)
            assert accepts(compiled, vocab, text) == v.is_valid(c + x), (schema, text)
