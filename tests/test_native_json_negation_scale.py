"""``not`` over many values, and the order of a negated combinator's branches (both found by a
break-it helper against jsonschema).

1. Scale. ``{"type": "integer", "not": {"enum": [0, ..., N-1]}}`` folded one value at a time into
   a sorted exclusion list it copied each time: quadratic, 20,000 values took 10 s (compile
   deadline not looked at meanwhile). The same held for ``not enum`` of strings, ``not anyOf`` of
   ``const``/``enum`` branches and ``allOf`` of ``not``\\ s; an ``enum`` filtered by a ``not enum``
   (jsonschema scanned the list per value), and a ``oneOf`` of ``const`` branches (a proof per
   pair: 1,000 branches took 10 s). The timed tests give each compile an explicit
   ``compile_timeout_s`` chosen from measurements on the development machine (2 shared cores),
   so that the old algorithm overruns it more than tenfold and the new one stays more than ten
   times below it; the numbers are in each case's comment. Every large case is then checked for
   soundness: sampled instances (excluded values, kept values, other types) accepted by the
   compiled grammar must be valid for jsonschema (Draft 2020-12), and here, where the negation is
   exact, the valid ones accepted.

2. Order. ``{"type": "integer", "not": {"anyOf": [{"const": 5}, {"minimum": 10}]}}`` compiled, and
   the same with the branches swapped was refused: the first branch wrapped the context in an
   ``allOf``, and the numeric ``const`` then looked for ``type`` at the top level only. For a
   family of negated ``anyOf``/``allOf``/``oneOf`` (and ``allOf`` of ``not``\\ s), every
   permutation of the branches must give the same verdict (compiled, or the same typed refusal)
   and the same accepted sample instances, which must agree with jsonschema.
"""
from __future__ import annotations

import itertools
import json
import re
import time

import jsonschema
import pytest
from _matching import accepts

from structgate import Constraint, get_backend
from structgate.backends.interface import CompileOptions
from structgate.errors import CompileLimitError, StructgateError
from structgate.native.json_schema import schema_to_grammar, schema_to_regex

COMPACT = CompileOptions(whitespace="compact")


def _valid(schema, value) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _text(v) -> str:
    return json.dumps(v, separators=(",", ":"))


def _chunks(xs, k=100):
    return [xs[i:i + k] for i in range(0, len(xs), k)]


_INTS = list(range(30_000))
_STRS = [f"v{i}" for i in range(40_000)]

# (id, schema, CPU-time limit of the compile in s, instances to check). Measured before -> after the fix
# (schema_to_grammar, first compile in a fresh process):
SCALE = [
    # 20,000 values: 9.9 s -> 0.016 s; 30,000 (quadratic): ~22 s -> ~0.04 s
    ("integer not enum", {"type": "integer", "not": {"enum": _INTS}}, 1.0,
     [0, 1, 29_999, 30_000, 30_001, -1, -100, 10**20, 2.5, "0", None]),
    # the anyOf path (enum branches of 100 values): as above, ~22 s -> ~0.045 s
    ("integer not anyOf enums", {"type": "integer", "not": {"anyOf": [{"enum": c} for c in _chunks(_INTS)]}}, 1.0,
     [0, 150, 29_999, 30_000, -1, 7.5]),
    # the allOf-of-nots path (merged into not anyOf): ~22 s -> ~0.04 s
    ("integer allOf nots", {"type": "integer", "allOf": [{"not": {"enum": c}} for c in _chunks(_INTS)]}, 1.0,
     [0, 29_999, 30_000, -5]),
    # strings: 20,000 values 12.2 s -> 0.18 s; 40,000 ~49 s -> 0.33 s (first compile)
    ("string not enum", {"type": "string", "not": {"enum": _STRS}}, 4.0,
     ["v0", "v39999", "v40000", "v", "", "w1", "v01", 1, None]),
    # ~49 s -> 0.04-0.08 s
    ("string not anyOf enums", {"type": "string", "not": {"anyOf": [{"enum": c} for c in _chunks(_STRS)]}}, 4.0,
     ["v7", "v40000", "x"]),
    # an enum minus a not-enum of half of it (the validator's list scan): 20,000 values 32 s;
    # 40,000 ~130 s -> 0.6-0.9 s
    ("enum minus not enum", {"enum": _STRS, "not": {"enum": _STRS[::2]}}, 9.0,
     ["v0", "v1", "v39998", "v39999", "v40001", 1]),
    # a oneOf of 2,000 const branches (a proof per pair): 1,000 branches 10 s; 2,000 ~40 s -> 0.08 s
    ("oneOf consts", {"oneOf": [{"const": f"v{i}"} for i in range(2_000)]}, 2.0,
     ["v0", "v1999", "v2000", 0]),
]


@pytest.mark.timeout(120)  # the hang guard: the quadratic forms take minutes here
@pytest.mark.parametrize("case", SCALE, ids=[c[0] for c in SCALE])
def test_many_values_compile_within_a_small_timeout_and_stay_sound(case, llama3_vocab):
    _, schema, limit, samples = case
    # ``limit`` is this thread's CPU time (a quadratic form takes 10-100x more): wall time on a
    # loaded 2-core machine can be several times the CPU time, so the compile's own wall-clock
    # deadline is set well above it (it still ends a runaway compile with a typed error)
    t = time.thread_time()
    schema_to_grammar(schema, CompileOptions(compile_timeout_s=max(10 * limit, 30.0)))
    assert time.thread_time() - t < limit
    g = get_backend("native", llama3_vocab, compile_timeout_s=60.0).compile(Constraint.json_schema(schema))
    for v in samples:
        assert accepts(g, llama3_vocab, _text(v)) == _valid(schema, v), v


def test_not_anyof_of_many_branches_is_one_flat_allof(llama3_vocab):
    """2,000 ``required`` branches: each folded branch used to wrap the context in one more
    ``allOf`` level, and 1,000 of them reached ``nesting_depth`` (a refusal); now one flat
    ``allOf``, exact (objects open: ``additional_properties=True``)."""
    n = 2_000
    schema = {"type": "object", "not": {"anyOf": [{"required": [f"k{i}"]} for i in range(n)]}}
    g = get_backend("native", llama3_vocab, additional_properties=True).compile(Constraint.json_schema(schema))
    for v in ({}, {"k0": 1}, {"k1999": 1}, {"x": 1}, {"k2000": 1}, {"x": 1, "k5": 2}):
        assert accepts(g, llama3_vocab, _text(v)) == _valid(schema, v), v


@pytest.mark.timeout(60)  # the hang guard: without the deadline check the pairs take minutes
def test_deadline_is_checked_inside_the_oneof_pair_proofs():
    """4,000 ``oneOf`` branches that no value list tells apart: 8 million pair proofs. With a 1 s
    ``compile_timeout_s`` the compile fails with the typed limit (it ran past it for minutes: the
    deadline was looked at per subschema only)."""
    schema = {"oneOf": [{"type": "string", "minLength": i} for i in range(4_000)]}
    t = time.monotonic()
    with pytest.raises(CompileLimitError) as e:
        schema_to_grammar(schema, CompileOptions(compile_timeout_s=1.0))
    assert e.value.limit_name == "compile_timeout_s"
    assert time.monotonic() - t < 10


def test_not_enum_of_numbers_sound_where_numbers_are_not_integers_only():
    """A number or container value is refused (typed) where the context allows non-integer numbers
    or that container; it excludes nothing where the context allows no value of its type."""
    from structgate.errors import UnsupportedFeatureError

    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_regex({"type": "number", "not": {"enum": [1, 2]}})
    assert e.value.feature == "not"
    schema = {"type": "string", "not": {"enum": ["a", 1, [1], {"a": 1}, 2.5]}}
    rx = re.compile(schema_to_regex(schema, COMPACT))
    for v in ("a", "b", 1, [1], {"a": 1}):
        assert (rx.fullmatch(_text(v)) is not None) == _valid(schema, v), v


# -- order of the branches -------------------------------------------------------------------------
SAMPLES = [None, True, False, -3, -1, 0, 1, 2, 3, 5, 7, 8, 9, 10, 11, 15, 0.5, 5.5, 10.5,
           "", "a", "b", "ab", "abc", "abcd", [], [1], {}, {"a": 1}]

# (id, context, combinator, branches, must compile)
ORDER = [
    ("reported", {"type": "integer"}, "anyOf", [{"const": 5}, {"minimum": 10}], True),
    ("no type: refused", {}, "anyOf", [{"const": 5}, {"minimum": 10}], False),
    ("type keyword in a branch", {"type": "integer"}, "anyOf",
     [{"enum": [1, 2]}, {"minimum": 10}, {"type": "integer", "maximum": -2}], True),
    ("two types", {"type": ["integer", "string"]}, "anyOf", [{"const": 5}, {"type": "string"}, {"maximum": 0}], True),
    ("numbers excluded", {"type": ["number", "string"]}, "anyOf",
     [{"const": 5}, {"type": "number"}, {"maxLength": 1}], True),
    ("double negation narrows", {"type": ["number", "string"]}, "anyOf",
     [{"const": 5.5}, {"not": {"type": "string"}}], True),
    ("null, strings, lengths", {"type": ["integer", "null", "string"]}, "anyOf",
     [{"const": None}, {"enum": ["a", "b"]}, {"minLength": 3}, {"minimum": 8}], True),
    ("nested anyOf", {"type": "integer"}, "anyOf",
     [{"anyOf": [{"const": 1}, {"const": 2}]}, {"minimum": 10}, {"maximum": -1}], True),
    ("not allOf", {"type": "integer"}, "allOf", [{"minimum": 0}, {"maximum": 10}, {"not": {"const": 5}}], True),
    ("not oneOf", {"type": "integer"}, "oneOf", [{"minimum": 0}, {"maximum": 10}, {"const": 5}], True),
    ("not oneOf, two types", {"type": ["integer", "string"]}, "oneOf",
     [{"type": "string"}, {"const": 3}, {"minimum": 9}], True),
    ("allOf of nots", {"type": "integer"}, "allOf-of-not", [{"const": 5}, {"minimum": 10}, {"maximum": -1}], True),
]


def _schema(ctx, comb, branches):
    if comb == "allOf-of-not":
        return {**ctx, "allOf": [{"not": b} for b in branches]}
    return {**ctx, "not": {comb: list(branches)}}


def _verdict(schema):
    """("ok", accepted samples) or ("refused", error class, feature)."""
    try:
        rx = re.compile(schema_to_regex(schema, COMPACT))
    except StructgateError as e:
        return ("refused", type(e).__name__, getattr(e, "feature", getattr(e, "limit_name", None)))
    return ("ok", frozenset(i for i, v in enumerate(SAMPLES) if rx.fullmatch(_text(v))))


@pytest.mark.parametrize("case", ORDER, ids=[c[0] for c in ORDER])
def test_branch_order_changes_neither_verdict_nor_language(case):
    _, ctx, comb, branches, must = case
    verdicts = {}
    for perm in itertools.permutations(branches):
        schema = _schema(ctx, comb, perm)
        verdicts[json.dumps(perm)] = v = _verdict(schema)
        if v[0] == "ok":
            for i, x in enumerate(SAMPLES):  # sound, and exact on these samples
                assert (i in v[1]) == _valid(schema, x), (perm, x)
    assert len(set(verdicts.values())) == 1, verdicts
    assert (next(iter(verdicts.values()))[0] == "ok") == must, verdicts


def test_hashed_value_checks_give_jsonschemas_verdicts():
    """The compiler's validator checks long ``enum`` lists and ``anyOf`` of ``const`` branches
    through a key set: the verdicts must be jsonschema's own (``true`` is not ``1``, ``1`` is
    ``1.0``, arrays and objects by members). A guard for the linear checks, not a regression test:
    the quadratic scan gave the same verdicts."""
    from structgate.native.json_schema.compiler import ENUM_SET_MIN, _validator_class

    vals = [True, 1, 0.5, "1", None, [1], [True], {"a": 1}, {"a": [0.0]}, 2**53 + 1, -0.0, "", [], {}]
    vals += [f"pad{i}" for i in range(ENUM_SET_MIN)]
    probes = [False, True, 1, 1.0, 0, 0.0, -0.0, 0.5, "1", "True", None, [1.0], [1], [True], [False], {"a": 1.0},
              {"a": True}, {"a": [0]}, {"a": [False]}, float(2**53), 2**53, 2**53 + 1, [], {}, "", "pad3", "pad"]
    for schema in ({"enum": vals}, {"anyOf": [{"const": v} for v in vals]},
                   {"not": {"enum": vals}}, {"anyOf": [{"enum": vals[:8]}, *({"const": v} for v in vals[8:])]}):
        ours, ref = _validator_class(2020)(schema), jsonschema.Draft202012Validator(schema)
        for x in probes:
            assert ours.is_valid(x) == ref.is_valid(x), (schema, x)
