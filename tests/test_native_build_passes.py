"""The grammar → NFA build's shortcuts (:func:`structgate.native.pushdown.build_grammar_nfa`), each
against the construction it replaces:

* *nothing to prune*: when every rule is productive and no empty byte set was built, the build sets
  every state live without the backward fixpoint; ``live`` must equal what :func:`_prune` computes,
  on JSON schemas, on grammars with unproductive rules and with empty sets (where the fixpoint runs);
* *multi-range byte states*: a byte set of several ranges is one NFA state; a byte-level grammar
  gives the masks of the same language written as a regex (the v1 engine's eager DFA);
* *one rule per body*: rules whose bodies are the same object (equal rule texts parse to one object)
  are built as one rule; the language and every token mask equal those of the same grammar with the
  bodies as distinct copies.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.native.ir import Grammar, Ref, alt, byteset, lit, plus, seq, star
from structgate.native.json_schema._grammar import parse_rule
from structgate.native.pushdown import PushdownIndex, _prune, build_grammar_nfa
from structgate.native.regex import compile_regex, parse_regex
from structgate.native.regex.parser import Alt, Chars, Concat, Repeat
from structgate.native.token_index import TokenIndex

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
    {"type": "array", "items": {"$ref": "#/$defs/n"}, "$defs": {"n": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}, "v": {"enum": ["x", 1, None]}}}}},
    {"anyOf": [{"type": "string", "maxLength": 50}, {"type": "number", "minimum": 3}]},
    {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 7}}, "additionalProperties": False},
]


def _grammars():
    out = []
    be = get_backend("native", _grammars.vocab, whitespace="flexible", additional_properties=True)
    for s in SCHEMAS:
        out.append(be.to_grammar(Constraint("json_schema", s)))
    # an unproductive recursive rule next to a productive root: its call states are dead
    out.append(Grammar({"root": alt(lit("a"), seq(lit("b"), Ref("loop"))), "loop": seq(lit("c"), Ref("loop"))},
                       "root").check())
    # an empty byte set (a FAIL state) in an alternative
    out.append(Grammar({"root": alt(lit("x"), seq(lit("y"), parse_regex("[^\\x00-\\U0010FFFF]")))}, "root").check())
    return out


@pytest.fixture(scope="module")
def grammars(llama3_vocab):
    _grammars.vocab = llama3_vocab
    return _grammars()


def test_live_states_equal_the_backward_fixpoint(grammars):
    shortcut = 0
    for g in grammars:
        # (repeats expanded: a counter is generated on demand, so its NFA is never whole, and the
        # fixpoint below needs every rule built)
        n = build_grammar_nfa(g, count_repeats_over=0)
        assert not n.lazy
        live = bytearray(n.live)
        _prune(n)
        assert n.live == live, g.root
        shortcut += all(live[1:])
    assert shortcut >= len(SCHEMAS)  # the shortcut ran on the JSON grammars


def _dup_grammar(shared: bool):
    text = "(?:[a-f][0-9]{1,3}|z(?:xy|yx){0,3})(?:,(?:[a-f][0-9]{1,3}|q)){0,4}"
    if shared:
        bodies = [parse_rule(text)] * 6
    else:  # six objects: each parse after the process-wide hash-consing table is emptied
        from structgate.native.regex import parser

        bodies = []
        for _ in range(6):
            parser._INTERN.clear()
            bodies.append(parse_regex(text, calls=True))
        assert len({id(b) for b in bodies}) == 6
    rules = {f"r{i}": b for i, b in enumerate(bodies)}
    rules["root"] = star(alt(*(seq(lit(f"<{i}>"), Ref(f"r{i}"), lit(";")) for i in range(6))))
    return Grammar(rules, "root").check()


def test_rules_with_one_body_are_one_rule_with_the_same_masks(llama3_vocab):
    assert parse_rule("(?:ab|c)*") is parse_rule("(?:ab|c)*")
    a = build_grammar_nfa(_dup_grammar(True), inline_max_size=16)
    b = build_grammar_nfa(_dup_grammar(False), inline_max_size=16)
    # root and the one merged rule; the copies are six rules (and the subtrees they share)
    assert a.rule_names == ["root", "r0"] and {f"r{i}" for i in range(6)} <= set(b.rule_names)
    pa, pb = PushdownIndex(a, llama3_vocab), PushdownIndex(b, llama3_vocab)
    rng = random.Random(5)
    for _ in range(60):
        parts = []
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(6)
            parts.append(f"<{i}>" + rng.choice(["a1", "f99,q", "zxyyx", "b7,c12,q,d3", "z", "a1234", "g1"]) + ";")
        s = "".join(parts)
        for t in (s, s[:-1], s + "<", s.replace(";", "", 1)):
            assert pa.matches(t.encode()) == pb.matches(t.encode()), t
    # masks along a walk of valid text agree at every step
    text = "<0>a1,q;<3>zxy;<5>f12,b3;"
    sa, sb = 1, 1
    for tok in llama3_vocab.encode(text):
        assert np.array_equal(pa.row(sa), pb.row(sb))
        sa, sb = pa.next_state(sa, tok), pb.next_state(sb, tok)
        assert sa > 0 and sb > 0


def test_multi_range_byte_sets_give_the_regex_masks(llama3_vocab):
    v = llama3_vocab
    cls = byteset([(0x41, 0x43), (0x61, 0x63), (0x20, 0x20)])
    g = Grammar({"root": seq(plus(cls), lit("."), star(byteset([(0x30, 0x31), (0x35, 0x35)])))}, "root").check()
    n = build_grammar_nfa(g)
    assert n.nfa.multi, "no multi-range state was built"
    pi, ti = PushdownIndex(n, v), TokenIndex(compile_regex(r"[A-Ca-c ]+\.[015]*"), v)
    rng = random.Random(3)
    for _ in range(4):
        s1 = s2 = 1
        for _ in range(12):
            assert np.array_equal(pi.row(s1), ti.row(s2))
            ids = [t for t in np.flatnonzero(np.unpackbits(ti.row(s2).view(np.uint8), bitorder="little")
                                             [: v.vocab_size]).tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            t = rng.choice(ids)
            s1, s2 = pi.next_state(s1, t), ti.next_state(s2, t)


# -- nullable / productive rules: the worklist fixpoint against the naive one -------------------------
def _naive_fixpoint(g: Grammar, leaf) -> set:
    """The textbook least fixpoint: sweep every rule until nothing changes, each body evaluated
    from scratch by structural recursion (no memo)."""
    def ev(n, found):
        if isinstance(n, Ref):
            return n.name in found
        if isinstance(n, Concat):
            return all(ev(c, found) for c in n.items)
        if isinstance(n, Alt):
            return any(ev(c, found) for c in n.items)
        if isinstance(n, Repeat):
            return n.min == 0 or ev(n.item, found)
        return leaf(n)

    found: set = set()
    changed = True
    while changed:
        changed = False
        for r in g.reachable():
            if r not in found and ev(g.rules[r], found):
                found.add(r)
                changed = True
    return found


def _random_grammar(rng: random.Random, n_rules: int) -> Grammar:
    names = [f"r{i}" for i in range(n_rules)]
    shared: list = []  # subexpressions reused by object across rules (the memo's shared nodes)

    def expr(depth):
        k = rng.random()
        if depth > 3 or k < 0.3:
            c = rng.random()
            if c < 0.35:
                return Ref(rng.choice(names))
            if c < 0.5:
                return Chars(())  # the empty set: unproductive
            if c < 0.6:
                return Concat(())  # the empty string
            if c < 0.7 and shared:
                return rng.choice(shared)
            lo = rng.randrange(97, 120)
            return Chars(((lo, lo + rng.randrange(3)),))
        if k < 0.55:
            e = Concat(tuple(expr(depth + 1) for _ in range(rng.randrange(1, 4))))
        elif k < 0.8:
            e = Alt(tuple(expr(depth + 1) for _ in range(rng.randrange(2, 4))))
        else:
            e = Repeat(expr(depth + 1), rng.choice([0, 1, 2]), rng.choice([None, 3]))
        if rng.random() < 0.3:
            shared.append(e)
        return e

    return Grammar({r: expr(0) for r in names}, "r0")


def test_nullable_and_productive_rules_equal_the_naive_fixpoint():
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        g = _random_grammar(rng, rng.randrange(2, 9))
        null = _naive_fixpoint(g, lambda x: not isinstance(x, Chars))
        prod = _naive_fixpoint(g, lambda x: bool(x.ranges) if isinstance(x, Chars) else True)
        assert g.nullable_rules() == null
        assert g.productive_rules() == prod
        checked += bool(null) + bool(prod)
    assert checked > 300  # the sample holds both kinds of rules


# -- lazy rule builds: the same masks as the eager build ------------------------------------------------
LAZY_SCHEMAS = [
    # shared definitions (called rules), one never reached by the walks below
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                      "required": ["x", "y"], "additionalProperties": False},
               "unused": {"type": "object", "properties": {"deep": {"type": "array", "items": {"$ref": "#/$defs/pt"}},
                                                            "name": {"type": "string", "pattern": "^[α-ω]{2,5}$"}}}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"},
                                      "c": {"type": "array", "items": {"$ref": "#/$defs/pt"}},
                                      "u": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/unused"}]}}},
    # recursion
    {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
     "required": ["v"]},
    # a byte range only a called rule has (the partition must still separate it), a long bounded string
    {"type": "object", "properties": {"p": {"$ref": "#/$defs/odd"}, "q": {"$ref": "#/$defs/odd"},
                                      "s": {"type": "string", "maxLength": 3000}},
     "$defs": {"odd": {"type": "string", "pattern": "^[\u00e0-\u00ef\u4e00-\u4e0f]+$"}}},
    # free-form values (the json value rule) beside listed properties
    {"type": "object", "properties": {"k": {"enum": ["x", 2, None]}}},
]


def _walk_rows(pa, pb, vocab, rng, steps=40):
    sa = sb = 1
    for _ in range(steps):
        ra, rb = pa.row(sa), pb.row(sb)
        assert np.array_equal(ra, rb)
        assert pa.is_accepting(sa) == pb.is_accepting(sb)
        ids = [t for t in np.flatnonzero(np.unpackbits(ra.view(np.uint8), bitorder="little")[: vocab.vocab_size]).tolist()
               if t not in vocab.eos_token_ids]
        if not ids:
            return
        t = rng.choice(ids)
        sa, sb = pa.next_state(sa, t), pb.next_state(sb, t)
        assert (sa > 0) == (sb > 0)


def test_lazy_rule_builds_give_the_eager_masks(llama3_vocab):
    from structgate.native.pushdown import _alphabet, _grammar_alphabet

    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True)
    rng = random.Random(5)
    left_unbuilt = 0
    for s in LAZY_SCHEMAS:
        g = be.to_grammar(Constraint("json_schema", s))
        # binary counters: a RepeatCounter (generated rules) would make both builds lazy
        eager = build_grammar_nfa(g, lazy_counters=False)
        lazy = build_grammar_nfa(g, lazy=True, lazy_counters=False)
        assert np.array_equal(_grammar_alphabet(g), _alphabet(eager.nfa))
        assert np.array_equal(lazy.byte_classes, eager.byte_classes)
        assert lazy.lazy and len(lazy.nfa) < len(eager.nfa)
        pe, pl = PushdownIndex(eager, v), PushdownIndex(lazy, v)
        for _ in range(6):
            _walk_rows(pl, pe, v, rng)
        # valid documents drive both the same way, token by token
        left_unbuilt += sum(1 for st in lazy.rule_start if st < 0)
    assert left_unbuilt > 0  # some rule was never needed, so never built


def test_lazy_build_of_a_rule_with_an_empty_set(llama3_vocab):
    """A called rule whose body holds an empty byte set (a FAIL state) and the grammar's only
    multi-range byte state, built lazily: its dead branch is pruned as the eager build's fixpoint
    prunes it, and the index reads the ranges the rule added after the index was made."""
    v = llama3_vocab
    # raw nodes: the seq()/alt() helpers would drop the empty set before any NFA is built
    dead = Concat((lit("y"), lit("q"), Chars(())))
    g = Grammar({"root": seq(lit("<"), Ref("r"), lit(">"), Ref("r")),
                 # a two-range class: a multi-range state that only the lazily built rule has
                 "r": Alt((lit("x"), dead, seq(lit("z"), Ref("r")), Chars(((0x61, 0x63), (0x6B, 0x6D)))))},
                "root").check()
    eager, lazy = build_grammar_nfa(g, inline_max_size=1), build_grammar_nfa(g, inline_max_size=1, lazy=True)
    assert lazy.lazy and eager.nfa._fail >= 0
    pe, pl = PushdownIndex(eager, v), PushdownIndex(lazy, v)
    rng = random.Random(2)
    for _ in range(8):
        _walk_rows(pl, pe, v, rng, steps=12)
    for t in ("<x>x", "<zzx>zx", "<yq>x", "<x>y", "<x>", "<b>l", "<zc>m", "<g>x", "<x>d"):
        assert pl.matches(t.encode()) == pe.matches(t.encode()) == (t in ("<x>x", "<zzx>zx", "<b>l", "<zc>m")), t


def _reference_facts(g: Grammar):
    """The facts :func:`_scan` gives, each by the separate walk it replaced: sizes by
    :func:`_size` per rule, parent counts by a pre-order walk, large repeats and generated rules by
    scanning every node, byte ranges through the NFA's own code-point → UTF-8 builder."""
    from structgate.native.ir import ByteSet, LazyRule, expr_leaves
    from structgate.native.pushdown import _alphabet, _size
    from structgate.native.regex.nfa import NFA

    memo: dict = {}
    size = sum(_size(g.rules[r], memo) for r in g.reachable())
    count: dict = {}
    large = lazy = False
    for body in {id(g.rules[r]): g.rules[r] for r in g.reachable()}.values():
        seen: set = set()  # parents counted body by body
        stack = [body]
        while stack:
            n = stack.pop()
            if not isinstance(n, (Concat, Alt, Repeat)) or id(n) in seen:
                continue
            seen.add(id(n))
            if isinstance(n, Repeat) and max(n.min, n.max or 0) >= 32:
                large = True
            for x in ((n.item,) if isinstance(n, Repeat) else n.items):
                if isinstance(x, (Concat, Alt, Repeat)):
                    count[id(x)] = count.get(id(x), 0) + 1
                    stack.append(x)
    lazy = any(isinstance(n, LazyRule) for n in expr_leaves([g.rules[r] for r in g.reachable()]))
    # every byte set, and those of the generated rules' symbols, built into one NFA
    nfa = NFA(multi_range=True)
    todo, autos = [g.rules[r] for r in g.reachable()], set()
    while todo:
        more = []
        for n in expr_leaves(todo):
            if isinstance(n, LazyRule) and id(n.auto) not in autos:
                autos.add(id(n.auto))
                more.extend(n.auto.symbols())
            elif isinstance(n, Chars) and n.ranges:
                nfa.chars(n.ranges, nfa.match)
            elif isinstance(n, ByteSet) and n.ranges:
                nfa.byte_ranges(n.ranges, nfa.match)
        todo = more
    return size, large, lazy, count, _alphabet(nfa), memo


def test_one_scan_gives_what_the_separate_passes_did(llama3_vocab):
    """``_scan`` (one walk for the size check, the counter and sharing passes, generated rules and
    the byte partition) against the separate walks it replaced, on schemas with shared
    definitions, recursion, large counted repeats, length-counted patterns (generated rules in the
    IR) and hand-written grammars; and the partition of a lazy build equals the eager build's."""
    from structgate.native.pushdown import _alphabet, _grammar_alphabet, _scan, count_large_repeats

    be = get_backend("native", llama3_vocab, whitespace="flexible", additional_properties=True)
    extra = [{"type": "string", "pattern": "^[α-ω]+( [α-ω]+)*$", "minLength": 2, "maxLength": 2000},  # LengthProduct
             {"type": "array", "items": {"type": "integer"}, "maxItems": 500}]
    gs = [be.to_grammar(Constraint("json_schema", s)) for s in SCHEMAS + LAZY_SCHEMAS + extra]
    gs += [Grammar({"root": seq(Ref("a"), Ref("a"), star(Ref("b"))), "a": alt(lit("xy"), byteset([(0x80, 0xBF), (0x0A, 0x0A)])),
                    "b": seq(lit("é"), Ref("a"))}, "root").check(),
           Grammar({"root": alt(lit("x"), seq(lit("y"), parse_regex("[^\\x00-\\U0010FFFF]")))}, "root").check()]
    seen_large = seen_lazy = 0
    for g in gs:
        size, large, lazy, count, alphabet, sizes = _reference_facts(g)
        for _ in range(2):  # the second time the rules' facts come from the process cache
            sc = _scan(g)
            assert (sc.size, sc.large_repeat, sc.lazy) == (size, large, lazy)
            assert sc.count == count
            for m in (0, 3, 40):  # only the nodes the sharing pass could pick
                memo: dict = {}
                sm = _scan(g, memo, share_min=m)
                assert (sm.size, sm.large_repeat, sm.lazy) == (size, large, lazy)
                assert sm.count == {k: c for k, c in count.items() if sizes[k] > m}
                assert all(memo[k] == sizes[k] for k in sm.count)
                assert all(memo[id(g.rules[r])] == sizes[id(g.rules[r])] for r in g.reachable()
                           if id(g.rules[r]) in sizes)
        assert np.array_equal(_grammar_alphabet(g), alphabet)
        seen_large += large
        seen_lazy += lazy
        # the rewrites move leaves and change none: the ranges hold for the rewritten grammar
        for lz in (False, True):
            g2, _ = count_large_repeats(g, lazy=lz and g.all_productive())
            assert np.array_equal(_grammar_alphabet(g2), _grammar_alphabet(g))
        if not lazy:
            eager = build_grammar_nfa(g, lazy_counters=False)
            assert np.array_equal(_grammar_alphabet(g), _alphabet(eager.nfa))
            assert np.array_equal(build_grammar_nfa(g, lazy=True, lazy_counters=False).byte_classes,
                                  eager.byte_classes)
    assert seen_large >= 2 and seen_lazy >= 1  # the corpus covers both kinds


def _uses_reference(body) -> dict:
    """The build's count of uses as it was computed before it was fused with the references walk
    (``pushdown._body_uses``): a reference under a repeat of more than one copy counts 2, a
    concatenation or alternation reached again is not walked again."""
    uses: dict = {}
    seen: set = set()
    stack = [(body, 1)]
    while stack:
        n, mult = stack.pop()
        if isinstance(n, Ref):
            uses[n.name] = uses.get(n.name, 0) + mult
        elif isinstance(n, Repeat):
            stack.append((n.item, 2 if n.max is None or n.max > 1 else mult))
        elif isinstance(n, (Concat, Alt)) and id(n) not in seen:
            seen.add(id(n))
            stack.extend((x, mult) for x in n.items)
    return uses


def _refs_reference(body) -> set:
    """The names of the references in ``body``, by a plain recursive walk."""
    if isinstance(body, Ref):
        return {body.name}
    if isinstance(body, Repeat):
        return _refs_reference(body.item)
    if isinstance(body, (Concat, Alt)):
        return set().union(*(_refs_reference(x) for x in body.items)) if body.items else set()
    return set()


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_one_walk_gives_the_references_and_the_build_count_of_uses(i, llama3_vocab):
    """``Grammar.uses`` / ``Grammar.references`` (one walk, :func:`structgate.native.ir.expr_uses`)
    against the two walks they replace, on every rule of JSON schema grammars and of a grammar with
    references under repeats of one and of several copies and shared subtrees."""
    grammars = [get_backend("native", llama3_vocab, whitespace="flexible", additional_properties=True)
                .to_grammar(Constraint.json_schema(json.dumps(SCHEMAS[i])))]
    shared = seq(lit("["), Ref("x"), lit("]"))
    grammars.append(Grammar({"root": alt(seq(shared, Repeat(Ref("x"), 0, 1), Repeat(shared, 2, 5)), shared,
                                         plus(seq(Ref("y"), Ref("x")))),
                             "x": lit("a"), "y": star(Ref("x"))}, "root"))
    for g in grammars:
        for r in g.rules:
            assert g.uses(r) == _uses_reference(g.rules[r]), r
            assert g.references(r) == _refs_reference(g.rules[r]), r
            assert set(g.uses(r)) <= g.references(r)
