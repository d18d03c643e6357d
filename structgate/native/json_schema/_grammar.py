"""Grammar mode's last step: rule texts → :class:`structgate.native.ir.Grammar` (parsed with
``parse_regex(calls=True)``, memoised per text for the process), the rules built as IR directly
(the shared JSON string and key-tail rules, key exclusions), and pruning of rules that produce
nothing."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ._charset import _MUST_ESCAPE, ANY, SURROGATES, STRING, intersect, json_char_regex, subtract
from ._common import JSON_VALUE_RULE, ROOT_RULE
from ..ir import Ref, lit

if TYPE_CHECKING:
    from .compiler import _Compiler

#: the rule every unconstrained JSON string is matched through (called, not inlined: its masks,
#: which allow most of the vocabulary, are computed once per grammar, not once per position)
STRING_RULE = "__json_string"
#: the rule of the end of an object key that is not a listed name (any canonical characters,
#: then the closing quote), called from every branch of a key exclusion
KEY_TAIL_RULE = "__json_key_tail"
SHARED_RULES = (STRING_RULE, KEY_TAIL_RULE)
#: the leaves of :func:`key_not_in_ir`'s tries: a call of the key tail, the closing quote
_TAIL = Ref(KEY_TAIL_RULE)
_QUOTE = lit('"')

#: parsed rule texts, by text (ASTs are immutable; the same texts recur across grammars:
#: ``json:value``, number and format rules, members of recurring shapes)
_PARSED: dict[str, Any] = {}
_PARSED_MAX = 4096


def parse_rule(text: str, where: str | None = None):
    """``parse_regex(text, calls=True)``, memoised per text for the process (errors are not
    cached: a failing text is parsed again, with its ``where``).

    Raises
    ------
    GrammarSyntaxError, UnsupportedFeatureError
        As :func:`~structgate.native.regex.parse_regex`.
    """
    hit = _PARSED.get(text)
    if hit is None:
        from ..regex.parser import parse_regex

        hit = parse_regex(text, calls=True, where=where)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = hit
    return hit


def shared_rule_ir(name: str):
    """The body of :data:`STRING_RULE` or :data:`KEY_TAIL_RULE` (parsed once per process)."""
    from ._type_string import KEY_TAIL

    return parse_rule(STRING if name == STRING_RULE else KEY_TAIL)


@lru_cache(maxsize=1024)
def _canonical_char_ir(s):
    """IR of one code point of ``s`` in its canonical JSON spelling (the language of
    ``json_char_regex(s, escapes=False)``, None if empty): the plain characters as one
    :class:`Chars`, the escaped ones (a subset of ``"``, ``\\`` and the controls) parsed from
    their text, memoised by that subset (so the escape part is one shared object)."""
    from ..ir import Chars, alt

    s = subtract(s, SURROGATES)
    if not s:
        return None
    plain = subtract(s, _MUST_ESCAPE)
    esc = _escape_ir(intersect(s, _MUST_ESCAPE))
    parts = ([Chars(plain)] if plain else []) + ([esc] if esc is not None else [])
    return alt(*parts)


@lru_cache(maxsize=4096)
def _other_char_ir(chars: tuple):
    """IR of one canonically spelled code point other than ``chars`` (sorted one-character
    strings), None if none is left: a key-trie node's way out of the listed names, memoised
    (most nodes have one child, so the same few sets recur across nodes and grammars)."""
    other = subtract(ANY, tuple((ord(c), ord(c)) for c in chars))
    return _canonical_char_ir(other) if other else None


@lru_cache(maxsize=256)
def _escape_ir(s):
    text = json_char_regex(s, escapes=False) if s else None
    return None if text is None else parse_rule(text)


@lru_cache(maxsize=512)
def key_not_in_ir(names: tuple):
    """IR of the canonically spelled JSON strings (quotes included) whose decoded value is not in
    ``names``: the language of :func:`._type_string._key_not_in` (a trie of the names; at every
    node a character that leaves the trie continues in a call of :data:`KEY_TAIL_RULE`), built
    without a regex text. Memoised per names tuple.

    Returns
    -------
    Expr
        Concatenation starting with ``"``; :data:`~structgate.native.ir.NOTHING` if no string is left.
    """
    from ..ir import seq
    from ._type_string import names_trie

    trie = names_trie(names)
    # iterative post-order over the trie (names can be long); a node on the path of one name only
    # (a chain to its end) is the IR of that name's rest, built once per process (:func:`_key_chain_ir`)
    done: dict[int, Any] = {}
    stack = [(trie, False)]
    while stack:
        node, ready = stack.pop()
        if not ready:
            rest = _chain_rest(node)
            if rest is not None:
                done[id(node)] = _key_chain_ir(rest)
                continue
            stack.append((node, True))
            stack.extend((node[c], False) for c in node if c is not None)
            continue
        done[id(node)] = _key_node_ir([c for c in node if c is not None], None in node,
                                      [done[id(node[c])] for c in node if c is not None])
    return seq(_QUOTE, done[id(trie)])


def _chain_rest(node: dict) -> str | None:
    """The rest of the one name whose path ``node`` lies on when no other name passes it (each
    node below has one character and no name ends before the last), else None."""
    rest = []
    while True:
        if len(node) != 1:
            return None
        c = next(iter(node))
        if c is None:
            return "".join(rest)
        rest.append(c)
        node = node[c]


def _key_node_ir(chars: list, ends: bool, below: list):
    """IR of a key-trie node (:func:`key_not_in_ir`): a character other than ``chars`` continues
    in :data:`KEY_TAIL_RULE`; character ``chars[i]`` continues in ``below[i]``; the string may end
    here unless a name ends here (``ends``)."""
    from ..ir import NOTHING, Alt, seq

    parts = []
    o = _other_char_ir(tuple(sorted(chars)))
    if o is not None:
        parts.append(seq(o, _TAIL))
    for c, b in zip(chars, below):
        enc = _canonical_char_ir(((ord(c), ord(c)),))
        if enc is not None:  # a lone surrogate in a name has no canonical spelling
            parts.append(seq(enc, b))
    if not ends:  # not a listed name: the string may end here
        parts.append(_QUOTE)
    # the branches start with different characters: an Alt built directly (``alt()`` would
    # hash every branch, and hashing a node hashes its whole subtree, recursively)
    return (parts[0] if len(parts) == 1 else Alt(tuple(parts))) if parts else NOTHING


#: :func:`_key_chain_ir` by the rest of a name, for the process (cleared whole when full): the
#: same property names recur in the objects of a schema and across schemas
_KEY_CHAINS: dict[str, Any] = {}
_KEY_CHAINS_MAX = 1 << 15
#: rests of names up to this many characters are memoised: a longer name's chain is built from
#: its memoised last :data:`KEY_CHAIN_MEMO_LEN` characters, the rest built and not kept (every
#: suffix of a 40,000-character name as a key held 8e8 characters, ~1 GB, for the process)
KEY_CHAIN_MEMO_LEN = 256


def _key_chain_ir(rest: str):
    """IR of a key-trie node from which one name's ``rest`` alone goes on (:func:`_chain_rest`):
    :func:`_key_node_ir` along the chain, bottom-up from its longest rest already built; every
    rest of at most :data:`KEY_CHAIN_MEMO_LEN` characters is memoised (``firstName`` and
    ``lastName`` share ``Name``'s), so the memo holds at most ``_KEY_CHAINS_MAX`` entries of at
    most that many characters."""
    n = len(rest)
    cut = max(0, n - KEY_CHAIN_MEMO_LEN)
    tail = rest[cut:]  # the longest rest that is memoised
    hit = _KEY_CHAINS.get(tail)
    if hit is None:
        m = len(tail)
        j = 1
        while j <= m:
            hit = _KEY_CHAINS.get(tail[j:])  # (a read that another thread's clear cannot fail)
            if hit is not None:
                break
            j += 1
        if hit is None:
            j = m
            hit = _key_node_ir([], True, [])
        if len(_KEY_CHAINS) + j + 1 > _KEY_CHAINS_MAX:
            _KEY_CHAINS.clear()
        _KEY_CHAINS[tail[j:]] = hit
        for i in range(j - 1, -1, -1):
            hit = _KEY_CHAINS[tail[i:]] = _key_node_ir([tail[i]], False, [hit])
    for i in range(cut - 1, -1, -1):  # the characters before the memoised rest: built, not kept
        hit = _key_node_ir([rest[i]], False, [hit])
    return hit


def _grammar(c: _Compiler, root_text: str | None, root_where: str):
    from ..ir import Grammar

    texts = dict(c.rules)
    where = dict(c.rule_where)
    root = JSON_VALUE_RULE
    m = re.fullmatch(r"\(\?&([^)]*)\)", root_text or "")
    if m:  # the root is one call: that rule is the root
        root, root_text = m.group(1), None
    if root_text is not None:
        root = ROOT_RULE
        texts = {ROOT_RULE: root_text, **texts}
        where[ROOT_RULE] = root_where
    rules = {name: parse_rule(t, where.get(name)) for name, t in texts.items()}
    rules.update(c.ir_rules)
    g = Grammar(rules, root, origin=where)
    g.keep_calls = {r for r in SHARED_RULES if r in rules} | (c.keep_calls & set(rules))
    return _prune(g, c.empty_reason)


def _prune(g, why):
    """Drop rules that produce no string (their calls become NOTHING, simplified away) and rules
    the root no longer reaches; a root that produces none becomes NOTHING with ``why(cycles)`` as
    its :attr:`~structgate.native.ir.Grammar.empty_reason` (``cycles``: the reachable rules on a
    reference cycle that produce nothing, root-first)."""
    from ..ir import NOTHING, Grammar, Ref
    from ..regex.parser import EMPTY, Alt, Concat, Repeat, repeat_node

    prod = g.productive_rules()
    if g.root not in prod:
        out = Grammar({g.root: NOTHING}, g.root, origin={g.root: g.origin.get(g.root, "")})
        rec = g.recursive_rules()
        out.empty_reason = why([r for r in g.reachable() if r not in prod and r in rec])
        return out
    reach = g.reachable()
    if all(r in prod for r in reach):
        if len(reach) == len(g.rules):
            g.__dict__["_productive_memo"] = (g.rules, prod)  # for check() and all_productive()
            return g
        return g.derived({r: g.rules[r] for r in reach}, origin={r: g.origin[r] for r in reach if r in g.origin},
                         keep_calls=g.keep_calls & set(reach))
    memo: dict[int, Any] = {}

    def simplify(node):
        # iterative post-order over the (hash-consed) AST
        stack = [(node, False)]
        while stack:
            n, done = stack.pop()
            if id(n) in memo:
                continue
            kids = n.items if isinstance(n, (Concat, Alt)) else (n.item,) if isinstance(n, Repeat) else ()
            if not done and kids:
                stack.append((n, True))
                stack.extend((k, False) for k in kids if id(k) not in memo)
                continue
            if isinstance(n, Ref):
                out = n if n.name in prod else NOTHING
            elif isinstance(n, Concat):
                xs = [memo[id(k)] for k in n.items]
                out = NOTHING if any(x == NOTHING for x in xs) else Concat(tuple(xs))
            elif isinstance(n, Alt):
                xs = tuple({id(x): x for x in (memo[id(k)] for k in n.items) if x != NOTHING}.values())
                out = NOTHING if not xs else xs[0] if len(xs) == 1 else Alt(xs)
            elif isinstance(n, Repeat):
                x = memo[id(n.item)]
                out = (EMPTY if n.min == 0 else NOTHING) if x == NOTHING else repeat_node(x, n.min, n.max)
            else:
                out = n
            memo[id(n)] = out
        return memo[id(node)]

    rules = {r: simplify(g.rules[r]) for r in reach if r in prod}
    g2 = g.derived(rules, origin={r: g.origin[r] for r in rules if r in g.origin}, keep_calls=set())
    reach2 = g2.reachable()
    g2.rules = {r: g2.rules[r] for r in reach2}
    g2.keep_calls = g.keep_calls & set(reach2)
    return g2
