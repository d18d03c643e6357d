"""Oracles for the compile-time (TTFM) cuts of the slowest MaskBench schemas: each rewritten
analysis or parser step is compared with a plain definition of what it computes (a recursive
reference implementation written from the definition, Python's ``re``), on random inputs that
share subtrees as the hash-consing parser makes them share."""
from __future__ import annotations

import random

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
