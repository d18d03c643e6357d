"""The native v2 engine: a grammar of rules → one Thompson NFA with call/return states → a lazily
determinised pushdown automaton whose configurations are the matcher's states.

Pipeline
--------
1. **Grammar NFA** (:func:`build_grammar_nfa`). Every rule reachable from the root of a
   :class:`~structgate.native.ir.Grammar` is compiled into one Thompson NFA over bytes (the
   construction of :mod:`structgate.native.regex.nfa`, with its continuation passing and
   hash-consing). A rule body ends in a ``RET`` state of its rule. A reference to a rule is either
   **inlined** (the callee's body compiled with the caller's continuation — for non-recursive rules
   that are small or used once, the behaviour of the old flat-regex engine) or becomes a ``CALL``
   state (callee, return continuation) — for recursive rules and for large shared ones, so ``$ref``
   DAGs never expand exponentially. Dead NFA states (that cannot reach their rule's end) are pruned
   with a fixpoint that treats a call as passable iff its callee can complete.
2. **Stacks** are persistent and hash-consed: a stack id stands for ``(return NFA state, parent
   stack)``; id 0 is the empty stack. Two requests at the same position share the same ids, so a
   push, a pop, a rollback and a fork cost O(1) and nothing is copied (XGrammar's persistent stack,
   Dong et al. 2024, arXiv 2411.15100 §3.3, hash-consed instead of a tree).
3. **Configurations** (the states of :class:`PushdownIndex`) are sets of ``(byte NFA state, stack)``
   pairs closed under epsilon moves, calls (push) and returns (pop), plus an "accept" item when the
   root rule can end with an empty stack. They are interned to integers: 0 is dead, 1 the start.
   The byte transitions of a configuration are computed **on first use** (a lazy subset construction,
   as RE2's and llguidance's lazy DFAs), one row over the byte classes at a time, and kept in a dense
   growing table. Nothing is determinised up front, so compile is parsing plus a linear NFA build.
4. **Token masks**: the class-quotiented token trie of :mod:`structgate.native.token_index`, walked
   level by level with one vectorised gather per level through the lazy table; an entry not computed
   yet is filled in Python for the configurations that need it, then the gather is repeated. The
   trie of the standard byte-class partition (every ASCII byte alone, the UTF-8 lead/continuation
   blocks grouped) is built once per vocabulary and shared by every grammar whose byte ranges fit
   it (JSON Schema, choices, most regexes and grammars); other partitions get their own trie, cached
   by partition. Rows are cached per configuration as packed int32 bitmask rows, so a revisit is a
   row copy, and the batch hook gathers many at once (:meth:`PushdownIndex.slots`).

Depth: a push beyond ``max_depth`` (``CompileOptions.max_recursion_depth``) is not taken, so outputs
nested deeper than the limit are excluded (documented bound; default 128 levels). Near the bound
(fewer than :attr:`PushdownIndex.horizon` frames left) a pair is kept only if its rule can still
complete within the frames left, and a frame only if its caller's continuation can
(:meth:`PushdownIndex._completes`): without that, a byte that enters a position whose every way out
needs a deeper call (a key whose value must open one more object at the bound) would be allowed and
lead to a dead end. The horizon is per grammar: at least the frames any position needs to complete
(:func:`frame_needs`, a least fixpoint over the rules; at least :attr:`PushdownIndex.DEPTH_HORIZON`),
so farther from the bound every position can complete and nothing needs checking; a root that
cannot complete within the bound at all is a ``CompileLimitError`` (``max_recursion_depth``).

The configuration automaton is exact: a token is allowed iff its bytes keep the output a prefix of
some string of the grammar (within the depth bound), because every pair in a configuration is live
(its byte state can reach its rule's end, and every rule on its stack can then complete).
"""
from __future__ import annotations

import itertools
import threading
import time
import weakref
from typing import Sequence

import numpy as np

from .._env import shared_walks_bytes
from ..errors import CompileLimitError, GrammarSyntaxError, IncompatibleVocabularyError
from ..vocab import Vocabulary
from .automaton import DEAD, START
from .ir import (ByteSet, CalledRules, Grammar, LazyAutomaton, LazyRule, Ref, _encodable, _productive, expr_leaves,
                 rebuild)
from .regex.dfa import _Closures
from .regex.nfa import BYTE, EPS, NFA, drive
from .regex.parser import W_ALL, Alt, Anchor, Chars, Concat, Repeat, _nonempty, empty_when, repeat_node

__all__ = ["GrammarNFA", "build_grammar_nfa", "PushdownIndex", "STANDARD_BYTE_CLASSES", "CALL", "RET",
           "class_trie", "no_gc", "count_large_repeats"]

CALL, RET = 6, 7
#: a placeholder for a subtree of a rule's body (:attr:`GrammarNFA.deferred`): ``outs`` is None
#: until the subtree is built, then its epsilon targets; a closure passes it like an epsilon move
DEFER = 8
#: a subtree of a rule's body whose size estimate (NFA states, :func:`_size`) is at least this is
#: built when a configuration first reaches it (:func:`build_grammar_nfa`, ``defer_min_size``)
DEFER_MIN_SIZE = 128
TERMINATED = -1
_MISS = object()  # a cache miss (where None is a value)
_VBASE = -2  # return state of a stack that stands for a re-rooted frame

#: the standard byte-class partition: every ASCII byte alone, then the UTF-8 blocks
#: 80-8F 90-9F A0-BF (continuations, split where E0/ED/F0/F4 restrict the second byte),
#: C0-C1, C2-DF, E0, E1-EC, ED, EE-EF, F0, F1-F3, F4, F5-FF
_STD_CUTS = list(range(0, 129)) + [0x90, 0xA0, 0xC0, 0xC2, 0xE0, 0xE1, 0xED, 0xEE, 0xF0, 0xF1, 0xF4, 0xF5]


def _classes_from_cuts(cuts) -> np.ndarray:
    mark = np.zeros(257, dtype=np.int32)
    mark[sorted(set(cuts) | {0})] = 1
    return (np.cumsum(mark[:256]) - 1).astype(np.uint8)


STANDARD_BYTE_CLASSES = _classes_from_cuts(_STD_CUTS)
_STD_CUT_SET = frozenset(_STD_CUTS)



_gc_lock = threading.Lock()
_gc_depth = 0


class no_gc:
    """Context manager: the cyclic garbage collector paused while compiling or computing masks.

    Both allocate many small, long-lived containers (NFA lists, frozensets of configuration
    items, memo tuples); generation-2 collections then rescan every object of the process and
    cost more than the work itself (measured: 50 s → 23 s for 17 MaskBench schemas). Reference
    counting still frees everything; the collector resumes when the outermost block ends (a count,
    so nested and concurrent blocks in several threads compose)."""

    def __enter__(self):
        global _gc_depth
        import gc

        with _gc_lock:
            if _gc_depth == 0:
                self._was = gc.isenabled()
                gc.disable()
                no_gc._was_enabled = self._was
            _gc_depth += 1
        return self

    def __exit__(self, *exc):
        global _gc_depth
        import gc

        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and getattr(no_gc, "_was_enabled", True):
                gc.enable()
        return False


# ------------------------------------------------------------------------------------------------
# 1. grammar -> NFA
# ------------------------------------------------------------------------------------------------
class GrammarNFA:
    """One NFA for every rule of a grammar.

    Attributes
    ----------
    nfa : NFA
        Kinds ``BYTE``, ``EPS``, ``FAIL`` as in :mod:`structgate.native.regex.nfa`, plus ``CALL``
        (``lo`` = callee rule index, ``out`` = return continuation) and ``RET`` (``lo`` = rule index).
    rule_names : list[str]
        Index → rule name (index 0 is the root).
    rule_start : list[int]
        NFA start state of each rule body (``-1`` for rules only ever inlined).
    live : bytearray
        Per NFA state: 1 if it can reach its rule's ``RET``.
    byte_classes : numpy.ndarray
        uint8 ``(256,)``: the alphabet partition (the standard one refined by the NFA's ranges).
    n_calls : int
        ``CALL`` states (0 = the grammar was inlined into one regular automaton).
    """

    def __init__(self) -> None:
        self.nfa = NFA()
        self.rule_names: list[str] = []
        self.rule_start: list[int] = []
        self.live = bytearray()
        self.byte_classes = STANDARD_BYTE_CLASSES
        self.n_calls = 0
        self.owner: list[int] = []
        self.rule_has_calls: list[bool] = []
        self.rule_classes: list[np.ndarray] = []
        #: per rule: 1 when it is a counting rule of :func:`count_large_repeats` (its internal
        #: frames do not count toward the recursion depth bound)
        self.rule_counting: list[int] = []
        self._build = None  # lazy builds: builds one rule's body (None once every rule is built)
        self._unbuilt = 0
        #: rules generated on demand (:class:`~structgate.native.ir.LazyRule` states): their
        #: indices are allocated when a built body first calls them, so building never ends
        self._dynamic = False
        #: whether the grammar's own IR holds a :class:`~structgate.native.ir.LazyRule` (an
        #: automaton generated on demand, as opposed to counters the build made itself)
        self.ir_lazy = False
        #: dynamic rule index -> its LazyRule, and -> (first, end) of its NFA states
        self.dyn_node: dict[int, object] = {}
        self.dyn_span: dict[int, tuple[int, int]] = {}
        #: rule index -> (first, end) of the NFA states its build made (its ``RET`` first; a
        #: deferred subtree of the rule built later lies outside)
        self.rule_span: dict[int, tuple[int, int]] = {}
        #: rules whose build deferred a subtree (their states are not one run, their partition is
        #: the grammar's and they may call: :meth:`ensure_rule`)
        self.rule_deferred: set[int] = set()
        #: LazyRule -> rule index (allocating one); set by :func:`build_grammar_nfa`
        self.dyn_rule = None
        #: ``DEFER`` state -> (node, continuation) of a subtree not built yet (of the rule that
        #: owns the state, :attr:`owner`)
        self.deferred: dict[int, tuple] = {}
        self._expand = None  # builds one deferred subtree (set by a lazy build)
        # frames needed to complete (:func:`frame_needs`), set by :meth:`ensure_needs`:
        #: per static rule index: the frames its body needs to complete, an upper bound
        #: (:data:`NO_NEED`: it cannot); generated rules: :attr:`auto_need`. None: not known yet
        self.rule_need: list[int] | None = None
        #: generated automaton -> the frames any of its states' rules needs (an upper bound)
        self.auto_need: dict = {}
        #: the frames any position of any rule needs to complete, at most (None: not known yet)
        self.need_bound: int | None = None
        #: the root and the called rules of its shortest completion (messages)
        self.need_chain: tuple[str, ...] = ()
        #: an upper bound on :attr:`need_bound` known without computing it (a lazy build: the
        #: called rules and counters, see :func:`build_grammar_nfa`); None: not known
        self.need_ub: int | None = None
        self._needs = None  # computes the needs on first use (a lazy build's :func:`frame_needs`)

    def ensure_needs(self) -> bool:
        """Compute :attr:`rule_need`, :attr:`auto_need`, :attr:`need_bound` and :attr:`need_chain`
        if a lazy build left them for later (:func:`frame_needs`, linear in the grammar); returns
        whether they are known. The caller serialises (the pushdown index, under its lock)."""
        if self.rule_need is None and self._needs is not None:
            self.rule_need, self.auto_need, self.need_bound, self.need_chain = self._needs()
            self._needs = None
        return self.rule_need is not None

    @property
    def lazy(self) -> bool:
        """Whether the NFA may still grow: a called rule's body built later (:meth:`ensure_rule`)
        or a deferred subtree of a rule (:meth:`expand`)."""
        return self._build is not None or bool(self.deferred)

    def expand(self, v: int) -> tuple[int, ...]:
        """Build the subtree that ``DEFER`` state ``v`` stands for (once) and return ``v``'s
        epsilon targets (``nfa.outs[v]``, None until built); the new states belong to ``v``'s
        rule (the builder extends :attr:`owner`). The caller serialises (the pushdown index, under
        its lock). Raises ``CompileLimitError`` (``max_nfa_states``)."""
        ts = self.nfa.outs[v]
        if ts is not None:
            return ts
        had = self.nfa._fail
        self._expand(v)
        if self.nfa._fail != had:  # the build defers nothing where a FAIL state can be made
            raise RuntimeError("internal error: a deferred subtree made a FAIL state")
        if not self.deferred and self._build is None:
            self._expand = None  # every subtree of every rule built: the builder's memos are dropped
        n = len(self.nfa)
        self.live.extend(b"\x01" * (n - len(self.live)))
        return self.nfa.outs[v]

    def _partition_rule(self, i: int, first: int, n: int) -> None:
        """Rule ``i``'s byte partition and whether it calls (states ``first``..``n`` its build
        made, :func:`_rule_partition`); a rule with deferred subtrees (:attr:`rule_deferred`) may
        hold any range and call any rule once they are built: its walks use the grammar's
        partition and nothing assumes it call-free."""
        if i in self.rule_deferred:
            self.rule_classes[i] = self.byte_classes
            self.rule_has_calls[i] = True
        else:
            _rule_partition(self, i, first, n)

    def ensure_rule(self, i: int) -> int:
        """The start state of rule ``i``'s body, built now if it was not (lazy builds; the caller
        serialises: the pushdown index calls it under its lock). Raises ``CompileLimitError``
        (``max_nfa_states``) when the NFA outgrows its cap."""
        st = self.rule_start[i]
        if st >= 0 or self._build is None:
            return st
        nfa = self.nfa
        first = len(nfa)
        self._build(i)
        n = len(nfa)
        self.live.extend(b"\x01" * (n - len(self.live)))
        if nfa._fail >= 0:
            _prune_rule_states(self, first)
        self._partition_rule(i, first, n)
        self._unbuilt -= 1
        if self._unbuilt <= 0 and not self._dynamic:
            self._build = None
            if not self.deferred:
                self._expand = None
        return self.rule_start[i]


def _size(node, memo: dict, ref_size: dict | None = None) -> int:
    """NFA-size estimate of an expression (iterative); a reference counts ``ref_size[name]``
    (the size of the callee when it is inlined), else 1."""
    t = type(node)
    if t is not Concat and t is not Alt and t is not Repeat:
        if t is Ref:
            return ref_size.get(node.name, 1) if ref_size else 1
        return max(1, len(node.ranges)) if t is Chars else 1
    # as in :func:`_scan`: markers ``(node, non-leaf children, leaf children's size)`` under the
    # children; leaves measured where their parent is expanded
    out: list[int] = []
    stack: list = [node]
    rs_get = ref_size.get if ref_size else None
    while stack:
        e = stack.pop()
        if type(e) is tuple:
            v = memo[id(e[0])] = _marker_size(e, out)
            out.append(v)
            continue
        hit = memo.get(id(e))
        if hit is not None:
            out.append(hit)
            continue
        at = len(stack)
        stack.append(None)
        nsub = lsum = 0
        for x in ((e.item,) if type(e) is Repeat else e.items):
            tx = type(x)
            if tx is Concat or tx is Alt or tx is Repeat:
                stack.append(x)
                nsub += 1
            elif tx is Chars:
                lsum += len(x.ranges) or 1
            elif tx is Ref and rs_get is not None:
                lsum += rs_get(x.name, 1)
            else:
                lsum += 1
        stack[at] = (e, nsub, lsum)
    return out[0]


def _marker_size(marker: tuple, out: list[int]) -> int:
    """The size estimate of a concatenation, alternation or repeat from its marker ``(node,
    non-leaf children, summed size of the leaf children)`` and its non-leaf children's sizes,
    taken off the end of ``out`` (the post-order walks of :func:`_size` and :func:`_scan`)."""
    nd, nsub, v = marker
    if nsub:
        v += sum(out[-nsub:])
        del out[-nsub:]
    if type(nd) is Repeat:
        v = v * max(nd.min, nd.max if nd.max is not None else nd.min + 1, 1) + 1
    else:
        v += 1
    return v if v < 1 << 40 else 1 << 40


#: a code-point set's UTF-8 byte ranges (each once), by the set's ranges: :func:`_scan`'s leaves
#: recur across rules and grammars
_FLAT_RANGES: dict[tuple, tuple] = {}


class _Scan:
    """What :func:`build_grammar_nfa`'s passes need to know of a grammar, from one walk
    (:func:`_scan`)."""

    __slots__ = ("size", "large_repeat", "lazy", "empty", "count", "node_of", "ranges", "large_bodies",
                 "body_nodes")


#: a counted repeat of at least this many repetitions may become a counter (:func:`count_large_repeats`)
LARGE_REPEAT_MIN_COUNT = 32

#: a counted repeat of at least this many repetitions inside the item of a :class:`RepeatCounter`
#: becomes a counter whatever the size of its expansion (:func:`count_large_repeats`, "Repeats
#: inside a counter's item"); ``0``: such a repeat is treated as any other
NESTED_REPEAT_MIN_COUNT = 32


def _scan(grammar: Grammar, memo: dict | None = None, min_count: int = LARGE_REPEAT_MIN_COUNT,
          share_min: int | None = None) -> _Scan:
    """One post-order walk of each reachable rule (a subtree shared inside a rule expanded once),
    instead of one walk per pass of :func:`build_grammar_nfa`:

    * ``size``: :func:`grammar_size` (``memo``, when given: node id → size, updated with the
      sizes found, as :func:`_size` fills it);
    * ``large_repeat``: a counted repeat of ``min_count`` or more (:func:`count_large_repeats`
      rewrites nothing without one);
    * ``lazy``: a :class:`~structgate.native.ir.LazyRule` leaf (rules generated on demand);
    * ``empty``: something that matches nothing (an empty code-point or byte set, a set of
      surrogates only, which has no UTF-8 encoding, an empty alternation): the build makes a
      ``FAIL`` state and needs a liveness pass, so nothing is deferred;
    * ``count`` / ``node_of``: for each concatenation, alternation and repeat under another, how
      many parent nodes hold it (counted body by body: a parent in two rule bodies counts twice), and
      the node (:func:`share_repeated_subtrees`); with ``share_min``, only the nodes whose size
      estimate exceeds it (the only ones that pass can share);
    * ``ranges``: the byte ranges of every byte set, code-point sets through their UTF-8 byte
      sequences (as :meth:`NFA.chars` builds them), and those of the symbols of the lazy automata
      (:func:`_grammar_alphabet`). The passes that rewrite a grammar (counters, shared subtrees)
      move its leaves and never change them, so the ranges hold for the rewritten grammar too;
    * ``large_bodies``: the ids of the reachable rule bodies that hold a counted repeat of
      ``min_count`` or more (the only ones :func:`count_large_repeats` can rewrite);
    * ``body_nodes``: per reachable rule body id, the ids of the nodes counted in ``count`` that
      it holds below its top (:func:`share_repeated_subtrees` rewrites only the bodies that hold a
      node it picks).

    A rule's facts depend on its body alone, so they are kept per body object for the process
    (:data:`_RULE_SCANS`, the root rule's excepted): the rules every JSON schema grammar holds
    (``json:value``, the string and key-tail rules) are walked once, not once per grammar.
    """
    rules = grammar.rules
    count: dict[int, int] = {}
    node_of: dict[int, Expr] = {}
    ranges: list = []
    extra: list = []  # symbols of lazy automata: leaves for the ranges only
    sc = _Scan()
    sc.large_repeat = sc.lazy = sc.empty = False
    total = 0
    bodies: set[int] = set()
    large_bodies: set[int] = set()
    body_nodes: dict[int, object] = {}
    # the nodes and leaves the walks of this scan expanded (node id -> size; leaf ids): with
    # ``share_min``, a later body's walk takes a subtree an earlier one expanded (at most
    # ``share_min``: no node it holds is counted) as its size alone, and a leaf as known: rule
    # bodies share subtrees (the parser hash-conses them), which were walked once per body. Such
    # a body's facts lack that subtree's (the earlier body added them to the grammar's): it is not
    # kept in :data:`_RULE_SCANS`, and whether it holds a large repeat is found after the loop
    known: dict[int, int] | None = {} if share_min is not None else None
    known_leaves: set[int] = set()
    partial: list = []  # bodies whose walk took a known subtree or leaf
    for r in grammar.reachable():
        body = rules[r]
        key = (id(body), min_count, share_min)
        hit = _RULE_SCANS.get(key)
        if hit is None or hit[0] is not body:
            if known is None:
                rs = _scan_rule(body, min_count, share_min)
                whole = True
            else:
                rs, whole, taken = _scan_rule(body, min_count, share_min, known, known_leaves)
                known.update(rs[7])
                if taken and not rs[1]:
                    partial.append((body, taken))
            if whole and r != grammar.root:
                if len(_RULE_SCANS) >= _RULE_SCANS_MAX:
                    _RULE_SCANS.clear()
                _RULE_SCANS[key] = (body, rs)  # the body pinned: its id is not reused meanwhile
        else:
            rs = hit[1]
        size, large, lazy, empty, rng, cnt, nodes, sizes, syms = rs
        total += size
        if id(body) in bodies:  # rules with one body object (the same text): its parents once
            continue
        bodies.add(id(body))
        sc.large_repeat |= large
        if large:
            large_bodies.add(id(body))
        body_nodes[id(body)] = cnt.keys()
        sc.lazy |= lazy
        sc.empty |= empty
        ranges.extend(rng)
        extra.extend(syms)
        for k, c in cnt.items():
            count[k] = count.get(k, 0) + c
        node_of.update(nodes)
        if memo is not None:
            memo.update(sizes)
    if partial and sc.large_repeat:  # (no large repeat anywhere: none in these bodies either)
        # a body holds one iff its walk met one or a subtree it took holds one; ``walked``: the
        # nodes of the subtrees found to hold none (shared by the calls while they find none)
        walked: set[int] = set()
        for body, taken in partial:
            if id(body) in large_bodies:
                continue
            for x in taken:
                if _has_large_repeat_in(x, min_count, walked):
                    large_bodies.add(id(body))
                    walked = set()  # (that walk stopped early: its nodes are not all known)
                    break
    seen: set[int] = set()
    autos: set[int] = set()
    while extra:  # the lazy automata's symbols, which may hold further automata
        todo = list(extra)
        extra.clear()
        for nd in expr_leaves(todo, seen):
            sc.empty |= _leaf_facts(nd, ranges, extra, autos)
    sc.size, sc.count, sc.node_of, sc.ranges = total, count, node_of, ranges
    sc.large_bodies, sc.body_nodes = large_bodies, body_nodes
    return sc


#: :func:`_scan_rule` per (rule body id, min_count, share_min), the body pinned; cleared whole
_RULE_SCANS: dict[tuple, tuple] = {}
_RULE_SCANS_MAX = 4096


def _leaf_facts(nd, ranges: list, extra: list, autos: set) -> bool:
    """Add a leaf's byte ranges to ``ranges`` (a lazy automaton's symbols to ``extra``, once per
    automaton in ``autos``); returns whether the leaf matches nothing."""
    if isinstance(nd, Chars):
        rs = nd.ranges
        if rs and len(rs) == 1 and rs[0][1] <= 0x7F:
            ranges.extend(rs)
            return False
        flat = _FLAT_RANGES.get(rs)
        if flat is None:
            from .regex.nfa import _byte_sequences

            seqs = _byte_sequences(rs) if rs else ()
            flat = tuple({p: None for seq in seqs for p in seq})
            if len(_FLAT_RANGES) >= 4096:
                _FLAT_RANGES.clear()
            _FLAT_RANGES[rs] = flat
        ranges.extend(flat)
        return not flat  # no code point, or surrogates only (no UTF-8 encoding)
    if isinstance(nd, ByteSet):
        ranges.extend(nd.ranges)
        return not nd.ranges
    if isinstance(nd, LazyRule) and id(nd.auto) not in autos:
        autos.add(id(nd.auto))
        extra.extend(nd.auto.symbols())
    return False


def _scan_rule(root, min_count: int, share_min: int | None, known: dict | None = None,
               known_leaves: set | None = None):
    """:func:`_scan`'s facts of one rule body: ``(size, large repeat, lazy, empty, byte ranges,
    parent counts, nodes, sizes, lazy automata symbols)`` (counts and nodes by node id, only of
    the nodes above ``share_min`` when given; sizes of every node the walk expanded, which the
    build reads to choose what to defer).

    With ``known`` (node id -> size of the nodes other walks expanded; needs ``share_min``) and
    ``known_leaves`` (leaf ids whose facts they took): ``(facts, whole, taken)``; a known node of
    size at most ``share_min`` is taken as its size, unexpanded (``taken``: those nodes), and a
    known leaf adds nothing, so the facts are those of the body less what those walks found
    (``whole``: nothing was taken so). ``known_leaves`` gets this walk's leaves."""
    sharing = known is not None
    if not sharing:  # (empty: every lookup below misses, the facts are the whole body's)
        known, known_leaves = {}, set()
    count: dict[int, int] = {}
    node_of: dict[int, Expr] = {}
    ranges: list = []
    leaf_seen: set[int] = set()
    autos: set[int] = set()
    extra: list = []
    empty = large = lazy = False
    whole = True
    taken: list = []
    tr = type(root)
    if tr is not Concat and tr is not Alt and tr is not Repeat:
        if id(root) in known_leaves:
            whole = False
        else:
            known_leaves.add(id(root))
            empty = _leaf_facts(root, ranges, extra, autos)
        lazy = tr is LazyRule
        size = max(1, len(root.ranges)) if tr is Chars else 1
        facts = (size, False, lazy, empty, tuple(dict.fromkeys(ranges)), {}, {}, {}, tuple(extra))
        return (facts, whole, taken) if sharing else facts
    out: list[int] = []  # sizes of finished subtrees, taken off by their parent's marker
    sizes: dict[int, int] = {}  # an entry means "expanded here"
    # every (parent expansion, non-leaf child) edge in walk order: the parent counts are taken
    # from it at the end, only for the nodes that need one (above ``share_min``: seldom any)
    edges: list = []
    # the stack holds nodes to expand and, under their children, a marker ``(node, number of
    # non-leaf children, summed size of the leaf children)`` that combines them (post-order);
    # leaves are measured where their parent is expanded, never pushed
    stack: list = [root]
    pop, push, edge = stack.pop, stack.append, edges.append
    sizes_get, known_get = sizes.get, known.get
    while stack:
        e = pop()
        te = type(e)
        if te is tuple:
            v = sizes[id(e[0])] = _marker_size(e, out)
            out.append(v)
            continue
        hit = sizes_get(id(e))
        if hit is not None:
            out.append(hit)
            continue
        hit = known_get(id(e))
        if hit is not None and hit <= share_min:  # expanded by another body's walk: no node counted
            out.append(hit)
            sizes[id(e)] = hit  # (met again in this body: taken once)
            taken.append(e)
            whole = False
            continue
        if te is Repeat:
            if e.min >= min_count or (e.max or 0) >= min_count:
                large = True
            children = (e.item,)
        else:
            children = e.items
            if not children and te is Alt:  # an alternation of nothing matches nothing
                empty = True
        at = len(stack)
        push(None)
        nsub = lsum = 0
        for x in children:
            tx = type(x)
            if tx is Concat or tx is Alt or tx is Repeat:
                edge(x)
                push(x)
                nsub += 1
                continue
            lsum += (len(x.ranges) or 1) if tx is Chars else 1
            kx = id(x)
            if kx not in leaf_seen:  # (interned: few distinct sets, one call each)
                leaf_seen.add(kx)
                if kx in known_leaves:
                    whole = False
                else:
                    lazy |= tx is LazyRule
                    empty |= _leaf_facts(x, ranges, extra, autos)
        stack[at] = (e, nsub, lsum)
    size = out.pop()
    if sharing:
        known_leaves.update(leaf_seen)
    if share_min is None:
        for x in edges:  # (in walk order: the order of first occurrence, as callers read it)
            kx = id(x)
            count[kx] = count.get(kx, 0) + 1
            node_of[kx] = x
    else:
        big = {k for k, v in sizes.items() if v > share_min}
        big.discard(id(root))  # (no node's child)
        if big:
            for x in edges:
                kx = id(x)
                if kx in big:
                    count[kx] = count.get(kx, 0) + 1
                    node_of[kx] = x
    facts = (size, large, lazy, empty, tuple(dict.fromkeys(ranges)), count, node_of, sizes, tuple(extra))
    return (facts, whole, taken) if sharing else facts


def grammar_size(grammar: Grammar, memo: dict | None = None) -> int:
    """NFA-size estimate of a grammar: the sum over its reachable rules of the states their bodies
    need after expanding counted repeats (references count 1). ``memo``: node id → size, shared
    with other passes over the same nodes (references counting 1)."""
    memo = {} if memo is None else memo
    return sum(_size(grammar.rules[r], memo) for r in grammar.reachable())


def check_size(grammar: Grammar, max_nfa_states: int, memo: dict | None = None, est: int | None = None) -> None:
    """Raise ``CompileLimitError("max_nfa_states")`` when :func:`grammar_size` (``est``, when
    already known) exceeds the cap (before anything is built, so ``(a{2000}){2000}`` fails at
    once)."""
    if est is None:
        est = grammar_size(grammar, memo)
    if est > max_nfa_states:
        raise CompileLimitError("max_nfa_states", est, max_nfa_states,
                                "the constraint (after expanding counted repeats) is too large"
                                + _largest_part(grammar, memo))


def _largest_part(grammar: Grammar, memo: dict | None) -> str:
    """``"; most of it (N states) is <where>"``: the source (``Grammar.origin``, e.g. a JSON
    pointer, else the rule's name) whose rules' size estimates sum highest, for the limit's
    message; empty when the grammar has a single rule without an origin."""
    memo = {} if memo is None else memo
    by: dict[str, int] = {}
    for r in grammar.reachable():
        where = grammar.origin.get(r) or f"rule {r!r}"
        by[where] = by.get(where, 0) + _size(grammar.rules[r], memo)
    if len(by) < 2 and not grammar.origin:
        return ""
    where, n = max(by.items(), key=lambda kv: kv[1])
    if where.startswith("/") or where == "":
        where = f"the schema at #{where}"
    return f"; most of it ({n} states) is {where}"


def share_repeated_subtrees(grammar: Grammar, min_size: int, memo: dict | None = None,
                            scan: _Scan | None = None) -> Grammar:
    """A grammar where every subtree (the same node object: the regex parser hash-conses) that
    occurs in two or more places and whose NFA-size estimate exceeds ``min_size`` is a rule of its
    own, kept as a call (``__shared<i>``), so it is built once instead of once per place (e.g. the
    same ``{"type": "string", "maxLength": 4096}`` under many properties). The language is
    unchanged. Returns ``grammar`` itself when there is nothing to share. ``memo``: as for
    :func:`grammar_size`; ``scan``: :func:`_scan` of ``grammar`` (its parent counts), when done."""
    rules = grammar.rules
    if scan is None:
        scan = _scan(grammar, memo, share_min=min_size)
    count, node_of = scan.count, scan.node_of
    memo = {} if memo is None else memo
    picked = {k: node_of[k] for k, c in count.items() if c > 1 and _size(node_of[k], memo) > min_size}
    if not picked:
        return grammar
    names = {k: f"__shared{i}" for i, k in enumerate(sorted(picked, key=lambda k: -memo[k]))}
    done: dict[int, Expr] = {}

    def rewrite(node, top: bool):
        # a picked node below the top becomes its rule's reference
        def pre(nd):
            return Ref(names[id(nd)]) if id(nd) in names and not (top and nd is node) else None
        return rebuild(node, done, pre=pre, memo_root=not top)

    # a body holding no picked node below its top, nor being one, is rebuilt as itself: kept as
    # it is (the scan lists each reachable body's counted nodes; other bodies are rewritten)
    held = scan.body_nodes
    new_rules = {r: rewrite(b, False) if id(b) in names or not (id(b) in held and held[id(b)].isdisjoint(names))
                 else b for r, b in rules.items()}
    for k, nm in names.items():
        new_rules[nm] = rewrite(picked[k], True)
    g = grammar.derived(new_rules, keep_calls=set(grammar.keep_calls) | set(names.values()))
    return g.check()


COUNT_PREFIX = "__count"
#: the prefix of the empty-free rules of nullable rules :func:`count_large_repeats` makes (a large
#: repeat of a reference to a nullable rule ``x`` is ``x'{0,n}``)
NONEMPTY_PREFIX = "__nonempty"


class RepeatCounter(LazyAutomaton):
    """``x{lo,hi}`` (``hi`` None: unbounded) as a lazily generated unary counter: state ``c`` (the
    repetitions completed, ``0..hi``; saturating at ``lo`` when ``hi`` is None) has the rule
    ``x · (c+1)``, with ``| ε`` once ``c >= lo``, and ``(hi)`` is ``ε``. The tail calls take no
    stack frame, so a configuration inside the repeat is (position in ``x``, ``c``); the rules are
    built as the matcher reaches them.

    Far from the bounds a count is replaced by a count-free state for the token masks
    (:meth:`canonical`, used by :meth:`PushdownIndex._count_alias`): ``"mid"`` (``c >= lo``, no
    upper bound: ``x · mid | ε``) and ``"low"`` (``c < lo``: ``x · low``, never ending). ``x`` is
    not nullable, so every repetition consumes at least one byte: from count ``c`` a token of at
    most ``hi - c - 1`` (mid) or ``lo - c - 1`` (low) bytes cannot reach the bound where the two
    differ. One mask row then serves every count of a long string or array (the binary counter
    of :func:`count_large_repeats` gave every count its own stack, so its own first-visit walk).

    ``x`` is one rule (:class:`~structgate.native.ir.CalledRules`, built once) that every count state calls: a count
    state's own rule is a call, a tail call and an end (built in microseconds as a string grows).

    **Sets of counts.** When ``x`` is ambiguous (``(?:a{100,}|a){50,200}``: a run of ``a`` is one
    repetition or many), one configuration holds the same position in ``x`` under many counts, one
    frame each: up to ``hi`` times the items, and every configuration of a long run a new one.
    A state may therefore also be ``("r", a, b)``: *a to b more repetitions* (``b`` None: no upper
    bound), the language ``x{a,b}``. Count ``c`` is ``("r", max(0, lo - c), hi - c)`` (:meth:`remaining`),
    and the frames of one position that differ only by their count stand for the union of those
    languages, which is again ``x{a,b}`` whenever the intervals overlap or touch: the engine
    merges them into one frame (:meth:`PushdownIndex._merge_counts`, the counting-set idea of
    Holík et al. 2019, with intervals for the sets), so a configuration holds at most a few frames
    per position whatever the counts.

    Parameters
    ----------
    item : Expr
        ``x``: not nullable.
    lo, hi : int, int | None
    name : str
        Prefix of the generated rules' names (messages).
    """

    #: the frames of the calls into ``x`` are free of the depth bound: a counted repeat costs the
    #: one level of the call into it, as with the binary counter
    counting = True

    def __init__(self, item, lo: int, hi: int | None, name: str) -> None:
        self.lo, self.hi, self.name = int(lo), (None if hi is None else int(hi)), name
        self.start = 0
        self.item = item
        self._call = CalledRules(name + ".x").call(item)

    def references(self) -> frozenset:
        return self._call.auto.references()

    def nullable(self, state) -> bool:
        if state == "mid":
            return True
        if state == "low":
            return False
        if type(state) is tuple:
            return state[1] == 0
        return state >= self.lo

    def remaining(self, state) -> tuple[int, int | None] | None:
        """``(a, b)``: state ``state`` matches ``x{a,b}`` (``b`` None: unbounded); None for the
        count-free aliases ``"mid"`` and ``"low"``."""
        if type(state) is tuple:
            return state[1], state[2]
        if state == "mid" or state == "low":
            return None
        return max(0, self.lo - state), (None if self.hi is None else self.hi - state)

    def body(self, state):
        if state == "mid" or state == "low":
            nxt = state
        elif type(state) is tuple:  # ("r", a, b): x{a,b}
            _, a, b = state
            if b == 0:
                return Concat(())
            nxt = ("r", max(0, a - 1), None if b is None else b - 1)
        elif self.hi is not None and state >= self.hi:
            return Concat(())
        else:
            nxt = state + 1 if (self.hi is not None or state < self.lo) else state
        more = Concat((self._call, LazyRule(self, nxt)))
        return Alt((more, Concat(()))) if self.nullable(state) else more

    def canonical(self, state, depth: int | None = None):
        """``(state2, slack, superset)`` when count ``state`` is far from the bounds (see the
        class), else None. ``superset``: ``state2`` allows every string ``state`` allows ("mid");
        "low" cannot end, so it is not (:meth:`PushdownIndex._count_alias` then needs every token
        within the slack)."""
        if state == "mid" or state == "low":
            return None
        if type(state) is tuple:  # ("r", a, b): as count lo - a (a > 0), or hi - b (a == 0)
            _, a, b = state
            if a:
                return ("low", a - 1, False) if a - 1 >= 1 else None
            if b is None:
                return None
            return ("mid", b - 1, True) if b - 1 >= 1 else None
        if state >= self.lo:
            if self.hi is None:
                return None  # the saturated count: already count-free
            sl = self.hi - state - 1
            return ("mid", sl, True) if sl >= 1 else None
        sl = self.lo - state - 1
        return ("low", sl, False) if sl >= 1 else None

    def symbols(self) -> list:
        return [self._call]


def _has_large_repeat(grammar: Grammar, min_count: int) -> bool:
    """Whether a reachable rule has a counted repeat of ``min_count`` or more (a cheap walk that
    lets :func:`count_large_repeats` return before rebuilding anything)."""
    seen: set[int] = set()
    return any(_has_large_repeat_in(grammar.rules[r], min_count, seen) for r in grammar.reachable())


def _has_large_repeat_in(body, min_count: int, seen: set[int] | None = None) -> bool:
    """Whether ``body`` holds a repeat of ``min_count`` or more repetitions (not below a
    reference); ``seen``: ids of the ``Concat``/``Alt`` nodes walked already (shared by callers
    walking several bodies: hash-consed subtrees once)."""
    seen = set() if seen is None else seen
    stack = [body]
    while stack:
        n = stack.pop()
        if isinstance(n, Repeat):
            if max(n.min, n.max or 0) >= min_count:
                return True
            stack.append(n.item)
        elif isinstance(n, (Concat, Alt)) and id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.items)
    return False


def count_large_repeats(grammar: Grammar, min_expand: int = 512, min_count: int = LARGE_REPEAT_MIN_COUNT,
                        memo: dict | None = None, lazy: bool = False,
                        large_bodies: set[int] | None = None,
                        nested_min_count: int | None = None) -> tuple[Grammar, set[str]]:
    """A grammar where every large counted repeat ``x{m,n}`` (``max(m, n) >= min_count`` and
    ``size(x) * max(m, n) > min_expand``, ``x`` not nullable) is a binary counter of called rules
    instead of ``n`` copies of ``x``: ``E_k = E_(k-1) E_(k-1)`` (exactly ``2**k`` copies),
    ``F_k = (E_(k-1) | ε) F_(k-1)`` (0 to ``2**k - 1``), and ``x{m,n} = x{m} x{0,n-m}`` from the bits
    of ``m`` and ``n - m`` — O(log n) rules and NFA states instead of O(n), the same language, and a
    parse of any count is unique (so a configuration holds O(log² n) items). ``x{m,}`` becomes
    ``x{m} x*``. The pushdown matcher then counts on its stack: a string with ``maxLength:
    1000000`` compiles in milliseconds and exactly (what llguidance's derivative-based lexer does
    with its counted repeats, by other means).

    With ``lazy`` (the grammar is all productive, so the matcher may generate rules), a repeat
    becomes a :class:`RepeatCounter` instead (a unary counter generated on demand, whose counts
    far from the bounds share one mask row).

    **Repeats inside a counter's item.** With ``lazy``, a repeat inside the item of a
    :class:`RepeatCounter` becomes a counter as well from ``nested_min_count`` repetitions
    (None: :data:`NESTED_REPEAT_MIN_COUNT`; ``0`` turns this off), however small its expansion,
    when it repeats more times than the outer repeat (``max(m, n)`` of each). Expanded,
    ``.{100,}`` in ``(?:.{100,}|\\d){40,}`` is 100 copies of ``.`` (200 by the size estimate,
    under ``min_expand``), and where the outer item is ambiguous (a digit is a ``.`` or a
    ``\\d``) a configuration holds every one of those positions at once: 901 items (100
    positions times the UTF-8 lead states of ``.``), a new configuration at each step, 7 s of
    CPU for 140 characters. Counted, the positions are counts of the inner counter, whose frames
    :meth:`PushdownIndex._merge_counts` merges into intervals (the counting sets of Holík et al.
    2019, applied to the inner repeat as to the outer one). The same language. Pairs of counts
    that cannot merge (on ``1…1`` every digit advances one count or the other: a diagonal) are
    at most one per count of the outer counter, hence the condition: fewer than the positions
    of the expansion. With an outer count as large as the inner (``(?:.{100,}|\\d){400,}``) the
    expansion is kept, where the outer count's mask alias (:meth:`PushdownIndex._count_alias`,
    which sees the frames at the top) shares the rows of the diagonal's steps: counted, the
    inner frame on top refuses the alias and the walk over 300 digits took 60 s instead of 12.

    The same holds inside the item of a repeat left expanded (an outer ``*`` or ``+``, or a
    repeat too small to count), with the outer repeat's ``max(m, n)`` (``*``: 0, ``+``: 1): in
    ``(?:.{100,}|\\d)+`` a digit run held every position of ``.{100,}`` (902 items, 2.6 s over
    140 characters; 11 items counted, the frames of the inner counter all on one stack, so one
    interval), and in ``(?:[a-z]{1,100}\\s?)+`` each letter may end a word and start the next
    (110 items). Outside counters nothing bounds the pairs that cannot merge by an outer count:
    the copies of an expanded ``x{m,n}`` are its ``max(m, n)`` positions. A rule referenced inside
    such an item, or a counter's (``y ::= (x | [0-9])+``, ``x ::= [^\\n]{100,}``), directly or
    through other rules (``x ::= w``), has its repeats rewritten the same way, with the largest
    outer count of the places referencing it (the same language wherever else it is referenced);
    looked for only where a rule still holds a repeat of ``nested_min_count`` or more after the
    rewrite above.

    A repeat of ``min_count`` or more copies of a body nullable through a reference to a nullable
    rule (whatever its size: each copy could be skipped by an empty path, so a configuration held
    O(n) NFA items) is first rewritten as :func:`~.regex.parser.repeat_node` rewrites a surely
    nullable one, ``x{m,n}`` = ``x'{0,n}`` (the same language): ``x'`` is ``x`` without the empty
    string, calling an empty-free rule ``__nonempty<i>_<r>`` (:data:`NONEMPTY_PREFIX`) for each
    nullable rule ``r`` where ``x`` may start (none is left-recursive: ``r`` would be). Where that
    form still matches empty (a nullable leaf the rewrite does not see into, a nest deeper than
    ``NONEMPTY_DEPTH_MAX``) the repeat stays as written.

    Returns
    -------
    (grammar, counting rule names)
        ``grammar`` itself and an empty set when nothing is rewritten. The counting rules are
        :attr:`Grammar.keep_calls` (never inlined back); their internal frames (up to 2·log2 n)
        do not count toward the recursion depth bound: a counted repeat costs the one level of the
        call into it, like any rule call, whatever its count.

    ``large_bodies``, when given (:attr:`_Scan.large_bodies` of a scan with the same
    ``min_count``): the ids of the reachable rule bodies holding a repeat of ``min_count`` or
    more; the other rules are kept as they are without a rebuild (which would give them back
    unchanged: every repeat in them is below ``min_count``).
    """
    if not (large_bodies if large_bodies is not None else _has_large_repeat(grammar, min_count)):
        return grammar, set()
    rules = grammar.rules
    null: list = []
    new: dict[str, Expr] = {}
    tags: dict[int, str] = {}
    pins: list = []
    taken = set(rules)
    EMPTY = Concat(())

    def tag(item) -> str:
        t = tags.get(id(item))
        if t is None:
            i = len(tags)
            while any(n.startswith(f"{COUNT_PREFIX}{i}_") for n in taken):
                i += 1
            t = tags[id(item)] = f"{COUNT_PREFIX}{i}"
            pins.append(item)
        return t

    def exact(item, k: int):  # x{2**k}
        if k == 0:
            return item
        nm = f"{tag(item)}_e{k}"
        if nm not in new:
            sub = exact(item, k - 1)
            new[nm] = Concat((sub, sub))
        return Ref(nm)

    def below(item, k: int):  # x{0, 2**k - 1}
        if k == 0:
            return EMPTY
        if k == 1:
            return Repeat(item, 0, 1)
        nm = f"{tag(item)}_f{k}"
        if nm not in new:
            new[nm] = Concat((Alt((exact(item, k - 1), EMPTY)), below(item, k - 1)))
        return Ref(nm)

    def upto(item, r: int):  # x{0, r}
        if r <= 1:
            return EMPTY if r == 0 else Repeat(item, 0, 1)
        k = r.bit_length() - 1
        if r == (1 << (k + 1)) - 1:
            return below(item, k + 1)
        return Alt((below(item, k), Concat((exact(item, k), upto(item, r - (1 << k))))))

    def fixed(item, m: int):  # x{m}
        return [exact(item, k) for k in range(m.bit_length() - 1, -1, -1) if m >> k & 1]

    size_memo: dict = {} if memo is None else memo
    # the empty-free forms of nullable rules (a repeat of a reference to one: x{0,700} with x ::=
    # "a"? "b"?, built as written, held O(n) NFA items per configuration, like a nullable body)
    primed: dict[str, Expr | None] = {}  # nullable rule -> a reference to its empty-free rule, or None
    primed_rules: dict[str, Expr] = {}  # the empty-free rules' bodies
    rewrote: list = []  # the repeats of nullable references rewritten
    ew_memo: dict = {}
    ne_memo: dict = {}

    def ew(x) -> int:
        return empty_when(x, lambda y: W_ALL if isinstance(y, Ref) and y.name in null[0] else 0, ew_memo)

    def prime(x, depth: int):
        name = x.name
        if name not in primed:
            body = _nonempty(rules[name], lambda n: n, ne_memo, depth + 1, (ew, prime))
            if body is None:
                primed[name] = None
            else:
                nm = f"{NONEMPTY_PREFIX}{len(primed_rules)}_{name}"
                while nm in taken:
                    nm += "_"
                taken.add(nm)
                primed_rules[nm] = body
                primed[name] = Ref(nm)
        return primed[name]

    def still_nullable(y) -> bool:
        """``_nullable`` of ``y`` with the empty-free rules' own nullability (a fixpoint: a body
        may keep a nullable leaf the rewrite does not see into, e.g. a lazily generated rule)."""
        from .ir import _nullable

        null_all = set(null[0])
        changed = True
        while changed:
            changed = False
            for nm, b in primed_rules.items():
                if nm not in null_all and _nullable(b, null_all):
                    null_all.add(nm)
                    changed = True
        return _nullable(y, null_all)

    def replace(nd: Repeat):
        count = max(nd.min, nd.max if nd.max is not None else 0)
        if count < min_count:
            return nd
        if not null:
            null.append(grammar.nullable_rules())
        from .ir import _nullable

        if _nullable(nd.item, null[0]):  # (whatever its size: each copy could be skipped)
            # nullable through a reference (a surely nullable body is rewritten when built,
            # regex.parser.repeat_node): x{m,n} = x'{0,n} with x' its empty-free form
            y = _nonempty(nd.item, lambda n: n, ne_memo, 0, (ew, prime)) if ew(nd.item) == W_ALL else nd.item
            if y is not None and (y is nd.item or still_nullable(y)):
                return nd
            rewrote.append(nd)
            if y is None:
                return EMPTY
            r = repeat_node(y, 0, nd.max)
            return replace(r) if isinstance(r, Repeat) else r
        if _size(nd.item, size_memo) * count <= min_expand:
            return nd
        if lazy:
            return counter(nd)
        parts = fixed(nd.item, nd.min)
        parts.append(Repeat(nd.item, 0, None) if nd.max is None else upto(nd.item, nd.max - nd.min))
        parts = [p for p in parts if not (isinstance(p, Concat) and not p.items)]
        return parts[0] if len(parts) == 1 else Concat(tuple(parts))

    counters: dict[tuple[int, int, int | None], LazyRule] = {}
    nested_min = NESTED_REPEAT_MIN_COUNT if nested_min_count is None else nested_min_count
    nested_done: dict[int, dict[int, Expr]] = {}  # outer count -> rebuild memo
    ref_outer: dict[str, int] = {}  # rule referenced inside a repeat's item -> the largest outer count

    def note_ref(nd, outer: int):
        if isinstance(nd, Ref) and ref_outer.get(nd.name, -1) < outer:
            ref_outer[nd.name] = outer
        return None

    def nested_item(item, outer: int):
        """``item`` (of a repeat of ``outer`` counts) with its repeats as :func:`nested` has them;
        the rules it references are noted (:func:`note_ref`)."""
        return rebuild(item, nested_done.setdefault(outer, {}), pre=lambda n: note_ref(n, outer),
                       post=lambda r: nested(r, outer) if isinstance(r, Repeat) else r)

    def nested(nd: Repeat, outer: int):
        """A repeat inside the item of a counter of ``outer`` counts: a counter too from
        ``nested_min`` repetitions and more than ``outer``, whatever its size (see the docstring),
        else as it is."""
        count = max(nd.min, nd.max if nd.max is not None else 0)
        if count < nested_min or count <= outer:
            return nd
        if not null:
            null.append(grammar.nullable_rules())
        from .ir import _nullable

        return nd if _nullable(nd.item, null[0]) else counter(nd)

    def counter(nd: Repeat) -> LazyRule:
        key = (id(nd.item), nd.min, nd.max)
        hit = counters.get(key)
        if hit is None:
            hi = "" if nd.max is None else nd.max
            name = f"{tag(nd.item)}{{{nd.min},{hi}}}"  # (tag pins nd.item: the key's id stays its)
            item = nd.item
            if nested_min > 0:
                item = nested_item(item, max(nd.min, nd.max if nd.max is not None else 0))
            hit = counters[key] = LazyRule(RepeatCounter(item, nd.min, nd.max, name), 0)
        return hit

    done: dict[int, Expr] = {}

    def outer_repeat(r: Repeat):
        """``r`` as :func:`replace` has it; a repeat left as it is (expanded) has the repeats of
        its item as :func:`nested` has them, as a counter's item has."""
        res = replace(r)
        if res is not r or nested_min <= 0 or not lazy:
            return res
        item = nested_item(r.item, max(r.min, r.max if r.max is not None else 0))
        return r if item is r.item else Repeat(item, r.min, r.max)

    def rewrite(node):
        return rebuild(node, done, post=lambda r: outer_repeat(r) if isinstance(r, Repeat) else r)

    try:
        reach = grammar.reachable()
        new_rules = {r: (rewrite(rules[r]) if large_bodies is None or id(rules[r]) in large_bodies else rules[r])
                     if r in rules else None for r in reach}
        if nested_min > 0 and lazy:
            # a body left as it was holds a repeat of ``nested_min`` or more iff the scan that
            # listed ``large_bodies`` (the same count) found one in it: not walked again
            known = large_bodies is not None and nested_min == min_count
            # repeats reached through a reference (``y ::= (x | [0-9])+``, ``x ::= [a-z]{100,}``): the
            # rules still holding a repeat of ``nested_min`` or more, where referenced inside a
            # repeat's item, have those repeats as :func:`nested` has them (the same language wherever
            # the rule is referenced from); only looked for where such a rule exists
            held = {r for r, b in new_rules.items() if b is not None and (
                id(b) in large_bodies if known and b is rules.get(r) else _has_large_repeat_in(b, nested_min))}
            if held:
                new_rules.update((r, rewrite(rules[r])) for r in reach
                                 if r in rules and new_rules[r] is rules[r] and rules[r] is not None)
                # the rules a held one is reached through (``x ::= w``, ``w ::= [a-z]{100,}``): walked
                # too, so the outer count reaches ``w`` through ``x``
                callers: dict[str, list[str]] = {}
                for r in reach:
                    if rules.get(r) is not None:
                        for x in grammar.references(r):
                            callers.setdefault(x, []).append(r)
                via = set(held)
                stack = list(held)
                while stack:
                    for c in callers.get(stack.pop(), ()):
                        if c not in via:
                            via.add(c)
                            stack.append(c)
                base = dict(new_rules)
                done_at: dict[str, int] = {}
                todo = [r for r in via if r in ref_outer]
                while todo:
                    r = todo.pop()
                    outer = ref_outer[r]
                    if done_at.get(r, -1) >= outer:
                        continue
                    done_at[r] = outer
                    new_rules[r] = nested_item(base[r], outer)
                    todo.extend(x for x in via if x in ref_outer and done_at.get(x, -1) < ref_outer[x])
        done_primed: set[str] = set()
        while len(done_primed) < len(primed_rules):  # the empty-free rules' own large repeats
            for nm in [nm for nm in primed_rules if nm not in done_primed]:
                done_primed.add(nm)
                primed_rules[nm] = rewrite(primed_rules[nm])
    finally:
        # the local functions above refer to one another: unlinked, so that no reference cycle is
        # left for the cyclic collector, returned or raised (~70 objects a compile; frozen for good
        # under the plugin's STRUCTGATE_GC_FREEZE_AFTER_COMPILE)
        tag = exact = below = upto = fixed = ew = prime = still_nullable = replace = None
        note_ref = nested_item = nested = counter = outer_repeat = rewrite = None
    if not new and not counters and not rewrote:
        return grammar, set()
    full = dict(rules)
    full.update((r, b) for r, b in new_rules.items() if b is not None)
    full.update(primed_rules)
    full.update(new)
    g = grammar.derived(full, keep_calls=set(grammar.keep_calls) | set(new))
    g.__dict__["_n_counters"] = len(counters)  # (read by build_grammar_nfa: a bound on frame needs)
    return g, set(new)


#: :func:`frame_needs`' value for what cannot complete at all (an unproductive rule or expression)
NO_NEED = 1 << 30


class FrameNeeds:
    """What :func:`frame_needs` found: upper bounds on the stack frames completions need.

    Attributes
    ----------
    rule : dict[str, int]
        Rule name → frames its body needs to complete (:data:`NO_NEED`: it cannot).
    auto : dict[LazyAutomaton, int]
        Generated automaton → frames any of its states' rules needs.
    bound : int
        The largest finite need of a call site (a called reference or a generated rule, its own
        frame included): every position of every rule that can complete at all can complete
        within this many frames above its own.
    chain : tuple[str, ...]
        The called rules of the root's shortest completion, outermost first (for messages).
    """

    __slots__ = ("rule", "auto", "bound", "chain")


def frame_needs(grammar: Grammar, called) -> FrameNeeds:
    """Upper bounds on the stack frames needed to complete each rule of ``grammar``: the least
    fixpoint of

    * ``need(a b) = max(need(a), need(b))``, ``need(a | b) = min(need(a), need(b))``,
      ``need(x{0,..}) = 0``, ``need(x{m,..}) = need(x)`` (``m >= 1``), a byte or code-point
      set ``0`` (:data:`NO_NEED` when it is empty), and a reference ``need(callee) + 1`` when
      ``called(name)`` (a ``CALL`` state of the NFA) or ``need(callee)`` when it is inlined;
    * a :class:`~structgate.native.ir.LazyRule` leaf ``1 + U(A)``, ``U(A)`` (every state of the
      generated automaton ``A``) the largest need of its productive symbols
      (:meth:`~structgate.native.ir.LazyAutomaton.symbols`: a state's rule is symbols followed by a
      tail call of another state, which takes no frame), a symbol that is itself a call taking no
      frame when ``A`` is ``counting``.

    It is the shortest derivation's stack height (the height of a derivation is the largest number
    of nested calls along it), found with Knuth's generalisation of Dijkstra's algorithm (1977:
    ``min`` / ``max`` of the children plus a non-negative cost are superior functions): nodes are
    the expression nodes of the reachable bodies and of the automata's symbols (a subtree shared
    between rules once), values are settled in increasing order from a bucket queue, a ``max``
    node when its last child settles, a ``min`` node at its first. Linear in the size of the
    grammar; a subtree without references is folded to a constant while the nodes are made.

    Limits: the values are upper bounds of what the pushdown matcher needs, not always equal to
    it: a tail call takes no frame in the matcher and counts one here, so do the frames inside
    counting rules (:func:`count_large_repeats`; free in the matcher); ``U(A)`` bounds every state
    of ``A`` at once. The matcher checks exactly where it matters (:meth:`PushdownIndex._completes`)
    and uses these only to know where it need not.
    """
    rules = grammar.rules
    INF = NO_NEED
    # nodes: ``min`` (OR) or ``max`` (AND) of their children's values plus the edge's cost
    is_and: list[bool] = []
    waiting: list[int] = []  # AND: children not settled yet
    parents: list[list] = []  # node -> [parent, cost, parent, cost, ...]
    sources: list[int] = []  # nodes whose value is 0 whatever the rest
    rule_node: dict[int, int] = {}  # id(body) -> node standing for the rule (an OR of its body)
    call_node: dict[int, int] = {}  # id(body) -> node of a call of it (cost 1)
    auto_node: dict = {}  # LazyAutomaton -> node of ``U(A)``
    leaf_node: dict = {}  # LazyAutomaton -> node of a LazyRule leaf of it (``1 + U(A)``)
    name_of: dict[int, str] = {}  # rule node -> a rule name (messages)
    desc: dict[int, int] = {}  # id(composite expression) -> its value: a node (>= 0), ZERO or NEVER
    pins: list = []  # the automata's symbol lists (ids in ``desc`` stay theirs meanwhile)
    ZERO, NEVER = -1, -2  # constant values: 0, and NO_NEED (it cannot complete)
    todo_rules: list = []  # (rule node, body)
    todo_autos: list = []

    def new(and_: bool) -> int:
        is_and.append(and_)
        waiting.append(0)
        parents.append([])
        return len(is_and) - 1

    def edge(child: int, parent: int, cost: int) -> None:
        parents[child].append(parent)
        parents[child].append(cost)

    def rule_of(name: str) -> int:
        body = rules[name]
        k = id(body)
        n = rule_node.get(k)
        if n is None:
            n = rule_node[k] = new(False)
            name_of[n] = name
            todo_rules.append((n, body))
        return n

    def auto_of(a) -> int:
        n = auto_node.get(a)
        if n is None:
            n = auto_node[a] = new(True)
            todo_autos.append((n, a))
        return n

    def leaf(x) -> int:
        """The value of a non-composite expression (a node, ``ZERO`` or ``NEVER``)."""
        t = type(x)
        if t is Ref:
            if x.name not in rules:
                return NEVER
            r = rule_of(x.name)
            if not called(x.name):
                return r
            k = id(rules[x.name])
            c = call_node.get(k)
            if c is None:
                c = call_node[k] = new(False)
                edge(r, c, 1)
            return c
        if t is LazyRule:
            c = leaf_node.get(x.auto)
            if c is None:
                c = leaf_node[x.auto] = new(False)
                edge(auto_of(x.auto), c, 1)
            return c
        if t is Chars:
            rs = x.ranges  # (a set of surrogates only has no UTF-8 encoding)
            return ZERO if rs and (rs[0][0] < 0xD800 or rs[-1][1] > 0xDFFF or _encodable(rs)) else NEVER
        if t is ByteSet:
            return ZERO if x.ranges else NEVER
        return ZERO  # an anchor

    def value(e) -> int:
        """The value of expression ``e``: composite nodes settled in post-order (iterative). Every
        child is valued, whatever its parent's value (the rules under ``x*`` are reachable: their
        positions count toward the bound)."""
        t = type(e)
        if t is not Concat and t is not Alt and t is not Repeat:
            return leaf(e)
        hit = desc.get(id(e))
        if hit is not None:
            return hit
        stack = [e]
        while stack:
            x = stack[-1]
            k = id(x)
            if k in desc:
                stack.pop()
                continue
            tx = type(x)
            kids = (x.item,) if tx is Repeat else x.items
            todo = False
            for c in kids:
                tc = type(c)
                if (tc is Concat or tc is Alt or tc is Repeat) and id(c) not in desc:
                    stack.append(c)
                    todo = True
            if todo:
                continue
            stack.pop()
            zero = never = False
            vals = []
            for c in kids:
                tc = type(c)
                if tc is Concat or tc is Alt or tc is Repeat:
                    v = desc[id(c)]
                else:
                    v = leaf(c)
                if v == ZERO:
                    zero = True
                elif v == NEVER:
                    never = True
                elif v not in vals:
                    vals.append(v)
            if tx is Alt:
                if zero or not vals:
                    desc[k] = ZERO if zero else NEVER
                    continue
            elif tx is Repeat and x.min == 0:
                desc[k] = ZERO
                continue
            elif never or not vals:  # a concatenation (a repeat of at least one: its item)
                desc[k] = NEVER if never else ZERO
                continue
            if len(vals) == 1:
                desc[k] = vals[0]
                continue
            n = desc[k] = new(tx is not Alt)
            waiting[n] = len(vals)
            for v in vals:
                edge(v, n, 0)
        return desc[id(e)]

    root = rule_of(grammar.root)
    prod = None
    while todo_rules or todo_autos:
        while todo_rules:
            n, body = todo_rules.pop()
            v = value(body)
            if v == ZERO:
                sources.append(n)
            elif v != NEVER:
                edge(v, n, 0)
        while todo_autos:
            n, a = todo_autos.pop()
            if prod is None:
                prod = grammar.productive_rules()
            vals = []
            syms = a.symbols()
            pins.append(syms)
            for s in syms:
                if not _productive(s, prod):
                    continue  # on no completing path
                ts = type(s)
                if a.counting and ts is LazyRule:  # a call from a counting rule: no frame
                    v = auto_of(s.auto)
                elif a.counting and ts is Ref and s.name in rules and called(s.name):
                    v = rule_of(s.name)
                else:
                    v = value(s)
                if v != ZERO:
                    vals.append(v)
            vals = [v for v in dict.fromkeys(vals) if v != NEVER]  # (none: productive symbols settle)
            waiting[n] = len(vals)
            for v in vals:
                edge(v, n, 0)
            if not vals:
                sources.append(n)
    # Knuth's algorithm over the bucket queue (costs 0 and 1: values stay below the node count)
    n_nodes = len(is_and)
    val = [INF] * n_nodes
    best = [INF] * n_nodes
    via = [-1] * n_nodes
    top = [0] * n_nodes  # AND: the largest child value so far
    buckets: list[list[int]] = [list(dict.fromkeys(sources))]
    for s in buckets[0]:
        best[s] = 0
    d = 0
    while d < len(buckets):
        b = buckets[d]
        i = 0
        while i < len(b):  # the bucket grows while it is read (cost-0 edges)
            x = b[i]
            i += 1
            if val[x] != INF or best[x] != d:
                continue
            val[x] = d
            ps = parents[x]
            for j in range(0, len(ps), 2):
                p, c = ps[j], ps[j + 1]
                if val[p] != INF:
                    continue
                nv = d + c
                if is_and[p]:
                    if nv >= top[p]:
                        top[p], via[p] = nv, x
                    waiting[p] -= 1
                    if waiting[p]:
                        continue
                    nv = top[p]
                elif nv >= best[p]:
                    continue
                else:
                    via[p] = x
                best[p] = nv
                while len(buckets) <= nv:
                    buckets.append([])
                buckets[nv].append(p)
        d += 1
    out = FrameNeeds()
    out.rule = {r: val[rule_node[id(rules[r])]] for r in grammar.reachable() if id(rules[r]) in rule_node}
    out.auto = {a: val[n] for a, n in auto_node.items()}
    sites = [val[n] for n in (*call_node.values(), *leaf_node.values()) if val[n] != INF]
    out.bound = max(sites, default=0)
    chain = [grammar.root]
    calls = set(call_node.values()) | set(leaf_node.values())
    auto_name = {n: a.name for a, n in auto_node.items()}
    x, prev, seen = root, -1, set()
    while x >= 0 and x not in seen:  # the witnesses of the root's value, down to a source
        seen.add(x)
        if prev in calls:
            chain.append(name_of.get(x) or auto_name.get(x, "?"))
        prev, x = x, via[x]
    out.chain = tuple(chain)
    return out


def build_grammar_nfa(grammar: Grammar, *, inline_max_size: int = 4096,
                      max_nfa_states: int = 2_000_000, count_repeats_over: int = 512,
                      lazy: bool = False, lazy_counters: bool | None = None,
                      defer_min_size: int = DEFER_MIN_SIZE) -> GrammarNFA:
    """Compile every reachable rule of ``grammar`` into one NFA with ``CALL``/``RET`` states.

    With ``lazy``, only the root rule's body is built here; a called rule's body is built the first
    time a configuration calls it (:meth:`GrammarNFA.ensure_rule`, from the matcher's closures), so
    the definitions an output never reaches are never built (a schema's unused ``$defs``, the
    alternatives of a large ``anyOf`` not taken). The byte partition is then computed from the
    grammar's byte sets instead of the built states (the same cuts). Laziness needs every rule
    productive (no liveness fixpoint across rules); otherwise the build is eager.

    Parameters
    ----------
    grammar : Grammar
        A checked grammar (:meth:`Grammar.check`).
    inline_max_size : int
        A non-recursive rule referenced more than once is inlined when its size estimate (NFA states
        after expanding counted repeats) is at most this; otherwise it is called through the stack.
        A rule referenced once is always inlined.
    max_nfa_states : int
        Cap on NFA states.
    count_repeats_over : int
        A counted repeat whose expansion would exceed this many NFA states (and that repeats 32
        times or more) is matched by a counter (:func:`count_large_repeats`): a lazily generated
        :class:`RepeatCounter` when every rule is productive, else a binary counter of called
        rules; ``0`` expands every repeat.
    lazy_counters : bool | None
        Force the counter kind (None: lazy when every rule is productive; True needs that).
    defer_min_size : int
        With ``lazy`` (every rule productive, nothing that matches nothing: :attr:`_Scan.empty`),
        a concatenation, alternation or repeat inside a rule's body (the root's, or a called
        rule's when it is first called; inlined callees included) whose size estimate is at least
        this is not built with the rest: a ``DEFER`` state stands for it and the pushdown index
        builds it the first time a closure reaches it (:meth:`GrammarNFA.expand`). The same language; the states may differ: the eager build
        shares equal suffixes bottom-up (by byte range and next state), and a placeholder is one
        per (subtree object, continuation), so structurally equal subtrees that are different
        objects (the identical members of an ``anyOf``'s branches, each from its own rule) get
        copies where the eager build has one (measured on MaskBench: configurations the same in
        total, NFA states fewer; an adversarial ``anyOf`` of 30 identical objects: 6× the states,
        1.6× the configurations of a generation). A large schema's compile then builds the states
        its first mask needs, and a generation builds the properties it visits. ``0`` builds each
        rule's body whole.
    lazy : bool
        Build called rules on first use (above). A grammar with rules generated on demand (a
        :class:`~structgate.native.ir.LazyRule` in the IR, or the counters made here) is built
        lazily whatever this says: its rules do not exist before the matcher reaches them.

    Raises
    ------
    CompileLimitError
        ``max_nfa_states``.
    GrammarSyntaxError
        An anchor (``^``/``$``) inside a grammar rule.
    """
    counting: set[str] = set()
    n_counters = 0  # RepeatCounters made by count_large_repeats
    # every rule productive and (checked below) no empty set built: every state is live
    all_live = grammar.all_productive()
    memo: dict = {}  # node id -> size estimate (references 1), shared by the passes
    pins = [grammar]  # the grammars the passes rewrote stay alive, so no memoised id is reused
    # one walk for the passes below (each redoes its own on a rewrite)
    scan = _scan(grammar, memo, share_min=inline_max_size)
    dynamic = scan.lazy  # rules generated on demand: the IR's own, or counters made below
    if count_repeats_over > 0 and scan.large_repeat:
        lazy_c = all_live if lazy_counters is None else bool(lazy_counters) and all_live
        g0 = grammar
        grammar, counting = count_large_repeats(grammar, count_repeats_over, memo=memo, lazy=lazy_c,
                                                large_bodies=scan.large_bodies)
        n_counters = grammar.__dict__.get("_n_counters", 0)
        pins.append(grammar)
        if grammar is not g0:
            dynamic = dynamic or lazy_c  # lazy: every rewrite is a RepeatCounter
    shared = share_repeated_subtrees(grammar, inline_max_size, memo,
                                     scan if grammar is pins[0] else None)
    pins.append(shared)
    check_size(shared, max_nfa_states, memo, scan.size if shared is pins[0] else None)
    grammar = shared
    g = GrammarNFA()
    g.ir_lazy = scan.lazy
    # the builder closures kept on the NFA (``_build``, ``_expand``, ``dyn_rule``) reach it through a
    # weak proxy: no reference cycle, so a compiled grammar is freed by reference counting alone
    gp = weakref.proxy(g)
    nfa = g.nfa = NFA(max_nfa_states, multi_range=True)
    rules = grammar.rules
    order = grammar.reachable()
    recursive = grammar.recursive_rules()
    # rules with the very same body object (front ends memoise parsed texts, so equal rule texts
    # give one object; e.g. the same property list under several items schemas) are one rule: the
    # same equation, so the same language. ``canon`` maps each such rule to the first in ``order``
    canon: dict[str, str] = {}
    first_of: dict[int, str] = {}
    for r in order:
        b = rules[r]
        if r != grammar.root and isinstance(b, (Concat, Alt, Repeat)):
            c = first_of.setdefault(id(b), r)
            if c != r:
                canon[r] = c
    uses: dict[str, int] = {}
    for r in order:
        for nm, c in grammar.uses(r).items():
            nm = canon.get(nm, nm)
            uses[nm] = uses.get(nm, 0) + c
    # decide callee by callee, callees first: a rule is inlined when it is used once, or when its
    # size *with its own inlined callees expanded* is small (so DAGs of shared rules stay calls)
    keep = getattr(grammar, "keep_calls", ()) or ()
    call_rule: set[str] = {canon.get(r, r) for r in order if r in recursive or r == grammar.root or r in keep}
    eff: dict[str, int] = {}
    post: list[str] = []
    state: dict[str, int] = {}
    for r0 in order:
        if state.get(r0):
            continue
        stack = [(r0, iter(sorted(grammar.references(r0))))]
        state[r0] = 1
        while stack:
            r, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[r] = 2
                post.append(r)
            elif nxt in rules and not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(grammar.references(nxt)))))
    # one memo for every rule: callees are decided before their callers, so a reference's size
    # (its inlined size, or 1 for a call) is final whenever a subtree holding it is measured
    ref_memo: dict = {}
    ref_size: dict[str, int] = {}
    # only the rules whose decision is open (used more than once, not a call already) and the
    # rules they may inline (transitively) need a size
    need = {canon.get(r, r) for r in order if canon.get(r, r) not in call_rule and uses.get(canon.get(r, r), 0) > 1}
    work = list(need)
    while work:
        for x in grammar.references(work.pop()):
            x = canon.get(x, x)
            if x in rules and x not in need and x not in call_rule:
                need.add(x)
                work.append(x)
    for r in post:  # callees before callers (cycles broken arbitrarily; those rules are calls anyway)
        key = canon.get(r, r)
        if key not in need:
            continue
        if key not in eff:
            body = rules[key]
            # a body without references has the size the scan measured (references count 1 there);
            # with references that size is a lower bound (each counts its callee's size, at least
            # 1): above ``inline_max_size`` it decides as the exact size would, and a caller holding
            # it is above too (sizes only grow up the tree), so it stands in for the exact size
            sz = memo.get(id(body))
            # with references that all count 1 (calls, rules of one state) the size is the scan's
            if sz is None or (sz <= inline_max_size and any(ref_size.get(x, 1) != 1 for x in grammar.references(key))):
                sz = _size(body, ref_memo, ref_size)
            if key not in call_rule and uses.get(key, 0) > 1 and sz > inline_max_size:
                call_rule.add(key)
            eff[key] = sz
            ref_size[key] = 1 if key in call_rule else sz
        ref_size[r] = ref_size[key]
    index = {grammar.root: 0}
    g.rule_names = [grammar.root]
    for r in order:
        if r in call_rule and r not in index:
            index[r] = len(g.rule_names)
            g.rule_names.append(r)
    g.rule_start = [-1] * len(g.rule_names)
    g.rule_counting = [1 if r in counting else 0 for r in g.rule_names]
    static_names = list(g.rule_names)

    def needs():
        """:func:`frame_needs` of the grammar as built (a reference is a call iff its rule is)."""
        fn = frame_needs(grammar, lambda name: canon.get(name, name) in index)
        return [fn.rule.get(r, NO_NEED) for r in static_names], fn.auto, fn.bound, fn.chain

    g.rule_has_calls = [False] * len(g.rule_names)
    g.rule_classes = [STANDARD_BYTE_CLASSES] * len(g.rule_names)
    call_memo: dict[tuple[int, int], int] = {}
    byte = nfa.byte
    dyn_index: dict[LazyRule, int] = {}  # a lazy automaton's state -> its rule index
    dyn_node: list = []  # rule index - n_static -> its LazyRule
    n_static = len(g.rule_names)

    def dyn_rule(node: LazyRule) -> int:
        i = dyn_index.get(node)
        if i is None:
            i = dyn_index[node] = len(gp.rule_names)
            dyn_node.append(node)
            gp.rule_names.append(f"{node.auto.name}#{node.state}")
            gp.rule_start.append(-1)
            gp.rule_counting.append(1 if node.auto.counting else 0)
            gp.rule_has_calls.append(True)
            gp.rule_classes.append(STANDARD_BYTE_CLASSES)
            gp.dyn_node[i] = node
            gp._unbuilt += 1
        return i

    def leaf(child, cnxt: int):
        """The IR's leaves for :func:`drive`: byte sets, calls (a state) or inlined bodies (a node)."""
        if isinstance(child, ByteSet):
            return nfa.byte_ranges(child.ranges, cnxt) if child.ranges else nfa.fail()
        if isinstance(child, Anchor):
            raise GrammarSyntaxError(f"anchor {'^' if child.kind == 'start' else '$'} inside grammar rule "
                                     f"{building[0]!r} is not supported", grammar.source,
                                     grammar.positions.get(building[0], 0), f"rule {building[0]!r}")
        if isinstance(child, LazyRule):
            ck = (dyn_rule(child), cnxt)
            v = call_memo.get(ck)
            if v is None:
                v = call_memo[ck] = nfa._new(CALL, ck[0], -1, cnxt, None)
                gp.n_calls += 1
            return v
        if isinstance(child, Ref):
            name = canon.get(child.name, child.name)
            if name in index:
                ck = (index[name], cnxt)
                v = call_memo.get(ck)
                if v is None:
                    v = call_memo[ck] = nfa._new(CALL, ck[0], -1, cnxt, None)
                    gp.n_calls += 1
                return v
            return rules[child.name]  # inline: compile the callee's body with this continuation
        return None

    building = [""]
    # deferred subtrees of the static rules' bodies (the root's and each called rule's): only
    # where no liveness pass is needed (every rule productive, no empty set: every state built
    # reaches its rule's RET)
    deferring = (lazy or dynamic) and all_live and not scan.empty and defer_min_size > 0
    deferred = g.deferred
    defer_rule: dict[int, int] = {}  # DEFER state -> the rule whose body it is part of
    # per rule with deferred subtrees not built yet: its build's memo (what is built later reuses
    # what was built before, as one eager build of the body would) and how many are left
    memos: dict[int, tuple[dict, list]] = {}
    pending: dict[int, int] = {}
    cur = [0]  # the rule being built

    def defer(node, cnxt: int):
        if memo.get(id(node), 0) < defer_min_size:
            return None
        v = nfa._new(DEFER, -1, -1, -1, None)
        deferred[v] = (node, cnxt)
        r = defer_rule[v] = cur[0]
        pending[r] = pending.get(r, 0) + 1
        return v

    def expand(v: int) -> None:
        node, cnxt = deferred[v]  # dropped once built (a build cut short by a limit is redone)
        r = defer_rule[v]
        m = memos[r]
        cur[0] = r
        building[0] = gp.rule_names[r]
        if type(node) is Repeat and node.max is None and node.min == 0:
            # x*: ``v`` is the loop state itself (what an eager build makes its start), so the
            # body's copy of a subtree that also precedes the loop continues into the same state
            item = node.item
            body = (nfa.chars(item.ranges, v) if type(item) is Chars
                    else drive(nfa, item, v, leaf, memo=m, defer=defer))
            nfa.outs[v] = tuple(dict.fromkeys((body, cnxt)))
        else:
            nfa.outs[v] = (drive(nfa, node, cnxt, leaf, memo=m, defer=defer),)
        # the subtree keeps standing for ``v``: what is built later before it continues into
        # ``v``, as what was built earlier does (else equal prefixes get two copies)
        m[0][(id(node), cnxt)] = v
        del deferred[v], defer_rule[v]
        owner.extend([r] * (len(nfa) - len(owner)))  # the new states are the rule's
        pending[r] -= 1
        if not pending[r]:  # the rule is whole: its memo is dropped
            del pending[r], memos[r]

    calls_memo: dict[str, bool] = {}

    def calls(name: str) -> bool:
        """Whether rule ``name``'s body, its inlined callees expanded, calls a rule. (Iterative:
        a recursive closure would be a reference cycle, which the compiled grammar must not hold,
        ``tests/test_plugin_gc_policy.py``.)"""
        hit = calls_memo.get(name)
        if hit is None:
            hit, seen, stack = False, {name}, [name]
            while stack and not hit:
                for c in (canon.get(r, r) for r in grammar.references(stack.pop())):
                    if c in index:
                        hit = True
                        break
                    if c in rules and c not in seen:
                        seen.add(c)
                        stack.append(c)
            calls_memo[name] = hit
        return hit

    def body(i: int, nxt: int) -> int:
        """Build static rule ``i``'s body with continuation ``nxt``. A called rule defers its large
        subtrees only when it calls rules: a call-free one (a string, a key) is built whole, so
        its walks stay one closed run of states that every grammar shares
        (:meth:`PushdownIndex._shared_key`)."""
        name = building[0] = gp.rule_names[i]
        if not deferring or (i and not calls(name)):
            return drive(nfa, rules[name], nxt, leaf)
        cur[0] = i
        m = memos[i] = ({}, [])
        st = drive(nfa, rules[name], nxt, leaf, memo=m, defer=defer)
        if pending.get(i):
            gp.rule_deferred.add(i)
        else:
            del memos[i]
        return st

    owner: list[int] = []
    g.owner = owner

    def build(i: int) -> None:
        ret = nfa._new(RET, i, -1, -1, None)
        if i >= n_static:
            node = dyn_node[i - n_static]
            building[0] = gp.rule_names[i]
            b = node.auto.body(node.state)
            gp.rule_start[i] = _small_build(nfa, b, ret, leaf) if _is_small(b) else drive(nfa, b, ret, leaf)
            gp.dyn_span[i] = (ret, len(nfa))
        else:
            gp.rule_start[i] = body(i, ret)
        gp.rule_span[i] = (ret, len(nfa))
        owner.extend([i] * (len(nfa) - len(owner)))

    if dynamic and not all_live:
        raise GrammarSyntaxError("a grammar with lazily generated rules must have every rule productive",
                                 grammar.source, 0, f"rule {grammar.root!r}")
    if (lazy or dynamic) and all_live and (len(g.rule_names) > 1 or dynamic or deferring):
        g._dynamic = dynamic
        if dynamic:
            g.dyn_rule = dyn_rule
        build(0)
        nfa.start = g.rule_start[0]
        g.live = bytearray(b"\x01") * len(nfa)
        g.live[nfa.match] = 0
        if nfa._fail >= 0:
            _prune_rule_states(g, 0)
        g.byte_classes = _partition_of(scan.ranges)  # the rewrites moved leaves, changed none
        n_rules = len(g.rule_names)
        if deferred and nfa._fail >= 0:  # (``deferring`` excludes it: a FAIL state needs pruning)
            raise RuntimeError("internal error: a deferred build made a FAIL state")
        g._partition_rule(0, 0, len(nfa))
        if deferring:  # (a called rule built later may defer too)
            g._expand = expand
        g._build = build
        g._unbuilt = n_rules - 1
        if scan.lazy:  # automata of the IR's own: how many, and how they nest, needs the walk
            g.rule_need, g.auto_need, g.need_bound, g.need_chain = needs()
        else:
            # the fixpoint is left to the first check near the depth bound (most outputs never
            # come near it); until then the horizon is a bound read off the build: a value of
            # :func:`frame_needs` counts cost-1 edges along a chain of distinct nodes, one per
            # called rule and one per counter's call into it (its item's call takes no frame)
            g.need_ub = len(static_names) + n_counters
            g._needs = needs
        return g
    for name, i in list(index.items()):
        build(i)
    nfa.start = g.rule_start[0]
    g.rule_need, g.auto_need, g.need_bound, g.need_chain = needs()  # (what a worker pickles)
    if all_live and nfa._fail < 0:
        # a Thompson NFA of productive expressions (no empty byte set, no call of a rule that
        # matches nothing): every state reaches its rule's RET, so there is nothing to prune
        g.live = bytearray(b"\x01") * len(nfa)
        g.live[nfa.match] = 0  # the regex NFA's MATCH state, unused by a grammar
    else:
        _prune(g)
    g.byte_classes = _alphabet(nfa)
    _rule_partitions(g)
    return g


def _group_by_intervals(pairs) -> dict[tuple, list[int]]:
    """``(item, class intervals)`` pairs grouped by equal intervals: intervals -> items, in first
    appearance order (the row builders' groups, :meth:`PushdownIndex._compute_row`)."""
    groups: dict[tuple, list[int]] = {}
    for it, ivs in pairs:
        g = groups.get(ivs)
        if g is None:
            groups[ivs] = [it]
        else:
            g.append(it)
    return groups


def _is_small(node, depth: int = 0) -> bool:
    """Whether ``node`` is a shallow tree of concatenations and alternations over calls only
    (:class:`LazyRule`, :class:`Ref`; a generated rule's body: a counter state's ``x · next | ε``),
    which :func:`_small_build` builds without :func:`drive`'s generator machinery."""
    if isinstance(node, (LazyRule, Ref)):
        return True
    if isinstance(node, (Concat, Alt)):
        return depth < 4 and len(node.items) <= 8 and all(_is_small(x, depth + 1) for x in node.items)
    return False


def _small_build(nfa: NFA, node, nxt: int, leaf) -> int:
    """:func:`drive` for a body that :func:`_is_small` accepts (the same states)."""
    if isinstance(node, Concat):
        cur = nxt
        for it in reversed(node.items):
            cur = _small_build(nfa, it, cur, leaf)
        return cur
    if isinstance(node, Alt):
        return nfa.split([_small_build(nfa, it, nxt, leaf) for it in node.items])
    r = leaf(node, nxt)
    if not isinstance(r, int):  # an inlined callee: the general builder
        return drive(nfa, r, nxt, leaf)
    return r


def _prune_rule_states(g: GrammarNFA, first: int) -> None:
    """Liveness of the states from ``first`` on (one rule's body, built last, closed under its own
    edges): backwards from its ``RET`` over byte and epsilon edges, a ``CALL`` passable iff its
    continuation is live (every callee is productive when the build is lazy); the shared ``FAIL``
    state is dead."""
    nfa = g.nfa
    n = len(nfa)
    kind, out, outs = nfa.kind, nfa.out, nfa.outs
    preds: dict[int, list[int]] = {}
    for v in range(first, n):
        k = kind[v]
        if k == BYTE or k == CALL:
            preds.setdefault(out[v], []).append(v)
        elif k == EPS:
            for w in outs[v]:
                preds.setdefault(w, []).append(v)
    live = g.live
    for v in range(first, n):
        live[v] = 0
    stack = [v for v in range(first, n) if kind[v] == RET]
    for v in stack:
        live[v] = 1
    while stack:
        for u in preds.get(stack.pop(), ()):
            if not live[u]:
                live[u] = 1
                stack.append(u)
    if nfa._fail >= 0:
        live[nfa._fail] = 0


_ONE_CLASS = np.zeros(256, dtype=np.uint8)
_ONE_CLASS.flags.writeable = False


def _rule_partition(g: GrammarNFA, i: int, first: int, n: int) -> None:
    """:func:`_rule_partitions` for rule ``i`` alone, whose states are ``first..n-1``."""
    nfa = g.nfa
    if n - first <= 32:  # small rules (one per count of a generated counter): no numpy round trips
        kinds = nfa.kind[first:n]
        g.rule_has_calls[i] = CALL in kinds
        cuts = {0}
        multi = nfa.multi
        for v in range(first, n):
            if nfa.kind[v] == BYTE:
                for a, z in (multi.get(v) if multi else None) or ((nfa.lo[v], nfa.hi[v]),):
                    cuts.add(a)
                    cuts.add(z + 1)
        if len(cuts) == 1:
            cls = _ONE_CLASS
        else:
            mark = np.zeros(257, dtype=np.int32)
            mark[list(cuts)] = 1
            cls = (np.cumsum(mark[:256]) - 1).astype(np.uint8)
        g.rule_classes[i] = cls
        return
    kind = np.asarray(nfa.kind[first:n], dtype=np.int8)
    g.rule_has_calls[i] = bool((kind == CALL).any())
    b = np.flatnonzero(kind == BYTE)
    mark = np.zeros(257, dtype=np.int32)
    mark[0] = 1
    mark[np.asarray(nfa.lo[first:n], dtype=np.int64)[b]] = 1
    mark[np.asarray(nfa.hi[first:n], dtype=np.int64)[b] + 1] = 1  # column 256 (a range to 0xFF) is dropped
    multi = nfa.multi
    if multi:  # a multi-range state: every range's bounds (looked up for this rule's states only)
        for v in (b + first).tolist():
            for a, z in multi.get(v, ()):
                mark[a] = 1
                mark[z + 1] = 1
    g.rule_classes[i] = (np.cumsum(mark[:256]) - 1).astype(np.uint8)


def _grammar_alphabet(grammar: Grammar) -> np.ndarray:
    """:func:`_alphabet` of the NFA that would be built for every reachable rule, read off the
    grammar's byte sets (:attr:`_Scan.ranges`) without building it."""
    return _partition_of(_scan(grammar).ranges)


def _rule_partitions(g: GrammarNFA) -> None:
    """Per rule: whether its body calls other rules, and the byte partition of its own BYTE states
    (a walk that stays inside a call-free rule can use the trie of that coarser partition), by
    :func:`_rule_partition` over each rule's states (one contiguous run of :attr:`GrammarNFA.owner`:
    a rule's body is built in one go). States shared between rules by hash-consing get the owner of
    the first rule built (the partition of every rule whose states they are still separates their
    ranges: a shared state has the same ranges in both)."""
    n_rules = len(g.rule_names)
    g.rule_has_calls = [False] * n_rules
    g.rule_classes = [STANDARD_BYTE_CLASSES] * n_rules
    owner = np.asarray(g.owner[: len(g.nfa)], dtype=np.int64)
    cut = np.flatnonzero(np.diff(owner)) + 1
    bounds = [0, *cut.tolist(), owner.shape[0]]
    for a, b in zip(bounds, bounds[1:]):
        if b > a:
            _rule_partition(g, int(owner[a]), a, b)


def _prune(g: GrammarNFA) -> None:
    """``live[v]`` = state ``v`` can reach its rule's ``RET``: backwards from every ``RET`` over
    byte and epsilon edges; a ``CALL`` is passable iff its continuation is live and its callee's
    start is live (a least fixpoint, one worklist)."""
    nfa = g.nfa
    n = len(nfa)
    kind, out, outs, lo = nfa.kind, nfa.out, nfa.outs, nfa.lo
    preds: list[list[int]] = [[] for _ in range(n)]
    call_by_out: dict[int, list[int]] = {}
    callers: dict[int, list[int]] = {}
    for v in range(n):
        k = kind[v]
        if k == BYTE:
            preds[out[v]].append(v)
        elif k == EPS:
            for w in outs[v]:
                preds[w].append(v)
        elif k == CALL:
            call_by_out.setdefault(out[v], []).append(v)
            callers.setdefault(lo[v], []).append(v)
    starts = g.rule_start
    start_of: dict[int, list[int]] = {}
    for i, s in enumerate(starts):
        start_of.setdefault(s, []).append(i)
    live = bytearray(n)
    stack = [v for v in range(n) if kind[v] == RET]
    for v in stack:
        live[v] = 1
    while stack:
        v = stack.pop()
        for u in preds[v]:
            if not live[u]:
                live[u] = 1
                stack.append(u)
        for c in call_by_out.get(v, ()):
            if not live[c] and live[starts[lo[c]]]:
                live[c] = 1
                stack.append(c)
        for r in start_of.get(v, ()):
            for c in callers.get(r, ()):
                if not live[c] and live[out[c]]:
                    live[c] = 1
                    stack.append(c)
    g.live = live


def _alphabet(nfa: NFA) -> np.ndarray:
    """The standard partition refined by every byte-range boundary of the NFA."""
    kind, lo, hi = nfa.kind, nfa.lo, nfa.hi
    multi = nfa.multi or {}
    return _partition_of(r for s in range(len(kind)) if kind[s] == BYTE for r in multi.get(s, ((lo[s], hi[s]),)))


def _partition_of(ranges) -> np.ndarray:
    """The standard partition refined by the bounds of every byte range ``(lo, hi)`` (inclusive)
    in ``ranges``; :data:`STANDARD_BYTE_CLASSES` itself when no bound is new."""
    cuts = set(_STD_CUT_SET)
    extra = False
    for a, b in ranges:
        b += 1
        if a not in cuts:
            cuts.add(a)
            extra = True
        if b not in cuts and b <= 256:
            cuts.add(b)
            extra = True
    if not extra:
        return STANDARD_BYTE_CLASSES
    cuts.discard(256)
    return _classes_from_cuts(cuts)


# ------------------------------------------------------------------------------------------------
# 2. class-quotiented token tries, shared per (vocabulary bytes, partition)
# ------------------------------------------------------------------------------------------------
_EMPTY_I64 = np.zeros(0, dtype=np.int64)


_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def _popcount_lut(words: np.ndarray) -> int:
    """Set bits of a packed row (int32 ``(width,)``) by a byte table (numpy < 2.0)."""
    return int(_POP8.take(words.view(np.uint8)).sum())


def _popcount(words: np.ndarray) -> int:
    """Set bits of a packed row (int32 ``(width,)``): ``np.bitwise_count`` (numpy >= 2.0; 10×
    faster than unpacking the bits), else :func:`_popcount_lut`. An even width is read as uint64
    words, and the counts summed by ``add.reduce`` into an intp (half the elements, no upcast
    pass: ~3 against ~6 µs a Llama 3 row)."""
    if not words.shape[0] & 1 and words.flags.c_contiguous:
        return int(np.add.reduce(np.bitwise_count(words.view(np.uint64)), dtype=np.intp))
    return int(np.bitwise_count(words.view(np.uint32)).sum())


if not hasattr(np, "bitwise_count"):
    _popcount = _popcount_lut  # noqa: F811


def _row_of_ids(ids: np.ndarray, width: int) -> np.ndarray:
    """The packed row (int32 ``(width,)``) of the distinct token ids ``ids`` (int64): the bits of
    one word are distinct, so their OR is their sum, one ``bincount`` over the words (float64
    sums below 2**32 are exact)."""
    w = np.left_shift(1, ids & 31, dtype=np.int64).astype(np.float64)
    return np.bincount(ids >> 5, weights=w, minlength=width).astype(np.uint32).view(np.int32)


def _pack(allowed: np.ndarray) -> np.ndarray:
    pad = (-allowed.shape[0]) % 32
    if pad:
        allowed = np.concatenate([allowed, np.zeros(pad, dtype=bool)])
    return np.packbits(allowed, bitorder="little").view(np.int32).copy()


def _class_labels(byte_classes: np.ndarray, alphabet: np.ndarray | None) -> np.ndarray:
    """Label of each class of ``byte_classes`` for the table lookups (int64 ``(n_classes,)``): the
    ``alphabet`` class of its lowest byte (every byte of a class behaves alike for the automata a
    trie of ``byte_classes`` is walked through); the identity without ``alphabet``."""
    nc = int(byte_classes.max()) + 1
    if alphabet is None:
        return np.arange(nc, dtype=np.int64)
    label = np.zeros(nc, dtype=np.int64)
    label[byte_classes[::-1].astype(np.int64)] = alphabet[::-1].astype(np.int64)
    return label


_TRIE_UIDS = itertools.count(1)


class _ClassTrie:
    """The vocabulary's byte trie quotiented by a byte partition (see
    :mod:`structgate.native.token_index`, step 2). ``levels[d] = (base, parent_local, class_id,
    child_bounds)``; ``token_cnode[t]`` = class node of token ``t`` (``n_nodes`` for tokens without
    bytes, a slot that is always dead)."""

    def __init__(self, trie, byte_classes: np.ndarray, n_tokens: int, alphabet: np.ndarray | None = None) -> None:
        cls_of_node = byte_classes.astype(np.int64)[trie.node_byte] if trie.n_nodes else np.zeros(0, np.int64)
        nc = int(byte_classes.max()) + 1
        label = _class_labels(byte_classes, alphabet)
        bnode_to_cnode = np.empty(trie.n_nodes, dtype=np.int64)
        levels = []
        prev_map = np.zeros(1, dtype=np.int64)
        cbase = 0
        n_prev = 1
        for d in range(trie.depth):
            lo, hi = int(trie.level_bounds[d]), int(trie.level_bounds[d + 1])
            cpar = prev_map[trie.node_parent[lo:hi]]
            key = cpar * nc + cls_of_node[lo:hi]
            span = n_prev * nc
            if span <= 4 * (hi - lo) + 4096:
                mark = np.zeros(span, dtype=bool)
                mark[key] = True
                uniq = mark.nonzero()[0]
                inv = (mark.cumsum() - 1)[key]
            else:
                uniq, inv = np.unique(key, return_inverse=True)
            par = (uniq // nc).astype(np.intp)
            cls = label[uniq % nc]
            bounds = np.zeros(n_prev + 1, dtype=np.int64)
            np.cumsum(np.bincount(par, minlength=n_prev), out=bounds[1:])
            levels.append((cbase, par, cls, bounds))
            bnode_to_cnode[lo:hi] = cbase + inv
            prev_map = inv
            n_prev = uniq.shape[0]
            cbase += n_prev
        self.levels = levels
        #: never reused in the process (a key of walks cached across grammars, unlike ``id``)
        self.uid = next(_TRIE_UIDS)
        self.level_base = np.asarray([lv[0] for lv in levels] + [cbase], dtype=np.int64)
        self.n_nodes = cbase
        self.n_classes = nc
        tn = trie.token_node
        tok_c = np.full(n_tokens, cbase, dtype=np.int64)
        has = tn >= 0
        tok_c[:tn.shape[0]][has] = bnode_to_cnode[tn[has]]
        self.token_cnode = tok_c
        self.max_level = max([lv[1].shape[0] for lv in levels] or [1])
        # tokens ordered by class node: the tokens ending at global nodes a..b-1 are
        # tokens_by_node[node_tok_start[a]:node_tok_start[b]] (nodes of a subtree are contiguous
        # ranges level by level, because each level is sorted by parent)
        # (the keys made unique by the token id, so the default sort gives the stable order: a
        # stable sort of the 128k class nodes and a binary search per node took 19 of a new
        # partition's ~45 ms; the starts are the counts' running sums)
        n_tok = tok_c.shape[0]
        order = np.argsort(tok_c * n_tok + np.arange(n_tok, dtype=np.int64))
        self.tokens_by_node = order.astype(np.int64)
        start = np.zeros(cbase + 2, dtype=np.int64)
        np.cumsum(np.bincount(tok_c, minlength=cbase + 1), out=start[1:])
        self.node_tok_start = start

    def relabeled(self, label: np.ndarray) -> "_ClassTrie":
        """This trie with every node's class ``c`` read as ``label[c]`` (int64 ``(n_classes,)``):
        the class arrays are new, the structure (parents, bounds, token maps) and the structural
        caches kept on it (token roots, token → node maps) are shared. Used for the label of a
        coarse partition's classes in a finer alphabet (:func:`class_trie`)."""
        ct = object.__new__(_ClassTrie)
        for name in ("_tok_c_cache", "_tok_root", "_anc_at"):
            self.__dict__.setdefault(name, {})
        ct.__dict__.update(self.__dict__)
        ct.uid = next(_TRIE_UIDS)
        ct.levels = [(b, par, label.take(cls), bounds) for b, par, cls, bounds in self.levels]
        ct.__dict__["_relabeled_from"] = self
        return ct

    def arrays(self):
        """Every array this trie holds: its levels, token maps, and those computed on first use and
        kept on it (the preorder layout, root info, token roots; not the per-thread walk buffers).
        A relabeled trie (:meth:`relabeled`) holds its base's structural arrays too: callers that
        sum over several tries count each array once (:func:`engine_cache_stats`)."""
        for lv in self.levels:
            yield from lv[1:]
        yield from (self.level_base, self.token_cnode, self.tokens_by_node, self.node_tok_start)
        for name in ("_pre", "_root_info"):
            extra = self.__dict__.get(name)
            if isinstance(extra, tuple):
                yield from (a for a in extra if isinstance(a, np.ndarray))
        yield from self.__dict__.get("_tok_root", {}).values()
        yield from self.__dict__.get("_anc_at", {}).values()

    @property
    def nbytes(self) -> int:
        """Bytes of :meth:`arrays` (each array once)."""
        return _nbytes_once([self])

    def subtree_tokens(self, d: int, local_nodes: np.ndarray) -> np.ndarray:
        """Token ids whose class path passes strictly below the given nodes of level ``d``
        (tokens longer than ``d + 1`` bytes with those prefixes)."""
        return self.tokens_under(local_nodes.astype(np.int64) + self.level_base[d], strict=True)

    def tokens_under(self, nodes: np.ndarray, strict: bool = False) -> np.ndarray:
        """Token ids whose class path passes through the given global nodes (with ``strict``: only
        those longer than the node's depth + 1), from the preorder layout: the tokens of a subtree
        are one slice of the tokens in preorder, so this is one gather, whatever the depth."""
        dfs, off, size, n_end = self._preorder()
        lo = off[nodes]
        hi = lo + size[nodes]
        if strict:
            lo = lo + n_end[nodes]
        cnt = hi - lo
        tot = int(cnt.sum())
        if tot == 0:
            return _EMPTY_I64
        cs = cnt.cumsum()
        return dfs[np.repeat(lo - (cs - cnt), cnt) + np.arange(tot, dtype=np.int64)]

    def _preorder(self):
        """``(tokens, off, size, n_end)``: the tokens in preorder of their class paths (a token
        before its extensions, siblings in class order), and per node the offset of its subtree's
        first token, the subtree's token count and the number of tokens ending at the node
        (int64 each; computed once per trie, bottom-up sizes then top-down offsets)."""
        pre = getattr(self, "_pre", None)
        if pre is not None:
            return pre
        base = self.__dict__.get("_relabeled_from")
        if base is not None:  # the same structure: the base's layout
            self._pre = base._preorder()
            return self._pre
        nn = self.n_nodes
        tc = self.token_cnode
        has = np.flatnonzero(tc < nn)
        n_end = np.bincount(tc[has], minlength=nn).astype(np.int64)
        size = n_end.copy()
        lv = self.levels
        for d in range(len(lv) - 1, 0, -1):
            b, par, _cls, _bounds = lv[d]
            pb = lv[d - 1][0]
            size[pb: pb + lv[d - 1][1].shape[0]] += np.bincount(par, weights=size[b: b + par.shape[0]],
                                                                minlength=lv[d - 1][1].shape[0]).astype(np.int64)
        off = np.zeros(nn, dtype=np.int64)
        if lv:
            b0, par0, _c, _bd = lv[0]
            s0 = size[b0: b0 + par0.shape[0]]
            off[b0: b0 + par0.shape[0]] = s0.cumsum() - s0
            for d in range(1, len(lv)):
                b, par, _cls, bounds = lv[d]
                pb = lv[d - 1][0]
                sz = size[b: b + par.shape[0]]
                excl = sz.cumsum() - sz
                within = excl - excl[bounds[par]]
                off[b: b + par.shape[0]] = off[pb + par] + n_end[pb + par] + within
        order = self.tokens_by_node  # tokens sorted by end node (stable)
        nodes_of = tc[order]
        keep = nodes_of < nn
        order, nodes_of = order[keep], nodes_of[keep]
        rank = np.arange(order.shape[0], dtype=np.int64) - self.node_tok_start[nodes_of]
        dfs = np.empty(order.shape[0], dtype=np.int64)
        dfs[off[nodes_of] + rank] = order
        self._pre = (dfs, off, size, n_end)
        return self._pre


def _root_info(trie: "_ClassTrie"):
    """``(root_of, mass)`` of a class trie, cached on it: per global node its first-level ancestor
    (local id, uint8 when the first level has at most 256 nodes, else int32), and per first-level
    node the number of nodes below it (int64)."""
    ri = trie.__dict__.get("_root_info")
    if ri is None and "_relabeled_from" in trie.__dict__:  # the same structure: the base's
        ri = trie.__dict__["_root_info"] = _root_info(trie.__dict__["_relabeled_from"])
    if ri is None:
        lv = trie.levels
        n0 = lv[0][1].shape[0]
        root = np.empty(trie.n_nodes, dtype=np.uint8 if n0 <= 256 else np.int32)
        root[:n0] = np.arange(n0)
        for d in range(1, len(lv)):
            b, par, _cls, _bounds = lv[d]
            pb = lv[d - 1][0]
            root[b: b + par.shape[0]] = root[pb + par]
        mass = np.bincount(root[n0:], minlength=n0).astype(np.int64)
        ri = trie.__dict__["_root_info"] = (root, mass)
    return ri


def _tok_root(trie: "_ClassTrie", vocab_size: int) -> np.ndarray:
    """Per token id below ``vocab_size``, the first-level node its class path starts at (intp;
    ``n0``, the number of first-level nodes, for ids without bytes), read-only, cached on the trie
    per vocabulary size."""
    cache = trie.__dict__.setdefault("_tok_root", {})
    tr = cache.get(vocab_size)
    if tr is None:
        root_of, _mass = _root_info(trie)
        n0 = trie.levels[0][1].shape[0]
        tr = np.full(vocab_size, n0, dtype=np.intp)
        tc = trie.token_cnode[: vocab_size]
        has = np.flatnonzero(tc < trie.n_nodes)
        tr[has] = root_of[tc[has]]
        tr.flags.writeable = False
        cache[vocab_size] = tr
    return tr


def _ancestors_at(trie: "_ClassTrie", nodes: np.ndarray, d: int) -> np.ndarray:
    """Level-``d`` ancestors (local ids, int64) of the global nodes ``nodes`` (each at level ``d``
    or below): one gather from a per-node map computed once per trie and level (top-down, one
    gather per level: O(nodes of the trie)) and kept on the trie. The map is int32 (4 bytes a
    node; -1 above level ``d``). A suffix walk's accepting ends can be most of the trie (inside
    ``(?:\\w+\\s?){1,50}`` every word boundary accepts): a level-by-level climb over them, with
    one mask of every node per level, took ~12 ms a walk on Llama 3's trie."""
    return _ancestors_map(trie, d).take(nodes).astype(np.int64)


def _ancestors_map(trie: "_ClassTrie", d: int) -> np.ndarray:
    """Per global node of ``trie`` its level-``d`` ancestor's local id (int32, -1 above level
    ``d``), cached on the trie (:func:`_ancestors_at`; a relabeled trie shares its base's cache:
    the same structure)."""
    cache = trie.__dict__.setdefault("_anc_at", {})
    amap = cache.get(d)
    if amap is not None:
        return amap
    levels = trie.levels
    amap = np.full(trie.n_nodes, -1, dtype=np.int32)
    if d < len(levels):
        b, par, _cls, _bounds = levels[d]
        amap[b: b + par.shape[0]] = np.arange(par.shape[0], dtype=np.int32)
        for e in range(d + 1, len(levels)):
            b, par, _cls, _bounds = levels[e]
            pb = levels[e - 1][0]
            amap[b: b + par.shape[0]] = amap[pb + par]
    amap.flags.writeable = False
    cache[d] = amap
    return amap


def _tokens_ending(trie: "_ClassTrie", nodes: np.ndarray, limit: int | None = None) -> np.ndarray | None:
    """Token ids (int64) ending on the class nodes ``nodes`` (global ids), from the node-sorted
    token list: one gather however many nodes; None when there are more than ``limit``."""
    ts = trie.node_tok_start
    a = ts[nodes]
    cnt = ts[nodes + 1] - a
    tot = int(cnt.sum())
    if limit is not None and tot > limit:
        return None
    if not tot:
        return _EMPTY_I64
    cs = cnt.cumsum()
    return trie.tokens_by_node[(a - (cs - cnt)).repeat(cnt) + np.arange(tot, dtype=np.int64)]


_scratch_local = threading.local()


def _scratch(trie: "_ClassTrie") -> tuple[np.ndarray, np.ndarray]:
    """Per-thread scratch buffers of a walk over ``trie`` (end configurations per node, int64
    ``(n_nodes + 1,)``, and a gather buffer of the widest level): shared by every grammar of this
    thread (a walk never runs inside another, and its results are copies), so a grammar does not
    hold ~2 MB of its own."""
    d = _scratch_local.__dict__.setdefault("bufs", {})
    ent = d.get(id(trie))
    if ent is None or ent[0] is not trie:
        if len(d) >= 2 * _TRIE_CACHE:
            d.clear()
        ent = d[id(trie)] = (trie, np.empty(trie.n_nodes + 1, dtype=np.int64),
                             np.empty(trie.max_level, dtype=np.int64))
    return ent[1], ent[2]


_flat_cache: dict = {}


def _flat_tokens(vocab: Vocabulary):
    """(all token bytes concatenated uint8, start offset int64 per token, length int64 per token,
    (token ids longest first int64, their lengths int64)), cached per token-bytes tuple."""
    tb = vocab.token_bytes
    hit = _flat_cache.get(id(tb))
    if hit is not None and hit[0] is tb:
        return hit[1]
    lens = np.fromiter((len(b) for b in tb), dtype=np.int64, count=len(tb))
    start = np.zeros(len(tb), dtype=np.int64)
    if len(tb) > 1:
        np.cumsum(lens[:-1], out=start[1:])
    flat = np.frombuffer(b"".join(tb) + b"\x00", dtype=np.uint8)
    order = np.argsort(-lens, kind="stable")
    res = (flat, start, lens, (order, lens[order]))
    if len(_flat_cache) > 4:
        _flat_cache.clear()
    _flat_cache[id(tb)] = (tb, res)
    return res


_one_byte_cache: dict = {}


def _one_byte_tokens(vocab: Vocabulary) -> np.ndarray:
    """bool ``(256,)``: the bytes ``b`` that some ordinary token (not special, not EOS) spells
    alone, ``token_bytes[i] == bytes([b])``; cached per vocabulary (by its token bytes and
    special ids)."""
    tb = vocab.token_bytes
    key = (id(tb), vocab.special_token_ids)
    hit = _one_byte_cache.get(key)
    if hit is not None and hit[0] is tb:
        return hit[1]
    out = np.zeros(256, dtype=bool)
    special = vocab.special_token_ids
    for i, b in enumerate(tb):
        if len(b) == 1 and i not in special:
            out[b[0]] = True
    out.flags.writeable = False
    if len(_one_byte_cache) > 4:
        _one_byte_cache.clear()
    _one_byte_cache[key] = (tb, out)
    return out


_tries: dict = {}
_tries_lock = threading.Lock()
_TRIE_CACHE = 16


def class_trie(vocab: Vocabulary, byte_classes: np.ndarray, alphabet: np.ndarray | None = None) -> _ClassTrie:
    """The class-quotiented trie of ``vocab`` for ``byte_classes``, its node labels given as
    classes of ``alphabet`` (a refinement of ``byte_classes``; default: ``byte_classes`` itself),
    cached (LRU of ``_TRIE_CACHE``) by the vocabulary's token-bytes trie, ``byte_classes`` and the
    labels ``alphabet`` gives its classes (:func:`_class_labels`).

    With ``alphabet`` the trie is the one of ``byte_classes`` alone (built once, cached) with its
    labels mapped (:meth:`_ClassTrie.relabeled`, ~1 ms): a rule's coarse trie is the same
    structure in every grammar, whose partitions differ (a JSON string rule's trie for Llama 3 took
    30-40 ms to build, once per grammar partition)."""
    from .token_index import vocab_trie

    trie = vocab_trie(vocab)
    # with ``alphabet``, keyed by the labels it gives the classes, not by the alphabet: grammars
    # whose alphabets differ (each grammar's own cuts) mostly label a rule's coarse classes alike
    # (every ASCII byte is a class of its own in each), so they share one relabeled trie, and
    # its uid, which keys the suffix walks other grammars take (:meth:`PushdownIndex._suffix_walk`)
    label = None if alphabet is None else _class_labels(byte_classes, alphabet)
    key = (id(trie), byte_classes.tobytes(), None if label is None else label.tobytes())
    with _tries_lock:
        hit = _tries.get(key)
        if hit is not None and hit[0] is trie:
            _tries[key] = _tries.pop(key)
            return hit[1]
    if alphabet is None:
        ct = _ClassTrie(trie, byte_classes, vocab.n_tokens)
    else:
        base = class_trie(vocab, byte_classes)
        ct = base if np.array_equal(label, np.arange(label.shape[0])) else base.relabeled(label)
    with _tries_lock:
        _tries[key] = (trie, ct)
        while len(_tries) > _TRIE_CACHE:
            _tries.pop(next(iter(_tries)))
    return ct


# ------------------------------------------------------------------------------------------------
# 3-4. the lazy configuration automaton and its token masks
# ------------------------------------------------------------------------------------------------
class _GrammarClosures(_Closures):
    """Epsilon closures whose leaves are BYTE, CALL and RET states (dead states dropped)."""

    def __init__(self, g: GrammarNFA) -> None:
        super().__init__(g.nfa)
        self._live = g.live

    def _leaf(self, v: int):
        k = self.nfa.kind[v]
        if (k == BYTE or k == CALL or k == RET or k == DEFER) and self._live[v]:
            return (v,)
        return ()


class _SharedWalks:
    """Walks inside call-free rules shared by every grammar of a vocabulary (the JSON string's
    content, an object key's tail): ``(row, uncertain tokens, offsets, complete, reach)`` of
    :meth:`PushdownIndex._rel_info` by :meth:`PushdownIndex._shared_key`, the arrays read-only;
    per vocabulary (token bytes, logits width, EOS ids), LRU under :attr:`budget_bytes`
    (XGrammar's token-mask cache shared across grammars, Dong et al. 2024, §3, in this engine's
    terms). One per process (:data:`_shared_walks`), its budget ``$STRUCTGATE_SHARED_WALKS_BYTES``
    (default 64 MiB; 0 keeps nothing)."""

    def __init__(self, budget_bytes: int = 64 << 20) -> None:
        from collections import OrderedDict

        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._d: OrderedDict = OrderedDict()
        self._bytes = 0
        #: lookups answered and not answered (tests, diagnostics)
        self.hits = self.misses = 0

    @staticmethod
    def _vkey(vocab: Vocabulary):
        from .token_index import vocab_trie

        return (id(vocab_trie(vocab)), vocab.vocab_size, tuple(sorted(vocab.eos_token_ids)))

    def get(self, vocab: Vocabulary, key):
        k = (self._vkey(vocab), key)
        with self._lock:
            hit = self._d.get(k)
            if hit is None:
                self.misses += 1
                return None
            self.hits += 1
            self._d.move_to_end(k)
            return hit[1]

    def put(self, vocab: Vocabulary, key, info, replace: bool = False) -> None:
        """Keep ``info`` (its arrays read-only) under ``key``; an entry already there is kept,
        or with ``replace`` replaced (a suffix walk grown by more first bytes)."""
        from .token_index import vocab_trie

        k = (self._vkey(vocab), key)
        nb = sum(a.nbytes for a in info if isinstance(a, np.ndarray)) + 256
        with self._lock:
            if k in self._d:
                if not replace:
                    return
                self._bytes -= self._d.pop(k)[2]
            if nb > self.budget_bytes:
                return
            self._d[k] = (vocab_trie(vocab), info, nb)  # the trie pinned: its id is not reused
            self._bytes += nb
            while self._bytes > self.budget_bytes:
                _k, (_t, _i, b) = self._d.popitem(last=False)
                self._bytes -= b

    @property
    def nbytes(self) -> int:
        return self._bytes

    def stats(self) -> dict[str, int]:
        """``{"entries", "bytes", "hits", "misses"}`` (lookups since the process started)."""
        with self._lock:
            return {"entries": len(self._d), "bytes": int(self._bytes), "hits": int(self.hits),
                    "misses": int(self.misses)}

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self._bytes = 0


_shared_walks = _SharedWalks(shared_walks_bytes())


def engine_cache_stats() -> dict[str, dict[str, int]]:
    """The process-wide caches of this module, for :meth:`NativeBackend.engine_cache_stats`:
    ``shared_walks`` (:class:`_SharedWalks`: entries, bytes, hits, misses) and ``class_tries``
    (the class-quotiented tries of :func:`class_trie`: entries, bytes of their arrays)."""
    with _tries_lock:
        tries = [t for _v, t in _tries.values()]
    return {"shared_walks": _shared_walks.stats(),
            "class_tries": {"entries": len(tries), "bytes": _nbytes_once(tries)}}


def _nbytes_once(tries) -> int:
    """Bytes of the arrays of ``tries``, an array shared by several (a relabeled trie and its
    base) counted once."""
    seen: set[int] = set()
    n = 0
    for t in tries:
        for a in t.arrays():
            if id(a) not in seen:
                seen.add(id(a))
                n += a.nbytes
    return int(n)


class _Bounded:
    """:meth:`PushdownIndex.bounded`: the index's lock held and its deadline set for a block."""

    __slots__ = ("ix", "deadline", "name", "limit", "t0", "saved")

    def __init__(self, ix: "PushdownIndex", deadline: float | None, name: str, limit: float,
                 t0: float) -> None:
        # deadline and t0 on time.monotonic (a wall-clock deadline: the compile's); None: no limit
        self.ix, self.deadline, self.name, self.limit, self.t0 = ix, deadline, name, limit, t0

    def __enter__(self):
        ix = self.ix
        ix._lock.acquire()
        self.saved = (ix._deadline, ix._step_t0, ix._deadline_of, ix._clock)
        ix._deadline = float("inf") if self.deadline is None else self.deadline
        ix._step_t0 = self.t0
        ix._deadline_of = (self.name, self.limit)
        ix._clock = time.monotonic
        ix._tick_n = 1  # (the block's first unit of work reads its clock: PushdownIndex._begin)
        return ix

    def __exit__(self, *exc) -> None:
        ix = self.ix
        ix._deadline, ix._step_t0, ix._deadline_of, ix._clock = self.saved
        ix._lock.release()


class _OneStep:
    """:meth:`PushdownIndex.one_step`: the index's lock held and one step's budget
    (:meth:`PushdownIndex._begin`) open for a block."""

    __slots__ = ("ix", "own")

    def __init__(self, ix: "PushdownIndex") -> None:
        self.ix = ix

    def __enter__(self):
        self.ix._lock.acquire()
        self.own = self.ix._begin()
        return self.ix

    def __exit__(self, *exc) -> None:
        if self.own:
            self.ix._deadline = None
        self.ix._lock.release()


class PushdownIndex:
    """Token masks and transitions of a grammar's configuration automaton, computed lazily.

    The interface is the one of :class:`~structgate.native.token_index.TokenIndex` that the matcher
    and the vLLM scheduler hook use: integer states (0 dead, 1 start, :data:`TERMINATED` = -1 after
    EOS), :meth:`fill_row`, :meth:`fill_rows`, :meth:`slots` + :attr:`rows`, :meth:`next_state`,
    :meth:`is_accepting`, :meth:`has_non_eos`, :meth:`n_allowed`.

    Parameters
    ----------
    gnfa : GrammarNFA
    vocab : Vocabulary
    max_depth : int
        Stack depth bound (pushes beyond it are not taken).
    max_states : int
        Cap on configurations; beyond it :class:`CompileLimitError` (``max_dfa_states``) is raised
        by the call that would create one (a mask fill or an advance).
    row_budget_bytes : int
        Bytes of cached mask rows kept; beyond it the least recently computed rows are dropped and
        recomputed on their next visit (``-1`` = unlimited).
    step_timeout_s : float
        Limit, seconds of this thread's CPU time (``time.thread_time``: a loaded machine, other
        threads holding the GIL or this grammar's lock do not count), on the lazy work of one
        step: computing one mask row
        (:meth:`fill_row`, :meth:`n_allowed`, each row of :meth:`slots` / :meth:`fill_rows`) or the
        transitions one :meth:`step_bytes` / :meth:`next_state` call first needs. Past it the step
        raises :class:`CompileLimitError` (``step_timeout_s``): a highly ambiguous grammar whose
        configurations hold thousands of items can take a minute for one mask
        (``bench/data/slow_first_mask.gbnf``: 52 s at ``c49269d``), and a fill runs in the
        serving engine's step, where it would stall every request. ``<= 0``: no limit. The work done before the limit is
        kept (configurations, closures and table rows are interned whole or not at all), so the
        grammar stays consistent and a later step goes on from there (when each such unit fits in
        the limit: one that does not is redone, and fails, at every try). :meth:`bounded` sets a
        caller's deadline instead (the compile's, for the start's mask).

    Thread safety: every mutation (new configurations, table rows, mask rows) happens under one lock;
    a compiled grammar is shared between requests and threads.
    """

    PRUNE_BELOW = 0.25
    PRUNE_MIN_NODES = 2048
    #: the least :attr:`horizon`: with fewer frames than that left below ``max_depth``, pairs and
    #: frames are kept only if they can complete within the frames left (:meth:`_completes`)
    DEPTH_HORIZON = 16

    def __init__(self, gnfa: GrammarNFA, vocab: Vocabulary, *, max_depth: int = 128,
                 max_states: int = 1_000_000, row_budget_bytes: int = 256 << 20,
                 step_timeout_s: float = 0.0) -> None:
        self.gnfa = gnfa
        self.step_timeout_s = float(step_timeout_s)
        #: the running step's deadline (on :attr:`_clock`; inf: no limit), its start and limit's
        #: name and value; None between steps (:meth:`_begin`, :meth:`_tick`)
        self._deadline: float | None = None
        self._step_t0 = 0.0
        self._deadline_of = ("step_timeout_s", self.step_timeout_s)
        self._clock = time.thread_time
        self._tick_n = 1
        self.vocab = vocab
        self.width = (vocab.vocab_size + 31) // 32
        self.max_depth = int(max_depth)
        self.max_states = int(max_states)
        nfa = gnfa.nfa
        # items are ``stack * N + state``: with lazy rule builds the NFA grows, so N is its cap
        # (and with calls: merged frames add union states, :meth:`_union_state`)
        self._N = N = (nfa.max_states + 1) if gnfa.lazy or gnfa.n_calls else len(nfa) + 1
        self._n_built = len(nfa)
        self._ACCEPT = N - 1  # pseudo leaf: the root completed with an empty stack
        self._kind, self._out, self._lo = nfa.kind, nfa.out, nfa.lo
        self._closures = _GrammarClosures(gnfa)
        self._lc = self._closures.get
        self._tail: dict[int, bool] = {}
        self._fits: dict[tuple[int, int], bool] = {}  # (NFA state, frames left) -> _completes
        self._fits_busy: set[tuple[int, int]] = set()
        self._fits_hit_busy = False
        #: with fewer frames than this left, a pair or frame is kept only if it can complete in
        #: them (:meth:`_completes`); with this many or more every position can (at least the
        #: grammar's :attr:`GrammarNFA.need_bound`), so nothing is checked: JSON Schema grammars
        #: need a few frames, and their walks far from the bound stay free of the check. Until the
        #: needs are computed (:meth:`_near`), the build's cheaper bound stands in
        self.horizon = self.max_depth + 1  # nothing known: every position checked
        self._needs_known = gnfa.need_bound is not None
        self._n_static = 0
        nb = gnfa.need_bound if self._needs_known else gnfa.need_ub
        if nb is not None:
            self.horizon = max(self.DEPTH_HORIZON, nb)
        if self._needs_known:
            self._n_static = len(gnfa.rule_need)
        bc = gnfa.byte_classes
        self.byte_classes = bc
        self._bc_list = bc.tolist()
        self.n_classes = W = int(bc.max()) + 1
        self._hi = nfa.hi  # a BYTE state's class interval: bc[lo[s]]..bc[hi[s]] (read in _compute_row)
        # multi-range BYTE states: their ranges (the NFA's own dict when rules are built later)
        self._multi = nfa.multi if gnfa.lazy else (nfa.multi or None)
        # stacks
        self._stk_ret: list[int] = [-1]
        self._stk_parent: list[int] = [0]
        self._stk_depth: list[int] = [0]
        self._stk_ids: dict[tuple[int, int], int] = {}
        # configurations
        self._cfg_ids: dict[frozenset, int] = {frozenset(): 0}
        self._cfg_keys: list[frozenset] = [frozenset()]
        # per-configuration arrays start small (most grammars of a request need a few hundred
        # configurations) and double as the automaton grows (:meth:`_intern`)
        self._accepting = np.zeros(64, dtype=bool)
        self._cfg_depth = np.zeros(64, dtype=np.int64)  # deepest stack among a configuration's items
        self._table = np.full((64, W), -1, dtype=np.int64)
        self._table[0] = 0
        self._closure_memo: dict[tuple[int, int], frozenset] = {}
        #: per closure key with merged frames: what :meth:`_closure_of` returned for them
        self._closure_frames: dict[tuple[int, int], tuple] = {}
        self._union_ids: dict[tuple[int, ...], int] = {}  # continuations -> their union state
        self._union_members: dict[int, tuple[int, ...]] = {}  # and back
        self._empty_memo: dict[tuple[int, int], bool] = {}  # :meth:`_empty_from`
        self._merge_rule: dict[int, bool] = {}  # :meth:`_mergeable`
        self._idem: dict[int, bool] = {}  # :meth:`_idempotent`
        self._n_items = 0  # items over every interned configuration (for memory_size_bytes)
        self._byte_only: dict[int, bool] = {}  # NFA state -> its epsilon closure's leaves all BYTE
        #: configurations whose table row holds only some classes (:meth:`_compute_cell`)
        self._partial: set[int] = set()
        self._union_memo: dict = {}  # frozenset of items, or one item -> target configuration
        self._leaf_iv: dict[int, tuple] = {}
        #: :meth:`_merge_counts`: return state -> (counter, a, b) when it is the return of a
        #: :class:`RepeatCounter` rule's call of its item (the frame continues as ``x{a,b}``), else None
        self._xret: dict[int, tuple | None] = {}
        self._dyn_seen = 0  # generated rules looked at for counters (:meth:`_has_counters`)
        self._stk_sig: dict[int, tuple] = {}  # stack -> :meth:`_stack_sig`
        self._any_counter = False
        self._lock = threading.RLock()
        # mask rows
        self._row_budget = int(row_budget_bytes)
        self._slot = np.full(64, -1, dtype=np.int64)   # per config; index -1 (last) unused
        self._rows = np.zeros((8, self.width), dtype=np.int32)
        self._slot_state: list[int] = []
        self._slot_gen: list[int] = []  # per slot: times it was evicted (fill_row's check)
        self._n_allowed: list[int] = []
        self._n_non_eos: list[int] = []
        self._free: list[int] = []
        self._eos = np.asarray(sorted(set(vocab.eos_token_ids)), dtype=np.intp)
        self._eos_set = frozenset(int(e) for e in self._eos)
        # the row words holding EOS ids and each word's EOS bits (:meth:`_clear_eos`, :meth:`_set_eos`)
        eos_bits: dict[int, int] = {}
        for e in self._eos.tolist():
            eos_bits[e >> 5] = eos_bits.get(e >> 5, 0) | (1 << (e & 31))
        self._eos_words = np.asarray(list(eos_bits), dtype=np.intp)
        self._eos_bits = np.asarray(list(eos_bits.values()), dtype=np.uint32)
        self._trie = class_trie(vocab, bc)
        self._token_cnode = self._tok_c(self._trie)
        self._rule_tries: dict[int, _ClassTrie | None] = {}
        self._dirty: dict[int, int] = {}
        # NFA state -> owning rule (the GrammarNFA's own list: lazy builds extend it in place)
        self._owner = gnfa.owner if gnfa.owner else None
        # return states inside counting rules: their frames are free of the depth bound
        self._free_ret = None
        if (any(gnfa.rule_counting) or gnfa._dynamic) and gnfa.owner:  # dynamic: counters may come
            rc = gnfa.rule_counting
            self._free_ret = bytearray(rc[o] for o in gnfa.owner) + bytearray(len(nfa) + 1 - len(gnfa.owner))
        self._terminated_slot = -1
        self._rel_cache: dict[int, tuple] = {}
        #: (lazy automaton, its key) -> the tokens' walks from it (:meth:`_automaton_walk`)
        self._tok_walks: dict = {}
        #: first bytes -> the ordinary tokens starting with one of them (:meth:`_token_cands`)
        self._tok_cands: dict = {}
        #: rule index -> its LazyRule when its automaton computes token walks, else None
        self._walk_rules: dict = {}
        #: configuration -> its pairs by automaton, when :meth:`_automaton_walk` made its walk
        self._auto_ends: dict = {}
        #: (automaton, key, configuration p) -> bool over the key's pairs: the rest alive from p
        self._tok_ends_ok: dict = {}
        #: :meth:`_walk_below` per ``(configuration, seeds)``: ``(tokens, accepting nodes, reach)``
        self._wb_memo: dict[tuple, tuple] = {}
        self._wb_bytes = 0
        self._rule_struct: dict[int, tuple | bool] = {}  # rule -> _rule_structure (or False)
        self._sw_cache: dict[tuple, list] = {}  # (trie id, config) -> suffix walk
        self._sw_bytes = 0
        self._rel_tgt: dict[int, tuple | None] = {}
        self._bc_np = bc.astype(np.int64)
        self._flat, self._tok_start, self._tok_len, self._long_ids = _flat_tokens(vocab)
        self._max_tok_len = int(self._long_ids[1][0]) if self._long_ids[1].size else 0
        with self._lock:
            self._check_root_fits()
            start = self._intern(self._closure(nfa.start, 0))
            assert start == START or start == DEAD
            if start == DEAD:  # empty language: keep the layout (state 1 exists, allows nothing)
                self._cfg_keys.append(frozenset({-2}))
                self._cfg_ids[self._cfg_keys[-1]] = 1
                self._table[1] = 0
            row = np.zeros(self.width, dtype=np.int32)
            self._set_eos(row)
            self._terminated_slot = self._store_row(-1, row, len(self._eos), 0)

    def _check_root_fits(self) -> None:
        """Raise :class:`CompileLimitError` (``max_recursion_depth``) when the root rule cannot
        complete within ``max_depth`` frames: every output would then be cut off by the bound, and
        the start would allow nothing (an empty mask at the first step). Checked exactly
        (:meth:`_completes`) only when the grammar's bound (:func:`frame_needs`) exceeds the depth;
        the message gives the frames the root needs (a binary search over :meth:`_completes`,
        which is monotone in the frames left) and the called rules of its shortest completion."""
        g = self.gnfa
        if g.need_bound is None and g.need_ub is not None and g.need_ub <= self.max_depth:
            return  # every need is at most the build's bound: the root fits
        self._learn_needs()
        if not g.rule_need:
            return  # nothing known (a hand-built NFA): an empty start says it
        hi = g.rule_need[0]
        if hi <= self.max_depth or hi >= NO_NEED or self._completes(g.nfa.start, self.max_depth):
            return
        lo = self.max_depth  # fails at lo, completes at hi (an upper bound)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._completes(g.nfa.start, mid):
                hi = mid
            else:
                lo = mid
        ch = list(g.need_chain)
        if len(ch) > 8:
            ch = ch[:6] + ["...", ch[-1]]
        raise CompileLimitError(
            "max_recursion_depth", hi, self.max_depth,
            f"the root rule {g.rule_names[0]!r} cannot complete within {self.max_depth} nested rule calls: "
            f"its shortest completion nests {hi} ({' -> '.join(ch)}); raise max_recursion_depth or "
            "shorten that chain of rules")

    def _tok_c(self, trie: _ClassTrie) -> np.ndarray:
        """Token → class node of ``trie`` over the full id range (EOS and ids without bytes on the
        dead slot), read-only, cached on the trie per (vocabulary size, EOS ids): every grammar of
        the vocabulary shares it."""
        key = (self.vocab.vocab_size, self.vocab.n_tokens, tuple(self._eos.tolist()))
        cache = trie.__dict__.setdefault("_tok_c_cache", {})
        tok_c = cache.get(key)
        if tok_c is None:
            tok_c = np.full(self.vocab.vocab_size, trie.n_nodes, dtype=np.int64)
            tok_c[: self.vocab.n_tokens] = trie.token_cnode[: self.vocab.n_tokens]
            tok_c[self._eos] = trie.n_nodes
            tok_c.flags.writeable = False
            cache[key] = tok_c
        return tok_c

    def _trie_for(self, cr: int, build: bool = True):
        """(trie, token → class node, ends buffer) for walking configuration ``cr`` on the empty
        stack: the trie of the owning rule's partition when every item lies in one call-free rule
        (the walk cannot leave it but by completing it), else the grammar's. With ``build``
        False, a rule's trie not made yet for this grammar is not made: ``None`` stands for it
        (:meth:`_rel_info` looks the walk up in :data:`_shared_walks` first, and a hit needs no
        trie)."""
        g = self.gnfa
        if self._owner is not None and len(g.rule_names) > 1:
            N = self._N
            owner = self._owner
            items = self._cfg_keys[cr]
            rules = {owner[it % N] for it in items if it >= 0 and it % N != self._ACCEPT}
            # an item on a frame the walk returns into (a counter's, kept by :meth:`_compute`) can
            # leave the rule without completing the walk: the grammar's trie
            if len(rules) == 1 and all(it < N or self._stk_ret[it // N] == _VBASE for it in items):
                (r,) = rules
                if not g.rule_has_calls[r]:
                    ent = self._rule_tries.get(r)
                    if ent is None:
                        rc = g.rule_classes[r]
                        if np.array_equal(rc, self.byte_classes):
                            ent = self._rule_tries[r] = False
                        elif not build:
                            return None
                        else:
                            t = class_trie(self.vocab, rc, self.byte_classes)
                            ent = self._rule_tries[r] = (t, self._tok_c(t))
                    if ent:
                        return ent
        return self._trie, self._token_cnode

    # -- stacks and closures ------------------------------------------------------------------------
    def _push(self, ret: int, parent: int) -> int:
        """The stack ``(ret, parent)``: a frame returning to NFA state ``ret`` above stack
        ``parent`` (hash-consed), or ``-1`` when the depth bound refuses it. A frame equal to the
        one below it whose continuation is idempotent (:meth:`_idempotent`) is not pushed:
        ``parent`` itself is returned."""
        k = self._stk_ids.get((ret, parent))
        if k is None:
            if parent and ret >= 0 and self._stk_ret[parent] == ret and self._idempotent(ret):
                self._stk_ids[(ret, parent)] = parent
                return parent
            d = self._stk_depth[parent] + (0 if self._free_ret is not None and ret >= 0
                                           and self._free_ret[ret] else 1)
            if d > self.max_depth:
                return -1
            left = self.max_depth - self._stk_depth[parent]
            if ret >= 0 and left < self.horizon and self._near(left) and not self._completes(ret, left):
                return -1  # the caller could not complete after this call returns
            k = len(self._stk_ret)
            self._stk_ids[(ret, parent)] = k
            self._stk_ret.append(ret)
            self._stk_parent.append(parent)
            self._stk_depth.append(d)
        return k

    def _build_rule(self, i: int) -> int:
        """Build rule ``i`` (:meth:`GrammarNFA.ensure_rule`) and grow the per-state arrays."""
        st = self.gnfa.ensure_rule(i)
        self._grow()
        return st

    def _expand(self, v: int) -> tuple[int, ...]:
        """Build the subtree of ``DEFER`` state ``v`` (:meth:`GrammarNFA.expand`; its epsilon
        targets) and grow the per-state arrays."""
        ts = self.gnfa.expand(v)
        self._grow()
        return ts

    def _grow(self) -> None:
        """Extend the per-NFA-state arrays over the states built since the last call."""
        n = len(self.gnfa.nfa)
        old = self._n_built
        if n > old:
            cl = self._closures
            cl.cache.extend([None] * (n - old))
            cl._index.extend([-1] * (n - old))
            cl._low.extend([0] * (n - old))
            cl._onstack.extend(bytearray(n - old))
            g = self.gnfa
            new = g.owner[old:n]  # the new states' rule
            if self._free_ret is not None:
                rc = g.rule_counting
                self._free_ret[old:old] = bytearray(rc[o] for o in new)
            self._n_built = n

    def _is_tail(self, call: int) -> bool:
        """True when the continuation of CALL state ``call`` is only its rule's RET (through
        epsilon moves): returning from the callee then completes the caller too."""
        t = self._tail.get(call)
        if t is None:
            after = self._lc(self._out[call])
            t = self._tail[call] = len(after) == 1 and self._kind[next(iter(after))] == RET
        return t

    def _closure(self, v: int, k: int) -> frozenset:
        """Items ``stack * N + byte_state`` (and ``ACCEPT``) reachable from NFA state ``v`` on stack ``k``."""
        key = (v, k)
        hit = self._closure_memo.get(key)
        if hit is not None:
            return hit
        N = self._N
        kind = self._kind
        leaves = self._lc(v)
        bo = self._byte_only.get(v)
        if bo is None:
            bo = self._byte_only[v] = all(map(BYTE.__eq__, map(kind.__getitem__, leaves)))
        if bo:
            # the common case (84 % of closures on MaskBench): only byte-consuming leaves, no
            # call, return or placeholder to follow: the items are the leaves on stack ``k``
            left = self.max_depth - self._stk_depth[k]
            if left < self.horizon and self._near(left):
                leaves = frozenset([x for x in leaves if self._completes(x, left)])
            return self._remember_closure(key, leaves if k == 0 else frozenset([k * N + x for x in leaves]))
        res, frames = self._closure_of((key,))
        if frames:
            self._closure_frames[key] = frames
        return self._remember_closure(key, res)

    def _closure_of(self, seeds) -> tuple[frozenset, tuple]:
        """The closure of the ``(NFA state, stack)`` pairs ``seeds`` together: ``(items, frames)``.

        Items are ``stack * N + byte_state`` (and ``ACCEPT``), as :meth:`_closure`.

        **Merged frames.** A rule body can reach one callee along several epsilon paths with
        different continuations: a repeat of a nullable body (``"(" (r? r?)* ")"``, ``(x? y?)+``,
        ``x*`` with ``x ::= r? r?``), ``(r | r r)*``, a bounded ``(r? r?){2,5}``. One frame per
        path, and the frames multiply at every nesting level: after ``d`` nested calls a
        configuration held ``2**d`` stacks, and ``max_dfa_states`` was reached within ~16 tokens.
        Here frames are merged, which keeps the items' language (and every mask) the same, since a
        frame whose return state is an epsilon split to ``r1, r2`` (:meth:`_union_state`)
        continues as the frames of ``r1`` and ``r2`` together; it is the subset construction
        applied to return states, the merging of a graph-structured stack (Tomita 1985) or of
        Earley items with one rule and origin:

        1. the calls of callee ``c`` found on stack ``k`` whose continuations lie in one caller
           rule push a single frame, returning to the union of their continuations, before the
           callee is explored (so frames the callee pushes in turn are shared too). A tail call
           among them joins that frame (it then takes one, so the depth bound counts it); alone,
           tail calls take none, as before. So that every call of a level is known before its
           frame is pushed, a call whose callee can match the empty string within the frames
           left (:meth:`_derives_empty`) is also followed straight to its continuation: the
           path the per-call push took through the callee's immediate return;
        2. then items that differ only by their top frame, frames of one caller rule on one
           stack (:meth:`_merge_top_frames`), become one item: calls of different callees that
           reach the same byte state (``x`` and ``y`` in ``(x y)*`` with ``x ::= r?`` and
           ``y ::= r?``, both tail-calling ``r``), or a tail call's callee beside the next call
           of the caller's caller (``r ::= "(" (r? r?){2,5} ")" r?``).

        Calls whose continuation lies in a counting or generated rule are not merged (their
        frames are moved by offset, :meth:`_count_alias`), nor is a call found after its level's
        frame was pushed with a continuation not in it (the emptiness check is conservative): it
        gets a frame of its own, as before.

        ``frames`` lists ``((stack, caller rule), frames pushed here that items lie on or
        above)`` (empty when no frame was pushed), so that :meth:`_target` can tell when closures
        computed apart would have merged frames (:meth:`_frames_differ`).

        Raises ``CompileLimitError`` (``max_nfa_states``) when a lazily built rule or a union
        state outgrows the NFA's cap."""
        N = self._N
        kind = self._kind
        out, lo = self._out, self._lo
        outs = self.gnfa.nfa.outs
        starts = self.gnfa.rule_start
        lc = self._lc
        owner = self._owner
        res: set[int] = set()
        work = list(seeds)
        seen = set(work)
        # (stack, callee, caller rule) -> {continuation: whether its call is a tail call}
        groups: dict[tuple, dict[int, bool]] = {}
        opened: dict[tuple, frozenset] = {}  # -> the continuations its frame returns to
        pushed: dict[int, tuple[int, int]] = {}  # frame pushed here -> (stack below, caller rule)

        tick = self._tick
        tick()

        def enter(callee: int, k2: int) -> None:
            st = starts[callee]
            if st < 0:  # a lazily built rule's first call
                st = self._build_rule(callee)
            p = (st, k2)
            if p not in seen:
                seen.add(p)
                work.append(p)
                if not len(seen) & 63:  # (every so many pairs: a closure can push thousands of frames)
                    tick()

        while True:
            while work:
                v, k = work.pop()
                left = self.max_depth - self._stk_depth[k]  # frames above stack k (near the bound: checked)
                near = left < self.horizon and self._near(left)
                for leaf in lc(v):
                    kd = kind[leaf]
                    if kd == BYTE:
                        if not near or self._completes(leaf, left):
                            res.add(k * N + leaf)
                    elif kd == CALL:
                        callee = lo[leaf]
                        ret = out[leaf]
                        # a call in tail position (nothing but the caller's own return follows)
                        # takes no frame: the callee returns straight to the caller's caller, so
                        # right recursion (item ("," item)?, ws ::= ([ ] ws)?) repeats without
                        # growing the stack
                        tail = self._is_tail(leaf)
                        r = owner[ret] if owner is not None else -1
                        mergeable = self._mergeable(r)
                        if mergeable:
                            gk = (k, callee, r)
                            op = opened.get(gk)
                            if op is None:
                                if not tail and self._push(ret, k) < 0:
                                    continue  # its own frame is refused: so is the call
                                rets = groups.get(gk)
                                if rets is None:
                                    rets = groups[gk] = {}
                                if ret not in rets:
                                    rets[ret] = tail
                                    p = (ret, k)
                                    if p not in seen and self._derives_empty(callee, left):
                                        seen.add(p)
                                        work.append(p)
                                elif not tail:
                                    rets[ret] = False
                                continue
                            if ret in op:
                                continue
                        if tail:
                            enter(callee, k)
                        else:
                            k2 = self._push(ret, k)
                            if k2 >= 0:
                                if mergeable and k2 != k:
                                    pushed[k2] = (k, r)
                                enter(callee, k2)
                    elif kd == DEFER:  # a subtree of a rule's body, built on first reach
                        ts = outs[leaf]
                        if ts is None:
                            ts = self._expand(leaf)
                        for st in ts:
                            p = (st, k)
                            if p not in seen:
                                seen.add(p)
                                work.append(p)
                    else:  # RET
                        if k == 0 or self._stk_ret[k] == _VBASE:  # the root, or a re-rooted frame, completes
                            res.add(self._ACCEPT)
                        else:
                            p = (self._stk_ret[k], self._stk_parent[k])
                            if p not in seen:
                                seen.add(p)
                                work.append(p)
            if not groups:
                break
            # the shallowest stacks' calls are all known (a callee explored from them reaches a
            # shallower stack only by returning empty, which the skip above took already; a frame
            # pushed now may be a deeper stack that has calls pending): one frame per
            # (stack, callee, caller rule)
            depth = self._stk_depth
            d = min(depth[gk[0]] for gk in groups)
            for gk in [gk for gk in groups if depth[gk[0]] == d]:
                rets = groups.pop(gk)
                k, callee, r = gk
                opened[gk] = frozenset(rets)
                k2 = -1
                if not all(rets.values()):  # a call that needs a frame: every call shares it
                    k2 = self._push(self._union_state(rets), k)
                    if k2 >= 0:
                        if k2 != k:
                            pushed[k2] = (k, r)
                        enter(callee, k2)
                    else:  # refused where a call's own frame is not (one kept by :meth:`_push`)
                        for ret, tail in rets.items():
                            k3 = -1 if tail else self._push(ret, k)
                            if k3 >= 0:
                                if k3 != k:
                                    pushed[k3] = (k, r)
                                enter(callee, k3)
                if k2 < 0 and any(rets.values()):  # tail calls only (or the frame refused)
                    enter(callee, k)
        made = self._merge_top_frames(res)
        if made:
            pushed.update(made)
        if not pushed:
            return frozenset(res), ()
        # the frames pushed here that items lie on or above, by (stack below, caller rule)
        used: dict[tuple, set[int]] = {}
        for it in set(it // N for it in res):
            x = it
            pk = pushed.get(x)
            while pk is not None:
                used.setdefault(pk, set()).add(x)
                x = pk[0]
                pk = pushed.get(x)
        return frozenset(res), tuple((pk, frozenset(fs)) for pk, fs in used.items())

    def _merge_top_frames(self, items: set) -> dict[int, tuple[int, int]]:
        """Merge, in place, the items of ``items`` that differ only by their top frame: items
        ``(leaf, r1 · p)``, ``(leaf, r2 · p)``, ... whose return states lie in one mergeable rule
        become ``(leaf, U · p)``, ``U`` the union of ``r1, r2, ...`` (:meth:`_union_state`). The
        language is the same. Returns the frames made other than ``p`` itself (a frame
        :meth:`_push` leaves out), ``{stack: (stack below, caller rule)}``."""
        if not self._may_merge_top(items):
            return {}
        N = self._N
        ret_of, parent = self._stk_ret, self._stk_parent
        owner = self._owner
        by: dict[tuple[int, int], list[int]] = {}  # (leaf, stack below the top frame) -> items
        for it in items:
            k, leaf = divmod(it, N)
            if k:
                by.setdefault((leaf, parent[k]), []).append(it)
        made: dict[int, tuple[int, int]] = {}
        for (leaf, p), its in by.items():
            if len(its) < 2:
                continue
            per_rule: dict[int, list[int]] = {}
            for it in its:
                ret = ret_of[it // N]
                if ret < 0:  # a re-rooted base
                    continue
                r = owner[ret] if owner is not None else -1
                if self._mergeable(r):
                    per_rule.setdefault(r, []).append(it)
            for r, same in per_rule.items():
                if len(same) < 2:
                    continue
                rets: dict[int, None] = {}
                for it in same:
                    ret = ret_of[it // N]
                    rets.update(dict.fromkeys(self._union_members.get(ret, (ret,))))
                k2 = self._push(self._union_state(rets), p)
                if k2 >= 0:
                    items.difference_update(same)
                    items.add(k2 * N + leaf)
                    if k2 != p:
                        made[k2] = (p, r)
        return made

    def _may_merge_top(self, items) -> bool:
        """Whether two items of ``items`` off the empty stack share their byte state, which two
        items that differ only by their top frame do (:meth:`_merge_top_frames` merges nothing
        otherwise). One pass over the items without the per-item pairs and groups: most targets'
        items lie on the empty stack or on distinct states (MaskBench: 36,000 calls a sample of
        213 schemas, nearly all with nothing to merge)."""
        N = self._N
        hi = [it % N for it in items if it >= N]
        return len(hi) > 1 and len(set(hi)) < len(hi)

    def _mergeable(self, r: int) -> bool:
        """Whether calls returning into rule ``r`` (``-1``: unknown owner) may share a frame
        (:meth:`_closure_of`): not a counting rule nor one generated on demand, whose frames
        :meth:`_compute` and :meth:`_count_alias` move by their offset in the rule."""
        ok = self._merge_rule.get(r)
        if ok is None:
            g = self.gnfa
            ok = self._merge_rule[r] = r < 0 or not (
                (r < len(g.rule_counting) and g.rule_counting[r]) or r in g.dyn_node)
        return ok

    def _union_state(self, rets) -> int:
        """An NFA state standing for the continuations ``rets`` together (a frame's return state):
        ``rets``' only member, else an epsilon state to each (hash-consed; a new one belongs to
        the rule of the continuations, live)."""
        if len(rets) == 1:
            return next(iter(rets))
        key = tuple(sorted(rets))
        u = self._union_ids.get(key)
        if u is None:
            g = self.gnfa
            nfa = g.nfa
            n0 = len(nfa)
            u = nfa.split(key)
            if len(nfa) > n0:
                g.live.extend(b"\x01" * (len(nfa) - len(g.live)))
                if g.owner:
                    g.owner.extend([g.owner[key[0]]] * (len(nfa) - len(g.owner)))
                self._grow()
            self._union_ids[key] = u
            self._union_members[u] = key
        return u

    #: :meth:`_idempotent` gives up (answers no) past this many states of a rule
    IDEMPOTENT_MAX_STATES = 4096

    def _idempotent(self, r: int) -> bool:
        """Whether the continuation of return state ``r`` (what its rule matches from ``r`` to its
        ``RET``, over bytes and calls as symbols: ``L``) satisfies ``L L = L``, so that two frames
        returning to ``r``, one above the other, match what one does (:meth:`_push` then keeps
        one). Shown on the NFA: ``r`` reaches ``RET`` through epsilon moves (``ε`` is in ``L``, so
        ``L ⊆ L L``), and every state that a symbol leads to from ``r``'s part of the rule and that
        reaches ``RET`` through epsilon moves also reaches ``r`` through them (a string of ``L``
        can go on with another, so ``L L ⊆ L``). That holds where a rule ends in a repeat whose
        body holds the recursive call (``root ::= ("a" root?)+``, ``x ::= ("a" x)*``), where the
        frames otherwise pile up one per repetition: every nesting depth stays possible, and a
        configuration held one item per token up to the depth bound. A frame left out does not
        count toward the depth bound; that accepts nothing the bound excluded, since what the
        deeper stack matches the shallower one matches with a frame less. Conservative: a ``DEFER`` state not
        built yet, a counting or generated rule, or a part larger than
        :attr:`IDEMPOTENT_MAX_STATES` answers no. Memoised per state."""
        hit = self._idem.get(r)
        if hit is None:
            hit = self._idem[r] = self._check_idempotent(r)
        return hit

    def _check_idempotent(self, r: int) -> bool:
        """:meth:`_idempotent`, computed."""
        owner = self._owner
        if owner is not None and not self._mergeable(owner[r]):
            return False
        kind, out, outs = self._kind, self._out, self.gnfa.nfa.outs

        def eps_reach(x: int):  # the states x reaches by epsilon moves (None: an unbuilt DEFER)
            seen = {x}
            stack = [x]
            while stack:
                y = stack.pop()
                kd = kind[y]
                if kd == EPS or kd == DEFER:
                    ts = outs[y]
                    if ts is None:
                        return None
                    for t in ts:
                        if t >= 0 and t not in seen:
                            seen.add(t)
                            stack.append(t)
            return seen

        start = eps_reach(r)
        if start is None or not any(kind[y] == RET for y in start):
            return False
        # r's part of the rule (every edge; a call continues at its return state) and the states
        # its symbols (bytes, calls) lead to
        targets = {r}
        region = {r}
        stack = [r]
        while stack:
            y = stack.pop()
            kd = kind[y]
            if kd == BYTE or kd == CALL:
                nxt = (out[y],) if out[y] >= 0 else ()
                targets.update(nxt)
            elif kd == EPS or kd == DEFER:
                nxt = outs[y]
                if nxt is None:
                    return False
            else:  # RET, FAIL
                continue
            for t in nxt:
                if t >= 0 and t not in region:
                    region.add(t)
                    if len(region) > self.IDEMPOTENT_MAX_STATES:
                        return False
                    stack.append(t)
        for t in targets:
            reach = eps_reach(t)
            if reach is None or (r not in reach and any(kind[y] == RET for y in reach)):
                return False
        return True

    #: :meth:`_derives_empty` looks at most this many nested calls deep (a rule's shortest empty
    #: derivation nests each rule at most once)
    EMPTY_DEPTH = 32

    def _derives_empty(self, callee: int, left: int) -> bool:
        """Whether rule ``callee``, called on a stack with ``left`` frames left, can return
        without consuming a byte, with every call on the way taking a frame (an under-estimate of
        what the closure can do: a tail call takes none) and within :attr:`EMPTY_DEPTH` frames."""
        budget = min(left - 1, self.EMPTY_DEPTH)
        if budget < 0:
            return False
        st = self.gnfa.rule_start[callee]
        if st < 0:
            st = self._build_rule(callee)
        return st >= 0 and self._empty_from(st, budget)

    def _empty_from(self, v: int, budget: int) -> bool:
        """Whether NFA state ``v`` reaches its rule's ``RET`` through epsilon moves, ``DEFER``
        states and calls of rules that do the same with one frame less (memoised per
        ``(v, budget)``; the budget falls at each call, so the recursion ends)."""
        key = (v, budget)
        hit = self._empty_memo.get(key)
        if hit is not None:
            return hit
        kind, out, lo = self._kind, self._out, self._lo
        outs = self.gnfa.nfa.outs
        g = self.gnfa
        ok = False
        stack = [v]
        seen = {v}
        while stack and not ok:
            x = stack.pop()
            kd = kind[x]
            nxt: tuple = ()
            if kd == EPS:
                nxt = outs[x] or ()
            elif kd == DEFER:
                nxt = outs[x] if outs[x] is not None else self._expand(x)
            elif kd == RET:
                ok = True
            elif kd == CALL and budget > 0:
                st = g.rule_start[lo[x]]
                if st < 0:
                    st = self._build_rule(lo[x])
                if st >= 0 and self._empty_from(st, budget - 1):
                    nxt = (out[x],)
            for y in nxt:
                if y >= 0 and y not in seen:
                    seen.add(y)
                    stack.append(y)
        self._empty_memo[key] = ok
        return ok

    def _remember_closure(self, key: tuple[int, int], fs: frozenset) -> frozenset:
        """Keep ``fs`` as the closure of ``key`` (the memo cleared whole past 10^6 entries)."""
        if len(self._closure_memo) > 1_000_000:
            self._closure_memo.clear()
            self._closure_frames.clear()
        self._closure_memo[key] = fs
        return fs

    def _near(self, left: int) -> bool:
        """Whether a pair or frame with ``left`` frames left above it must be checked
        (:meth:`_completes`): ``left`` is under :attr:`horizon`. Below :attr:`DEPTH_HORIZON` it is
        checked whatever the grammar; above that, a horizon read off the build's cheap bound is
        first refined to the grammar's :attr:`GrammarNFA.need_bound` (:meth:`_learn_needs`, once).
        Either horizon is exact (both bound every need); the refined one checks less."""
        if left >= self.horizon:
            return False
        if left < self.DEPTH_HORIZON or self._needs_known:
            return True
        self._learn_needs()
        return left < self.horizon

    def _learn_needs(self) -> None:
        """Compute the grammar's frame needs (:meth:`GrammarNFA.ensure_needs`) and take its horizon
        and rule bounds from them. Caller holds the lock."""
        if self._needs_known:
            return
        self._needs_known = True
        g = self.gnfa
        if g.ensure_needs():
            self.horizon = max(self.DEPTH_HORIZON, g.need_bound)
            self._n_static = len(g.rule_need)

    def _rule_bound(self, r: int) -> int:
        """An upper bound on the frames rule ``r`` needs to complete (:func:`frame_needs`: a static
        rule's own, a generated rule's automaton's); :data:`NO_NEED` when none is known."""
        if not self._needs_known:
            self._learn_needs()
        if r < self._n_static:
            return self.gnfa.rule_need[r]
        node = self.gnfa.dyn_node.get(r)
        return self.gnfa.auto_need.get(node.auto, NO_NEED) if node is not None else NO_NEED

    def _completes(self, v: int, left: int) -> bool:
        """Whether the rule that NFA state ``v`` lies in can reach its end from ``v`` with at most
        ``left`` frames pushed above its own: a depth-first search over the rule's states, where a
        call passes iff its frame fits and its callee completes within the frames left above that
        frame: ``left - 1``, or ``left`` for a tail call or a frame returning into a counting rule
        (both free of the bound, as :meth:`_push` and :meth:`_closure` take them).

        A callee whose bound (:meth:`_rule_bound`) fits is taken to complete without a search (the
        bound is an upper bound, so that is exact); otherwise it is searched with the frames left.
        A tail call of a generated rule (a counter's next count) is searched on within this search
        (no frame is pushed, so the frames left are the same) instead of one nested search per
        count. Memoised per ``(v, left)``; a result that relied on a search still in progress
        higher up (recursion through tail calls) is kept only when true (the least fixpoint only
        grows). Caller holds the lock."""
        key = (v, left)
        hit = self._fits.get(key)
        if hit is not None:
            return hit
        if key in self._fits_busy:
            self._fits_hit_busy = True
            return False
        kind, out, lo = self._kind, self._out, self._lo
        outs = self.gnfa.nfa.outs
        g = self.gnfa
        fr = self._free_ret
        self._fits_busy.add(key)
        outer_hit = self._fits_hit_busy
        self._fits_hit_busy = False
        ok = False
        try:
            stack = [v]
            seen = {v}
            while stack and not ok:
                x = stack.pop()
                kd = kind[x]
                nxt: tuple = ()
                if kd == BYTE:
                    nxt = (out[x],)
                elif kd == EPS:
                    nxt = outs[x] or ()
                elif kd == DEFER:
                    nxt = outs[x] if outs[x] is not None else self._expand(x)
                elif kd == RET:
                    ok = True
                elif kd == CALL:
                    r = lo[x]
                    tail = self._is_tail(x)
                    ret = out[x]
                    budget = left if tail or (fr is not None and ret >= 0 and fr[ret]) else left - 1
                    if budget < 0:
                        continue  # the call's own frame does not fit
                    if budget >= self._rule_bound(r):
                        done = True
                    else:
                        st = g.rule_start[r]
                        if st < 0:
                            st = self._build_rule(r)
                        if st < 0:
                            continue
                        if tail and r in g.dyn_node:
                            nxt = (st,)  # its end is this search's end (a tail call)
                            done = False
                        else:
                            done = self._completes(st, budget)
                    if done:
                        if tail:
                            ok = True
                        else:
                            nxt = (ret,)
                for y in nxt:
                    if y >= 0 and y not in seen:
                        seen.add(y)
                        stack.append(y)
        finally:
            self._fits_busy.discard(key)
        relied = self._fits_hit_busy
        self._fits_hit_busy = outer_hit or relied
        if ok or not relied:
            self._fits[key] = ok
        return ok

    def _intern(self, items: frozenset) -> int:
        c = self._cfg_ids.get(items)
        if c is not None:
            return c
        if len(items) > 1 and (self._any_counter or (self.gnfa.dyn_node and self._has_counters())):
            merged = self._merge_counts(items)
            if merged is not items:
                c = self._cfg_ids.get(merged)
                if c is None:
                    c = self._intern(merged)
                self._cfg_ids[items] = c  # (the unmerged set found again without a merge)
                return c
        c = len(self._cfg_keys)
        N = self._N
        if c >= self.max_states:
            raise CompileLimitError("max_dfa_states", c, self.max_states,
                                    "the grammar's configuration automaton grew too large")
        self._cfg_ids[items] = c
        self._cfg_keys.append(items)
        self._n_items += len(items)
        if c >= self._table.shape[0]:
            n = self._table.shape[0] * 2
            # uninitialised: each row is set to -1 (not computed) below when its configuration is
            # interned, so the pages of the rows no configuration reaches are never written (a
            # filled table wrote, and faulted in, the whole new half at every doubling)
            t = np.empty((n, self.n_classes), dtype=np.int64)
            t[:c] = self._table[:c]
            self._table = t
            a = np.zeros(n, dtype=bool)
            a[:c] = self._accepting[:c]
            self._accepting = a
            s = np.full(n, -1, dtype=np.int64)
            s[:c] = self._slot[:c]
            self._slot = s
            dd = np.zeros(n, dtype=np.int64)
            dd[:c] = self._cfg_depth[:c]
            self._cfg_depth = dd
        self._table[c] = -1
        self._accepting[c] = self._ACCEPT in items
        # items are >= 0 here (the empty language's marker never goes through _intern)
        if items and max(items) >= N:  # (on the empty stack only: depth 0, already set)
            self._cfg_depth[c] = max(map(self._stk_depth.__getitem__, map(N.__rfloordiv__, items)))
        return c

    def _has_counters(self) -> bool:
        """Whether a :class:`RepeatCounter` rule was generated (the generated rules looked at
        once each). Caller holds the lock."""
        if not self._any_counter:
            dn = self.gnfa.dyn_node
            if len(dn) != self._dyn_seen:
                new = itertools.islice(dn.values(), self._dyn_seen, None)
                self._dyn_seen = len(dn)
                self._any_counter = any(isinstance(n.auto, RepeatCounter) for n in new)
        return self._any_counter

    def _xret_of(self, ret: int):
        """``(counter, a, b)`` when NFA state ``ret`` is where a :class:`RepeatCounter` rule goes
        on after its call of the item (a tail call of the next count: a frame returning there
        continues as ``x{a,b}``), else None; cached."""
        res = None
        if ret >= 0 and self._owner is not None and ret < len(self._owner) and self._kind[ret] == CALL:
            dn = self.gnfa.dyn_node
            node = dn.get(self._owner[ret])
            if node is not None and isinstance(node.auto, RepeatCounter):
                nxt = dn.get(self._lo[ret])
                if nxt is not None and nxt.auto is node.auto and self._is_tail(ret):
                    rem = node.auto.remaining(nxt.state)
                    if rem is not None:
                        res = (node.auto, rem[0], rem[1])
        self._xret[ret] = res
        return res

    def _count_ret(self, auto, a: int, b: int | None) -> int:
        """A return state whose frame continues as ``x{a,b}`` of counter ``auto`` (the item
        call's return in the rule of ``("r", a + 1, b + 1)``, built here if new); -1 when the
        built rule does not have the expected layout."""
        g = self.gnfa
        r = g.dyn_rule(LazyRule(auto, ("r", a + 1, None if b is None else b + 1)))
        if g.rule_start[r] < 0:
            self._build_rule(r)
        for v in range(*g.dyn_span[r]):
            x = self._xret.get(v, _MISS)
            if x is _MISS:
                x = self._xret_of(v)
            if x is not None and x[1] == a and x[2] == b:
                return v
        return -1

    #: frames below the top that :meth:`_merge_counts` looks at (a counter inside another
    #: counter's item sits one frame below the inner counter's)
    COUNT_MERGE_LEVELS = 3

    #: past this many items :meth:`_merge_counts` picks the items that may merge with numpy
    COUNT_MERGE_NP_MIN = 48

    def _merge_candidates(self, items: frozenset, cand: dict) -> list:
        """The items of ``items`` on a stack of ``cand`` (stack -> (signature, ...)) whose NFA
        state and signature another such item shares: the only ones :meth:`_merge_counts` can
        merge (found with numpy: most items of a large configuration have no partner)."""
        N = self._N
        arr = np.fromiter(items, dtype=np.int64, count=len(items))
        ks = arr // N
        ck = np.fromiter(cand, dtype=np.int64, count=len(cand))
        ck.sort()
        pos = np.minimum(np.searchsorted(ck, ks), ck.shape[0] - 1)
        hit = ck[pos] == ks
        if not hit.any():
            return []
        sig_ix: dict = {}
        sig_of = np.fromiter((sig_ix.setdefault(cand[k][0], len(sig_ix)) for k in ck.tolist()),
                             dtype=np.int64, count=ck.shape[0])
        sel = arr[hit]
        key = (sel - ks[hit] * N) * len(sig_ix) + sig_of[pos[hit]]
        order = np.argsort(key, kind="stable")
        ks_sorted = key[order]
        dup = ks_sorted[1:] == ks_sorted[:-1]
        if not dup.any():
            return []
        mark = np.zeros(order.shape[0], dtype=bool)
        mark[1:] |= dup
        mark[:-1] |= dup
        return sel[order[mark]].tolist()

    def _stack_sig(self, k: int):
        """Per level ``0 .. COUNT_MERGE_LEVELS - 1`` below the top of stack ``k``: ``((frames above
        as return states, stack below, counter), (counter, a, b))`` when that frame returns into a
        :class:`RepeatCounter` (continuing as ``x{a,b}``), else None; ``()`` when no level does.
        Stacks are hash-consed and never change, so this is cached per stack."""
        stk_ret, stk_parent = self._stk_ret, self._stk_parent
        xget = self._xret.get
        out = []
        f = k
        pre: tuple = ()
        for _level in range(max(self.COUNT_MERGE_LEVELS, 1)):
            if f == 0:
                break
            r = stk_ret[f]
            x = xget(r, _MISS)
            if x is _MISS:
                x = self._xret_of(r)
            out.append(None if x is None else ((pre, stk_parent[f], x[0]), x))
            if r < 0:
                break
            pre += (r,)
            f = stk_parent[f]
        out += [None] * (max(self.COUNT_MERGE_LEVELS, 1) - len(out))
        res = tuple(out) if any(e is not None for e in out) else ()
        self._stk_sig[k] = res
        return res

    def _merge_counts(self, items: frozenset) -> frozenset:
        """``items`` with the frames of one :class:`RepeatCounter` that differ only by their count
        merged (``items`` itself when none do): the items at one NFA state whose stacks are equal
        but for one frame, each returning into a rule of the same counter (continuing as
        ``x{a_i,b_i}``), are the union of those languages; where the intervals ``[a_i, b_i]``
        overlap or touch, that union is ``x{min a_i, max b_i}``, one frame
        (:meth:`_count_ret`). The set of strings the configuration allows is unchanged, so are
        its masks; what changes is its size: an ambiguous item (``(?:a{100,}|a){50,200}``, where
        a run of ``a`` is one repetition or many) put one position of the item under up to
        ``hi`` counts, each its own frame (5,450 items after 200 ``a``, 35 ms a configuration),
        and now keeps a few. Frames are looked for down to :attr:`COUNT_MERGE_LEVELS` below the
        top (nested counters), the frames above a merged one pushed again onto it. Caller holds
        the lock."""
        levels = self.COUNT_MERGE_LEVELS
        if levels <= 0:
            return items
        N = self._N
        sig_get = self._stk_sig.get
        cur = items
        changed = False
        for _round in range(2):
            stacks = set(map(N.__rfloordiv__, cur))
            stacks.discard(0)
            if len(stacks) < 2:
                break  # a merge takes two stacks
            sigs = list(map(sig_get, stacks))
            if None in sigs:
                sigs = [self._stack_sig(k) if sg is None else sg for k, sg in zip(stacks, sigs)]
            if not any(sigs):
                break  # no frame returns into a counter
            # per (level, signature): the stacks alike but for their frame ``level`` below the
            # top, which returns into a counter; only those can merge
            by_sig: dict[tuple, list] = {}
            for k, sg in zip(stacks, sigs):
                if sg:
                    for level in range(levels):
                        e = sg[level]
                        if e is not None:
                            by_sig.setdefault((level, e[0]), []).append((k, e[1]))
            progress = False
            for level in range(levels):
                cand = {k: (sig, x) for (lv, sig), lst in by_sig.items() if lv == level and len(lst) > 1
                        for k, x in lst}
                if not cand:
                    continue
                nxt = self._merge_level(cur, cand)
                if nxt is not cur:
                    cur = nxt
                    changed = progress = True
                    break  # the stacks changed: look again
            if not progress:
                break
        return cur if changed else items

    def _merge_level(self, cur: frozenset, cand: dict) -> frozenset:
        """One merge of :meth:`_merge_counts`: ``cand`` maps the stacks to merge at one level to
        ``(signature, (counter, a, b))``; returns ``cur`` itself when nothing merged."""
        N = self._N
        groups: dict[tuple, list] = {}
        for it in (self._merge_candidates(cur, cand) if len(cur) > self.COUNT_MERGE_NP_MIN else cur):
            k = it // N
            c = cand.get(k)
            if c is not None:
                groups.setdefault((it - k * N, c[0]), []).append((c[1][1], c[1][2], it))
        out = None
        for (v, (pre, parent, auto)), members in groups.items():
            if len(members) < 2:
                continue
            members.sort(key=lambda m: m[0])
            runs: list[list] = []
            for m in members:
                if runs and (runs[-1][1] is None or m[0] <= runs[-1][1] + 1):
                    run = runs[-1]
                    if run[1] is not None and (m[1] is None or m[1] > run[1]):
                        run[1] = m[1]
                    run[2].append(m[2])
                else:
                    runs.append([m[0], m[1], [m[2]]])
            for a, b, its in runs:
                if len(its) < 2:
                    continue
                ret = self._count_ret(auto, a, b)
                nf = self._push(ret, parent) if ret >= 0 else -1
                for r in reversed(pre):
                    if nf < 0:
                        break
                    nf = self._push(r, nf)
                if nf < 0:
                    continue  # (the depth bound refused it: the frames stay apart)
                if out is None:
                    out = set(cur)
                out.difference_update(its)
                out.add(nf * N + v)
        return cur if out is None else frozenset(out)

    def _leaf_classes(self, leaf: int) -> tuple:
        """Half-open class intervals ``((a, b), ...)`` a BYTE state's byte ranges cover (one per
        range of a multi-range state), cached per state."""
        cl = self._bc_list
        rs = self._multi.get(leaf) if self._multi else None
        if rs is None:
            iv = ((cl[self._lo[leaf]], cl[self._hi[leaf]] + 1),)
        else:
            iv = tuple((cl[a], cl[b] + 1) for a, b in rs)
        self._leaf_iv[leaf] = iv
        return iv

    def _item_intervals(self, c: int):
        """``(item, class intervals)`` for each byte-consuming item of configuration ``c``."""
        N = self._N
        acc = self._ACCEPT
        get_iv = self._leaf_iv.get
        for it in self._cfg_keys[c]:
            leaf = it % N
            if leaf == acc or it < 0:
                continue
            ivs = get_iv(leaf)
            yield it, (ivs if ivs is not None else self._leaf_classes(leaf))

    def _target(self, fa) -> int:
        """The configuration reached when the items ``fa`` (one item, or a frozenset of them) take
        a byte: the union of their successors' closures, interned once per item set
        (``_union_memo``)."""
        tid = self._union_memo.get(fa)
        if tid is None:
            self._tick()
            N, out = self._N, self._out
            if type(fa) is int:
                k, leaf = divmod(fa, N)
                tgt = self._closure(out[leaf], k)
            else:
                seeds = [(out[it % N], it // N) for it in fa]
                tgt = frozenset().union(*[self._closure(v, k) for v, k in seeds])
                if self._frames_differ(seeds):
                    # the closures apart push different frames on one stack for one caller rule
                    # (``("b" r?)? ("b" r?)?``: both ``b`` go on to a call of ``r``): together,
                    # merged ones (:meth:`_closure_of`)
                    tgt = self._closure_of(seeds)[0]
                elif len(tgt) > 1 and self._may_merge_top(tgt):
                    # items of different closures that differ only by their top frame (a tail
                    # call's and its caller's caller's next call of one rule): one item
                    items = set(tgt)
                    self._merge_top_frames(items)
                    if len(items) != len(tgt):
                        tgt = frozenset(items)
            tid = self._intern(tgt)
            if len(self._union_memo) > 1_000_000:
                self._union_memo.clear()
            self._union_memo[fa] = tid
        return tid

    def _frames_differ(self, seeds) -> bool:
        """Whether the closures of ``seeds`` (each computed, :meth:`_closure`) pushed different
        frames on one stack for one caller rule, which their closure together merges
        (:meth:`_closure_of`)."""
        cf = self._closure_frames
        if not cf:
            return False
        seen: dict[tuple, frozenset] = {}
        for key in seeds:
            for pk, fs in cf.get(key, ()):
                if seen.setdefault(pk, fs) != fs:
                    return True
        return False

    #: a row of at most this many runs of one target is stored slice by slice, else as a list
    _ROW_SLICES = 24

    def _compute_row(self, c: int) -> None:
        """Fill ``table[c]`` (every class) with the configurations reached by one byte.

        One item: its intervals take its target. Several: a sweep over the class intervals of the
        items (:meth:`_sweep`); each distinct set's target (the union of the items' successor
        closures) is interned once per set of items (``_union_memo``)."""
        items = self._cfg_keys[c]
        it = next(iter(items)) if len(items) == 1 else -1
        if it >= 0 and it % self._N != self._ACCEPT:
            # one item (a literal's next byte, most positions of a key or a keyword): its intervals
            # straight from the memo, not through the generator
            ivs = self._leaf_iv.get(it % self._N)
            pairs = [(it, ivs if ivs is not None else self._leaf_classes(it % self._N))]
        else:
            # (:meth:`_item_intervals` inline: a row of several items is the common case)
            N, acc = self._N, self._ACCEPT
            get_iv = self._leaf_iv.get
            pairs = []
            for it in items:
                leaf = it % N
                if leaf == acc or it < 0:
                    continue
                ivs = get_iv(leaf)
                pairs.append((it, ivs if ivs is not None else self._leaf_classes(leaf)))
        # the targets first (interning may grow the table), then the row written as slices of
        # the table when it has few runs (a Python list of every class converted to the row
        # costs more than a few slice stores)
        if len(pairs) == 1:
            # one byte-consuming item (a third of the rows on MaskBench): no sweep, one target
            it, ivs = pairs[0]
            tid = self._target(it)
            runs = [(a, b, tid) for a, b in ivs]
        elif pairs:
            runs = self._disjoint_runs(pairs) if self._DISJOINT_RUNS else None
            if runs is None and len(pairs) > self._GROUP_PAIRS:  # many items: grouped by their class intervals
                runs = self._sweep(_group_by_intervals(pairs).items())
            elif runs is None:
                runs = self._sweep([(ivs, (it,)) for it, ivs in pairs])
        else:
            runs = []
        if len(runs) <= self._ROW_SLICES:
            t = self._table[c]
            t.fill(0)
            for a, b, tid in runs:
                t[a:b] = tid
        else:
            row = [0] * self.n_classes
            for a, b, tid in runs:
                row[a:b] = [tid] * (b - a)
            self._table[c] = row
        if self._partial:
            self._partial.discard(c)

    #: rows of more byte-consuming items than this sweep over groups of items with the same class
    #: intervals (:meth:`_sweep`)
    _GROUP_PAIRS = 32
    #: rows whose items, grouped by equal class intervals, take disjoint intervals skip the sweep
    #: (:meth:`_disjoint_runs`); False: the sweep everywhere (the tests' reference)
    _DISJOINT_RUNS = True

    def _disjoint_runs(self, pairs) -> list | None:
        """:meth:`_sweep`'s runs for ``(item, class intervals)`` pairs whose items, grouped by equal
        intervals, take disjoint intervals (99 % of the rows of several items on MaskBench: a
        separator beside a run of whitespace, a key's quote beside a value's first byte, a names
        trie's letter beside a string's other characters, the escapes' two ``\\`` items): each
        interval takes its group's target (the item's own, or the set's), in class order as the
        sweep takes them, without cut points and per-run member sets; None when two groups'
        intervals overlap."""
        groups = _group_by_intervals(pairs)
        its = list(groups.values())
        flat = sorted([(a, b, j) for j, ivs in enumerate(groups) for a, b in ivs])
        end = 0
        for a, b, _j in flat:
            if a < end:
                return None
            end = b
        target = self._target
        tids: list[int | None] = [None] * len(its)
        runs = []
        for a, b, j in flat:
            tid = tids[j]
            if tid is None:
                g = its[j]
                tid = tids[j] = target(g[0] if len(g) == 1 else frozenset(g))
            runs.append((a, b, tid))
        return runs

    def _sweep(self, groups) -> list:
        """:meth:`_compute_row`'s sweep over ``groups``, ``(class intervals, items)`` pairs: group
        ``i`` is bit ``i`` of an int, flipped at both ends of each of its intervals, so the running
        XOR between two cut points is the set of groups whose items take the classes there; each
        distinct set's target is interned once per set of items. Rows of more than
        :attr:`_GROUP_PAIRS` items group the items with the same intervals first: with one bit per
        item, a configuration of ``n`` items (``root ::= "x" (w1 | ... | wn)``: one item per word)
        made each flip and each set's extraction an ``n``-bit operation, ``O(n^2)`` in all (a
        200,000-word alternation: ~1-2 s for one row, between two checks of the step's deadline),
        and most of a large configuration's items share their intervals (a word's first letter, a
        string's characters). Returns the row's runs ``[(first class, end class, target), ...]``."""
        marks: dict[int, int] = {}
        its: list = []
        for ivs, g in groups:
            bit = 1 << len(its)
            its.append(g)
            for a, b in ivs:
                marks[a] = marks.get(a, 0) ^ bit
                marks[b] = marks.get(b, 0) ^ bit
        target = self._target
        tick = self._tick
        local: dict[int, int] = {}
        pts = sorted(marks)
        cur = 0
        runs = []
        for j in range(len(pts) - 1):
            cur ^= marks[pts[j]]
            if not cur:
                continue
            tid = local.get(cur)
            if tid is None:
                if not len(local) & 7:  # (a set of thousands of items: ms to build)
                    tick()
                if cur & (cur - 1) == 0 and len(its[cur.bit_length() - 1]) == 1:
                    fa = its[cur.bit_length() - 1][0]  # one item: the memo is keyed by the item
                else:
                    members: list[int] = []
                    x = cur
                    while x:
                        low = x & -x
                        members.extend(its[low.bit_length() - 1])
                        x ^= low
                    fa = frozenset(members)
                tid = local[cur] = target(fa)
            runs.append((pts[j], pts[j + 1], tid))
        return runs

    def _compute_cell(self, c: int, x: int) -> int:
        """``table[c, x]`` alone (the configuration after one byte of class ``x``), for
        :meth:`step_bytes` in grammars with generated rules: there most configurations are
        visited once (a counted string), and a whole row would intern a target for every class.
        The row stays partial (:attr:`_partial`) until :meth:`_compute_row` completes it."""
        self._tick()
        take = [it for it, ivs in self._item_intervals(c) if any(a <= x < b for a, b in ivs)]
        if not take:
            tid = 0
        else:
            tid = self._target(take[0] if len(take) == 1 else frozenset(take))
        self._table[c, x] = tid
        self._partial.add(c)
        return tid

    def _gather(self, fl: np.ndarray) -> np.ndarray:
        """The table's cells at flat indices ``fl`` (int64, ``configuration * n_classes + class``,
        non-empty), the rows of configurations not computed yet computed first."""
        vals = self._table.ravel().take(fl)
        if vals.min() < 0:
            neg = (vals < 0).nonzero()[0]
            self._ensure_rows(set((fl[neg] // self.n_classes).tolist()))
            vals[neg] = self._table.ravel().take(fl[neg])  # (the table may have been reallocated)
        return vals

    def _ensure_rows(self, cfgs) -> None:
        for c in cfgs:
            c = int(c)
            if self._table[c, 0] < 0 or (self._partial and c in self._partial):
                self._compute_row(c)

    # -- the mask walk -------------------------------------------------------------------------------
    def _walk(self, state: int, tw=None, pieces: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every class node that stays alive fed from ``state``, with its end configuration:
        ``(nodes, configs)``, int64 ``(k,)`` each (in no particular order), nodes as global ids of
        the trie in ``tw`` (from :meth:`_trie_for`; default the grammar's trie). Caller holds the
        lock.

        One level of the trie at a time: ``end[child] = table[end[parent], class[child]]``, as one
        dense gather over the level while many nodes are alive, or over the children of the live
        nodes only (kept as index lists) once few are; entries of configurations whose row is not
        computed yet read ``-1``: those rows are computed and the gather repeated.

        With ``pieces`` (a list), the groups that :meth:`_split_suffixes` takes from suffix walks
        (at the first level, and with :attr:`SUFFIX_LEVELS` above 1 at deeper ones) are left out
        below their level and appended to it as ``(entry, group, caller's configuration, level)``."""
        trie = tw[0] if tw is not None else self._trie
        out, buf = _scratch(trie)
        levels = trie.levels
        if not levels:
            return _EMPTY_I64, _EMPTY_I64
        self._ensure_rows([state])
        res_n: list[np.ndarray] = []
        res_v: list[np.ndarray] = []
        base, par, cls, bounds = levels[0]
        n = cls.shape[0]
        dense = out[base: base + n]
        self._table[state].take(cls, out=dense)
        alive = dense.nonzero()[0]
        alive_v = dense[alive]
        if alive.size:
            res_n.append(alive + base)
            res_v.append(alive_v)
            if pieces is not None and len(levels) > 1 and alive.size > 1:
                alive, alive_v, dense = self._split_suffixes(trie, alive, alive_v, dense, pieces)
        self._descend(trie, out, buf, dense, alive, alive_v, n, res_n, res_v,
                      pieces=pieces if self.SUFFIX_LEVELS > 1 else None)
        if not res_n:
            return _EMPTY_I64, _EMPTY_I64
        return np.concatenate(res_n), np.concatenate(res_v)

    def _descend(self, trie, out, buf, dense, alive, alive_v, n, res_n, res_v, start: int = 1,
                 pieces: list | None = None) -> None:
        """Levels ``start``.. of a walk (:meth:`_walk`) from level ``start - 1``'s live nodes
        ``alive`` (local ids; ``n`` of them in that level) in configurations ``alive_v`` (``dense``:
        the same as a dense array of that level, or None); appends each level's live global nodes
        and configurations to ``res_n``/``res_v``. With ``pieces``, the groups of levels below
        :attr:`SUFFIX_LEVELS` that :meth:`_split_suffixes` takes from suffix walks are left out
        below their level."""
        levels = trie.levels
        W = self.n_classes
        prev_n = n
        prune_min, prune_below = self.PRUNE_MIN_NODES, self.PRUNE_BELOW
        split_below = self.SUFFIX_LEVELS if pieces is not None else 0
        deep_min = self.SUFFIX_DEEP_MIN_ROOTS
        for d in range(start, len(levels)):
            if alive.size == 0:
                break
            base, par, cls, bounds = levels[d]
            n = cls.shape[0]
            if alive.size == 1 and n >= prune_min:
                # one live node (a literal's next byte, a long token's tail): its children are one
                # contiguous run of the level, read by a slice (a third of the index arithmetic)
                a = int(alive[0])
                s, e = int(bounds[a]), int(bounds[a + 1])
                if s == e:
                    break
                vals = self._gather(cls[s:e] + int(alive_v[0]) * W)
                alive = vals.nonzero()[0]
                alive_v = vals[alive]
                alive += s
                dense = None
            elif n >= prune_min and alive.size < prune_below * prev_n:
                st = bounds[alive]
                cnt = bounds[alive + 1] - st
                cs = cnt.cumsum()
                tot = int(cs[-1])
                if tot == 0:
                    break
                idx = (st - (cs - cnt)).repeat(cnt) + np.arange(tot, dtype=np.int64)
                fl = alive_v.repeat(cnt)
                fl *= W
                fl += cls[idx]
                vals = self._gather(fl)
                nz = vals != 0
                alive = idx[nz]
                alive_v = vals[nz]
                dense = None
            else:
                if dense is None:  # the previous level was kept sparse: spread it out
                    dense = np.zeros(prev_n, dtype=np.int64)
                    dense[alive] = alive_v
                dst = out[base: base + n]
                fl = buf[:n]
                dense.take(par, out=fl)
                fl *= W
                fl += cls
                self._table.ravel().take(fl, out=dst)
                alive = dst.nonzero()[0]  # rows not computed yet (-1) are among them
                alive_v = dst[alive]
                if alive_v.size and alive_v.min() < 0:
                    neg = alive[alive_v < 0]
                    self._ensure_rows(set((fl[neg] // W).tolist()))
                    dst[neg] = self._table.ravel().take(fl[neg])  # only the cells just computed
                    alive = dst.nonzero()[0]
                    alive_v = dst[alive]
                dense = dst
            if alive.size:
                res_n.append(alive + base)
                res_v.append(alive_v)
                if d < split_below and alive.size >= deep_min and d + 1 < len(levels):
                    alive, alive_v, dense = self._split_suffixes(trie, alive, alive_v, dense, pieces, d)
            prev_n = n

    def _walk_summary(self, state: int, tw=None):
        """``(row, accepting nodes, reach)`` of the walk from ``state``: the packed row of the tokens
        that stay alive (int32 ``(width,)``, EOS clear), the class nodes (global ids) whose
        configuration accepts, and the deepest stack any walked configuration reached.

        **Suffix walks.** After its first byte, the walk of a token's remaining bytes depends only
        on the configuration that byte led to. Where many first bytes lead to one configuration
        ``C`` (inside a key rule every character that leaves the listed names calls the key-tail
        rule, and on the empty stack that is one configuration for every position of the names
        trie), the tokens below those first bytes come from the walk below the first level from
        ``C`` (:meth:`_suffix_walk`, cached per configuration, grown by the first bytes it has not
        seen), so the positions of a names trie share one deep walk instead of each doing their
        own."""
        tw = tw if tw is not None else (self._trie, self._token_cnode)
        trie = tw[0]
        pieces: list = []
        nodes, cfgs = self._walk(state, tw, pieces)
        acc = nodes[self._accepting.take(cfgs)]
        reach = int(self._cfg_depth.take(cfgs).max()) if cfgs.size else 0
        if not pieces:
            return self._allowed_row(trie, nodes, tw[1]), acc, reach
        allowed = self._allowed_bool(trie, nodes, tw[1])
        n0 = trie.levels[0][1].shape[0]
        accs = [acc]
        tok_root = None
        for (walked, pbool, pacc, proot, preach, _nb), grp, p, lvl in pieces:
            if int(walked.sum()) == grp.shape[0]:  # walked below this group only: no mask
                allowed |= pbool
            elif lvl:
                # a deeper group: its tokens are one slice each of the preorder layout
                toks = trie.tokens_under(grp + trie.level_base[lvl], strict=True)
                allowed[toks[pbool.take(toks)]] = True
                if pacc.size:
                    inside = np.zeros(walked.shape[0], dtype=bool)
                    inside[grp] = True
                    pacc = pacc[inside.take(proot)]
            else:
                inside = np.zeros(n0 + 1, dtype=bool)  # last: tokens without bytes
                inside[grp] = True
                # the suffix walk's tokens below its other walked roots (a names trie's letters
                # other positions took out of their groups: a few first bytes) are taken off a copy;
                # a mask of the whole vocabulary by each token's root (one gather of 128 k ids on
                # Llama 3, ~0.3 ms) only when those roots hold many tokens
                other = np.flatnonzero(walked & ~inside[:n0]) + trie.level_base[0]
                if int(trie._preorder()[2].take(other).sum()) <= self.OTHER_ROOTS_MAX_TOKENS:
                    pb = pbool.copy()
                    pb[trie.tokens_under(other)] = False
                    allowed |= pb
                else:
                    if tok_root is None:
                        tok_root = _tok_root(trie, self.vocab.vocab_size)
                    allowed |= pbool & inside.take(tok_root)
                if pacc.size:
                    pacc = pacc[inside.take(proot)]
            if p is None:
                if pacc.size:
                    accs.append(pacc)
                reach = max(reach, preach)
                continue
            # a re-rooted frame (one above the base): its walk's configurations are one deeper than
            # it measured; its ends mid-token go on in the configuration after its return (the
            # nodes where it ends are where that one starts: accepting iff it is)
            reach = max(reach, preach + 1)
            if pacc.size and p:
                if self._accepting[p]:
                    accs.append(pacc)
                info = {"acc": [], "reach": int(self._cfg_depth[p])}
                good = self._walk_below(pacc, p, info)
                if good.size:
                    allowed[good] = True
                accs.extend(info["acc"])
                reach = max(reach, info["reach"])
        return _pack(allowed), np.concatenate(accs), reach

    #: a group of first bytes leading to one configuration is taken from a suffix walk when it has
    #: at least this many first bytes (the plain characters of a string, not the four whitespace
    #: bytes or a quote, whose walks below are short and rarely shared) and the trie holds at least
    #: this many nodes below them
    SUFFIX_MIN_ROOTS = 16
    SUFFIX_MIN_NODES = 4096
    #: a first-level group's tokens are its suffix walk's less those below the walk's other roots
    #: when at most this many lie there (:meth:`_walk_summary`), else masked by their roots
    OTHER_ROOTS_MAX_TOKENS = 16384
    #: groups are taken at the trie's levels below this one: 1, the first level only; 2 (the
    #: default), also the second, where most groups are a UTF-8 lead byte's continuation bytes inside
    #: a string (the lead bytes' classes are too few first-level nodes to be a group; below them the
    #: walk is the same for every lead byte and every position of the string) and some an object
    #: key's ``"`` followed by the bytes that leave the listed names. At the deeper levels a group
    #: needs at least :attr:`SUFFIX_DEEP_MIN_ROOTS` nodes and :attr:`SUFFIX_DEEP_MIN_NODES` tokens
    #: below them (the preorder layout's subtree sizes). Day-27 in bench/README.md: every 7th to
    #: 11th MaskBench schema's walk thread time -1.8 to -4.8 %, its p99 -7 to -14 %; 3 levels +5 %
    SUFFIX_LEVELS = 2
    SUFFIX_DEEP_MIN_ROOTS = 4
    SUFFIX_DEEP_MIN_NODES = 4096

    def _split_suffixes(self, trie, alive, alive_v, dense, pieces, lvl: int = 0):
        """Take the groups of level ``lvl``'s live nodes that lead to one configuration out of the
        walk (each walked by :meth:`_suffix_walk` below its roots not walked yet), appending
        ``(entry, group's nodes, configuration after the frame or None, lvl)`` to ``pieces``;
        returns the level's ``(alive, alive_v, dense)`` left to descend."""
        min_roots = self.SUFFIX_MIN_ROOTS if lvl == 0 else self.SUFFIX_DEEP_MIN_ROOTS
        if alive.size < min_roots:  # no group can have as many first bytes
            return alive, alive_v, dense
        if lvl == 0:
            w = _root_info(trie)[1][alive]
        else:  # the tokens below (the preorder layout's subtree sizes): a node count's stand-in
            w = trie._preorder()[2][alive + trie.level_base[lvl]]
        min_nodes = self.SUFFIX_MIN_NODES if lvl == 0 else self.SUFFIX_DEEP_MIN_NODES
        if int(w.sum()) < min_nodes:
            return alive, alive_v, dense
        tgt, inv = np.unique(alive_v, return_inverse=True)
        wt = np.bincount(inv, weights=w)
        keep = None
        size = np.bincount(inv)
        for j in np.flatnonzero((wt >= min_nodes) & (size >= min_roots)).tolist():
            grp = inv == j
            g_nodes = alive[grp]
            c = int(tgt[j])
            rel = self._rel_target(c) if trie is self._trie else None
            if rel is not None:
                # the first byte entered a frame (a call of the key-tail rule, say): the walk inside
                # it is the same for every caller, re-rooted; only what follows its end is not
                cr, p = rel
                ent = self._suffix_walk(trie, cr, g_nodes, lvl)
                if self._near(self.max_depth - int(self._cfg_depth[c]) - ent[4]):  # near the bound: as is
                    ent, p = self._suffix_walk(trie, c, g_nodes, lvl), None
                pieces.append((ent, g_nodes, p, lvl))
            else:
                pieces.append((self._suffix_walk(trie, c, g_nodes, lvl), g_nodes, None, lvl))
            keep = ~grp if keep is None else keep & ~grp
        if keep is None:
            return alive, alive_v, dense
        if lvl == 0:
            dense = np.zeros(dense.shape[0], dtype=np.int64)
            alive, alive_v = alive[keep], alive_v[keep]
            dense[alive] = alive_v
            return alive, alive_v, dense
        if dense is not None:  # (the walk's scratch level: its entries are copied out already)
            dense[alive[~keep]] = 0
        return alive[keep], alive_v[keep], dense

    def _rel_target(self, c: int):
        """``(re-rooted configuration, configuration after its frame returns)`` when every item of
        configuration ``c`` lies on one frame ``k`` above the empty stack (not a counting frame,
        not a re-rooted base), else None (cached per configuration)."""
        hit = self._rel_tgt.get(c)
        if hit is not None or c in self._rel_tgt:
            return hit
        items = self._cfg_keys[c]
        N = self._N
        ks = {it // N for it in items}
        res = None
        if len(ks) == 1:
            (k,) = ks
            if k > 0 and self._stk_ret[k] >= 0 and self._stk_parent[k] == 0 and not (
                    self._free_ret is not None and self._free_ret[self._stk_ret[k]]):
                cr = self._intern(self._relativize(items, k))
                p = self._intern(self._closure(self._stk_ret[k], 0))
                res = (cr, p)
        self._rel_tgt[c] = res
        return res

    def _sw_shared_key(self, trie, c: int, lvl: int = 0):
        """The key under which the suffix walk of configuration ``c`` over ``trie`` is shared by
        every grammar (:data:`_shared_walks`): ``c`` on the empty stack inside one call-free rule
        (:meth:`_shared_key`; an object key's tail re-rooted by :meth:`_rel_target`), keyed with
        the trie (the grammar's byte partition), the depth bound and the roots' level (past the
        first); None otherwise."""
        sk = self._shared_key(c)
        if sk is None:
            return None
        return ("suffix", trie.uid, self.max_depth, sk) if not lvl else ("suffix", trie.uid, self.max_depth, sk, lvl)

    def _suffix_walk(self, trie, c: int, roots: np.ndarray, lvl: int = 0) -> list:
        """The walk of ``trie`` below the level-``lvl`` nodes ``roots`` (local ids; the first level
        by default), each in configuration ``c``, summarised and cached per ``(trie, c, lvl)`` as
        ``[walked level-lvl nodes (bool (n_lvl,)), allowed tokens below them (bool (vocab_size,), EOS
        clear), their accepting class nodes (global ids), those nodes' level-lvl ancestors, reach,
        bytes]``; a later call walks only the roots not walked yet, so no walk below a root is done
        twice for one configuration. LRU under a quarter of the row budget, counted by
        :attr:`memory_size_bytes`. A walk inside one call-free rule on the empty stack (an object
        key's tail, re-rooted) is the same in every grammar of the partition: it is also kept in
        :data:`_shared_walks` (:meth:`_sw_shared_key`) and taken from there by the next grammar,
        whose own table then computes only the rows its tokens' advances reach."""
        key = (id(trie), c) if not lvl else (id(trie), c, lvl)
        cache = self._sw_cache
        ent = cache.pop(key, None)
        n0 = trie.levels[lvl][1].shape[0]  # (roots and walked nodes are of level ``lvl``)
        skey = False  # not looked up yet
        if ent is None:
            skey = self._sw_shared_key(trie, c, lvl)
            hit = _shared_walks.get(self.vocab, skey) if skey is not None else None
            if hit is not None:
                ent = list(hit) + [0]  # read-only arrays: copied before they grow
            else:
                ent = [np.zeros(n0, dtype=bool), np.zeros(self.vocab.vocab_size, dtype=bool), _EMPTY_I64,
                       _EMPTY_I64, 0, 0]
        cache[key] = ent  # most recently used last
        missing = roots[~ent[0][roots]]
        if missing.size:
            if not ent[0].flags.writeable:  # shared with other grammars: this one's copy grows
                ent[0], ent[1] = ent[0].copy(), ent[1].copy()
            dense = np.zeros(n0, dtype=np.int64)
            dense[missing] = c
            res_n: list[np.ndarray] = []
            res_v: list[np.ndarray] = []
            out, buf = _scratch(trie)
            self._descend(trie, out, buf, dense, missing.astype(np.int64), np.full(missing.size, c, dtype=np.int64),
                          n0, res_n, res_v, lvl + 1)
            if res_n:
                nodes = np.concatenate(res_n)
                cfgs = np.concatenate(res_v)
                tok_c = self._token_cnode if trie is self._trie else self._tok_c(trie)
                ent[1] |= self._allowed_bool(trie, nodes, tok_c)
                acc = nodes[self._accepting.take(cfgs)]
                if acc.size:
                    ent[2] = np.concatenate([ent[2], acc])
                    ent[3] = np.concatenate([ent[3], _root_info(trie)[0].take(acc).astype(np.int64) if not lvl
                                             else _ancestors_at(trie, acc, lvl)])
                ent[4] = max(ent[4], int(self._cfg_depth.take(cfgs).max()))
            ent[0][missing] = True
            if skey is False:
                skey = self._sw_shared_key(trie, c, lvl)
            if skey is not None:
                # published as it stands, read-only: a grammar that grows it later copies first,
                # so what another thread reads never changes under it
                for a in ent[:4]:
                    if a is not _EMPTY_I64:  # (the module's shared empty array stays as it is)
                        a.flags.writeable = False
                _shared_walks.put(self.vocab, skey, tuple(ent[:5]), replace=True)
            nb = ent[0].nbytes + ent[1].nbytes + ent[2].nbytes + ent[3].nbytes + 64
            self._sw_bytes += nb - ent[5]
            ent[5] = nb
            budget = self._row_budget // 4 if self._row_budget >= 0 else -1
            while budget >= 0 and self._sw_bytes > budget and len(cache) > 1:
                old = cache.pop(next(iter(cache)))
                self._sw_bytes -= old[5]
        return ent

    #: at most this many tokens: a packed row is written from their ids directly
    #: (:meth:`_allowed_row`), not through a bool array over the vocabulary
    DIRECT_ROW_MAX = 4096

    def _allowed_row(self, trie: _ClassTrie, nodes: np.ndarray, tok_c: np.ndarray | None = None) -> np.ndarray:
        """Packed row (int32 ``(width,)``) of the tokens ending on ``nodes`` (EOS never set).

        Few tokens (most walks of a schema's own rules: a few dozen) are packed from their ids
        (:func:`_row_of_ids`); many go through :meth:`_allowed_bool` and ``packbits`` over the
        vocabulary."""
        if tok_c is None or nodes.size * 8 <= trie.n_nodes:
            toks = _tokens_ending(trie, nodes, self.DIRECT_ROW_MAX)
            if toks is not None:
                toks = toks[toks < self.vocab.vocab_size]  # (ids past the vocabulary: none in a row)
                row = _row_of_ids(toks, self.width)
                self._clear_eos(row)
                return row
        return _pack(self._allowed_bool(trie, nodes, tok_c))

    def _allowed_bool(self, trie: _ClassTrie, nodes: np.ndarray, tok_c: np.ndarray | None = None) -> np.ndarray:
        """bool ``(vocab_size,)``: the tokens ending on ``nodes`` (EOS never set). Many nodes: one
        gather of a dense node mask through ``tok_c`` (token → class node, EOS and specials on the
        dead slot); few: the tokens of each node from the node-sorted token list."""
        if tok_c is not None and nodes.size * 8 > trie.n_nodes:
            live = np.zeros(trie.n_nodes + 1, dtype=bool)
            live[nodes] = True
            return live.take(tok_c)
        allowed = np.zeros(self.vocab.vocab_size, dtype=bool)
        toks = _tokens_ending(trie, nodes)
        if toks.size:
            allowed[toks] = True
            allowed[self._eos] = False
        return allowed

    def _clear_eos(self, row: np.ndarray) -> None:
        """Clear the EOS ids' bits of ``row`` (int32 ``(width,)``, in place)."""
        u = row.view(np.uint32)
        u[self._eos_words] &= ~self._eos_bits

    def _set_eos(self, row: np.ndarray) -> None:
        """Set the EOS ids' bits of ``row`` (int32 ``(width,)``, in place)."""
        u = row.view(np.uint32)
        u[self._eos_words] |= self._eos_bits

    def _store_row(self, state: int, row: np.ndarray, n_allowed: int, n_non_eos: int) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._slot_state)
            budget_rows = (self._row_budget // (self.width * 4)) if self._row_budget >= 0 else -1
            # (a budget under one row keeps the floor of 16 rows, never unlimited: -1 is that)
            if budget_rows >= 0 and slot >= max(budget_rows, 16):
                slot = self._evict()
            else:
                if slot >= self._rows.shape[0]:
                    grown = np.empty((self._rows.shape[0] * 2, self.width), dtype=np.int32)
                    grown[:slot] = self._rows[:slot]
                    self._rows = grown
                self._slot_state.append(-2)
                self._slot_gen.append(0)
                self._n_allowed.append(0)
                self._n_non_eos.append(0)
        self._rows[slot] = row
        self._slot_state[slot] = state
        self._n_allowed[slot] = n_allowed
        self._n_non_eos[slot] = n_non_eos
        if state >= 0:
            self._slot[state] = slot
        return slot

    def _evict(self) -> int:
        """Drop the oldest cached row (FIFO over slots, never the terminated row); return its slot."""
        n = len(self._slot_state)
        cur = getattr(self, "_evict_ptr", 0)
        for _ in range(n):
            cur = (cur + 1) % n
            s = self._slot_state[cur]
            if cur != self._terminated_slot and s not in self._pinned:
                if s >= 0:
                    self._slot[s] = -1
                # before the slot is rewritten: a lock-free reader (:meth:`fill_row`) sees it moved
                self._slot_gen[cur] += 1
                self._evict_ptr = cur
                return cur
        raise CompileLimitError("row_budget_bytes", n * self.width * 4, self._row_budget,
                                "every cached row is in use")

    _pinned: frozenset = frozenset()
    _free_ret: bytearray | None = None

    # -- stack-relative masks (the context-independent / context-dependent split) ---------------------
    def _vbase(self, depth: int) -> int:
        """A stack standing for "some frame at ``depth``" (return state ``_VBASE``): a frame re-rooted
        on it completes into the accept item, and pushes above it see the real depth budget."""
        key = (_VBASE, depth)
        k = self._stk_ids.get(key)
        if k is None:
            k = len(self._stk_ret)
            self._stk_ids[key] = k
            self._stk_ret.append(_VBASE)
            self._stk_parent.append(0)
            self._stk_depth.append(depth)
        return k

    def _relativize(self, items: frozenset, base: int, to: int = 0) -> frozenset:
        """The items with ``base`` cut off their stacks (re-rooted at stack ``to``: the empty stack
        or a :meth:`_vbase`)."""
        N = self._N
        memo: dict[int, int] = {base: to}
        out = set()
        for it in items:
            k, leaf = divmod(it, N)
            chain = []
            x = k
            while x not in memo:
                chain.append(x)
                x = self._stk_parent[x]
            r = memo[x]
            for y in reversed(chain):
                r = self._push(self._stk_ret[y], r)
                memo[y] = r
            out.add(r * N + leaf)
        return frozenset(out)

    def _rel_info(self, cr: int):
        """For a configuration on the empty stack: (row of the tokens that stay inside it, without
        EOS; uncertain (token, byte offset) pairs that complete it mid-token; whether it is complete
        before any byte). Cached per configuration: the same for every stack below."""
        hit = self._rel_cache.get(cr)
        if hit is not None:
            return hit
        if self.gnfa.dyn_node:
            hit = self._automaton_walk(cr)
            if hit is not None:
                self._rel_cache[cr] = hit
                return hit
        # (the rule's trie is made only when the walk is not shared: a grammar's first lookup of
        # a rule's trie relabels the rule's partition into the grammar's alphabet, ~1 ms)
        tw = self._trie_for(cr, build=False)
        skey = None
        if tw is None or tw[0] is not self._trie:  # inside one call-free rule: the same walk in every grammar
            skey = self._shared_key(cr)
            if skey is not None:
                hit = _shared_walks.get(self.vocab, skey)
                if hit is not None:
                    self._rel_cache[cr] = hit
                    return hit
            if tw is None:
                tw = self._trie_for(cr)
        # acc: class nodes whose configuration is complete (the base rule returned) after >= 1 byte
        row, acc, reach = self._walk_summary(cr, tw)
        if tw[0] is self._trie:
            # the grammar's own trie: the rest of those tokens is walked from the caller's
            # configuration below these nodes (:meth:`_walk_below`); no token list
            toks, offs = acc, None
        else:
            # a rule's coarser trie merges bytes the caller may tell apart: token by token
            toks, offs = self._uncertain(acc, tw[0])
        # deepest stack any walked configuration reached: the walk holds for a frame at depth d
        # iff d + that <= max_depth (otherwise pushes it took would be refused on the real stack)
        reach = max(reach, int(self._cfg_depth[cr]))
        info = (row, toks, offs, bool(self._accepting[cr]), reach)
        if skey is not None:
            for a in (row, toks, offs):
                a.flags.writeable = False
            _shared_walks.put(self.vocab, skey, info)
        self._rel_cache[cr] = info
        return info

    def _automaton_walk(self, cr: int):
        """:meth:`_rel_info` of ``cr`` computed by its lazy automaton, or None.

        Applies when ``cr``'s items are, rule by rule, exactly the start of generated rules (each
        one's closure on the empty stack, the complete item aside) whose automata compute token
        walks themselves
        (``token_walk_key``, ``token_walk``, ``token_rows``, ``token_bytes_read``: see
        :class:`~structgate.native.json_schema._automata.ResidueProduct`). A state ``(q, r)`` of a
        remainder automaton of a large modulus ``L`` is a new configuration at every position of a
        literal, and the trie walk of its mask built a rule and a table row for every digit prefix
        of the vocabulary (~1,110 of them, ~0.1-0.2 s a mask, every mask of every literal). The
        tokens' walks from range state ``q`` are computed once, vectorised over the tokens
        (``token_walk``, cached per key), and each state's row and pairs are then arithmetic over
        them (``token_rows``): the same ``(row without EOS, pair tokens, pair offsets, complete
        before any byte, deepest stack)`` as the walk, since the walk from ``cr`` on the empty
        stack reads only those rules and the states they tail-call (call-free: no frame, so the
        stack reached is ``cr``'s own), and the walk of several items is the union of each one's.
        The row is packed from the ids (:func:`_row_of_ids`)."""
        g = self.gnfa
        N, acc = self._N, self._ACCEPT
        items = self._cfg_keys[cr]
        owner = self._owner
        if owner is None:
            return None
        walk_rules = self._walk_rules
        by_rule: dict[int, set] = {}
        for it in items:  # (the first item of another rule ends it: most configurations)
            if it == acc:
                continue
            if it < 0 or it >= N:
                return None
            r = owner[it]
            node = walk_rules.get(r, False)
            if node is False:
                node = g.dyn_node.get(r)
                if node is not None and getattr(node.auto, "token_walk_key", None) is None:
                    node = None
                walk_rules[r] = node
            if node is None:
                return None
            by_rule.setdefault(r, set()).add(it)
        if not by_rule:
            return None
        parts = []
        for r, its in by_rule.items():
            st = g.rule_start[r]
            if st < 0 or self._closure(st, 0) - {acc} != its:
                return None
            node = walk_rules[r]
            parts.append((node, node.auto.token_walk_key(node.state)))
        fulls, toks, offs, ends = [], [], [], []
        for node, k in parts:
            auto = node.auto
            walk = self._tok_walks.get((auto, k))
            if walk is None:
                cand = self._token_cands(auto.token_bytes_read)
                walk = self._tok_walks[(auto, k)] = auto.token_walk(k, self._flat, self._tok_start, self._tok_len, cand)
            f, keep = auto.token_rows(walk, node.state)
            pt, po = auto.token_pairs(walk)
            fulls.append(f)
            toks.append(pt[keep])
            offs.append(po[keep])
            ends.append((auto, k, keep))
        self._auto_ends[cr] = ends
        if len(parts) == 1:
            full, toks, offs = fulls[0], toks[0], offs[0]
        else:
            # several rules side by side (a union of literals): the walk of a set of items is the
            # union of theirs
            full = np.unique(np.concatenate(fulls))
            pairs = np.unique(np.stack([np.concatenate(toks), np.concatenate(offs)]), axis=1)
            toks, offs = pairs[0].copy(), pairs[1].copy()
        return _row_of_ids(full, self.width), toks, offs, bool(self._accepting[cr]), int(self._cfg_depth[cr])

    def _automaton_ends(self, ends: list, p: int) -> np.ndarray:
        """int64 ids of the tokens that complete a configuration of :meth:`_automaton_walk`
        mid-token (``ends``: its ``(automaton, key, bool over the key's walk's pairs)``) and go on
        from ``p``, the configuration after its frame returns. Whether a pair's rest stays alive
        from ``p`` does not depend on the state's residue: it is checked once per (automaton,
        key, ``p``) for every pair of the walk (:meth:`_suffix_ok`) and reused for every state.
        With ``not multipleOf`` nearly every digit prefix completes the literal (~2,100 pairs on
        Llama 3), past :attr:`SUFFIX_OK_MAX`, where :meth:`_compute` would walk the state
        directly and generate a state per digit prefix again."""
        out = []
        for auto, key, keep in ends:
            ok = self._tok_ends_ok.get((auto, key, p))
            if ok is None:
                pt, po = auto.token_pairs(self._tok_walks[(auto, key)])
                ok = self._tok_ends_ok[(auto, key, p)] = self._suffix_ok(p, pt, po) if pt.size else \
                    np.zeros(0, dtype=bool)
            out.append(auto.token_pairs(self._tok_walks[(auto, key)])[0][keep & ok])
        return out[0] if len(out) == 1 else np.unique(np.concatenate(out))

    def _token_cands(self, first: bytes) -> np.ndarray:
        """int64 ids of the ordinary tokens (some bytes, below ``n_tokens``, not EOS) whose first
        byte is one of ``first`` (cached per ``first``)."""
        hit = self._tok_cands.get(first)
        if hit is None:
            lens = self._tok_len
            ids = np.arange(min(lens.shape[0], self.vocab.n_tokens), dtype=np.int64)
            fb = self._flat.take(self._tok_start[: ids.shape[0]])
            ok = (lens[: ids.shape[0]] > 0) & np.isin(fb, np.frombuffer(first, dtype=np.uint8))
            ok[self._eos[self._eos < ok.shape[0]]] = False
            hit = self._tok_cands[first] = ids[ok]
        return hit

    def _shared_key(self, cr: int):
        """A key for configuration ``cr`` (on the empty stack, every item inside one call-free
        rule) that is the same in every grammar whose rule has the same states: the rule's byte
        partition, its states written relative to its first (:meth:`_rule_structure`), the items'
        offsets and whether ``cr`` is complete; None when the rule's states are not one closed
        run of their own, or when ``cr`` holds no item but the complete one."""
        N, acc = self._N, self._ACCEPT
        items = self._cfg_keys[cr]
        if any(it >= N for it in items):  # an item off the empty stack (a depth marker): not shared
            return None
        leaf = next((it % N for it in items if it % N != acc), None)
        if leaf is None:  # complete and nothing else: in no rule
            return None
        r = self._owner[leaf]
        st = self._rule_struct.get(r)
        if st is None:
            st = self._rule_struct[r] = self._rule_structure(r) or False
        if not st:
            return None
        a, b, skey = st
        rel = []
        for it in items:
            if it == acc:
                continue
            if not a <= it < b:  # an item outside the rule's own run: not shared
                return None
            rel.append(it - a)
        return (skey, acc in items, tuple(sorted(rel)))

    def _rule_structure(self, r: int):
        """``(first state, end of its run, key)`` of call-free rule ``r``'s NFA states: each state's kind, byte
        range(s), liveness and targets relative to the rule's first state (its ``RET``), with the
        rule's byte partition; None when a target leaves the run (a state shared with another rule)
        or its start is not among the states its build made (:attr:`GrammarNFA.rule_span`). The
        walk of a configuration inside the rule depends on nothing else (and on the vocabulary)."""
        g, nfa = self.gnfa, self.gnfa.nfa
        if r == 0:
            # the root rule is the schema's own: its walks would only churn the shared cache (and
            # evict the string and key walks every grammar reuses)
            return None
        st = g.rule_start[r]
        span = g.rule_span.get(r)
        if st < 0 or span is None or not span[0] <= st < span[1]:
            return None
        a, b = span
        if nfa.kind[a] != RET:
            return None
        kind, lo, hi, out, outs, live = nfa.kind, nfa.lo, nfa.hi, nfa.out, nfa.outs, g.live
        multi = nfa.multi or {}
        fail = nfa._fail

        def rel(x: int):
            if a <= x < b:
                return x - a
            if x == fail and x >= 0:
                return "F"
            raise LookupError

        parts = []
        try:
            for v in range(a, b):
                k = kind[v]
                if k == CALL or k == DEFER:
                    return None
                parts.append((k, -1 if k == RET else lo[v], hi[v], rel(out[v]) if out[v] >= 0 else -1,
                              tuple(map(rel, outs[v])) if outs[v] else None, multi.get(v), live[v]))
        except LookupError:
            return None
        return a, b, (g.rule_classes[r].tobytes(), tuple(parts))

    def _walk_below(self, seeds: np.ndarray, p: int, info: dict | None = None) -> np.ndarray:
        """Token ids strictly below the grammar-trie nodes ``seeds`` (global ids, any levels) whose
        remaining bytes stay alive fed from configuration ``p``: the tokens that complete a frame
        mid-token and go on in its caller. One sparse gather per level over the children of the
        live (node, configuration) pairs, so a subtree dies at once instead of token by token; a
        node may be live with several configurations (several threads), so nothing is made dense.
        ``info`` (``{"acc": list, "reach": int}``), when given, collects the nodes whose
        configuration accepts and raises ``reach`` to the deepest stack walked.

        The result is a function of ``(seeds, p)`` alone (the table's cells never change once
        computed), kept per grammar (:attr:`WALK_BELOW_MEMO_BYTES`): the positions of one object's
        names trie under ``additionalProperties`` re-root the same key-tail suffix walk, and each
        walked the same accepting ends from the same caller configuration again (4 in 5 calls on
        MaskBench's walks)."""
        key = (p, seeds.dtype.char, seeds.tobytes())
        hit = self._wb_memo.get(key)
        if hit is None:
            mine = {"acc": [], "reach": 0}
            good = self._walk_below_uncached(seeds, p, mine)
            acc = np.concatenate(mine["acc"]) if mine["acc"] else _EMPTY_I64
            for a in (good, acc):
                if a is not _EMPTY_I64:  # (kept and handed out again: read-only)
                    a.flags.writeable = False
            hit = (good, acc, mine["reach"])
            nb = good.nbytes + acc.nbytes + len(key[2]) + 200
            if self._wb_bytes + nb > self.WALK_BELOW_MEMO_BYTES:
                self._wb_memo.clear()
                self._wb_bytes = 0
            if nb <= self.WALK_BELOW_MEMO_BYTES:
                self._wb_memo[key] = hit
                self._wb_bytes += nb
        if info is not None:
            if hit[1].size:
                info["acc"].append(hit[1])
            info["reach"] = max(info["reach"], hit[2])
        return hit[0]

    #: bytes of :meth:`_walk_below` results kept per grammar (dropped together past it)
    WALK_BELOW_MEMO_BYTES = 4 << 20

    def _walk_below_uncached(self, seeds: np.ndarray, p: int, info: dict) -> np.ndarray:
        """:meth:`_walk_below` computed (``info`` filled)."""
        trie = self._trie
        levels = trie.levels
        W = self.n_classes
        lb = trie.level_base
        lv = np.searchsorted(lb, seeds, side="right") - 1
        order = np.argsort(lv, kind="stable")
        seeds, lv = seeds[order], lv[order]
        bounds_at = np.searchsorted(lv, np.arange(len(levels) + 1))
        res: list[np.ndarray] = []
        alive = _EMPTY_I64  # local node ids at level d
        alive_v = _EMPTY_I64
        d = int(lv[0]) if lv.size else len(levels)
        while d + 1 < len(levels):
            a, b = bounds_at[d], bounds_at[d + 1]
            if b > a:  # seeds of this level join with the caller's configuration
                alive = np.concatenate([alive, seeds[a:b] - lb[d]])
                alive_v = np.concatenate([alive_v, np.full(b - a, p, dtype=np.int64)])
            if alive.size == 0:
                if b >= seeds.shape[0]:
                    break
                d = int(lv[b])
                continue
            _base, _par, cls, bounds = levels[d + 1]
            st = bounds[alive]
            cnt = bounds[alive + 1] - st
            cs = cnt.cumsum()
            tot = int(cs[-1])
            if tot:
                idx = (st - (cs - cnt)).repeat(cnt) + np.arange(tot, dtype=np.int64)
                fl = alive_v.repeat(cnt)
                fl *= W
                fl += cls[idx]
                vals = self._gather(fl)
                nz = vals != 0
                alive, alive_v = idx[nz], vals[nz]
                if alive.size:
                    res.append(alive + lb[d + 1])
                    # accepting nodes (the walk's base ended), deepest stack
                    a_ = self._accepting.take(alive_v)
                    if a_.any():
                        info["acc"].append(alive[a_] + lb[d + 1])
                    info["reach"] = max(info["reach"], int(self._cfg_depth.take(alive_v).max()))
            else:
                alive, alive_v = _EMPTY_I64, _EMPTY_I64
            d += 1
        if not res:
            return _EMPTY_I64
        toks = _tokens_ending(trie, np.unique(np.concatenate(res)))
        return toks[(toks < self.vocab.n_tokens) & ~np.isin(toks, self._eos)]

    def _uncertain(self, acc_nodes: np.ndarray, trie):
        """(token ids, offsets) of every token with a proper prefix ending on one of
        ``acc_nodes`` (global node ids: a prefix of ``offset`` bytes completes the base rule; the
        rest must be checked against the stack)."""
        if acc_nodes.size == 0:
            return _EMPTY_I64, _EMPTY_I64
        lv = np.searchsorted(trie.level_base, acc_nodes, side="right") - 1
        pairs_t, pairs_o = [], []
        for d in np.unique(lv).tolist():
            hits = acc_nodes[lv == d] - trie.level_base[d]
            sub = trie.subtree_tokens(d, hits)
            if sub.size:
                pairs_t.append(sub)
                pairs_o.append(np.full(sub.shape[0], d + 1, dtype=np.int64))
        if not pairs_t:
            return _EMPTY_I64, _EMPTY_I64
        return np.concatenate(pairs_t), np.concatenate(pairs_o)

    def _suffix_ok(self, p: int, toks: np.ndarray, offs: np.ndarray, cells: bool = False) -> np.ndarray:
        """bool per pair: the bytes of token ``toks[i]`` from ``offs[i]`` on, fed from
        configuration ``p``, stay alive (vectorised over the pairs, one gather per byte column).
        With ``cells``, a table entry not computed yet is computed alone (:meth:`_compute_cell`,
        as :meth:`step_bytes` does in grammars with generated rules), not its whole row."""
        flat, start = self._flat, self._tok_start
        tl = self._tok_len
        n = toks.shape[0]
        st = np.full(n, p, dtype=np.int64)
        pos = start[toks] + offs
        end = start[toks] + tl[toks]
        act = np.arange(n)
        bc = self._bc_np
        W = self.n_classes
        while act.size:
            cls = bc[flat[pos[act]]]
            cur = st[act]
            fl = cur * W + cls
            vals = self._table.ravel().take(fl)
            neg = vals < 0
            if neg.any():
                neg = neg.nonzero()[0]
                if cells:
                    for f in np.unique(fl[neg]).tolist():
                        self._compute_cell(*divmod(f, W))
                else:
                    self._ensure_rows(set(cur[neg].tolist()))
                vals[neg] = self._table.ravel().take(fl[neg])
            st[act] = vals
            pos[act] += 1
            act = act[(vals != 0) & (pos[act] < end[act])]
        return st != 0

    def _compute(self, state: int) -> int:
        """Compute and cache the row of ``state``; returns its slot. Caller holds the lock.

        A configuration's items are grouped by their stack. Several groups: the row is the union
        of the groups' rows (each a configuration of its own, cached). One group on a non-empty
        stack ``k``: the items re-rooted on the empty stack form a configuration whose walk is the
        same whatever lies below ``k`` (cached once, :meth:`_rel_info`); the tokens that complete
        it mid-token are checked from the configuration after returning from ``k``. One group on the
        empty stack: one walk.

        Items inside a counter (:class:`RepeatCounter`, a binary counter's rules) are grouped by
        the frame below the counter's frames *and* the frame of the rule that called the counter
        (a bounded string's ``"`` counter ``"``): re-rooted there, the walk is the same for every
        place that rule is called from at the same count (with the count-free aliases of
        :meth:`_count_alias`, for every count far from the bounds), and the tokens checked against
        the stack are those that complete that rule (a string's closing quote), not those that
        complete one repetition (every character boundary). Grouping by the counter's own caller
        instead was measured slower (2026-12-05, 12-06): the tokens completing a repetition are
        most of the vocabulary.
        """
        if state == DEAD:
            return self._store_row(DEAD, np.zeros(self.width, dtype=np.int32), 0, 0)
        if self.gnfa.dyn_node:
            alias = self._count_alias(state)
            if alias is not None:
                slot = self._aliased_row(state, *alias)
                if slot is not None:
                    return slot
        items = self._cfg_keys[state]
        N = self._N
        groups: dict[int, list[int]] = {}
        fr = self._free_ret
        if fr is None:
            for it in items:
                groups.setdefault(it // N if it >= 0 else 0, []).append(it)
        else:
            # inside a counter (a counted string's characters): the items are re-rooted below
            # the rule that called the counter (its frame and the counter's kept), so the walk is
            # the same wherever that rule was called from (every property of one string rule) and
            # the tokens checked against the stack are those that complete that rule (a string's
            # closing quote), not those that complete a count (every character boundary)
            stk_ret, stk_parent = self._stk_ret, self._stk_parent
            base_of: dict[int, int] = {}
            for it in items:
                k = it // N if it >= 0 else 0
                b = base_of.get(k)
                if b is None:
                    b = k
                    while b and stk_ret[b] >= 0 and fr[stk_ret[b]]:
                        b = stk_parent[b]
                    if b != k and b and stk_ret[b] >= 0:
                        b = stk_parent[b]
                    base_of[k] = b
                groups.setdefault(b, []).append(it)
        if len(groups) > 1:
            row = np.zeros(self.width, dtype=np.int32)
            for k, its in groups.items():
                sub = self._intern(frozenset(its))
                sl = self._slot_of(sub)  # may grow self._rows: index after
                row |= self._rows[sl]
            self._clear_eos(row)
        else:
            (k,) = groups
            if k == 0:
                row, toks, offs, acc0, _reach = self._rel_info(state)
                row = row.copy()
            else:
                cr = self._intern(self._relativize(items, k))
                rrow, toks, offs, acc0, reach = self._rel_info(cr)
                d = self._stk_depth[k]
                if self._near(self.max_depth - d - reach):
                    # near the depth bound (where pushes are refused, and pairs that could not
                    # complete in the frames left are dropped: :meth:`_completes`): the walk
                    # re-rooted at the real depth (exact, cached per depth)
                    cr = self._intern(self._relativize(items, k, self._vbase(d)))
                    rrow, toks, offs, acc0, _reach = self._rel_info(cr)
                p = self._intern(self._closure(self._stk_ret[k], self._stk_parent[k]))
                # (a walk from the automaton: its pairs' rests are checked once per p)
                ends = self._auto_ends.get(cr) if p else None
                if ends is None and p and toks.size and (
                        toks.shape[0] > self.SUFFIX_OK_MAX if offs is not None else
                        int(self._trie._preorder()[2].take(toks).sum()) > self.WALK_BELOW_MAX):
                    # most tokens leave the frame mid-token (a one-character rule called per
                    # character of a counted string): checking each one's rest from ``p`` costs
                    # ~1 µs a token (58,017 pairs, 65 ms, in MaskBench's Github_hard o21072), the
                    # direct walk of the configuration a few ms (its table rows are kept); with
                    # the frame's ends as trie nodes, nested ends walk the tokens below them once
                    # per end above them (:attr:`WALK_BELOW_MAX`)
                    row = self._walk_summary(state)[0]
                else:
                    row = rrow.copy()
                    if acc0 and p:
                        sl = self._slot_of(p)
                        row |= self._rows[sl]
                        self._clear_eos(row)
                    good = None
                    if ends is not None:
                        good = self._automaton_ends(ends, p)
                    elif toks.size and p:
                        if offs is None:  # accepting nodes of the grammar's trie
                            good = self._walk_below(toks, p)
                        else:
                            good = toks[self._suffix_ok(p, toks, offs)]
                    if good is not None and good.size:
                        u = row.view(np.uint32)
                        np.bitwise_or.at(u, good >> 5, (np.uint32(1) << (good & 31).astype(np.uint32)))
        # EOS is allowed by acceptance alone: an EOS id that spells bytes (a vocabulary may keep
        # them) can end on a walked node, or among the tokens checked against the stack above
        self._clear_eos(row)
        n_non_eos = _popcount(row)
        n_allowed = n_non_eos
        if self._accepting[state]:
            self._set_eos(row)
            n_allowed += len(self._eos)
        return self._store_row(state, row, n_allowed, n_non_eos)

    #: past this many (token, offset) pairs leaving a re-rooted frame mid-token, the row of a
    #: configuration on a stack is walked directly instead (:meth:`_compute`)
    SUFFIX_OK_MAX = 2048
    #: the same where the frame's ends are trie nodes (:meth:`_walk_below`): past this many tokens
    #: below them, counted once per end above each token. Where every character may end the frame
    #: (``(?:\w{1,100}\s?){1,50}``: each end re-enters the caller with another count), the ends
    #: are nested and the walk below them holds a token's node once per end above it, each in its
    #: own configuration (19 M pairs over 23 prose tokens, ~140 ms a token); the direct walk holds
    #: each node once. In MaskBench's walks (every 20th development schema, 404 such checks) 400
    #: have under 10,000 and none between 10,000 and 30,000
    WALK_BELOW_MAX = 32768

    #: an aliased row is used only when at least this many bytes are free of the counter's bounds
    ALIAS_MIN_SLACK = 16

    def _count_alias(self, state: int):
        """``(alias, slack)`` for a configuration inside length-counted rules
        (:class:`~structgate.native.json_schema._automata.LengthProduct` states), or None.

        Each item on the rule of a counted state ``(q, count)`` far from the bounds (its automaton's
        ``canonical``) is moved to the same position in the rule of the count-free state
        (``(q, "mid")`` or ``(q, "low")``); an item inside a symbol rule called from such a rule
        gets its return frame moved the same way. The alias's configuration does not depend on the
        count, so its row is computed once for every position of a long string; tokens of at most
        ``slack`` bytes are allowed by both or by neither (:meth:`_aliased_row` checks the longer
        ones). None when no item is counted, when one is near a bound, or when the two rules'
        layouts differ.

        Near the depth bound the alias's items are kept or dropped by :meth:`_completes` as the
        state's are only if the alias completes within the frames left exactly when the state does:
        true of :class:`RepeatCounter` and
        :class:`~structgate.native.json_schema._automata.LengthProduct`, whose counts that cannot
        end yet (``"low"``) need a symbol's call, with its frames, as every real count below the
        bound does (a length product's symbols are JSON spellings, each a called rule). An
        automaton whose non-ending alias could reach the end by inline symbols alone would break it."""
        g = self.gnfa
        dn, span, owner = g.dyn_node, g.dyn_span, g.owner
        N = self._N
        acc = self._ACCEPT
        stk_ret, stk_parent = self._stk_ret, self._stk_parent
        moved: dict[int, int] = {}  # counted rule index -> offset to add to its states
        slack = None

        def shift(r: int):
            nonlocal slack
            off = moved.get(r)
            if off is not None:
                return off
            node = dn.get(r)
            canon = getattr(node.auto, "canonical", None) if node is not None else None
            if canon is None:
                return None
            res = canon(node.state, self._max_tok_len)
            if res is None:
                return False
            st2, sl, superset = res
            if sl < self.ALIAS_MIN_SLACK:
                return False
            if not superset:
                # the alias may also reject what the state allows (a "low" count cannot end yet):
                # only where no token is longer than the slack
                if sl < self._max_tok_len:
                    return False
            r2 = g.dyn_rule(LazyRule(node.auto, st2))
            if self.gnfa.rule_start[r2] < 0:
                self._build_rule(r2)
            a0, a1 = span[r]
            b0, b1 = span[r2]
            if a1 - a0 != b1 - b0 or self._kind[a0:a1] != self._kind[b0:b1]:
                return False
            moved[r] = off = b0 - a0
            slack = sl if slack is None else min(slack, sl)
            return off

        out = []
        counted = False
        for it in self._cfg_keys[state]:
            if it < 0 or it % N == acc:
                out.append(it)
                continue
            k, v = divmod(it, N)
            off = shift(owner[v])
            if off is False:
                return None
            if off is not None:
                counted = True
                out.append(k * N + v + off)
                continue
            ret = stk_ret[k] if k else -1
            if ret >= 0 and ret < len(owner):
                off = shift(owner[ret])
                if off is False:
                    return None
                if off is not None:
                    k2 = self._push(ret + off, stk_parent[k])
                    if k2 < 0:
                        return None
                    counted = True
                    out.append(k2 * N + v)
                    continue
            out.append(it)
        if not counted:
            return None
        return self._intern(frozenset(out)), slack

    #: at most this many long tokens are checked one by one for an aliased row (each a
    #: :meth:`step_bytes` of 17 to 128 bytes, ~20 µs); past it the real configuration is walked.
    #: Measured on MaskBench Snowplow schemas (strings of maxLength 50 to 255, where most long
    #: tokens are allowed next to the bound): caps of 64, 256 and 1,024 were all slower than
    #: none (a walk there costs 10-15 ms), so this only guards against the pathological
    ALIAS_MAX_CHECKS = 4096
    #: past this many long tokens an aliased row checks them column by column (:meth:`_suffix_ok`)
    ALIAS_COLUMN_MIN = 16

    def _aliased_row(self, state: int, alias: int, slack: int) -> int | None:
        """Store the row of ``state`` from its count-free alias's (:meth:`_count_alias`): the
        alias allows a superset; tokens longer than ``slack`` bytes it allows are checked exactly
        from ``state`` (:meth:`step_bytes` each, or past :attr:`ALIAS_COLUMN_MIN` of them all at
        once, :meth:`_suffix_ok`). None (nothing stored) when there are more than
        :attr:`ALIAS_MAX_CHECKS` of them: the caller walks ``state`` itself."""
        sl = self._slot_of(alias)
        row = self._rows[sl].copy()
        n_non_eos = self._n_non_eos[sl]
        self._clear_eos(row)
        order, lens = self._long_ids
        n_long = int(np.searchsorted(-lens, -slack, side="left"))  # tokens longer than slack
        if n_long:
            cand = order[:n_long]
            u = row.view(np.uint32)
            on = (u[cand >> 5] >> (cand & 31).astype(np.uint32)) & 1
            check = cand[on.astype(bool)]
            if check.size > self.ALIAS_MAX_CHECKS:
                return None
            if check.size > self.ALIAS_COLUMN_MIN:
                # every checked token at once, one byte column per step (one step_bytes call per
                # token costs ~60 µs; a column step ~10 µs, up to the longest token's length)
                bad = check[~self._suffix_ok(state, check, np.zeros(check.shape[0], dtype=np.int64),
                                             cells=self.gnfa._dynamic)]
            else:
                tb = self.vocab.token_bytes
                bad = np.asarray([t for t in check.tolist() if self.step_bytes(state, tb[t]) == DEAD],
                                 dtype=np.int64)
            if bad.size:
                np.bitwise_and.at(u, bad >> 5, ~(np.uint32(1) << (bad & 31).astype(np.uint32)))
                n_non_eos -= int(bad.shape[0])
        n_allowed = n_non_eos
        if self._accepting[state]:
            self._set_eos(row)
            n_allowed += len(self._eos)
        return self._store_row(state, row, n_allowed, n_non_eos)

    # -- the step's time limit -----------------------------------------------------------------------
    def _begin(self, t0: float | None = None) -> bool:
        """Start one step's budget (:attr:`step_timeout_s`) at ``t0`` (this thread's CPU time,
        ``time.thread_time()``; default now) unless a step
        or :meth:`bounded` already runs; True if this call started it (and must end it: set
        :attr:`_deadline` back to None). Caller holds the lock."""
        if self._deadline is not None:
            return False
        t = time.thread_time() if t0 is None else t0
        lim = self.step_timeout_s
        self._step_t0 = t
        self._deadline_of = ("step_timeout_s", lim)
        self._clock = time.thread_time
        self._deadline = t + lim if lim > 0 else float("inf")
        # the step's first unit of work reads the clock: the stride's count is not carried over
        # from an earlier step or block (a cheap step after one that ticked 3 times read none)
        self._tick_n = 1
        return True

    #: :meth:`_tick` reads the clock at every this-many-th call
    _TICK_STRIDE = 4

    def _tick(self) -> None:
        """Raise :class:`CompileLimitError` when the running step is past its deadline (called
        between units of lazy work: a table row's targets, a closure's calls). Caller holds the
        lock."""
        d = self._deadline
        if d is None:
            return
        n = self._tick_n - 1
        if n > 0:  # the clock is read at every _TICK_STRIDE-th check (CPU time: ~0.4 us a reading)
            self._tick_n = n
            return
        self._tick_n = self._TICK_STRIDE
        if self._clock() > d:
            name, lim = self._deadline_of
            raise CompileLimitError(
                name, round(self._clock() - self._step_t0, 3), lim,
                "the first visit of a part of this grammar (a mask row, a transition) took too long "
                "(a highly ambiguous grammar: configurations of thousands of items); the work done "
                "so far is kept")

    def bounded(self, deadline: float | None, limit_name: str, limit: float, t0: float | None = None):
        """A context in which this index's lazy work ends by ``deadline`` (``time.monotonic()``;
        None: no limit), raising :class:`CompileLimitError` ``(limit_name, seconds since t0,
        limit)`` past it, instead of each step's :attr:`step_timeout_s` (the compile's deadline
        for the start's mask: :meth:`NativeCompiledGrammar.warm_start`). Holds the lock
        throughout."""
        return _Bounded(self, deadline, limit_name, limit, time.monotonic() if t0 is None else t0)

    def one_step(self):
        """A context in which several calls (the rows and transitions of
        :meth:`NativeMatcher.forced_tokens`' chain) share one step's :attr:`step_timeout_s`.
        Holds the lock throughout."""
        return _OneStep(self)

    def _slot_of(self, state: int) -> int:
        if state == TERMINATED:
            return self._terminated_slot
        slot = int(self._slot[state])
        if slot < 0:
            with self._lock, no_gc():
                slot = int(self._slot[state])
                if slot < 0:
                    own = self._begin()
                    try:
                        slot = self._compute(state)
                    finally:
                        if own:
                            self._deadline = None
        return slot

    # -- public API -----------------------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        """Configurations created so far (grows as the grammar is explored)."""
        return len(self._cfg_keys)

    @property
    def n_cached(self) -> int:
        return sum(1 for s in self._slot_state if s != -2)

    def _check_state(self, state: int) -> int:
        s = int(state)
        if s != TERMINATED and not 0 <= s < len(self._cfg_keys):
            raise IndexError(f"state {s} out of range 0..{len(self._cfg_keys) - 1} (or -1)")
        return s

    def row(self, state: int) -> np.ndarray:
        """A read-only copy-free view of the row of ``state`` (int32 ``(width,)``): valid until the
        next row is computed (with a bounded ``row_budget_bytes`` that may evict it; another thread
        may compute one at any time: use :meth:`fill_row` there)."""
        s = self._check_state(state)
        slot = self._slot_of(s)  # first: computing the row may grow (replace) self._rows
        r = self._rows[slot].view()
        r.flags.writeable = False
        return r

    def fill_row(self, state: int, out: np.ndarray) -> bool:
        """Copy the row of ``state`` into ``out`` (int32 ``(width,)``); True if some id is forbidden.

        A cached row is copied without the lock (a first visit in another thread does not stall
        it), then checked: if the slot was given to another state meanwhile (evicted under
        ``row_budget_bytes`` by a row another thread computed: the copy may hold that state's row,
        or half of it), the copy is redone under the lock."""
        s = self._check_state(state)
        slot = self._slot_of(s)
        gen = self._slot_gen[slot]
        out[...] = self._rows[slot]
        n = self._n_allowed[slot]
        if self._slot_gen[slot] != gen or (s != TERMINATED and self._slot[s] != slot):
            with self._lock:
                slot = self._slot_of(s)
                out[...] = self._rows[slot]
                n = self._n_allowed[slot]
        return n < self.vocab.vocab_size

    def slots(self, states: np.ndarray) -> np.ndarray:
        """Row indices into :attr:`rows` for ``states`` (missing rows computed first; rows of the
        states asked for together are never evicted by each other). The indices hold until the
        next row is computed, by any thread: a concurrent reader gathers with :meth:`fill_rows`.
        Raises ``CompileLimitError`` (``row_budget_bytes``) when ``states`` need more rows than
        the budget holds."""
        states = np.asarray(states, dtype=np.int64)
        out = np.empty(states.shape[0], dtype=np.int64)
        with self._lock:
            self._pinned = frozenset(int(s) for s in states)
            try:
                for i, s in enumerate(states.tolist()):
                    out[i] = self._slot_of(self._check_state(s))
            finally:
                self._pinned = frozenset()
        return out

    def fill_rows(self, states: np.ndarray, out) -> None:
        """Gather the rows of ``states`` into ``out`` (int32 ``(k, width)``), atomically: under the
        lock, so no other thread's row evicts one between its lookup and its copy (the vLLM
        scheduler hook's batched fill, beside its prefetching thread). Cached rows are one
        gather; otherwise each row is copied as soon as it is found or computed, so a batch may
        hold more distinct states than ``row_budget_bytes`` holds rows."""
        if not isinstance(out, np.ndarray):
            out = out.numpy()
        states = np.asarray(states, dtype=np.int64)
        with self._lock:
            st = states.tolist()
            for x in st:
                self._check_state(x)
            if not st:
                return
            sl = self._slot.take(np.maximum(states, 0))
            sl[states == TERMINATED] = self._terminated_slot
            if int(sl.min()) >= 0:
                np.take(self._rows, sl, axis=0, out=out)
                return
            for i, x in enumerate(st):
                sl_i = self._slot_of(x)  # first: computing the row may grow (replace) self._rows
                out[i] = self._rows[sl_i]

    @property
    def rows(self) -> np.ndarray:
        """All cached rows, int32 ``(capacity, width)`` (use with :meth:`slots`)."""
        return self._rows

    def is_cached(self, state: int) -> bool:
        s = self._check_state(state)
        return s == TERMINATED or self._slot[s] >= 0

    def n_allowed(self, state: int) -> int:
        return self._n_allowed[self._slot_of(self._check_state(state))]

    def has_non_eos(self, state: int) -> bool:
        return self._n_non_eos[self._slot_of(self._check_state(state))] > 0

    def is_accepting(self, state: int) -> bool:
        return state == TERMINATED or (state > 0 and bool(self._accepting[state]))

    def step_bytes(self, state: int, data: bytes) -> int:
        """Configuration after feeding ``data`` from ``state`` (0 once dead)."""
        bc = self._bc_list
        t = self._table
        t0 = None  # the call's start, CPU time (one budget for the call: a wait for the lock,
        # while another thread computes, costs this thread no CPU time)
        for b in data:
            c = bc[b]
            nxt = t[state, c]
            if nxt < 0:
                if t0 is None:
                    t0 = time.thread_time()
                with self._lock, no_gc():
                    own = self._begin(t0)
                    try:
                        if self.gnfa._dynamic:
                            nxt = self._compute_cell(state, c)
                        else:
                            self._ensure_rows([state])
                            nxt = self._table[state, c]
                    finally:
                        if own:
                            self._deadline = None
                t = self._table
            state = int(nxt)
            if state == 0:
                return DEAD
        return state

    def next_state(self, state: int, token_id: int) -> int:
        """Configuration after token ``token_id`` from ``state``; 0 if rejected (no bytes,
        padding, EOS — EOS is the matcher's)."""
        if not (0 <= token_id < self.vocab.n_tokens) or state <= 0 or token_id in self._eos_set:
            return DEAD
        data = self.vocab.token_bytes[token_id]
        if not data:
            return DEAD
        return self.step_bytes(state, data)

    def direct_row(self, state: int) -> np.ndarray:
        """The row of ``state`` from one walk of the whole configuration, without the
        stack-relative split (a reference for tests of :meth:`fill_row`; not cached)."""
        with self._lock:
            nodes, _cfgs = self._walk(state)
            row = self._allowed_row(self._trie, nodes, self._token_cnode)
            if self._accepting[state]:
                self._set_eos(row)
            return row

    def matches(self, data: bytes) -> bool:
        """Full match of ``data`` from the start (tests)."""
        s = self.step_bytes(START, data)
        return s > 0 and bool(self._accepting[s])

    def check_start(self) -> None:
        """Raise :class:`IncompatibleVocabularyError` if no token is allowed at the start.

        Decided from the start's table row where it can be: if the start accepts (EOS is
        allowed) or one byte that some ordinary one-byte token spells leads to a live
        configuration (that token is allowed: a one-byte token's mask bit is exactly its table
        cell), some token is allowed, and the start's mask is left to the first fill, as XGrammar's
        and llguidance's compiles leave theirs (the walk over the vocabulary was ~15 % of a
        MaskBench compile). Otherwise the start's row is computed and counted."""
        with self._lock:
            if self._accepting[START] and self._eos.size:
                return
            # a start inside a counter far from its bounds gets its row from a count-free alias
            # (:meth:`_aliased_row`), which computes no table row of its own: as before, there
            if not (self.gnfa.dyn_node and self._count_alias(START) is not None):
                self._ensure_rows([START])
                live = self._table[START].take(self._bc_np) > 0
                if (live & _one_byte_tokens(self.vocab)).any():
                    return
        if self.n_allowed(START) == 0:
            raise IncompatibleVocabularyError(
                f"no token of vocabulary {self.vocab.name!r} can start an output of this grammar")

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held by this grammar's tables and cached rows (the shared class trie excluded)."""
        n_cfg = len(self._cfg_keys)
        keys = self._n_items * 36 + n_cfg * 64  # (a running count: this is read every second by /metrics)
        arrays = self._rows.nbytes + self._table.nbytes + self._accepting.nbytes + self._slot.nbytes \
            + self._cfg_depth.nbytes + self._token_cnode.nbytes
        # memo entries: a dict slot, a key and a small value each (approximate)
        memos = (len(self._closure_memo) + len(self._union_memo)) * 120 + len(self._byte_only) * 80
        return int(arrays + keys + memos + len(self._stk_ret) * 100 + self._sw_bytes + self._wb_bytes)
