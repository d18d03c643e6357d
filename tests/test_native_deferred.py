"""Deferred subtrees of a rule's body (:data:`structgate.native.pushdown.DEFER`): with a lazy build,
a large concatenation, alternation or repeat inside the root rule is a placeholder state until a
closure first reaches it, so a compile builds the states its first mask needs and a generation the
properties it visits. Oracle: the same grammar built whole (``defer_min_size=0``): equal rows,
transitions and acceptance at every step of the valid instances and of random walks, and the plain
walk of each configuration (``direct_row``)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError
from structgate.native.pushdown import CALL, DEFER, DEFER_MIN_SIZE, RET, PushdownIndex, build_grammar_nfa

DATA = Path(__file__).parent / "data"


def _sample():
    out = []
    for line in (DATA / "maskbench_sample" / "sample.jsonl").read_text().splitlines():
        d = json.loads(line)
        texts = [t["data"] if isinstance(t["data"], str) else json.dumps(t["data"]) for t in d["tests"] if t["valid"]]
        out.append((d["id"], d["schema"], texts))
    props = {f"p{i}": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}},
                       "required": ["x"]} for i in range(12)}
    out += [
        ("array of objects", {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "number"}}, "required": ["name"]}}, ['[{"name": "a", "tags": ["x", "y"]}, {"name": "", "n": 1}]']),
        ("twelve nested objects", {"type": "object", "properties": props, "additionalProperties": False},
         ['{"p3": {"x": 1, "y": "q"}, "p11": {"x": -2}}']),
        ("anyOf of objects", {"anyOf": [{"type": "object", "properties": {"kind": {"const": k}, "v": {"type": "array"}},
                                         "required": ["kind"]} for k in ("alpha", "beta", "gamma")]},
         ['{"kind": "beta", "v": [1, {"a": null}]}']),
    ]
    return out


CASES = _sample()


def _indices(be, schema, vocab, *defer_min_sizes):
    g = be.to_grammar(Constraint("json_schema", schema))
    out = []
    for d in (0, *defer_min_sizes):
        gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=d)
        out.append(PushdownIndex(gn, vocab, max_depth=be.options.max_recursion_depth))
    return out


def _ids(row, vocab):
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])


def _whole_stress_default(schema, v):
    """Indices of ``schema`` built whole, with nearly every subtree deferred (4), and as a compile
    builds it (the default)."""
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    return _indices(be, schema, v, 4, DEFER_MIN_SIZE)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_deferred_build_gives_the_masks_of_the_whole_build(case, llama3_vocab):
    name, schema, texts = case
    v = llama3_vocab
    whole, stress, default = _whole_stress_default(schema, v)
    assert not whole.gnfa.deferred
    if len(whole.gnfa.nfa) > 200:
        assert stress.gnfa.deferred, "a large root rule should have been deferred"
    ra, rb = np.empty(whole.width, np.int32), np.empty(whole.width, np.int32)
    for deferred in (stress, default):
        _compare(name, texts, whole, deferred, v, ra, rb)
    # the placeholders keep the eager build's sharing (a subtree before a loop and the loop's
    # body copy continue into one state): no configuration is split in two
    assert len(default._cfg_keys) <= len(whole._cfg_keys) * 1.02 + 2, (len(default._cfg_keys), len(whole._cfg_keys))


def _compare(name, texts, whole, deferred, v, ra, rb):
    def same(sa: int, sb: int) -> None:
        whole.fill_row(sa, ra)
        deferred.fill_row(sb, rb)
        assert (ra == rb).all(), f"{name}: the deferred build's mask differs"
        assert (rb == deferred.direct_row(sb)).all()
        assert (ra == whole.direct_row(sa)).all()  # (both indices walk the same configurations)
        assert whole.is_accepting(sa) == deferred.is_accepting(sb)

    for text in texts:
        sa = sb = 1
        for t in v.encode(text):
            same(sa, sb)
            sa, sb = whole.next_state(sa, t), deferred.next_state(sb, t)
            assert (sa > 0) == (sb > 0) and sa > 0, f"{name}: a valid instance was cut at token {t}"
        same(sa, sb)
        assert deferred.is_accepting(sb)
    rng = random.Random(7)
    for _ in range(3):
        sa = sb = 1
        for _ in range(40):
            same(sa, sb)
            whole.fill_row(sa, ra)
            ids = [t for t in _ids(ra, v).tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            t = rng.choice(ids)
            sa, sb = whole.next_state(sa, t), deferred.next_state(sb, t)
            assert sa > 0 and sb > 0


def test_compile_builds_what_the_first_mask_needs(llama3_vocab):
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = next(c[1] for c in CASES if c[0] == "twelve nested objects")
    whole, deferred = _indices(be, schema, v, 32)
    whole.check_start()
    deferred.check_start()
    n_whole, n_first = len(whole.gnfa.nfa), len(deferred.gnfa.nfa)
    assert n_first * 2 < n_whole, (n_first, n_whole)
    # one property visited: its subtree is built, the other eleven are not
    s = 1
    for t in v.encode('{"p5": {"x": 3}}'):
        s = deferred.next_state(s, t)
        assert s > 0
    assert deferred.is_accepting(s)
    assert len(deferred.gnfa.nfa) * 3 < n_whole * 2, (len(deferred.gnfa.nfa), n_whole)
    assert sum(1 for k in deferred.gnfa.nfa.kind if k == DEFER) > 0


def test_a_deferred_subtree_past_the_state_cap_raises_a_typed_error_every_time(llama3_vocab):
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = next(c[1] for c in CASES if c[0] == "twelve nested objects")
    g = be.to_grammar(Constraint("json_schema", schema))
    gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=16)
    pi = PushdownIndex(gn, v)
    gn.nfa.max_states = len(gn.nfa) + 2  # the next subtree built outgrows the cap
    toks = v.encode('{"p0": {"x": 1}}')
    for _ in range(2):  # the cut-short build is redone (and fails the same way), never half-used
        with pytest.raises(CompileLimitError) as e:
            s = 1
            for t in toks:
                s = pi.next_state(s, t)
        assert e.value.limit_name == "max_nfa_states"
    gn.nfa.max_states = 2_000_000
    s = 1
    for t in toks:
        s = pi.next_state(s, t)
        assert s > 0
    assert pi.is_accepting(s)


@pytest.mark.parametrize("defer_min_size", [8, 32, DEFER_MIN_SIZE])
def test_repeated_elements_reuse_the_first_elements_configurations(llama3_vocab, defer_min_size):
    """The first element of an array and the loop's copy of it are one subtree with one
    continuation: deferred or not, they are one set of states, so the second element walks the
    configurations of the first (a placeholder that stood for the subtree must keep standing for
    it after it is built)."""
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "n": {"type": "number"}, "kind": {"enum": ["alpha", "beta", "gamma", "delta"]}}, "required": ["name"]}}
    one = '{"name": "a", "tags": ["x"], "n": 1, "kind": "beta"}'
    whole, deferred = _indices(be, schema, v, defer_min_size)
    for pi in (whole, deferred):
        s = 1
        for t in v.encode("[" + ", ".join([one] * 3) + "]"):
            s = pi.next_state(s, t)
            assert s > 0
        assert pi.is_accepting(s)
    assert len(deferred._cfg_keys) == len(whole._cfg_keys)


_WORDS = "|".join(f"word{i:03d}" for i in range(60))


@pytest.mark.parametrize("pattern", [
    f"({_WORDS})|[\\ud800-\\udfff]",  # a class of surrogates only: no UTF-8 encoding, matches nothing
    f"x({_WORDS}|ab[\\ud800-\\udfff])",  # ... at the end of a branch: its prefix is dead
    f"({_WORDS})|[^\\x00-\\U0010FFFF]",  # an empty class
])
def test_a_grammar_that_can_make_a_dead_state_is_not_deferred(llama3_vocab, pattern):
    """Whatever matches nothing makes a FAIL state and a liveness pass, which deferred
    placeholders would not survive (found by a review: a surrogate class hid every deferred
    branch, or left a dead prefix allowed). Oracle: the whole build and Python ``re``."""
    import re

    v = llama3_vocab
    be = get_backend("native", v, compile_cache_size=0)
    g = be.to_grammar(Constraint("regex", pattern))
    whole = PushdownIndex(build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=0), v)
    gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True)
    assert not gn.deferred
    pi = PushdownIndex(gn, v)
    ra, rb = np.empty(pi.width, np.int32), np.empty(pi.width, np.int32)
    text = "xword007" if pattern.startswith("x") else "word007"
    assert re.fullmatch(pattern, text)
    sa = sb = 1
    for t in v.encode(text):
        whole.fill_row(sa, ra)
        pi.fill_row(sb, rb)
        assert (ra == rb).all()
        sa, sb = whole.next_state(sa, t), pi.next_state(sb, t)
        assert sb > 0
    assert pi.is_accepting(sb)
    if pattern.startswith("x"):  # "xa" leads only into the dead branch: not allowed
        s = pi.next_state(1, v.encode("x")[0])
        pi.fill_row(s, rb)
        a = v.encode("a")
        assert len(a) == 1 and not (int(rb[a[0] >> 5]) >> (a[0] & 31)) & 1
    m = be.compile(Constraint("regex", pattern)).matcher()
    assert all(m.advance(t) for t in v.encode(text)) and m.is_accepting()


# -- deferred subtrees of called rules ------------------------------------------------------------
# A called rule's body (a recursive definition, a large $ref'd one used several times, the JSON
# value rules) is built when a configuration first calls it; its large subtrees are deferred as the
# root rule's are. Oracles: the whole build (``defer_min_size=0``: every rule's body built whole
# when first called), json.loads / jsonschema verdicts, and NFA state counts.

_NODE_PROPS = {"name": {"type": "string"}, **{f"f{i}": {"type": "integer"} for i in range(10)},
               "kind": {"enum": ["leaf", "branch", "root", "other"]},
               "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}
_ADDR = {"type": "object", "properties": {
    **{f"line{i}": {"type": "string"} for i in range(8)}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
    "n": {"type": "number"}, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}},
    "next": {"$ref": "#/$defs/addr"}}, "required": ["zip"]}
CALLED_CASES = [
    ("recursive tree", {"$defs": {"node": {"type": "object", "properties": _NODE_PROPS, "required": ["name"]}},
                        "$ref": "#/$defs/node"},
     ['{"name": "a", "kids": [{"name": "b", "f3": 1, "kids": [{"name": "c", "kind": "leaf"}]}, {"name": "d"}]}',
      '{"name": "", "f9": -4, "kids": []}']),
    ("recursive definition used three times",
     {"$defs": {"addr": _ADDR}, "type": "object", "properties": {
         "home": {"$ref": "#/$defs/addr"}, "work": {"$ref": "#/$defs/addr"},
         "past": {"type": "array", "items": {"$ref": "#/$defs/addr"}}}},
     ['{"home": {"zip": "12345", "next": {"zip": "00000", "tags": ["bb"]}}, "past": [{"zip": "99999", "ok": true}]}',
      '{"work": {"line3": "x", "zip": "54321", "n": 1.5e3}}']),
]


def _deferred_owners(pi):
    g = pi.gnfa
    return {g.owner[x] for x in range(len(g.nfa)) if g.nfa.kind[x] == DEFER}


@pytest.mark.parametrize("case", CALLED_CASES, ids=[c[0] for c in CALLED_CASES])
def test_called_rules_deferred_build_gives_the_masks_of_the_whole_build(case, llama3_vocab):
    name, schema, texts = case
    v = llama3_vocab
    whole, stress, default = _whole_stress_default(schema, v)
    ra, rb = np.empty(whole.width, np.int32), np.empty(whole.width, np.int32)
    for deferred in (stress, default):
        _compare(name, texts, whole, deferred, v, ra, rb)
    # a called rule's body was deferred (not only the root's), and its states stayed its own
    assert _deferred_owners(stress) - {0}, "a called rule should have deferred a subtree"
    g = stress.gnfa
    assert g.rule_deferred - {0}
    for x in range(len(g.nfa)):
        if g.nfa.kind[x] == RET:
            assert g.owner[x] == g.nfa.lo[x]
    assert not whole.gnfa.rule_deferred and not _deferred_owners(whole)


@pytest.mark.parametrize("case", CALLED_CASES, ids=[c[0] for c in CALLED_CASES])
def test_called_rules_verdicts_against_jsonschema(case, llama3_vocab):
    """Random edits of the valid instances: the compiled matcher (deferred subtrees in called
    rules at the default size) and the index with nearly every subtree deferred (size 4) accept
    what the whole build accepts, and nothing jsonschema rejects (the engine keeps the declared
    property order, so jsonschema is the oracle of soundness only)."""
    import jsonschema

    name, schema, texts = case
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    val = jsonschema.Draft202012Validator(schema)
    whole, stress = _indices(be, schema, v, 4)
    gr = be.compile(Constraint("json_schema", schema))
    rng = random.Random(name)
    edits = '{}[]",:0123456789 abeflnrstuxyz-.'
    n_valid = 0
    for k in range(250):
        s = list(rng.choice(texts))
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(s) + 1)
            op = rng.randrange(3)
            if op == 0 and s:
                del s[min(i, len(s) - 1)]
            elif op == 1:
                s.insert(i, rng.choice(edits))
            elif s:
                s[min(i, len(s) - 1)] = rng.choice(edits)
        s = "".join(s)
        try:
            inst = json.loads(s, parse_constant=lambda c: 1 / 0)
            exp = val.is_valid(inst)
        except (ValueError, ZeroDivisionError):
            exp = False
        m = gr.matcher()
        got = m.advance(v.encode(s)) and m.is_accepting()
        assert exp or not got, (name, s)
        n_valid += got
        verdicts = []
        for pi in (whole, stress):
            st = 1
            for t in v.encode(s):
                st = pi.next_state(st, t)
                if st <= 0:
                    break
            verdicts.append(st > 0 and pi.is_accepting(st))
        assert verdicts == [got, got], (name, s)
    assert 10 < n_valid < 240


_WORDS40 = sorted({"".join(random.Random(i).choices("defghijklmnopqrstuvwxyz", k=6)) for i in range(40)})
# the words lie past a 19-byte separator: no token's walk from the entry's start reaches them
_SEP = "#1#2#3#4#5#6#7#8#9#"
_NESTED = ('root ::= list\nlist ::= "[" ( entry ( "," entry )* )? "]"\n'
           f'entry ::= list | "a{_SEP}" words | "b{_SEP}" words "!" | "c{_SEP}" words "?"\n'
           "words ::= " + " | ".join(f'"{w}"' for w in _WORDS40) + "\n")


def test_a_called_rule_builds_what_the_first_mask_needs(llama3_vocab):
    """``entry`` (recursive, so called) holds three copies of a 40-word alternation: its first
    call builds the first bytes and placeholders, not the copies; a visited word builds one copy.
    Verdicts against a recursive regex (``regex`` module), masks against the whole build."""
    import regex

    v = llama3_vocab
    be = get_backend("native", v, compile_cache_size=0)
    g = be.to_grammar(Constraint("grammar", _NESTED))
    whole, lazy = (PushdownIndex(build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True,
                                                   defer_min_size=d), v) for d in (0, DEFER_MIN_SIZE))
    ra, rb = np.empty(whole.width, np.int32), np.empty(whole.width, np.int32)
    sa = sb = 1
    for t in v.encode("["):
        sa, sb = whole.next_state(sa, t), lazy.next_state(sb, t)
    whole.fill_row(sa, ra)
    lazy.fill_row(sb, rb)
    assert (ra == rb).all()
    n_whole, n_lazy = len(whole.gnfa.nfa), len(lazy.gnfa.nfa)
    assert n_lazy * 4 < n_whole, (n_lazy, n_whole)
    assert _deferred_owners(lazy) - {0}, "entry's word alternations should be deferred"
    for t in v.encode("b" + _SEP + _WORDS40[7] + "!,["):
        sa, sb = whole.next_state(sa, t), lazy.next_state(sb, t)
        assert sa > 0 and sb > 0
    assert len(lazy.gnfa.nfa) * 2 < n_whole, (len(lazy.gnfa.nfa), n_whole)
    words, sep = "|".join(_WORDS40), regex.escape(_SEP)
    pat = regex.compile(rf"(?(DEFINE)(?<list>\[(?:(?&entry)(?:,(?&entry))*)?\])"
                        rf"(?<entry>(?&list)|a{sep}(?:{words})|b{sep}(?:{words})!|c{sep}(?:{words})\?))(?&list)")
    rng = random.Random(3)
    alphabet = ["[", "]", ",", "a", "b", "c", "!", "?", "e", _SEP, _SEP[:-1]] + _WORDS40[:5]
    n_valid = 0
    for _ in range(300):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
        if rng.random() < 0.5:  # entries with their marks, perhaps wrong ones
            s = "[" + ",".join(rng.choice("abc") + _SEP + rng.choice(_WORDS40) + rng.choice(["", "!", "?"])
                               for _ in range(rng.randrange(3))) + "]"
        exp = pat.fullmatch(s) is not None
        st_w = st_l = 1
        for t in v.encode(s):
            whole.fill_row(st_w, ra)
            lazy.fill_row(st_l, rb)
            assert (ra == rb).all(), s
            st_w, st_l = whole.next_state(st_w, t), lazy.next_state(st_l, t)
            assert (st_w > 0) == (st_l > 0), s
            if st_w <= 0:
                break
        got = st_l > 0 and lazy.is_accepting(st_l)
        assert got == exp == (st_w > 0 and whole.is_accepting(st_w)), s
        n_valid += exp
    assert n_valid > 20


def test_a_called_rules_subtree_past_the_state_cap_raises_a_typed_error_every_time(llama3_vocab):
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = CALLED_CASES[0][1]
    g = be.to_grammar(Constraint("json_schema", schema))
    gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=16)
    pi = PushdownIndex(gn, v)
    text = '{"name": "a", "kids": [{"name": "b", "kids": [{"name": "q", "f7": 2}]}]}'
    toks = v.encode(text)
    s = 1
    for t in toks[:4]:  # into the called rule's body
        s = pi.next_state(s, t)
    gn.nfa.max_states = len(gn.nfa) + 2  # the next subtree built outgrows the cap
    for _ in range(2):  # the cut-short build is redone (and fails the same way), never half-used
        with pytest.raises(CompileLimitError) as e:
            s2 = s
            for t in toks[4:]:
                s2 = pi.next_state(s2, t)
        assert e.value.limit_name == "max_nfa_states"
    gn.nfa.max_states = 2_000_000
    for t in toks[4:]:
        s = pi.next_state(s, t)
        assert s > 0
    assert pi.is_accepting(s)


_KEYS = [f"key{i:02d}" for i in range(40)]
_JSONISH = r'''root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= key ws ":" ws value
key ::= ''' + " | ".join(f'"\\"{k}\\""' for k in _KEYS) + r'''
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" [a-z ]* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ ]*
'''


def _jsonish_ok(s: str) -> bool:
    def pairs(ps):
        if any(k not in _KEYS for k, _ in ps):
            raise ValueError
        return dict(ps)

    if s != s.strip(" ") and s.strip(" ") == "":
        return False
    try:
        x = json.loads(s, object_pairs_hook=pairs, parse_constant=lambda c: 1 / 0)
    except (ValueError, ZeroDivisionError):
        return False

    def strings_ok(y) -> bool:
        if isinstance(y, str):
            return all(c == " " or "a" <= c <= "z" for c in y)
        if isinstance(y, list):
            return all(map(strings_ok, y))
        if isinstance(y, dict):
            return all(map(strings_ok, y.values()))
        return True

    return strings_ok(x) and not any(c in s for c in "\t\n\r\\")


def test_recursive_grammar_with_large_called_rules_against_json_loads(llama3_vocab):
    """A JSON-like grammar whose recursive rules hold a 40-key alternation: deferred inside the
    called rules (``member``), built on first reach. Verdicts against ``json.loads`` (keys from
    the list, strings of [a-z ]) on random edits of valid documents; masks and transitions
    against the whole build along the edits' tokens."""
    v = llama3_vocab
    be = get_backend("native", v, compile_cache_size=0)
    g = be.to_grammar(Constraint("grammar", _JSONISH))
    idx = [PushdownIndex(build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=d), v)
           for d in (0, 8, DEFER_MIN_SIZE)]
    whole = idx[0]
    rng = random.Random(11)

    def doc(depth: int):
        r = rng.randrange(6 if depth < 3 else 3)
        if r == 0:
            return rng.choice([0, -12, 3.5, 1e-7, True, False, None])
        if r == 1:
            return "".join(rng.choice("ab cz") for _ in range(rng.randrange(4)))
        if r == 2:
            return rng.randrange(100)
        if r in (3, 4):
            return {rng.choice(_KEYS): doc(depth + 1) for _ in range(rng.randrange(4))}
        return [doc(depth + 1) for _ in range(rng.randrange(4))]

    ra, rb = np.empty(whole.width, np.int32), np.empty(whole.width, np.int32)
    n_valid = 0
    for k in range(150):
        s = list(json.dumps(doc(0)))
        for _ in range(rng.randrange(0, 3)):
            i = rng.randrange(len(s))
            s[i] = rng.choice('{}[]",:0 1ek-')
        s = "".join(s)
        exp = _jsonish_ok(s)
        n_valid += exp
        states = [1] * len(idx)
        for t in v.encode(s):
            whole.fill_row(states[0], ra)
            for pi, st in zip(idx[1:], states[1:]):
                pi.fill_row(st, rb)
                assert (ra == rb).all(), s
            states = [pi.next_state(st, t) for pi, st in zip(idx, states)]
            assert len({st > 0 for st in states}) == 1, s
            if states[0] <= 0:
                break
        got = [st > 0 and pi.is_accepting(st) for pi, st in zip(idx, states)]
        assert got == [exp] * len(idx), (s, got, exp)
    assert 30 < n_valid < 145
    for pi in idx[1:]:
        assert _deferred_owners(pi) - {0}, "member's key alternation should have been deferred"


def test_call_free_called_rules_stay_whole_and_share_their_walks(llama3_vocab):
    """A called rule that calls nothing (a string body used in several places) is built whole even
    when large, so its states stay one closed run and its walks go to the cache every grammar
    shares (:meth:`PushdownIndex._shared_key`). Masks equal the whole build's. (Rules that call
    defer their parts: the tests above.)"""
    v = llama3_vocab
    words = "|".join(f"w{i:03d}{'abcdefghijklmnopqrstuvwxyz'[i % 26] * 12}" for i in range(400))
    s = {"type": "string", "pattern": f"^(?:{words})$"}
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "a": s, "b": s, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["a"]}},
        "$ref": "#/$defs/node"}
    be = get_backend("native", v, compile_cache_size=0)
    g = be.to_grammar(Constraint("json_schema", schema))
    idx = [PushdownIndex(build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=d), v)
           for d in (0, DEFER_MIN_SIZE)]
    text = '{"a": "w007hhhhhhhhhhhh", "b": "w033hhhhhhhhhhhh", "kids": [{"a": "w001bbbbbbbbbbbb"}]}'
    states = [1, 1]
    rows = [np.empty(idx[0].width, np.int32) for _ in idx]
    for t in v.encode(text):
        for j, pi in enumerate(idx):
            pi.fill_row(states[j], rows[j])
        assert (rows[0] == rows[1]).all()
        states = [pi.next_state(st, t) for pi, st in zip(idx, states)]
        assert all(states), t
    lazy = idx[1]
    gn = lazy.gnfa
    nfa = gn.nfa
    call_free = []  # built called rules whose states make no call, with their state counts
    for r, (a, b) in gn.rule_span.items():
        if r and gn.rule_start[r] >= 0 and r not in gn.rule_deferred:
            if all(nfa.kind[x] not in (CALL, DEFER) for x in range(a, b)):
                call_free.append((r, b - a))
    big = [r for r, n in call_free if n >= DEFER_MIN_SIZE]  # the string body (400 words)
    assert big, (call_free, gn.rule_names)
    for r in big:  # one closed run of states: the walks inside it are shared
        assert lazy._rule_structure(r) is not None, gn.rule_names[r]
