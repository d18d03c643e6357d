"""Repeats of regex bodies that match the empty string only *through an anchor*
(:func:`structgate.native.regex.parser.repeat_node`), and of long concatenations of nullable items.

``(?:^|\\s){0,700}`` is ``\\s{0,700}`` (``^`` holds only at the start of the text, so an empty copy
can only stand at the repeat's first gap), but built as written every one of its 700 copies could
be skipped at the start: the eager DFA of the anchored pattern took ~6-20 s to build
(``(?:\\s|^|){0,700}`` ~6-36 s). A body ``x`` that matches empty where an anchor condition ``E``
holds is split as ``x = x' | [E]`` (``x'``: its non-empty matches); ``x{m,n}`` is then
``x'{m,n} | [E] x'{0,m-1} | x'{0,m-1} [E]`` (an empty copy can stand only where ``E`` holds, the
first or the last gap), the first or last part dropped where ``E`` needs the start or the end.

A concatenation of more than 64 nullable items (``(?:a?a?...a?){0,300}`` with 65 items: ~80 s
for the first mask, 65 letters a..z: out of memory) was left as written: its non-empty form is now
built on a balanced tree of the items (depth O(log n), size O(n)).

Oracles: Python's ``re.fullmatch`` (with our ``$`` written ``\\Z``: the engine's ``$`` is the true
end of the text, ECMAScript's, not "before a final newline") on every string of a small alphabet
with a newline up to a length past the bounds and on random strings; a brute-force matcher of
random nests with anchors; the rewritten shapes (no repeat of a body that may match empty).
"""
from __future__ import annotations

import itertools
import random
import re

import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.native.regex.parser import Alt, Concat, Repeat, parse_regex
from structgate.testing import tiny_vocabulary


def _py(pattern: str) -> str:
    """The pattern for Python's ``re``: our ``$`` is ``\\Z`` there (``^`` is ``\\A`` outside
    multiline mode in both)."""
    return pattern.replace("$", r"\Z")


#: (pattern, alphabet); ``\\s`` on ASCII blanks and newline only (Python's also takes U+001C..1F)
BIG = [
    (r"(?:\s|^|){0,700}", " \ta\n"),
    (r"(?:^|\s){0,700}", " \ta\n"),
    (r"(?:\s|$){0,700}", " a\n"),
    (r"(?:^|\s|$){3,700}", " a\n"),
    (r"x(?:^|\s){2,700}", "x a\n"),
    (r"(?:\s|^){5,700}y", " y\n"),
    (r"(?:\s|$){5,700}y", " y\n"),
    (r"(?:^$|a){3,600}", "ab\n"),
    (r"(?:(?:^|a)(?:$|b)){2,500}", "ab\n"),
    (r"(?:(?:^|a){0,3}|b){4,400}", "ab\n"),
    (r"(?:" + "a?" * 65 + r"){0,300}", "ab"),
    (r"(?:" + "".join(f"{chr(97 + i % 26)}?" for i in range(65)) + r"){0,300}", "abcz"),
    (r"(?:" + "a?b?" * 50 + r"|c){2,300}", "abc"),
    (r"(?:" + "a?" * 70 + r"^){3,10}", "ab"),
]
#: an equivalent pattern ``re`` matches quickly, where the pattern itself backtracks for minutes
ORACLE = {
    r"(?:" + "a?" * 65 + r"){0,300}": r"a{0,19500}",
    r"(?:" + "".join(f"{chr(97 + i % 26)}?" for i in range(65)) + r"){0,300}":
        r"(?:" + "".join(f"{chr(97 + i % 26)}?" for i in range(65)) + r")*",
    r"(?:" + "a?b?" * 50 + r"|c){2,300}": r"[abc]*",
    # (a body whose a's are followed by ^ matches only at the start, and empty)
    r"(?:" + "a?" * 70 + r"^){3,10}": r"",
}

#: small shapes, compared on every string of ``ALPHA`` up to ``SMALL_LEN`` characters
SMALL = [
    r"(?:^|a){0,3}", r"(?:^|a){2,3}", r"(?:a|^){3}", r"(?:a|$){2,3}", r"(?:$|a){1,2}b",
    r"b(?:^|a){2,3}", r"(?:^|a){2,3}b", r"(?:^|a|$){2,4}", r"(?:^$|a){2,3}", r"(?:^$|a){0,2}",
    r"(?:(?:^|a)(?:b|$)){2,3}", r"(?:(?:^|a){2}|b){2,3}", r"(?:(?:a|^){1,2}){2,3}",
    r"(?:(?:a?)^){2,3}", r"(?:a?$){2}", r"(?:^a?|b){2,3}", r"(?:a|\n|^){2,3}", r"a(?:$|\n){2}",
    r"(?:(?:^|a)+){2,3}", r"(?:(?:^|a)*b?){2,3}", r"(?:^|a)?(?:$|b){2,3}",
    r"(?:(?:^|a)(?:$|b)|c){0,3}", r"(?:(?:$|a)(?:^|b)){1,3}",
]
ALPHA = "ab\n"
SMALL_LEN = 6
#: a repeat of these many items or more (``(?:a?b?...)``) is built on a tree of the items
LONG = [70, 129, 400]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab)


def _random_strings(rng: random.Random, alphabet: str, n: int, max_len: int) -> list[str]:
    out = ["", alphabet[0], alphabet[0] * max_len, "\n"]
    for _ in range(n):
        k = rng.randint(0, max_len)
        pool = alphabet[:2] if rng.random() < 0.5 else alphabet
        out.append("".join(rng.choice(pool) for _ in range(k)))
    return out


def _repeats_of_nullable(node) -> list:
    """The repeats (with more than one copy) under ``node`` whose body may match the empty string
    somewhere (after an anchor too): what the rewrite leaves none of."""
    from structgate.native.regex.parser import empty_when

    out, stack, seen = [], [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Repeat):
            if (n.max is None or n.max > 1) and empty_when(n.item):
                out.append(n)
            stack.append(n.item)
        elif isinstance(n, (Concat, Alt)):
            stack.extend(n.items)
    return out


@pytest.mark.parametrize("pattern,alphabet", BIG, ids=[p[:40] for p, _ in BIG])
def test_big_anchor_nullable_repeats_are_rewritten_and_match_re(pattern, alphabet, vocab, native):
    assert not _repeats_of_nullable(parse_regex(pattern)), pattern
    compiled = native.compile(Constraint.regex(pattern))
    assert compiled.matcher().allowed_token_ids().size
    oracle = re.compile(_py(ORACLE.get(pattern, pattern)))
    rng = random.Random(pattern)
    for s in _random_strings(rng, alphabet, 120, 40):
        assert accepts(compiled, vocab, s) == bool(oracle.fullmatch(s)), (pattern, s)


@pytest.mark.parametrize("pattern", SMALL)
def test_small_anchor_nullable_repeats_match_re_exhaustively(pattern, vocab, native):
    compiled = native.compile(Constraint.regex(pattern))
    oracle = re.compile(_py(pattern))
    for k in range(SMALL_LEN + 1):
        for tup in itertools.product(ALPHA, repeat=k):
            s = "".join(tup)
            assert accepts(compiled, vocab, s) == bool(oracle.fullmatch(s)), (pattern, s)
    assert not _repeats_of_nullable(parse_regex(pattern)), pattern


def test_anchor_repeat_shapes():
    """The rewritten forms themselves."""
    S = r"[\t-\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
    assert parse_regex(r"(?:^|\s){0,700}") == parse_regex(S + "{0,700}")
    assert parse_regex(r"(?:\s|^|){0,700}") == parse_regex(S + "{0,700}")
    assert parse_regex(r"(?:^|a){3,5}") == parse_regex(r"a{3,5}|^a{0,2}")
    assert parse_regex(r"(?:$|a){3,5}") == parse_regex(r"a{3,5}|a{0,2}$")
    assert parse_regex(r"(?:^$|a){3,5}") == parse_regex(r"a{3,5}|^$")
    assert parse_regex(r"(?:^|a){1,}") == parse_regex(r"a+|^")
    # the context-free part of the rewrite is unchanged
    assert parse_regex(r"(?:(?:\s|)){0,700}") == parse_regex(S + "{0,700}")


def _random_regex(rng: random.Random, depth: int) -> tuple[str, tuple]:
    """A random regex over ``a``, ``b`` with anchors, empty alternatives and nested quantifiers:
    its text and its tree for :func:`_ends`."""
    r = rng.random()
    if depth <= 0 or r < 0.2:
        leaf = rng.choice(["a", "b", "", "a?", "b*", "^", "$", "^", "$"])
        tree = {"a": ("lit", "a"), "b": ("lit", "b"), "": ("cat", ()), "a?": ("rep", ("lit", "a"), 0, 1),
                "b*": ("rep", ("lit", "b"), 0, None), "^": ("anchor", "start"), "$": ("anchor", "end")}[leaf]
        return leaf, tree
    if r < 0.45:
        parts = [_random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3))]
        return "(?:" + "|".join(t for t, _ in parts) + ")", ("alt", tuple(x for _, x in parts))
    if r < 0.65:
        parts = [_random_regex(rng, depth - 1) for _ in range(rng.randint(2, 3))]
        return "(?:" + "".join(t for t, _ in parts) + ")", ("cat", tuple(x for _, x in parts))
    text, tree = _random_regex(rng, depth - 1)
    lo = rng.randint(0, 3)
    lo, hi, q = rng.choice([(0, 1, "?"), (0, None, "*"), (1, None, "+"), (lo, lo, f"{{{lo}}}"),
                            (lo, lo + 2, f"{{{lo},{lo + 2}}}"), (lo, None, f"{{{lo},}}")])
    return "(?:" + text + ")" + q, ("rep", tree, lo, hi)


def _ends(tree, s: str, i: int, memo: dict) -> frozenset:
    """Brute force: where a match of ``tree`` starting at ``i`` of ``s`` can end (``^``: ``i == 0``,
    ``$``: ``i == len(s)``)."""
    key = (id(tree), i)
    if key in memo:
        return memo[key]
    kind = tree[0]
    if kind == "lit":
        out = frozenset([i + 1]) if s[i:i + 1] == tree[1] else frozenset()
    elif kind == "anchor":
        out = frozenset([i]) if (i == 0 if tree[1] == "start" else i == len(s)) else frozenset()
    elif kind == "alt":
        out = frozenset().union(*(_ends(x, s, i, memo) for x in tree[1]))
    elif kind == "cat":
        cur = frozenset([i])
        for x in tree[1]:
            cur = frozenset().union(*(_ends(x, s, j, memo) for j in cur)) if cur else cur
        out = cur
    else:
        _, x, lo, hi = tree
        top = lo + len(s) + 1 if hi is None else hi
        acc: set = set()
        cur = frozenset([i])
        for k in range(top + 1):
            if k >= lo:
                acc |= cur
            if not cur:
                break
            cur = frozenset().union(*(_ends(x, s, j, memo) for j in cur))
        out = frozenset(acc)
    memo[key] = out
    return out


def test_random_anchor_nests_match_brute_force(vocab, native):
    from structgate.errors import GrammarSyntaxError, InvalidConstraintError

    rng = random.Random(20261206)
    strings = ["".join(t) for k in range(6) for t in itertools.product("ab", repeat=k)]
    done = 0
    while done < 150:
        pattern, tree = _random_regex(rng, 4)
        try:
            compiled = native.compile(Constraint.regex(pattern))
        except GrammarSyntaxError:  # a quantified anchor ("^*"): Python's re refuses it too
            continue
        except InvalidConstraintError:  # matches no string at all ("a^"): nor does the brute force
            for n in range(8):
                for s in map("".join, itertools.product("ab", repeat=n)):
                    assert len(s) not in _ends(tree, s, 0, {}), (pattern, s)
            continue
        done += 1
        for s in strings:
            assert accepts(compiled, vocab, s) == (len(s) in _ends(tree, s, 0, {})), (pattern, s)


def _depth(node) -> int:
    """Nesting depth of an AST (iterative, memoised on shared subtrees)."""
    memo: dict[int, int] = {}
    stack = [(node, False)]
    while stack:
        n, done = stack.pop()
        kids = (n.item,) if isinstance(n, Repeat) else n.items if isinstance(n, (Concat, Alt)) else ()
        if done:
            memo[id(n)] = 1 + max((memo[id(x)] for x in kids), default=0)
        elif id(n) not in memo:
            stack.append((n, True))
            stack.extend((x, False) for x in kids if id(x) not in memo)
    return memo[id(node)]


@pytest.mark.parametrize("k", LONG)
def test_long_nullable_concatenation_under_a_repeat(k, vocab, native):
    """``(?:a?b?...){2,300}`` of ``k`` nullable items (past the 64 of the flat form): rewritten
    (a counter of its non-empty form), shallow, and the language of ``re``."""
    body = "".join(f"{'ab'[i % 2]}?" for i in range(k))
    pattern = f"x(?:{body}){{2,300}}y"
    node = parse_regex(pattern)
    assert not _repeats_of_nullable(node)
    assert _depth(node) <= 200
    compiled = native.compile(Constraint.regex(pattern))
    oracle = re.compile(r"x[ab]*y")  # k >= 2 items a?b?: every string of a and b, in up to 300 copies
    rng = random.Random(k)
    for s in ["xy", "xaby", "xbay", "xaay", "xcy", "x", "y"] + [
            "x" + "".join(rng.choice("ab") for _ in range(rng.randint(0, 12))) + rng.choice(["y", "", "a"])
            for _ in range(30)]:
        assert accepts(compiled, vocab, s) == bool(oracle.fullmatch(s)), s


def test_concatenation_past_the_item_limit_is_left_as_written(vocab, native):
    """Past ``NONEMPTY_CONCAT_ITEMS_MAX`` items a nullable concatenation's repeat is built as
    written (a configuration inside it holds O(n) items whatever its form: the rewrite would trade
    ``max_nfa_states`` for minutes or memory): the same language, and a typed refusal for a large
    count, as before."""
    from structgate.errors import CompileLimitError
    from structgate.native.regex.parser import NONEMPTY_CONCAT_ITEMS_MAX

    k = NONEMPTY_CONCAT_ITEMS_MAX + 1
    body = "".join(f"{'ab'[i % 2]}?" for i in range(k))
    assert _repeats_of_nullable(parse_regex(f"x(?:{body}){{0,3}}y"))
    assert not _repeats_of_nullable(parse_regex(f"x(?:{body[:-2]}){{0,3}}y"))
    compiled = native.compile(Constraint.regex(f"x(?:{body}){{0,3}}y"))
    for s in ["xy", "xaby", "xbay", "xaay", "xcy", "x" + "ab" * 20 + "y"]:
        assert accepts(compiled, vocab, s) == bool(re.fullmatch(r"x[ab]*y", s)), s
    with pytest.raises(CompileLimitError) as e:
        native.compile(Constraint.regex(f"x(?:{body}){{0,3000}}y"))
    assert e.value.limit_name == "max_nfa_states"
