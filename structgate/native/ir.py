"""The native grammar IR: named rules whose bodies are expressions with rule references.

Every native front end (regex, choice, JSON Schema, GBNF/EBNF, Lark, structural tags) produces a
:class:`Grammar`; the pushdown engine (:mod:`structgate.native.pushdown`) compiles it into one
Thompson NFA with call/return states and matches it with a stack.

Expressions
-----------
The expression nodes are the regex AST of :mod:`structgate.native.regex.parser` plus two kinds:

* :class:`~structgate.native.regex.parser.Chars` — one code point out of a set (UTF-8 encoded);
* :class:`ByteSet` — one raw byte out of a set of byte ranges (for byte-level grammars);
* :class:`~structgate.native.regex.parser.Concat`, :class:`~structgate.native.regex.parser.Alt`,
  :class:`~structgate.native.regex.parser.Repeat` (``max=None`` = unbounded);
* :class:`Ref` — a reference to another rule by name (recursion allowed, except left recursion);
* :class:`LazyRule` — one state of a right-linear automaton whose rules are generated on demand
  (:class:`LazyAutomaton`: e.g. a ``pattern`` × length-counter product too large to build; the
  engine builds a state's rule the first time a configuration reaches it);
* :class:`~structgate.native.regex.parser.Anchor` nodes are allowed only in a grammar built from a
  single regex (the engine then falls back to the eager DFA, which implements them).

Build bodies with the helpers :func:`lit`, :func:`seq`, :func:`alt`, :func:`rep`, :func:`star`,
:func:`plus`, :func:`opt`, :func:`chars`, :func:`ref` (they flatten and simplify).

A :class:`Grammar` is immutable once :meth:`Grammar.check` has run (the engine calls it): every
reference resolves, no rule is left-recursive, and the root can produce at least one string.
Errors name the rule and, where the front end gave one, its source position
(:attr:`Grammar.origin`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Union

from ..errors import GrammarSyntaxError, InvalidConstraintError
from .regex.parser import EMPTY, Alt, Anchor, Chars, Concat, Node as RegexNode, Repeat, normalize_ranges, repeat_node

__all__ = ["Ref", "ByteSet", "LazyRule", "LazyAutomaton", "Expr", "Grammar", "lit", "seq", "alt", "rep", "star", "plus", "opt",
           "chars", "ref", "byteset", "share_subtree", "share_subtrees", "rebuild", "has_anchor", "EMPTY", "NOTHING", "Chars", "Concat", "Alt", "Repeat", "Anchor"]


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to the rule ``name`` (matched through the stack when recursive or shared)."""

    name: str


@dataclass(frozen=True, slots=True)
class ByteSet:
    """One byte out of ``ranges``: sorted, disjoint inclusive ``(lo, hi)`` with ``0 <= lo <= hi <= 255``."""

    ranges: tuple[tuple[int, int], ...]


class LazyAutomaton:
    """A right-linear grammar given by functions instead of rules: one rule per state, generated
    when the engine first reaches the state (so an automaton of millions of states costs only the
    states an output visits). Subclasses implement :meth:`body`, :meth:`nullable`,
    :meth:`symbols` and give :attr:`start` and :attr:`name`.

    Contract (the engine relies on it for exact masks): every state reachable from :attr:`start`
    through :meth:`body` matches at least one string (the automaton is *trimmed*); a body refers to
    the automaton's own states only by :class:`LazyRule` leaves in tail position (last in their
    alternative), so a state's rule takes no stack frame; other references (called, with a frame)
    are the states of a helper automaton or :class:`Ref` leaves to the grammar rules listed by
    :meth:`references`. Bodies are deterministic functions of the state. Identity is the
    object's (equality and hash are ``object``'s). States used only as count-free aliases for
    the token masks (``canonical``, see :class:`structgate.native.pushdown.RepeatCounter`) need
    not match a string.

    Optionally an automaton computes the token walks of its states itself, where the engine's trie
    walk would generate a state per token prefix (``token_walk_key``, ``token_walk``,
    ``token_rows`` and ``token_bytes_read``, used by
    :meth:`structgate.native.pushdown.PushdownIndex._automaton_walk`; see
    :class:`structgate.native.json_schema._automata.ResidueProduct`). Its rules must then be
    call-free and read only those bytes.
    """

    start: object = None
    name: str = "lazy"
    #: whether the frames returning into its rules are free of the recursion-depth bound
    counting: bool = False

    def body(self, state) -> "Expr":
        """The rule of ``state``: an expression whose references are ``LazyRule(self, s)`` leaves
        in tail position."""
        raise NotImplementedError

    def nullable(self, state) -> bool:
        """Whether ``state``'s rule matches the empty string."""
        raise NotImplementedError

    def symbols(self) -> list:
        """Every expression a body may consume before its tail call, for the byte partition
        (:func:`structgate.native.pushdown._grammar_alphabet`)."""
        raise NotImplementedError

    def references(self) -> frozenset:
        """The grammar's own rules that bodies may reference (:class:`Ref` leaves, so
        :meth:`Grammar.reachable` keeps them); none by default."""
        return frozenset()


@dataclass(frozen=True, slots=True)
class LazyRule:
    """State ``state`` of the lazily generated automaton ``auto`` (a rule the engine builds the
    first time it is reached; it never references the grammar's own rules)."""

    auto: LazyAutomaton
    state: object


Expr = Union[RegexNode, Ref, ByteSet, LazyRule]


class CalledRules(LazyAutomaton):
    """One generated rule per distinct expression registered by :meth:`call` (state: its index),
    for expressions another automaton's rules call with a frame instead of inlining: the item of
    a :class:`~structgate.native.pushdown.RepeatCounter`, the symbols of a
    :class:`~structgate.native.json_schema._automata.LengthProduct`. Expressions must not be
    nullable; their :class:`Ref` leaves are the grammar's rules (:meth:`references`). Register
    every expression before the grammar holding the automaton is analysed: the references are
    memoised per body (:meth:`Grammar.references`), so a :class:`Ref` added later would be missed;
    :meth:`call` refuses a new expression with references once :meth:`references` was read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.start = 0
        self._exprs: list = []
        self._index: dict = {}
        #: id of a registered expression object -> its index (it is pinned by ``_exprs``): the same
        #: object called again is found without hashing it (a dataclass hashes its whole subtree;
        #: a length product calls each symbol once per automaton state)
        self._by_id: dict[int, int] = {}
        self._refs: set[str] = set()
        self._refs_read = False

    def call(self, e: "Expr") -> LazyRule:
        """The rule of expression ``e`` (equal expressions share one)."""
        i = self._by_id.get(id(e))
        if i is not None and self._exprs[i] is e:
            return LazyRule(self, i)
        i = self._index.get(e)
        if i is not None:
            if self._exprs[i] is e:
                self._by_id[id(e)] = i
        else:
            refs = expr_references(e)
            if refs - self._refs and self._refs_read:
                raise RuntimeError(f"{self.name}: an expression referencing {sorted(refs - self._refs)} was "
                                   "registered after the references were read")
            i = self._index[e] = self._by_id[id(e)] = len(self._exprs)
            self._exprs.append(e)
            self._refs |= refs
        return LazyRule(self, i)

    def references(self) -> frozenset:
        self._refs_read = True
        return frozenset(self._refs)

    def body(self, state):
        return self._exprs[state]

    def nullable(self, state) -> bool:
        return False

    def symbols(self) -> list:
        return list(self._exprs)

#: matches nothing (an empty code-point set)
NOTHING = Chars(())


def lit(text: str | bytes) -> Expr:
    """The exact string ``text`` (a ``str`` is UTF-8 encoded code point by code point; ``bytes``
    are matched byte by byte)."""
    if isinstance(text, bytes):
        items = tuple(ByteSet(((b, b),)) for b in text)
    else:
        items = tuple(Chars(((ord(c), ord(c)),)) for c in text)
    return items[0] if len(items) == 1 else Concat(items)


def seq(*items: Expr) -> Expr:
    """Concatenation (nested concatenations are flattened; ``seq()`` is the empty string)."""
    out: list[Expr] = []
    for it in items:
        if isinstance(it, Concat):
            out.extend(it.items)
        else:
            out.append(it)
    if any(isinstance(it, Chars) and not it.ranges for it in out):
        return NOTHING
    return out[0] if len(out) == 1 else Concat(tuple(out))


def alt(*items: Expr) -> Expr:
    """Alternation (nested alternations flattened, duplicates and empty sets dropped; ``alt()`` is
    :data:`NOTHING`)."""
    out: dict[Expr, None] = {}
    for it in items:
        if isinstance(it, Alt):
            for x in it.items:
                out[x] = None
        elif isinstance(it, Chars) and not it.ranges:
            continue
        else:
            out[it] = None
    xs = tuple(out)
    if not xs:
        return NOTHING
    return xs[0] if len(xs) == 1 else Alt(xs)


def rep(item: Expr, lo: int, hi: int | None) -> Expr:
    """``item{lo,hi}`` (``hi=None`` = unbounded), simplified as
    :func:`~structgate.native.regex.parser.repeat_node` does (a nullable ``item`` repeated without
    its empty string).

    Raises
    ------
    InvalidConstraintError
        ``lo < 0`` or ``hi < lo``.
    """
    if lo < 0 or (hi is not None and hi < lo):
        raise InvalidConstraintError(f"repetition bounds {{{lo},{hi}}} are invalid")
    return repeat_node(item, lo, hi)


def star(item: Expr) -> Expr:
    return rep(item, 0, None)


def plus(item: Expr) -> Expr:
    return rep(item, 1, None)


def opt(item: Expr) -> Expr:
    return rep(item, 0, 1)


def chars(ranges: Iterable[tuple[int, int]]) -> Chars:
    """One code point out of ``ranges`` (inclusive; normalised)."""
    return Chars(normalize_ranges(list(ranges)))


def byteset(ranges: Iterable[tuple[int, int]]) -> ByteSet:
    """One byte out of ``ranges`` (inclusive; normalised)."""
    rs = normalize_ranges(list(ranges))
    if rs and (rs[0][0] < 0 or rs[-1][1] > 255):
        raise InvalidConstraintError(f"byte ranges must lie in 0..255: {rs}")
    return ByteSet(rs)


def ref(name: str) -> Ref:
    return Ref(name)


def has_anchor(node: Expr) -> bool:
    """True if an :class:`Anchor` occurs anywhere in ``node`` (iterative; a subtree shared inside
    ``node``, as the parser hash-conses them, is visited once: an enum's values share their
    characters and suffixes). The walk of :func:`expr_references`, inlined for the same reason:
    :func:`expr_leaves`' generator took twice as long on a 416-value enum (2.4 against 1.2 ms)."""
    seen: set[int] = set()
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        n = pop()
        t = type(n)
        if t is Concat or t is Alt:
            if id(n) not in seen:
                seen.add(id(n))
                extend(n.items)
        elif t is Repeat:
            if id(n) not in seen:
                seen.add(id(n))
                stack.append(n.item)
        elif isinstance(n, Anchor):
            return True
    return False


def _children(node: Expr) -> tuple:
    if isinstance(node, (Concat, Alt)):
        return node.items
    if isinstance(node, Repeat):
        return (node.item,)
    return ()


def expr_leaves(roots, seen: set | None = None):
    """The leaves (every node but concatenations, alternations and repeats) under the expressions
    ``roots``; a subtree shared between them is visited once (``seen``, node ids, may be passed
    in to share that across calls). Iterative: no nesting depth exhausts Python's stack."""
    seen = set() if seen is None else seen
    stack = list(roots)
    while stack:
        n = stack.pop()
        if isinstance(n, (Concat, Alt, Repeat)):
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.extend(_children(n))
        else:
            yield n


def expr_references(node: Expr) -> set[str]:
    """The rule names ``node`` references: its :class:`Ref` leaves and the rules its
    :class:`LazyRule` automata list (:meth:`LazyAutomaton.references`); :func:`expr_uses`' walk."""
    return expr_uses(node)[1]


def expr_uses(node: Expr) -> tuple[dict[str, int], set[str]]:
    """``(uses, references)`` of ``node`` in one walk: ``uses`` maps each :class:`Ref` name to how
    many times :func:`~structgate.native.pushdown.build_grammar_nfa` compiles it (a reference
    under a repeat of more than one copy counts 2; a concatenation or alternation the parser
    shares is walked once); ``references`` is :func:`expr_references`' set (the names of
    ``uses`` and the rules of the :class:`LazyRule` automata). Both are read off every rule body
    of a grammar (reachability, the build's count of uses): one walk instead of two."""
    uses: dict[str, int] = {}
    refs: set[str] = set()
    seen: set[int] = set()
    stack = [(node, 1)]
    pop, push = stack.pop, stack.append
    get = uses.get
    while stack:
        n, mult = pop()
        t = type(n)
        if t is Concat or t is Alt:
            if id(n) in seen:
                continue
            seen.add(id(n))
            for x in n.items:  # leaves other than references are not pushed
                tx = type(x)
                if tx is Ref:
                    uses[x.name] = get(x.name, 0) + mult
                elif tx is Concat or tx is Alt or tx is Repeat:
                    push((x, mult))
                elif tx is LazyRule:
                    refs.update(x.auto.references())
        elif t is Repeat:
            # a reference under a repeat is compiled once per copy
            push((n.item, 2 if n.max is None or n.max > 1 else mult))
        elif t is Ref:
            uses[n.name] = get(n.name, 0) + mult
        elif t is LazyRule:
            refs.update(n.auto.references())
    refs.update(uses)
    return uses, refs


#: per rule body object (pinned with it), for the process: :meth:`Grammar.references` and
#: :meth:`Grammar.uses`, and whether
#: the body is nullable / productive with no rule known to be (:meth:`Grammar._free_rules`); each
#: cleared whole at :data:`_BODY_MEMO_MAX` entries
_REFS_MEMO: dict[int, tuple] = {}
_FREE_NULLABLE: dict[int, tuple] = {}
_FREE_PRODUCTIVE: dict[int, tuple] = {}
_BODY_MEMO_MAX = 8192


@dataclass
class Grammar:
    """Named rules and a root.

    Attributes
    ----------
    rules : dict[str, Expr]
        Rule name → body.
    root : str
        The start rule.
    origin : dict[str, str]
        Optional per-rule source description for messages (``"line 3, column 1"``, a JSON pointer).
    source : str
        The grammar text (for carets in :class:`GrammarSyntaxError`), may be empty.
    positions : dict[str, int]
        Optional per-rule 0-based offset of the rule's definition in :attr:`source`.
    keep_calls : set[str]
        Rules the engine must match through the stack even when it would inline them (rules
        reused in many places whose masks are then computed once, e.g. the JSON string).
    empty_reason : str
        Set by a front end that found the grammar matches nothing: why, in the input's terms (the
        message :meth:`check` raises).
    """

    rules: dict[str, Expr]
    root: str
    origin: dict[str, str] = field(default_factory=dict)
    source: str = ""
    positions: dict[str, int] = field(default_factory=dict)
    keep_calls: set[str] = field(default_factory=set)
    empty_reason: str = ""

    # -- analysis -----------------------------------------------------------------------------------
    def _err(self, rule: str, msg: str) -> GrammarSyntaxError:
        where = f"rule {rule!r}" + (f" ({self.origin[rule]})" if rule in self.origin else "")
        return GrammarSyntaxError(msg, self.source, self.positions.get(rule, 0), where)

    def references(self, name: str) -> set[str]:
        """Names referenced anywhere in rule ``name``'s body (memoised per body object: for the
        process, :data:`_REFS_MEMO`, so the rules every JSON schema grammar holds are walked once;
        the root's in a memo the grammars derived from this one share; shared subtrees are visited
        once). The set is shared: callers must not change it."""
        return self._refs_and_uses(name)[1]

    def uses(self, name: str) -> dict[str, int]:
        """How many times each rule name is compiled in rule ``name``'s body
        (:func:`expr_uses`), memoised with :meth:`references` (one walk gives both). The dict is
        shared: callers must not change it."""
        return self._refs_and_uses(name)[2]

    def _refs_and_uses(self, name: str) -> tuple:
        """``(body, references, uses)`` of rule ``name``; the root's body is the grammar's own (a
        schema's): kept with the grammars derived from this one, not pinned for the process."""
        body = self.rules[name]
        memo = self.__dict__.setdefault("_refs_memo", {}) if name == self.root else _REFS_MEMO
        hit = memo.get(id(body))
        if hit is not None and hit[0] is body:
            return hit
        uses, refs = expr_uses(body)
        if len(memo) >= _BODY_MEMO_MAX:
            memo.clear()
        hit = memo[id(body)] = (body, refs, uses)  # the body is pinned: its id is not reused while kept
        return hit

    def derived(self, rules: dict, **fields) -> "Grammar":
        """A grammar of ``rules`` with this one's other fields (``fields`` override them), sharing
        the root's memo of :meth:`references` (keyed by body object, so valid for both): the passes
        that rewrite a grammar keep most bodies, and their references are not walked again."""
        g = Grammar(rules, fields.pop("root", self.root), fields.pop("origin", dict(self.origin)),
                    fields.pop("source", self.source), fields.pop("positions", dict(self.positions)),
                    fields.pop("keep_calls", set(self.keep_calls)))
        if fields:
            raise TypeError(f"unknown Grammar fields: {sorted(fields)}")
        g.__dict__["_refs_memo"] = self.__dict__.setdefault("_refs_memo", {})
        return g

    def reachable(self) -> list[str]:
        """Rules reachable from the root, root first (breadth first). Memoised while the root and
        every rule body are the same objects (analyses call it many times per compile); a copy of
        the list is returned."""
        key = (self.root, tuple(map(id, self.rules.values())), tuple(self.rules))
        hit = self.__dict__.get("_reach_memo")
        if hit is not None and hit[0] == key:
            return list(hit[1])
        order = self._reachable()
        self.__dict__["_reach_memo"] = (key, tuple(order), tuple(self.rules.values()))  # bodies pinned
        return order

    def _reachable(self) -> list[str]:
        seen = {self.root: None}
        order = [self.root]
        i = 0
        while i < len(order):
            for r in sorted(self.references(order[i])):
                if r not in seen and r in self.rules:  # undefined names: reported by check()
                    seen[r] = None
                    order.append(r)
            i += 1
        return order

    def _free_rules(self, holds, cache: dict) -> set[str]:
        """The reachable rules whose body has the property with no rule found yet
        (``holds(body, set(), {})``), which then holds in every grammar: kept per body object for
        the process in ``cache`` (the rules every JSON schema grammar holds are evaluated once).
        The root (a schema's own body, seldom seen again) is left to the fixpoint."""
        out = set()
        empty: frozenset = frozenset()
        # one memo for the bodies evaluated here (all against the empty rule set): subtrees the
        # parser shares between rules (hash-consed) are walked once, not once per body
        final: dict[int, bool] = {}
        for r in self.reachable():
            if r == self.root:
                continue
            b = self.rules[r]
            hit = cache.get(id(b))
            if hit is None or hit[0] is not b:
                if self.references(r):
                    # a body that calls rules is left to the fixpoint: evaluated here against no
                    # rule it would be walked twice (here, where its first call stops it, and again
                    # there), and a body seldom recurs across grammars (its calls name its schema)
                    continue
                hit = (b, holds(b, empty, final))
                if len(cache) >= _BODY_MEMO_MAX:
                    cache.clear()
                cache[id(b)] = hit  # the body pinned
            if hit[1]:
                out.add(r)
        return out

    def _fixpoint(self, holds, found: set[str] | None = None) -> set[str]:
        """Least fixpoint: the reachable rules ``r`` with ``holds(body, found_so_far, memo)``.

        A worklist (callees first): a rule is evaluated once, then again only when a rule it
        references has just been found. ``memo`` keeps the value of every subexpression that can
        no longer change (the property only ever goes from false to true as ``found`` grows), so
        subexpressions shared between rules and re-evaluations are walked once."""
        names = self.reachable()
        rdeps: dict[str, list[str]] = {r: [] for r in names}
        for r in names:
            for x in self.references(r):
                if x in rdeps:
                    rdeps[x].append(r)
        found = set() if found is None else found
        memo: dict[int, bool] = {}
        work = list(names)  # popped from the end: the rules found last by the BFS (callees) first
        queued = set(names)
        rules = self.rules
        while work:
            r = work.pop()
            queued.discard(r)
            if r not in found and holds(rules[r], found, memo):
                found.add(r)
                for q in rdeps[r]:
                    if q not in found and q not in queued:
                        queued.add(q)
                        work.append(q)
        return found

    def nullable_rules(self) -> set[str]:
        """Rules that match the empty string (least fixpoint)."""
        return self._fixpoint(_nullable, self._free_rules(_nullable, _FREE_NULLABLE))

    def productive_rules(self) -> set[str]:
        """Rules that match at least one string (least fixpoint)."""
        return self._fixpoint(_productive, self._free_rules(_productive, _FREE_PRODUCTIVE))

    def unproductive_report(self, prod: set[str] | None = None) -> str:
        """Why the root produces no string, naming the rules: the reachable unproductive rules on
        a reference cycle (a recursion that never bottoms out: every alternative of each needs one
        of them again), else the reachable unproductive rules (each needs an empty set or one of
        them). At most 5 names, in breadth-first order from the root. ``prod``: the productive
        rules (:meth:`productive_rules` when None)."""
        prod = self.productive_rules() if prod is None else prod
        dead = [r for r in self.reachable() if r not in prod]
        rec = self.recursive_rules()
        cyc = [r for r in dead if r in rec]

        def names(rs):
            shown = ", ".join(repr(r) for r in rs[:5]) + (f" and {len(rs) - 5} more" if len(rs) > 5 else "")
            return ("rule " if len(rs) == 1 else "rules ") + shown

        if cyc:
            return (f"{names(cyc)} never finish{'es' if len(cyc) == 1 else ''}: every alternative needs "
                    f"{'itself' if len(cyc) == 1 else 'one of them'} again (a recursion with no base case)")
        return f"{names(dead)}: every alternative needs an unproductive rule or an empty set"

    def all_productive(self) -> bool:
        """Whether every reachable rule matches at least one string (the productive rules found by
        :meth:`check` are reused while :attr:`rules` is the same mapping)."""
        hit = self.__dict__.get("_productive_memo")
        prod = hit[1] if hit is not None and hit[0] is self.rules else self.productive_rules()
        return all(r in prod for r in self.reachable())

    def recursive_rules(self) -> set[str]:
        """Rules on a reference cycle (Tarjan SCCs of size > 1, or self-references)."""
        names = self.reachable()
        graph = {r: sorted(self.references(r)) for r in names}
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on: set[str] = set()
        st: list[str] = []
        out: set[str] = set()
        counter = 0
        for root in names:
            if root in index:
                continue
            call = [(root, 0)]
            index[root] = low[root] = counter
            counter += 1
            st.append(root)
            on.add(root)
            while call:
                v, i = call[-1]
                if i < len(graph[v]):
                    call[-1] = (v, i + 1)
                    w = graph[v][i]
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        st.append(w)
                        on.add(w)
                        call.append((w, 0))
                    elif w in on:
                        low[v] = min(low[v], index[w])
                    continue
                call.pop()
                if call:
                    u = call[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = st.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in graph[v]:
                        out.update(comp)
        return out

    def check(self) -> "Grammar":
        """Validate the grammar; returns ``self``.

        Raises
        ------
        GrammarSyntaxError
            The root or a referenced rule is undefined, a rule is left-recursive (it can reach a
            reference to itself without consuming input).
        InvalidConstraintError
            The root matches nothing: :attr:`empty_reason` when a front end set it, else a
            message naming the unproductive rules (:meth:`unproductive_report`).
        """
        if self.root not in self.rules:
            raise GrammarSyntaxError(f"the root rule {self.root!r} is not defined", self.source, 0)
        for r in self.reachable():
            for x in sorted(self.references(r)):
                if x not in self.rules:
                    raise self._err(r, f"rule {r!r} references undefined rule {x!r}")
        null = self.nullable_rules()
        # left recursion: A -> (nullable prefix) -> Ref(B) ..., cycle in that "first" graph
        fr_memo: dict[int, set[str]] = {}
        null_final: dict[int, bool] = {}
        first = {r: _first_refs(self.rules[r], null, fr_memo, null_final) for r in self.reachable()}
        state: dict[str, int] = {}
        for r0 in first:
            if state.get(r0):
                continue
            path = [r0]
            it = [iter(sorted(first[r0]))]
            state[r0] = 1
            while it:
                nxt = next(it[-1], None)
                if nxt is None:
                    state[path.pop()] = 2
                    it.pop()
                    continue
                s = state.get(nxt, 0)
                if s == 1:
                    cyc = path[path.index(nxt):] + [nxt]
                    raise self._err(nxt, "left recursion is not supported: " + " -> ".join(cyc)
                                    + " (rewrite it with repetition, e.g. a ::= b (op b)*)")
                if s == 0:
                    state[nxt] = 1
                    path.append(nxt)
                    it.append(iter(sorted(first[nxt])))
        hit = self.__dict__.get("_productive_memo")
        prod = hit[1] if hit is not None and hit[0] is self.rules else self.productive_rules()
        self.__dict__["_productive_memo"] = (self.rules, prod)
        if self.root not in prod:
            if self.empty_reason:
                raise InvalidConstraintError(self.empty_reason)
            raise InvalidConstraintError(f"the grammar matches nothing: rule {self.root!r} cannot produce any "
                                         f"string; {self.unproductive_report(prod)}")
        return self


def rebuild(node: Expr, done: dict, pre=None, post=None, memo_root: bool = True) -> Expr:
    """``node`` rebuilt bottom-up (iterative post-order, no Python recursion): ``pre(n)``, when
    given, may return a replacement for ``n`` before its children are visited (None: descend);
    ``post(n)``, when given, maps each rebuilt ``Concat``/``Alt``/``Repeat`` to its replacement.
    A node whose children are unchanged is kept (the same object). ``done`` memoises by node
    identity across calls (shared subtrees are rebuilt once); ``memo_root=False`` keeps ``node``
    itself out of it (a rule body that is rewritten differently where it is referenced)."""
    stack = [(node, False)]
    out: list = []
    while stack:
        nd, fin = stack.pop()
        k = id(nd)
        if not fin:
            r = pre(nd) if pre is not None else None
            if r is not None:
                out.append(r)
            elif k in done:
                out.append(done[k])
            elif isinstance(nd, (Concat, Alt, Repeat)):
                stack.append((nd, True))
                kids = (nd.item,) if isinstance(nd, Repeat) else nd.items
                stack.extend((x, False) for x in reversed(kids))
            else:
                out.append(nd)
            continue
        if isinstance(nd, Repeat):
            item = out.pop()
            r = nd if item is nd.item else Repeat(item, nd.min, nd.max)
        else:
            c = len(nd.items)
            items = tuple(out[len(out) - c:])
            del out[len(out) - c:]
            r = nd if all(a is b for a, b in zip(items, nd.items)) else type(nd)(items)
        if post is not None:
            r = post(r)
        if memo_root or nd is not node:
            done[k] = r
        out.append(r)
    return out[0]


def share_subtree(grammar: Grammar, target: Expr, name: str) -> Grammar:
    """A grammar where every subtree equal to ``target`` is replaced by a reference to a new rule
    ``name`` (body ``target``), kept as a call (:attr:`Grammar.keep_calls`) so that its token masks
    are computed once for every place it occurs. Returns ``grammar`` itself when nothing matched.
    Linear in the grammar size (iterative, shared subtrees rebuilt once)."""
    return share_subtrees(grammar, {name: target})


def share_subtrees(grammar: Grammar, targets: dict[str, Expr]) -> Grammar:
    """:func:`share_subtree` for several ``{name: target}`` pairs in one traversal of the grammar
    (a subtree is compared with the targets in the order given). Rules are added only for the
    targets that matched."""
    for name in targets:
        if name in grammar.rules:
            raise InvalidConstraintError(f"rule name {name!r} is already defined")
    # (kind, item count or -1, target, name); Concat targets also match a run of items in a longer concatenation
    specs = [(type(t), len(t.items) if isinstance(t, (Concat, Alt)) else -1, t, n) for n, t in targets.items()]
    windows = [(t, n) for n, t in targets.items() if isinstance(t, Concat) and len(t.items) > 1]
    kinds = {k for k, _l, _t, _n in specs}
    used: set[str] = set()
    matched: dict[int, Ref | None] = {}  # node id -> its target's reference (None: no target), compared once

    def pre(nd):
        if type(nd) not in kinds:
            return None
        k = id(nd)
        if k not in matched:
            matched[k] = None
            for tkind, tlen, target, name in specs:
                if type(nd) is tkind and (tlen < 0 or len(nd.items) == tlen) and nd == target:
                    matched[k] = Ref(name)
                    used.add(name)
                    break
        return matched[k]

    def windowed(r):  # Concat targets also replace a run of items in a longer concatenation
        if windows and isinstance(r, Concat):
            items = r.items
            for target, name in windows:
                if len(items) > len(target.items):
                    items, found = _replace_window(items, target.items, name)
                    if found:
                        used.add(name)
            if items is not r.items:
                return items[0] if len(items) == 1 else Concat(items)
        return r

    done: dict[int, Expr] = {}
    new_rules = {rname: rebuild(body, done, pre=pre, post=windowed) for rname, body in grammar.rules.items()}
    hit = bool(used)
    if not hit:
        return grammar
    for name in targets:  # in the order given (deterministic)
        if name in used:
            new_rules[name] = targets[name]
    return grammar.derived(new_rules, keep_calls=set(grammar.keep_calls) | used)


def _replace_window(items: tuple, pat: tuple, name: str) -> tuple[tuple, bool]:
    """Replace every non-overlapping run of ``items`` equal to ``pat`` by ``Ref(name)``."""
    out = []
    i = 0
    n, m = len(items), len(pat)
    found = False
    first = pat[0]
    while i < n:
        if i + m <= n and items[i] == first and all(items[i + j] == pat[j] for j in range(1, m)):
            out.append(Ref(name))
            i += m
            found = True
        else:
            out.append(items[i])
            i += 1
    return (tuple(out), True) if found else (items, False)


def _holds(n: Expr, leaf, empty_repeat: bool, final: dict[int, bool] | None = None) -> bool:
    """A property of an expression that is ``all`` over a concatenation, ``any`` over an
    alternation, true for ``x{0,..}`` when ``empty_repeat`` (else the item's) and ``leaf(n)`` on
    leaves (``leaf`` returns ``(value, final)``: whether the value can still change as the rule
    set it reads grows). Evaluated left to right with short circuits (a concatenation stops at its
    first false item, an alternation at its first true one: nullability stops at a body's first
    character), iteratively (no nesting depth, a 1,000-character key trie say, can exhaust
    Python's stack), with a memo by node. ``final`` (by node id) keeps, across calls, the values
    that can no longer change: true ones (the property is monotone in the rule set) and false ones
    that depend on no open rule."""
    if final is None:
        final = {}
    memo: dict[int, tuple[bool, bool]] = {}

    def quick(x):
        k = id(x)
        f = final.get(k)
        if f is not None:
            return (f, True)
        m = memo.get(k)
        if m is not None:
            return m
        if isinstance(x, (Concat, Alt)):
            return None
        if isinstance(x, Repeat):
            return (True, True) if x.min == 0 and empty_repeat else None
        return leaf(x)

    r = quick(n)
    if r is not None:
        return r[0]
    stack = [[n, 0, True]]  # frames: node, next item, (alternation) every false item so far final
    ret = None  # the value of the frame just finished
    while stack:
        fr = stack[-1]
        x = fr[0]
        if isinstance(x, Repeat):
            if ret is None:
                res = quick(x.item)
                if res is None:
                    stack.append([x.item, 0, True])
                    continue
            else:
                res, ret = ret, None
        else:
            cat = isinstance(x, Concat)
            items = x.items
            res = None
            c, ret = ret, None
            while True:
                if c is None:
                    i = fr[1]
                    if i == len(items):
                        res = (True, True) if cat else (False, fr[2])
                        break
                    c = quick(items[i])
                    if c is None:
                        stack.append([items[i], 0, True])
                        break
                if cat and not c[0]:
                    res = (False, c[1])
                    break
                if not cat and c[0]:
                    res = (True, True)
                    break
                if not c[1]:
                    fr[2] = False
                fr[1] += 1
                c = None
            if res is None:
                continue
        stack.pop()
        k = id(x)
        memo[k] = res
        if res[1]:
            final[k] = res[0]
        ret = res
    return ret[0]


def _nullable(n: Expr, null: set[str], final: dict[int, bool] | None = None) -> bool:
    """Whether ``n`` matches the empty string (``null``: the nullable rules; ``final``: see
    :func:`_holds`, only valid while ``null`` only grows)."""
    return _holds(n, lambda x: ((x.name in null,) * 2) if isinstance(x, Ref)
                  else (x.auto.nullable(x.state), True) if isinstance(x, LazyRule)
                  else (not isinstance(x, (Chars, ByteSet)), True), True, final)


def _productive(n: Expr, prod: set[str], final: dict[int, bool] | None = None) -> bool:
    """Whether ``n`` matches at least one string (``prod``: the productive rules; ``final``: see
    :func:`_holds`)."""
    return _holds(n, lambda x: ((x.name in prod,) * 2) if isinstance(x, Ref) else
                  (_encodable(x.ranges) if isinstance(x, Chars) else bool(x.ranges) if isinstance(x, ByteSet)
                   else True, True), True, final)


def _encodable(ranges) -> bool:
    """Whether code point ranges hold a Unicode scalar value (one with a UTF-8 encoding): a set of
    surrogates only (U+D800..U+DFFF, a regex ``\\ud800``) matches no UTF-8 text."""
    return any(not (0xD800 <= a and b <= 0xDFFF) for a, b in ranges)


def _first_refs(n: Expr, null: set[str], memo: dict[int, set[str]] | None = None,
                final: dict[int, bool] | None = None) -> set[str]:
    """Rules referenced at a position reachable from the start of ``n`` without consuming input.
    ``memo`` (by node id, the nodes alive meanwhile) and ``final`` (:func:`_nullable`'s) may be
    shared by calls with the same ``null``: shared subtrees are then evaluated once. The sets
    returned may be shared: callers must not change them."""
    if isinstance(n, Ref):
        return {n.name}
    if not isinstance(n, (Concat, Alt, Repeat)):
        return set()
    if memo is None:
        memo, final = {}, {}
    hit = memo.get(id(n))
    if hit is not None:
        return hit
    if isinstance(n, Repeat):
        out = _first_refs(n.item, null, memo, final)
    else:
        out = set()
        cat = isinstance(n, Concat)
        for x in n.items:
            out |= _first_refs(x, null, memo, final)
            if cat and not _nullable(x, null, final):
                break
    memo[id(n)] = out
    return out
