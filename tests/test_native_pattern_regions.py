"""``patternProperties`` whose patterns overlap partially, or where one strictly contains another:
every key gets the ``allOf`` of exactly the patterns it matches.

Before: a pattern that overlapped another partially (``^a`` and ``b$``: ``"ab"`` matches both,
``"ax"`` only the first) or strictly contained one (``^a`` ⊃ ``^ab``) had its keys left out
("sound: extra keys are optional"), so valid instances with those keys were rejected (a silent
narrowing; 6-27 of 63 one-key instances per schema below). Now those keys are split into regions:
for each set ``T`` of such patterns, the keys every pattern of ``T`` matches and no other does, with
the ``allOf`` of ``T``'s schemas (``_TypeObject._pattern_regions``).

Oracle: jsonschema (Draft 2020-12) on every instance, listed properties first (declared order).
"""
from __future__ import annotations

import itertools
import json
import random

import jsonschema
import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.testing import tiny_vocabulary

PATTERNS = [
    {"^a": {"type": "integer"}, "b$": {"minimum": 5}},  # partial overlap
    {"^a": {"type": "string"}, "^ab": {"maxLength": 3}},  # strict containment
    {"a": {"type": "integer"}, "b": {"type": "string"}},  # overlap with an unsatisfiable region
    {"^a": {"type": "integer"}, "b$": {"minimum": 5}, "^.b": {"maximum": 9}},  # three, every region
    {"^a": {"type": "integer"}, "^b": {"type": "string"}, "^[ab]": {"minimum": 2, "minLength": 2}},
]
KEYS = ["a", "ab", "b", "xb", "abb", "ax", "x", "bb", "aab", "ba", ""]
VALUES = [1, 7, 12, "s", "long", None, 2.5, [1]]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab, additional_properties=True)


@pytest.mark.parametrize("props", [{}, {"ab": {"type": "number"}}, {"x": {"const": 1}}])
@pytest.mark.parametrize("pp", PATTERNS)
def test_every_key_gets_the_patterns_it_matches(native, vocab, pp, props):
    schema = {"type": "object", "properties": props, "patternProperties": pp}
    g = native.compile(Constraint("json_schema", json.dumps(schema)))
    val = jsonschema.Draft202012Validator(schema)
    n_valid = 0
    for k, v in itertools.product(KEYS, VALUES):
        inst = {k: v}
        ok = val.is_valid(inst)
        n_valid += ok
        assert accepts(g, vocab, json.dumps(inst)) == ok, inst
    rnd = random.Random(5)
    for _ in range(60):  # several keys, the listed one first
        keys = rnd.sample(KEYS, 2)
        inst = {k: rnd.choice(VALUES) for k in ([*props] if rnd.random() < 0.5 else []) + keys}
        assert accepts(g, vocab, json.dumps(inst)) == val.is_valid(inst), inst
    assert n_valid > 0


def test_more_overlapping_patterns_than_regions_is_a_typed_error(native, vocab):
    """Past ``max_pattern_regions`` (6) partially overlapping patterns (``2**n - 1`` key regions)
    the schema is refused: ``CompileLimitError("max_pattern_regions")`` (their keys used to be
    left out silently: ``{"ab": 1}`` is valid and was rejected). Raising the limit makes it exact."""
    from structgate.errors import CompileLimitError

    pp = {f"{c}": {"type": "integer", "minimum": i} for i, c in enumerate("abcdefg")}
    schema = {"type": "object", "patternProperties": pp}
    with pytest.raises(CompileLimitError) as e:
        native.compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.limit_name == "max_pattern_regions" and (e.value.given, e.value.limit) == (7, 6)
    assert "max_pattern_regions" in str(e.value) and "patternProperties" in str(e.value)
    wide = get_backend("native", vocab, additional_properties=True, extra={"max_pattern_regions": 7})
    g = wide.compile(Constraint("json_schema", json.dumps(schema)))
    val = jsonschema.Draft202012Validator(schema)
    n_valid = 0
    for k in ["ab", "abc", "gf", "x", "a", "abcdefg", "gx"]:
        for v in [0, 3, 6, 9, "s"]:
            inst = {k: v}
            n_valid += val.is_valid(inst)
            assert accepts(g, vocab, json.dumps(inst)) == val.is_valid(inst), inst
    assert n_valid > 5


def test_undecidable_overlap_of_a_search_pattern_is_a_typed_error(native, vocab, monkeypatch):
    """``[^b]{1,800}$`` (a search: any key ending in up to 800 non-b characters) beside ``^a``:
    deciding how their keys overlap determinises the search pattern into states of hundreds of
    NFA states each; it ran for 36 s into a raw ``MemoryError`` at 5.7 GB (found by a break-it
    helper). Each DFA now has ``_overlap.RELATION_TIMEOUT_S`` to build (lowered here to keep the
    test short): past it the overlap is undecided, a typed ``UnsupportedFeatureError`` naming
    ``patternProperties``. A smaller count still compiles, exactly."""
    from structgate.errors import UnsupportedFeatureError
    from structgate.native.json_schema import _overlap

    monkeypatch.setattr(_overlap, "RELATION_TIMEOUT_S", 0.5)
    schema = {"type": "object", "patternProperties": {"[^b]{1,800}$": {"minimum": 1}, "^a": {}}}
    with pytest.raises(UnsupportedFeatureError) as e:
        native.compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.feature == "patternProperties"
    monkeypatch.setattr(_overlap, "RELATION_TIMEOUT_S", 10.0)
    small = {"type": "object", "patternProperties": {"[^b]{1,20}$": {"minimum": 1}, "^a": {"type": "integer"}}}
    g = native.compile(Constraint("json_schema", json.dumps(small)))
    val = jsonschema.Draft202012Validator(small)
    for k in ["a", "ab", "xb", "x" * 25, "a" + "x" * 25, "b"]:
        for v in [0, 3, "s", 2.5]:
            inst = {k: v}
            assert accepts(g, vocab, json.dumps(inst)) == val.is_valid(inst), inst


@pytest.mark.parametrize("outer, ptr", [({}, "/patternProperties"),
                                        ({"x": None}, "/properties/x/patternProperties")])
def test_the_region_limit_names_its_pointer(native, outer, ptr):
    """``CompileLimitError("max_pattern_regions")`` carries the JSON pointer of the
    ``patternProperties`` keyword (``.where``, and in the message), as the product-state limits
    do (a break-it finding: it named the object only in prose, ``at the root``)."""
    import pickle

    from structgate.errors import CompileLimitError, nested_error

    pp = {f"{c}": {"type": "integer"} for c in "abcdefg"}
    schema = {"type": "object", "patternProperties": pp}
    if outer:
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    with pytest.raises(CompileLimitError) as e:
        native.compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.limit_name == "max_pattern_regions" and e.value.where == ptr, e.value.where
    assert f"at {ptr}:" in str(e.value), str(e.value)
    assert pickle.loads(pickle.dumps(e.value)).where == ptr
    n = nested_error(e.value, "structural_tag /format/json_schema")
    assert n.where == "structural_tag /format/json_schema" + ptr
    assert str(n).startswith("structural_tag /format/json_schema: ") and ptr in str(n)


def test_product_limits_name_their_pointer(native):
    """The product-state limit carries the pointer of its keyword as ``.where`` too."""
    from structgate.errors import CompileLimitError

    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "a{250}1",
                                                      "maxLength": 10 ** 6}}, "required": ["s"]}
    with pytest.raises(CompileLimitError) as e:
        get_backend("native", tiny_vocabulary(), extra={"max_product_states": 50, "automaton_inline_max_chars": 0}
                    ).compile(Constraint("json_schema", json.dumps(schema)))
    assert e.value.where and e.value.where.startswith("/properties/s"), (e.value.where, str(e.value))
