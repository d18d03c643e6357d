"""A ``pattern`` that is only a length bound over one character set (``^.{60}$``,
``^[0-9]{3,5}$``) intersected with other patterns joins the length counter
(:class:`structgate.native.json_schema._automata.LengthProduct`, generated lazily) instead of
multiplying the product automaton's states by ``lmax + 1``.

MaskBench's ``Handwritten---allany17`` (18 patterns folded out of nested ``not``s, one of them
``^.{60}$``) had a product of 180,389 states: a ``CompileLimitError`` under the default
``max_product_states`` (10,000), 45 s with the limit raised. Oracles: Python ``re`` over every
short string for :func:`length_shape`, ``jsonschema`` for the compiled schemas (walked through the
native engine's token path)."""
from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest

from _matching import jsonschema_disagreements
from structgate.native.backend import NativeBackend
from structgate.native.json_schema._automata import from_ast, length_shape, matches, minimize, trim
from structgate.native.json_schema._pattern import parse_pattern, pattern_ast

S = "https://json-schema.org/draft/2020-12/schema"

# (pattern, (lmin, lmax) when it is a length bound over one set, else None)
SHAPES = [
    ("^.{6}$", (6, 6)),
    ("^[0-9]{3,5}$", (3, 5)),
    ("^a{2,}$", (2, None)),
    ("^[ab]{0,3}$", (0, 3)),
    ("^[ab]+$", (1, None)),
    ("^.{2}.{1,2}$", (3, 4)),
    ("^[ab]*$", None),  # one state: its own alphabet, nothing to fold
    ("^(?:ab){2}$", None),  # two sets alternating
    ("^(?:..){1,3}$", None),  # even lengths only
    ("^(?:aa)+$", None),  # a loop back to an earlier state
    ("^a{2}|b{3}$", None),
    ("^a{1,2}$|^b{1,2}$", None),  # one chain per branch: two atom sets
    ("ab", None),  # unanchored: any characters around it
    ("^a?b?$", None),
]


def _dfa(pattern):
    return minimize(trim(from_ast(pattern_ast(parse_pattern(pattern, "")), max_states=10_000, what="t", where="")))


@pytest.mark.parametrize("pattern,shape", SHAPES, ids=[p for p, _ in SHAPES])
def test_length_shape_against_re(pattern, shape):
    d = _dfa(pattern)
    got = length_shape(d)
    assert (None if got is None else got[1:]) == shape
    if got is None:
        return
    alphabet, lmin, lmax = got
    rx = re.compile(pattern.replace("$", r"\Z"))  # ECMA-262's $: the end of the input only
    for n in range(9):
        for t in map("".join, itertools.product("ab0\n", repeat=n)):
            folded = matches(alphabet, t) and lmin <= len(t) and (lmax is None or len(t) <= lmax)
            assert folded == bool(rx.search(t)), (pattern, t)


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return NativeBackend(llama3_vocab)




SCHEMAS = [
    {"allOf": [{"pattern": "^.{4}$"}, {"pattern": "ab"}, {"pattern": "b."}]},
    {"allOf": [{"pattern": "^[ab]{2,5}$"}, {"pattern": "a"}], "minLength": 3},
    {"allOf": [{"pattern": "^.{3,}$"}, {"pattern": "^a"}], "maxLength": 4},
    {"allOf": [{"pattern": "^.{2}$"}, {"pattern": "^.{3}$"}]},  # no length fits both
    {"allOf": [{"pattern": "^.{1,4}$"}, {"pattern": "^[ab]{2,6}$"}, {"pattern": "b"}]},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[json.dumps(s)[:70] for s in SCHEMAS])
def test_length_patterns_among_others_are_exact(backend, llama3_vocab, schema):
    values = ["".join(p) for n in range(7) for p in itertools.product("ab-", repeat=n)] + [1, None]
    wrong = jsonschema_disagreements(backend, llama3_vocab, schema, values)
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong[:20]}"


def _not_all(*patterns):
    return {"not": {"allOf": [{"pattern": p} for p in patterns]}}


#: MaskBench Handwritten---allany17 (jsonschemabench, MIT), written out: its $defs inlined
ALLANY17 = {
    "type": "string",
    "allOf": [
        {"not": {"anyOf": [_not_all("^.{60}$", "ab1", "b12"), _not_all("^.{60}$", "bc1", "c12"),
                           _not_all("^.{60}$", "ca1", "a12")]}},
        {"not": {"anyOf": [_not_all(r"^[\w]*$", r"\d\d", "[a|b]"), _not_all(r"^[\w]*$", r"\d\d", "[b|c]"),
                           _not_all(r"^[\w]*$", r"\d\d", "[c|a]")]}},
        {"not": {"anyOf": [_not_all(r"^[\w]+", "1.*2", "ac"), _not_all(r"^[\w]+", "1.*2", "a2"),
                           _not_all(r"^[\w]+", "1.*2", "a1")]}},
        {"pattern": "[aA][12].*[zZ]"},
        {"maxLength": 200},
    ],
}


def test_maskbench_allany17_compiles_under_the_default_limits_and_is_exact(backend, llama3_vocab):
    core = "ab12bc12ca12aca2z"
    valid = core + "x" * (60 - len(core))
    values = [valid, valid[:-1], valid + "x", valid.upper(), "Q" + valid[1:]]
    for i in range(0, 60, 3):  # one character changed: a required piece broken, a non-word character
        for c in "z-9 ":
            values.append(valid[:i] + c + valid[i + 1:])
    values += [valid.replace(piece, "xx"[:len(piece)] + "x" * (len(piece) - 2), 1)
               for piece in ("ab1", "bc1", "ca1", "ac", "a2", "z")]
    check = jsonschema.Draft202012Validator({"$schema": S, **ALLANY17})
    assert check.is_valid(valid) and sum(map(check.is_valid, values)) > 1
    wrong = jsonschema_disagreements(backend, llama3_vocab, ALLANY17, values)
    assert not wrong, f"native disagrees with jsonschema on (text, valid): {wrong[:20]}"
