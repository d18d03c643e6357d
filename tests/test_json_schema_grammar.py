"""JSON Schema → grammar with rule references (structgate.native.json_schema.schema_to_grammar).

Oracles: the third-party ``regex`` module (it implements PCRE subroutine calls, so a
:class:`~structgate.native.ir.Grammar` rendered as ``(?(DEFINE)(?P<g0>...)...)(?&g0)`` is matched
by an independent backtracking engine, recursion included), ``jsonschema`` (Draft 2020-12),
``json.loads``, Python ``re`` on :func:`schema_to_regex` for the non-recursive languages, and the
grammar's own structural checks (``Grammar.check``, ``recursive_rules``).
"""
from __future__ import annotations

import json
import re

import jsonschema
import pytest
import regex as regex_mod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structgate.backends.interface import CompileOptions
from structgate.errors import (CompileLimitError, GrammarSyntaxError, InvalidConstraintError,
                               UnsupportedFeatureError)
from structgate.native.ir import Grammar, LazyRule, Ref
from structgate.native.json_schema import (json_object_grammar, json_value_grammar, schema_to_grammar,
                                           schema_to_regex)
from structgate.native.regex.parser import Alt, Chars, Concat, Repeat, parse_regex

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


# -- the oracle: a Grammar as one `regex`-module pattern ---------------------------------------------
def render(g: Grammar) -> "regex_mod.Pattern":
    """``g`` as a ``regex`` pattern with one named group per rule, called with ``(?&name)``."""
    names = {r: f"g{i}" for i, r in enumerate(g.rules)}

    def cp(c: int) -> str:
        return f"\\U{c:08x}"

    def node(n) -> str:
        if isinstance(n, Chars):
            if not n.ranges:
                return "(?!)"
            return "[" + "".join(cp(a) if a == b else f"{cp(a)}-{cp(b)}" for a, b in n.ranges) + "]"
        if isinstance(n, Concat):
            return "(?:" + "".join(node(x) for x in n.items) + ")"
        if isinstance(n, Alt):
            return "(?:" + "|".join(node(x) for x in n.items) + ")"
        if isinstance(n, Repeat):
            return "(?:" + node(n.item) + f"){{{n.min},{'' if n.max is None else n.max}}}"
        if isinstance(n, Ref):
            return f"(?&{names[n.name]})"
        raise TypeError(f"unexpected node {n!r}")

    defs = "".join(f"(?P<{names[r]}>{node(b)})" for r, b in g.rules.items())
    return regex_mod.compile(f"(?(DEFINE){defs})(?&{names[g.root]})", regex_mod.V1)


class Sim:
    """A second oracle, for deep inputs where the backtracking ``regex`` module can take
    exponential time: each rule body as a Thompson NFA over code points with call edges, run as an
    Earley recogniser (exact for any grammar)."""

    def __init__(self, g: Grammar):
        self.eps: list[list[int]] = []
        self.chars: list[list[tuple]] = []
        self.calls: list[list[tuple[str, int]]] = []
        self.accept_of: dict[int, str] = {}
        self.start: dict[str, int] = {}
        ends = {}
        for name in g.rules:
            self.start[name], ends[name] = self._new(), self._new()
        self._lazy: list = []  # LazyRule states met, built below (their reachable part, eagerly)
        self._ends = ends
        for name, body in g.rules.items():
            self._build(body, self.start[name], ends[name])
            self.accept_of[ends[name]] = name
        while self._lazy:
            node = self._lazy.pop()
            name = ("lazy", id(node.auto), node.state)
            self._build(node.auto.body(node.state), self.start[name], ends[name])
            self.accept_of[ends[name]] = name
        self.root, self.root_end = self.start[g.root], ends[g.root]

    def _new(self) -> int:
        self.eps.append([])
        self.chars.append([])
        self.calls.append([])
        return len(self.eps) - 1

    def _build(self, n, a: int, b: int) -> None:
        if isinstance(n, Chars):
            self.chars[a].append((n.ranges, b))
        elif isinstance(n, Ref):
            self.calls[a].append((n.name, b))
        elif isinstance(n, LazyRule):
            name = ("lazy", id(n.auto), n.state)
            if name not in self.start:
                self.start[name], self._ends[name] = self._new(), self._new()
                self._lazy.append(n)
            self.calls[a].append((name, b))
        elif isinstance(n, Concat):
            cur = a
            for i, x in enumerate(n.items):
                nxt = b if i == len(n.items) - 1 else self._new()
                self._build(x, cur, nxt)
                cur = nxt
            if not n.items:
                self.eps[a].append(b)
        elif isinstance(n, Alt):
            for x in n.items:
                self._build(x, a, b)
        elif isinstance(n, Repeat):
            cur = a
            for _ in range(n.min):
                nxt = self._new()
                self._build(n.item, cur, nxt)
                cur = nxt
            if n.max is None:
                loop = self._new()
                self.eps[cur].append(loop)
                inner = self._new()
                self._build(n.item, loop, inner)
                self.eps[inner].append(loop)
                self.eps[loop].append(b)
            else:
                for _ in range(n.max - n.min):
                    nxt = self._new()
                    self._build(n.item, cur, nxt)
                    self.eps[cur].append(b)
                    cur = nxt
                self.eps[cur].append(b)
        else:
            raise TypeError(f"unexpected node {n!r}")

    def __call__(self, text: str) -> bool:
        """Earley-style recognition: items (NFA state, origin position); a rule started at
        position k and accepting at i resumes every caller waiting on it at k (polynomial, so the
        ambiguity of the optional-property chain does not multiply return stacks)."""
        n = len(text)
        waiting: list[dict[str, set]] = [dict() for _ in range(n + 1)]
        done: list[set[str]] = [set() for _ in range(n + 1)]
        cur: set = set()
        for i in range(n + 1):
            work = [(self.root, 0)] if i == 0 else list(cur)
            cur = set()
            while work:
                it = work.pop()
                if it in cur:
                    continue
                cur.add(it)
                st, o = it
                work.extend((t, o) for t in self.eps[st])
                for name, ret in self.calls[st]:
                    waiting[i].setdefault(name, set()).add((ret, o))
                    work.append((self.start[name], i))
                    if name in done[i]:  # a nullable callee already finished here
                        work.append((ret, o))
                name = self.accept_of.get(st)
                if name is not None:
                    if o == i:
                        done[i].add(name)
                    work.extend(waiting[o].get(name, ()))
            if i == n:
                return (self.root_end, 0) in cur
            cp = ord(text[i])
            cur = {(t, o) for st, o in cur for rs, t in self.chars[st] if any(lo <= cp <= hi for lo, hi in rs)}
            if not cur:
                return False
        return False


def matcher(schema, options=None):
    g = schema_to_grammar(schema, options)
    g.check()
    return Sim(g)


def test_the_two_oracles_agree():
    s = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#"}}, "b": {"type": "integer"}}}
    g = schema_to_grammar(s)
    rx, sim = render(g), Sim(g)
    for text in ['{}', '{"a": []}', '{"a": [{"b": 1}, {}]}', '{"b": 1, "a": []}', '{"a": [{"a": [{"b": -3}]}]}',
                 '{"a": [1]}', '{"a": [{"b": "x"}]}', '{"b": 1', '{"c": {"d": [null, true]}}', '{"a": [{}], "c": 1}']:
        assert (rx.fullmatch(text) is not None) == sim(text), text


def valid(schema, value) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def nest(depth: int, leaf=0):
    """A value with ``depth`` container levels (alternating objects and arrays)."""
    v = leaf
    for i in range(depth):
        v = {"k": v, "n": i} if i % 2 else [v, i]
    return v


# -- parser: (?&name) ----------------------------------------------------------------------------------
def test_subroutine_call_parses_only_when_asked():
    n = parse_regex(r"\[(?&v)(?:,(?&json:value/x.1-2))*\]", calls=True)
    assert isinstance(n, Concat) and n.items[1] == Ref("v")
    assert n.items[2] == Repeat(Concat((Chars(((44, 44),)), Ref("json:value/x.1-2"))), 0, None)
    assert parse_regex("(?&a)+", calls=True) == Repeat(Ref("a"), 1, None)
    assert parse_regex("(?i)(?&a)", calls=True) == Ref("a")  # flags do not touch a call
    for bad, pos in (("(?&)", 3), ("(?&1a)", 3), ("(?&a b)", 3), ("x(?&a", 1)):
        with pytest.raises(GrammarSyntaxError) as e:
            parse_regex(bad, calls=True)
        assert e.value.position == pos, bad
    with pytest.raises(GrammarSyntaxError):  # without calls=True: unchanged (unknown extension)
        parse_regex("(?&a)")


# -- structure -----------------------------------------------------------------------------------------
def test_json_value_and_object_grammars_are_recursive_rules():
    g = json_value_grammar()
    # every unconstrained string is a call of the one shared string rule, emitted by the compiler
    assert g.root == "json:value" and set(g.rules) == {"json:value", "__json_string"}
    assert g.keep_calls == {"__json_string"}
    assert g.check().recursive_rules() == {"json:value"}
    o = json_object_grammar()
    assert o.root == "root" and set(o.rules) == {"root", "json:value", "__json_string"}
    assert o.check().references("root") == {"json:value", "__json_string"}
    assert o.recursive_rules() == {"json:value"}


def test_rules_are_deterministic_and_keyed_by_schema():
    s = {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                                                            "v": {"type": "integer"}}}},
         "type": "object", "properties": {"a": {"$ref": "#/$defs/node"}, "b": {"$ref": "#/$defs/node"}}}
    g1, g2 = schema_to_grammar(s), schema_to_grammar(json.dumps(s))
    assert g1.rules == g2.rules and g1.root == g2.root
    assert "ref:/$defs/node".replace("$", "_") in g1.rules  # named after the pointer
    assert g1.check().recursive_rules() == {"ref:/_defs/node"}
    # any order: the node's member-set rules and its "kids" member lie on the cycle too, nothing else
    rec = schema_to_grammar(s, CompileOptions(property_order="any")).check().recursive_rules()
    assert "ref:/_defs/node" in rec and all(r.startswith("obj:properties/a.") for r in rec - {"ref:/_defs/node"})
    # both properties call the one rule (the second use is not a copy)
    assert sorted(g1.references(g1.root)) == ["json:value", "ref:/_defs/node"] or \
        "ref:/_defs/node" in g1.references(g1.root)


def test_non_recursive_schema_is_one_rule():
    g = schema_to_grammar({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                           "additionalProperties": False})
    assert list(g.rules) == ["root"] and not g.references("root")


# -- recursion (the issue's acceptance shapes), jsonschema as the oracle -------------------------------
TREE = {"$defs": {"node": {"type": "object", "properties": {
    "value": {"type": "integer"},
    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"],
    "additionalProperties": False}}, "$ref": "#/$defs/node"}
LIST = {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["v", "next"], "additionalProperties": False}


def _tree(depth: int, leaf_value=0):
    t = {"value": leaf_value}
    for i in range(depth - 1):
        t = {"value": i, "children": [t, {"value": -i}] if i % 3 == 0 else [t]}
    return t


def _chain(n: int, last_next=None):
    d = {"v": 0, "next": last_next}
    for i in range(1, n):
        d = {"v": i, "next": d}
    return d


def _at_depth(v, path):
    for k in path:
        v = v[k]
    return v


def test_tree_30_deep():
    m = matcher(TREE)
    t = _tree(30)
    assert valid(TREE, t) and m(json.dumps(t)) and m(json.dumps(t, separators=(",", ":")))
    bad = json.loads(json.dumps(t))  # a wrong type at depth 20
    node = bad
    for _ in range(19):
        node = node["children"][0]
    node["value"] = "x"
    assert not valid(TREE, bad) and not m(json.dumps(bad))
    text = json.dumps(t)
    for cut in (1, 2, len(text) // 2, len(text) - 1):
        assert not m(text[:cut])  # truncated documents


def test_linked_list_50_long():
    m = matcher(LIST)
    d = _chain(50)
    assert valid(LIST, d) and m(json.dumps(d))
    bad = json.loads(json.dumps(d))
    _at_depth(bad, ["next"] * 20)["v"] = [1]
    assert not valid(LIST, bad) and not m(json.dumps(bad))
    assert not m(json.dumps(_chain(50, last_next=5)))
    assert not m(json.dumps(d)[:-1])
    # the old compiler unrolled this to max_recursion_depth levels
    assert not re.fullmatch(schema_to_regex(LIST), json.dumps(d))


@pytest.mark.parametrize("schema", [{"type": "object"}, {}, True, {"type": "object", "properties": {"a": {}}},
                                    {"type": "array"}, {"type": "object", "additionalProperties": {"type": "array"}}])
def test_values_30_deep_under_unconstrained_schemas(schema):
    m = matcher(schema)
    v = {"a": [nest(30)]} if schema != {"type": "array"} else [nest(30)]
    assert valid(schema, v) and m(json.dumps(v)) and m(json.dumps(v, separators=(",", ":")))
    text = json.dumps(v)
    assert not m(text[:-1]) and not m(text[:-3])
    broken = text.replace("[", "{", 1) if text.count("[") > 2 else text + "]"
    assert not m(broken)


def test_wrong_type_at_depth_20_in_typed_recursive_value():
    s = {"$defs": {"a": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/a"}]}}},
         "$ref": "#/$defs/a"}
    m = matcher(s)
    v = 1
    for _ in range(25):
        v = [v, 2]
    assert valid(s, v) and m(json.dumps(v))
    bad = json.loads(json.dumps(v))
    _at_depth(bad, [0] * 20)[1] = "two"
    assert not valid(s, bad) and not m(json.dumps(bad))


def test_required_self_reference_matches_nothing():
    g = schema_to_grammar({"type": "object", "properties": {"n": {"$ref": "#"}}, "required": ["n"]})
    assert g.rules[g.root] == Chars(())
    with pytest.raises(InvalidConstraintError):
        g.check()
    # an unproductive branch is pruned; the rest stays
    s = {"$defs": {"a": {"type": "object", "properties": {"n": {"$ref": "#/$defs/a"}}, "required": ["n"]}},
         "anyOf": [{"$ref": "#/$defs/a"}, {"type": "integer"}]}
    g = schema_to_grammar(s)
    g.check()
    assert set(g.rules) == {"root"}
    m = Sim(g)
    assert m("12") and not m('{"n": 1}')


def test_mutual_recursion():
    s = {"$defs": {"a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "additionalProperties": False},
                   "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "maxItems": 2}},
         "$ref": "#/$defs/a"}
    m = matcher(s)
    v: dict = {}
    for _ in range(20):
        v = {"b": [v, {}]}
    assert valid(s, v) and m(json.dumps(v))
    bad = {"b": [v, {}, {}]}
    assert not valid(s, bad) and not m(json.dumps(bad))


# -- DAGs are not expanded -------------------------------------------------------------------------------
def _dag(n: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"l": {"$ref": f"#/$defs/d{i + 1}"}, "r": {"$ref": f"#/$defs/d{i + 1}"}},
                      "additionalProperties": False} for i in range(n)}
    defs[f"d{n}"] = {"type": "integer"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_ref_dag_linear_not_exponential():
    s = _dag(24)
    with pytest.raises(CompileLimitError):  # 2**24 copies of the leaf in one flat regex
        schema_to_regex(s)
    g = schema_to_grammar(s)
    g.check()
    # linear in the number of definitions: a rule per definition, plus the member / tail rules of
    # the object construction (_members_linear), the same number per level
    n12 = len(schema_to_grammar(_dag(12)).rules)
    assert len(g.rules) <= 2 * n12 + 4 and len(g.rules) <= 4 * 24
    assert sum(len(repr(b)) for b in g.rules.values()) < 200_000  # linear in the number of definitions
    m = Sim(g)

    def full(i):
        return 5 if i == 24 else {"l": full(i + 1), "r": full(i + 1)} if i > 18 else {"l": full(i + 1)}
    v = full(0)
    assert valid(s, v) and m(json.dumps(v))
    bad = json.loads(json.dumps(v).replace("5", '"5"', 1))
    assert not valid(s, bad) and not m(json.dumps(bad))


# -- the same language as schema_to_regex where nothing recurses ----------------------------------------
FLAT_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": -3, "maximum": 40}, "b": {"type": "string", "maxLength": 3},
                                      "c": {"enum": ["x", 1, None]}}, "required": ["a"], "additionalProperties": False},
    {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "number", "exclusiveMinimum": 0}], "items": {"type": "null"},
     "maxItems": 4},
    {"$defs": {"p": {"type": "string", "pattern": "^[a-c]+$"}}, "type": "object",
     "properties": {"x": {"$ref": "#/$defs/p"}, "y": {"$ref": "#/$defs/p"}, "z": {"allOf": [{"$ref": "#/$defs/p"}, {"maxLength": 2}]}}},
    {"oneOf": [{"type": "integer"}, {"type": "string", "format": "date"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]},
    {"anyOf": [{"$ref": "#/$defs/o"}, {"type": "null"}], "$defs": {"o": {"type": "object", "properties": {"q": {"const": [1, {"a": None}]}},
                                                                       "required": ["q"]}}},
]


def _json_values(depth):
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-50, 50), st.sampled_from([0.5, -2.25, 1e5]),
                        st.sampled_from(["", "a", "ab", "abc", "x", "2024-02-29", "é\n"]))
    if depth == 0:
        return scalars
    inner = _json_values(depth - 1)
    return st.one_of(scalars, st.lists(inner, max_size=4),
                     st.dictionaries(st.sampled_from(["a", "b", "c", "x", "y", "z", "q"]), inner, max_size=4))


@pytest.mark.parametrize("i", range(len(FLAT_SCHEMAS)))
def test_flat_schemas_agree_with_regex_and_jsonschema(i):
    s = FLAT_SCHEMAS[i]
    rx = re.compile(schema_to_regex(s))
    m = matcher(s)

    @SETTINGS
    @given(_json_values(2))
    def check(v):
        for text in (json.dumps(v), json.dumps(v, separators=(",", ":"))):
            in_rx, in_g = rx.fullmatch(text) is not None, m(text)
            assert in_rx == in_g, (text, in_rx, in_g)
            if in_g:
                assert valid(s, v), text

    check()


# -- json_object / json_value: property tests against json.loads ----------------------------------------
def _any_json():
    return st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                  st.text(max_size=6)),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
        max_leaves=40)


_OBJ = Sim(json_object_grammar())
_VAL = Sim(json_value_grammar())
_OBJ_RX = render(json_object_grammar())


def _loads(text):
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


@SETTINGS
@given(_any_json(), st.booleans())
def test_json_value_grammar_accepts_json(v, ascii_):
    text = json.dumps(v, ensure_ascii=ascii_)
    assert _VAL(text)
    assert _OBJ(text) == isinstance(v, dict) == (_OBJ_RX.fullmatch(text) is not None)


@SETTINGS
@given(st.dictionaries(st.text(max_size=4), _any_json(), max_size=4), st.data())
def test_json_object_corruptions_rejected_exactly_when_json_loads_rejects(v, data):
    text = json.dumps(v)
    i = data.draw(st.integers(0, len(text)))
    op = data.draw(st.sampled_from(["delete", "insert", "replace"]))
    ch = data.draw(st.sampled_from(list('{}[]",:0-1.eE \\ax')))
    if op == "delete":
        bad = text[:i] + text[i + 1:]
    elif op == "insert":
        bad = text[:i] + ch + text[i:]
    else:
        bad = text[:i] + ch + text[i + 1:]
    ok, parsed = _loads(bad)
    # the grammar has no leading/trailing whitespace and at most max_whitespace (4) blanks
    expected = ok and isinstance(parsed, dict) and bad == bad.strip()
    assert _OBJ(bad) == expected, bad


def test_deep_free_form_json():
    v = nest(60)
    assert _VAL(json.dumps(v)) and _OBJ(json.dumps({"x": v}))
    assert not _OBJ(json.dumps([v])) and not _OBJ(json.dumps({"x": v})[:-1])


# -- patternProperties: each key gets the allOf of exactly the patterns it matches -----------------------
def test_pattern_properties_open_object_case():
    s = {"type": "object", "patternProperties": {"^(yes|no)$": {"type": "string"}, "^n_": {"type": "number"}}}
    m = matcher(s)
    rx = re.compile(schema_to_regex(s))
    for ok in ['{"yes":"a"}', '{"no":"a\\nb"}', '{"n_x":1e5}', "{}", '{"yes":"\\u00e9"}', '{"n_1":-2.5E-3}',
               '{"yes":"a","n_b":0}']:
        assert valid(s, json.loads(ok)) and m(ok) and rx.fullmatch(ok), ok
    for bad in ['{"yes":1}', '{"no":null}', '{"yes":"a","no":2}', '{"yes":["a"]}', '{"n_x":"1"}', '{"n_x":1e}']:
        assert not m(bad) and not rx.fullmatch(bad), bad


def test_pattern_properties_nested_patterns_get_both_schemas():
    s = {"type": "object", "patternProperties": {"^ab": {"type": "string", "maxLength": 2}, "^abc$": {"minLength": 1}}}
    m = matcher(s)
    assert m('{"abc": "x"}') and m('{"abc": "xy"}') and valid(s, {"abc": "x"})
    assert not m('{"abc": ""}')  # matches both: string, 1..2 characters
    assert not m('{"abc": "xyz"}') and not m('{"abc": 1}')
    # the other keys of ^ab need ^ab's schema alone: "^ab but not ^abc$" is a product automaton
    # (_pattern_regions); they were left out before (a silent narrowing)
    assert m('{"abd": ""}') and valid(s, {"abd": ""})
    assert not m('{"abd": "xyz"}') and not valid(s, {"abd": "xyz"})


def test_pattern_properties_unsatisfiable_combination_never_generated():
    s = {"type": "object", "patternProperties": {"^a$": {"type": "string"}, "^(a|b)$": {"type": "number"}}}
    m = matcher(s)  # "a" matches both (string and number: no value) -> "a" never appears
    assert m("{}") and not m('{"a": "x"}') and not m('{"a": 1}') and not m('{"b": "x"}')
    assert not valid(s, {"a": "x"}) and not valid(s, {"a": 1})
    s2 = {"type": "object", "patternProperties": {"^a$": {"type": "string"}, "^b$": {"type": "number"},
                                                  "^(a|c)$": {"type": "number"}}}
    m2 = matcher(s2)  # same for a, while the disjoint ^b$ keys are generated
    assert m2('{"b": 1}') and not m2('{"a": 1}') and not m2('{"b": "x"}')


def test_pattern_properties_partial_overlap_splits_the_keys():
    # "ab" needs string and integer (nothing), "a" only string, "b" only integer: the keys are split
    # into regions by product automata (_pattern_regions; before, neither pattern's keys were
    # generated at all); a disjoint third pattern is generated as before. Grammar and regex mode
    s = {"type": "object", "patternProperties": {"^a": {"type": "string"}, "b$": {"type": "integer"},
                                                 "^z$": {"type": "null"}}}
    m = matcher(s)
    rx = re.compile(schema_to_regex(s))
    for text in ("{}", '{"z": null}', '{"a": "x"}', '{"b": 1}', '{"axb": 1}', '{"xb": 2}', '{"ab": 1}',
                 '{"ab": "x"}', '{"z": 1}', '{"a": 1}', '{"b": "x"}'):
        want = valid(s, json.loads(text))
        assert m(text) == want and bool(rx.fullmatch(text)) == want, text


def test_pattern_properties_undecided_overlap_is_a_typed_error(monkeypatch):
    from structgate.native.json_schema import _overlap

    monkeypatch.setattr(_overlap, "DEFAULT_MAX_PAIRS", 1)
    monkeypatch.setattr(_overlap.relation, "__defaults__", (1, 20_000))
    s = {"type": "object", "patternProperties": {"^a[0-9]{3}": {"type": "string"}, "b$": {"type": "integer"}}}
    with pytest.raises(UnsupportedFeatureError) as e:
        schema_to_grammar(s)
    assert e.value.feature == "patternProperties" and "/patternProperties" in str(e.value)


def test_pattern_properties_with_listed_property():
    s = {"type": "object", "properties": {"name": {"type": "string"}, "grade": {"type": "string"}},
         "required": ["name", "grade"], "patternProperties": {"^grade$": {"type": "string", "maxLength": 1}}}
    m = matcher(s)
    assert m('{"name": "J", "grade": "B"}') and not m('{"name": "J", "grade": "BB"}')
    assert not m('{"name": "J"}')


# -- options ---------------------------------------------------------------------------------------------
def test_compact_whitespace():
    m = matcher({"type": "object"}, CompileOptions(whitespace="compact"))
    assert m('{"a":[1,{"b":null}]}') and not m('{"a": 1}')


def test_regex_mode_unroll_depth_is_capped():
    # schema_to_regex stays a bounded unrolling even with a high max_recursion_depth
    rx = schema_to_regex({"type": "object"}, CompileOptions(max_recursion_depth=128))
    assert re.fullmatch(rx, json.dumps({"a": nest(2)})) and not re.fullmatch(rx, json.dumps({"a": nest(8)}))
    rx = schema_to_regex({"type": "object"}, CompileOptions(max_recursion_depth=128,
                                                            extra={"regex_unroll_depth": 5}))
    assert re.fullmatch(rx, json.dumps({"a": nest(4)}))
