"""Exact keywords through code-point automata (structgate.native.json_schema._automata).

``pattern`` with ``minLength``/``maxLength`` (product with a counter), integer ``multipleOf``
(a remainder automaton ∩ the range). Oracles: ``jsonschema`` (Draft 2020-12) on every string /
integer of a brute-force set, Python ``re`` on :func:`schema_to_regex`, and the Earley simulator
of ``test_json_schema_grammar`` on :func:`schema_to_grammar` (both emission paths: one inline
regex, and right-linear rules forced by ``automaton_inline_max_chars=0``).
"""
from __future__ import annotations

import itertools
import json
import re

import jsonschema
import pytest

from structgate.backends.interface import CompileOptions
from structgate.errors import CompileLimitError, UnsupportedFeatureError
from structgate.native.json_schema import schema_to_grammar, schema_to_regex
from structgate.native.json_schema._automata import (from_ast, length_dfa, matches, minimize, product,
                                                     remainder_dfa, trim)
from structgate.native.regex.parser import parse_regex
from test_json_schema_grammar import Sim

COMPACT = CompileOptions(whitespace="compact")
RULES = CompileOptions(whitespace="compact", extra={"automaton_inline_max_chars": 0})


def valid(schema, value) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def strings(alphabet: str, n: int):
    for k in range(n + 1):
        for t in itertools.product(alphabet, repeat=k):
            yield "".join(t)


def spellings(s: str) -> list[str]:
    """JSON texts of ``s``: plain UTF-8, ASCII-escaped, and with every character as ``\\uXXXX``."""
    out = [json.dumps(s, ensure_ascii=False), json.dumps(s)]
    out.append('"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in s) + '"')
    return list(dict.fromkeys(out))


def check_exact(schema, texts_values, *, sim_every: int = 1):
    """Regex and grammar (inline and as rules) accept a JSON text iff jsonschema says valid."""
    rx = re.compile(schema_to_regex(schema, COMPACT))
    sims = []
    for opt in (COMPACT, RULES):
        g = schema_to_grammar(schema, opt)
        g.check()
        sims.append(Sim(g))
    for i, (text, value) in enumerate(texts_values):
        want = valid(schema, value)
        assert (rx.fullmatch(text) is not None) == want, (schema, text, want)
        if i % sim_every == 0:
            for sim in sims:
                assert sim(text) == want, (schema, text, want)


# -- the automata themselves --------------------------------------------------------------------------
def test_product_with_counter_brute_force():
    d = from_ast(parse_regex("(?:ab|a)+c?"), max_states=100, what="t", where="")
    p = minimize(trim(product(d, length_dfa(2, 4), max_states=100, what="t", where="")))
    for s in strings("abc", 6):
        assert matches(p, s) == (re.fullmatch("(?:ab|a)+c?", s) is not None and 2 <= len(s) <= 4), s


def test_remainder_automaton_brute_force():
    for m in (2, 3, 7, 12):
        d = remainder_dfa(m)
        for x in range(-500, 501):
            assert matches(d, str(x)) == (x % m == 0), (m, x)
        assert not matches(d, "-0") and not matches(d, "01") and not matches(d, "") and not matches(d, "-")


def test_limits_are_typed():
    with pytest.raises(CompileLimitError) as e:
        from_ast(parse_regex("[ab]*a[ab]{12}"), max_states=100, what="pattern", where="/p")
    assert e.value.limit_name == "max_product_states" and "/p" in str(e.value)


# -- pattern with a length bound ------------------------------------------------------------------------
PATTERN_CASES = [
    ("[0-9a-f]+", 2, 4, "a1g-"),           # unanchored: the length counts the whole value
    ("^[a-z]+\\.[a-z]+$", 0, 5, "ab."),
    ("^(ab|c)*$", 1, 5, "abc"),
    ("x", 3, 3, "xy\u00e9"),
    ("^\\S+$", 2, None, "a \u00e9"),       # no maximum: the counter saturates
    ("^([\\w-]|[\\w-][\\w/-]*[\\w-])$", 1, 4, "a-/"),
    ("^$|^a\\s+b$", 1, 5, "a b"),
    ("\u00e9.", 2, 3, "\u00e9a\n"),
]


@pytest.mark.parametrize("pattern,lmin,lmax,alphabet", PATTERN_CASES)
def test_pattern_with_length_is_exact(pattern, lmin, lmax, alphabet):
    schema = {"type": "string", "pattern": pattern, "minLength": lmin}
    if lmax is not None:
        schema["maxLength"] = lmax
    n = (lmax if lmax is not None else lmin + 2) + 1
    pairs = [(t, s) for s in strings(alphabet, n) for t in spellings(s)]
    check_exact(schema, pairs, sim_every=3)


def test_pattern_with_length_unsatisfiable_and_typed_limit():
    with pytest.raises(Exception) as e:
        schema_to_grammar({"type": "string", "pattern": "^a+$", "maxLength": 3, "minLength": 5}).check()
    assert type(e.value).__name__ == "InvalidConstraintError"
    # regex mode builds the product (bounded); grammar mode generates it lazily (exact, any bound)
    s = {"type": "object", "properties": {"q": {"type": "string", "minLength": 1, "maxLength": 5000,
                                                "pattern": "^(?:\\S+\\s+){0,99}\\S+$"}}}
    with pytest.raises(CompileLimitError) as e:
        schema_to_regex(s)
    assert e.value.limit_name == "max_product_states" and "/properties/q/pattern" in str(e.value)
    sim = Sim(schema_to_grammar({"type": "string", "pattern": "^a(?:b|cd)*$", "minLength": 3,
                                 "maxLength": 5000}).check())
    assert sim('"ab"') is False and sim('"abb"') and sim('"acd"') and not sim('"acdc"')


def test_pattern_with_length_maskbench_shapes_compile():
    # MaskBench Github_easy---o10013 (unanchored hex, length 12) and ---o63934 (file name, <= 1024)
    g = schema_to_grammar({"type": "string", "pattern": "[0-9a-fA-F]+", "minLength": 12, "maxLength": 12})
    sim = Sim(g.check())
    assert sim('"0123456789ab"') and sim('"zzzzzzzzzzza"') and not sim('"zzzzzzzzzzzz"') and not sim('"0123"')
    s = {"type": "string", "pattern": "^[\\w /-]+\\.[0-9a-zA-Z]+$", "minLength": 1, "maxLength": 1024}
    # ~3,000 product states: generated lazily, no rule limit (regex mode: too large a text)
    with pytest.raises(CompileLimitError) as e:
        schema_to_regex(s)
    assert "/pattern" in str(e.value)
    sim = Sim(schema_to_grammar(s).check())
    for v in ["a.b", "dir/file name.mp4", "x" * 1020 + ".mp4", "x" * 1021 + ".mp4", "a.", ".b"]:
        assert sim(json.dumps(v)) == valid(s, v), v
    s["maxLength"] = 60
    sim = Sim(schema_to_grammar(s).check())
    for v in ["a.b", "dir/file name.mp4", "x" * 50 + ".mp4", "x" * 55 + ".mp4", "x" * 56 + ".mp4", "a.", ".b"]:
        assert sim(json.dumps(v)) == valid(s, v), v


# -- integer multipleOf -----------------------------------------------------------------------------
MULT_CASES = [
    {"type": "integer", "multipleOf": 3},
    {"type": "integer", "multipleOf": 7, "minimum": -60, "maximum": 100},
    {"type": "integer", "multipleOf": 4, "exclusiveMinimum": 3},
    {"type": "integer", "multipleOf": 10, "maximum": 55},
    {"type": "number", "multipleOf": 5.0, "minimum": -23},
    {"type": "integer", "multipleOf": 6, "minimum": 7, "maximum": 12},
    {"type": "integer", "multipleOf": 25, "minimum": 1000, "maximum": 1300},
]


@pytest.mark.parametrize("schema", MULT_CASES)
def test_integer_multiple_of_is_exact(schema):
    vals = list(range(-130, 131)) + list(range(950, 1350))
    pairs = [(str(v), v) for v in vals]
    check_exact(schema, pairs, sim_every=2)
    rx = re.compile(schema_to_regex(schema, COMPACT))
    for bad in ["-0", "00", "06", "1.0", "6.0", "1e1", ""]:
        assert rx.fullmatch(bad) is None, bad


def test_multiple_of_with_no_value_in_range_matches_nothing():
    from structgate.errors import InvalidConstraintError
    from structgate.native.json_schema import NEVER

    s = {"type": "integer", "multipleOf": 6, "minimum": 7, "maximum": 11}
    assert schema_to_regex(s) == NEVER
    with pytest.raises(InvalidConstraintError):
        schema_to_grammar(s).check()


def test_multiple_of_limits_and_refusals_are_typed():
    with pytest.raises(CompileLimitError) as e:
        schema_to_grammar({"properties": {"n": {"type": "integer", "multipleOf": 10**6}}})
    assert e.value.limit_name == "max_multiple_of" and "/properties/n/multipleOf" in str(e.value)
    g = schema_to_grammar({"type": "integer", "multipleOf": 1500}, CompileOptions(extra={"max_multiple_of": 1500}))
    sim = Sim(g.check())
    assert sim("3000") and sim("-1500") and sim("0") and not sim("1501") and not sim("150")
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "number", "multipleOf": 0.01})
    assert e.value.feature == "multipleOf" and e.value.where == "/multipleOf"
    with pytest.raises(UnsupportedFeatureError):
        schema_to_grammar({"type": "integer", "multipleOf": 2.5})


# -- objects: maxProperties / minProperties beyond the listed keys, propertyNames ------------------
def objects(keys, values, max_keys):
    """Every object over ``keys`` (at most ``max_keys``, keys in every order) with ``values``."""
    for n in range(max_keys + 1):
        for ks in itertools.permutations(keys, n):
            for vs in itertools.product(values, repeat=n):
                yield dict(zip(ks, vs))


def policy_order(schema, obj) -> bool:
    """Keys in the order the compiler writes them: listed ones in declared order, extras after."""
    listed = list(schema.get("properties", {}))
    pos = [listed.index(k) if k in listed else len(listed) for k in obj]
    return pos == sorted(pos)


OBJECT_CASES = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}, "c": {"type": "null"}}, "maxProperties": 2},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}, "c": {}}, "required": ["b"],
     "maxProperties": 1, "additionalProperties": {"type": "null"}},
    # (minProperties 2 with "a" optional is refused: two extras would have to count, see
    # test_object_count_refusals_are_typed; with "a" required one extra makes up the count)
    {"type": "object", "properties": {"a": {}}, "required": ["a"], "minProperties": 2, "additionalProperties": True},
    {"type": "object", "properties": {"a": {}}, "minProperties": 1, "additionalProperties": True},
    {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"], "minProperties": 3,
     "maxProperties": 3},
    {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"], "minProperties": 2, "maxProperties": 2},
    {"type": "object", "propertyNames": {"pattern": "^[a-c]+$", "maxLength": 2}},
    {"type": "object", "propertyNames": {"enum": ["a", "zz", "b"]}, "properties": {"b": {"type": "null"}}},
    {"type": "object", "propertyNames": {"minLength": 2}, "properties": {"a": {}, "ab": {}}, "required": ["ab"]},
    {"type": "object", "propertyNames": False},
    {"type": "object", "propertyNames": {"const": "a"}, "minProperties": 1},
]


@pytest.mark.parametrize("schema", OBJECT_CASES)
def test_object_counts_and_property_names_are_exact(schema):
    opt = CompileOptions(whitespace="compact", additional_properties=True)
    rx = re.compile(schema_to_regex(schema, opt))
    sims = [Sim(schema_to_grammar(schema, o).check()) for o in
            (opt, CompileOptions(whitespace="compact", additional_properties=True,
                                 extra={"automaton_inline_max_chars": 0}))]
    n = 0
    for obj in objects(["a", "b", "c", "ab", "zz", "\u00e9"], [0, None], 3):
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        ok = rx.fullmatch(text) is not None
        want = valid(schema, obj)
        if policy_order(schema, obj):
            assert ok == want, (schema, text)
            n += 1
            if n % 4 == 0:
                for sim in sims:
                    assert sim(text) == want, (schema, text)
        else:
            assert not ok or want, (schema, text)  # sound in any order


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {}}, "minProperties": 2, "additionalProperties": True},
    {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2, "additionalProperties": {"type": "integer"}},
    {"type": "object", "if": {"maxProperties": 1}, "then": {"required": ["z"]}},
])
def test_repeated_keys_never_make_up_a_count(schema):
    """``{"b": 2, "b": 3}`` is one property once parsed: texts with repeated keys are accepted only
    when ``json.loads`` of them is valid (found by a new-user pass: minProperties counted members)."""
    opt = CompileOptions(whitespace="compact", additional_properties=True)
    try:
        rx = re.compile(schema_to_regex(schema, opt))
    except UnsupportedFeatureError as e:
        assert e.feature in ("minProperties", "maxProperties", "if/then/else", "not")
        return
    texts = []
    for ks in (["b", "b"], ["x", "x"], ["a", "x", "x"], ["a", "a"], ["x", "y"], ["a", "x"], ["x", "x", "x"]):
        texts.append("{" + ",".join(f'"{k}":{i}' for i, k in enumerate(ks)) + "}")
    for t in texts:
        if rx.fullmatch(t):
            assert valid(schema, json.loads(t)), (schema, t)


def test_object_count_refusals_are_typed():
    s = {"type": "object", "properties": {"a": {}}, "minProperties": 2}  # policy: no other keys
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(s, CompileOptions(additional_properties=False))
    assert e.value.feature == "minProperties" and e.value.where == "/minProperties"
    # extras possible and two of them may be needed: an automaton cannot tell {"x": 1, "x": 2}
    # (one property) from two keys, and counting one extra only would leave {"x": 1, "y": 2} out
    for s in ({"type": "object", "properties": {"a": {}}, "minProperties": 2, "additionalProperties": True},
              {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 3, "maxProperties": 3,
               "additionalProperties": True},
              {"type": "object", "properties": {"p": {"properties": {"a": {}, "b": {}}, "minProperties": 2,
                                                     "additionalProperties": {"type": "integer"}}}}):
        with pytest.raises(UnsupportedFeatureError) as e:
            schema_to_grammar(s, CompileOptions(additional_properties=False))
        assert e.value.feature == "minProperties" and e.value.where.endswith("/minProperties"), e.value.where
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "object", "propertyNames": {"format": "email"}})
    assert e.value.feature == "propertyNames" and e.value.where == "/propertyNames"
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"type": "object", "propertyNames": {"maxLength": 3}, "patternProperties": {"^a": {}}})
    assert e.value.feature == "propertyNames"
    many = {"type": "object", "properties": {f"k{i}": {} for i in range(200)}, "maxProperties": 100}
    with pytest.raises(CompileLimitError) as e:
        schema_to_grammar(many)
    assert e.value.limit_name == "max_product_states" and "/maxProperties" in str(e.value)


# -- arrays: contains / minContains / maxContains ----------------------------------------------------
ARRAY_CASES = [
    {"type": "array", "contains": {"type": "integer"}},
    {"type": "array", "contains": {"const": "a"}, "minContains": 2, "maxContains": 3},
    {"type": "array", "contains": {"type": "null"}, "maxContains": 1, "maxItems": 3},
    {"type": "array", "items": {"type": ["integer", "null"]}, "contains": {"type": "null"}, "minItems": 2},
    {"type": "array", "contains": {"enum": ["a", None]}, "minContains": 0, "maxContains": 0},
    {"type": "array", "contains": {"pattern": "a"}, "minContains": 2},   # no positive `not`: I* A I* A I*
    {"type": "array", "contains": False},
    {"type": "array", "contains": True, "maxContains": 2},
]


@pytest.mark.parametrize("schema", ARRAY_CASES)
def test_contains_is_exact(schema):
    rx = re.compile(schema_to_regex(schema, COMPACT))
    sims = [Sim(schema_to_grammar(schema, o).check()) if schema.get("contains") is not False else None
            for o in (COMPACT, RULES)]
    k = 0
    for n in range(5):
        for arr in itertools.product([0, 1, 2, "a", None], repeat=n):
            arr = list(arr)
            text = json.dumps(arr, separators=(",", ":"))
            want = valid(schema, arr)
            assert (rx.fullmatch(text) is not None) == want, (schema, text)
            k += 1
            if k % 5 == 0 and sims[0] is not None:
                for sim in sims:
                    assert sim(text) == want, (schema, text)


def test_contains_refusals_are_typed():
    for s, feature in [({"type": "array", "contains": {"format": "email"}, "maxContains": 2}, "contains"),
                       ({"type": "array", "contains": {"type": "null"}, "prefixItems": [{}]}, "contains"),
                       ({"type": "array", "contains": {"type": "null"}, "uniqueItems": True}, "contains")]:
        with pytest.raises(UnsupportedFeatureError) as e:
            schema_to_grammar(s)
        assert e.value.feature == feature and e.value.where == "/contains", s


# -- not of keyword bounds (De Morgan) and if/then/else ------------------------------------------------
VALUES = [None, True, False, 0, 3, 5, 7, -2, 2.5, "", "a", "ab", "abcd", "bar", [], [1], [1, 2, 3], {}, {"foo": 1},
          {"foo": "bar"}, {"foo": "baz"}, {"bar": 2}, {"foo": "bar", "bar": 2}, {"bar": 2, "foo": None}]
NOT_CASES = [
    {"not": {"minimum": 3}},
    {"not": {"exclusiveMaximum": 5, "minLength": 2}},
    {"not": {"maxLength": 2, "type": "string"}},
    {"not": {"minItems": 1, "maxProperties": 0}},
    {"not": {"properties": {"foo": {"const": "bar"}}, "required": ["foo"]}},
    {"type": "integer", "not": {"minimum": 0, "maximum": 5}},
    {"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}},
    {"if": {"minimum": 3}, "then": {"multipleOf": 5}, "else": {"type": "string"}},
    {"if": {"properties": {"foo": {"const": "bar"}}, "required": ["foo"]}, "then": {"required": ["bar"]},
     "else": {"maxProperties": 1}},
    {"if": {"maxLength": 2}, "then": {"const": "a"}, "else": {"type": ["string", "boolean"]}},
    {"if": True, "then": {"type": "integer"}, "else": {"type": "string"}},
    {"if": False, "then": {"type": "integer"}, "else": {"type": "string"}},
]


@pytest.mark.parametrize("schema", NOT_CASES)
def test_negated_keywords_and_if_then_else_are_exact(schema):
    opt = CompileOptions(whitespace="compact", additional_properties=True)
    rx = re.compile(schema_to_regex(schema, opt))
    sim = Sim(schema_to_grammar(schema, opt).check())
    for v in VALUES:
        text = json.dumps(v, separators=(",", ":"))
        want = valid(schema, v)
        got = rx.fullmatch(text) is not None
        if isinstance(v, dict) and list(v) == ["bar", "foo"]:
            assert not got or want, (schema, text)  # key order policy: sound only
            continue
        assert got == want, (schema, text)
        assert sim(text) == want, (schema, text)


def test_if_then_else_refusal_is_typed():
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar({"if": {"format": "email"}, "then": {"maxLength": 3}})
    assert e.value.feature == "if/then/else" and e.value.where == "/if"


def test_not_of_integer_values_splits_the_range():
    s = {"type": "array", "items": {"type": "integer"}, "contains": {"const": 0}, "maxItems": 3}  # field case
    rx = re.compile(schema_to_regex(s, COMPACT))
    for n in range(4):
        for arr in itertools.product([0, 1, -1, 7], repeat=n):
            text = json.dumps(list(arr), separators=(",", ":"))
            assert (rx.fullmatch(text) is not None) == valid(s, list(arr)), text
    s = {"type": "integer", "minimum": -3, "maximum": 6, "not": {"enum": [0, 2.0, 2.5, 6, 9, "x"]}}
    check_exact(s, [(str(v), v) for v in range(-10, 12)])
    with pytest.raises(UnsupportedFeatureError):  # numbers: the excluded decimal has many spellings
        schema_to_grammar({"type": "number", "not": {"const": 0}})


# -- patternProperties whose pattern matches listed names: its other keys are still generated -------
PATTERN_LISTED_CASES = [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {".*": {"type": ["integer", "null"]}}},
    {"type": "object", "properties": {"ab": {}, "b": {"type": "null"}}, "required": ["ab"],
     "patternProperties": {"^[a-c]+$": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "null"}, "zz": {}},
     "patternProperties": {"^a": {"type": "null"}, "^[b-z]": {}},
     "additionalProperties": False},
    # keys no pattern matches follow additionalProperties (MaskBench Github_easy---o45260)
    {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^z": {"type": "null"}},
     "additionalProperties": {"type": "integer"}},
    {"type": "object", "properties": {"b": {"type": "null"}}, "patternProperties": {"b$": {"type": "integer"}}},
]


@pytest.mark.parametrize("schema", PATTERN_LISTED_CASES)
def test_pattern_properties_extra_keys_are_exact(schema):
    """Field cases MaskBench ``Github_easy---o85467`` (``properties`` next to
    ``patternProperties: {".*": ...}``): the pattern's keys other than the listed names are extra
    members; ``o45260``: keys no pattern matches are extra members under ``additionalProperties``
    (both were left out, so valid documents with such keys were rejected). Oracle ``jsonschema``
    on every object of up to 3 keys in the compiler's key order: exact in grammar mode; in regex
    mode exact for the first kind, sound for the second (those keys stay out of one regex text)."""
    opt = CompileOptions(whitespace="compact", additional_properties=True)
    rx = re.compile(schema_to_regex(schema, opt))
    sim = Sim(schema_to_grammar(schema, opt).check())
    pats = list(schema["patternProperties"])
    unmatched = schema.get("additionalProperties", True) is not False and ".*" not in pats  # unmatched keys exist
    n_valid = 0
    for i, obj in enumerate(objects(["a", "b", "ab", "zz", "\u00e9"], [0, None], 3)):
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        ok = rx.fullmatch(text) is not None
        want = valid(schema, obj)
        if policy_order(schema, obj):
            assert sim(text) == want, (schema, text)
            assert ok == want if not unmatched else (not ok or want), (schema, text)
            n_valid += want
        else:
            assert not ok or want, (schema, text)
    assert n_valid >= 2


def test_pattern_extra_keys_with_an_unsupported_value_are_a_typed_error():
    """MaskBench ``WashingtonPost---wp_83``'s shape: the keys no pattern matches follow an
    ``additionalProperties`` native cannot compile. They used to be left out silently (``{"a": 5,
    "b": 5}`` is valid, 5 being a multiple of 2.5, and was rejected); now the schema is refused with
    the value's typed error, as it is without ``patternProperties`` (break-it finding F4)."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "patternProperties": {"^z": {"type": "null"}},
              "additionalProperties": {"type": "integer", "multipleOf": 2.5}}
    assert valid(schema, {"a": 5, "b": 5}) and valid(schema, {"a": 5, "zq": None})
    for s in (schema, {k: v for k, v in schema.items() if k != "patternProperties"}):
        for opt in (COMPACT, RULES):
            with pytest.raises(UnsupportedFeatureError) as e:
                schema_to_grammar(s, opt)
            assert e.value.feature == "multipleOf" and e.value.where == "/additionalProperties/multipleOf"


def test_unmatched_pattern_keys_are_sound_for_both_pattern_readings():
    """A key only Python's ``re`` reading of a pattern matches (``$`` before a final newline,
    ``\\d`` on a non-ASCII digit) gets the pattern's schema from ``jsonschema``: the keys generated
    under ``additionalProperties`` must lie outside what *either* reading matches."""
    schema = {"type": "object", "patternProperties": {"^a$": {"type": "null"}, "^\\d$": {"type": "null"}},
              "additionalProperties": {"type": "integer"}}
    sim = Sim(schema_to_grammar(schema, COMPACT).check())
    for obj in ({"a\n": 1}, {"\u0663": 1}, {"b": 1}, {"a": None}, {"7": None}, {"b": None}, {"a": 1}):
        text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        assert not sim(text) or valid(schema, obj), text
    assert sim('{"b":1}') and sim('{"a":null}') and sim('{"7":null}')
