"""Dependencies (``dependentRequired``, ``dependentSchemas``, draft 4-7 ``dependencies``) under
``not`` / ``if`` / ``oneOf``, and in several ``allOf`` members: exact, walked through the native
engine's token path with ``jsonschema`` as the oracle.

Before (break-it findings): ``not {dependencies: ...}`` in a draft-07 schema "matched nothing"
(the keyword added no branch to the negation: an empty ``anyOf``), so an ``if`` over it kept only
its ``then`` side; ``not {dependentSchemas: ...}`` was refused with the generic ``not`` message;
``allOf`` members each with their own dependency map were refused ("keyword 'dependentRequired'
in several allOf members"). Now ``not {k: D}`` is the objects that have ``k`` and fail ``D`` (the
negation of the compiler's exact rewrite ``anyOf [without k, with k and D]``), a dependent schema
whose negation has no positive form is ``UnsupportedFeatureError("not")`` at its own pointer, and
members' maps are united (every dependency applies)."""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint
from structgate.errors import UnsupportedFeatureError
from structgate.native.backend import NativeBackend

S = "https://json-schema.org/draft/2020-12/schema"
D7 = "http://json-schema.org/draft-07/schema#"
PROPS = {"a": {}, "b": {}, "c": {}, "d": {}}

NEGATED = [
    (S, {"not": {"dependentRequired": {"a": ["b"]}}}),
    (S, {"not": {"dependentRequired": {"a": ["b", "c"], "c": ["d"]}}}),
    (S, {"not": {"dependentSchemas": {"a": {"required": ["b"]}}}}),
    (S, {"not": {"dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}}}}}),
    (S, {"not": {"dependentSchemas": {"a": False, "b": True}}}),
    (S, {"not": {"dependentSchemas": {"a": {"required": ["c"]}}, "required": ["b"]}}),
    (S, {"not": {"anyOf": [{"dependentRequired": {"a": ["b"]}}, {"required": ["d"]}]}}),
    (D7, {"not": {"dependencies": {"a": ["b"]}}}),
    (D7, {"not": {"dependencies": {"a": {"required": ["b"]}, "c": ["d"]}}}),
    (D7, {"not": {"dependencies": {"a": {"properties": {"b": {"type": "string"}}}}}}),
    (S, {"if": {"dependentRequired": {"a": ["b"]}}, "then": {"required": ["c"]}, "else": {"required": ["d"]}}),
    (S, {"if": {"dependentSchemas": {"a": {"required": ["b"]}}}, "then": False}),
    (D7, {"if": {"dependencies": {"a": ["b"]}}, "then": {"required": ["c"]},
          "else": {"properties": {"d": {"type": "string"}}}}),
    (D7, {"if": {"dependencies": {"a": {"required": ["b"]}}}, "else": {"required": ["c"]}}),
    (S, {"oneOf": [{"dependentSchemas": {"a": {"required": ["b"]}}}, {"required": ["c"]}]}),
    # negations written since (not pattern, not integer of a number, not multipleOf)
    (S, {"not": {"dependentSchemas": {"a": {"properties": {"b": {"pattern": "x"}}}}}}),
    (S, {"not": {"dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}}}}),
    (D7, {"if": {"dependencies": {"a": {"properties": {"b": {"multipleOf": 3}}}}}, "then": {"required": ["c"]}}),
]

MERGED = [
    (S, {"allOf": [{"dependentRequired": {"a": ["b"]}}, {"dependentRequired": {"c": ["d"]}}]}),
    (S, {"allOf": [{"dependentRequired": {"a": ["b"]}}, {"dependentRequired": {"a": ["c"]}}]}),
    (S, {"allOf": [{"dependentSchemas": {"a": {"required": ["b"]}}},
                   {"dependentSchemas": {"a": {"properties": {"c": {"type": "integer"}}}}},
                   {"dependentSchemas": {"c": {"required": ["d"]}}}]}),
    (D7, {"allOf": [{"dependencies": {"a": ["b"]}}, {"dependencies": {"a": {"required": ["c"]}, "d": ["a"]}}]}),
    (S, {"$defs": {"x": {"dependentRequired": {"b": ["c"]}}}, "$ref": "#/$defs/x",
         "dependentRequired": {"a": ["b"]}}),
    (S, {"allOf": [{"dependentRequired": {"a": ["b"]}, "properties": {"a": {"type": "integer"}}},
                   {"dependentSchemas": {"b": {"required": ["d"]}}}, {"dependentSchemas": {"b": {"required": ["c"]}}}]}),
    (S, {"not": {"allOf": [{"dependentRequired": {"a": ["b"]}}, {"dependentRequired": {"c": ["d"]}}]}}),
    (S, {"allOf": [{"dependentRequired": {"a": ["b"]}}, {"dependentRequired": {"c": ["d"]}}],
         "properties": {"o": {"allOf": [{"dependentSchemas": {"x": {"required": ["y"]}}},
                                        {"dependentSchemas": {"y": False}}]}}}),
]


def _instances():
    out = []
    for n in range(5):
        for keys in itertools.combinations("abcd", n):
            for vals in itertools.product([1, "s"], repeat=n):
                out.append(dict(zip(keys, vals)))
    out += [{"o": {}}, {"o": {"x": 1}}, {"o": {"x": 1, "y": 2}}, {"o": {"y": 2}}, {"a": 1, "o": {"x": 1}}]
    return out + [1, "s", None, [], [1]]


INSTANCES = _instances()


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


def _walk(backend, vocab, draft, schema):
    full = {"$schema": draft, "properties": {**PROPS, "o": {}}, **schema}
    if "properties" in schema:
        full["properties"] = {**PROPS, **schema["properties"]}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.validators.validator_for(full)(full)
    wrong = [(i, check.is_valid(i)) for i in INSTANCES if accepts(g, vocab, json.dumps(i)) != check.is_valid(i)]
    assert not wrong, f"native disagrees with jsonschema on (instance, valid): {wrong[:12]}"
    n_valid = sum(check.is_valid(i) for i in INSTANCES)
    assert 0 < n_valid < len(INSTANCES)


@pytest.mark.parametrize("draft, schema", NEGATED, ids=[json.dumps(s)[:80] for _, s in NEGATED])
def test_negated_dependencies_are_exact(backend, llama3_vocab, draft, schema):
    _walk(backend, llama3_vocab, draft, schema)


@pytest.mark.parametrize("draft, schema", MERGED, ids=[json.dumps(s)[:80] for _, s in MERGED])
def test_dependencies_of_several_allof_members_all_apply(backend, llama3_vocab, draft, schema):
    _walk(backend, llama3_vocab, draft, schema)


@pytest.mark.parametrize("schema, where", [
    ({"not": {"dependentSchemas": {"a": {"format": "email"}}}}, "/not/dependentSchemas/a"),
    ({"properties": {"p": {"not": {"dependentSchemas": {"a": {"properties": {"b": {"format": "email"}}}}}}}},
     "/properties/p/not/dependentSchemas/a"),
    # (a float multipleOf under not has no positive form)
    ({"not": {"dependentSchemas": {"a": {"properties": {"b": {"multipleOf": 0.5}}}}}}, "/not/dependentSchemas/a"),
    # an if whose negation is refused: if/then/else at /if, the dependent schema named inside
    ({"$schema": D7, "if": {"dependencies": {"a": {"format": "email"}}}, "then": {"required": ["b"]}},
     "/if/dependencies/a"),
])
def test_a_dependent_schema_without_a_positive_negation_is_a_typed_refusal(backend, schema, where):
    with pytest.raises(UnsupportedFeatureError) as e:
        backend.compile(Constraint.json_schema(schema))
    if e.value.feature == "if/then/else":
        assert e.value.where == "/if" and f"dependent schema at {where} (" in str(e.value), str(e.value)
    else:
        assert e.value.feature == "not" and e.value.where == where, (e.value.where, str(e.value))
    assert "matches nothing" not in str(e.value)
