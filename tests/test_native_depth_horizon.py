"""The depth bound of the pushdown matcher (``max_recursion_depth``) against a brute-force oracle.

The matcher refuses a push beyond the bound, and must then refuse every token after which the
output can no longer complete within it: a matcher never reaches a non-accepting state with no
token allowed (interface rule 1), and the bound cuts off exactly the continuations that cannot
complete. A break-it tester found dead ends in grammars whose completions need more nested frames
than :attr:`PushdownIndex.DEPTH_HORIZON` (16): past the horizon nothing was checked, so an 18-rule
chain entered under a recursive root ~(max_depth - 17) levels deep left an all-zero mask.

The oracle here is independent of the engine: a grammar is a dict of alternatives over
one-character terminals and rule names; a configuration is the explicit stack of ``(rule,
alternative, position, depth)`` frames (a non-tail call pushes a frame one deeper, refused past the
bound; a call last in its alternative replaces the caller's frame, as the engine's tail calls do);
whether a configuration completes within the bound is decided from each frame's remaining symbols
and the least frames each rule needs (found by plain iteration to a fixpoint), and cross-checked
against a breadth-first search over the terminals on small grammars. Every rule is recursive, so
the engine calls each one (none is inlined) and frames mean the same on both sides.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from structgate.backends.interface import Constraint
from structgate.errors import CompileLimitError
from structgate.vocab import Vocabulary

INF = float("inf")

# one-character tokens for every terminal, a few longer ones (so masks are walked through the token
# trie, and a token can cross a frame boundary), and EOS
TOKENS = ["[", "]", "(", ")", "{", "}", "x", "<", ">", "k", ",", "((", "))", "[(", ")]", "x)", "[[", "]]",
          "<(", "k(", ")>"]
VOCAB = Vocabulary([t.encode() for t in TOKENS] + [b""], eos_token_ids=[len(TOKENS)], name="depth")
EOS = len(TOKENS)


def chain_grammar(n: int, shape: str = "root") -> dict:
    """Rules ``r1 .. rn``: ``r_i ::= "(" r_(i+1) ")" | "{" r_i "}"``, ``rn ::= "x" | "{" rn "}"`` (each
    recursive, so called, not inlined: ``r1`` needs ``n - 1`` frames), under a recursive root:

    * ``root``: the chain as the root's other alternative (a tail call);
    * ``mid``: the chain after a byte, inside the root's alternative (``"<" r1 ">"``), and a short
      way out (``"x"``), so the deep need appears mid-rule and next to an alternative that needs none;
    * ``key``: a key (``"k"``) whose value must be the chain, beside a list of roots."""
    g: dict = {}
    if shape == "root":
        g["root"] = [("[", "root", "]"), ("r1",)]
    elif shape == "mid":
        g["root"] = [("[", "root", "]"), ("<", "r1", ">"), ("x",)]
    else:
        g["root"] = [("[", "root", ",", "root", "]"), ("k", "r1"), ("x",)]
    for i in range(1, n):
        g[f"r{i}"] = [("(", f"r{i + 1}", ")"), ("{", f"r{i}", "}")]
    g[f"r{n}"] = [("x",), ("{", f"r{n}", "}")]
    return g


def gbnf(g: dict) -> str:
    return "\n".join(f"{r} ::= " + " | ".join(" ".join(s if s in g else f'"{s}"' for s in alt) for alt in alts)
                     for r, alts in g.items())


class Oracle:
    """Configurations and completion within ``depth`` frames, by explicit stacks (see the module)."""

    def __init__(self, g: dict, depth: int, root: str = "root", free: frozenset = frozenset()) -> None:
        """``free``: rules whose calls take no frame (a counter's, whose count the engine keeps on
        frames free of the bound)."""
        self.g, self.D, self.root, self.free = g, depth, root, free
        need = {r: INF for r in g}
        changed = True
        while changed:  # Bellman-Ford: the least fixpoint, one round at a time
            changed = False
            for r, alts in g.items():
                best = min(self._rest(r, alt, 0, need) for alt in alts)
                if best < need[r]:
                    need[r], changed = best, True
        self.need = need

    def _rest(self, rule: str, alt: tuple, pos: int, need: dict):
        """Frames the symbols ``alt[pos:]`` of ``rule`` need above its frame."""
        out = 0
        for j in range(pos, len(alt)):
            if alt[j] in self.g:
                out = max(out, need[alt[j]] + (0 if j == len(alt) - 1 or rule in self.free else 1))
        return out

    def start(self) -> frozenset:
        return self.closure(((self.root, None, 0, 0),))

    def closure(self, cfg: tuple) -> frozenset:
        """Expand calls and returns until every configuration's next symbol is a terminal (or its
        stack is empty: the root completed). A frame ``(rule, None, 0, d)`` is "some alternative
        of ``rule``"."""
        out, work, seen = set(), [cfg], set()
        while work:
            c = work.pop()
            if c in seen:
                continue
            seen.add(c)
            if not c:
                out.add(c)
                continue
            rule, ai, pos, d = c[-1]
            if ai is None:
                work.extend(c[:-1] + ((rule, bi, 0, d),) for bi in range(len(self.g[rule])))
                continue
            alt = self.g[rule][ai]
            if pos == len(alt):
                work.append(c[:-1])
                continue
            sym = alt[pos]
            if sym not in self.g:
                out.add(c)
            elif pos == len(alt) - 1:  # a tail call: the callee takes the caller's frame
                work.append(c[:-1] + ((sym, None, 0, d),))
            else:
                d2 = d if rule in self.free else d + 1
                if d2 <= self.D:  # a push beyond the bound is not taken
                    work.append(c[:-1] + ((rule, ai, pos + 1, d), (sym, None, 0, d2)))
        return frozenset(out)

    def step(self, cfgs: frozenset, text: str) -> frozenset:
        for ch in text:
            nxt: set = set()
            for c in cfgs:
                if c:
                    rule, ai, pos, d = c[-1]
                    if self.g[rule][ai][pos] == ch:
                        nxt |= self.closure(c[:-1] + ((rule, ai, pos + 1, d),))
            cfgs = frozenset(nxt)
        return cfgs

    def completes(self, c: tuple) -> bool:
        """Whether configuration ``c`` can still reach the empty stack within the bound: every
        frame's remaining symbols fit above its depth."""
        return all(d + self._rest(r, self.g[r][ai], pos, self.need) <= self.D for r, ai, pos, d in c)

    def live(self, cfgs: frozenset) -> bool:
        return any(self.completes(c) for c in cfgs)

    def depth(self, cfgs: frozenset) -> int:
        return max((c[-1][3] for c in cfgs if c and self.completes(c)), default=0)


def _bfs_completes(o: Oracle, c: tuple, limit: int) -> bool:
    """Brute force: some string of at most ``limit`` terminals leads ``c`` to the empty stack."""
    terms = sorted({s for alts in o.g.values() for alt in alts for s in alt if s not in o.g})
    frontier, seen = {c}, {c}
    for _ in range(limit + 1):
        if () in frontier:
            return True
        nxt = set()
        for x in frontier:
            for t in terms:
                for y in o.step(frozenset([x]), t):
                    if y not in seen:
                        seen.add(y)
                        nxt.add(y)
        frontier = nxt
    return False


@pytest.mark.parametrize("shape", ["root", "mid", "key"])
def test_the_oracle_agrees_with_a_breadth_first_search(shape):
    """The oracle's completion test equals an exhaustive search over the terminals (small chains
    and bounds, where the search is short), on the configurations of random prefixes."""
    rng = random.Random(shape)
    for n, depth in [(3, 3), (4, 5), (5, 6)]:
        o = Oracle(chain_grammar(n, shape), depth)
        cfgs = o.start()
        for _ in range(40):
            for c in cfgs:
                assert o.completes(c) == _bfs_completes(o, c, 4 * (n + depth) + 4), (n, depth, c)
            nxt = [t for t in "[](){}x<>k," if o.step(cfgs, t)]
            if not nxt:
                break
            cfgs = o.step(cfgs, rng.choice(nxt))


def _compile(g: dict | str, depth: int):
    from structgate.native.backend import NativeBackend

    text = g if isinstance(g, str) else gbnf(g)
    return NativeBackend(VOCAB, max_recursion_depth=depth).compile(Constraint.grammar(text, "gbnf"))


def _walk(g: dict, depth: int, pick, max_steps: int, prefix: str = "", text: str | None = None,
          free: frozenset = frozenset()) -> None:
    """One walk of the matcher beside the oracle. At every step: the mask is not empty unless the
    output is complete; EOS is allowed iff the oracle accepts; every token is allowed iff the
    oracle can still complete after it (so no allowed token leads to a dead end, and no token
    that can complete is masked out). ``prefix`` is fed first (each of its tokens must be
    allowed), then ``pick(oracle configurations, allowed token ids but EOS, oracle)`` chooses
    (None: end with EOS, which must then be allowed). The matcher compiles ``text`` when given
    (the same language and frames as ``g``, written with repetitions), else ``g``; ``free``: as
    for :class:`Oracle`."""
    m = _compile(text or g, depth).matcher()
    o = Oracle(g, depth, free=free)
    cfgs = o.start()
    bm = np.zeros((1, 1), dtype=np.int32)
    forced = list(prefix)
    for step in range(max_steps):
        m.fill_bitmask(bm, 0)
        allowed = [t for t in range(len(TOKENS) + 1) if (int(bm[0, 0]) >> t) & 1]
        accepting = () in cfgs
        where = f"after {step} tokens, stack depth {o.depth(cfgs)} of {depth}"
        assert allowed, f"dead end (empty mask, not accepting) {where}"
        eos = EOS in allowed
        assert eos == accepting, where
        for t, tok in enumerate(TOKENS):
            got, want = t in allowed, o.live(o.step(cfgs, tok))
            why = "allowed, but no completion within the bound follows" if got else "masked out, but it can complete"
            assert got == want, f"token {tok!r} {why} {where}"
        if forced:
            t = TOKENS.index(forced.pop(0))
            assert t in allowed, f"prefix token {TOKENS[t]!r} refused {where}"
        else:
            t = pick(cfgs, [a for a in allowed if a != EOS], o)
            if t is None:
                assert accepting
                assert m.advance(EOS) and m.is_terminated()
                return
        assert m.advance(t)
        cfgs = o.step(cfgs, TOKENS[t])


def _deepest_then_close(rng: random.Random, open_steps: int):
    """Deepest-first for ``open_steps`` tokens (the token whose completable configurations are
    deepest; ties at random), then the shortest way out (least depth, then closing brackets)."""
    state = {"n": 0}

    def pick(cfgs, allowed, o):
        state["n"] += 1
        if not allowed:
            return None
        after = {t: o.step(cfgs, TOKENS[t]) for t in allowed}
        if state["n"] <= open_steps:
            best = max(o.depth(a) for a in after.values())
            return rng.choice([t for t in allowed if o.depth(after[t]) == best])
        if () in cfgs:
            return None
        # close: prefer tokens that end frames, then the least deep
        return min(allowed, key=lambda t: (o.depth(after[t]), -TOKENS[t].count(")") - TOKENS[t].count("]"),
                                           TOKENS[t]))
    return pick


def _random(rng: random.Random):
    def pick(cfgs, allowed, o):
        if not allowed or (() in cfgs and rng.random() < 0.05):
            return None
        return rng.choice(allowed)
    return pick


CASES = [(18, 128), (18, 40), (20, 128), (20, 30), (20, 19), (40, 64), (40, 45), (17, 30), (16, 20)]


@pytest.mark.parametrize("shape", ["root", "mid", "key"])
@pytest.mark.parametrize("n,depth", CASES, ids=[f"chain{n}-depth{d}" for n, d in CASES])
def test_deep_chains_under_a_recursive_root_never_dead_end(shape, n, depth):
    """Chains needing more frames than the old horizon (17, 19, 39 frames; 15 and 16 at or below
    it), each bound: deepest-first walks that run into the bound and then close, walks that open
    the root exactly as deep as still leaves room for the chain (and one more and one less), and
    random walks — the oracle decides every token at every step."""
    g = chain_grammar(n, shape)
    chain_need = n if shape == "mid" else n - 1  # "<" r1 ">" gives r1 a frame; r1 and "k" r1 are tail calls
    rng = random.Random(f"{shape}-{n}-{depth}")
    steps = 2 * depth + 4 * n + 40
    for _ in range(2):
        _walk(g, depth, _deepest_then_close(rng, depth + n + 4), steps + depth + 4 * n)
    enter = {"root": "(", "mid": "<", "key": "k"}[shape]  # the first byte into the chain
    for k in range(max(0, depth - chain_need - 2), depth - chain_need + 2):
        o = Oracle(g, depth)
        prefix = "[" * k
        # only as deep as the oracle allows the opening (the walk asserts the matcher agrees)
        if not o.live(o.step(o.start(), prefix)):
            continue
        ok_enter = o.live(o.step(o.start(), prefix + enter))
        _walk(g, depth, _deepest_then_close(rng, n + 4), steps + depth + 4 * n,
              prefix=prefix + (enter if ok_enter else ""))
    for _ in range(3):
        _walk(g, depth, _random(rng), steps)


@pytest.mark.parametrize("n,depth", [(20, 18), (20, 10), (40, 38), (200, 128)])
def test_a_root_that_cannot_complete_within_the_bound_is_a_typed_compile_error(n, depth):
    """A root whose shortest completion nests more frames than the bound allows matches nothing
    within it: a :class:`CompileLimitError` (``max_recursion_depth``) naming the rules, not a start
    whose mask is empty (nor a first step into a dead end)."""
    g = {"root": [("r1",), ("{", "root", "}")]}
    g.update({k: v for k, v in chain_grammar(n).items() if k != "root"})
    with pytest.raises(CompileLimitError) as ei:
        _compile(g, depth)
    e = ei.value
    assert e.limit_name == "max_recursion_depth" and e.limit == depth and e.given == n - 1
    assert "'root'" in str(e) and "r1 -> r2" in str(e)
    if n <= 40:  # exactly enough frames: the walks complete
        _walk(g, n - 1, _deepest_then_close(random.Random(n), 2 * n), 8 * n)


def _counter_case(kind: str, m: int):
    """``root ::= "[" root "]" | "<" "k" (r1 ","){1,200} ">" | "x"`` over an ``m``-rule chain: the
    repeat is matched by a counter whose frames are free of the bound. ``lazy``: every rule is
    productive, so the counter is generated on demand (a :class:`RepeatCounter` calling its item
    as a rule of its own, whose calls take frames: ``r1`` lies two frames above the root's);
    ``binary``: an unproductive alternative makes the build eager, so the counter is a binary one
    of called rules (the item inlined into them: ``r1`` lies one frame above the root's, as the
    first item inlined into the root does). Returns ``(oracle grammar, free rules, text)``."""
    chain = {k: v for k, v in chain_grammar(m).items() if k != "root"}
    text = 'root ::= "[" root "]" | "<" "k" (r1 ","){1,200} ">" | "x"'
    if kind == "lazy":
        g = {"root": [("[", "root", "]"), ("<", "k", "C", ">"), ("x",)], "C": [("I",), ("I", "C")],
             "I": [("r1", ",")], **chain}
        return g, frozenset({"C"}), text + "\n" + gbnf(chain)
    g = {"root": [("[", "root", "]"), ("<", "k", "r1", ",", "F", ">"), ("x",), ("q", "dead")],
         "F": [(), ("r1", ",", "F")], "dead": [("q", "dead")], **chain}
    return g, frozenset({"F"}), text + ' | "q" dead\ndead ::= "q" dead\n' + gbnf(chain)


@pytest.mark.parametrize("kind", ["lazy", "binary"])
@pytest.mark.parametrize("m,depth", [(3, 10), (3, 40), (20, 40), (18, 128)])
def test_a_counted_repeat_near_the_bound_is_entered_only_if_its_item_fits(kind, m, depth):
    """A counter's rules were taken to complete whatever the frames left (their own frames are
    free of the bound, the frames their item needs are not): ``"<"`` was allowed where the item's
    chain no longer fit, and after ``"k"`` nothing was. The oracle decides every token."""
    g, free, text = _counter_case(kind, m)
    gn = _compile(text, depth).token_index.gnfa
    assert bool(gn.dyn_node) == (kind == "lazy")  # the counter kind the case is about
    assert any(c for i, c in enumerate(gn.rule_counting) if i not in gn.dyn_node) == (kind == "binary")
    rng = random.Random(f"{kind}-{m}-{depth}")
    steps = 2 * depth + 4 * m + 60
    need = m + (1 if kind == "lazy" else 0)  # frames above the root's for the first item's chain
    for k in range(max(0, depth - need - 2), depth - need + 2):
        o = Oracle(g, depth, free=free)
        if not o.live(o.step(o.start(), "[" * k)):
            continue
        _walk(g, depth, _deepest_then_close(rng, m + 8), steps, prefix="[" * k, text=text, free=free)
    for _ in range(2):
        _walk(g, depth, _deepest_then_close(rng, depth + m + 8), steps, text=text, free=free)
        _walk(g, depth, _random(rng), steps, text=text, free=free)


BYTES = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256], name="bytes")


@pytest.mark.parametrize("depth", [2, 3, 8])
def test_a_length_counted_pattern_string_at_the_bound(depth):
    """A JSON string with a ``pattern`` and length bounds is a generated length product whose
    symbols (here every character: multi-byte) are called rules: the string takes two frames. It
    was taken to complete whatever the frames left, so at the bound ``[`` (whose only values left
    are such strings) was allowed and then nothing was. Now: the document nesting the string as
    deep as two frames allow is accepted byte by byte, one level deeper is refused, and a walk
    that opens as deep as the mask lets it never reaches a state with nothing allowed, nor a byte
    after which nothing is."""
    from structgate.native.backend import NativeBackend

    schema = {"anyOf": [{"type": "array", "items": {"$ref": "#"}, "minItems": 1},
                        {"type": "string", "pattern": "^[α-ω]+( [α-ω]+)*$", "minLength": 2, "maxLength": 2000}]}
    g = NativeBackend(BYTES, max_recursion_depth=depth).compile(Constraint.json_schema(schema))
    assert g.token_index.gnfa.dyn_node or g.token_index.gnfa.auto_need  # the length product
    bm = np.zeros((1, 9), dtype=np.int32)

    def allowed(m):
        m.fill_bitmask(bm, 0)
        return {t for t in range(257) if (int(bm[0, t >> 5]) >> (t & 31)) & 1}

    doc = ("[" * (depth - 2) + '"αβ γ"' + "]" * (depth - 2)).encode()
    m = g.matcher()
    for i, b in enumerate(doc):
        assert b in allowed(m), f"byte {i} of {doc!r} refused"
        if i == depth - 2:
            assert ord("[") not in (al := allowed(m)) or b == ord("["), "one level too deep allowed"
        assert m.advance(b)
    assert 256 in allowed(m)
    m = g.matcher()
    out = b""
    for _ in range(depth + 12):
        al = allowed(m)
        assert al, f"dead end after {out!r}"
        for t in al - {256}:
            f = m.fork()
            assert f.advance(t) and allowed(f), f"nothing allowed after {out + bytes([t])!r}"
        pick = next((c for c in b'[" \xce\xb1' if c in al), None)
        if pick is None:
            break
        assert m.advance(pick)
        out += bytes([pick])


def _random_grammar(rng: random.Random, n_rules: int) -> dict:
    """Rules ``a0 ..``: two or three alternatives of terminals and references (each a
    terminal first, so none is left-recursive); some rules unproductive (every alternative refers
    to one that is)."""
    names = [f"a{i}" for i in range(n_rules)]
    g = {}
    for r in names:
        alts = []
        for _ in range(rng.randint(1, 3)):
            alt = [rng.choice("xyz")]
            for _ in range(rng.randint(0, 3)):
                alt.append(rng.choice(names) if rng.random() < 0.5 else rng.choice("xyz"))
            alts.append(tuple(alt))
        g[r] = alts
    return g


def test_frame_needs_is_the_least_fixpoint_of_the_rule_equations():
    """:func:`frame_needs` (Knuth's algorithm over the expression nodes) equals a plain Bellman-Ford
    iteration of ``need(r) = min over alternatives of max over references of need + 1`` (every
    reference a call), is unbounded exactly for the unproductive rules, and its bound is the
    largest finite need of a call site."""
    from structgate.native.ir import Grammar, alt, lit, ref, seq
    from structgate.native.pushdown import NO_NEED, frame_needs

    rng = random.Random(7)
    for trial in range(300):
        rules = _random_grammar(rng, rng.randint(1, 9))
        grammar = Grammar({r: alt(*(seq(*(ref(s) if s in rules else lit(s) for s in a)) for a in alts))
                           for r, alts in rules.items()}, "a0")
        need = {r: INF for r in rules}
        changed = True
        while changed:
            changed = False
            for r, alts in rules.items():
                best = min(max([need[s] + 1 for s in alt if s in rules], default=0) for alt in alts)
                if best < need[r]:
                    need[r], changed = best, True
        reach = set(grammar.reachable())
        fn = frame_needs(grammar, lambda name: True)
        prod = grammar.productive_rules()
        for r in reach:
            want = need[r] if need[r] != INF else NO_NEED
            assert fn.rule[r] == want, (trial, r, gbnf(rules))
            assert (fn.rule[r] < NO_NEED) == (r in prod)
        sites = [need[s] + 1 for r in reach for alt in rules[r] for s in alt if s in rules and need[s] != INF]
        assert fn.bound == max(sites, default=0), (trial, gbnf(rules))


def test_json_schema_grammars_keep_the_least_horizon(llama3_vocab):
    """The MaskBench sample's schemas and the bundled GBNF grammars: every called rule has a
    finite need, the build's cheap bound (the horizon until the needs are computed) bounds them,
    and a schema's bound stays within :attr:`PushdownIndex.DEPTH_HORIZON`, so its walks far from the
    depth bound check nothing, as before."""
    import json
    import pathlib

    from structgate.native.backend import NativeBackend
    from structgate.native.pushdown import NO_NEED, PushdownIndex

    data = pathlib.Path(__file__).parent / "data"
    be = NativeBackend(llama3_vocab)
    cons = [Constraint.json_schema(json.loads(line)["schema"])
            for line in (data / "maskbench_sample" / "sample.jsonl").read_text().splitlines() if line.strip()]
    cons += [Constraint.grammar(p.read_text(), "gbnf") for p in sorted((data / "grammars" / "gbnf").glob("*.gbnf"))]
    for c in cons:
        gn = be.compile(c).token_index.gnfa
        ub = gn.need_ub  # the build's cheap bound (a lazy build), checked against the fixpoint
        assert gn.ensure_needs()
        assert all(n < NO_NEED for n in gn.rule_need), c.value if c.kind == "grammar" else c.cache_key()
        assert ub is None or (gn.need_bound <= ub and gn.rule_need[0] <= ub)
        if c.kind == "json_schema":
            assert gn.need_bound <= PushdownIndex.DEPTH_HORIZON
