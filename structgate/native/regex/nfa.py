"""AST → Thompson NFA over byte ranges.

The NFA is built *backwards* ("compile with a continuation", as in RE2's and Russ Cox's
constructions): ``compile(node, next) -> start`` returns the state that matches ``node`` and then
continues at ``next``. Concatenation therefore needs no epsilon states, and byte-range states are
hash-consed (two states with the same byte range and the same successor are one state), which
gives RE2's UTF-8 suffix sharing for free. The construction runs on an explicit stack of
generators, so it never recurses in Python whatever the pattern's nesting depth.

States (parallel lists, index = state id):

=========  ===========================================================================
``BYTE``   consume one byte in ``lo[s]..hi[s]`` and go to ``out[s]``
``EPS``    epsilon split to every state of ``outs[s]``
``MATCH``  the accepting state (one per NFA)
``BOL``    zero-width "start of text" assertion, then ``out[s]``
``EOL``    zero-width "end of text" assertion, then ``out[s]``
``FAIL``   matches nothing (an empty character class)
=========  ===========================================================================

Counted repeats: ``x{m,n}`` is ``m`` mandatory copies followed by
``n - m`` *nested* optional copies ``(x(x(x)?)?)?``, so every optional copy's exit goes straight
to the continuation and epsilon closures stay O(1) in size; ``x{m,}`` is ``m - 1`` copies and
``x+``; ``x+`` is one copy of ``x`` looping back through one split state.
"""
from __future__ import annotations

from ...errors import CompileLimitError
from .parser import Alt, Anchor, Chars, Concat, Node, Repeat
from .utf8 import utf8_sequences

__all__ = ["NFA", "build_nfa", "drive", "BYTE", "EPS", "MATCH", "BOL", "EOL", "FAIL"]

BYTE, EPS, MATCH, BOL, EOL, FAIL = range(6)


class NFA:
    """A Thompson NFA over bytes (see the module docstring for the state kinds).

    Attributes
    ----------
    kind, lo, hi, out : list[int]
        Per state; ``lo``/``hi`` are inclusive byte bounds (``-1`` unless ``BYTE``); ``out`` is the
        successor of ``BYTE``/``BOL``/``EOL`` states (``-1`` otherwise).
    outs : list[tuple[int, ...] | None]
        Successors of ``EPS`` states.
    start, match : int
        Start state and the single ``MATCH`` state.
    has_assertions : bool
        True when some ``BOL``/``EOL``/``FAIL`` state exists (then a byte state may be dead and
        the DFA builder prunes dead states explicitly).
    multi : dict[int, tuple[tuple[int, int], ...]] | None
        Only in an NFA made with ``multi_range=True`` (the grammar NFA of
        :mod:`structgate.native.pushdown`): ``BYTE`` states that match a *set* of byte ranges
        (one state for, e.g., the ASCII part of ``[ \t\n\r]`` instead of one per range and an
        epsilon split); ``lo``/``hi`` then bound the set. The eager DFA builder never sees one.
    """

    __slots__ = ("kind", "lo", "hi", "out", "outs", "start", "match", "has_assertions",
                 "_byte_memo", "_eps_memo", "_fail", "max_states", "multi", "_multi_memo")

    def __init__(self, max_states: int = 2_000_000, multi_range: bool = False) -> None:
        self.kind: list[int] = []
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.out: list[int] = []
        self.outs: list[tuple[int, ...] | None] = []
        self.start = -1
        self.has_assertions = False
        self._byte_memo: dict[tuple[int, int, int], int] = {}
        self._eps_memo: dict[tuple[int, ...], int] = {}
        self._fail = -1
        self.max_states = max_states
        self.multi: dict[int, tuple] | None = {} if multi_range else None
        self._multi_memo: dict = {}
        self.match = self._new(MATCH, -1, -1, -1, None)

    def __len__(self) -> int:
        return len(self.kind)

    # -- state constructors --------------------------------------------------------------------
    def _new(self, kind: int, lo: int, hi: int, out: int, outs) -> int:
        s = len(self.kind)
        if s >= self.max_states:
            raise CompileLimitError("max_nfa_states", s, self.max_states,
                                    "the pattern (after expanding counted repeats) is too large")
        self.kind.append(kind)
        self.lo.append(lo)
        self.hi.append(hi)
        self.out.append(out)
        self.outs.append(outs)
        return s

    def byte(self, lo: int, hi: int, nxt: int) -> int:
        key = (lo, hi, nxt)
        s = self._byte_memo.get(key)
        if s is None:
            s = self._byte_memo[key] = self._new(BYTE, lo, hi, nxt, None)
        return s

    def split(self, targets) -> int:
        """An epsilon state to every target (deduplicated; a single target is returned as is)."""
        seen: dict[int, None] = {}
        for t in targets:
            if t != self._fail or self._fail < 0:
                seen[t] = None
        ts = tuple(seen)
        if len(ts) == 1:
            return ts[0]
        if not ts:
            return self.fail()
        s = self._eps_memo.get(ts)
        if s is None:
            s = self._eps_memo[ts] = self._new(EPS, -1, -1, -1, ts)
        return s

    def loop_placeholder(self) -> int:
        """A fresh epsilon state whose targets are set later with :meth:`set_outs`."""
        return self._new(EPS, -1, -1, -1, ())

    def set_outs(self, s: int, targets) -> None:
        self.outs[s] = tuple(dict.fromkeys(targets))

    def fail(self) -> int:
        if self._fail < 0:
            self._fail = self._new(FAIL, -1, -1, -1, None)
            self.has_assertions = True
        return self._fail

    def assertion(self, kind: int, nxt: int) -> int:
        self.has_assertions = True
        return self._new(kind, -1, -1, nxt, None)

    def byte_ranges(self, ranges, nxt: int) -> int:
        """One byte out of ``ranges`` (sorted, disjoint, non-empty) then ``nxt``: one ``BYTE``
        state per range, or one multi-range state (:attr:`multi`) when this NFA allows them."""
        if len(ranges) == 1:
            return self.byte(ranges[0][0], ranges[0][1], nxt)
        if self.multi is None:
            return self.split([self.byte(lo, hi, nxt) for lo, hi in ranges])
        key = (ranges, nxt)
        s = self._multi_memo.get(key)
        if s is None:
            s = self._multi_memo[key] = self._new(BYTE, ranges[0][0], ranges[-1][1], nxt, None)
            self.multi[s] = ranges
        return s

    def chars(self, ranges, nxt: int) -> int:
        """States matching one code point of ``ranges`` (UTF-8 encoded) then ``nxt``."""
        if len(ranges) == 1:
            lo, hi = ranges[0]
            if hi <= 0x7F:
                return self.byte(lo, hi, nxt)
        firsts: list[int] = []
        byte = self.byte
        single: list = []
        for seq in _byte_sequences(ranges):
            if len(seq) == 1 and self.multi is not None:
                single.append(seq[0])  # one-byte sequences (ASCII): one multi-range state
                continue
            s = nxt
            for blo, bhi in seq:
                s = byte(blo, bhi, s)
            firsts.append(s)
        if single:
            firsts.append(self.byte_ranges(tuple(sorted(single)), nxt))
        if not firsts:
            return self.fail()
        return self.split(firsts)


_SEQ_CACHE: dict = {}
_SEQ_CACHE_MAX = 4096


def _byte_sequences(ranges) -> tuple:
    """The UTF-8 byte-range sequences of a code-point class (:func:`utf8_sequences` of each
    range), each reversed (last byte first, the order :meth:`NFA.chars` builds states in); memoised
    per class for the process (classes repeat across rules and grammars: ``[^"\\]``, digits, hex)."""
    key = ranges if isinstance(ranges, tuple) else tuple(map(tuple, ranges))
    hit = _SEQ_CACHE.get(key)
    if hit is None:
        hit = tuple(tuple(reversed(seq)) for lo, hi in key for seq in utf8_sequences(lo, hi))
        if len(_SEQ_CACHE) >= _SEQ_CACHE_MAX:
            _SEQ_CACHE.clear()
        _SEQ_CACHE[key] = hit
    return hit


def _strip_edge_anchors(node: Node) -> Node:
    """Drop ``^`` anchors in leading position and ``$`` anchors in trailing position of the
    whole pattern (they always hold there). Anchors left in place stay exact assertions, so the
    walk simply stops at a bounded depth."""

    def strip(nd: Node, kind: str, depth: int) -> Node:
        if depth > 100:
            return nd
        if isinstance(nd, Anchor):
            return Concat(()) if nd.kind == kind else nd
        if isinstance(nd, Alt):
            return Alt(tuple(strip(it, kind, depth + 1) for it in nd.items))
        if isinstance(nd, Concat):
            items = list(nd.items)
            idx = 0 if kind == "start" else -1
            while items and isinstance(items[idx], Anchor) and items[idx].kind == kind:
                items.pop(idx)
            if items:
                items[idx] = strip(items[idx], kind, depth + 1)
            return items[0] if len(items) == 1 else Concat(tuple(items))
        return nd

    try:
        return strip(strip(node, "start", 0), "end", 0)
    finally:
        strip = None  # (recursive: no reference cycle left for the collector, returned or raised)


def _compile(nfa: NFA, node: Node, nxt: int):
    """Generator: yields ``(child, next)`` requests, receives their start states; returns the start."""
    # Chars children are built here, without a round trip through the driver (the driver builds
    # them directly too: same states, no memo involved); literals are long runs of them
    if isinstance(node, Concat):
        cur = nxt
        for it in reversed(node.items):
            if type(it) is Chars:
                cur = nfa.chars(it.ranges, cur)
            else:
                cur = yield (it, cur)
        return cur
    if isinstance(node, Alt):
        starts = []
        for it in node.items:
            starts.append(nfa.chars(it.ranges, nxt) if type(it) is Chars else (yield (it, nxt)))
        return nfa.split(starts)
    if isinstance(node, Repeat):
        item, lo, hi = node.item, node.min, node.max
        cur = nxt
        if hi is None:
            if lo == 0:  # x*
                loop = nfa.loop_placeholder()
                body = yield (item, loop)
                nfa.set_outs(loop, (body, nxt))
                return loop
            loop = nfa.loop_placeholder()  # x+ : body -> loop -> (body | next)
            body = yield (item, loop)
            nfa.set_outs(loop, (body, nxt))
            cur = body
            lo -= 1
        else:
            for _ in range(hi - lo):  # nested optionals, innermost first
                s = nfa.chars(item.ranges, cur) if type(item) is Chars else (yield (item, cur))
                cur = nfa.split((s, nxt))
        for _ in range(lo):
            cur = nfa.chars(item.ranges, cur) if type(item) is Chars else (yield (item, cur))
        return cur
    if isinstance(node, Anchor):
        return nfa.assertion(BOL if node.kind == "start" else EOL, nxt)
    raise TypeError(f"not a regex AST node: {type(node).__name__}")


def build_nfa(node: Node, *, max_states: int = 2_000_000, strip_anchors: bool = True) -> NFA:
    """Thompson NFA (over bytes) for an AST from :func:`~structgate.native.regex.parse_regex`.

    Parameters
    ----------
    node : Node
        The AST.
    max_states : int
        Cap on NFA states.
    strip_anchors : bool
        Remove anchors that trivially hold (leading ``^``, trailing ``$``).

    Raises
    ------
    CompileLimitError
        ``"max_nfa_states"`` when the NFA would exceed ``max_states``.
    """
    nfa = NFA(max_states)
    if strip_anchors:
        node = _strip_edge_anchors(node)
    nfa.start = drive(nfa, node, nfa.match)
    return nfa


def _yield_back(node, nxt):
    """A generator that hands ``node`` straight back to the driver (for leaves at a root)."""
    v = yield (node, nxt)
    return v


#: nesting depth up to which :func:`drive` builds by plain recursion; deeper subtrees go to the
#: generator-stack builder (:func:`_drive_stack`), which has no depth limit
DRIVE_RECURSION_DEPTH = 200


def drive(nfa: NFA, node, nxt: int, leaf=None, *, memo: tuple[dict, list] | None = None, defer=None) -> int:
    """Build ``node`` with continuation ``nxt`` into ``nfa``; returns its start state.

    A subtree object compiled twice with the same continuation is built once (memo on
    ``(id(node), next)``; the parser hash-conses equal subtrees). ``Chars`` leaves are built
    directly. ``leaf(child, next)``, when given, sees every child that is not a regex node
    (``Chars``, ``Concat``, ``Alt``, ``Repeat``) first and returns a state (int) for it, a
    replacement node to build in its place (e.g. a rule body to inline), or None (then the child
    must be an ``Anchor``). Used by :func:`build_nfa` and by the grammar NFA of
    :mod:`structgate.native.pushdown` (whose leaves are byte sets and rule references).

    ``memo``, when given, is ``(dict, pins)`` shared by several calls on the same NFA (a rule
    built in parts); the node passed here is always built (never answered from the memo).
    ``defer(node, next)``, when given, sees every concatenation, alternation and repeat below the
    top node before it is built and may return a state that stands for it (a placeholder built
    later, :func:`~structgate.native.pushdown.build_grammar_nfa`), or None.

    The construction recurses (a Python call per node: the cheapest walk) up to
    :data:`DRIVE_RECURSION_DEPTH` levels of nesting and hands deeper subtrees to
    :func:`_drive_stack` (an explicit stack of :func:`_compile` generators, no recursion); both
    create the same states in the same order.

    Raises
    ------
    CompileLimitError
        ``"max_nfa_states"``.
    TypeError
        A node that is neither a regex node nor resolved by ``leaf``.
    """
    if memo is None:
        memo = ({}, [])
    memo, keep = memo  # keep: pins the memoised nodes so their ids stay unique
    chars, split, loop_placeholder, set_outs = nfa.chars, nfa.split, nfa.loop_placeholder, nfa.set_outs
    limit = DRIVE_RECURSION_DEPTH

    def rec(n, c: int, d: int) -> int:
        t = type(n)
        if t is Chars:
            return chars(n.ranges, c)
        if t is not Concat and t is not Alt and t is not Repeat:
            if leaf is not None:
                r = leaf(n, c)
                if r is not None:
                    return r if isinstance(r, int) else rec(r, c, d + 1)
            if t is not Anchor:
                raise TypeError(f"not a regex AST node: {t.__name__}")
        k = (id(n), c)
        if d:
            v = memo.get(k)
            if v is not None:
                return v
            if defer is not None and t is not Anchor:
                v = defer(n, c)
                if v is not None:
                    keep.append(n)
                    memo[k] = v
                    return v
        if d >= limit:
            v = _drive_stack(nfa, n, c, leaf)
        elif t is Concat:
            v = c
            for it in reversed(n.items):
                v = chars(it.ranges, v) if type(it) is Chars else rec(it, v, d + 1)
        elif t is Alt:
            v = split([chars(it.ranges, c) if type(it) is Chars else rec(it, c, d + 1) for it in n.items])
        elif t is Repeat:
            item, lo, hi = n.item, n.min, n.max
            ic = type(item) is Chars
            v = c
            if hi is None:
                loop = loop_placeholder()
                body = chars(item.ranges, loop) if ic else rec(item, loop, d + 1)
                set_outs(loop, (body, c))
                if lo == 0:  # x*
                    v = loop
                else:  # x+ : body -> loop -> (body | next)
                    v = body
                    lo -= 1
            else:
                for _ in range(hi - lo):  # nested optionals, innermost first
                    s = chars(item.ranges, v) if ic else rec(item, v, d + 1)
                    v = split((s, c))
            for _ in range(lo):
                v = chars(item.ranges, v) if ic else rec(item, v, d + 1)
        else:
            v = nfa.assertion(BOL if n.kind == "start" else EOL, c)
        keep.append(n)
        memo[k] = v
        return v

    try:
        return rec(node, nxt, 0)
    finally:
        rec = None  # the function's cell refers to itself: no cycle left for the collector


def _drive_stack(nfa: NFA, node, nxt: int, leaf=None) -> int:
    """:func:`drive` on an explicit stack of :func:`_compile` generators (no Python recursion, so
    no depth limit); the same states in the same order."""
    memo: dict[tuple[int, int], int] = {}
    keep: list = []  # pins the memoised nodes so their ids stay unique

    def gen(n, c):
        return _compile(nfa, n, c) if isinstance(n, (Concat, Alt, Repeat, Anchor)) else _yield_back(n, c)

    stack = [_yield_back(node, nxt)]
    keys: list = [None]
    value = None
    while stack:
        try:
            req = stack[-1].send(value)
        except StopIteration as e:
            stack.pop()
            value = e.value
            k = keys.pop()
            if k is not None:
                memo[k] = value
            continue
        child, cnxt = req
        if isinstance(child, Chars):
            value = nfa.chars(child.ranges, cnxt)
            continue
        if leaf is not None:
            r = leaf(child, cnxt)
            if isinstance(r, int):
                value = r
                continue
            if r is not None:
                child = r
                if isinstance(child, Chars):
                    value = nfa.chars(child.ranges, cnxt)
                    continue
        k = (id(child), cnxt)
        value = memo.get(k)
        if value is None:
            keep.append(child)
            stack.append(gen(child, cnxt))
            keys.append(k)
    return value
