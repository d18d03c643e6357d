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

if TYPE_CHECKING:
    from .compiler import _Compiler

#: the rule every unconstrained JSON string is matched through (called, not inlined: its masks,
#: which allow most of the vocabulary, are computed once per grammar, not once per position)
STRING_RULE = "__json_string"
#: the rule of the end of an object key that is not a listed name (any canonical characters,
#: then the closing quote), called from every branch of a key exclusion
KEY_TAIL_RULE = "__json_key_tail"
SHARED_RULES = (STRING_RULE, KEY_TAIL_RULE)

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
    from ..ir import NOTHING, Alt, Ref, lit, seq
    from ._type_string import names_trie

    trie = names_trie(names)
    tail = Ref(KEY_TAIL_RULE)
    quote = lit('"')
    # iterative post-order over the trie (names can be long)
    done: dict[int, Any] = {}
    stack = [(trie, False)]
    while stack:
        node, ready = stack.pop()
        chars = [c for c in node if c is not None]
        if not ready:
            stack.append((node, True))
            stack.extend((node[c], False) for c in chars)
            continue
        parts = []
        o = _other_char_ir(tuple(sorted(chars)))
        if o is not None:
            parts.append(seq(o, tail))
        for c in chars:
            enc = _canonical_char_ir(((ord(c), ord(c)),))
            if enc is not None:  # a lone surrogate in a name has no canonical spelling
                parts.append(seq(enc, done[id(node[c])]))
        if None not in node:  # not a listed name: the string may end here
            parts.append(quote)
        # the branches start with different characters: an Alt built directly (``alt()`` would
        # hash every branch, and hashing a node hashes its whole subtree, recursively)
        done[id(node)] = (parts[0] if len(parts) == 1 else Alt(tuple(parts))) if parts else NOTHING
    return seq(quote, done[id(trie)])


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
    the root no longer reaches; a root that produces none becomes NOTHING with ``why()`` as its
    :attr:`~structgate.native.ir.Grammar.empty_reason`."""
    from ..ir import NOTHING, Grammar, Ref
    from ..regex.parser import EMPTY, Alt, Concat, Repeat, repeat_node

    prod = g.productive_rules()
    if g.root not in prod:
        out = Grammar({g.root: NOTHING}, g.root, origin={g.root: g.origin.get(g.root, "")})
        out.empty_reason = why()
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
