"""Grammar mode's last step: rule texts → :class:`structgate.native.ir.Grammar` (parsed with
``parse_regex(calls=True)``), and pruning of rules that produce nothing."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ._common import JSON_VALUE_RULE, ROOT_RULE

if TYPE_CHECKING:
    from .compiler import _Compiler


def _grammar(c: _Compiler, root_text: str | None, root_where: str):
    from ..ir import Grammar
    from ..regex.parser import parse_regex

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
    rules = {name: parse_regex(t, calls=True, where=where.get(name)) for name, t in texts.items()}
    g = Grammar(rules, root, origin=where)
    return _prune(g)


def _prune(g):
    """Drop rules that produce no string (their calls become NOTHING, simplified away) and rules
    the root no longer reaches."""
    from ..ir import NOTHING, Grammar, Ref
    from ..regex.parser import EMPTY, Alt, Concat, Repeat

    prod = g.productive_rules()
    if g.root not in prod:
        return Grammar({g.root: NOTHING}, g.root, origin={g.root: g.origin.get(g.root, "")})
    reach = g.reachable()
    if all(r in prod for r in reach):
        if len(reach) == len(g.rules):
            return g
        return Grammar({r: g.rules[r] for r in reach}, g.root, origin={r: g.origin[r] for r in reach if r in g.origin})
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
                out = (EMPTY if n.min == 0 else NOTHING) if x == NOTHING else Repeat(x, n.min, n.max)
            else:
                out = n
            memo[id(n)] = out
        return memo[id(node)]

    rules = {r: simplify(g.rules[r]) for r in reach if r in prod}
    g2 = Grammar(rules, g.root, origin={r: g.origin[r] for r in rules if r in g.origin})
    reach2 = g2.reachable()
    g2.rules = {r: g2.rules[r] for r in reach2}
    return g2
