"""``compile_timeout_s`` is enforced inside the JSON Schema walk, not only between compile stages
(found by a helper: with a 2 s budget, a schema whose exact ``oneOf`` form grows exponentially with
its nesting — ``{"oneOf": [X, {"type": "null"}]}`` nested 26 deep — compiled for 25 s before the
deadline was looked at). The ``timeout`` mark is the hang guard: 30 levels take minutes without
the check; the typed error must come first."""
from __future__ import annotations

import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError


def _nested_nullable(depth: int) -> dict:
    s: dict = {"type": "integer"}
    for _ in range(depth):
        s = {"oneOf": [s, {"type": "null"}]}
    return s


@pytest.mark.timeout(60)
def test_deadline_reached_inside_the_schema_walk(llama3_vocab):
    be = get_backend("native", llama3_vocab, compile_timeout_s=1.0)
    with pytest.raises(CompileLimitError) as e:
        be.compile(Constraint.json_schema(_nested_nullable(30)))
    assert e.value.limit_name == "compile_timeout_s" and "/oneOf/" in str(e.value), e.value


def test_shallow_nesting_still_compiles_exactly(llama3_vocab):
    # 4 levels: null is valid at odd depth counts only (oneOf: exactly one branch may match)
    import json

    import jsonschema

    schema = _nested_nullable(4)
    g = get_backend("native", llama3_vocab, compile_timeout_s=30.0).compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    for text in ("null", "1", '"a"', "1.5"):
        m = g.matcher()
        ok = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
        assert ok == v.is_valid(json.loads(text)), text


def test_validate_is_not_bounded_by_the_compile_timeout(llama3_vocab):
    # validate() is the cheap check a server runs before queueing a request; compile_timeout_s
    # limits the compile only (the vLLM plugin bounds validation with its own budget): a valid
    # schema validates even with a 1 µs compile time limit, and its compile then fails typed
    from structgate import CompileOptions
    from structgate.native.json_schema import check_schema

    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    be = get_backend("native", llama3_vocab, compile_timeout_s=1e-6)
    be.validate(Constraint.json_schema(schema))
    check_schema(schema, CompileOptions(compile_timeout_s=1e-6))
    with pytest.raises(CompileLimitError) as e:
        be.compile(Constraint.json_schema(schema))
    assert e.value.limit_name == "compile_timeout_s"


@pytest.mark.timeout(20)
def test_deadline_reached_inside_an_integer_exclusion(llama3_vocab):
    """An integer range split around the values of a folded ``not: {enum}``: each piece under a float
    ``multipleOf`` builds its own automaton (~16 ms), 3,000 pieces about a minute; the deadline is
    checked between pieces (a break-it helper saw 91 s against a 60 s limit). Hang guard: the mark."""
    import random

    rng = random.Random(3)
    schema = {"type": "integer", "multipleOf": 3.0,
              "not": {"enum": [rng.randint(-2 ** 53, 2 ** 53) for _ in range(3000)]}}
    be = get_backend("native", llama3_vocab, compile_timeout_s=0.5)
    with pytest.raises(CompileLimitError) as e:
        be.compile(Constraint.json_schema(schema))
    assert e.value.limit_name == "compile_timeout_s", e.value
