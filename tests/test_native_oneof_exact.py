"""Native JSON Schema ``oneOf``: exact where it compiles, a typed refusal elsewhere.

``oneOf`` compiles as the anyOf of its branches where they are proven pairwise disjoint
(``_disjoint.py``: discriminators required beside the oneOf, keys the other branch forbids,
disjoint patterns/lengths/ranges/array positions, finite values decided by the validator, ``not
required`` of keys the other branch requires), else as each branch minus the branches it may
overlap (``allOf [A, not B]``, with ``not B`` in positive form). The oracle is ``jsonschema``
(draft 2020-12): native accepts a text iff the value is valid — up to native's key-order policy
(objects are written in declared order), so a valid value must be accepted in *some* order of its
keys and an invalid one in none. Each schema is checked in regex mode (Python ``re`` on
``schema_to_regex``) and in grammar mode (the native backend over a byte vocabulary).
"""
from __future__ import annotations

import functools
import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from structgate.backends.interface import CompileOptions, Constraint
from structgate.backends.registry import get_backend
from structgate.errors import UnsupportedFeatureError
from structgate.native.json_schema.compiler import schema_to_regex
from structgate.vocab import Vocabulary

OPTS = CompileOptions(whitespace="compact", additional_properties=True)
SCALARS = [None, True, False, 0, 1, 2, 3, 5, -1, 1.5, "", "a", "b", "x", "ab", "abc", "t", "f",
           "http://e", "./p", [], [1], ["a"], {}]


@functools.lru_cache(maxsize=None)
def _regex(key: str):
    return re.compile(schema_to_regex(json.loads(key), OPTS))


@functools.lru_cache(maxsize=None)
def _byte_backend():
    vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256], name="bytes")
    return vocab, get_backend("native", vocab, whitespace="compact", additional_properties=True)


@functools.lru_cache(maxsize=None)
def _grammar(key: str):
    return _byte_backend()[1].compile(Constraint("json_schema", key))


def _grammar_accepts(key: str, text: str) -> bool:
    m = _grammar(key).matcher()
    return m.advance(list(text.encode("utf-8"))) and m.is_accepting()


def _texts(v) -> list[str]:
    """The compact JSON texts of ``v``: every order of its top-level keys (nested values as built)."""
    dump = functools.partial(json.dumps, separators=(",", ":"), ensure_ascii=False)
    if isinstance(v, dict) and 1 < len(v) <= 4:
        return [dump({k: v[k] for k in p}) for p in itertools.permutations(v)]
    return [dump(v)]


def _check(schema, values, grammar: bool = True):
    """Native accepts some spelling of each valid value and no spelling of an invalid one."""
    key = json.dumps(schema, sort_keys=True)
    rx = _regex(key)
    validator = Draft202012Validator(schema)
    n_valid = 0
    for v in values:
        ok = validator.is_valid(v)
        n_valid += ok
        texts = _texts(v)
        got = [rx.fullmatch(t) is not None for t in texts]
        assert (any(got) if ok else not any(got)), (v, ok, "regex")
        if grammar:
            got = [_grammar_accepts(key, t) for t in texts]
            assert (any(got) if ok else not any(got)), (v, ok, "grammar")
    return n_valid


def _objects(pools: dict) -> list[dict]:
    """Every object whose keys are a subset of ``pools`` (in its order), each value from its pool."""
    keys = list(pools)
    out = []
    for r in range(len(keys) + 1):
        for ks in itertools.combinations(keys, r):
            for vals in itertools.product(*(pools[k] for k in ks)):
                out.append(dict(zip(ks, vals)))
    return out


# -- kind (a): branches proven disjoint ------------------------------------------------------------
DISJOINT = {
    # JSON Patch: `op` required beside the oneOf, a different enum per branch (MaskBench o73930)
    "discriminator required beside oneOf": (
        {"type": "object", "required": ["op"], "properties": {"path": {"type": "string"}},
         "oneOf": [{"properties": {"op": {"enum": ["add", "replace"]}}, "required": ["value"]},
                   {"properties": {"op": {"const": "remove"}}}]},
        {"path": ["/a", 1], "op": ["add", "remove", "test", 1], "value": [1]}),
    # a required key that the other branch's additionalProperties: false forbids
    "key forbidden by the other branch": (
        {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                    "additionalProperties": False},
                   {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
                    "additionalProperties": False}]},
        {"a": [1, "x"], "b": ["x", 1], "c": [1]}),
    # the `type` discriminator by disjoint patterns (MaskBench o48770 shape)
    "discriminator by disjoint patterns": (
        {"type": "object", "required": ["type"],
         "oneOf": [{"properties": {"type": {"type": "string", "pattern": "^basic:(string|text):$"}}},
                   {"properties": {"type": {"type": "string", "pattern": "^basic:date:$"}}}]},
        {"type": ["basic:string:", "basic:text:", "basic:date:", "basic:x:", 1]}),
    "discriminator integer vs string": (
        {"type": "object", "required": ["v"],
         "oneOf": [{"properties": {"v": {"type": "integer"}}}, {"properties": {"v": {"type": "string"}}}]},
        {"v": [1, "a", None, 1.5]}),
    # $ref and allOf on the branches
    "discriminator through $ref and allOf": (
        {"$defs": {"a": {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                         "required": ["kind"]},
                   "b": {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}},
         "oneOf": [{"$ref": "#/$defs/a"}, {"allOf": [{"$ref": "#/$defs/b"}, {"properties": {"y": {"type": "string"}}}]}]},
        {"kind": ["a", "b", "c"], "x": [1, "s"], "y": ["s", 2]}),
    # "exactly one of these key sets", written with `not required` (MaskBench Glaiveai2K calculate_area)
    "not required of the other branch's keys": (
        {"type": "object", "properties": {k: {"type": "number"} for k in ("l", "w", "b", "h")},
         "oneOf": [{"required": ["l", "w"], "not": {"required": ["b", "h"]}},
                   {"required": ["b", "h"], "not": {"required": ["l", "w"]}}]},
        {k: [1] for k in ("l", "w", "b", "h")}),
}

SCALAR_DISJOINT = {
    "disjoint patterns": {"oneOf": [{"type": "string", "pattern": "^https?://"}, {"type": "string", "pattern": "^\\./"}]},
    "disjoint lengths": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "string", "minLength": 3}]},
    "integers in disjoint ranges": {"oneOf": [{"type": "integer", "maximum": 4.5}, {"type": "integer", "minimum": 4.7},
                                              {"type": "string"}]},
    "exclusive integer bound": {"oneOf": [{"type": "integer", "exclusiveMaximum": 2}, {"type": "integer", "minimum": 2}]},
    "array lengths": {"oneOf": [{"type": "array", "maxItems": 1}, {"type": "array", "minItems": 2}]},
    "array first items": {"oneOf": [{"type": "array", "prefixItems": [{"const": "x"}], "minItems": 1},
                                    {"type": "array", "prefixItems": [{"const": "y"}], "minItems": 1}]},
    # finitely many values beside the oneOf: decided value by value (MaskBench Synthesized oneOf)
    "finite values beside oneOf": {"enum": [1, 2, 3, "x"], "oneOf": [{"type": "integer"}, {"minimum": 2}]},
    # finitely many values in every branch (MaskBench Handwritten key9)
    "finite values in the branches": {"oneOf": [{"enum": [[1], [2, 4], [5]]}, {"enum": [[1], [1, 2]]}]},
}

ARRAYS = [[], [1], [2], [5], [1, 2], [2, 4], [2, 5], ["x"], ["y"], ["x", "y"], ["y", 1], [None], ["a", "b", "c"]]


@pytest.mark.parametrize("name", list(DISJOINT))
def test_disjoint_object_branches_are_exact(name):
    schema, pools = DISJOINT[name]
    values = _objects(pools) + SCALARS
    n_valid = _check(schema, values)
    assert 0 < n_valid < len(values)


@pytest.mark.parametrize("name", list(SCALAR_DISJOINT))
def test_disjoint_scalar_and_array_branches_are_exact(name):
    values = SCALARS + ARRAYS + [4, 6, 100, -7, "./a", "https://x", "http://x", "abcd", 2.5]
    n_valid = _check(SCALAR_DISJOINT[name], values)
    assert 0 < n_valid < len(values)


def test_discriminator_without_type_rejects_non_objects():
    """A property required by both branches, with disjoint values, says nothing about non-objects:
    ``"x"`` meets both branches (required/properties hold vacuously), so oneOf rejects it. (Native
    compiled this oneOf as the anyOf, accepting ``"x"``, before.)"""
    for a, b in ((1, 2), ("a", "b")):
        schema = {"oneOf": [{"required": ["k"], "properties": {"k": {"const": a}}},
                            {"required": ["k"], "properties": {"k": {"const": b}}}]}
        values = _objects({"k": [a, b, 3], "z": [1]}) + SCALARS
        _check(schema, values)
        rx = _regex(json.dumps(schema, sort_keys=True))
        assert rx.fullmatch('"x"') is None and rx.fullmatch("1") is None
        assert rx.fullmatch(json.dumps({"k": a}, separators=(",", ":")))


# -- kind (b)/(c): overlapping branches, compiled as A ∧ ¬B ----------------------------------------------
DIFFERENCE = {
    # "ab" matches both patterns: each branch minus the other (not pattern: its complement)
    "overlapping patterns": (
        {"oneOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "b"}]}, None),
    # a string, or one of two strings: oneOf = the other strings
    "string minus an enum": (
        {"oneOf": [{"type": "string"}, {"type": "string", "enum": ["a", "b"]}]}, None),
    # anything (an unknown keyword is an annotation) or two strings (MaskBench o75109)
    "anything minus an enum": (
        {"oneOf": [{"x-note": "free"}, {"enum": ["t", "f"]}]}, None),
    # both branches allow {} (MaskBench o10092 shape)
    "closed objects with optional keys": (
        {"type": "object", "oneOf": [{"additionalProperties": False, "properties": {"next": {"type": "string"}}},
                                     {"additionalProperties": False, "properties": {"previous": {"type": "string"}}}]},
        {"next": ["s", 1], "previous": ["s", 2], "z": [1]}),
    # a discriminator that is not required (MaskBench o13137 shape)
    "optional discriminator": (
        {"type": "object", "oneOf": [
            {"properties": {"r": {"type": "boolean", "enum": [False]}, "u": {"type": "boolean", "enum": [False]}}},
            {"properties": {"r": {"type": "boolean", "enum": [True]}, "u": {"type": "boolean"}}}]},
        {"r": [True, False, 1], "u": [True, False]}),
    # untyped branches: non-objects meet both (MaskBench o58627 shape)
    "open branch vs closed branch": (
        {"oneOf": [{"properties": {"first": {"type": "string"}}, "required": ["first"]},
                   {"properties": {"vehicle": {"type": "string"}}, "additionalProperties": False}]},
        {"first": ["s", 1], "vehicle": ["s", 1], "z": [1]}),
    # a oneOf inside a branch (MaskBench o68294 shape): its negation is "none or two"
    "nested oneOf": (
        {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
         "oneOf": [{"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"required": ["c"]}]},
        {"a": [1], "b": [1], "c": [1]}),
    "if/then in a branch": (
        {"type": "object", "properties": {"x": {}, "y": {}, "z": {}},
         "oneOf": [{"if": {"required": ["x"]}, "then": {"required": ["y"]}}, {"required": ["z"]}]},
        {"x": [1], "y": [1], "z": [1]}),
    # a branch inside the other: only the larger branch's other values
    "one branch inside the other": (
        {"type": "object", "properties": {"a": {"type": "string"}},
         "oneOf": [{"required": ["a"]}, {"required": ["a"], "properties": {"a": {"const": "x"}}}]},
        {"a": ["x", "y", 1], "b": [1]}),
    # the discriminator of MaskBench Github_hard---o13024 (untyped, closed branches)
    "closed untyped branches with a required discriminator": (
        {"oneOf": [{"properties": {"type": {"enum": ["solid"]}, "colour": {"type": "string"}},
                    "additionalProperties": False, "required": ["type", "colour"]},
                   {"properties": {"type": {"enum": ["texture"]}, "path": {"type": "string"}},
                    "additionalProperties": False, "required": ["type", "path"]}]},
        {"type": ["solid", "texture", "x"], "colour": ["c"], "path": ["p"]}),
    # integer ranges that overlap (5..10 matches both): `not integer` inside an integer is no
    # branch (it was refused as "not integer of a number"; found by a fuzzing helper)
    "overlapping integer ranges": (
        {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 3}, {"type": "integer", "minimum": 2, "maximum": 20}]},
        None),
    "integers or strings minus a range": (
        {"oneOf": [{"type": ["integer", "string"]}, {"type": "integer", "minimum": 3}]}, None),
}

ARRAY_DIFFERENCE = {
    "items vs short arrays": {"type": "array", "oneOf": [{"items": {"type": "string"}}, {"maxItems": 1}]},
    "contains vs short arrays": {"type": "array", "oneOf": [{"contains": {"type": "string"}}, {"maxItems": 1}]},
    "prefixItems vs long arrays": {"type": "array", "oneOf": [{"prefixItems": [{"const": "a"}]}, {"minItems": 2}]},
}


@pytest.mark.parametrize("name", list(DIFFERENCE))
def test_overlapping_branches_are_exact(name):
    schema, pools = DIFFERENCE[name]
    values = (_objects(pools) if pools else []) + SCALARS + ["c", "ta", {"a": 1}, [1, "a"], "ba"]
    n_valid = _check(schema, values)
    assert 0 < n_valid < len(values)
    # some value matches two branches (that is why the difference is needed) and is rejected
    both = [v for v in values if sum(Draft202012Validator(b).is_valid(v) and Draft202012Validator(
        {k: x for k, x in schema.items() if k != "oneOf"}).is_valid(v) for b in _branches(schema)) >= 2]
    assert both


def _branches(schema):
    return [{"allOf": [b], "$defs": schema.get("$defs", {})} for b in schema["oneOf"]]


def test_overlap_with_dependent_required_is_sound():
    """``not dependentRequired`` (objects with ``a`` but without ``b``) is exact; the positive
    ``dependentRequired`` branch is native's sound subset (it writes ``b`` whenever it can), so
    here only: nothing invalid is accepted, and the values of the negated side are."""
    schema = {"type": "object", "properties": {"a": {}, "b": {}},
              "oneOf": [{"dependentRequired": {"a": ["b"]}}, {"required": ["a"]}]}
    rx = _regex(json.dumps(schema, sort_keys=True))
    validator = Draft202012Validator(schema)
    for v in _objects({"a": [1], "b": [1], "c": [1]}) + SCALARS:
        for t in _texts(v):
            if rx.fullmatch(t):
                assert validator.is_valid(v), t
    assert rx.fullmatch('{"a":1}') and rx.fullmatch('{"a":1,"c":1}')  # required a, not b: only branch 1
    assert not rx.fullmatch('{"a":1,"b":1}')  # both branches


@pytest.mark.parametrize("schema, values", [
    # Python's `$` also matches before a final newline: "a\n" matches both for jsonschema (`re`)
    ({"oneOf": [{"type": "string", "pattern": "^a$"}, {"type": "string", "pattern": "^a\n$"}]},
     ["a", "a\n", "b", "", 1]),
    # Python's `.` matches "\r" (ECMA-262's does not): "\r" matches both for jsonschema
    ({"oneOf": [{"type": "string", "pattern": "^.$"}, {"type": "string", "pattern": "^\r$"}]},
     ["a", "\r", "ab", "", 1]),
])
def test_overlapping_patterns_the_dialects_dispute(schema, values):
    # each branch minus the others, an excluded pattern read as what either dialect matches: a
    # string the readings dispute is never generated ("a" is the only valid value of both)
    assert _check(schema, values) == 1


@pytest.mark.parametrize("name", list(ARRAY_DIFFERENCE))
def test_overlapping_array_branches_are_exact(name):
    values = ARRAYS + [["a"], ["a", "a"], ["a", 1], [1, "a"], ["b", "c"], [1, 2, 3], ["a", "b", "c"]] + SCALARS
    n_valid = _check(ARRAY_DIFFERENCE[name], values)
    assert 0 < n_valid < len(values)


# -- hypothesis: random values over the schemas' own keys and constants ----------------------------------
def _json_values(keys, leaves):
    leaf = st.sampled_from(leaves) | st.none() | st.booleans() | st.integers(-3, 6) | st.text("abtfx", max_size=3)
    return st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(keys), inner, max_size=4), max_leaves=6)


HYPO = {**{k: v[0] for k, v in DISJOINT.items()}, **{k: v[0] for k, v in DIFFERENCE.items()}}


@pytest.mark.parametrize("name", list(HYPO))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_values_agree_with_jsonschema(name, data):
    schema = HYPO[name]
    keys = sorted({k for s in [schema] + schema.get("oneOf", []) if isinstance(s, dict)
                   for k in list(s.get("properties", {})) + list(s.get("required", []))} | {"z"})
    v = data.draw(_json_values(keys, ["add", "remove", "s", "x", "solid", "texture", "basic:date:", 1.5]))
    _check(schema, [v], grammar=False)


# -- still refused ---------------------------------------------------------------------------------
@pytest.mark.parametrize("schema, pair", [
    # "a@b.co" matches both; `not format` has no positive form here
    ({"oneOf": [{"format": "email"}, {"pattern": "@"}]}, (0, 1)),
    # genuinely overlapping objects whose exact form is too large (every branch minus 4 others)
    ({"type": "object", "oneOf": [{"required": [f"k{i}"], "properties": {f"k{i}": {"type": "string"},
                                                                       f"v{i}": {"type": "string"},
                                                                       f"w{i}": {"type": "integer"}}}
                                  for i in range(5)]}, None),
    # a value in both branches, and `not` of an enum of arrays
    ({"oneOf": [{"type": "array"}, {"enum": [[1], [1, 2]]}]}, (0, 1)),
])
def test_genuinely_overlapping_oneof_is_refused(schema, pair):
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_regex(schema, OPTS)
    assert e.value.feature == "oneOf (overlapping branches)"
    assert e.value.where == "/oneOf"
    assert "may both match a value" in e.value.detail
    if pair is not None:
        assert f"branches {pair[0]} and {pair[1]}" in e.value.detail
    with pytest.raises(UnsupportedFeatureError):
        _byte_backend()[1].compile(Constraint("json_schema", json.dumps(schema)))


def test_refusal_names_the_nested_oneof():
    schema = {"type": "object", "properties": {"role": {"oneOf": [{"format": "email"}, {"pattern": "S"}]}}}
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_regex(schema, OPTS)
    assert e.value.where == "/properties/role/oneOf" and "branches 0 and 1" in e.value.detail
