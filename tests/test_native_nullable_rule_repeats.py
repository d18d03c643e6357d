"""Large counted repeats of a *reference to a nullable rule* (:func:`structgate.native.pushdown.
count_large_repeats`).

``root ::= x{0,700}; x ::= "a"? "b"?``: the regex parser's rewrite (``repeat_node``) cannot see
that ``x`` matches the empty string when the repeat is built, so the repeat was expanded as
written: each of the 700 copies could be skipped by an empty path (the first Llama 3 mask ~0.5-0.9
s; ``x{3000000}`` over ``max_nfa_states``). The counter pass knows the grammar's nullable rules: a
large repeat ``x{m,n}`` of a nullable ``x`` is ``x'{0,n}``, ``x'`` its empty-free form, with an
empty-free rule ``__nonempty<i>_<r>`` for each nullable rule ``r`` called where ``x`` may start.

Oracles: Python's ``re.fullmatch`` on the same language written as a regex (or a balanced-bracket
check), on every string of a small alphabet up to 6 characters and on random strings; the rewritten
grammar holds no large repeat of a nullable body; a configuration's NFA items stay few.
"""
from __future__ import annotations

import itertools
import random
import re

import pytest

from _matching import accepts
from structgate import Constraint, get_backend
from structgate.native.ir import Ref, _nullable
from structgate.native.pushdown import count_large_repeats
from structgate.native.regex.parser import Alt, Concat, Repeat
from structgate.testing import tiny_vocabulary


def _dyck(s: str) -> bool:
    depth = 0
    for c in s:
        depth += 1 if c == "(" else -1
        if depth < 0:
            return False
    return depth == 0


#: (GBNF text, alphabet, oracle: a regex for re.fullmatch or a predicate)
CASES = [
    ('root ::= x{0,700} "b"\nx ::= "a"? "c"?', "abc", r"[ac]*b"),
    ('root ::= x{3,600} "b"\nx ::= "a"? "c"?', "abc", r"[ac]*b"),
    ('root ::= x{0,700}\nx ::= [ \\t]?', " \ta", r"[ \t]*"),
    ('root ::= x{2,400} "!"\nx ::= y z\ny ::= "a"?\nz ::= w | "b"\nw ::= ""', "ab!", r"[ab]*!"),
    ('root ::= "<" p{0,300} ">"\np ::= "(" p ")" p | ""', "()<>", lambda s: len(s) >= 2 and s[0] == "<"
     and s[-1] == ">" and set(s[1:-1]) <= set("()") and _dyck(s[1:-1])),
    ('root ::= (x "c"?){0,500} "."\nx ::= "a" | e\ne ::= ""', "ac.", r"[ac]*\."),
    ('root ::= x{5,300}\nx ::= e e\ne ::= ""', "ab", r""),
    ('root ::= (x | "b"){0,500} "."\nx ::= "a" x | ""', "ab.", r"[ab]*\."),
    ('root ::= x{0,50000} "."\nx ::= "a"? "b"?', "ab.", r"[ab]*\."),
    ('root ::= x{2,3} "."\nx ::= "a"? "b"?', "ab.", r"(?:a?b?){2,3}\."),  # small: as written
]
#: the items a configuration may hold along the walks below (built as written: one per copy)
MAX_ITEMS = 16


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab)


def _oracle(o):
    return (lambda s: bool(re.fullmatch(o, s))) if isinstance(o, str) else o


def _large_nullable_repeats(grammar) -> list:
    """Counted repeats of 32 or more copies of a nullable body left in ``grammar``."""
    null = grammar.nullable_rules()
    out, seen = [], set()
    for r in grammar.reachable():
        stack = [grammar.rules[r]]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if isinstance(n, Repeat):
                if max(n.min, n.max or 0) >= 32 and _nullable(n.item, null):
                    out.append(n)
                stack.append(n.item)
            elif isinstance(n, (Concat, Alt)):
                stack.extend(n.items)
    return out


@pytest.mark.parametrize("text,alphabet,oracle", CASES, ids=[t.split("\n")[0] for t, _, _ in CASES])
def test_repeats_of_nullable_rules_are_exact(text, alphabet, oracle, vocab, native):
    constraint = Constraint.grammar(text, "gbnf")
    g, _ = count_large_repeats(native.to_grammar(constraint))
    assert not _large_nullable_repeats(g), text
    compiled = native.compile(constraint)
    ok = _oracle(oracle)
    for k in range(7):
        for tup in itertools.product(alphabet, repeat=k):
            s = "".join(tup)
            assert accepts(compiled, vocab, s) == ok(s), (text, s)
    rng = random.Random(text)
    for _ in range(60):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(7, 40)))
        assert accepts(compiled, vocab, s) == ok(s), (text, s)


@pytest.mark.parametrize("text,body", [
    ('root ::= x{0,700} "b"\nx ::= "a"? "c"?', "a"),
    ('root ::= x{0,700}\nx ::= [ \\t]?', " "),
    ('root ::= x{2,400} "!"\nx ::= y z\ny ::= "a"?\nz ::= w | "b"\nw ::= ""', "b"),
])
def test_configurations_stay_small(text, body, vocab, native):
    compiled = native.compile(Constraint.grammar(text, "gbnf"))
    index = compiled.token_index
    m = compiled.matcher()
    for _ in range(80):
        assert m.advance(vocab.encode(body))
        assert len(index._cfg_keys[m.state]) <= MAX_ITEMS


def test_the_empty_free_rules():
    """The rewrite's shape: the repeat is a counter over a call of the empty-free rule."""
    from structgate.native.backend import NativeBackend

    g = NativeBackend(tiny_vocabulary()).to_grammar(Constraint.grammar('root ::= x{0,700}\nx ::= "a"? "b"?', "gbnf"))
    g2, _ = count_large_repeats(g)
    primed = [r for r in g2.rules if r.startswith("__nonempty")]
    assert len(primed) == 1
    assert not _nullable(g2.rules[primed[0]], g2.nullable_rules())
    assert any(isinstance(x, Ref) and x.name == primed[0] for r in g2.reachable() for x in _leaves(g2.rules[r]))


def _leaves(node):
    stack, out = [node], []
    while stack:
        n = stack.pop()
        if isinstance(n, Repeat):
            stack.append(n.item)
        elif isinstance(n, (Concat, Alt)):
            stack.extend(n.items)
        else:
            out.append(n)
            auto = getattr(getattr(n, "auto", None), "item", None)  # a RepeatCounter's item
            if auto is not None:
                stack.append(auto)
    return out
