"""A *float* ``multipleOf`` is tested the way validators test it (found by a helper): ``jsonschema``
divides in binary floating point, so ``1`` is not a multiple of ``1e-05`` (``1 / 1e-05`` is
99999.99999999999), ``9007199254740993`` not one of ``3.0`` (the dividend rounds to ``2**53``) and
``10**9`` not one of ``1e-300`` (the quotient overflows into the exact test); native accepted all
three. Oracle: ``json.loads`` + ``jsonschema`` (a dividend past the doubles makes it raise: never
valid). Native never accepts an invalid integer, and accepts every valid one with ``|n| <= 2**53``
where it compiles the keyword; the rest is a typed refusal."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import UnsupportedFeatureError

CANDIDATES = [str(x) for x in list(range(-25, 26)) + [99999, 100000, 200000, 10 ** 9, 10 ** 9 + 1, 2 ** 53 - 3,
                                                      2 ** 53 - 1, 2 ** 53, 2 ** 53 + 1, 9007199254740995, 2 ** 60,
                                                      3 * 2 ** 60, 10 ** 20, -(2 ** 53) - 1, 3 * 10 ** 310]]
COMPILED = [0.5, 0.25, 1.0, 2.0, 4.0, 3.0, 7.0, 0.1, 0.01, 0.05, 0.2, 1e-7, 1e-10, 1e-300]
REFUSED = [1e-05, 1e-15, 0.3, 1.5, 2.5]


def _valid(v, text: str) -> bool:
    try:
        return v.is_valid(json.loads(text))
    except OverflowError:  # jsonschema's float division of an int past the doubles
        return False


@pytest.mark.parametrize("t", ["integer", "number"])
@pytest.mark.parametrize("mo", COMPILED)
def test_float_multiple_of_as_validators_divide(llama3_vocab, t, mo):
    schema = {"type": t, "multipleOf": mo}
    try:
        g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    except UnsupportedFeatureError:
        assert t == "number" and not mo.is_integer()  # non-integral multiples of decimals: refused
        return
    v = jsonschema.Draft202012Validator(schema)
    accepted = 0
    for text in CANDIDATES:
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
        valid = _valid(v, text)
        assert not ok or valid, f"accepted {text} against {schema}"
        if valid and abs(int(text)) <= 2 ** 53 and abs(int(text) / mo) < 1e308:
            assert ok, f"refused the valid {text} against {schema}"
        accepted += ok
    assert accepted >= 5


@pytest.mark.parametrize("mo", REFUSED)
def test_float_multiple_of_without_a_sound_form_is_refused(llama3_vocab, mo):
    with pytest.raises(UnsupportedFeatureError, match="multipleOf"):
        get_backend("native", llama3_vocab).compile(Constraint.json_schema({"type": "integer", "multipleOf": mo}))


@pytest.mark.parametrize("schema", [
    {"allOf": [{"multipleOf": 3}, {"multipleOf": 3.0}]},
    {"type": "integer", "multipleOf": 3, "allOf": [{"multipleOf": 3.0}]},
    {"multipleOf": 3, "$ref": "#/$defs/x", "$defs": {"x": {"multipleOf": 3.0}}},
    {"multipleOf": 3, "anyOf": [{"multipleOf": 3.0}, {"type": "string"}]},
    {"type": "number", "allOf": [{"multipleOf": 7}, {"multipleOf": 7.0}]},
])
def test_an_int_and_an_equal_float_multiple_of_merge_as_the_float(llama3_vocab, schema):
    """``3 == 3.0``, so the merge of ``allOf``/``$ref`` siblings/``anyOf`` branches kept whichever
    came first; kept as the int, the float's rounding was lost (``9007199254740993`` accepted; a
    break-it helper's find). Both orders, every candidate, against jsonschema."""
    def swapped(x):  # the same schema with each multipleOf's int and float spelling exchanged
        if isinstance(x, dict):
            return {k: (float(v) if isinstance(v, int) else int(v)) if k == "multipleOf" else swapped(v)
                    for k, v in x.items()}
        return [swapped(y) for y in x] if isinstance(x, list) else x

    for s in (schema, swapped(schema)):
        g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(s))
        v = jsonschema.Draft202012Validator(s)
        for text in CANDIDATES + ["9007199254740999", "-9007199254740993"]:
            m = g.matcher()
            ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
            assert not ok or _valid(v, text), f"accepted {text} against {s}"
            if _valid(v, text) and abs(int(text)) <= 2 ** 53:
                assert ok, f"refused the valid {text} against {s}"
