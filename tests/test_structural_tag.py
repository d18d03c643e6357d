"""Structural tags: the native front end (structgate.native.frontends.structural_tag) and the
XGrammar adapter's two forms.

Oracles: Python's ``in`` (free text = no trigger / exclude occurs; dispatch = the first
occurrence), XGrammar 0.2.8's own verdicts on the same spec and string (hand-written strings,
brute force over small alphabets and random mutations), jsonschema for the JSON content.
"""
from __future__ import annotations

import itertools
import json
import random
import warnings

import jsonschema
import pytest

from structgate.errors import GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError
from structgate.native.frontends.structural_tag import free_text_parts, legacy_to_format, structural_tag_to_grammar
from structgate.native.ir import ByteSet, Ref
from structgate.native.regex import compile_ast
from structgate.native.regex.parser import Alt, Chars, Concat, Repeat


# -- a reference recognizer for an IR grammar (code points; exact, memoised) ---------------------------
def recognizer(g):
    """``accepts(s) -> bool``: does ``s`` match grammar ``g`` (a set-of-end-positions evaluation)?"""

    def accepts(s: str) -> bool:
        memo: dict = {}

        def ends(node, i):
            key = (id(node), i)
            if key in memo:
                return memo[key]
            memo[key] = frozenset()
            if isinstance(node, Ref):
                r = ends(g.rules[node.name], i)
            elif isinstance(node, Chars):
                ok = i < len(s) and any(lo <= ord(s[i]) <= hi for lo, hi in node.ranges)
                r = frozenset([i + 1]) if ok else frozenset()
            elif isinstance(node, Concat):
                cur = {i}
                for it in node.items:
                    cur = {j for k in cur for j in ends(it, k)}
                r = frozenset(cur)
            elif isinstance(node, Alt):
                r = frozenset(j for it in node.items for j in ends(it, i))
            elif isinstance(node, Repeat):
                out = {i} if node.min == 0 else set()
                cur, seen, n = {i}, set(), 0
                while cur and (node.max is None or n < node.max):
                    n += 1
                    cur = {j for k in cur for j in ends(node.item, k)}
                    if node.max is None:
                        cur -= seen
                        seen |= cur
                    if n >= node.min:
                        out |= cur
                r = frozenset(out)
            else:  # pragma: no cover - the front end makes no byte sets or anchors
                raise AssertionError(f"unexpected node {node!r}")
            memo[key] = r
            return r

        return len(s) in ends(g.rules[g.root], 0)

    return accepts


def _native(spec):
    return recognizer(structural_tag_to_grammar(spec))


# -- free text vs Python `in` --------------------------------------------------------------------------
PATTERN_SETS = [
    (["aa"], []), (["aab"], []), (["abab"], []), (["aba"], []), (["<f"], []), (["ab", "b"], []),
    (["ab", "ba"], []), (["abc", "bcd"], []), (["<a"], ["a"]), (["<a"], ["x<"]), (["aa"], ["ba"]),
    ([], ["ab"]), ([], ["aa", "b"]), (["a<b", "<b"], []),
]


@pytest.mark.parametrize("triggers,excludes", PATTERN_SETS, ids=lambda x: "|".join(x) or "-")
def test_free_text_is_exact_against_python_in(triggers, excludes):
    free, pre = free_text_parts(triggers, excludes)
    dfa_free = compile_ast(free)
    dfa_pre = [compile_ast(p) for p in pre]
    pats = triggers + excludes
    alphabet = sorted({c for p in pats for c in p} | {"x"})
    n = 0
    max_len = {2: 11, 3: 8, 4: 7}.get(len(alphabet), 6)
    for length in range(0, max_len + 1):
        for tup in itertools.product(alphabet, repeat=length):
            s = "".join(tup)
            want_free = not any(p in s for p in pats)
            assert dfa_free.matches(s.encode()) == want_free, (s, "free")
            # first occurrence of any pattern ends exactly at the end, and it is a trigger, no exclude
            first_at_end = bool(s) and not any(p in s[:-1] for p in pats) and not any(s.endswith(x) for x in excludes)
            for t, d in zip(triggers, dfa_pre):
                assert d.matches(s.encode()) == (first_at_end and s.endswith(t)), (s, t)
            n += 1
    assert n > 2000


def test_free_text_any_code_point():
    free, (pre,) = free_text_parts(["<tool_call>"], [])
    d, p = compile_ast(free), compile_ast(pre)
    for s in ["", "héllo 😀 <tool", "<tool_cal", "a<tool_call", "日本<tool_call>"]:
        assert d.matches(s.encode()) == ("<tool_call>" not in s)
    assert p.matches("日本 < <tool_call>".encode()) and not p.matches("<tool_call><tool_call>".encode())


# -- agreement with XGrammar ------------------------------------------------------------------------------
def _xgr_accepts(spec):
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if "structures" in spec:
            tags = [xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"])
                    for s in spec["structures"]]
            g = xgr.Grammar.from_structural_tag(tags, spec["triggers"])
        else:
            g = xgr.Grammar.from_structural_tag(json.dumps(spec))
    return lambda s: _is_grammar_accept_string(g, s)


def C(v):
    return {"type": "const_string", "value": v}


AT = {"type": "any_text"}


def tag(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


ONE = C("1")
INT = {"type": "json_schema", "json_schema": {"type": "integer"}}

#: (format, hand-written strings); random strings over the spec's characters are added
FORMATS = {
    "triggered_kmp": ({"type": "triggered_tags", "triggers": ["aa"], "tags": [tag("aa=", ONE, "!")]},
                      ["", "x", "xa", "xaa=1!", "xaaa=1!", "aa=1!", "aa=1!aa=1!", "aa=1!xy", "xaa", "aaa=1!"]),
    "triggered_two": ({"type": "triggered_tags", "triggers": ["<a", "<b"],
                       "tags": [tag("<a", ONE, "."), tag("<bb", ONE, ".")]}, ["x<a1.<bb1.", "<b", "<bx", "<<a1."]),
    "triggered_shared_trigger": ({"type": "triggered_tags", "triggers": ["<f="],
                                  "tags": [tag("<f=a>", INT, "</f>"), tag("<f=b>", C("ok"), "</f>")]},
                                 ["hi <f=a>12</f> and <f=b>ok</f>", "<f=c>", "<f=a>1.5</f>", "<<f=b>ok</f>"]),
    "stop_after_first": ({"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f>", ONE, "</f>")],
                          "stop_after_first": True}, ["", "x", "x<f>1</f>", "x<f>1</f>y", "<f>1</f><f>1</f>"]),
    "at_least_one": ({"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f>", ONE, "</f>")],
                      "at_least_one": True}, ["", "x", "x<f>1</f>", "<f>1</f>y", "<f>1</f>y<f>1</f>"]),
    "at_least_one_stop": ({"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f>", ONE, "</f>")],
                           "at_least_one": True, "stop_after_first": True}, ["<f>1</f>", "<f>1</f>x", ""]),
    "triggered_excludes": ({"type": "triggered_tags", "triggers": ["<a"], "tags": [tag("<a", ONE, ".")],
                            "excludes": ["x<"]}, ["<a1.", "x<a1.", "x<", "y<a1.x"]),
    "exclude_in_trigger": ({"type": "triggered_tags", "triggers": ["<a"], "tags": [tag("<a", ONE, ".")],
                            "excludes": ["a"]}, ["<a1.", "xa", "x<"]),
    "tag_any_text": (tag("<", AT, "aa"), ["<aa", "<xaa", "<xaaa", "<aaa", "<xaxa"]),
    "tag_seq_any_text": (tag("<r>", {"type": "sequence", "elements": [AT, C("!"), AT]}, "</r>"),
                         ["<r>a!b</r>", "<r>a</r>!b</r>", "<r>a!b</r>c</r>"]),
    "tag_or_any_text": (tag("<", {"type": "or", "elements": [AT, C("!")]}, ">"), ["<!>", "<a>b>", "<ab>"]),
    "tag_star_any_text": (tag("<r>", {"type": "star", "content": AT}, "</r>"), ["<r>a</r>", "<r>a</r>b</r>"]),
    "tag_nested": (tag("<r>", tag("(", AT, ")"), "</r>"), ["<r>(a)</r>", "<r>(a)b</r>", "<r>(a))</r>"]),
    "tag_ends_list": (tag("", AT, ["!", "?"]), ["a!", "a?", "a!b!", "a", ""]),
    "tag_triggered_inside": (tag("<r>", {"type": "triggered_tags", "triggers": ["<a"], "tags": [tag("<a", ONE, ".")]},
                                 "</r>"), ["<r>x</r>", "<r>x</r>y</r>", "<r>x<a1.</r>"]),
    "any_text_excludes": ({"type": "any_text", "excludes": ["ab"]}, ["", "a", "ab", "xab", "xa", "b"]),
    "any_text_max_chars": ({"type": "any_text", "max_chars": 2}, ["", "ab", "abc"]),
    "seq_any_then_const": ({"type": "sequence", "elements": [AT, C("aa")]}, ["aa", "aaa", "xaaaa", "a"]),
    "seq_triggered_then_const": ({"type": "sequence", "elements": [
        {"type": "triggered_tags", "triggers": ["<a"], "tags": [tag("<a", ONE, ".")]}, C("END")]},
        ["END", "xEND", "x<a1.END", "xENDyEND", "x<aEND"]),
    "tags_with_separator": ({"type": "tags_with_separator", "tags": [tag("a", ONE, "."), tag("b", ONE, ".")],
                             "separator": ","}, ["", "a1.", "a1.,b1.", "a1.b1.", "a1.,", "x"]),
    "tags_with_separator_1": ({"type": "tags_with_separator", "tags": [tag("a", ONE, ".")], "separator": ",",
                               "at_least_one": True}, ["", "a1.", "a1.,a1."]),
    "tags_with_separator_first": ({"type": "tags_with_separator", "tags": [tag("a", ONE, ".")], "separator": ",",
                                   "stop_after_first": True}, ["", "a1.", "a1.,a1."]),
    "dispatch_loop": ({"type": "dispatch", "rules": [["<a", C("1>")], ["<b", C("2>")]], "excludes": ["zz"]},
                      ["", "x<a1>y<b2>", "<a2>", "zz", "x<a1>zz"]),
    "dispatch_once": ({"type": "dispatch", "rules": [["<a", C("1>")]], "loop": False},
                      ["", "x<a1>", "x<a1>y", "x<a1><a1>"]),
    "repeat": ({"type": "repeat", "min": 1, "max": 2, "content": C("a")}, ["", "a", "aa", "aaa"]),
    "repeat_unbounded": ({"type": "repeat", "min": 2, "max": -1, "content": C("ab")}, ["ab", "abab", "ababab"]),
    "optional_plus": ({"type": "sequence", "elements": [{"type": "optional", "content": C("a")},
                                                        {"type": "plus", "content": C("b")}]}, ["b", "abb", "a", ""]),
    "regex": ({"type": "sequence", "elements": [C("<"), {"type": "regex", "pattern": "[0-9]{1,3}"}, C(">")]},
              ["<1>", "<123>", "<1234>", "<>"]),
}


def _random_strings(spec, hand, n=150, seed=0):
    rnd = random.Random(seed)
    text = json.dumps(spec)
    alphabet = sorted({c for c in text if c.isprintable() and c not in '"\\{}:, '} - set("tyepcontsrgvlu_")
                      | set("<>/!.=1a"))
    out = set(hand)
    for _ in range(n):
        out.add("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 9))))
    pieces = [h for h in hand if h]
    for _ in range(n):  # mutations and concatenations of the hand-written strings
        s = rnd.choice(pieces) + (rnd.choice(pieces) if rnd.random() < 0.3 else "")
        i = rnd.randint(0, len(s))
        op = rnd.random()
        s = s[:i] + rnd.choice(alphabet) + s[i:] if op < 0.4 else (s[:i] + s[i + 1:] if op < 0.8 else s)
        out.add(s)
    return sorted(out)


@pytest.mark.engines
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_same_verdicts_as_xgrammar(name):
    fmt, hand = FORMATS[name]
    spec = {"type": "structural_tag", "format": fmt}
    ours, theirs = _native(spec), _xgr_accepts(spec)
    diff = [(s, ours(s), theirs(s)) for s in _random_strings(fmt, hand) if ours(s) != theirs(s)]
    assert not diff


LEGACY = {"type": "structural_tag", "triggers": ["<function="],
          "structures": [
              {"begin": "<function=get_weather>", "end": "</function>",
               "schema": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer", "minimum": 1}},
                          "required": ["city"]}},
              {"begin": "<function=ping>", "end": "</function>", "schema": {"type": "object", "properties": {}}}]}

DOCS = [{"city": "Paris"}, {"city": "Paris", "days": 3}, {"city": "Paris", "days": 0}, {"days": 3}, {},
        {"city": 5}, {"city": "a</function>b"}, {"city": "x", "other": 1}]


@pytest.mark.engines
def test_legacy_form_json_content_against_jsonschema_and_xgrammar():
    ours, theirs = _native(LEGACY), _xgr_accepts(LEGACY)
    schema = LEGACY["structures"][0]["schema"]
    closed = {**schema, "additionalProperties": False}
    for doc in DOCS:
        s = f"Let me check. <function=get_weather>{json.dumps(doc)}</function> Done."
        want = jsonschema.Draft202012Validator(closed).is_valid(doc)
        assert ours(s) == want, s
        assert theirs(s) == want, s
    for s in ["no call at all", "<function=ping>{}</function><function=ping>{}</function>", "<function=pong>{}",
              "<function=ping>{}", "a <function", "<function=ping>{} </function>"]:
        assert ours(s) == theirs(s), s


def test_legacy_form_equals_its_format_form():
    fmt = legacy_to_format(LEGACY)
    a, b = _native(LEGACY), _native({"type": "structural_tag", "format": fmt})
    for doc in DOCS:
        s = f"x<function=get_weather>{json.dumps(doc)}</function>"
        assert a(s) == b(s)
    assert fmt["type"] == "triggered_tags" and fmt["triggers"] == ["<function="]
    # a schema given as a JSON string is parsed (XGrammar's StructuralTagItem accepts both)
    s2 = {**LEGACY, "structures": [{**LEGACY["structures"][1], "schema": "{\"type\": \"object\"}"}]}
    assert legacy_to_format(s2)["tags"][0]["content"]["json_schema"] == {"type": "object"}


def test_spec_as_json_text_and_rule_origins():
    g = structural_tag_to_grammar(json.dumps(LEGACY))
    assert g.root == "root" and all(o.startswith("structural_tag") for o in g.origin.values())
    assert any("/tags/0" in o for o in g.origin.values())


# -- typed errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,path", [
    ({"type": "structural_tag"}, "/"),
    ({"type": "other", "format": C("a")}, "/type"),
    ({"type": "structural_tag", "format": {"type": "nope"}}, "/format/type"),
    ({"type": "structural_tag", "format": {"value": "x"}}, "/format/type"),
    ({"type": "structural_tag", "format": {"type": "const_string"}}, "/format/value"),
    ({"type": "structural_tag", "format": {"type": "const_string", "value": 3}}, "/format/value"),
    ({"type": "structural_tag", "format": {"type": "sequence", "elements": []}}, "/format/elements"),
    ({"type": "structural_tag", "format": {"type": "sequence", "elements": [C("a"), {"type": "tag", "begin": "a",
                                                                                     "content": AT}]}},
     "/format/elements/1/end"),
    ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<a"], "tags": [tag("<b", ONE, ".")]}},
     "/format/tags/0/begin"),
    ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<", "<a"],
                                           "tags": [tag("<a", ONE, ".")]}}, "/format/tags/0/begin"),
    ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [], "tags": []}}, "/format/triggers"),
    ({"type": "structural_tag", "format": {"type": "any_text", "excludes": [""]}}, "/format/excludes/0"),
    ({"type": "structural_tag", "format": {"type": "repeat", "min": 3, "max": 2, "content": ONE}}, "/format"),
    ({"type": "structural_tag", "format": {"type": "dispatch", "rules": [["a"]]}}, "/format/rules/0"),
    ({"type": "structural_tag", "structures": {}, "triggers": []}, "/structures"),
    ({"type": "structural_tag", "structures": [{"begin": "a", "end": "b"}], "triggers": ["a"]}, "/structures/0/schema"),
    ({"type": "structural_tag", "structures": [], "triggers": "a"}, "/triggers"),
    # a tag's schema that admits no value is refused, not left a dead branch
    ({"type": "structural_tag", "format": {"type": "or", "elements": [
        {"type": "const_string", "value": "x"}, {"type": "json_schema", "json_schema": False}]}},
     "/format/elements/1/json_schema"),
    # legacy specs are checked after their conversion to a format: errors name the legacy fields
    ({"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {}, "end": "</f>"}], "triggers": ["<g"]},
     "/structures/0/begin"),
    ({"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {}, "end": "</f>"},
                                               {"begin": "<fx>", "schema": {}, "end": "</f>"}],
      "triggers": ["<f", "<fx"]}, "/structures/1/begin"),
])
def test_malformed_specs_name_the_field(spec, path):
    with pytest.raises(InvalidConstraintError) as ei:
        structural_tag_to_grammar(spec)
    assert f"structural_tag {path}:" in str(ei.value)


@pytest.mark.parametrize("fmt,where", [
    ({"type": "token", "token": 5}, "/format"),
    ({"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}, "/format/style"),
    ({"type": "any_text", "max_tokens": 5}, "/format/max_tokens"),
    (tag({"type": "token", "token": "<f>"}, AT, "</f>"), "/format/begin"),
    ({"type": "any_text", "excludes": ["a"], "max_chars": 3}, "/format/max_chars"),
])
def test_unsupported_features_are_typed(fmt, where):
    with pytest.raises(UnsupportedFeatureError) as ei:
        structural_tag_to_grammar({"type": "structural_tag", "format": fmt})
    assert ei.value.where == where


@pytest.mark.parametrize("spec,error,where", [
    # a JSON Schema inside the tag: the schema's own pointer, after the tag's field
    ({"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "const_string", "value": "x"},
        {"type": "json_schema", "json_schema": {"properties": {"a": {"type": "string", "pattern": "[a-"}}}}]}},
     GrammarSyntaxError, "structural_tag /format/elements/1/json_schema/properties/a/pattern"),
    ({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {"type": "strin"}}},
     GrammarSyntaxError, "structural_tag /format/json_schema/type"),
    ({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {"type": "array", "uniqueItems": True}}},
     UnsupportedFeatureError, "structural_tag /format/json_schema/uniqueItems"),
    # the legacy spelling: the field the user wrote, not the converted format's
    ({"type": "structural_tag", "triggers": ["<f"], "structures": [
        {"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"},
        {"begin": "<f2>", "schema": {"type": "objec"}, "end": "</f2>"}]},
     GrammarSyntaxError, "structural_tag /structures/1/schema/type"),
    # a grammar inside the tag: the field, then the grammar's line and column
    ({"type": "structural_tag", "format": {"type": "grammar", "grammar": 'root ::= "a"\n  | b\n'}},
     GrammarSyntaxError, "structural_tag /format/grammar, line 2, column 5"),
])
def test_errors_inside_nested_constraints_are_located_from_the_tag(spec, error, where):
    """Regression: an error in a tag's schema or grammar named only the inner location (``/type``),
    not which of the tag's schemas it was in."""
    with pytest.raises(error) as ei:
        structural_tag_to_grammar(spec)
    assert ei.value.where == where, str(ei.value)
    assert where in str(ei.value)


def test_not_json_is_a_syntax_error():
    with pytest.raises(GrammarSyntaxError) as ei:
        structural_tag_to_grammar('{"type": "structural_tag", "format": ')
    assert ei.value.position > 0
    with pytest.raises(GrammarSyntaxError):
        legacy_to_format({"structures": [{"begin": "a", "end": "b", "schema": "{nope"}], "triggers": ["a"]})


def test_no_byte_sets_and_grammar_checks():
    g = structural_tag_to_grammar({"type": "structural_tag", "format": FORMATS["triggered_two"][0]})
    stack = list(g.rules.values())
    while stack:
        n = stack.pop()
        assert not isinstance(n, ByteSet)
        if isinstance(n, (Concat, Alt)):
            stack.extend(n.items)
        elif isinstance(n, Repeat):
            stack.append(n.item)
    assert not g.recursive_rules()


# -- the XGrammar adapter: both forms, token level ----------------------------------------------------------
@pytest.mark.engines
def test_xgrammar_adapter_accepts_both_forms(llama3_vocab):
    pytest.importorskip("xgrammar")
    from structgate import get_backend
    from structgate.backends.interface import Constraint

    b = get_backend("structgate-xgrammar", llama3_vocab)
    v = llama3_vocab
    fmt_spec = {"type": "structural_tag", "format": legacy_to_format(LEGACY)}
    for spec in (LEGACY, json.dumps(LEGACY), fmt_spec):
        g = b.compile(Constraint("structural_tag", spec))
        ok = 'Sure. <function=get_weather>{"city": "Paris", "days": 2}</function> Bye'
        m = g.matcher()
        assert m.advance(v.encode(ok)) and m.is_accepting()
        assert not g.matcher().advance(v.encode('<function=get_weather>{"city": 1}'))
        assert not g.matcher().advance(v.encode('<function=nope>'))
    with pytest.raises(InvalidConstraintError, match="/structures/0/end"):
        b.compile(Constraint("structural_tag", {"structures": [{"begin": "a", "schema": {}}], "triggers": ["a"]}))
