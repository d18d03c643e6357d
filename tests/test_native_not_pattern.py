"""``not {pattern: P}`` and ``not`` of string ``enum``/``const`` beside a length bound or pattern:
exact, the complement of the excluded language's code-point automaton intersected with the
string's other patterns, format and length bounds (``_NOT_PATTERNS`` / ``_NOT_STR`` in
``_type_string._patterns_with``), where native used to refuse them (``UnsupportedFeatureError
("not")``: 11 MaskBench development schemas, among them the ``officer`` name of ``Github_ultra``
``o65418``-``o65432``, ``o65826``'s origins, ``o25761``'s ``init_system``).

The steps of a patterns product are bounded by the automaton they leave (trimmed and minimised,
``max_product_states``), the pairs visited while building one at ``PRODUCT_VISIT_FACTOR`` times
that. Oracle: ``jsonschema`` on every instance, walked through the native engine's token path."""
from __future__ import annotations

import itertools
import json

import jsonschema
import pytest

from _matching import accepts, jsonschema_disagreements
from structgate import Constraint
from structgate.errors import CompileLimitError, InvalidConstraintError
from structgate.native.backend import NativeBackend
from structgate.native.json_schema import _type_string

S = "https://json-schema.org/draft/2020-12/schema"

SCHEMAS = [
    {"not": {"pattern": "a"}},
    {"type": "string", "not": {"pattern": "^a"}},
    {"not": {"not": {"pattern": "a"}}},
    {"allOf": [{"not": {"pattern": "a"}}, {"not": {"pattern": "b"}}]},
    {"type": "string", "not": {"anyOf": [{"pattern": "^a"}, {"pattern": "b$"}]}},
    {"type": "string", "not": {"pattern": "a", "maxLength": 2}},  # not (pattern and maxLength)
    {"type": "string", "pattern": "b", "not": {"pattern": "^b"}},
    {"type": "string", "maxLength": 3, "not": {"pattern": "(.)\\*"}},
    {"type": "array", "items": {"not": {"pattern": "\\*"}}},
    # enum values filtered by the excluded patterns
    {"not": {"pattern": "a"}, "enum": ["a", "b", "ab", 1]},
    {"allOf": [{"enum": ["a", "b", "ab"]}, {"not": {"pattern": "b$"}}]},
    # not enum of strings beside a length bound or a pattern
    {"type": "string", "not": {"enum": ["ab", "b"]}, "minLength": 1},
    {"type": "string", "not": {"enum": ["ab", "b"]}, "pattern": "b"},
    {"type": "string", "not": {"const": "a*"}, "allOf": [{"not": {"pattern": "^\\*"}}]},
    # Github_ultra---o65418: an officer's name that is not only punctuation and spaces
    {"type": "string", "minLength": 1, "not": {"pattern": "^[\\.\\,\\*\\\\\\-\\s\\{\\}\\(\\)]+$"}},
    # Github_trivial---o25761
    {"type": "string", "minLength": 1, "not": {"enum": ["ab"]}},
    # Github_hard---o65826 (format uri replaced by a pattern: the oracle asserts no format here)
    {"type": "string", "minLength": 1, "not": {"type": "string", "pattern": ".*\\*.*\\*.*"},
     "anyOf": [{"pattern": "^b"}, {"const": "*"}]},
    # refused before (tests/test_json_schema_regex.py listed them): an exact count of contains
    # (the other items not contains), if without then's negation... each needs not pattern
    {"type": "array", "contains": {"pattern": "a"}, "maxContains": 1},
    {"if": {"pattern": "a"}, "then": {"maxLength": 2}},
    {"type": "string", "maxLength": 3, "not": {"enum": ["a"]}},
    # a oneOf whose branches overlap: each branch minus the others (not pattern has a positive form)
    {"oneOf": [{"type": "string", "pattern": "a"}, {"type": "string", "pattern": "b"}]},
]
STRINGS = ["".join(p) for n in range(5) for p in itertools.product("ab* ", repeat=n)]
OTHERS = [1, None, True, ["a"], {"a": 1}]


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)




@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:70] for s in SCHEMAS])
def test_not_pattern_and_not_names_beside_bounds_are_exact(backend, llama3_vocab, schema):
    values = STRINGS + OTHERS
    if schema.get("type") == "array" or "contains" in schema:
        values = [[s] for s in STRINGS[:40]] + [STRINGS[:8]] + OTHERS
    wrong = jsonschema_disagreements(backend, llama3_vocab, schema, values)
    assert not wrong, f"native disagrees with jsonschema on (value, valid): {wrong[:20]}"


def test_not_of_a_pattern_every_string_matches_leaves_nothing(backend):
    # "" matches every string, and a non-string satisfies any pattern: no value is valid
    with pytest.raises(InvalidConstraintError) as e:
        backend.compile(Constraint.json_schema({"not": {"pattern": ""}}))
    assert "structgate:" not in str(e.value) and "(not, type)" in str(e.value)


def test_a_product_step_is_held_to_its_minimal_automaton(llama3_vocab):
    # ^[ab]*a[ab]{4}$ (32 states) ∩ b.{5}$ (64): 95 pairs visited, 21 states once minimised
    schema = {"type": "string", "allOf": [{"pattern": "^[ab]*a[ab]{4}$"}, {"pattern": "b.{5}$"}]}
    be = NativeBackend(llama3_vocab, max_product_states=64)
    g = be.compile(Constraint.json_schema(schema))
    check = jsonschema.Draft202012Validator(schema)
    values = ["".join(p) for n in range(5, 9) for p in itertools.product("ab", repeat=n)]
    wrong = [v for v in values if accepts(g, llama3_vocab, json.dumps(v)) != check.is_valid(v)]
    assert not wrong and any(map(check.is_valid, values))
    # a.{3}b ∩ b.{5}$: 146 states once minimised, over a limit of 100 (388 pairs visited)
    big = {"type": "string", "allOf": [{"pattern": "a.{3}b"}, {"pattern": "b.{5}$"}]}
    with pytest.raises(CompileLimitError) as e:
        NativeBackend(llama3_vocab, max_product_states=100).compile(Constraint.json_schema(big))
    assert e.value.limit_name == "max_product_states" and "/pattern" in str(e.value)
    assert 388 <= 100 * _type_string.PRODUCT_VISIT_FACTOR


#: MaskBench Handwritten---string5 (jsonschemabench, MIT), its $defs inlined: 16,810 pairs visited
#: by one product step (a CompileLimitError under the default limit until the visit factor)
STRING5 = {"allOf": [
    {"pattern": "^([a-z][0-9])+$"}, {"pattern": "((c1d3g3).{4,8}){6,6}"}, {"pattern": "(t|8){10,10}..$"},
    {"pattern": "^z9((.){10,10}){10,10}z9$"}, {"multipleOf": 7},
    {"anyOf": [{"not": {"pattern": "^([a-z][0-9])+$"}}, {"not": {"pattern": "^..((c1d3g3).{4,8}){6,6}"}},
               {"not": {"pattern": "(t|8){10,10}..$"}}]}]}


def test_maskbench_string5_compiles_under_the_default_limits(backend, llama3_vocab):
    values = ["z9" + "a1" * 50 + "z9", "z9" + "c1d3g3a1" * 12 + "t8t8t8t8t8" + "z9", 7, 14.0, "ab"]
    wrong = jsonschema_disagreements(backend, llama3_vocab, STRING5, values)
    assert not wrong, wrong
