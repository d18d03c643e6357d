"""Numeric automata kept for the process (``_type_number._shared_dfa``) and the memos on automata
(``_automata.minimize``'s minimal form, ``_automata.emit``'s eliminated text).

The remainder, range and non-integer automata of ``multipleOf`` / ``not multipleOf`` / ``not
{type: integer}`` are pure functions of their parameters; schemas repeat them (the MaskBench
Handwritten ``oneofanyofitc*`` / ``oneofitemscontains*`` schemas each rebuild the products of
``multipleOf: 11, minimum: 100`` and its negations, a third of their compile). Oracles: a compile
with the caches emptied (same rule texts), ``jsonschema`` on integer and decimal windows, and
counts of the product constructions (the second compile builds none)."""
from __future__ import annotations

import json
from decimal import Decimal

import jsonschema
import pytest

import structgate.native.json_schema._automata as automata
import structgate.native.json_schema._type_number as type_number
from _matching import accepts
from structgate import Constraint, get_backend
from structgate.backends.interface import CompileOptions
from structgate.errors import CompileLimitError
from structgate.native.json_schema._automata import CPDFA, minimize, remainder_dfa
from structgate.native.json_schema.compiler import _compile_texts

SCHEMAS = [
    {"type": "integer", "multipleOf": 11, "minimum": 100},
    {"type": "number", "not": {"multipleOf": 11}, "minimum": -50, "maximum": 400},
    {"type": "array", "contains": {"type": "number", "multipleOf": 11, "minimum": 100},
     "items": {"type": "number", "maximum": 500}},
    {"type": "number", "not": {"type": "integer"}, "minimum": 2.5, "exclusiveMaximum": 40},
    {"type": "integer", "allOf": [{"multipleOf": 6}, {"not": {"multipleOf": 4}}], "maximum": 1000},
]


def _texts(schema, **extra):
    c, root = _compile_texts(schema, CompileOptions(extra=extra) if extra else None)
    return root, dict(c.rules)


@pytest.fixture
def empty_cache():
    type_number._SHARED_DFAS.clear()
    type_number._shared_states[0] = 0
    yield
    type_number._SHARED_DFAS.clear()
    type_number._shared_states[0] = 0


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
def test_a_kept_automaton_gives_the_texts_of_a_fresh_build(schema, empty_cache, monkeypatch):
    cold = _texts(schema)
    assert type_number._SHARED_DFAS, "the numeric automata were not kept"
    builds = []
    real = type_number.product
    monkeypatch.setattr(type_number, "product", lambda *a, **k: builds.append(1) or real(*a, **k))
    warm = _texts(schema)
    assert warm == cold
    assert builds == [], "the second compile multiplied the automata again"
    type_number._SHARED_DFAS.clear()
    assert _texts(schema) == cold
    assert builds, "a compile with an empty cache must build the products"


@pytest.mark.parametrize("schema", SCHEMAS[:2] + SCHEMAS[3:], ids=[0, 1, 3, 4])
def test_the_kept_automata_accept_what_jsonschema_accepts(schema, empty_cache, llama3_vocab):
    be = get_backend("native", llama3_vocab)
    check = jsonschema.Draft202012Validator(schema).is_valid
    texts = [str(i) for i in range(-60, 1010, 7)] + [str(Decimal(i) / 4) for i in range(-40, 200, 3)]
    first = be.compile(Constraint.json_schema(json.dumps(schema)))
    verdicts = [accepts(first, llama3_vocab, t) for t in texts]
    assert verdicts == [check(json.loads(t)) for t in texts]
    # a second backend (no compile cache shared) served from the kept automata: the same verdicts
    again = get_backend("native", llama3_vocab).compile(Constraint.json_schema(json.dumps(schema)))
    assert [accepts(again, llama3_vocab, t) for t in texts] == verdicts


def test_limits_are_part_of_the_key_and_errors_are_not_kept(empty_cache):
    schema = {"type": "integer", "allOf": [{"multipleOf": 6}, {"not": {"multipleOf": 35}}], "minimum": 0}
    with pytest.raises(CompileLimitError) as e:
        _texts(schema, max_product_states=20)
    assert e.value.limit_name == "max_product_states"
    cold = _texts(schema)  # the error was not kept
    with pytest.raises(CompileLimitError):  # nor is the default limit's automaton used under a smaller one
        _texts(schema, max_product_states=20)
    assert _texts(schema) == cold


def test_minimize_remembers_the_minimal_form():
    d = remainder_dfa(12)
    copy = CPDFA(list(d.atoms), [list(r) for r in d.delta], list(d.accept))
    m = minimize(d)
    assert minimize(d) is m and minimize(m) is m
    fresh = minimize(copy)  # (a new object: no memo)
    assert fresh is not m
    assert (fresh.atoms, fresh.delta, fresh.accept) == (m.atoms, m.delta, m.accept)


def test_emit_writes_an_automaton_once_per_writer_and_cap(monkeypatch):
    d = minimize(remainder_dfa(3))
    calls = []
    real = automata.to_regex
    monkeypatch.setattr(automata, "to_regex", lambda *a: calls.append(a[2]) or real(*a))

    def enc(cs):
        return "".join(chr(a) if a == b else f"[{chr(a)}-{chr(b)}]" for a, b in cs)

    kw = dict(define=None, name_base="t", what="test", where="")
    first = automata.emit(d, enc, inline_cap=100_000, **kw)
    assert automata.emit(d, enc, inline_cap=100_000, **kw) == first and calls == [100_000]
    with pytest.raises(CompileLimitError):  # another cap: written again (and too large for it)
        automata.emit(d, enc, inline_cap=5, **kw)
    assert calls == [100_000, 5]
    other = minimize(CPDFA(list(d.atoms), [list(r) for r in d.delta], list(d.accept)))
    assert automata.emit(other, enc, inline_cap=100_000, **kw) == first and calls == [100_000, 5, 100_000]
