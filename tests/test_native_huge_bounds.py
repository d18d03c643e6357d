"""Length and count bounds far beyond any automaton (``maxLength: 10**30``) give a typed limit
error naming the keyword, or compile without building a state per unit of the bound (found by a
helper: ``propertyNames: {maxLength: 10**6}`` took 20 s and 1.4 GB before a limit, ``10**30`` ran
out of memory, a ``oneOf`` disjointness check with ``maxLength: 2147483647`` raised
``MemoryError``, and a count past the regex repetition limit was a syntax error in the generated
regex at ``#``). The ``timeout`` marks are hang guards (a counter of 10**30 states never finishes)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError

HUGE = [100_000, 2 ** 31 - 1, 10 ** 30]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", HUGE)
def test_property_names_length_bound_is_a_typed_limit(llama3_vocab, n):
    be = get_backend("native", llama3_vocab)
    for kw in ("maxLength", "minLength"):
        schema = {"type": "object", "propertyNames": {kw: n}}
        with pytest.raises(CompileLimitError) as e:
            be.compile(Constraint.json_schema(schema))
        assert e.value.limit_name == "max_product_states" and "/propertyNames" in str(e.value), e.value


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", HUGE[:2])
def test_oneof_with_huge_length_bounds_compiles_exactly(llama3_vocab, n):
    # the disjointness check leaves a bound it cannot count out (a superset) instead of counting it
    schema = {"oneOf": [{"type": "string", "maxLength": n}, {"type": "string", "minLength": n}]}
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    for text in ('"abc"', '""', '"' + "x" * 40 + '"', "3"):
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
        assert ok == v.is_valid(json.loads(text)), text


@pytest.mark.parametrize("schema,pointer", [
    ({"type": "string", "maxLength": 10 ** 30}, "/maxLength"),
    ({"type": "string", "minLength": 2 ** 40}, "/minLength"),
    ({"type": "array", "maxItems": 10 ** 30}, "/maxItems"),
    ({"type": "array", "contains": {"type": "integer"}, "minContains": 10 ** 30}, "/minContains"),
    ({"type": "object", "properties": {"a": {"type": "array", "minItems": 2 ** 33}}}, "/properties/a/minItems"),
    ({"oneOf": [{"type": "string", "maxLength": 10 ** 30}, {"type": "string", "minLength": 10 ** 30}]},
     "/oneOf/0/maxLength"),
])
def test_count_beyond_repetition_limit_names_its_keyword(llama3_vocab, schema, pointer):
    with pytest.raises(CompileLimitError) as e:
        get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    assert e.value.limit_name == "max_count" and f"at {pointer}:" in str(e.value), e.value
