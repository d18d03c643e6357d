"""Thompson NFA → dense minimal byte DFA (:class:`structgate.native.automaton.DFA`).

Pipeline
--------
1. **Byte classes from the NFA.** Every byte-range boundary used by the NFA cuts ``0..255``;
   the resulting intervals are numbered in byte order, so each NFA range is a contiguous interval
   of class ids (rust-lang/regex ``util/alphabet.rs``, ``ByteClassSet``).
2. **Epsilon closures** over ``EPS`` states, computed lazily with an iterative Tarjan SCC walk and
   memoised per state; a state whose closure equals one child's shares that ``frozenset`` object.
   ``EOL`` assertions are folded in (they add ``MATCH`` when the end of text can be reached from
   them with zero-width steps only), ``BOL`` assertions hold only in the start state's closure.
3. **Subset construction** (Rabin–Scott) over the class alphabet: a DFA state is the frozenset of
   byte/match NFA states; per DFA state the class intervals are swept once, so the work is
   proportional to the number of NFA ranges in the set, not to ``n_classes``. The number of DFA
   states is checked as each one is created (``CompileLimitError("max_dfa_states", ...)``).
4. **Dead-state pruning** (states that cannot reach an accepting state become 0) — only needed
   when the NFA has assertions or empty classes; otherwise every non-empty subset is live.
5. **Minimisation** (:func:`minimize`), starting from ``{dead, accepting, other}`` and only ever
   splitting blocks, so the start state is merged only with language-equivalent states (no
   "equivalent successor" shortcut, field case ``xgr-start-state-merge``):

   * Moore's refinement, vectorised with numpy: each round a state's id becomes a 64-bit hash of
     its id and its successors' ids; it stops when the number of blocks stops growing;
   * when Moore would need many rounds (chain-like DFAs such as ``.{1,2000}`` need as many rounds
     as states), Valmari & Lehtinen's O(m log n) partition refinement of blocks and transition
     "cords" on the partial DFA (A. Valmari, "Fast brief practical DFA minimization", IPL 2012);
   * the final partition is **verified** to be a congruence (every state's successor blocks and
     acceptance equal its block representative's), which proves it is the exact coarsest one;
     a (astronomically unlikely) hash collision falls back to exact row-wise refinement.
6. **Canonical numbering**: dead = 0, start = 1, the rest in breadth-first order over classes;
   the final byte classes are the distinct columns of the minimal table, numbered by first byte.
"""
from __future__ import annotations

import time

import numpy as np

from ...errors import CompileLimitError
from ..automaton import DFA
from .nfa import BOL, BYTE, EOL, EPS, MATCH, NFA

__all__ = ["nfa_to_dfa", "minimize", "canonicalize", "trim"]


class _Closures:
    """Lazily computed epsilon closures (frozensets of BYTE/MATCH state ids)."""

    def __init__(self, nfa: NFA) -> None:
        self.nfa = nfa
        self.cache: list[frozenset | None] = [None] * len(nfa)
        self._eol_ok: dict[int, bool] = {}
        self._empty = frozenset()
        # Tarjan bookkeeping shared by every walk (indices grow monotonically across walks)
        self._index = [-1] * len(nfa)
        self._low = [0] * len(nfa)
        self._onstack = bytearray(len(nfa))
        self._counter = 0

    def eol_ok(self, s: int) -> bool:
        """MATCH reachable from EOL state ``s`` through zero-width steps at the end of the text."""
        r = self._eol_ok.get(s)
        if r is not None:
            return r
        nfa = self.nfa
        kind, out, outs = nfa.kind, nfa.out, nfa.outs
        seen = {s}
        stack = [out[s]]
        r = False
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            k = kind[v]
            if k == MATCH:
                r = True
                break
            if k == EPS:
                stack.extend(outs[v])
            elif k == EOL:
                stack.append(out[v])
        self._eol_ok[s] = r
        return r

    def _leaf(self, v: int):
        """Contribution of a non-EPS state (None for EPS)."""
        k = self.nfa.kind[v]
        if k == BYTE or k == MATCH:
            return (v,)
        if k == EOL:
            return (self.nfa.match,) if self.eol_ok(v) else ()
        return ()  # BOL (not at the start), FAIL

    def get(self, v: int) -> frozenset:
        c = self.cache[v]
        if c is not None:
            return c
        nfa = self.nfa
        kind, cache = nfa.kind, self.cache
        if kind[v] != EPS:
            c = cache[v] = frozenset(self._leaf(v))
            return c
        # fast path: every successor is a leaf or already known (v is then on no epsilon cycle)
        parts: dict[int, frozenset] = {}
        for w in nfa.outs[v]:
            cw = cache[w]
            if cw is None:
                if kind[w] == EPS:
                    return self._tarjan(v)
                cw = cache[w] = frozenset(self._leaf(w))
            if cw:
                parts[id(cw)] = cw
        ps = list(parts.values())
        if len(ps) == 1:
            c = ps[0]
        elif not ps:
            c = self._empty
        else:
            c = frozenset().union(*ps)
        cache[v] = c
        return c

    def _tarjan(self, root: int) -> frozenset:
        nfa = self.nfa
        kind, outs, cache = nfa.kind, nfa.outs, self.cache
        index, low, onstack = self._index, self._low, self._onstack
        counter = self._counter
        index[root] = low[root] = counter
        counter += 1
        onstack[root] = 1
        sstack = [root]
        call = [(root, 0)]
        while call:
            v, i = call[-1]
            succ = outs[v]
            if i < len(succ):
                call[-1] = (v, i + 1)
                w = succ[i]
                if kind[w] != EPS or cache[w] is not None:
                    continue
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    sstack.append(w)
                    onstack[w] = 1
                    call.append((w, 0))
                elif onstack[w]:
                    if index[w] < low[v]:
                        low[v] = index[w]
                continue
            call.pop()
            if call:
                u = call[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] != index[v]:
                continue
            comp = []
            while True:
                w = sstack.pop()
                onstack[w] = 0
                comp.append(w)
                if w == v:
                    break
            comp_set = set(comp) if len(comp) > 1 else (v,)
            own: set[int] = set()
            parts: dict[int, frozenset] = {}
            for u in comp:
                for w in outs[u]:
                    if kind[w] == EPS:
                        if w in comp_set:
                            continue
                        c = cache[w]
                        parts[id(c)] = c
                    else:
                        c = cache[w]
                        if c is None:
                            c = cache[w] = frozenset(self._leaf(w))
                        if len(c) == 1:
                            own.update(c)
                        elif c:
                            parts[id(c)] = c
            ps = list(parts.values())
            if len(ps) == 1 and own <= ps[0]:
                res = ps[0]
            elif not ps:
                res = frozenset(own) if own else self._empty
            else:
                res = frozenset(own).union(*ps)
            for u in comp:
                cache[u] = res
        self._counter = counter
        return cache[root]

    def start(self) -> tuple[frozenset, bool]:
        """Closure of the NFA start at offset 0 (BOL passable) and whether the empty text matches."""
        nfa = self.nfa
        kind, out, outs = nfa.kind, nfa.out, nfa.outs
        if not nfa.has_assertions:
            c = self.get(nfa.start)
            return c, nfa.match in c
        members: set[int] = set()
        seen: set[int] = set()
        stack = [nfa.start]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            k = kind[v]
            if k == EPS:
                stack.extend(outs[v])
            elif k == BOL:
                stack.append(out[v])
            else:
                members.update(self._leaf(v))
        # empty text: both assertions hold at offset 0
        acc = False
        seen = set()
        stack = [nfa.start]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            k = kind[v]
            if k == MATCH:
                acc = True
                break
            if k == EPS:
                stack.extend(outs[v])
            elif k == BOL or k == EOL:
                stack.append(out[v])
        return frozenset(members), acc


def _byte_classes(nfa: NFA) -> tuple[np.ndarray, list[int], list[int]]:
    """Classes from the NFA's range boundaries: (byte → class uint8 (256,), clo, chi per state)."""
    kind, lo, hi = nfa.kind, nfa.lo, nfa.hi
    bounds = bytearray(257)
    for s in range(len(kind)):
        if kind[s] == BYTE:
            bounds[lo[s]] = 1
            bounds[hi[s] + 1] = 1
    bounds[0] = 1
    cls = np.cumsum(np.frombuffer(bytes(bounds[:256]), dtype=np.uint8).astype(np.int32)) - 1
    cl = cls.tolist()
    clo = [-1] * len(kind)
    chi = [-1] * len(kind)
    for s in range(len(kind)):
        if kind[s] == BYTE:
            clo[s] = cl[lo[s]]
            chi[s] = cl[hi[s]]
    return cls.astype(np.uint8), clo, chi


def nfa_to_dfa(nfa: NFA, *, max_states: int = 50_000, pattern: str = "", minimize_dfa: bool = True,
               deadline: float | None = None, timeout_s: float = 0.0) -> DFA:
    """Determinise (and by default minimise) ``nfa`` into the :class:`~structgate.native.automaton.DFA`
    layout: state 0 dead, 1 start, every non-zero state live.

    Parameters
    ----------
    nfa : NFA
    max_states : int
        Cap on live DFA states created by the subset construction.
    pattern : str
        Stored in the DFA for messages.
    minimize_dfa : bool
        Minimise (default True); False still prunes and canonicalises.
    deadline : float | None
        ``time.monotonic()`` value after which ``CompileLimitError("compile_timeout_s")`` is raised.
    timeout_s : float
        The configured timeout, for the error message.

    Raises
    ------
    CompileLimitError
        ``"max_dfa_states"`` (given = states reached) or ``"compile_timeout_s"``.
    """
    byte_classes, clo, chi = _byte_classes(nfa)
    n_cls = int(byte_classes.max()) + 1
    closures = _Closures(nfa)
    match = nfa.match
    start_key, start_acc = closures.start()
    keys: list = [None]
    acc: list[bool] = [False]
    ids: dict = {frozenset(): 0}
    if start_acc != (match in start_key):
        start_key = start_key | {len(nfa)}  # keep the start distinct from look-alike states
    keys.append(start_key)
    acc.append(start_acc)
    ids[start_key] = 1
    rows: list[list[int]] = [[0] * n_cls]
    succ: list[frozenset | None] = [None] * len(nfa)
    out = nfa.out
    get_closure = closures.get
    union_memo: dict[frozenset, frozenset] = {}
    zero_row = [0] * n_cls
    item_of = [(clo[p], chi[p], p) if clo[p] >= 0 else None for p in range(len(nfa))] + [None]
    i = 1
    while i < len(keys):
        S = keys[i]
        i += 1
        if deadline is not None and (i & 63) == 0 and time.monotonic() > deadline:
            raise CompileLimitError("compile_timeout_s", round(timeout_s + time.monotonic() - deadline, 3),
                                    timeout_s)
        items = [item_of[p] for p in S]
        row = zero_row[:]
        if len(items) > 1:
            items = [x for x in items if x is not None]
            items.sort()
        elif not items or items[0] is None:
            rows.append(row)
            continue
        disjoint = True
        prev_hi = -1
        for a, b, _p in items:
            if a <= prev_hi:
                disjoint = False
                break
            prev_hi = b
        if disjoint:  # fast path: deterministic at this state, one target per NFA range
            groups = []
            for a, b, p in items:
                t = succ[p]
                if t is None:
                    t = succ[p] = get_closure(out[p])
                groups.append((a, b, t))
        else:
            starts: dict[int, list[int]] = {}
            ends: dict[int, list[int]] = {}
            pts = set()
            for a, b, p in items:
                starts.setdefault(a, []).append(p)
                ends.setdefault(b + 1, []).append(p)
                pts.add(a)
                pts.add(b + 1)
            pts_l = sorted(pts)
            active: set[int] = set()
            groups = []
            for j in range(len(pts_l) - 1):
                x = pts_l[j]
                for p in ends.get(x, ()):
                    active.discard(p)
                for p in starts.get(x, ()):
                    active.add(p)
                if not active:
                    continue
                if len(active) == 1:
                    (p,) = active
                    t = succ[p]
                    if t is None:
                        t = succ[p] = get_closure(out[p])
                else:
                    fa = frozenset(active)
                    t = union_memo.get(fa)
                    if t is None:
                        parts = []
                        for p in fa:
                            tp = succ[p]
                            if tp is None:
                                tp = succ[p] = get_closure(out[p])
                            parts.append(tp)
                        t = union_memo[fa] = frozenset().union(*parts)
                groups.append((x, pts_l[j + 1] - 1, t))
        for a, b, t in groups:
            tid = ids.get(t)
            if tid is None:
                tid = len(keys)
                if tid > max_states:
                    raise CompileLimitError("max_dfa_states", tid, max_states,
                                            "the regex determinises into too many states")
                ids[t] = tid
                keys.append(t)
                acc.append(match in t)
            if a == b:
                row[a] = tid
            else:
                row[a:b + 1] = [tid] * (b - a + 1)
        rows.append(row)
    table = np.array(rows, dtype=np.int32)
    accepting = np.array(acc, dtype=bool)
    if nfa.has_assertions:
        table, accepting = trim(table, accepting)
    if not accepting.any():  # empty language: dead + a start state with no way out
        table = np.zeros((2, n_cls), dtype=np.int32)
        accepting = np.zeros(2, dtype=bool)
    if minimize_dfa and table.shape[0] > 2:
        table, accepting = minimize(table, accepting)
    return canonicalize(table, accepting, byte_classes, pattern)


def trim(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Redirect transitions into states that cannot reach an accepting state to 0 and drop those
    states (state 1 is kept, possibly with an all-zero row). Returns (table, accepting)."""
    n = table.shape[0]
    live = accepting.copy()
    live[0] = False
    # reverse reachability: iterate to a fixpoint over predecessor edges
    src, _cls = np.nonzero(table)
    dst = table[src, _cls]
    order = np.argsort(dst, kind="stable")
    src_sorted = src[order].tolist()
    dst_sorted = dst[order]
    starts = np.searchsorted(dst_sorted, np.arange(n + 1)).tolist()
    stack = np.flatnonzero(live).tolist()
    lv = live.tolist()
    while stack:
        v = stack.pop()
        for k in range(starts[v], starts[v + 1]):
            u = src_sorted[k]
            if not lv[u]:
                lv[u] = True
                stack.append(u)
    live = np.array(lv, dtype=bool)
    keep = live.copy()
    keep[0] = True
    keep[1] = True
    new_id = np.cumsum(keep) - 1
    t = np.where(live[table], new_id[table], 0).astype(np.int32)[keep]
    t[0] = 0
    return np.ascontiguousarray(t), accepting[keep]


_HASH_MULT = None
#: minimum number of Moore rounds tried before switching to Valmari's O(m log n) refinement
MOORE_MAX_ROUNDS = 24


def _moore(table: np.ndarray, block: np.ndarray, max_rounds: int) -> tuple[np.ndarray, bool]:
    """Hashed Moore rounds from ``block``; returns (blocks ``0..z-1``, converged).

    A state's new id is a 64-bit hash of its old id and its successors' ids (wrapping int64
    arithmetic; the hash values themselves serve as ids between rounds). The partition is only
    refined, so it is stable when the number of distinct ids stops growing; the caller verifies
    the result exactly.
    """
    global _HASH_MULT
    k = table.shape[1]
    if _HASH_MULT is None or _HASH_MULT.shape[0] < k + 1:
        rng = np.random.default_rng(0x5EED)
        _HASH_MULT = rng.integers(1, 2**62, size=max(k + 1, 64), dtype=np.int64) | 1
    mult = _HASH_MULT[1: k + 1]
    m0 = _HASH_MULT[0]
    h = block.astype(np.int64)
    nb = int(np.unique(h).shape[0])
    done = False
    with np.errstate(over="ignore"):
        for _ in range(max_rounds):
            h = np.take(h, table).dot(mult) + h * m0
            # splitmix64 finaliser: keeps the low bits mixed round after round (a plain sum of
            # odd multiples loses one low bit per round on chains and ends up colliding)
            u = h.view(np.uint64)
            u ^= u >> np.uint64(31)
            u *= np.uint64(0xBF58476D1CE4E5B9)
            u ^= u >> np.uint64(27)
            u *= np.uint64(0x94D049BB133111EB)
            u ^= u >> np.uint64(31)
            nb2 = int(np.unique(h).shape[0])
            if nb2 == nb:
                done = True
                break
            nb = nb2
    _, inv = np.unique(h, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), done


def _valmari(table: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Coarsest congruence refining ``block`` (ids ``0..z-1``) for the *partial* DFA given by the
    transitions of ``table`` into non-zero states: Valmari & Lehtinen's O(m log n) partition
    refinement of blocks and "cords" of transitions (A. Valmari, "Fast brief practical DFA
    minimization", Information Processing Letters 112(6), 2012)."""
    n = table.shape[0]
    src, lab = np.nonzero(table)
    dst = table[src, lab].astype(np.int64)
    m = int(src.shape[0])
    T = src.tolist()
    # -- block partition (states) from the initial labels
    z0 = int(block.max()) + 1
    order = np.argsort(block, kind="stable")
    BE = order.tolist()
    BLa = np.empty(n, dtype=np.int64)
    BLa[order] = np.arange(n)
    BL = BLa.tolist()
    BS = block.astype(np.int64).tolist()
    cnt = np.bincount(block, minlength=z0)
    ends = np.cumsum(cnt)
    cap = max(n, m) + 2
    BF = [0] * cap
    BP = [0] * cap
    BF[:z0] = (ends - cnt).tolist()
    BP[:z0] = ends.tolist()
    bz = z0
    # -- cord partition (transitions), initially by label
    labs, lab_c = np.unique(lab, return_inverse=True)
    lab_c = lab_c.reshape(-1)
    corder = np.argsort(lab_c, kind="stable")
    CE = corder.tolist()
    CLa = np.empty(m, dtype=np.int64)
    CLa[corder] = np.arange(m)
    CL = CLa.tolist()
    CS = lab_c.tolist()
    cz = int(labs.shape[0])
    ccnt = np.bincount(lab_c, minlength=cz) if m else np.zeros(0, dtype=np.int64)
    cends = np.cumsum(ccnt)
    CF = [0] * cap
    CP = [0] * cap
    CF[:cz] = (cends - ccnt).tolist()
    CP[:cz] = cends.tolist()
    # incoming transitions per state
    aorder = np.argsort(dst, kind="stable")
    A = aorder.tolist()
    AF = np.searchsorted(dst[aorder], np.arange(n + 1)).tolist()
    M = [0] * cap
    W: list[int] = []

    b = 1
    c = 0
    while c < cz:
        # mark the tails of the transitions of cord c, split blocks
        for i in range(CF[c], CP[c]):
            e = T[CE[i]]
            s = BS[e]
            i2 = BL[e]
            j = BF[s] + M[s]
            f = BE[j]
            BE[i2] = f
            BL[f] = i2
            BE[j] = e
            BL[e] = j
            if M[s] == 0:
                W.append(s)
            M[s] += 1
        while W:
            s = W.pop()
            j = BF[s] + M[s]
            if j == BP[s]:
                M[s] = 0
                continue
            if M[s] <= BP[s] - j:
                BF[bz] = BF[s]
                BP[bz] = BF[s] = j
            else:
                BP[bz] = BP[s]
                BF[bz] = BP[s] = j
            for i in range(BF[bz], BP[bz]):
                BS[BE[i]] = bz
            M[s] = 0
            M[bz] = 0
            bz += 1
        c += 1
        # use every new block as a splitter of cords
        while b < bz:
            for i in range(BF[b], BP[b]):
                q = BE[i]
                for jj in range(AF[q], AF[q + 1]):
                    e = A[jj]
                    s = CS[e]
                    i2 = CL[e]
                    j = CF[s] + M[s]
                    f = CE[j]
                    CE[i2] = f
                    CL[f] = i2
                    CE[j] = e
                    CL[e] = j
                    if M[s] == 0:
                        W.append(s)
                    M[s] += 1
            while W:
                s = W.pop()
                j = CF[s] + M[s]
                if j == CP[s]:
                    M[s] = 0
                    continue
                if M[s] <= CP[s] - j:
                    CF[cz] = CF[s]
                    CP[cz] = CF[s] = j
                else:
                    CP[cz] = CP[s]
                    CF[cz] = CP[s] = j
                for i in range(CF[cz], CP[cz]):
                    CS[CE[i]] = cz
                M[s] = 0
                M[cz] = 0
                cz += 1
            b += 1
    return np.array(BS, dtype=np.int64)


def minimize(table: np.ndarray, accepting: np.ndarray, *, method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Minimise a trimmed DFA (state 0 dead, 1 start, every other state live).

    Parameters
    ----------
    table : numpy.ndarray
        int, ``(n, k)``.
    accepting : numpy.ndarray
        bool, ``(n,)``.
    method : {"auto", "moore", "valmari"}
        ``auto``: vectorised Moore rounds while they are cheaper than the alternative (at least
        :data:`MOORE_MAX_ROUNDS`, more when the DFA is dense), then Valmari's O(m log n)
        refinement from the partition reached (chain-like DFAs such as ``.{1,2000}`` need as
        many Moore rounds as states).

    Returns
    -------
    (table, accepting) of the quotient automaton, dead = 0 and start = 1, other ids arbitrary.
    """
    n, k = table.shape
    block = np.where(accepting, 1, 2).astype(np.int64)
    block[0] = 0
    _, block = np.unique(block, return_inverse=True)
    block = block.reshape(-1).astype(np.int64)
    if method == "valmari":
        block = _valmari(table, block)
    else:
        if method == "moore":
            rounds = n + 1
        else:
            # Moore costs ~n*k vectorised cell updates per round, Valmari ~m Python steps (about
            # 750 cells' worth each): run Moore while it is clearly the cheaper of the two
            m = int(np.count_nonzero(table))
            rounds = max(MOORE_MAX_ROUNDS, (375 * m) // max(1, n * k))
        block, done = _moore(table, block, rounds)
        if not done:
            _, block = np.unique(block, return_inverse=True)
            block = _valmari(table, block.reshape(-1).astype(np.int64))
    _, block = np.unique(block, return_inverse=True)
    block = block.reshape(-1)
    nb = int(block.max()) + 1
    # verify: every state's signature equals its representative's (proves a congruence)
    reps = np.zeros(nb, dtype=np.int64)
    reps[block[::-1]] = np.arange(n - 1, -1, -1)
    bt = block[table]
    if not (np.array_equal(bt, bt[reps[block]]) and np.array_equal(accepting, accepting[reps[block]])):
        # a hash collision merged inequivalent states: redo exactly with Valmari's algorithm
        block = np.where(accepting, 1, 2).astype(np.int64) * (np.arange(n) != 0)
        _, block = np.unique(block, return_inverse=True)
        block = _valmari(table, block.reshape(-1).astype(np.int64))
        _, block = np.unique(block, return_inverse=True)
        block = block.reshape(-1)
        nb = int(block.max()) + 1
        reps = np.zeros(nb, dtype=np.int64)
        reps[block[::-1]] = np.arange(n - 1, -1, -1)
        bt = block[table]
    # relabel blocks: dead state's block -> 0, start's block -> 1
    perm = np.arange(nb, dtype=np.int64)
    b0, b1 = int(block[0]), int(block[1])
    perm[[b0, 0]] = perm[[0, b0]]
    p1 = int(perm[b1])
    if p1 != 1:
        j = int(np.flatnonzero(perm == 1)[0])
        perm[b1], perm[j] = 1, p1
    inv = np.empty_like(perm)
    inv[perm] = np.arange(nb)
    new_table = perm[bt[reps[inv]]].astype(np.int32)
    return new_table, accepting[reps[inv]]


def canonicalize(table: np.ndarray, accepting: np.ndarray, byte_classes: np.ndarray,
                 pattern: str = "") -> DFA:
    """Canonical :class:`DFA`: identical byte-class columns merged (classes numbered by first
    byte), states numbered dead=0, start=1, then breadth-first over classes in order.

    ``table`` (int, ``(n, k)``) may use arbitrary ids as long as state 0 is dead and state 1 is the
    start; ``byte_classes`` (``(256,)``) maps bytes to its ``k`` columns. Unreachable states are
    dropped. Two minimal DFAs of the same language canonicalise to identical arrays.
    """
    n = table.shape[0]
    if n < 2:
        table = np.zeros((2, table.shape[1]), dtype=np.int32)
        accepting = np.zeros(2, dtype=bool)
        n = 2
    table = np.asarray(table)
    tc, new_bc = _merge_columns(table, np.asarray(byte_classes))
    tl = tc.tolist()
    order = [0, 1]
    seen = {0: 0, 1: 1}
    q = 1
    while q < len(order):
        for t in tl[order[q]]:
            if t not in seen:
                seen[t] = len(order)
                order.append(t)
        q += 1
    idx = np.array(order, dtype=np.int64)
    remap = np.zeros(n, dtype=np.int32)
    remap[idx] = np.arange(len(order), dtype=np.int32)
    final = np.ascontiguousarray(remap[tc[idx]], dtype=np.int32)
    acc = np.asarray(accepting, dtype=bool)[idx].copy()
    acc[0] = False
    final[0] = 0
    return DFA(byte_classes=new_bc, table=final, accepting=acc, pattern=pattern)


def _merge_columns(table: np.ndarray, byte_classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge identical columns of ``table`` (n, k); returns (table (n, k'), byte → new class (256,)
    uint8) with new classes numbered in order of their first byte. Columns are grouped by a
    64-bit hash and each grouping is verified exactly (exact ``np.unique`` fallback)."""
    n, k = table.shape
    rng = np.random.default_rng(n * 7919 + k)
    w = rng.integers(1, 2**63 - 1, size=n, dtype=np.int64).astype(np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        h = (table.astype(np.uint64) * w[:, None]).sum(axis=0, dtype=np.uint64).tolist()
    group_of: dict[int, int] = {}
    col_group = [0] * k
    reps: list[int] = []
    for j in range(k):
        g = group_of.get(h[j])
        if g is None:
            g = group_of[h[j]] = len(reps)
            reps.append(j)
        col_group[j] = g
    ok = all(np.array_equal(table[:, j], table[:, reps[col_group[j]]])
             for j in range(k) if reps[col_group[j]] != j)
    if not ok:  # hash collision: exact grouping
        _, first_idx, inv = np.unique(table, axis=1, return_index=True, return_inverse=True)
        col_group = inv.reshape(-1).tolist()
        reps = first_idx.tolist()
    # number groups by first byte
    new_of_group: dict[int, int] = {}
    firsts: list[int] = []
    bc = byte_classes.tolist()
    new_bc = [0] * 256
    for b in range(256):
        g = col_group[bc[b]]
        c = new_of_group.get(g)
        if c is None:
            c = new_of_group[g] = len(firsts)
            firsts.append(reps[g])
        new_bc[b] = c
    return table[:, firsts], np.array(new_bc, dtype=np.uint8)
