"""A constraint whose recursion never bottoms out (every value needs another such value inside)
matches nothing: the ``InvalidConstraintError`` names where. Before, a JSON Schema said only "a
$ref cycle that every value must follow" (no pointer) and a grammar only "rule 'root' cannot
produce any string" (not the rules that never finish); a break-it finding."""
from __future__ import annotations

import pytest

from structgate import Constraint
from structgate.errors import InvalidConstraintError
from structgate.native.backend import NativeBackend


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)


@pytest.mark.parametrize("schema, named", [
    ({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}, ["$ref '#' at #"]),
    ({"type": "object", "properties": {"x": {"type": "object", "properties": {"a": {"$ref": "#/properties/x"}},
                                             "required": ["a"]}}, "required": ["x"]},
     ["$ref '#/properties/x' at /properties/x/properties/a"]),
    ({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1}},
      "type": "object", "properties": {"x": {"$ref": "#/$defs/n"}}, "required": ["x"]},
     ["$ref '#/$defs/n' at /properties/x"]),
    ({"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
                "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 1}}, "$ref": "#/$defs/a"},
     ["$ref '#/$defs/b' at /properties/b"]),
])
def test_a_schema_recursion_with_no_base_case_names_its_pointer(backend, schema, named):
    with pytest.raises(InvalidConstraintError) as e:
        backend.compile(Constraint.json_schema(schema))
    msg = str(e.value)
    assert "matches nothing" in msg and "never bottoms out" in msg, msg
    for part in named:
        assert part in msg, msg


@pytest.mark.parametrize("grammar, named", [
    ('root ::= b\nb ::= "x" c\nc ::= "y" b\n', "rules 'b', 'c' never finish"),
    ('root ::= "[" b "]"\nb ::= "x" b\n', "rule 'b' never finishes"),
    ('root ::= b | c\nb ::= "x" b\nc ::= "y" c "z"\n', "rules 'b', 'c' never finish"),
])
def test_a_grammar_recursion_with_no_base_case_names_its_rules(backend, grammar, named):
    with pytest.raises(InvalidConstraintError) as e:
        backend.compile(Constraint.grammar(grammar))
    assert "matches nothing" in str(e.value) and named in str(e.value), str(e.value)
