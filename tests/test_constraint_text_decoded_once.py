"""A constraint's JSON text is decoded exactly once (``Constraint.__post_init__``).

The native backend decoded a JSON Schema text twice (the Constraint, then the compiler's ``_load``),
so text holding a JSON *string* was read as a schema: ``'"true"'`` compiled as the schema ``true``,
``'"x"'`` was "not valid JSON ... x", and ``'"{\\"type\\":\\"integer\\"}"'`` was served as an integer
schema. A structural tag's text was decoded twice the same way (the vLLM bridge, then the engine).
Such text now gets the error every other non-schema gets (``5``, ``null``).

Oracles: ``json.loads`` (what the text is, decoded once) and ``jsonschema`` (that it is no schema).
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.backends.registry import get_backend_spec
from structgate.errors import GrammarSyntaxError, InvalidConstraintError

#: JSON texts of JSON strings, the last one a string holding a whole schema's text
STRING_TEXTS = ['"true"', '"x"', '"false"', ' "{\\"type\\":\\"integer\\"}"', json.dumps(json.dumps({"const": 1}))]


def _engines():
    return [n for n in ("native", "structgate-xgrammar", "structgate-llguidance", "structgate-outlines-core")
            if get_backend_spec(n).availability()[0]]


@pytest.mark.parametrize("text", STRING_TEXTS)
def test_schema_text_holding_a_json_string_is_no_schema(text):
    value = json.loads(text)
    assert isinstance(value, str)
    with pytest.raises(jsonschema.SchemaError):  # the oracle: a string is no schema
        jsonschema.Draft202012Validator.check_schema(value)
    with pytest.raises(GrammarSyntaxError, match="a schema must be a JSON object or a boolean") as ei:
        Constraint.json_schema(text)
    assert ei.value.position == len(text) - len(text.lstrip())
    with pytest.raises(GrammarSyntaxError, match="a schema must be a JSON object or a boolean"):
        Constraint.json_schema(text.encode())


@pytest.mark.parametrize("name", _engines())
def test_no_engine_serves_a_json_string_as_a_schema(llama3_vocab, name):
    """The message 5 and null get on native; the same refusal whatever engine compiles next."""
    b = get_backend(name, llama3_vocab)
    for text in STRING_TEXTS:
        with pytest.raises(GrammarSyntaxError, match="a schema must be a JSON object or a boolean"):
            b.compile(Constraint.json_schema(text))
    if name == "native":
        for text in ("5", "null"):
            with pytest.raises(GrammarSyntaxError, match="a schema must be a JSON object or a boolean"):
                b.compile(Constraint.json_schema(text))


def test_schema_texts_still_decode_once(llama3_vocab):
    """Object and boolean texts compile as before: the text's own schema, checked with jsonschema."""
    b = get_backend("native", llama3_vocab)
    for text, samples in (('{"type": "integer"}', ["5", "-2", '"5"', "true"]),
                          ("true", ["5", '"x"', "[1]"])):
        schema = json.loads(text)
        v = jsonschema.Draft202012Validator(schema)
        g = b.compile(Constraint.json_schema(text))
        for s in samples:
            m = g.matcher()
            got = m.advance(llama3_vocab.encode(s)) and m.is_accepting()
            assert got == v.is_valid(json.loads(s)), (text, s)


def test_structural_tag_text_holding_a_json_string_is_refused(llama3_vocab):
    spec = {"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}
    twice = json.dumps(json.dumps(spec))
    assert json.loads(json.loads(twice)) == spec  # it took two decodes to reach the spec
    with pytest.raises(InvalidConstraintError, match="structural_tag /: must be a JSON object"):
        Constraint("structural_tag", twice)
    # the spec's own text: decoded once, compiled
    c = Constraint("structural_tag", json.dumps(spec))
    assert c.value == spec
    m = get_backend("native", llama3_vocab).compile(c).matcher()
    assert m.advance(llama3_vocab.encode("hi")) and m.is_accepting()


def test_vllm_bridge_decodes_once():
    import types

    from structgate.plugin.bridge import constraint_from_key, constraint_from_params

    class Kind:
        def __init__(self, name):
            self.name = name

    for text in ('"true"', '"{\\"type\\":\\"integer\\"}"'):
        with pytest.raises(GrammarSyntaxError, match="a schema must be a JSON object or a boolean"):
            constraint_from_key(Kind("JSON"), text)
        with pytest.raises(GrammarSyntaxError, match="a schema must be a JSON object or a boolean"):
            constraint_from_params(types.SimpleNamespace(json=text))
    spec = json.dumps(json.dumps({"type": "structural_tag", "format": {"type": "const_string", "value": "a"}}))
    with pytest.raises(InvalidConstraintError, match="must be a JSON object"):
        constraint_from_key(Kind("STRUCTURAL_TAG"), spec)
