"""Code-point automata with more states than ``max_automaton_rules`` allows as eager rules are
generated lazily (``RefsMixin._lazy_dfa``: a ``LengthProduct`` without bounds), not dropped or refused.

The bug (MaskBench Github_medium o9819, found 2026-12-06): ``properties`` beside a
``patternProperties`` pattern ``^[0-9a-zA-Z_-]{1,255}$`` whose keys include a listed name. The
pattern's keys minus the listed names is a 257-state automaton; its rules went over
``max_automaton_rules`` (256), ``_pattern_keys`` caught the limit and left the pattern's keys out
"soundly" (extra keys are optional), so every valid instance with such a key was rejected — a
silent narrowing. The same limit refused ``propertyNames`` languages minus listed names, a format
minus a ``not`` ``const``, and large ``multipleOf`` ranges. Now each is exact.

Oracle: jsonschema (Draft 2020-12, and Draft 4 for the MaskBench schema), on instances whose listed
properties come first (native's declared property order, as XGrammar's and llguidance's).
"""
from __future__ import annotations

import json
import random

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.testing import tiny_vocabulary


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab, additional_properties=True)


def _keys(rnd: random.Random, n: int) -> list[str]:
    alpha = "ab1_-!Z"
    out = ["u", "updatedAt", "a" * 255, "a" * 256, "b" * 300, "", "c!", "col-1"]
    for _ in range(n):
        out.append("".join(rnd.choice(alpha) for _ in range(rnd.choice([1, 2, 3, 5, 9]))))
    return out


@pytest.mark.parametrize("listed", [{"u": {}}, {"updatedAt": {"type": "string"}}, {"u": {"type": "number"}}])
@pytest.mark.parametrize("pattern", ["^[0-9a-zA-Z_-]{1,255}$", "^[a-z0-9]{0,255}$", "^[ab1]{2,300}$"])
def test_pattern_keys_minus_listed_names(native, vocab, listed, pattern):
    schema = {"type": "object", "properties": listed,
              "patternProperties": {pattern: {"type": ["number", "null"]}}}
    g = native.compile(Constraint("json_schema", json.dumps(schema)))
    val = jsonschema.Draft202012Validator(schema)
    (name,) = listed
    rnd = random.Random(7)
    seen = set()
    for k in _keys(rnd, 60):
        for v in (1, "x", None):
            for inst in ({k: v}, {name: 2, k: v} if k != name else None):
                if inst is None:
                    continue
                text = json.dumps(inst)
                if text in seen:
                    continue
                seen.add(text)
                assert accepts(g, vocab, text) == val.is_valid(inst), text
    # the fix is real: valid instances with a key of the pattern other than the listed name
    assert any(val.is_valid(json.loads(t)) and set(json.loads(t)) - {name} for t in seen)


def test_property_names_minus_listed_names(native, vocab):
    schema = {"type": "object", "properties": {"ab": {"type": "integer"}},
              "propertyNames": {"pattern": "^[ab]{1,300}$"}}
    g = native.compile(Constraint("json_schema", json.dumps(schema)))
    val = jsonschema.Draft202012Validator(schema)
    for k in ["a", "ab", "ba", "b" * 300, "b" * 301, "abc", ""]:
        for inst in ({k: 1}, {"ab": 1, k: True}):
            text = json.dumps(inst)
            assert accepts(g, vocab, text) == val.is_valid(inst), text


def test_maskbench_o9819_instance(native, vocab):
    """The MaskBench schema (draft 4) and its valid instance, rejected before at ``",`` after the
    last listed property of an item."""
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string", "pattern": "^[A-Fa-f\\d]{24}$"},
            "updatedAt": {"type": "string"}},
            "patternProperties": {"^[0-9a-zA-Z_-]{1,255}$": {"type": ["string", "number", "boolean", "null"]}}}},
        "count": {"type": "integer"}}}
    g = native.compile(Constraint("json_schema", json.dumps(schema)))
    val = jsonschema.Draft4Validator(schema)
    good = {"items": [{"id": "507f191e810c19729de860ea", "updatedAt": "2022-01-01",
                       "column1": "value1", "column2": 123, "column3": True, "column4": None}], "count": 1}
    bad = {"items": [{"id": "507f191e810c19729de860ea", "updatedAt": "x", "column1": {"a": 1}}]}
    bad_key = {"items": [{"id": "507f191e810c19729de860ea", "updatedAt": "x", "col!": {"a": 1}}]}
    for inst in (good, bad, bad_key):
        assert accepts(g, vocab, json.dumps(inst)) == val.is_valid(inst), inst
    assert val.is_valid(good) and not val.is_valid(bad) and val.is_valid(bad_key)


def test_multiple_of_range_over_the_rule_limit(native, vocab):
    """``multipleOf`` in a range beyond the doubles: the product automaton was a typed
    ``max_automaton_rules`` refusal though only three integers lie in the range."""
    lo = 10 ** 400
    schema_text = '{"type": "integer", "multipleOf": 7, "minimum": %d, "maximum": %d}' % (lo, lo + 20)
    g = native.compile(Constraint("json_schema", schema_text))
    for x in range(lo - 3, lo + 24):
        assert accepts(g, vocab, str(x)) == (lo <= x <= lo + 20 and x % 7 == 0), x - lo
