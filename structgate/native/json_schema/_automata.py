"""Small code-point automata for exact intersections the JSON Schema compiler cannot write as one
short regex: ``pattern`` ∩ ``minLength``/``maxLength`` (a product with a code-point counter),
integer ranges ∩ ``multipleOf`` (a remainder automaton over decimal digits), object keys ∩
``propertyNames``.

An automaton here is a DFA over *atoms*: disjoint code-point sets (the common refinement of every
set in the expression), so a class like ``\\S`` stays one symbol instead of thousands of code
points. It is built from the regex AST of :mod:`structgate.native.regex.parser` (``Chars``,
``Concat``, ``Alt``, ``Repeat``) by a Thompson NFA and the subset construction, intersected by the
product construction, trimmed and minimised (Moore's partition refinement), and written back as

* one regex text (Brzozowski–McCluskey state elimination) when that text stays within a size cap;
* else, in grammar mode, right-linear rules (one per state, ``class (?&next)`` alternatives; every
  call is in tail position, so the pushdown engine takes no stack frame for it);
* else :class:`~structgate.errors.CompileLimitError`.

A product with a length counter (``pattern``/``format`` × ``minLength``/``maxLength``) has
``states × (maxLength + 1)`` states; in grammar mode it is never built: :class:`LengthProduct` is a
:class:`~structgate.native.ir.LazyAutomaton` whose state ``(q, count)`` gets its rule when the
engine first reaches it, trimmed exactly by the lengths each pattern state can still complete with
(:meth:`LengthProduct.live`). Likewise a range ∩ remainder automaton whose modulus is large is a
:class:`ResidueProduct` (state ``(range state, value mod lcm)``, an exact liveness table).

Every intermediate size is bounded: ``max_states`` (DFA / product states) raises
``CompileLimitError(limit_name, reached, limit, hint naming the keyword and JSON pointer)``.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable

from ...errors import CompileLimitError
from ..ir import CalledRules, LazyAutomaton, LazyRule
from ..regex.parser import EMPTY, Alt, Anchor, Chars, Concat, Repeat
from ._charset import ANY, CharSet, normalize

__all__ = ["CPDFA", "LengthProduct", "ResidueProduct", "from_ast", "product", "complement", "length_dfa", "remainder_dfa", "literals_ast", "trim",
           "minimize", "length_shape", "limit_error", "to_regex", "emit", "matches"]


@dataclass
class CPDFA:
    """A DFA over code-point atoms.

    Attributes
    ----------
    atoms : list[CharSet]
        Disjoint, non-empty code-point sets; symbol ``a`` is "one code point of ``atoms[a]``".
    delta : list[list[int]]
        ``delta[s][a]`` = next state, ``-1`` = no transition. State 0 is the start.
    accept : list[bool]
        Accepting states.
    """

    atoms: list
    delta: list
    accept: list

    def __len__(self) -> int:
        return len(self.delta)


def limit_error(name: str, given: int, limit: int, what: str, where: str) -> CompileLimitError:
    """The typed error for an automaton over its limit ``name``, naming ``what`` and ``where``."""
    return CompileLimitError(name, given, limit, f"{what} at {where or 'the root'} needs a larger automaton; "
                             f"raise CompileOptions.extra[{name!r}] or simplify the schema", where=where or "#")


def _refine(sets: list[CharSet]) -> tuple[list[CharSet], list[list[int]]]:
    """The common refinement of ``sets``: (atoms, for each set the atoms it is the union of).
    Code points in no set belong to no atom. Intervals with the same membership are one atom."""
    points = set()
    for s in sets:
        for a, b in s:
            points.add(a)
            points.add(b + 1)
    pts = sorted(points)
    starts = [[a for a, _ in s] for s in sets]
    sig_atom: dict[frozenset, int] = {}
    atom_ranges: list[list[tuple[int, int]]] = []
    for lo, nxt in zip(pts, pts[1:]):
        hi = nxt - 1
        sig = []
        for i, s in enumerate(sets):
            k = bisect_right(starts[i], lo) - 1
            if k >= 0 and s[k][0] <= lo and hi <= s[k][1]:
                sig.append(i)
        if not sig:
            continue
        key = frozenset(sig)
        if key not in sig_atom:
            sig_atom[key] = len(atom_ranges)
            atom_ranges.append([])
        atom_ranges[sig_atom[key]].append((lo, hi))
    members: list[list[int]] = [[] for _ in sets]
    for key, a in sig_atom.items():
        for i in key:
            members[i].append(a)
    return [normalize(r) for r in atom_ranges], members


def from_ast(node, *, max_states: int, what: str, where: str) -> CPDFA:
    """Minimal-size-bounded DFA of a regex AST (``Chars``/``Concat``/``Alt``/``Repeat``; no anchors).

    Raises
    ------
    CompileLimitError
        ``max_product_states``: more than ``max_states`` NFA or DFA states.
    """
    eps: list[list[int]] = []
    edges: list[list[tuple[int, int]]] = []  # (set id, target)
    set_ids: dict[CharSet, int] = {}
    sets: list[CharSet] = []
    nfa_cap = max_states * 20

    def new() -> int:
        if len(eps) > nfa_cap:
            raise limit_error("max_product_states", len(eps), nfa_cap, what, where)
        eps.append([])
        edges.append([])
        return len(eps) - 1

    def build(n, s: int) -> int:
        """Thompson fragment for ``n`` starting at state ``s``; returns its end state."""
        if isinstance(n, Chars):
            e = new()
            if n.ranges:
                k = set_ids.get(n.ranges)
                if k is None:
                    k = set_ids[n.ranges] = len(sets)
                    sets.append(n.ranges)
                edges[s].append((k, e))
            return e
        if isinstance(n, Concat):
            for it in n.items:
                s = build(it, s)
            return s
        if isinstance(n, Alt):
            e = new()
            for it in n.items:
                b = new()
                eps[s].append(b)
                eps[build(it, b)].append(e)
            return e
        if isinstance(n, Repeat):
            for _ in range(n.min):
                s = build(n.item, s)
            if n.max is None:
                b = new()
                eps[s].append(b)
                eps[build(n.item, b)].append(b)
                e = new()
                eps[b].append(e)
                return e
            e = new()
            for _ in range(n.max - n.min):
                eps[s].append(e)
                s = build(n.item, s)
            eps[s].append(e)
            return e
        if isinstance(n, Anchor):
            raise ValueError("anchors are not supported in code-point automata")
        raise TypeError(f"not a regex AST node: {n!r}")

    try:
        start = new()
        final = build(node, start)
    finally:  # (they refer to each other: no cycle left for the collector, returned or raised)
        new = build = None
    atoms, members = _refine(sets)
    set_atoms = members

    def closure(xs) -> frozenset:
        out, stack = set(xs), list(xs)
        while stack:
            for t in eps[stack.pop()]:
                if t not in out:
                    out.add(t)
                    stack.append(t)
        return frozenset(out)

    s0 = closure([start])
    index = {s0: 0}
    todo = [s0]
    delta: list[list[int]] = []
    accept: list[bool] = []
    while todo:
        cur = todo.pop(0)
        moves: list[set] = [set() for _ in atoms]
        for q in cur:
            for k, t in edges[q]:
                for a in set_atoms[k]:
                    moves[a].add(t)
        row = []
        for a in range(len(atoms)):
            if not moves[a]:
                row.append(-1)
                continue
            c = closure(moves[a])
            j = index.get(c)
            if j is None:
                j = index[c] = len(index)
                if j >= max_states:
                    raise limit_error("max_product_states", j + 1, max_states, what, where)
                todo.append(c)
            row.append(j)
        delta.append(row)
        accept.append(final in cur)
    return CPDFA(atoms, delta, accept)


def product(a: CPDFA, b: CPDFA, *, max_states: int, what: str, where: str) -> CPDFA:
    """The intersection automaton (pairs of states reachable from the two starts).

    Raises
    ------
    CompileLimitError
        ``max_product_states``: more than ``max_states`` pairs.
    """
    atoms, members = _refine(list(a.atoms) + list(b.atoms))
    na = len(a.atoms)
    ia = [-1] * len(atoms)
    ib = [-1] * len(atoms)
    for k, ms in enumerate(members):
        for m in ms:
            if k < na:
                ia[m] = k
            else:
                ib[m] = k - na
    pairs = [(x, y) for x, y in zip(ia, ib)]
    index = {(0, 0): 0}
    todo = [(0, 0)]
    delta: list[list[int]] = []
    accept: list[bool] = []
    i = 0
    while i < len(todo):
        p, q = todo[i]
        i += 1
        row = []
        for x, y in pairs:
            if x < 0 or y < 0:
                row.append(-1)
                continue
            p2, q2 = a.delta[p][x], b.delta[q][y]
            if p2 < 0 or q2 < 0:
                row.append(-1)
                continue
            j = index.get((p2, q2))
            if j is None:
                j = index[(p2, q2)] = len(todo)
                if j >= max_states:
                    raise limit_error("max_product_states", j + 1, max_states, what, where)
                todo.append((p2, q2))
            row.append(j)
        delta.append(row)
        accept.append(a.accept[p] and b.accept[q])
    return CPDFA(atoms, delta, accept)


def complement(d: CPDFA) -> CPDFA:
    """Every string of code points that ``d`` rejects (the alphabet completed to all of Unicode
    with a sink state, accepting states flipped)."""
    atoms, members = _refine(list(d.atoms) + [ANY])
    old = [-1] * len(atoms)
    for k, ms in enumerate(members[:len(d.atoms)]):
        for m in ms:
            old[m] = k
    sink = len(d.delta)
    delta = [[(d.delta[s][old[a]] if old[a] >= 0 and d.delta[s][old[a]] >= 0 else sink) for a in range(len(atoms))]
             for s in range(len(d.delta))]
    delta.append([sink] * len(atoms))
    return CPDFA(atoms, delta, [not a for a in d.accept] + [True])


def literals_ast(values):
    """Regex AST of exactly the given strings (code point by code point)."""
    alts = tuple(Concat(tuple(Chars(((ord(c), ord(c)),)) for c in v)) for v in values)
    return alts[0] if len(alts) == 1 else Alt(alts) if alts else Chars(())


def length_dfa(lmin: int, lmax: int | None, alphabet: CharSet = ANY, *, max_states: int | None = None,
               what: str = "length bounds", where: str = "") -> CPDFA:
    """Strings of ``lmin``..``lmax`` code points of ``alphabet`` (``lmax=None``: unbounded; the
    counter saturates at ``lmin``): ``max(lmin, lmax) + 1`` states.

    Raises ``CompileLimitError("max_product_states")`` when that exceeds ``max_states`` (before
    anything is allocated: ``maxLength: 10**30`` must not exhaust memory)."""
    top = lmax if lmax is not None else lmin
    if max_states is not None and top + 1 > max_states:
        raise limit_error("max_product_states", top + 1, max_states, what, where)
    delta = [[i + 1] if i < top else ([top] if lmax is None else [-1]) for i in range(top + 1)]
    accept = [lmin <= i and (lmax is None or i <= lmax) for i in range(top + 1)]
    return CPDFA([normalize(alphabet)], delta, accept)


def remainder_dfa(m: int) -> CPDFA:
    """JSON integer literals ``-?(0|[1-9][0-9]*)`` (no ``-0``) whose value is a multiple of ``m``.

    States: 0 start, 1 after ``-``, 2 the literal ``0`` (accepting, nothing may follow),
    ``3 + r`` = a non-zero magnitude ``≡ r (mod m)`` (accepting iff ``r == 0``): the magnitude's
    remainder after one more digit ``d`` is ``(10 r + d) mod m``; ``|x| ≡ 0`` iff ``x ≡ 0``.
    """
    atoms = [((0x2D, 0x2D),)] + [((0x30 + d, 0x30 + d),) for d in range(10)]
    n = 3 + m
    delta = [[-1] * 11 for _ in range(n)]
    delta[0][0] = 1
    delta[0][1] = 2
    for s in (0, 1):
        for d in range(1, 10):
            delta[s][1 + d] = 3 + d % m
    for r in range(m):
        for d in range(10):
            delta[3 + r][1 + d] = 3 + (10 * r + d) % m
    accept = [False, False, True] + [r == 0 for r in range(m)]
    return CPDFA(atoms, delta, accept)


def trim(d: CPDFA) -> CPDFA | None:
    """Keep the states reachable from the start that can reach an accepting state (renumbered,
    start 0); None when the language is empty."""
    n = len(d.delta)
    rev: list[list[int]] = [[] for _ in range(n)]
    for s, row in enumerate(d.delta):
        for t in row:
            if t >= 0:
                rev[t].append(s)
    live = {s for s in range(n) if d.accept[s]}
    stack = list(live)
    while stack:
        for p in rev[stack.pop()]:
            if p not in live:
                live.add(p)
                stack.append(p)
    if 0 not in live:
        return None
    order, seen = [0], {0}
    i = 0
    while i < len(order):
        for t in d.delta[order[i]]:
            if t >= 0 and t in live and t not in seen:
                seen.add(t)
                order.append(t)
        i += 1
    new = {s: k for k, s in enumerate(order)}
    delta = [[new.get(t, -1) if t >= 0 else -1 for t in d.delta[s]] for s in order]
    return CPDFA(list(d.atoms), delta, [d.accept[s] for s in order])


def minimize(d: CPDFA) -> CPDFA:
    """The minimal automaton of a trimmed ``d`` (-1 the only dead state), by the engine's
    minimiser (:func:`structgate.native.regex.dfa.minimize`: vectorised Moore rounds, then
    Valmari's O(m log n) refinement; verified congruence)."""
    import numpy as np

    from ..regex.dfa import minimize as _minimize

    n, k = len(d.delta), len(d.atoms)
    if n <= 1 or d.__dict__.get("_is_minimal"):
        return d
    hit = d.__dict__.get("_minimal")
    if hit is not None:  # (an automaton kept for the process, minimised again by each user)
        return hit
    table = np.zeros((n + 1, max(k, 1)), dtype=np.int64)
    if k:
        table[1:, :k] = np.asarray(d.delta, dtype=np.int64) + 1
    accepting = np.zeros(n + 1, dtype=bool)
    accepting[1:] = d.accept
    new, acc = _minimize(table, accepting)
    delta = (new[1:, :k].astype(np.int64) - 1).tolist()
    out = CPDFA(list(d.atoms), delta, [bool(x) for x in acc[1:]])
    # remembered on the objects (automata are never changed once built): ``d`` points to its
    # minimal form, which knows it is minimal (no reference back: no cycle for the collector)
    out.__dict__["_is_minimal"] = True
    d.__dict__["_minimal"] = out
    return out


def length_shape(d: CPDFA) -> tuple[CPDFA, int, int | None] | None:
    """``(alphabet, lmin, lmax)`` when a trimmed, minimal ``d`` accepts exactly the strings of
    ``lmin``..``lmax`` (``None``: unbounded) code points of one atom set (``^.{60}$``,
    ``^[0-9]{3,5}$``), ``alphabet`` the one-state automaton of that set's strings; None for any
    other language (and for a one-state automaton, which is its own alphabet). The states of such a
    ``d`` are one chain from the start, each moving on the same atoms to the next, the last without
    moves (bounded) or looping on itself (unbounded), accepting from ``lmin`` on. A pattern of this
    shape intersected with others is a length bound (:class:`LengthProduct`, generated lazily)
    instead of a factor ``lmax + 1`` on the product's states."""
    n = len(d.delta)
    if n <= 1:
        return None
    moves = None
    order: list[int] = []
    on: set[int] = set()
    s, loops = 0, False
    while True:
        order.append(s)
        on.add(s)
        row = d.delta[s]
        ms = [a for a, t in enumerate(row) if t >= 0]
        if not ms:
            break
        targets = {row[a] for a in ms}
        if len(targets) != 1 or (moves is not None and ms != moves):
            return None
        moves = ms
        (t,) = targets
        if t == s:
            loops = True
            break
        if t in on:
            return None
        s = t
    if len(order) != n or moves is None:
        return None
    acc = [d.accept[q] for q in order]
    if True not in acc:
        return None
    lmin = acc.index(True)
    if any(not x for x in acc[lmin:]):
        return None
    alphabet = CPDFA([d.atoms[a] for a in moves], [[0] * len(moves)], [True])
    return alphabet, lmin, (None if loops else n - 1)


def matches(d: CPDFA, text: str) -> bool:
    """Whether the automaton accepts the code points of ``text`` (for tests)."""
    starts = [[a for a, _ in s] for s in d.atoms]
    s = 0
    for ch in text:
        cp = ord(ch)
        sym = -1
        for k, st in enumerate(starts):
            j = bisect_right(st, cp) - 1
            if j >= 0 and d.atoms[k][j][0] <= cp <= d.atoms[k][j][1]:
                sym = k
                break
        if sym < 0:
            return False
        s = d.delta[s][sym]
        if s < 0:
            return False
    return d.accept[s]


def _grouped(d: CPDFA, s: int) -> list[tuple[int, CharSet]]:
    """(target, union of the atoms leading there) for state ``s``, targets in first-atom order."""
    out: dict[int, list] = {}
    for a, t in enumerate(d.delta[s]):
        if t >= 0:
            out.setdefault(t, []).append(a)
    # the same atoms lead together from many states (a product's): each union normalised once
    memo = d.__dict__.setdefault("_unions", {})
    res = []
    for t, atoms in out.items():
        k = tuple(atoms)
        cs = memo.get(k)
        if cs is None:
            cs = memo[k] = normalize([r for a in atoms for r in d.atoms[a]])
        res.append((t, cs))
    return res


def _alt_text(alts: list[str]) -> str:
    """One concatenation-safe text for the alternatives (``""`` = the empty string)."""
    uniq = list(dict.fromkeys(alts))
    ne = [a for a in uniq if a]
    if not ne:
        return ""
    body = ne[0] if len(ne) == 1 else "(?:" + "|".join(ne) + ")"
    if len(ne) < len(uniq):
        return (body if len(ne) > 1 else f"(?:{body})") + "?"
    return body


def to_regex(d: CPDFA, enc: Callable[[CharSet], str | None], cap: int) -> str | None:
    """One regex text for the automaton's language by state elimination, or None when some
    intermediate text would exceed ``cap`` characters. ``enc(set)`` writes one symbol (a text
    that can be concatenated; it is grouped before a quantifier); None = no spelling (dropped)."""
    n = len(d.delta)
    init, fin = n, n + 1
    out_e: dict[int, dict[int, list[str]]] = {i: {} for i in range(n + 2)}
    in_e: dict[int, set[int]] = {i: set() for i in range(n + 2)}

    def add(p, q, text):
        out_e[p].setdefault(q, []).append(text)
        in_e[q].add(p)

    add(init, 0, "")
    for s in range(n):
        if d.accept[s]:
            add(s, fin, "")
        for t, cs in _grouped(d, s):
            e = enc(cs)
            if e is not None:
                add(s, t, e)
    import heapq

    def score(x):
        return len(in_e[x] - {x}) * len(out_e[x].keys() - {x})

    heap = [(score(x), x) for x in range(n)]
    heapq.heapify(heap)
    done: set[int] = set()
    budget = 4 * cap  # total characters written, so dense automata stop early too
    while heap:
        sc, q = heapq.heappop(heap)
        if q in done:
            continue
        now = score(q)
        if now > sc:
            heapq.heappush(heap, (now, q))
            continue
        done.add(q)
        loop = out_e[q].pop(q, None)
        in_e[q].discard(q)
        star = ""
        if loop:
            lt = _alt_text(loop)
            star = f"(?:{lt})*" if lt else ""
        succ = out_e.pop(q)
        for r in succ:
            in_e[r].discard(q)
        for p in in_e.pop(q):
            pre = _alt_text(out_e[p].pop(q))
            for r, alts in succ.items():
                text = pre + star + _alt_text(alts)
                budget -= len(text)
                if len(text) > cap or budget < 0:
                    return None
                add(p, r, text)
    final = out_e[init].get(fin)
    return None if final is None else _alt_text(final)


def emit(d: CPDFA | None, enc: Callable[[CharSet], str | None], *, inline_cap: int,
         define: Callable[[str, str], None] | None, name_base: str, what: str, where: str,
         max_rules: int = 256) -> str | None:
    """The automaton as a regex text: inline (state elimination) when it fits ``inline_cap``
    characters; else, when ``define`` is given (grammar mode), right-linear rules
    ``name_base.<state>`` (``define(name, text)`` registers each) and a call of the start's rule.
    None = the empty language.

    Raises
    ------
    CompileLimitError
        ``max_regex_size``: no ``define`` and the eliminated text exceeds ``inline_cap``;
        ``max_automaton_rules``: rules needed for more than ``max_rules`` states.
    """
    if d is None:
        return None
    d = minimize(d)
    # the eliminated text, remembered on the (immutable) automaton per symbol writer and cap: an
    # automaton kept for the process (:func:`._type_number._shared_dfa`) is written once, not
    # once per schema that uses it
    texts = d.__dict__.setdefault("_texts", {})
    key = (enc, inline_cap)
    if key in texts:
        text = texts[key]
    else:
        text = to_regex(d, enc, inline_cap)
        if len(texts) >= 8:  # (a writer made per call never hits: its entries do not pile up)
            texts.clear()
        texts[key] = text
    if text is not None:
        return text
    if define is None:
        raise CompileLimitError("max_regex_size", f">{inline_cap}", inline_cap,
                                f"{what} at {where or 'the root'}: the automaton's regex is too large in the "
                                "flat-regex API (schema_to_grammar writes it as rules)")
    if len(d.delta) > max_rules:
        raise CompileLimitError("max_automaton_rules", len(d.delta), max_rules,
                                f"{what} at {where or 'the root'}: the minimal automaton has {len(d.delta)} states, "
                                "each a rule (the engine's cost grows with the rule count); raise "
                                "CompileOptions.extra['max_automaton_rules'] or simplify the schema")
    names = [f"{name_base}.{s}" for s in range(len(d.delta))]
    for s in range(len(d.delta)):
        alts = []
        for t, cs in _grouped(d, s):
            e = enc(cs)
            if e is not None:
                alts.append(f"{e}(?&{names[t]})")
        if d.accept[s]:
            alts.append("")
        body = _alt_text(alts)
        define(names[s], body)
    return f"(?&{names[0]})"


class LengthProduct(LazyAutomaton):
    """``L(d) ∩ {strings of lmin..lmax code points}``, generated lazily, one rule per product state
    ``(q, count)`` (``count`` saturates at ``lmin`` when ``lmax`` is None).

    A state is kept only when it can still complete (:meth:`live`): ``q`` reaches an accepting
    state by a path whose length ``ℓ`` has ``lmin <= count + ℓ <= lmax``. The lengths are read off
    ``R_ℓ`` = the pattern states that reach acceptance in exactly ``ℓ`` steps, computed backwards
    (``R_0`` = accepting, ``R_{ℓ+1}`` = predecessors of ``R_ℓ``) until the sequence repeats; it is
    eventually periodic (at most ``2**n`` distinct sets; in practice a few times the state count),
    so one prefix and one period answer every query.

    Parameters
    ----------
    d : CPDFA
        Trimmed and minimal (:func:`trim`, :func:`minimize`).
    lmin, lmax : int, int | None
        Code-point bounds (``lmax`` None: unbounded).
    enc : callable
        ``enc(charset)`` → IR expression of one symbol (its JSON spellings), or None (no spelling).
    name : str
        Prefix of the generated rules' names (messages).
    max_period : int
        Cap on the length-set computation (``CompileLimitError("max_product_states")`` past it).
    """

    def __init__(self, d: CPDFA, lmin: int, lmax: int | None, enc, name: str, *, max_period: int = 1 << 16,
                 what: str = "", where: str = "") -> None:
        import numpy as np

        self.d, self.lmin, self.lmax, self.name = d, int(lmin), (None if lmax is None else int(lmax)), name
        self.start = (0, 0)
        n = len(d.delta)
        self._groups: list = [None] * n  # per pattern state: [(target, expr)] (spelled symbols)
        self._enc = enc
        self._spelled: dict = {}  # charset -> its spelled symbol (None: no spelling)
        self._symbols = CalledRules(name + ".sym")
        self._live: dict = {}
        self._rep_k: dict[int, list] = {}  # depth -> per pattern state its class representative
        if self.lmin == 0 and self.lmax is None:
            # no bound: the count stays 0 and every state of the trimmed automaton completes, so
            # no length sets are needed (:meth:`live` is True; :meth:`canonical` has no alias). The
            # automaton itself as lazily generated rules: one over max_automaton_rules states
            # (RefsMixin._lazy_dfa)
            self._e, self._per, self._lens = 0, 1, None
            self._inf = [True] * n
            self._reach_all = 0
            return
        pred = np.zeros((n, n), dtype=bool)  # pred[q, p]: p -> q
        for p, row in enumerate(d.delta):
            for t in row:
                if t >= 0:
                    pred[t, p] = True
        cur = np.asarray(d.accept, dtype=bool)
        seen: dict[bytes, int] = {}
        sets: list = []
        while True:
            k = cur.tobytes()
            if k in seen:
                break
            if len(sets) >= max_period:
                raise limit_error("max_product_states", len(sets), max_period, what or "length product", where)
            seen[k] = len(sets)
            sets.append(cur)
            cur = pred[cur].any(axis=0) if cur.any() else cur
        self._e = seen[k]  # R_ℓ = R_{e + (ℓ - e) % per} for ℓ >= e
        self._per = len(sets) - self._e
        self._lens = np.stack(sets)  # (e + per, n) bool
        #: pattern states that complete with arbitrarily long strings (in some R of the period)
        self._inf = self._lens[self._e:].any(axis=0).tolist()
        #: the longest of the states' shortest completions (every state of a trimmed automaton has one)
        self._reach_all = int(self._lens.argmax(axis=0).max()) if n else 0

    def _reaches(self, q: int, lo: int, hi: int | None) -> bool:
        """Whether some ``ℓ`` in ``lo..hi`` (``hi`` None: unbounded) has ``q ∈ R_ℓ``."""
        e, per, lens = self._e, self._per, self._lens
        end = max(lo, e) + per - 1  # one full period past the prefix covers every later ℓ
        if hi is not None:
            end = min(end, hi)
        for ell in range(lo, end + 1):
            if lens[ell if ell < e + per else e + (ell - e) % per, q]:
                return True
        return False

    #: the depth of :meth:`canonical`'s state classes when the caller gives none
    ALIAS_DEPTH = 128
    #: the depth classes are computed only for patterns of at most this many states
    ALIAS_MAX_STATES = 1024

    def _depth_rep(self, depth: int) -> list:
        """Per pattern state the smallest state equivalent to it up to ``depth`` symbols
        (Moore's partition refinement stopped after that many rounds: the same acceptance after
        every prefix of at most that length, the same symbols defined): a pattern that counts (a
        word count ``(\\S+\\s+){0,99}`` unrolled into its DFA) has states that differ only past
        that depth. Computed on first use (mask time, not compile time), per depth."""
        hit = self._rep_k.get(depth)
        if hit is None:
            import numpy as np

            n = len(self.d.delta)
            if n == 0 or n > self.ALIAS_MAX_STATES:
                hit = self._rep_k[depth] = list(range(n))
                return hit
            delta = np.asarray(self.d.delta, dtype=np.int64).reshape(n, -1)
            dead = delta < 0
            cls = np.asarray(self.d.accept, dtype=np.int64)
            k = len(np.unique(cls))
            for _ in range(depth):
                tgt = np.where(dead, -1, cls[np.where(dead, 0, delta)])
                _u, new = np.unique(np.concatenate([cls[:, None], tgt], axis=1), axis=0, return_inverse=True)
                new = new.reshape(-1)
                k2 = int(new.max()) + 1
                cls = new
                if k2 == k or k2 == n:  # stable (the full equivalence), or every state apart
                    break
                k = k2
            first: dict[int, int] = {}
            hit = self._rep_k[depth] = [first.setdefault(int(c), q) for q, c in enumerate(cls.tolist())]
        return hit

    def _same_layout(self, q: int, q2: int) -> bool:
        """Whether the rules of ``(q, "mid")`` and ``(q2, "mid")`` spell the same symbols in the
        same order (so a position in one is the same position in the other)."""
        a, b = self._moves(q), self._moves(q2)
        return len(a) == len(b) and all(ea == eb for (_t, ea), (_t2, eb) in zip(a, b))

    def canonical(self, state, depth: int | None = None):
        """``(state2, slack, superset)`` when ``state = (q, count)`` is far from the bounds, else
        None: for every token of at most ``slack`` bytes (at most ``slack`` code points, the symbol
        being read included), the count-free ``state2`` allows the same continuations; with
        ``superset`` it allows at least those of ``state`` for longer tokens too ("mid"; "low"
        cannot end, so it is used only where no token is longer than the slack).

        * ``(q, "mid")``: ``count >= lmin`` and ``slack = lmax - count - 1 - D >= 1``, ``D`` the
          longest shortest completion of a pattern state (every state within reach then still
          has room for its shortest completion, and may end);
        * ``(q, "low")``: ``slack = lmin - count - 1 - e >= 1`` and ``lmax - lmin >= per - 1`` (no
          end within reach, and a state completes iff it completes with arbitrarily long strings).

        In the ``"mid"`` case ``q`` is further replaced by its representative up to ``depth``
        symbols (:meth:`_depth_rep`; the caller's longest token, default :attr:`ALIAS_DEPTH`) when
        the two rules have the same layout and the count leaves room for ``depth`` more: the slack
        is then ``depth`` and the alias no superset (a longer token may tell them apart), so it is
        used only where no token is longer.
        """
        q, c = state
        if c == "mid" or c == "low":
            return None
        e, per = self._e, self._per
        if c >= self.lmin:
            if self.lmax is None:
                return None  # the saturated count: already one state
            sl = self.lmax - c - 1 - self._reach_all
            if sl < 1:
                return None
            k = self.ALIAS_DEPTH if depth is None else int(depth)
            if 0 < k <= sl:  # room for a whole token: the state's depth class may stand for it
                q2 = self._depth_rep(k)[q]
                if q2 != q and self._same_layout(q, q2):
                    return (q2, "mid"), k, False
            return (q, "mid"), sl, True
        sl = self.lmin - c - 1 - e
        if sl >= 1 and (self.lmax is None or self.lmax - self.lmin >= per - 1):
            return (q, "low"), sl, False
        return None

    def live(self, state) -> bool:
        """Whether ``state = (q, count)`` matches at least one string (``(q, "mid")``: the
        pattern from ``q``; ``(q, "low")``: ``q`` continues forever)."""
        if self._lens is None:  # unbounded from 0: every state of the trimmed automaton completes
            return True
        hit = self._live.get(state)
        if hit is None:
            q, c = state
            if c == "mid":
                return True
            if c == "low":
                return bool(self._inf[q])
            lo = max(0, self.lmin - c)
            hi = None if self.lmax is None else self.lmax - c
            hit = self._live[state] = (hi is None or hi >= lo) and self._reaches(q, lo, hi)
        return hit

    def nullable(self, state) -> bool:
        q, c = state
        if c == "mid":
            return bool(self.d.accept[q])
        if c == "low":
            return False
        return bool(self.d.accept[q]) and c >= self.lmin and (self.lmax is None or c <= self.lmax)

    def _moves(self, q: int) -> list:
        g = self._groups[q]
        if g is None:
            g = []
            for t, cs in _grouped(self.d, q):
                e = self._spelled.get(cs, False)
                if e is False:
                    e = self._enc(cs)
                    if e is not None and not (isinstance(e, Chars) and e.ranges and e.ranges[-1][1] <= 0x7F):
                        # a multi-byte or escaped spelling: one called rule per symbol, so its byte
                        # states are built once, not once per (state, count) that consumes it
                        e = self._symbols.call(e)
                    self._spelled[cs] = e
                if e is not None:
                    g.append((t, e))
            self._groups[q] = g
        return g

    def body(self, state):
        q, c = state
        if c == "mid" or c == "low":
            alts = [Concat((e, LazyRule(self, (t, c)))) for t, e in self._moves(q) if self.live((t, c))]
        else:
            c2 = c + 1 if self.lmax is not None or c < self.lmin else c
            alts = [Concat((e, LazyRule(self, (t, c2)))) for t, e in self._moves(q)
                    if (self.lmax is None or c2 <= self.lmax) and self.live((t, c2))]
        if self.nullable(state):
            alts.append(EMPTY)
        if not alts:
            return Chars(())
        return alts[0] if len(alts) == 1 else Alt(tuple(alts))

    def symbols(self) -> list:
        return [e for q in range(len(self.d.delta)) for _, e in self._moves(q)]


#: the characters of a JSON integer literal a :class:`ResidueProduct` reads: ``-`` then the digits
_INTEGER_CHARS = (0x2D,) + tuple(range(0x30, 0x3A))


class ResidueProduct(LazyAutomaton):
    """Integer literals of ``d`` whose value ``v`` is a multiple of ``pos`` and of none of
    ``negs``, generated lazily: one rule per reached product state ``(q, r)``, ``q`` a state
    of ``d`` and ``r`` the magnitude read so far mod ``L = lcm(pos + negs)`` (one more digit ``k``:
    ``(10 r + k) mod L``; ``|v| ≡ 0 (mod m)`` iff ``v ≡ 0``, so the sign is not tracked).

    The eager form of this product (:func:`remainder_dfa` per modulus, :func:`product`,
    :func:`minimize`) has up to ``|d| × L`` states and is built in Python: seconds past ``L`` in the
    thousands (``allOf`` members whose ``multipleOf``s merge to their lcm, ``not multipleOf``s
    beside them). Here compile time is one liveness table and each output pays only the states it
    visits.

    Liveness is exact: ``live[q, r]`` (a ``(|d|, L)`` bool table) holds when some completion from
    ``q`` is accepted by ``d`` with a residue ``r'`` meeting the moduli. It is the least fixpoint of
    ``live[q] = accept[q] ∧ ok ∨ ⋁_{q -c-> q'} live[q'][step_c]`` (``step_c`` the residue map of
    character ``c`` as an index array), iterated in numpy until no row changes: about
    ``log10(L)`` rounds past ``d``'s depth (``k`` more digits reach every residue once
    ``10**k >= L``).

    Token masks: every position inside a literal is a new state ``(q, r)``, so the engine takes a
    state's token walk from :meth:`token_walk` (per range state, once) and :meth:`token_rows` (per
    state: the residues of the tokens' digits, looked up in the liveness table) instead of walking
    the vocabulary's trie through a generated state per digit prefix
    (:meth:`structgate.native.pushdown.PushdownIndex._automaton_walk`).

    Parameters
    ----------
    d : CPDFA
        Trimmed, over ``-`` and ``0``-``9`` only, its strings JSON integer literals (no leading
        zero, no ``-0``): the digit-range automaton of :func:`._numeric.integer_range` or of
        ``JSON_INTEGER``.
    pos : int | None
        The modulus every accepted value is a multiple of (None or 1: none).
    negs : list[int]
        Moduli no accepted value is a multiple of.
    name : str
        Prefix of the generated rules' names (messages).
    max_cells : int
        Bound on ``|d| × L`` (the liveness table's cells, bytes):
        ``CompileLimitError("max_product_states")`` past it.
    tick : callable, optional
        Called once per fixpoint round (the compiler's deadline check).
    """

    def __init__(self, d: CPDFA, pos: int | None, negs: list[int], name: str, *, max_cells: int,
                 what: str = "multipleOf", where: str = "", tick: Callable[[], None] | None = None) -> None:
        import math

        import numpy as np

        self.d, self.name = d, name
        self.start = (0, 0)
        mods = ([pos] if pos else []) + list(negs)
        L = self.modulus = math.lcm(*mods) if mods else 1
        n = len(d.delta)
        if n * L > max_cells:
            raise CompileLimitError("max_product_states", n * L, max_cells,
                                    f"{what} at {where or 'the root'}: {L} residues times {n} range states "
                                    f"are {n * L} liveness cells; raise CompileOptions.extra['max_product_states'] "
                                    "or narrow the range", where=where or "#")
        col = []  # per character of _INTEGER_CHARS: its atom in d (-1: none)
        for c in _INTEGER_CHARS:
            col.append(next((a for a, cs in enumerate(d.atoms) if any(lo <= c <= hi for lo, hi in cs)), -1))
        res = np.arange(L, dtype=np.int64)
        ok = np.ones(L, dtype=bool)
        if pos and pos > 1:
            ok &= res % pos == 0
        for m in negs:
            ok &= res % m != 0
        self._ok = ok.tolist() if L <= 4096 else ok
        #: per character index: the residue map (None: '-', the identity)
        step = [None] + [(10 * res + k) % L for k in range(10)]
        self._edges = [[(k, d.delta[q][a]) for k, a in enumerate(col) if a >= 0 and d.delta[q][a] >= 0]
                       for q in range(n)]
        live = np.asarray(d.accept, dtype=bool)[:, None] & ok[None, :]
        changed = True
        while changed:
            changed = False
            if tick is not None:
                tick()
            for q in range(n - 1, -1, -1):  # (targets tend to have higher numbers: fewer rounds)
                cur = live[q]
                new = cur.copy()
                for k, t in self._edges[q]:
                    new |= live[t] if step[k] is None else live[t][step[k]]
                if not np.array_equal(new, cur):
                    live[q] = new
                    changed = True
        self._live = live
        self._chars = [Chars(((c, c),)) for c in _INTEGER_CHARS]

    def live(self, state) -> bool:
        q, r = state
        return bool(self._live[q, r])

    def nullable(self, state) -> bool:
        q, r = state
        return bool(self.d.accept[q]) and bool(self._ok[r])

    def body(self, state):
        q, r = state
        L = self.modulus
        groups: dict = {}  # target -> its characters (in order)
        for k, t in self._edges[q]:
            r2 = r if k == 0 else (10 * r + k - 1) % L
            if self._live[t, r2]:
                groups.setdefault((t, r2), []).append(_INTEGER_CHARS[k])
        alts = []
        for tgt, cs in groups.items():
            sym = self._chars[_INTEGER_CHARS.index(cs[0])] if len(cs) == 1 else \
                Chars(tuple(normalize([(c, c) for c in cs])))
            alts.append(Concat((sym, LazyRule(self, tgt))))
        if self.nullable(state):
            alts.append(EMPTY)
        return Chars(()) if not alts else alts[0] if len(alts) == 1 else Alt(tuple(alts))

    def symbols(self) -> list:
        return list(self._chars)

    # -- token walks computed from the residues (the engine's fast path for a state's mask) ----------
    #: the bytes a state's rule reads (``-`` and the digits): a token whose first byte is another
    #: one completes or leaves the state before any byte
    token_bytes_read = bytes(_INTEGER_CHARS)

    def token_walk_key(self, state) -> int:
        """The part of ``state`` its tokens' walks are shared by (:meth:`token_walk`): ``q``."""
        return state[0]

    def token_walk(self, q: int, flat, start, lens, cand):
        """The walks of tokens ``cand`` from range state ``q``, for every residue at once: what
        :meth:`token_rows` needs to give the walk of ``(q, r)`` for one ``r`` by arithmetic.

        Reading ``-`` keeps the residue and digit ``k`` maps ``r`` to ``(10 r + k) mod L``, so the
        digits ``D`` of a token's prefix (``n`` of them, value ``v``) map ``r`` to
        ``(r · 10**n + v) mod L``; the range state they lead to does not depend on ``r``. Only the
        liveness of the state reached (a token read whole) and the acceptance of a prefix's residue
        (a prefix that completes the literal) do, which :meth:`token_rows` looks up. Without this,
        the engine's walk of one state's mask builds a rule and a table row for every digit prefix
        of the vocabulary: 1,110 states for Llama 3's 1-3 digit tokens once ``L`` exceeds 1,110,
        ~0.1-0.2 s a mask.

        Parameters
        ----------
        q : int
            A state of the range automaton ``d``.
        flat, start, lens : numpy.ndarray
            The vocabulary's bytes: uint8 concatenation, int64 start offset and int64 length per
            token id.
        cand : numpy.ndarray
            int64 token ids, each of at least one byte, the first in :attr:`token_bytes_read`
            (the only tokens that can be read whole or have a prefix in a state's language).

        Returns
        -------
        tuple
            ``(full, pairs)``: ``full`` for the tokens read whole along ``d`` from ``q``, ``pairs``
            for the (token, offset) pairs whose first ``offset`` bytes (at least one, fewer than
            the token's) lead ``d`` from ``q`` to an accepting state; each a tuple of int64 arrays
            ``(token ids, offsets (pairs only), state reached, 10**n mod L, v mod L)``.
        """
        import numpy as np

        L = self.modulus
        delta, code, acc, _ok = self._token_tables()
        n = cand.shape[0]
        st = np.full(n, q, dtype=np.int64)
        p10 = np.full(n, 1 % L, dtype=np.int64)
        val = np.zeros(n, dtype=np.int64)
        pos = start[cand].copy()
        left = lens[cand].copy()
        act = np.arange(n)
        full: list = []
        pairs: list = []
        j = 0
        while act.size:
            if j:  # a proper prefix of j bytes that completes the literal (the token goes on)
                a = act[acc.take(st.take(act))]
                if a.size:
                    pairs.append((cand.take(a), np.full(a.size, j, dtype=np.int64), st.take(a), p10.take(a),
                                  val.take(a)))
            c = code.take(flat.take(pos.take(act)))
            nxt = delta[st.take(act), np.maximum(c, 0)]
            keep = (c >= 0) & (nxt >= 0)
            act, c, nxt = act[keep], c[keep], nxt[keep]
            st[act] = nxt
            dig = c > 0
            d_ = act[dig]
            val[d_] = (val[d_] * 10 + (c[dig] - 1)) % L
            p10[d_] = (p10[d_] * 10) % L
            pos[act] += 1
            left[act] -= 1
            j += 1
            done = left.take(act) == 0
            if done.any():
                f = act[done]
                full.append((cand.take(f), st.take(f), p10.take(f), val.take(f)))
                act = act[~done]
        e = np.zeros(0, dtype=np.int64)
        fw = tuple(np.concatenate(x) for x in zip(*full)) if full else (e, e, e, e)
        pw = tuple(np.concatenate(x) for x in zip(*pairs)) if pairs else (e, e, e, e, e)
        return fw, pw

    def _token_tables(self):
        """``(delta, code, accept, ok)``: int64 ``(|d|, 11)`` target of each state per character
        index of :data:`_INTEGER_CHARS` (``-1``: none; 0 is ``-``, ``1 + k`` digit ``k``), int64
        ``(256,)`` the character index of each byte (``-1``: not read), bool ``(|d|,)`` the
        accepting range states and bool ``(L,)`` the residues meeting the moduli."""
        import numpy as np

        t = getattr(self, "_tok_tables", None)
        if t is None:
            n = len(self.d.delta)
            delta = np.full((n, len(_INTEGER_CHARS)), -1, dtype=np.int64)
            for q, es in enumerate(self._edges):
                for k, tgt in es:
                    delta[q, k] = tgt
            code = np.full(256, -1, dtype=np.int64)
            for k, c in enumerate(_INTEGER_CHARS):
                code[c] = k
            t = self._tok_tables = (delta, code, np.asarray(self.d.accept, dtype=bool),
                                    np.asarray(self._ok, dtype=bool))
        return t

    def token_rows(self, walk, state):
        """The walk of state ``(q, r)`` from :meth:`token_walk`'s ``walk`` of ``q`` (``r`` below
        ``L``, so ``r · 10**n`` stays far inside int64): ``(tokens read whole with a live state
        after them (int64 ids), which of the walk's pairs (:meth:`token_pairs`) complete the
        literal (bool))``. A token read whole is alive iff ``live[q', (r · 10**n + v) mod L]``; a
        pair's prefix completes the literal iff its residue meets the moduli (its range state
        accepts: :meth:`token_walk` kept only those). Exact: the rules of ``(q, r)`` and the
        states after it read exactly these characters with these targets (:meth:`body`), and the
        product is trimmed by the same table."""
        q, r = state
        L = self.modulus
        (ft, fq, fp, fv), (_pt, _po, _pq, pp, pv) = walk
        ok = self._token_tables()[3]
        return ft[self._live[fq, (r * fp + fv) % L]], ok[(r * pp + pv) % L]

    @staticmethod
    def token_pairs(walk):
        """``(token ids, offsets)`` (int64) of every pair of :meth:`token_walk`'s ``walk``: a
        proper prefix of ``offset`` bytes leads the range automaton to an accepting state (the
        literal may end there, by its residue)."""
        return walk[1][0], walk[1][1]
