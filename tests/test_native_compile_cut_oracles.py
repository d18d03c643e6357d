"""Oracles for the compile-time (TTFM) cuts of the slowest MaskBench schemas: each rewritten
analysis or parser step is compared with a plain definition of what it computes (a recursive
reference implementation written from the definition, Python's ``re``), on random inputs that
share subtrees as the hash-consing parser makes them share."""
from __future__ import annotations

import random
import re

import pytest

from structgate.native.ir import ByteSet, Ref
from structgate.native.regex import parser as rp
from structgate.native.regex.parser import Alt, Anchor, Chars, Concat, Repeat


def _nullable_reference(n) -> bool:
    """:func:`surely_nullable` from its definition: a concatenation of nullable items, an
    alternation with one, a repeat with ``min == 0`` or a nullable body; every leaf is not."""
    if isinstance(n, Concat):
        return all(_nullable_reference(x) for x in n.items)
    if isinstance(n, Alt):
        return any(_nullable_reference(x) for x in n.items)
    if isinstance(n, Repeat):
        return n.min == 0 or _nullable_reference(n.item)
    return False


def _random_nodes(rng: random.Random, count: int) -> list:
    """``count`` random expressions built bottom-up from a pool, so later nodes share earlier ones
    (some interned, some equal but distinct objects), with every leaf kind, empty concatenations
    and alternations, and repeats of every ``min``."""
    pool: list = [Chars(((97, 97),)), Chars(()), Ref("r"), ByteSet(((0, 5),)), Anchor("start"),
                  Concat(()), Alt(())]
    for _ in range(count):
        kind = rng.randrange(4)
        if kind == 0:
            node = Concat(tuple(rng.choice(pool) for _ in range(rng.randrange(0, 5))))
        elif kind == 1:
            node = Alt(tuple(rng.choice(pool) for _ in range(rng.randrange(0, 5))))
        elif kind == 2:
            lo = rng.choice((0, 0, 1, 2))
            node = Repeat(rng.choice(pool), lo, rng.choice((None, lo, lo + 3)))
        else:
            node = Chars(((rng.randrange(200), 300),))
        pool.append(rp.intern_node(node) if rng.random() < 0.5 else node)
    return pool


def _empty_when_reference(n, leaf=None) -> int:
    """:func:`empty_when`'s mask from its definition, walking every item (no short circuit)."""
    if isinstance(n, Concat):
        v = rp.W_ALL
        for x in n.items:
            v &= _empty_when_reference(x, leaf)
        return v
    if isinstance(n, Alt):
        v = 0
        for x in n.items:
            v |= _empty_when_reference(x, leaf)
        return v
    if isinstance(n, Repeat):
        return rp.W_ALL if n.min == 0 else _empty_when_reference(n.item, leaf)
    if isinstance(n, Anchor):
        return rp.W_START if n.kind == "start" else rp.W_END
    return 0 if leaf is None or isinstance(n, Chars) else leaf(n)


@pytest.mark.parametrize("seed", range(6))
def test_empty_when_with_short_circuits_equals_its_definition(seed):
    """The anchors' world masks with the short circuits at the absorbing values (a concatenation's
    0, an alternation's W_ALL), in random order, with and without a leaf function (a grammar's
    nullable rules), on shared random nests with both anchors."""
    rng = random.Random(100 + seed)
    nodes = _random_nodes(rng, 600) + [Anchor("end"), Concat((Anchor("end"), Anchor("start"))),
                                       Alt((Anchor("end"), Anchor("start")))]
    extra = []
    for _ in range(300):  # more anchors: the pool above has only ^
        extra.append(Alt((rng.choice(nodes + extra), Anchor("end"))) if rng.random() < 0.5
                     else Concat((Anchor(rng.choice(("start", "end"))), rng.choice(nodes + extra))))
    nodes += extra
    order = list(range(len(nodes)))
    rng.shuffle(order)
    rp._NULLABLE.clear()
    for i in order:
        assert rp.empty_when(nodes[i]) == _empty_when_reference(nodes[i]), nodes[i]

    def leaf(x):
        return rp.W_ALL if isinstance(x, Ref) else 0

    memo: dict = {}
    for i in reversed(order):
        assert rp.empty_when(nodes[i], leaf, memo) == _empty_when_reference(nodes[i], leaf), nodes[i]


@pytest.mark.parametrize("seed", range(6))
def test_surely_nullable_equals_its_definition(seed):
    """The short-circuit walk (a concatenation stops at its first item not surely nullable, an
    alternation at its first one that is) gives the definition's value on every node, asked in
    random order (so the process memo holds some nodes' values and not others') and deep nests."""
    rng = random.Random(seed)
    nodes = _random_nodes(rng, 600)
    order = list(range(len(nodes)))
    rng.shuffle(order)
    for i in order:
        assert rp.surely_nullable(nodes[i]) == _nullable_reference(nodes[i]), nodes[i]
    rp._NULLABLE.clear()
    for i in reversed(order):
        assert rp.surely_nullable(nodes[i]) == _nullable_reference(nodes[i]), nodes[i]
    deep = Chars(((97, 97),))
    for k in range(3000):  # no Python recursion: a 3,000-deep nest
        deep = Concat((Repeat(deep, 0, 1), Chars(((98, 98),)))) if k % 2 else Alt((deep, Concat(())))
    assert rp.surely_nullable(deep) is False  # (the last level is a concatenation ending in "b")
    assert rp.surely_nullable(Alt((Chars(((99, 99),)), deep, Concat(())))) is True
    assert rp.surely_nullable(Concat((Repeat(Chars(((97, 97),)), 0, None), Alt((deep, Concat(())))))) is True


# -- oneOf disjointness: the string automata memoised per compile ------------------------------------
#: string branches proven pairwise disjoint by their automata (patterns and length bounds)
_STRING_BRANCHES = [
    {"type": "string", "pattern": "^a[0-9]{2,4}$"},
    {"type": "string", "pattern": "^b[0-9]+$"},
    {"type": "string", "pattern": "^c(?:x|y)*$", "maxLength": 6},
    {"type": "string", "pattern": "^d", "minLength": 3},
    {"type": "string", "pattern": "^e[a-c]?$"},
    {"type": "string", "maxLength": 0},
    {"type": "string", "pattern": "^f[0-9]$"},
    {"type": "string", "pattern": "^f[0-9]?$", "maxLength": 1},
]


def _random_texts(rng: random.Random, n: int) -> list[str]:
    out = ["", "a12", "a1", "a12345", "b0", "b", "cxy", "cxyxyxy", "d", "dd", "ddd", "e", "eb", "ebb", "f1",
           "f12", "g"]
    for _ in range(n):
        out.append("".join(rng.choice("abcdefxy0129") for _ in range(rng.randrange(0, 8))))
    return out


def test_oneof_of_string_branches_matches_jsonschema():
    """A ``oneOf`` whose string branches the automata prove disjoint compiles as their ``anyOf``:
    its language is ``jsonschema``'s on every text tried, and each distinct automaton is built
    once per compile (the proofs of the 28 pairs used to build 56)."""
    import json

    import jsonschema

    from _matching import accepts
    from structgate import Constraint, get_backend
    from structgate.native.json_schema import _disjoint
    from structgate.testing import tiny_vocabulary

    schema = {"oneOf": _STRING_BRANCHES}
    built = []
    orig = _disjoint.DisjointMixin._string_dfa_uncached

    def counting(self, s):
        built.append(json.dumps(s, sort_keys=True))
        return orig(self, s)

    vocab = tiny_vocabulary()
    native = get_backend("native", vocab, compile_cache_size=0)
    _disjoint.DisjointMixin._string_dfa_uncached = counting
    try:
        g = native.compile(Constraint.json_schema(schema))
    finally:
        _disjoint.DisjointMixin._string_dfa_uncached = orig
    assert len(built) == len(set(built)) == len(_STRING_BRANCHES)
    validator = jsonschema.Draft202012Validator(schema)
    for text in _random_texts(random.Random(7), 300):
        doc = json.dumps(text)
        assert accepts(g, vocab, doc) == validator.is_valid(text), text


# -- build_grammar_nfa's rewrites touch only the rules that can change ---------------------------------
def _ir_key(node, memo=None):
    """A structural key of an IR expression (node identity left out), iterative."""
    from structgate.native.ir import LazyRule

    memo = {} if memo is None else memo
    stack = [(node, False)]
    while stack:
        x, done = stack.pop()
        if id(x) in memo:
            continue
        kids = x.items if isinstance(x, (Concat, Alt)) else (x.item,) if isinstance(x, Repeat) else ()
        if kids and not done:
            stack.append((x, True))
            stack.extend((k, False) for k in kids)
            continue
        if isinstance(x, Repeat):
            v = ("R", memo[id(x.item)], x.min, x.max)
        elif kids or isinstance(x, (Concat, Alt)):
            v = (type(x).__name__, tuple(memo[id(k)] for k in kids))
        elif isinstance(x, LazyRule):
            v = ("L", x.auto.name, x.state)
        else:
            v = x
        memo[id(x)] = v
    return memo[id(node)]


def _grammars(seed: int):
    """Random grammars of several rules: bounded strings long enough to be counted, a large
    subtree used in several rules and under several properties (shared), rules with neither."""
    from structgate.native.ir import Grammar
    from structgate.native.regex.parser import parse_regex

    rng = random.Random(seed)
    big = rf'"[a-z]{{0,{rng.choice((40, 900, 5000))}}}"'
    small = ['"x"', "[0-9]{1,3}", "(?:true|false)", '"[a-c]{0,4}"']
    texts = {}
    for i in range(6):
        members = []
        for j in range(rng.randrange(1, 5)):
            v = rng.choice([big, big, *small] + [f"(?&r{k})" for k in range(i + 1, 6)])
            members.append(f'"k{j}":{v}')
        texts[f"r{i}"] = "\\{" + ",".join(members) + "\\}"
    texts["root"] = "(?:" + "|".join(f"(?&r{i})" for i in range(6)) + f"|{big}(?:,{big})*)"
    rules = {name: parse_regex(t, calls=True) for name, t in texts.items()}
    return Grammar(rules, "root").check(), texts


@pytest.mark.parametrize("seed", range(8))
def test_rewrites_of_untouched_rules_are_skipped_exactly(seed):
    """:func:`count_large_repeats` given the scan's rule bodies with large repeats, and
    :func:`share_repeated_subtrees` given which bodies hold which counted nodes, rewrite only
    those rules: the grammars equal the rewrites of every rule (the path before, forced by an
    empty ``body_nodes`` / no ``large_bodies``), rule by rule and node for node."""
    from structgate.native import pushdown as pd

    g, _texts = _grammars(seed)
    for lazy in (False, True):
        scan = pd._scan(g, {}, share_min=64)
        fast, fast_counting = pd.count_large_repeats(g, 64, memo={}, lazy=lazy, large_bodies=scan.large_bodies)
        slow, slow_counting = pd.count_large_repeats(g, 64, memo={}, lazy=lazy)
        assert fast_counting == slow_counting
        assert list(fast.rules) == list(slow.rules)
        for name in slow.rules:
            assert _ir_key(fast.rules[name]) == _ir_key(slow.rules[name]), name
        for base in (g, fast):
            scan = pd._scan(base, {}, share_min=16)
            a = pd.share_repeated_subtrees(base, 16, {}, scan)
            assert base is not g or any(r.startswith("__shared") for r in a.rules)  # (a subtree is shared)
            scan.body_nodes = {}  # every body rewritten, as before
            b = pd.share_repeated_subtrees(base, 16, {}, scan)
            assert list(a.rules) == list(b.rules) and a.keep_calls == b.keep_calls
            for name in b.rules:
                assert _ir_key(a.rules[name]) == _ir_key(b.rules[name]), name
                # a rule the rewrite leaves alone is the very same object on both paths
                assert (a.rules[name] is base.rules.get(name)) == (b.rules[name] is base.rules.get(name)), name


@pytest.mark.parametrize("inline_max_size", [16, 64, 4096])
@pytest.mark.parametrize("seed", range(4))
def test_built_grammars_match_python_re(seed, inline_max_size):
    """The grammar NFA built with the skipping rewrites, and with the call-or-inline decisions
    taken on the scan's size where it already exceeds ``inline_max_size``, matches what Python's
    ``re`` matches on the rules' texts inlined (the grammars are not recursive)."""
    import re

    from structgate.native.pushdown import PushdownIndex, build_grammar_nfa
    from structgate.testing import tiny_vocabulary

    g, texts = _grammars(seed)

    def inline(name):
        return re.sub(r"\(\?&(\w+)\)", lambda m: "(?:" + inline(m.group(1)) + ")", texts[name])

    oracle = re.compile(inline("root"))
    gn = build_grammar_nfa(g, inline_max_size=inline_max_size, count_repeats_over=64)
    pi = PushdownIndex(gn, tiny_vocabulary())
    rng = random.Random(seed)
    for _ in range(60):
        n = rng.choice((0, 3, 40, 41, 900, 901, 5000, 5001))
        s = '"' + "".join(rng.choice("abz") for _ in range(n)) + '"'
        k = rng.randrange(4)
        cands = [s, f'{{"k0":{s}}}', f'{{"k0":{s},"k1":"x"}}', f'{{"k0":"x","k1":{s}}}', f"{s},{s}"[: len(s) + 1 + k]]
        for t in cands:
            assert pi.matches(t.encode()) == bool(oracle.fullmatch(t)), (seed, t[:60])


# -- the parser's scan for matching parentheses --------------------------------------------------------
#: the parser's scan before ``ab4a864``, one match per token: escapes, character classes, comments
#: (one token: their parentheses are not the pattern's) and parentheses (written out here, the
#: reference the one-match-per-parenthesis scan is checked against)
_TOKEN_SCAN = re.compile(r"\\.|\[\^?\]?(?:\\.|[^\]\\])*\]|\(\?#(?:\\.|[^)\\])*\)?|[()]", re.S)


def _scan_reference(pattern: str):
    """The scan before (one match per token of :data:`_TOKEN_SCAN`): (class start -> end, ``(`` ->
    ``)``)."""
    classes, groups, stack = {}, {}, []
    for m in _TOKEN_SCAN.finditer(pattern):
        t = m.group()
        if t == "(":
            stack.append(m.start())
        elif t == ")":
            if stack:
                groups[stack.pop()] = m.start()
        elif t[0] == "[":
            classes[m.start()] = m.end()
    return classes, groups


def _tricky_patterns(rng: random.Random, n: int) -> list[str]:
    pieces = ["(", ")", "(?:", "(?#c)", "(?#a\\)b)", "(?#open", "[", "]", "[^", "[]", "[]a]", "[^]]", "[\\]]",
              "[(]", "[)]", "\\", "\\(", "\\)", "\\[", "\\]", "\\\\", "a", "b", "|", "*", "?", "{2}", "[ \\t\\n\\r]{0,4}",
              '"key"', "(?&r)", "\n", "é"]
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40))))
    return out


def test_paren_scan_equals_token_scan():
    """The scan matched one token at a time; the new one matches one run up to each parenthesis
    (possessively) and the parser reads each class's end where it meets one: the same matching
    parentheses on every pattern, and at every class start of the token scan the same end."""
    rng = random.Random(11)
    from structgate.backends.interface import CompileOptions
    from structgate.native.json_schema.compiler import _compile_texts

    texts = _tricky_patterns(rng, 3000)
    schema = {"type": "object", "properties": {"a\\(b": {"type": "string", "pattern": "^[()\\]]+$"},
                                               "c[": {"enum": ["(x)", "[y]", "\\z"]},
                                               "d": {"type": "array", "items": {"type": "number", "minimum": 3}}},
              "required": ["c["]}
    c, root = _compile_texts(schema, CompileOptions(whitespace="flexible"))
    texts += [root, *c.rules.values()]
    for p in texts:
        classes, groups = _scan_reference(p)
        assert rp._scan(p) == groups, p
        for i, end in classes.items():
            m = rp._CLASS_TOKEN.match(p, i)
            assert m is not None and m.end() == end, (p, i)
            try:  # and the parser's own reading of the class ends there too
                assert rp._Parser(p, None)._parse_class(i, False)[1] == end, (p, i)
            except (rp.GrammarSyntaxError, rp.UnsupportedFeatureError):
                pass


# -- a new byte partition's class trie: its token order -------------------------------------------------
@pytest.mark.parametrize("extra_cuts", [(), (0x22, 0x23, 0x5C, 0x5D), tuple(range(0x80, 0xC0, 3)), (0x41, 0x5B, 0xE2, 0xE3)])
def test_class_trie_token_order_equals_stable_sort(llama3_vocab, extra_cuts):
    """The tokens ordered by class node (now one sort of keys made unique by the token id) and
    each node's start in that order (now running sums of counts) equal a stable sort and a
    binary search per node, as they were computed, for partitions refining the standard one."""
    import numpy as np

    from structgate.native import pushdown as pd
    from structgate.native.token_index import vocab_trie

    bc = pd._classes_from_cuts(set(pd._STD_CUT_SET) | set(extra_cuts) - {256})
    ct = pd._ClassTrie(vocab_trie(llama3_vocab), bc, llama3_vocab.n_tokens)
    tok_c = ct.token_cnode
    order = np.argsort(tok_c, kind="stable")
    assert np.array_equal(ct.tokens_by_node, order)
    assert np.array_equal(ct.node_tok_start, np.searchsorted(tok_c[order], np.arange(ct.n_nodes + 2)))
    assert ct.tokens_by_node.dtype == np.int64 and ct.node_tok_start.dtype == np.int64


# -- CalledRules: the same expression object found without hashing it -----------------------------------
def test_called_rules_states_equal_first_registration_by_equality():
    """Each call's state is the index of the first registered expression *equal* to it (objects
    repeated, equal copies, different ones, in random order), also on an unpickled copy (whose
    identity table holds the ids of another process's objects: never a false hit)."""
    import pickle

    from structgate.native.ir import CalledRules

    rng = random.Random(3)
    nodes = [n for n in _random_nodes(rng, 300) if isinstance(n, (Concat, Alt, Repeat, Chars))]
    copies = [pickle.loads(pickle.dumps(n)) for n in nodes[:80]]  # equal, distinct objects
    cr = CalledRules("t")
    seen: list = []
    calls = [rng.choice(nodes + copies) for _ in range(2000)]
    for e in calls:
        want = next((i for i, x in enumerate(seen) if x == e), None)
        if want is None:
            want = len(seen)
            seen.append(e)
        got = cr.call(e)
        assert got.auto is cr and got.state == want
    clone = pickle.loads(pickle.dumps(cr))
    for e in calls[:300] + copies:
        assert clone.call(e).state == next(i for i, x in enumerate(seen) if x == e)
