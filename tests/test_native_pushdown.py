"""The native v2 pushdown engine (structgate.native.pushdown) against independent oracles:

* regular constraints: masks equal the v1 engine's eager minimal DFA + TokenIndex at every step of
  random walks (two independent constructions of the same language);
* recursive grammars: the stack-relative masks (context-independent walk + uncertain tokens checked
  against the real stack) equal one direct walk of the whole configuration at every step;
* free-form JSON: documents nested 30+ deep are accepted, ``json.loads`` decides random corruptions;
* limits and errors: the stack bound, left recursion, undefined rules, a small row budget.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structgate import Constraint, get_backend
from structgate.errors import GrammarSyntaxError, InvalidConstraintError
from structgate.native.ir import Grammar, alt, lit, opt, ref, seq, star
from structgate.native.pushdown import PushdownIndex, build_grammar_nfa
from structgate.native.regex import compile_regex, parse_regex
from structgate.native.token_index import TokenIndex


def _ids(row, vocab):
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])


def _index(rules, vocab, root="root", **kw):
    g = Grammar(rules, root).check()
    return PushdownIndex(build_grammar_nfa(g), vocab, **kw)


@pytest.mark.parametrize("rx", [r"[0-9]{1,3}", r"(a|b)*c", r"\w+@\w+\.com", r"[α-ω]+x", "(?:yes|no|maybe)",
                                r'"[^"]*"', r"(?:ab|a)(?:bc|c)*", r"[\u4e00-\u9fff]{2,4}", r"(?i)straße|ǅ",
                                # classes of several ASCII ranges (one multi-range NFA state each)
                                r"[ \t\n\r]{0,4}x", r"[^a-c\x00-\x1f]{1,3}", r"[ace]+[0-9a-fA-F]{2}"])
def test_regular_masks_equal_the_eager_dfa(rx, llama3_vocab):
    _walk_against_the_eager_dfa(rx, llama3_vocab, steps=25)


def _walk_against_the_eager_dfa(rx, v, steps):
    """Three random walks of ``steps`` tokens: at every step the pushdown index's row, accepting
    flag and non-EOS flag equal the eager DFA's TokenIndex's (two independent constructions)."""
    pi = _index({"root": parse_regex(rx)}, v)
    ti = TokenIndex(compile_regex(rx), v)
    a = np.empty(pi.width, np.int32)
    b = np.empty(pi.width, np.int32)
    rng = random.Random(rx)
    for walk in range(3):
        s1 = s2 = 1
        for _ in range(steps):
            pi.fill_row(s1, a)
            ti.fill_row(s2, b)
            assert (a == b).all(), f"{rx!r}: {np.count_nonzero(a != b)} words differ"
            assert pi.is_accepting(s1) == ti.is_accepting(s2)
            assert pi.has_non_eos(s1) == ti.has_non_eos(s2)
            ids = [t for t in _ids(b, v).tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            t = rng.choice(ids)
            s1, s2 = pi.next_state(s1, t), ti.next_state(s2, t)
            assert s1 > 0 and s2 > 0


@pytest.mark.parametrize("prune_min", [0, 1 << 40])
@pytest.mark.parametrize("rx", [r"(?:internationalization|interoperability|in)[ .]{0,3}x", r"[0-9]{1,3}",
                                r"(?: {1,40}|[a-z]{2,9})!"])
def test_every_level_gather_gives_the_eager_dfa_masks(rx, prune_min, llama3_vocab, monkeypatch):
    """The trie walk's three level gathers (dense over the level; sparse over the children of the
    live nodes; one live node's children as a slice) give the same masks as the eager DFA:
    ``PRUNE_MIN_NODES`` 0 takes the sparse gathers at every level (the slice wherever one node is
    live: a long literal, a run of spaces), 2^40 the dense gather at every level."""
    monkeypatch.setattr(PushdownIndex, "PRUNE_MIN_NODES", prune_min)
    _walk_against_the_eager_dfa(rx, llama3_vocab, steps=12)


def _json_rules(ws=r"[ \t\n\r]{0,4}"):
    w = parse_regex(ws)
    s = parse_regex(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
    num = parse_regex(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
    member = seq(ref("str"), w, lit(":"), w, ref("value"))
    return {
        "root": ref("obj"),
        "value": alt(lit("null"), lit("true"), lit("false"), num, ref("str"), ref("arr"), ref("obj")),
        "arr": seq(lit("["), w, opt(seq(ref("value"), star(seq(w, lit(","), w, ref("value"))), w)), lit("]")),
        "obj": seq(lit("{"), w, opt(seq(member, star(seq(w, lit(","), w, member)), w)), lit("}")),
        "str": s,
    }


def _accepts(pi, vocab, text):
    s = 1
    for t in vocab.encode(text):
        s = pi.next_state(s, t)
        if s == 0:
            return False
    return pi.is_accepting(s)


def test_stack_relative_masks_equal_a_direct_walk(llama3_vocab):
    v = llama3_vocab
    rules = _json_rules()
    g = Grammar(rules, "root", keep_calls={"str"}).check()
    pi = PushdownIndex(build_grammar_nfa(g), v)
    row = np.empty(pi.width, np.int32)
    rng = random.Random(1)
    opening = {b'{"', b"[", b"[{", b"{", b"[[", b' {"', b' ['}
    for doc in range(4):
        s = 1
        for _ in range(150):
            pi.fill_row(s, row)
            assert (row == pi.direct_row(s)).all(), f"doc {doc}: the stack-relative mask differs"
            bits = int(np.unpackbits(row.view(np.uint8)).sum())
            assert pi.n_allowed(s) == bits, f"doc {doc}: the row's count differs from its bits"
            ids = [t for t in _ids(row, v).tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            deep = [t for t in ids if v.token_bytes[t] in opening]
            t = rng.choice(deep) if deep and rng.random() < 0.35 else rng.choice(ids)
            s = pi.next_state(s, t)
            assert s > 0
    assert pi.n_states > 50


def test_deep_documents_and_their_corruptions(llama3_vocab):
    v = llama3_vocab
    pi = _index(_json_rules(), v)
    tree = {"leaf": 1}
    for i in range(30):
        tree = {"k": [tree, i, "x", None, True]}
    chain = None
    for i in range(50):
        chain = {"next": chain, "v": i}
    deep_any = {"a": {}}
    for _ in range(30):
        deep_any = {"a": [deep_any]}
    for doc in (tree, chain, deep_any):
        text = json.dumps(doc)
        assert _accepts(pi, v, text)
        assert not _accepts(pi, v, text[:-1]), "a truncated document is not complete"
    bad = json.dumps(tree).replace('"x"', "x", 1)  # a wrong value deep inside
    assert not _accepts(pi, v, bad)


def test_stack_bound_excludes_deeper_nesting(llama3_vocab):
    v = llama3_vocab
    pi = _index(_json_rules(), v, max_depth=12)
    ok = "[" * 5 + "]" * 5
    assert _accepts(pi, v, '{"a": ' + ok + "}")
    assert not _accepts(pi, v, '{"a": ' + "[" * 40 + "]" * 40 + "}")


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.text(max_size=6), _json_values, max_size=4), seed=st.integers(0, 2**16))
def test_json_object_property(doc, seed, llama3_vocab):
    """json_object accepts every json.dumps'ed object, and a random one-character corruption iff
    json.loads (strict, no NaN) still reads an object from it."""
    v = llama3_vocab
    g = get_backend("native", v).compile(Constraint.json_object())
    text = json.dumps(doc)

    def verdict(t: str) -> bool:
        m = g.matcher()
        return m.advance(v.encode(t)) and m.is_accepting()

    assert verdict(text)
    rng = random.Random(seed)
    i = rng.randrange(len(text))
    op = rng.choice("dri")
    ch = rng.choice('{}[]",:0123456789-+.eEtrufalsn\\ab')
    bad = text[:i] + text[i + 1:] if op == "d" else text[:i] + ch + text[i + (op == "r"):]

    def oracle(t: str) -> bool:
        if t != t.strip(" \t\n\r"):
            return False  # the grammar has no leading or trailing whitespace
        try:
            val = json.loads(t, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except (ValueError, RecursionError):
            return False
        return isinstance(val, dict)

    if bad != text and not any(c in bad for c in "\t\n\r"):
        assert verdict(bad) == oracle(bad), bad


def test_grammar_errors_are_typed(llama3_vocab):
    with pytest.raises(GrammarSyntaxError, match="left recursion"):
        Grammar({"root": alt(seq(ref("root"), lit("a")), lit("b"))}, "root").check()
    with pytest.raises(GrammarSyntaxError, match="undefined rule 'nope'"):
        Grammar({"root": seq(lit("a"), ref("nope"))}, "root").check()
    with pytest.raises(InvalidConstraintError, match="matches nothing"):
        Grammar({"root": seq(lit("a"), ref("loop")), "loop": seq(lit("b"), ref("loop"))}, "root").check()


def test_unproductive_alternatives_are_pruned(llama3_vocab):
    """A branch that can never complete must not be allowed (every state stays live)."""
    v = llama3_vocab
    pi = _index({"root": alt(lit("ok"), seq(lit("x"), ref("loop"))), "loop": seq(lit("y"), ref("loop"))}, v)
    allowed = {v.token_bytes[t] for t in _ids(pi.row(1), v)}
    assert b"ok" in allowed or b"o" in allowed
    assert not any(b.startswith(b"x") for b in allowed)


def test_row_is_read_only_and_small_budget_gives_the_same_masks(llama3_vocab):
    v = llama3_vocab
    big = _index(_json_rules(), v)
    small = _index(_json_rules(), v, row_budget_bytes=20 * ((v.vocab_size + 31) // 32) * 4)
    r = big.row(1)
    with pytest.raises(ValueError):
        r[0] = 0
    text = json.dumps({"a": [1, {"b": "c"}, [True, None]], "d": {"e": [[], {}]}})
    s1 = s2 = 1
    a = np.empty(big.width, np.int32)
    b = np.empty(big.width, np.int32)
    for t in v.encode(text):
        big.fill_row(s1, a)
        small.fill_row(s2, b)
        assert (a == b).all()
        s1, s2 = big.next_state(s1, t), small.next_state(s2, t)
    assert len(small._slot_state) <= 24  # the budget held (20 rows + the terminated row + slack)


def test_native_backend_recursive_schema_and_shared_refs(llama3_vocab):
    v = llama3_vocab
    b = get_backend("native", v)
    tree = {"type": "object", "properties": {"v": {"type": "integer"},
                                             "kids": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["v"], "additionalProperties": False}
    g = b.compile(Constraint.json_schema(tree))
    doc = {"v": 0}
    for i in range(30):
        doc = {"v": i, "kids": [doc]}

    def ok(t):
        m = g.matcher()
        return m.advance(v.encode(t)) and m.is_accepting()

    assert ok(json.dumps(doc))
    bad = json.loads(json.dumps(doc))
    node = bad
    for _ in range(20):
        node = node["kids"][0]
    node["v"] = "twenty"
    assert not ok(json.dumps(bad))
    # a $ref DAG that doubles at each level: 2**24 paths if expanded in place
    defs = {"d0": {"type": "integer"}}
    for i in range(1, 25):
        defs[f"d{i}"] = {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i-1}"}, "b": {"$ref": f"#/$defs/d{i-1}"}},
             "required": ["a", "b"], "additionalProperties": False}
    g2 = b.compile(Constraint.json_schema({"$defs": defs, "$ref": "#/$defs/d24"}))
    m = g2.matcher()
    assert m.advance(v.encode('{"a": {"a": {"a": ')) and not m.is_accepting()


def test_stack_relative_masks_respect_the_depth_bound(llama3_vocab):
    """Right recursion (llama.cpp's ``ws ::= ([ \\t\\n] ws)?``) pushes one frame per byte: a mask
    computed once for a frame must not allow, deep in the stack, tokens whose pushes the real stack
    would refuse (found by a random walk of json.gbnf: a whitespace-run token allowed, then rejected)."""
    v = llama3_vocab
    ws = alt(seq(parse_regex(r"[ \t\n]"), ref("ws")), lit(""))
    rules = {"root": seq(lit("{"), ref("item"), lit("}")), "item": seq(ref("ws"), opt(seq(lit("a"), ref("item")))),
             "ws": ws}
    pi = _index(rules, v, max_depth=24)
    row = np.empty(pi.width, np.int32)
    spaces = sorted((t for t, b in enumerate(v.token_bytes) if b and set(b) <= {0x20}), key=lambda t: len(v.token_bytes[t]))
    s = pi.next_state(1, v.encode("{")[0])
    a = [t for t in v.encode("a") if v.token_bytes[t] == b"a"][0]
    for step in range(30):
        pi.fill_row(s, row)
        assert (row == pi.direct_row(s)).all(), f"step {step}: the mask disagrees with a direct walk"
        allowed = set(_ids(row, v).tolist())
        for t in spaces:
            assert (t in allowed) == (pi.next_state(s, t) != 0)
        nxt = pi.next_state(s, a) if step % 3 else pi.next_state(s, spaces[0])
        if nxt == 0:
            break
        s = nxt


def test_tail_calls_take_no_frame(llama3_vocab):
    """Right recursion written as a tail call repeats without growing the stack (found by a new
    user: `item ::= "x" ("," item)?` stopped at 128 items, `ws ::= ([ ] ws)?` at max_recursion_depth
    spaces); a call that is not in tail position still counts against the bound."""
    v = llama3_vocab
    b = get_backend("native", v, max_recursion_depth=5)
    g = b.compile(Constraint.grammar('root ::= item\nitem ::= "x" ("," item)?', "gbnf"))
    for n in (1, 6, 300):
        m = g.matcher()
        assert m.advance(v.encode(",".join(["x"] * n))) and m.is_accepting(), n
    g2 = b.compile(Constraint.grammar('root ::= "a" ws "b"\nws ::= ([ ] ws)?', "gbnf"))
    m = g2.matcher()
    assert m.advance(v.encode("a" + " " * 40 + "b")) and m.is_accepting()
    nested = b.compile(Constraint.grammar('root ::= p\np ::= "(" p? ")"', "gbnf"))  # not a tail call
    ok = nested.matcher()
    assert ok.advance(v.encode("((()))")) and ok.is_accepting()
    deep = nested.matcher()
    assert not (deep.advance(v.encode("(" * 12 + ")" * 12)) and deep.is_accepting())
    row = np.empty(g2.token_index.width, np.int32)
    m = g2.matcher()
    for t in v.encode("a" + " " * 20 + "b"):
        g2.token_index.fill_row(m.state, row)
        assert (row == g2.token_index.direct_row(m.state)).all()
        assert m.advance(t)


def test_non_integer_token_ids_are_typed_errors(llama3_vocab):
    from structgate.errors import MatcherStateError

    m = get_backend("native", llama3_vocab).compile(Constraint.regex("ab")).matcher()
    for bad in ("ab", 1.5, [1, "x"], [True]):
        with pytest.raises(MatcherStateError):
            m.advance(bad)


def test_row_of_many_new_states(llama3_vocab):
    """``row()`` of states whose rows are computed by that call (the row store grows meanwhile)."""
    pi = _index({"root": parse_regex(r"[a-z]{0,150}")}, llama3_vocab)
    s, seen = 1, []
    for _ in range(120):
        r = np.array(pi.row(s))
        assert np.count_nonzero(r)
        seen.append(s)
        s = pi.step_bytes(s, b"a")
    for s in seen[::17]:
        assert (pi.direct_row(s) == pi.row(s)).all()


@pytest.mark.parametrize("coarse", [True, False])
def test_tokens_under_a_class_node_brute_force(coarse, llama3_vocab):
    """``_ClassTrie.tokens_under`` (one gather from the preorder layout) against the tokens whose
    byte-class path starts with the node's path, over random nodes of every depth."""
    from structgate.native.pushdown import STANDARD_BYTE_CLASSES, _classes_from_cuts, class_trie

    v = llama3_vocab
    # a JSON-string-like partition (few classes: long shared paths) and the standard one
    bc = (_classes_from_cuts([0x20, 0x22, 0x23, 0x5C, 0x5D, 0x80, 0xC0, 0xE0, 0xF0, 0xF8]) if coarse
          else STANDARD_BYTE_CLASSES)
    t = class_trie(v, bc)
    paths = [tuple(int(bc[b]) for b in v.token_bytes[i]) for i in range(v.n_tokens)]

    def node_path(g):
        d = int(np.searchsorted(t.level_base, g, side="right")) - 1
        out = []
        loc = g - int(t.level_base[d])
        while d >= 0:
            _b, par, cls, _bd = t.levels[d]
            out.append(int(cls[loc]))
            loc = int(par[loc])
            d -= 1
        return tuple(reversed(out))

    rng = random.Random(3)
    nodes = [rng.randrange(int(t.level_base[d]), int(t.level_base[d + 1]))
             for d in (0, 0, 1, 1, 2, 3, 5, 8, 12, 20) if d + 1 < len(t.level_base)]
    for g in nodes:
        p = node_path(g)
        want = sorted(i for i, q in enumerate(paths) if q[: len(p)] == p)
        want_strict = sorted(i for i in want if len(paths[i]) > len(p))
        assert sorted(t.tokens_under(np.array([g])).tolist()) == want
        assert sorted(t.tokens_under(np.array([g]), strict=True).tolist()) == want_strict
    both = np.array(nodes[:4])
    assert sorted(set(t.tokens_under(both).tolist())) == sorted(
        set().union(*[set(t.tokens_under(np.array([g])).tolist()) for g in nodes[:4]]))


def test_repeated_large_subtrees_are_built_once(llama3_vocab):
    """A large subtree used in several places (the same bounded string under many properties)
    becomes one called rule: the NFA holds it once, the language is unchanged (Python ``re`` on
    samples) and the masks equal one direct walk at every step."""
    import re

    from structgate.native.pushdown import share_repeated_subtrees

    v = llama3_vocab
    body = r'"[a-z]{0,5000}"'
    rx = "\\{" + ",".join(f'"k{i}":{body}' for i in range(6)) + "\\}"
    g = Grammar({"root": parse_regex(rx)}, "root").check()
    shared = share_repeated_subtrees(g, 4096)
    assert shared is not g and any(n.startswith("__shared") for n in shared.rules)
    assert share_repeated_subtrees(g, 10**9) is g
    gn = build_grammar_nfa(g)
    assert len(gn.nfa) < 25_000, len(gn.nfa)  # one copy of the 5000-repeat (~10k states), not six
    pi = PushdownIndex(gn, v)
    rng = random.Random(5)
    pat = re.compile(rx)
    for _ in range(30):
        vals = ['"' + "".join(rng.choice("abc") for _ in range(rng.choice([0, 3, 5000, 5001]))) + '"' for _ in range(6)]
        text = "{" + ",".join(f'"k{i}":{x}' for i, x in enumerate(vals)) + "}"
        assert pi.matches(text.encode()) == bool(pat.fullmatch(text)), text[:80]
    a = np.empty(pi.width, np.int32)
    s = 1
    for tok in v.encode('{"k0":"abc","k1":"' + "ab" * 20):
        pi.fill_row(s, a)
        assert (pi.direct_row(s) == a).all()
        s = pi.next_state(s, tok)
        assert s > 0


def test_popcount_counts_every_bit():
    from structgate.native.pushdown import _popcount, _popcount_lut

    rng = np.random.default_rng(0)
    for width in (1, 2, 7, 4008):
        row = rng.integers(-2**31, 2**31, size=width, dtype=np.int64).astype(np.int32)
        row[0] = -1  # the sign bit and every other
        want = int(np.unpackbits(row.view(np.uint8)).sum())
        assert _popcount(row) == want
        assert _popcount_lut(row) == want


def test_memory_size_counts_the_tables_and_grows_with_the_walk(llama3_vocab):
    v = llama3_vocab
    g = Grammar(_json_rules(), "root", keep_calls={"str"}).check()
    pi = PushdownIndex(build_grammar_nfa(g), v)
    before = pi.memory_size_bytes
    row = np.empty(pi.width, np.int32)
    s = 1
    for t in v.encode('{"a": [1, 2, {"b": "text"}], "c": null}'):
        pi.fill_row(s, row)
        s = pi.next_state(s, t)
        assert s > 0
    after = pi.memory_size_bytes
    arrays = pi._rows.nbytes + pi._table.nbytes + pi._accepting.nbytes + pi._slot.nbytes + pi._cfg_depth.nbytes
    assert after >= arrays + len(pi._closure_memo) * 100
    assert after > before
