"""Bounded and nested repeats of *nullable* bodies in regexes and grammars
(:func:`structgate.native.regex.parser.repeat_node`).

``(?:\\s|){0,700}`` is ``\\s{0,700}``, but built as written each of its 700 copies could be skipped
by an empty path: every configuration of the pushdown index held ~700 NFA items, and the first
token mask of the Llama 3 vocabulary took ~12 s (``(?:a?){0,500}``, ``((a|)|b?){3,900}``,
``(?:(?:x?)*){0,300}``: the same kind). A nullable body's repeat is now built as the repeat of the
body without its empty string (``x{m,n}`` of a nullable ``x`` is ``x'{0,n}``).

Oracles: Python's ``re.fullmatch`` on random strings (and on every string of a small alphabet up to
a length past the bounds), a random-regex comparison of the same kind, and the number of NFA items
a configuration holds along a walk (which the old build grew with the repeat's count).
"""
from __future__ import annotations

import itertools
import random
import re

import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.native.regex.parser import EMPTY, Concat, Repeat, parse_regex
from structgate.testing import tiny_vocabulary

#: (pattern, alphabet of the random strings); ``\\s`` is tried on ASCII blanks only (Python's
#: ``\\s`` also takes U+001C..U+001F, ours does not)
BIG = [
    (r"(?:(?:\s|)){0,700}", " \tab"),
    (r"(?:a?){0,500}", "ab"),
    (r"((a|)|b?){3,900}", "abc"),
    (r"(?:(?:x?)*){0,300}", "xy"),
    (r"(?:(?:a|)|(?:b|)){2,400}c", "abc"),
    (r"(?:a?b?){0,400}", "abc"),
    # (Python's backtracking takes minutes on this one: its oracle is the same language spelled
    # without nested quantifiers, ORACLE below)
    (r"(?:(?:a?)+){5,600}", "ab"),
    (r"(?:(?:a|){0,3}){0,300}", "ab"),
    (r"x(?:(?:\s|)){0,700}y", "xy \t"),
]
#: an equivalent pattern ``re`` matches quickly, where the pattern itself backtracks for minutes
ORACLE = {r"(?:(?:a?)+){5,600}": r"a*"}
#: the items a configuration may hold along the walks below (the old build: one per copy)
MAX_ITEMS = 16
#: repeats small enough to compare every string up to a length past their bounds
SMALL = [
    r"(?:a?){2,3}", r"(?:a?){0,3}", r"((a|)|b?){2,3}", r"(?:(?:a?)*){1,2}", r"(?:a?b?){0,2}",
    r"(?:(?:a|){0,2}){2,3}", r"(?:(?:a?)+){3}", r"(?:a?b?|c){1,2}", r"(?:(?:ab?)?){0,3}",
    r"(?:(?:a{1,2})?){0,2}", r"(?:(?:a{2}|)){0,2}", r"(?:|){3}", r"(?:(?:)){0,4}a",
]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab)


def _random_strings(rng: random.Random, alphabet: str, n: int, max_len: int) -> list[str]:
    out = ["", alphabet[0], alphabet[0] * max_len]
    for _ in range(n):
        k = rng.randint(0, max_len)
        # runs of one character are the interesting case: they reach the repeat's bounds
        if rng.random() < 0.5:
            out.append("".join(rng.choice(alphabet[:2]) for _ in range(k)))
        else:
            out.append("".join(rng.choice(alphabet) for _ in range(k)))
    return out


@pytest.mark.parametrize("pattern,alphabet", BIG, ids=[p for p, _ in BIG])
def test_big_nullable_repeats_match_re_and_stay_small(pattern, alphabet, vocab, native):
    compiled = native.compile(Constraint.regex(pattern))
    m = compiled.matcher()
    assert m.allowed_token_ids().size  # the first mask
    # a walk of single characters: the configuration's items stay few at every count
    index = compiled.token_index
    text = "x" if pattern.startswith("x") else ""
    body = alphabet[0]
    ids = vocab.encode(text)
    assert m.advance(ids)
    for _ in range(60):
        if not m.advance(vocab.encode(body)):
            break
        n_items = len(index._cfg_keys[m.state])
        assert n_items <= MAX_ITEMS, f"{pattern}: {n_items} items after {m.state}"
    rng = random.Random(pattern)
    oracle = re.compile(ORACLE.get(pattern, pattern))
    for s in _random_strings(rng, alphabet, 150, 40):
        assert accepts(compiled, vocab, s) == bool(oracle.fullmatch(s)), (pattern, s)


@pytest.mark.parametrize("pattern", SMALL)
def test_small_nullable_repeats_match_re_exhaustively(pattern, vocab, native):
    compiled = native.compile(Constraint.regex(pattern))
    for k in range(8):
        for tup in itertools.product("abc", repeat=k):
            s = "".join(tup)
            assert accepts(compiled, vocab, s) == bool(re.fullmatch(pattern, s)), (pattern, s)


def _random_regex(rng: random.Random, depth: int) -> tuple[str, tuple]:
    """A random regex over ``a``, ``b`` full of empty alternatives and nested quantifiers: its text
    and its tree (``("lit", c)``, ``("alt", parts)``, ``("cat", parts)``, ``("rep", part, lo, hi)``)
    for :func:`_ends`."""
    r = rng.random()
    if depth <= 0 or r < 0.2:
        leaf = rng.choice(["a", "b", "", "a?", "b*"])
        tree = {"a": ("lit", "a"), "b": ("lit", "b"), "": ("cat", ()), "a?": ("rep", ("lit", "a"), 0, 1),
                "b*": ("rep", ("lit", "b"), 0, None)}[leaf]
        return leaf, tree
    if r < 0.45:
        parts = [_random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3))]
        return "(?:" + "|".join(t for t, _ in parts) + ")", ("alt", tuple(x for _, x in parts))
    if r < 0.65:
        parts = [_random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3))]
        return "".join(t for t, _ in parts), ("cat", tuple(x for _, x in parts))
    text, tree = _random_regex(rng, depth - 1)
    lo = rng.randint(0, 3)
    lo, hi, q = rng.choice([(0, 1, "?"), (0, None, "*"), (1, None, "+"), (lo, lo, f"{{{lo}}}"),
                            (lo, lo + 2, f"{{{lo},{lo + 2}}}"), (lo, None, f"{{{lo},}}")])
    return "(?:" + text + ")" + q, ("rep", tree, lo, hi)


def _ends(tree, s: str, i: int, memo: dict | None = None) -> frozenset:
    """Brute force: the positions where a match of ``tree`` starting at ``i`` in ``s`` can end
    (Python's ``re`` backtracks for minutes on some of these nests, e.g. ``((b*){3,}){2}``)."""
    memo = {} if memo is None else memo
    key = (id(tree), i)
    if key not in memo:
        memo[key] = _ends_of(tree, s, i, memo)
    return memo[key]


def _ends_of(tree, s: str, i: int, memo: dict) -> frozenset:
    kind = tree[0]
    if kind == "lit":
        return frozenset([i + 1]) if s[i:i + 1] == tree[1] else frozenset()
    if kind == "alt":
        return frozenset().union(*(_ends(x, s, i, memo) for x in tree[1]))
    if kind == "cat":
        cur = frozenset([i])
        for x in tree[1]:
            cur = frozenset().union(*(_ends(x, s, j, memo) for j in cur)) if cur else cur
        return cur
    _, x, lo, hi = tree
    # more than lo + len(s) copies end nowhere new: all but len(s) of them matched the empty string
    top = lo + len(s) + 1 if hi is None else hi
    out: set = set()
    cur = frozenset([i])
    for k in range(top + 1):
        if k >= lo:
            out |= cur
        if not cur:
            break
        cur = frozenset().union(*(_ends(x, s, j, memo) for j in cur))
    return frozenset(out)


def test_random_nullable_nests_match_brute_force(vocab, native):
    rng = random.Random(20240617)
    strings = ["".join(t) for k in range(7) for t in itertools.product("ab", repeat=k)]
    for _ in range(150):
        pattern, tree = _random_regex(rng, 4)
        compiled = native.compile(Constraint.regex(pattern))
        for s in strings:
            assert accepts(compiled, vocab, s) == (len(s) in _ends(tree, s, 0)), (pattern, s)


def test_repeat_node_drops_the_empty_string_of_the_body():
    """The rewritten shapes themselves (what keeps the NFA small): no repeat of a surely nullable
    body is left."""
    from structgate.native.regex.parser import repeat_node, surely_nullable

    assert parse_regex(r"(?:(?:\s|)){0,700}") == parse_regex(r"\s{0,700}")
    assert parse_regex(r"(?:a?){0,500}") == parse_regex(r"a{0,500}")
    assert parse_regex(r"(?:(?:x?)*){0,300}") == parse_regex(r"x*")
    assert parse_regex(r"((a|)|b?){3,900}") == parse_regex(r"(?:a|b){0,900}")
    assert parse_regex(r"(?:|){3}") == EMPTY
    for pattern, _ in BIG:
        stack = [parse_regex(pattern)]
        while stack:
            n = stack.pop()
            if isinstance(n, Repeat):
                assert not surely_nullable(n.item), pattern
                stack.append(n.item)
            elif hasattr(n, "items"):
                stack.extend(n.items)
    assert repeat_node(Concat(()), 2, 5) == EMPTY


@pytest.mark.parametrize("text", [
    'root ::= ("a"?){0,500} "b"',
    'root ::= ([ \\t] | ""){0,700} "b"',
    'root ::= (("a" | "") ("c"?)){0,300} "b"',
])
def test_grammar_nullable_repeats(text, vocab, native):
    """The GBNF front end builds its repeats the same way (``ir.rep``)."""
    compiled = native.compile(Constraint.grammar(text, "gbnf"))
    index = compiled.token_index
    m = compiled.matcher()
    body = "a" if '"a"' in text else " "
    for _ in range(60):
        assert m.advance(vocab.encode(body))
        assert len(index._cfg_keys[m.state]) <= MAX_ITEMS
    assert m.advance(vocab.encode("b")) and m.is_accepting()
    py = {0: r"a{0,500}b", 1: r"[ \t]{0,700}b", 2: r"(?:a?c?){0,300}b"}[
        ['"a"?){0,500}' in text, '[ \\t]' in text, '"c"?' in text].index(True)]
    rng = random.Random(text)
    for s in _random_strings(rng, "ab \tc", 100, 30):
        assert accepts(compiled, vocab, s) == bool(re.fullmatch(py, s)), (text, s)


@pytest.mark.parametrize("depth", [300, 500])
def test_deep_nullable_nest_under_a_repeat_compiles(depth, vocab, native):
    """A nullable body nested deeper than the rewrite goes (``NONEMPTY_DEPTH_MAX``) is kept as it
    is below that depth: it compiles as before the rewrite existed (a 500-deep nest raised a
    RecursionError, typed as ``nesting_depth``, with it), with the language ``x[ac]*y``."""
    body = ""
    for _ in range(depth):
        body = "(?:a?" + body + "|c)"
    compiled = native.compile(Constraint.regex("x(?:" + body + ")*y"))
    oracle = re.compile("x[ac]*y")
    rng = random.Random(depth)
    cases = ["xy", "xaacy", "xcaay", "xby", "", "x", "y", "xay"] + [
        "x" + "".join(rng.choice("acb") for _ in range(rng.randint(0, 12))) + "y" for _ in range(40)]
    for s in cases:
        assert accepts(compiled, vocab, s) == bool(oracle.fullmatch(s)), s
