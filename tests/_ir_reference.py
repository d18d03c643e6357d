"""A small, obviously-correct reference for :class:`structgate.native.ir.Grammar` (test oracle only).

* :class:`Reference` turns a grammar into a plain context-free grammar over code points (one
  nonterminal per rule, fresh ones for groups / alternations / repetitions; ``x{lo,hi}`` is unrolled:
  ``lo`` copies, then ``hi - lo`` nested optionals or a right-recursive star) and runs an Earley
  recogniser with Aycock-Horspool nullable handling on it. Productions that contain an
  unproductive symbol are dropped first, so every Earley item left can still be completed: a
  prefix is *viable* (can be extended to a sentence) iff its Earley set is not empty.
* :meth:`Reference.sample` draws random sentences (depth-bounded: past ``max_depth`` it takes the
  cheapest production, so it always terminates).

No byte sets (the front ends never produce them) and no anchors.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from structgate.native.ir import ByteSet, Grammar, Ref
from structgate.native.regex.parser import Alt, Anchor, Chars, Concat, Repeat


@dataclass(frozen=True)
class T:
    """A terminal: one code point out of ``ranges``."""

    ranges: tuple

    def match(self, cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in self.ranges)


class Reference:
    """Earley recogniser and sampler for ``grammar`` (see the module docstring)."""

    def __init__(self, grammar: Grammar):
        self.prods: dict = {}  # nonterminal -> list of tuples of symbols (T or nonterminal key)
        self.fresh = 0
        for name, body in grammar.rules.items():
            self.prods[("r", name)] = [self._flat(body)]
        self.start = ("r", grammar.root)
        self._prune()
        self.nullable = self._nullable()
        self.cost = self._costs()

    # -- conversion ---------------------------------------------------------------------------------
    def _new(self, alts: list) -> tuple:
        self.fresh += 1
        key = ("a", self.fresh)
        self.prods[key] = alts
        return key

    def _sym(self, e):
        if isinstance(e, Chars):
            return T(e.ranges)
        if isinstance(e, Ref):
            return ("r", e.name)
        if isinstance(e, (Concat, Alt, Repeat)):
            if isinstance(e, Alt):
                return self._new([self._flat(x) for x in e.items])
            return self._new([self._flat(e)])
        if isinstance(e, (ByteSet, Anchor)):
            raise NotImplementedError(f"the reference does not handle {type(e).__name__}")
        raise TypeError(e)

    def _flat(self, e) -> tuple:
        """``e`` as one production (a tuple of symbols)."""
        if isinstance(e, Concat):
            out: list = []
            for x in e.items:
                out.extend(self._flat(x) if isinstance(x, (Concat, Repeat)) else (self._sym(x),))
            return tuple(out)
        if isinstance(e, Repeat):
            x = self._sym(e.item)
            head = (x,) * e.min
            if e.max is None:
                star = self._new([()])
                self.prods[star].append((x, star))
                return head + (star,)
            tail = None
            for _ in range(e.max - e.min):
                tail = self._new([(), (x,) if tail is None else (x, tail)])
            return head + ((tail,) if tail is not None else ())
        return (self._sym(e),)

    def _prune(self) -> None:
        prod: set = set()
        ok = lambda s: (isinstance(s, T) and bool(s.ranges)) or s in prod  # noqa: E731
        changed = True
        while changed:
            changed = False
            for nt, alts in self.prods.items():
                if nt not in prod and any(all(ok(s) for s in p) for p in alts):
                    prod.add(nt)
                    changed = True
        self.prods = {nt: [p for p in alts if all(ok(s) for s in p)] for nt, alts in self.prods.items()}

    def _nullable(self) -> set:
        null: set = set()
        changed = True
        while changed:
            changed = False
            for nt, alts in self.prods.items():
                if nt not in null and any(all(s in null for s in p) for p in alts):
                    null.add(nt)
                    changed = True
        return null

    def _costs(self) -> dict:
        inf = float("inf")
        cost = {nt: inf for nt in self.prods}
        changed = True
        while changed:
            changed = False
            for nt, alts in self.prods.items():
                for p in alts:
                    c = sum(1 if isinstance(s, T) else cost[s] for s in p)
                    if c < cost[nt]:
                        cost[nt] = c
                        changed = True
        return cost

    # -- recognition --------------------------------------------------------------------------------
    def run(self, text: str) -> tuple[bool, int]:
        """``(accepted, viable)``: whether ``text`` is a sentence, and the length (in code points)
        of its longest viable prefix (``len(text)`` when the whole text is a viable prefix)."""
        prods = self.prods
        null = self.nullable
        chart: list[set] = []
        # items: (nonterminal, production index, dot, origin)
        cur: set = set()
        work = [(self.start, k, 0, 0) for k in range(len(prods[self.start]))]
        n = len(text)
        for i in range(n + 1):
            cur = set()
            chart.append(cur)
            while work:
                it = work.pop()
                if it in cur:
                    continue
                cur.add(it)
                nt, k, dot, org = it
                p = prods[nt][k]
                if dot == len(p):  # complete
                    for nt2, k2, d2, o2 in list(chart[org]):
                        p2 = prods[nt2][k2]
                        if d2 < len(p2) and p2[d2] == nt:
                            work.append((nt2, k2, d2 + 1, o2))
                    continue
                s = p[dot]
                if isinstance(s, T):
                    continue
                for k2 in range(len(prods[s])):
                    work.append((s, k2, 0, i))
                if s in null:
                    work.append((nt, k, dot + 1, org))
                # (a completion of s inside this set is a zero-length one: covered by the nullable step)
            if i == n:
                break
            cp = ord(text[i])
            for nt, k, dot, org in cur:
                p = prods[nt][k]
                if dot < len(p) and isinstance(p[dot], T) and p[dot].match(cp):
                    work.append((nt, k, dot + 1, org))
            if not work:
                return False, i
        accepted = any(nt == self.start and org == 0 and dot == len(prods[nt][k]) for nt, k, dot, org in cur)
        return accepted, n

    def accepts(self, text: str) -> bool:
        return self.run(text)[0]

    # -- sampling -----------------------------------------------------------------------------------
    def sample(self, rng: random.Random, max_depth: int = 12, max_len: int = 400, fixed=None,
               avoid: frozenset = frozenset()) -> str:
        """A random sentence (depth-bounded; past ``max_depth`` the cheapest production is taken).

        ``fixed`` maps rule names to ``f(rng) -> str``: the text to emit for that rule instead of
        expanding it (the caller guarantees it is in the rule's language). Code points in
        ``avoid`` are not drawn where the terminal allows another one."""
        fixed = {("r", k): v for k, v in (fixed or {}).items()}
        out: list[str] = []
        stack = [(self.start, 0)]
        while stack:
            s, d = stack.pop()
            if isinstance(s, T):
                out.append(chr(_pick(rng, s.ranges, avoid)))
                continue
            if s in fixed:
                out.append(fixed[s](rng))
                continue
            alts = self.prods[s]
            if d >= max_depth or len(out) > max_len:
                p = min(alts, key=lambda p: sum(1 if isinstance(x, T) else self.cost[x] for x in p))
            else:
                p = rng.choice(alts)
            for x in reversed(p):
                stack.append((x, d + 1))
        return "".join(out)


_NICE = [ord(c) for c in " \n\tazAZ09_-+.,:;\"'\\/{}[]()<>=!?#*&|~$%^@`"] + [0xE9, 0x4E2D, 0x3042, 0x1F600, 0x7F, 0x85]


def _pick(rng: random.Random, ranges, avoid=frozenset()) -> int:
    """A code point out of ``ranges`` (never a surrogate), biased to range ends and familiar ones."""
    nice = [c for c in _NICE if any(lo <= c <= hi for lo, hi in ranges) and c not in avoid]
    r = rng.random()
    if nice and r < 0.5:
        return rng.choice(nice)
    for _ in range(40):
        lo, hi = rng.choice(ranges)
        c = lo if r < 0.65 else hi if r < 0.7 else rng.randint(lo, min(hi, lo + 300))
        if not 0xD800 <= c <= 0xDFFF and c not in avoid:
            return c
        r = rng.random()
    return nice[0] if nice else ranges[0][0]


def mutate(rng: random.Random, text: str, alphabet, keep: str = "") -> str:
    """``text`` with one random edit (delete / insert / replace a character, or cut the end);
    characters in ``keep`` are never deleted or replaced."""
    op = rng.randrange(4)
    i = rng.randrange(len(text) + 1)
    if op in (0, 2) and text and text[min(i, len(text) - 1)] in keep:
        op = 1
    if op == 0 and text:
        i = min(i, len(text) - 1)
        return text[:i] + text[i + 1:]
    if op == 1:
        return text[:i] + rng.choice(alphabet) + text[i:]
    if op == 2 and text:
        i = min(i, len(text) - 1)
        return text[:i] + rng.choice(alphabet) + text[i + 1:]
    return text[:i]
