"""``patternProperties`` key regions at their limits: exact, or a typed error, never a silent
narrowing (break-it findings F2-F4 in bench/README.md, "A break-it helper on the new key regions").

* F3: a key region whose product automaton (the keys some patterns match and the others do not)
  reached ``max_product_states`` was dropped, so ``{"xabab": 1}`` was rejected under
  ``{"a{250}1": ..., "^[0-9a-zA-Z_-]{1,260}$": true}``; now ``CompileLimitError("max_product_states")``
  naming ``patternProperties`` (exact with the limit raised).
* F2: reaching that limit cost seconds per region (six large overlapping patterns: 38 s, every
  pattern's byte DFA rebuilt for each of the ``2 n (n - 1)`` ordered comparisons); now each DFA and
  automaton is built once and the first product over the limit stops the compile.
* F4: with ``patternProperties`` present, a value native cannot compile (``additionalProperties``,
  or a pattern's schema when the pattern also matches a listed name) left its keys out; now its
  typed error, as without ``patternProperties``. Likewise the keys matched by no pattern past
  ``max_product_states``, and more than ``max_pattern_regions`` partially overlapping patterns.

Oracle: jsonschema (Draft 2020-12): a compiled grammar accepts exactly the valid instances tried.
"""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.backends.interface import CompileOptions
from structgate.errors import CompileLimitError, UnsupportedFeatureError
from structgate.native.json_schema import schema_to_regex
from structgate.testing import tiny_vocabulary

F3 = {"type": "object", "patternProperties": {"a{250}1": {"type": "string"}, "^[0-9a-zA-Z_-]{1,260}$": True}}


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


def _backend(vocab, **extra):
    return get_backend("native", vocab, additional_properties=True, **({"extra": extra} if extra else {}))


def _check(g, vocab, schema, insts):
    val = jsonschema.Draft202012Validator(schema)
    n_valid = 0
    for inst in insts:
        ok = val.is_valid(inst)
        n_valid += ok
        # (keys in their canonical spelling, as every key the grammar generates: non-ASCII plain)
        assert accepts(g, vocab, json.dumps(inst, ensure_ascii=False)) == ok, inst
    assert n_valid > 0


def test_f3_region_over_the_product_limit_is_a_typed_error(vocab):
    with pytest.raises(CompileLimitError) as e:
        _backend(vocab).compile(Constraint("json_schema", json.dumps(F3)))
    assert e.value.limit_name == "max_product_states" and e.value.limit == 10_000
    msg = str(e.value)
    assert "patternProperties" in msg and "'a{250}1'" in msg and "max_product_states" in msg


def test_f3_exact_with_the_limit_raised(vocab):
    g = _backend(vocab, max_product_states=10**5).compile(Constraint("json_schema", json.dumps(F3)))
    long_a = "a" * 250 + "1"
    _check(g, vocab, F3, [{"xabab": 1}, {"x": None}, {long_a: "s"}, {long_a: 1}, {"b" + long_a: "t"},
                          {"b" + long_a: 2}, {"a" * 300: 1}, {"a-b_c": [1]}, {"": 1}, {"é": 1}])


@pytest.mark.parametrize("n, cap, exact", [(30, 200, False), (30, 10_000, True)])
def test_f3_shape_small(vocab, n, cap, exact):
    """The same shape at a size the default limit holds: exact; under a small limit: typed."""
    schema = {"type": "object", "patternProperties": {f"a{{{n}}}1": {"type": "string"},
                                                      f"^[0-9a-zA-Z_-]{{1,{n + 10}}}$": {"type": "integer"}}}
    be = _backend(vocab, max_product_states=cap)
    if not exact:
        with pytest.raises(CompileLimitError) as e:
            be.compile(Constraint("json_schema", json.dumps(schema)))
        assert e.value.limit_name == "max_product_states"
        return
    g = be.compile(Constraint("json_schema", json.dumps(schema)))
    hit = "a" * n + "1"
    _check(g, vocab, schema, [{k: v} for k in ["xabab", hit, "b" + hit, "a" * (n + 20), hit + "x" * 15, "é", ""]
                              for v in [1, "s", None]])


def test_f2_the_limit_is_reached_fast(vocab, monkeypatch):
    """Six large overlapping patterns: each pattern's byte DFA is built once (6, not 60 builds) and
    the first region product over ``max_product_states`` ends the compile (27 s CPU before, keys left
    out; 4 s now)."""
    from structgate.native.json_schema import _automata, _overlap

    builds = {"dfa": 0, "product_states": 0}
    dfa, product = _overlap._dfa, _automata.product

    def counted_dfa(*a, **k):
        builds["dfa"] += 1
        return dfa(*a, **k)

    def counted_product(*a, **k):
        try:
            out = product(*a, **k)
        except CompileLimitError as e:
            builds["product_states"] += e.given
            raise
        builds["product_states"] += len(out)
        return out

    monkeypatch.setattr(_overlap, "_dfa", counted_dfa)
    from structgate.native.json_schema import _type_object
    monkeypatch.setattr(_type_object, "product", counted_product)
    pp = {"a{250}1": {"type": "string"}, "b{250}2": {"type": "integer"}, "^[0-9a-zA-Z_-]{1,260}$": True,
          "^[a-z]{1,250}$": {"minLength": 2}, "c{200}": {}, "^x[a-z0-9]{1,255}$": {"maxLength": 100}}
    schema = {"type": "object", "patternProperties": pp}
    with pytest.raises(CompileLimitError) as e:
        _backend(vocab).compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.limit_name == "max_product_states"
    assert builds["dfa"] == 6
    assert builds["product_states"] <= 3 * 10_001  # the first region's products, then the stop


def test_f4_pattern_value_that_does_not_compile_is_a_typed_error(vocab):
    """``^a`` also matches the listed ``ab`` (whose ``const`` compiles beside it); ``^a``'s own value
    does not compile: its other keys (``ax``) used to be left out, now its typed error."""
    schema = {"type": "object", "properties": {"ab": {"const": 5}},
              "patternProperties": {"^a": {"type": "integer", "multipleOf": 2.5}}}
    assert jsonschema.Draft202012Validator(schema).is_valid({"ax": 5})
    with pytest.raises(UnsupportedFeatureError) as e:
        _backend(vocab).compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.feature == "multipleOf" and e.value.where.startswith("/patternProperties/^a")


@pytest.mark.parametrize("with_patterns", [False, True])
def test_f4_additional_properties_that_does_not_compile_is_a_typed_error(vocab, with_patterns):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "additionalProperties": {"type": "integer", "multipleOf": 2.5}}
    if with_patterns:
        schema["patternProperties"] = {"^z": {"type": "null"}}
    with pytest.raises(UnsupportedFeatureError) as e:
        _backend(vocab).compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.feature == "multipleOf" and e.value.where == "/additionalProperties/multipleOf"


def test_unmatched_keys_over_the_product_limit_are_a_typed_error(vocab):
    """The keys no pattern matches (the patterns' complement) over ``max_product_states``: typed
    (they used to be left out); under it, exact."""
    schema = {"type": "object", "patternProperties": {"a{40}1": {"type": "string"}},
              "additionalProperties": {"type": "integer"}}
    with pytest.raises(CompileLimitError) as e:
        _backend(vocab, max_product_states=20).compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.limit_name == "max_product_states" and "patternProperties" in str(e.value)
    g = _backend(vocab).compile(Constraint("json_schema", json.dumps(schema)))
    hit = "a" * 40 + "1"
    _check(g, vocab, schema, [{k: v} for k in ["x", hit, "z" + hit, "a" * 45, ""] for v in [1, "s"]])


def test_regex_mode_generates_unmatched_keys(vocab):
    """``schema_to_regex`` used to leave the keys no pattern matches out (their complement "is
    kilobytes"); it now spells them (or raises ``CompileLimitError("max_regex_size")``)."""
    schema = {"type": "object", "patternProperties": {"^x_": {"type": "integer"}},
              "additionalProperties": {"type": "string"}}
    rx = re.compile(schema_to_regex(schema, CompileOptions(whitespace="compact")))
    val = jsonschema.Draft202012Validator(schema)
    for inst in ({"y": "s"}, {"y": 1}, {"x_a": 1}, {"x_a": "s"}, {"x": "s"}, {"x_": 2, "q": "r"}):
        text = json.dumps(inst, separators=(",", ":"))
        assert bool(rx.fullmatch(text)) == val.is_valid(inst), inst
    with pytest.raises(CompileLimitError) as e:
        schema_to_regex(schema, CompileOptions(whitespace="compact", extra={"max_regex_size": 200}))
    assert e.value.limit_name == "max_regex_size"


RXS = {"a": '"a.*"', "b": '".*b"', "ab": '"ab.*"', "a2": '"a.*"', "d": '"[0-9]+"', "n": '"[0-9]{2}"',
       "e": '"(?:a|b)*"', "x": '"x{3,5}"'}


@pytest.mark.parametrize("dense", [True, False])
def test_relations_memo_equals_relation(monkeypatch, dense):
    """:class:`_overlap.Relations` (each DFA built once, each unordered pair walked once, the walk's
    seen pairs in a bitmap or a set) gives :func:`_overlap.relation`'s answer for both orders."""
    from structgate.native.json_schema import _overlap

    if not dense:
        monkeypatch.setattr(_overlap, "_DENSE_PAIRS", 0)
    rel = _overlap.Relations(RXS)
    want = {("a", "b"): "overlap", ("a", "ab"): "superset", ("a", "a2"): "equal", ("a", "d"): "disjoint",
            ("n", "d"): "subset", ("e", "a"): "overlap", ("x", "e"): "disjoint"}
    for (p, q), r in want.items():
        assert rel(p, q) == r == _overlap.relation(RXS[p], RXS[q]), (p, q)
        assert rel(q, p) == _overlap._FLIP[r] == _overlap.relation(RXS[q], RXS[p]), (q, p)
    for p in RXS:
        for q in RXS:
            if p != q:
                assert rel(p, q) == _overlap.relation(RXS[p], RXS[q]), (p, q)
