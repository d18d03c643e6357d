"""Integer ``multipleOf`` / ``not multipleOf`` whose moduli's least common multiple is large: the
remainder automaton generated lazily (:class:`structgate.native.json_schema._automata.ResidueProduct`).

``allOf`` members' integer ``multipleOf``s merge to their lcm, and ``not {multipleOf}`` beside
them multiplies the remainder automata: the MaskBench development subset's Handwritten
``allany*``/``allone*`` schemas reach moduli of 1,155-24,024, over the former ``max_multiple_of``
(1,000), and were ``CompileLimitError("max_multiple_of")``. Above ``eager_residue_max`` (1,000)
the product (range state, value mod lcm) is now generated when the matcher reaches a state, with
an exact liveness table; a range bounded on both sides with few candidates is written as its
values. ``max_multiple_of`` (100,000) bounds the lcm, a typed error past it.

Oracles: ``jsonschema`` (Draft 2020-12, exact integer division) and a Python predicate on every
integer of a window, written as a JSON integer literal and walked through the native engine.
"""
from __future__ import annotations

import math
import random
import re

import jsonschema
import pytest

from _matching import accepts, walk_rows
from _residue import integer_schema
from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError, InvalidConstraintError
from structgate.native.json_schema import schema_to_regex

#: MaskBench development subset, Handwritten split (guidance-ai/jsonschemabench, MIT licence):
#: schemas that were max_multiple_of limit errors
HANDWRITTEN = {
    "allany2": {"type": "number", "allOf": [
        {"minimum": 1}, {"$ref": "#/definitions/any1"}, {"$ref": "#/definitions/any2"}, {"$ref": "#/definitions/any3"}],
        "definitions": {
            "any1": {"anyOf": [{"multipleOf": 3}, {"multipleOf": 5}, {"multipleOf": 15}]},
            "any2": {"anyOf": [{"allOf": [{"not": {"multipleOf": 5}}, {"not": {"multipleOf": 3}}]}, {"multipleOf": 8}]},
            "any3": {"anyOf": [{"not": {"multipleOf": 8}}, {"multipleOf": 11}]}}},
    "allany6": {"type": "number", "allOf": [
        {"minimum": -4000}, {"maximum": -3000}, {"minimum": -10000}, {"maximum": -2000},
        {"$ref": "#/definitions/any1"}, {"$ref": "#/definitions/any2"}, {"$ref": "#/definitions/any3"},
        {"not": {"multipleOf": 8}}],
        "definitions": {
            "any1": {"anyOf": [{"multipleOf": 33}, {"multipleOf": 12}, {"multipleOf": 77}]},
            "any2": {"anyOf": [{"allOf": [{"not": {"multipleOf": 6}}, {"not": {"multipleOf": 7}}]}, {"multipleOf": 35}]},
            "any3": {"anyOf": [{"not": {"multipleOf": 11}}, {"multipleOf": 7}]}}},
    "allany8": {"type": "number", "allOf": [
        {"$ref": "#/definitions/any1"}, {"$ref": "#/definitions/any2"}, {"$ref": "#/definitions/any3"},
        {"not": {"multipleOf": 8}}],
        "definitions": {
            "any1": {"oneOf": [{"multipleOf": 33}, {"multipleOf": 12}, {"multipleOf": 77}]},
            "any2": {"oneOf": [{"allOf": [{"not": {"multipleOf": 6}}, {"not": {"multipleOf": 7}}]}, {"multipleOf": 44}]},
            "any3": {"oneOf": [{"not": {"multipleOf": 11}}, {"multipleOf": 13}]}}},
    "allany11": {"type": "number", "allOf": [
        {"$ref": "#/definitions/any1"}, {"$ref": "#/definitions/any2"}, {"$ref": "#/definitions/any3"},
        {"exclusiveMinimum": -300}, {"exclusiveMaximum": 0}],
        "definitions": {
            "any1": {"anyOf": [{"multipleOf": 33}, {"multipleOf": 12}, {"multipleOf": 4}, {"multipleOf": 16},
                               {"multipleOf": 77}]},
            "any2": {"anyOf": [{"allOf": [{"not": {"multipleOf": 6}}, {"not": {"multipleOf": 7}}]},
                               {"multipleOf": 25}, {"multipleOf": 42}, {"multipleOf": 51}]},
            "any3": {"anyOf": [{"allOf": [{"not": {"multipleOf": 3}}, {"not": {"multipleOf": 2}}]},
                               {"multipleOf": 101}, {"multipleOf": 102}, {"multipleOf": 103}]}}},
    "allone4": {"type": "number", "allOf": [
        {"minimum": 1}, {"$ref": "#/definitions/any1"}, {"$ref": "#/definitions/any2"}, {"$ref": "#/definitions/any3"},
        {"not": {"multipleOf": 8}}],
        "definitions": {
            "any1": {"oneOf": [{"multipleOf": 3}, {"multipleOf": 5}, {"multipleOf": 7}]},
            "any2": {"oneOf": [{"allOf": [{"not": {"multipleOf": 5}}, {"not": {"multipleOf": 7}}]}, {"multipleOf": 24}]},
            "any3": {"oneOf": [{"not": {"multipleOf": 8}}, {"multipleOf": 11}]}}},
}


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab)


def _window(check, rnd: random.Random) -> list[int]:
    """Integers to try: -150..150, a few large ones, and valid ones found further out (their
    neighbours too), so both verdicts occur where the schema has valid values."""
    xs = list(range(-150, 151)) + [rnd.randrange(-10 ** 12, 10 ** 12) for _ in range(20)]
    found = [x for x in range(-30000, 30000, 3) if check(x)][:8]
    return xs + found + [x + 1 for x in found] + [x * 11 for x in found]


@pytest.mark.parametrize("name", sorted(HANDWRITTEN))
def test_handwritten_schemas_compile_and_agree_with_jsonschema(native, llama3_vocab, name):
    schema = HANDWRITTEN[name]
    compiled = native.compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    xs = _window(v.is_valid, random.Random(name))
    wrong = [(x, v.is_valid(x)) for x in xs if accepts(compiled, llama3_vocab, str(x)) != v.is_valid(x)]
    assert not wrong, f"{name}: native disagrees with jsonschema on (value, valid): {wrong[:10]}"
    assert any(v.is_valid(x) for x in xs), name


#: (multipleOf or None, not-multipleOf moduli, minimum, maximum): lcm above eager_residue_max=50
CASES = [
    (None, [97, 89], None, None),            # only exclusions, unbounded
    (101, [3], None, None),                  # a multiple of 101 but not of 3
    (53, [2, 5], -10 ** 6, None),            # bounded below only
    (None, [61, 7], None, 9000),             # bounded above only
    (67, [], 10 ** 5, 10 ** 8),              # bounded on both sides, too many candidates to list
    (59, [4], -10 ** 7, -100),               # negative range
    (71, [], 0, 0),                          # the literal 0 (a multiple of every modulus)
    (1592, [], None, None),                  # unbounded, 0 allowed: "-0" refused as the eager form does
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_lazy_and_eager_remainder_automata_agree_with_arithmetic(llama3_vocab, case):
    mo, negs, lo, hi = case
    schema = integer_schema(mo, negs, lo, hi)

    def want(x: int) -> bool:
        return ((mo is None or x % mo == 0) and all(x % m for m in negs)
                and (lo is None or x >= lo) and (hi is None or x <= hi))

    lazy = get_backend("native", llama3_vocab, eager_residue_max=50).compile(Constraint.json_schema(schema))
    eager = get_backend("native", llama3_vocab, eager_residue_max=10 ** 6).compile(Constraint.json_schema(schema))
    rnd = random.Random(str(case))
    step = math.lcm(mo or 1, *negs)
    centres = [0] + [b for b in (lo, hi) if b is not None] + [rnd.randrange(-10 ** 9, 10 ** 9) // step * step]
    xs = sorted({c + d for c in centres for d in range(-40, 41)} | {c + d * step for c in centres for d in (-1, 1, 2)})
    for x in xs:
        w = want(x)
        assert accepts(lazy, llama3_vocab, str(x)) == w, (schema, x, w, "lazy")
        assert accepts(eager, llama3_vocab, str(x)) == w, (schema, x, w, "eager")
    # not other spellings of an integer
    for text in ("-0", "007", "+" + str(mo or 7), str(mo or 7) + ".0"):
        assert not accepts(lazy, llama3_vocab, text), text
        assert not accepts(eager, llama3_vocab, text), text


def test_lazy_masks_say_what_advance_does(llama3_vocab):
    """At every step of a walk the lazily generated states' mask bit of the next token is what its
    advance does (``walk_rows`` asserts it), and a token the mask refuses is refused."""
    schema = {"type": "integer", "multipleOf": 1009, "not": {"multipleOf": 2}}
    compiled = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    for x in (1009, 1009 * 123457, -1009 * 99, 1009 * 2, 1010):
        ok, _rows = walk_rows(compiled, llama3_vocab, str(x))
        assert ok == (x % 1009 == 0 and x % 2 == 1), x


def test_an_empty_combination_is_the_same_error_lazy_or_eager(llama3_vocab):
    """1001 = 7 * 11 * 13: no multiple of 1001 avoids 7, whichever construction finds it."""
    schema = {"type": "integer", "multipleOf": 1001, "not": {"multipleOf": 7}}
    errors = []
    for eager_max in (50, 10 ** 6):
        with pytest.raises(InvalidConstraintError) as e:
            get_backend("native", llama3_vocab, eager_residue_max=eager_max).compile(Constraint.json_schema(schema))
        errors.append(type(e.value))
    assert errors[0] is errors[1]


def test_the_lcm_limit_is_typed_and_configurable(llama3_vocab):
    """``max_multiple_of`` bounds the lcm (a typed error naming the pointer, given and limit), and
    the liveness table (range states × lcm) is bounded by ``max_product_states``."""
    schema = {"properties": {"n": {"type": "integer", "allOf": [{"multipleOf": 9973}, {"multipleOf": 9967}]}}}
    with pytest.raises(CompileLimitError) as e:
        get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    assert e.value.limit_name == "max_multiple_of" and "/properties/n" in str(e.value)
    assert e.value.given == 9973 * 9967 and e.value.limit == 25_000
    both = {"type": "integer", "allOf": [{"multipleOf": 37}, {"multipleOf": 41}]}  # lcm 1,517
    with pytest.raises(CompileLimitError) as e:
        get_backend("native", llama3_vocab, max_multiple_of=1000).compile(Constraint.json_schema(both))
    assert (e.value.limit_name, e.value.given, e.value.limit) == ("max_multiple_of", 1517, 1000)
    compiled = get_backend("native", llama3_vocab).compile(Constraint.json_schema(both))
    for x in (0, 1517, -1517 * 7, 1517 * 10 ** 9, 1516, 37 * 40, 41 * 36, 1518):
        assert accepts(compiled, llama3_vocab, str(x)) == (x % 1517 == 0), x
    with pytest.raises(CompileLimitError) as e:
        get_backend("native", llama3_vocab, max_product_states=10).compile(Constraint.json_schema(
            {"type": "integer", "allOf": [{"multipleOf": 1009}, {"not": {"multipleOf": 2}}]}))
    assert e.value.limit_name == "max_product_states"


def test_regex_mode_refuses_a_large_modulus_quickly():
    """Regex mode has no lazily generated rules and writes the product as one regex (minutes for
    an lcm in the thousands): a modulus above ``eager_residue_max`` is a typed refusal there
    before anything is built (a break-it finding: ``multipleOf 9973, not multipleOf 7`` ran 185 s
    before its ``max_regex_size`` error; ``997, not 7`` took 15 s before this round); a bounded
    range with few candidates is still written as its values."""
    with pytest.raises(CompileLimitError) as e:
        schema_to_regex({"type": "integer", "multipleOf": 997, "not": {"multipleOf": 7}})
    assert (e.value.limit_name, e.value.given, e.value.limit) == ("max_multiple_of", 997 * 7, 1000)
    rx = schema_to_regex({"type": "integer", "multipleOf": 997, "not": {"multipleOf": 7}, "minimum": 0,
                          "maximum": 10 ** 5})
    want = {str(x) for x in range(0, 10 ** 5 + 1, 997) if x % 7}
    assert {str(x) for x in range(-2000, 10 ** 5 + 2000) if re.fullmatch(rx, str(x))} == want


def test_liveness_cells_have_one_budget_per_compile(llama3_vocab):
    """A range split around excluded values makes one lazy product per piece: their liveness
    tables share one budget (``400 x max_product_states`` cells), a typed error past it whose
    ``given`` is the ``max_product_states`` that would be needed (a break-it finding: 300 pieces
    reached 620 MB before the compile deadline)."""
    schema = {"type": "integer", "not": {"anyOf": [{"multipleOf": 9973}, {"enum": [10 ** 7 * k for k in range(1, 300)]}]}}
    with pytest.raises(CompileLimitError) as e:
        get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    assert e.value.limit_name == "max_product_states" and e.value.given > e.value.limit == 10_000
    assert "max_product_states" in str(e.value) and str(e.value.given) in str(e.value)
    few = {"type": "integer", "not": {"anyOf": [{"multipleOf": 9973}, {"enum": [10 ** 7, 2 * 10 ** 7]}]}}
    compiled = get_backend("native", llama3_vocab).compile(Constraint.json_schema(few))
    for x in (10 ** 7, 2 * 10 ** 7, 9973, 9974, 10 ** 7 + 1, 3 * 10 ** 7, -9973 * 5, 0, 1):
        assert accepts(compiled, llama3_vocab, str(x)) == (x % 9973 != 0 and x not in (10 ** 7, 2 * 10 ** 7)), x


def test_not_multiple_of_beside_excluded_integers(native, llama3_vocab):
    """``not multipleOf`` beside ``not enum`` of integers (MaskBench Handwritten ``num1``, was
    ``UnsupportedFeatureError("not")``): the integer range is split around the excluded values
    first, each piece a residue product (or its few values)."""
    schema = {"type": "integer", "allOf": [{"multipleOf": 5}, {"multipleOf": 3}, {"multipleOf": 2}, {"multipleOf": 7},
                                           {"not": {"enum": [10500, 10920, 11760]}}],
              "multipleOf": 4, "not": {"allOf": [{"multipleOf": 9}, {"multipleOf": 5}, {"multipleOf": 3},
                                                 {"multipleOf": 2}, {"multipleOf": 7}]},
              "minimum": 10000, "exclusiveMinimum": 9999}
    compiled = native.compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    xs = [*range(9990, 12700, 7), *(420 * k for k in range(-3, 80)), 10500, 10920, 11760, 10 ** 15 * 420]
    wrong = [(x, v.is_valid(x)) for x in xs if accepts(compiled, llama3_vocab, str(x)) != v.is_valid(x)]
    assert not wrong, wrong[:10]
    assert sum(v.is_valid(x) for x in xs) > 20
