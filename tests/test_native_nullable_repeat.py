"""Repeats of nullable bodies and other ways of reaching one callee along several epsilon paths
(:meth:`structgate.native.pushdown.PushdownIndex._closure_of`, ``_push``).

``root ::= "(" (root? root?)* ")"`` is the language of ``root ::= "(" root* ")"``, but each
``(`` can open the inner ``root`` from either call site, and the engine used to push one frame per
site: after ``d`` nested parentheses a configuration held ``2**d`` stacks (``max_dfa_states``
within ~16 tokens, seconds per mask before that). The same happened for ``(r | r r)*``, a bounded
``(r? r?){2,5}``, a repeated reference to a nullable rule (``x* ; x ::= r? r?``,
``(x y)+ ; x ::= r? ; y ::= r?``) and alternatives that reach the call after the same byte
(``(("b" r?)? ("b" r?)?)*``); and ``root ::= ("a" root?)+`` (``a+``) held one item per token.

For each shape (GBNF and Lark front ends; regex constraints and grammars without recursion, one
automaton with no stack, never had the problem and are kept as a control), a walk of
:data:`WALK_TOKENS` tokens on the synthetic vocabulary checks at every step:

* the mask is exact against an Earley recogniser of the same grammar (``tests/_ir_reference.py``,
  run incrementally here): a token is allowed iff the text with its bytes is a viable prefix, EOS
  iff the text is a sentence;
* the current configuration holds at most :data:`MAX_ITEMS` items (``(byte state, stack)`` pairs):
  a count independent of the length, where the old engine's grew with every token.
"""
from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from _ir_reference import Reference, T
from structgate import Constraint, get_backend
from structgate.native.frontends import parse_gbnf, parse_lark
from structgate.native.ir import Grammar
from structgate.native.regex.parser import parse_regex
from structgate.testing import tiny_vocabulary

WALK_TOKENS = 200
#: items of one configuration: the grammar shapes below need at most 5, the regex
#: ``((a?b?){2,5}c)+`` 12 (a Thompson NFA of the unrolled repeat); the old engine held 1,536 after 10
#: tokens of ``"(" (root? root?)* ")"``
MAX_ITEMS = 12
#: the walks keep the parentheses nested at most this deep (far below the depth bound, 128)
MAX_NESTING = 12

# (id, format, text)
CASES = [
    ("gbnf-opt-opt-star", "gbnf", 'root ::= "(" (root? root?)* ")"'),
    ("gbnf-opt-opt-plus", "gbnf", 'root ::= "(" ("a" | root? root?)+ ")"'),
    ("gbnf-eps-free-rewrite", "gbnf", 'root ::= "(" (root root? | root)* ")"'),
    ("gbnf-one-or-two", "gbnf", 'root ::= "(" (root | root root)* ")"'),
    # (the trailing root? lets the walk go on once a group of at most 10 closes)
    ("gbnf-bounded-2-5", "gbnf", 'root ::= "(" (root? root?){2,5} ")" root?'),
    ("gbnf-bytes-between", "gbnf", 'root ::= "(" (root? "b"? root?)* ")"'),
    ("gbnf-nullable-rule-ref", "gbnf", 'root ::= "(" x* ")"\nx ::= root? root?'),
    ("gbnf-nullable-rule-ref-plus", "gbnf", 'root ::= "(" x+ ")"\nx ::= root? "c"? root?'),
    ("gbnf-nullable-rule-chain", "gbnf", 'root ::= "(" x+ ")"\nx ::= y y\ny ::= root?'),
    ("gbnf-two-nullable-refs", "gbnf", 'root ::= "(" (x y)+ ")"\nx ::= root?\ny ::= root?'),
    ("gbnf-same-byte-then-call", "gbnf", 'root ::= "(" (("b" root?)? ("b" root?)?)* ")"'),
    ("gbnf-same-byte-then-ref", "gbnf", 'root ::= "(" (("b" z)? ("b" z)?)* ")"\nz ::= root? "c"?'),
    ("gbnf-nested-nullable-repeats", "gbnf", 'root ::= "[" ((root? "a"?)* root?)* "]"'),
    ("gbnf-repeat-ends-in-call", "gbnf", 'root ::= ("a" root?)+'),
    ("gbnf-star-ends-in-call", "gbnf", 'root ::= "b" ("a" root)*'),
    ("lark-opt-opt-star", "lark", 'start: "(" (start? start?)* ")"'),
    ("lark-nullable-rule-ref", "lark", 'start: "(" x* ")"\nx: start? start?'),
]
#: without recursion a grammar is one regular automaton (no stack): these were bounded before;
#: they check that the merging leaves such automata alone
REGULAR_CASES = [
    ("regex-opt-plus", "regex", "(a?)+b"),
    ("regex-opt-opt-star", "regex", "(a?b?)*c"),
    ("regex-bounded-2-5", "regex", "((a?b?){2,5}c)+"),
    ("gbnf-opt-ref-plus", "gbnf", 'root ::= x+ "b"\nx ::= "a"?'),
]


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def native(vocab):
    return get_backend("native", vocab)


def _ir(fmt: str, text: str) -> Grammar:
    if fmt == "gbnf":
        return parse_gbnf(text)
    if fmt == "lark":
        return parse_lark(text)
    return Grammar({"root": parse_regex(text)}, "root")


def _constraint(fmt: str, text: str) -> Constraint:
    return Constraint.regex(text) if fmt == "regex" else Constraint.grammar(text, fmt)


class Earley:
    """The recogniser of :class:`_ir_reference.Reference`, one code point at a time: a chart is a
    list of Earley sets (items ``(nonterminal, production, dot, origin)``, each set indexed by the
    symbol its items wait for), extended without being changed, so that candidate tokens are tried
    from one chart."""

    def __init__(self, ref: Reference) -> None:
        self.prods, self.null, self.root = ref.prods, ref.nullable, ref.start

    def start(self) -> list:
        return [self._close([], [(self.root, k, 0, 0) for k in range(len(self.prods[self.root]))])]

    def _close(self, chart: list, work: list) -> tuple[set, dict]:
        """The Earley set at position ``len(chart)`` from the kernel items ``work``."""
        i = len(chart)
        cur: set = set()
        waiting: dict = {}
        chart = chart + [(cur, waiting)]
        while work:
            it = work.pop()
            if it in cur:
                continue
            cur.add(it)
            nt, k, dot, org = it
            p = self.prods[nt][k]
            if dot == len(p):  # complete: advance the items that waited for nt at its origin
                for nt2, k2, d2, o2 in list(chart[org][1].get(nt, ())):
                    work.append((nt2, k2, d2 + 1, o2))
                continue
            s = p[dot]
            waiting.setdefault(s, []).append(it)
            if isinstance(s, T):
                continue
            for k2 in range(len(self.prods[s])):
                work.append((s, k2, 0, i))
            if s in self.null:  # Aycock-Horspool: a nullable symbol is also skipped
                work.append((nt, k, dot + 1, org))
        return cur, waiting

    def feed(self, chart: list, data: bytes) -> list | None:
        """The chart after the ASCII bytes ``data``, or None when the text stops being viable."""
        for b in data:
            if b >= 0x80:  # (the grammars here are ASCII)
                return None
            kernel = [(nt, k, dot + 1, org) for s, its in chart[-1][1].items() if isinstance(s, T) and s.match(b)
                      for nt, k, dot, org in its]
            if not kernel:
                return None
            chart = chart + [self._close(chart, kernel)]
        return chart

    def goes_on(self, chart: list) -> bool:
        """Whether some code point may follow the text."""
        return any(isinstance(s, T) for s in chart[-1][1])

    def accepting(self, chart: list) -> bool:
        return any(nt == self.root and org == 0 and dot == len(self.prods[nt][k]) for nt, k, dot, org in chart[-1][0])


def _allowed(matcher, vocab) -> set[int]:
    """The token ids ``matcher``'s bitmask row allows."""
    row = np.zeros((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
    matcher.fill_bitmask(row, 0)
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size]
    return set(np.flatnonzero(bits).tolist())


def _nesting(text: bytes) -> int:
    return text.count(b"(") - text.count(b")") + text.count(b"[") - text.count(b"]")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_masks_exact_and_configurations_bounded(case, vocab, native):
    _walk(case, vocab, native)


@pytest.mark.parametrize("case", REGULAR_CASES, ids=[c[0] for c in REGULAR_CASES])
def test_regular_shapes_unchanged(case, vocab, native):
    _walk(case, vocab, native)


def _walk(case, vocab, native) -> None:
    """The walk of the module docstring for ``case`` = ``(id, format, text)``."""
    _id, fmt, text = case
    oracle = Earley(Reference(_ir(fmt, text)))
    compiled = native.compile(_constraint(fmt, text))
    index = compiled.token_index
    m = compiled.matcher()
    eos = set(vocab.eos_token_ids)
    tokens = [(t, b) for t, b in enumerate(vocab.token_bytes) if b and t not in vocab.special_token_ids]
    rng = random.Random(zlib.crc32(_id.encode()))
    chart = oracle.start()
    out = b""
    sizes = []
    for step in range(WALK_TOKENS):
        viable = {t: c for t, c in ((t, oracle.feed(chart, b)) for t, b in tokens) if c is not None}
        expected = set(viable) | (eos if oracle.accepting(chart) else set())
        got = _allowed(m, vocab)
        assert got == expected, (
            f"step {step} after {out!r}: allowed but not viable "
            f"{sorted(vocab.token_bytes[t] for t in got - expected - eos)}, viable but not allowed "
            f"{sorted(vocab.token_bytes[t] for t in expected - got - eos)}, EOS {bool(got & eos)} vs {bool(expected & eos)}")
        n_items = len(index._cfg_keys[m.state])
        sizes.append(n_items)
        assert n_items <= MAX_ITEMS, f"step {step} after {out!r}: {n_items} items (per step: {sizes})"
        # next: a random viable token after which the text can go on, nested at most MAX_NESTING
        # deep, else any viable one
        nest = _nesting(out)
        keep = [t for t, c in viable.items()
                if oracle.goes_on(c) and nest + _nesting(vocab.token_bytes[t]) <= MAX_NESTING]
        pool = sorted(keep or viable)
        if not pool:
            break
        t = rng.choice(pool)
        assert m.advance(t)
        chart = viable[t]
        out += vocab.token_bytes[t]
    assert len(out) >= WALK_TOKENS, out  # every shape here goes on for the whole walk


def test_union_frames_keep_the_language_at_the_depth_bound(vocab):
    """Near the depth bound (``max_recursion_depth``) the merged frames refuse exactly what the
    per-call frames refused: ``"(" (root? root?)* ")"`` nests at most ``depth`` levels deep."""
    depth = 20
    b = get_backend("native", vocab, max_recursion_depth=depth)
    compiled = b.compile(Constraint.grammar('root ::= "(" (root? root?)* ")"', "gbnf"))
    m = compiled.matcher()
    opened = 0
    while m.advance(vocab.encode("(")):
        opened += 1
        assert opened <= depth + 1
        assert len(compiled.token_index._cfg_keys[m.state]) <= MAX_ITEMS
    # the outermost "(" is the root itself (no frame): depth frames above it
    assert opened == depth + 1
    assert m.advance(vocab.encode(")" * opened)) and m.is_accepting()
