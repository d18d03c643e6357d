"""Structural tags (vLLM's ``structural_tag`` request kind) → native :class:`~structgate.native.ir.Grammar`.

Two spellings are accepted, the two vLLM accepts:

* the **legacy** form ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}, ...],
  "triggers": [...]}`` — free text; wherever a trigger appears the output continues with the rest of
  a ``begin`` that starts with that trigger, a JSON value valid against that structure's ``schema``
  and its ``end``; then free text again (any number of times). It is read exactly as XGrammar's
  ``StructuralTag.from_legacy_structural_tag`` reads it: one ``triggered_tags`` format.
* the **format** form ``{"type": "structural_tag", "format": {...}}`` of XGrammar 0.2.8
  (``xgrammar.structural_tag``), with these formats:

  ====================  ==========================================================================
  ``const_string``      ``value`` exactly
  ``json_schema``       a JSON value valid against ``json_schema`` (``style: "json"`` only)
  ``regex``             a full match of ``pattern`` (native regex dialect)
  ``grammar``           a GBNF/EBNF ``grammar`` (through the native GBNF front end, when installed)
  ``any_text``          any text not containing one of ``excludes`` (``max_chars`` without excludes)
  ``sequence`` / ``or`` the elements one after the other / any one of them
  ``optional`` / ``star`` / ``plus`` / ``repeat``  ``content`` 0-1 / 0+ / 1+ / ``min``..``max`` times
  ``tag``               ``begin`` ``content`` one of ``end`` (a string or a list)
  ``triggered_tags``    free text with ``tags`` dispatched on ``triggers`` (``at_least_one``,
                        ``stop_after_first``, ``excludes``)
  ``tags_with_separator``  ``tags`` joined by ``separator`` (``at_least_one``, ``stop_after_first``)
  ``dispatch``          free text with ``rules`` ``[pattern, format]`` dispatched on ``pattern``
                        (``loop``, ``excludes``)
  ====================  ==========================================================================

  The token-level formats (``token``, ``exclude_token``, ``any_tokens``, ``token_triggered_tags``,
  ``token_dispatch``), the XML styles of ``json_schema``, ``any_order``, per-format ``excludes`` on
  ``json_schema``, ``any_text.max_tokens`` and ``max_chars`` together with excludes raise
  :class:`~structgate.errors.UnsupportedFeatureError` naming the field.

Semantics (checked string by string against XGrammar 0.2.8 in ``tests/test_structural_tag.py``)
----------------------------------------------------------------------------------------------
*Free text* of a ``triggered_tags`` / ``dispatch`` format is scanned left to right: as soon as an
``excludes`` string ends the output is rejected; otherwise as soon as a trigger ends the output
must continue with that trigger's tag (rest of ``begin``, content, ``end``) — the **first**
occurrence dispatches (``x<<f>`` with trigger ``<f`` dispatches after ``x<<f``, not earlier). The
free text may stop anywhere no trigger has completed (also in the middle of a trigger), and then
the next format of an enclosing ``sequence`` follows (plain concatenation). With
``stop_after_first`` at most one tag is dispatched; with ``at_least_one`` the output starts with a
tag (no free text before the first one, as XGrammar compiles it). Inside a ``tag``, every
``any_text`` and ``triggered_tags`` of its content (not of nested tags) also excludes the tag's
``end`` strings (XGrammar's rule), so the content cannot run past the first ``end``.

Each free-text language is built as a regular expression from the Aho-Corasick automaton of the
trigger and exclude strings (for one string: the KMP automaton) by state elimination, deepest
states first: "text in which no pattern ends" and, per trigger, "text whose first pattern
occurrence is this trigger, ending here". No rule recursion is introduced for free text.

Errors: a malformed spec raises :class:`~structgate.errors.InvalidConstraintError` whose message
names the field by JSON pointer (``/format/elements/2/end: ...``); a spec that is not JSON raises
:class:`~structgate.errors.GrammarSyntaxError` with the position.
"""
from __future__ import annotations

import json
import re
from collections import deque
from typing import Any

from ... import _jsontext
from ...errors import (CompileLimitError, GrammarSyntaxError, InvalidConstraintError, StructgateError,
                       UnsupportedFeatureError, nested_error, rebuilt)
from ..ir import (EMPTY, NOTHING, Alt, Anchor, Chars, Concat, Expr, Grammar, Ref, Repeat, alt, chars, lit, opt,
                  plus, rep, seq, star)
from ..regex.parser import MAX_CP, negate_ranges, normalize_ranges

__all__ = ["structural_tag_to_grammar", "legacy_to_format", "free_text_parts", "ANY_CHAR"]

#: one code point (any scalar value; surrogates have no UTF-8 encoding)
ANY_CHAR = Chars(((0, MAX_CP),))

#: bound on the size of one free-text expression (state elimination can grow with many patterns)
MAX_FREE_TEXT_NODES = 200_000

_TOKEN_FORMATS = ("token", "exclude_token", "any_tokens", "token_triggered_tags", "token_dispatch")


_CONVERTED_TAG = re.compile(r"(^|[\s(])/tags/(\d+)(/content)?")


def _legacy_located(e: StructgateError) -> StructgateError:
    """``e`` raised for the format :func:`legacy_to_format` made of a legacy spec, with that
    format's paths (``/tags/i``, ``/tags/i/content``) written as the legacy fields they came from
    (``/structures/i``, ``/structures/i/schema``)."""
    def fix(text):
        if not isinstance(text, str):
            return text
        return _CONVERTED_TAG.sub(lambda m: f"{m[1]}/structures/{m[2]}" + ("/schema" if m[3] else ""), text)

    return rebuilt(e, args=tuple(fix(a) for a in e.args), **{k: fix(v) for k, v in e.__dict__.items()})


def _bad(path: str, msg: str) -> InvalidConstraintError:
    return InvalidConstraintError(f"structural_tag {path or '/'}: {msg}")


# -- free text: Aho-Corasick automaton + state elimination ---------------------------------------
def free_text_parts(triggers: list[str], excludes: list[str]) -> tuple[Expr, list[Expr]]:
    """The free-text languages of a dispatch over ``triggers`` with ``excludes``.

    Parameters
    ----------
    triggers, excludes : list of non-empty str

    Returns
    -------
    free : Expr
        Strings in which no trigger and no exclude string occurs (the complement of
        ``Σ*(T1|...|E1|...)Σ*``).
    pre : list[Expr]
        ``pre[i]``: strings ``w`` that end with ``triggers[i]`` where that is the first occurrence
        of any pattern (no trigger or exclude ends earlier, no exclude ends at the same place).
        When two triggers end at the same place (one a suffix of the other) both ``pre`` sets
        contain the string.

    Raises
    ------
    InvalidConstraintError
        An empty pattern.
    CompileLimitError
        The expression would exceed :data:`MAX_FREE_TEXT_NODES` nodes.
    """
    pats = [(p, "t", i) for i, p in enumerate(triggers)] + [(p, "x", i) for i, p in enumerate(excludes)]
    if any(not p for p, _, _ in pats):
        raise InvalidConstraintError("an empty trigger or exclude string")
    # trie
    goto: list[dict[int, int]] = [{}]
    depth = [0]
    out_t: list[set[int]] = [set()]
    out_x: list[bool] = [False]
    for p, kind, i in pats:
        v = 0
        for ch in p:
            c = ord(ch)
            if c not in goto[v]:
                goto.append({})
                depth.append(depth[v] + 1)
                out_t.append(set())
                out_x.append(False)
                goto[v][c] = len(goto) - 1
            v = goto[v][c]
        if kind == "t":
            out_t[v].add(i)
        else:
            out_x[v] = True
    # failure links (BFS), outputs inherited along them
    fail = [0] * len(goto)
    order: list[int] = []
    q = deque(goto[0].values())
    while q:
        v = q.popleft()
        order.append(v)
        for c, w in goto[v].items():
            f = fail[v]
            while f and c not in goto[f]:
                f = fail[f]
            fail[w] = goto[f][c] if c in goto[f] and goto[f][c] != w else 0
            out_t[w] |= out_t[fail[w]]
            out_x[w] = out_x[w] or out_x[fail[w]]
            q.append(w)
    alphabet = sorted({ord(ch) for p, _, _ in pats for ch in p})

    def delta(v: int, c: int) -> int:
        while v and c not in goto[v]:
            v = fail[v]
        return goto[v].get(c, 0)

    live = [v for v in [0] + order if not out_x[v] and not out_t[v]]
    live_set = set(live)
    # GNFA: nodes = live states, "S" (start), "E" (end of free text), ("T", i) per trigger
    edges: dict[tuple, list[Expr]] = {}

    def add(p, q_, e: Expr) -> None:
        edges.setdefault((p, q_), []).append(e)

    other = Chars(negate_ranges(tuple((c, c) for c in alphabet)))
    add("S", 0, EMPTY)
    for v in live:
        add(v, "E", EMPTY)
        by_target: dict[Any, list[int]] = {}
        for c in alphabet:
            w = delta(v, c)
            if out_x[w]:
                continue
            if out_t[w]:
                for i in sorted(out_t[w]):
                    by_target.setdefault(("T", i), []).append(c)
            else:
                by_target.setdefault(w, []).append(c)
        for tgt, cs in by_target.items():
            add(v, tgt, Chars(normalize_ranges([(c, c) for c in cs])))
        if other.ranges:
            add(v, 0, other)
    for k in list(edges):
        edges[k] = [_alt_chars(edges[k])]
    # eliminate the live states, deepest first
    for v in sorted(live, key=lambda s: -depth[s]):
        loop = edges.pop((v, v), [None])[0]
        loop_e = star(loop) if loop is not None else EMPTY
        ins = [(p, e[0]) for (p, q_), e in list(edges.items()) if q_ == v and p != v]
        outs = [(q_, e[0]) for (p, q_), e in list(edges.items()) if p == v and q_ != v]
        for p, _ in ins:
            del edges[(p, v)]
        for q_, _ in outs:
            del edges[(v, q_)]
        for p, ein in ins:
            for q_, eout in outs:
                new = seq(ein, loop_e, eout)
                old = edges.get((p, q_))
                edges[(p, q_)] = [alt(old[0], new) if old else new]
        live_set.discard(v)
    free = edges.get(("S", "E"), [NOTHING])[0]
    pre = [edges.get(("S", ("T", i)), [NOTHING])[0] for i in range(len(triggers))]
    from ..regex.parser import ast_size

    n = ast_size(free) + sum(ast_size(x) for x in pre)
    if n > MAX_FREE_TEXT_NODES:
        raise CompileLimitError("structural_tag_free_text_nodes", n, MAX_FREE_TEXT_NODES,
                                "too many or too self-overlapping trigger / exclude strings")
    return free, pre


def _alt_chars(items: list[Expr]) -> Expr:
    cs = [x for x in items if isinstance(x, Chars)]
    rest = [x for x in items if not isinstance(x, Chars)]
    if len(cs) > 1:
        cs = [chars(r for c in cs for r in c.ranges)]
    return alt(*cs, *rest)


# -- the legacy form ----------------------------------------------------------------------------------
def legacy_to_format(spec: dict) -> dict:
    """The ``format`` form of a legacy ``{"structures": [...], "triggers": [...]}`` spec (one
    ``triggered_tags`` of ``tag`` formats with ``json_schema`` content), as XGrammar's
    ``StructuralTag.from_legacy_structural_tag`` builds it. A ``schema`` given as a JSON string is
    parsed.

    Raises
    ------
    InvalidConstraintError
        ``structures`` / ``triggers`` missing or of the wrong shape (the message names the field).
    GrammarSyntaxError
        A ``schema`` string that is not JSON.
    """
    structures = spec.get("structures")
    if not isinstance(structures, list):
        raise _bad("/structures", f"must be a list of {{begin, schema, end}} objects, got {type(structures).__name__}")
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers):
        raise _bad("/triggers", "must be a list of strings")
    tags = []
    for i, s in enumerate(structures):
        p = f"/structures/{i}"
        if not isinstance(s, dict):
            raise _bad(p, f"must be an object with begin, schema and end, got {type(s).__name__}")
        for k in ("begin", "end"):
            if not isinstance(s.get(k), str):
                raise _bad(f"{p}/{k}", "must be a string" if k in s else "is missing")
        if "schema" not in s:
            raise _bad(f"{p}/schema", "is missing")
        schema = s["schema"]
        if isinstance(schema, str):
            try:
                schema = _jsontext.loads(schema)
            except json.JSONDecodeError as e:
                raise GrammarSyntaxError(f"structural_tag {p}/schema is not valid JSON: {e.msg}", s["schema"],
                                         e.pos) from None
        if not isinstance(schema, (dict, bool)):
            raise _bad(f"{p}/schema", f"must be a JSON Schema (object or boolean), got {type(schema).__name__}")
        tags.append({"type": "tag", "begin": s["begin"], "content": {"type": "json_schema", "json_schema": schema},
                     "end": s["end"]})
    return {"type": "triggered_tags", "triggers": list(triggers), "tags": tags}


# -- the builder -----------------------------------------------------------------------------------
class _Builder:
    def __init__(self, options) -> None:
        from ...backends.interface import CompileOptions

        self.options = options if options is not None else CompileOptions()
        self.rules: dict[str, Expr] = {}
        self.origin: dict[str, str] = {}
        self.n = 0
        #: id(format dict) -> where its json_schema came from, for formats converted from the legacy
        #: spelling (errors name ``/structures/i/schema``, the field the user wrote)
        self.source: dict[int, str] = {}

    def new_rule(self, prefix: str, body: Expr, path: str) -> Ref:
        self.n += 1
        name = f"{prefix}_{self.n}"
        self.rules[name] = body
        self.origin[name] = f"structural_tag {path or '/'}"
        return Ref(name)

    # field helpers
    @staticmethod
    def field(f: dict, key: str, path: str, types, default=...):
        if key not in f:
            if default is ...:
                raise _bad(f"{path}/{key}", "is missing")
            return default
        v = f[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in (types if isinstance(types, tuple)
                                                                              else (types,))):
            names = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
            raise _bad(f"{path}/{key}", f"must be {names}, got {type(v).__name__}")
        return v

    def strings(self, f: dict, key: str, path: str, default=...) -> list[str]:
        v = self.field(f, key, path, list, default)
        for i, s in enumerate(v):
            if not isinstance(s, str):
                raise _bad(f"{path}/{key}/{i}", f"must be a string, got {type(s).__name__}")
        return list(v)

    def excludes(self, f: dict, path: str) -> list[str]:
        xs = self.strings(f, "excludes", path, [])
        for i, s in enumerate(xs):
            if not s:
                raise _bad(f"{path}/excludes/{i}", "an excluded string must not be empty (it would exclude every text)")
        return xs

    # formats
    def fmt(self, f: Any, path: str, ends: tuple[str, ...]) -> Expr:
        if not isinstance(f, dict):
            raise _bad(path, f"a format must be an object, got {type(f).__name__}")
        t = f.get("type")
        if not isinstance(t, str):
            raise _bad(f"{path}/type", "is missing" if t is None else "must be a string")
        if t in _TOKEN_FORMATS:
            raise UnsupportedFeatureError(f"structural_tag format {t!r}", "token-level formats depend on token ids; "
                                          "the native engine matches text", path)
        h = getattr(self, "f_" + t, None)
        if h is None:
            raise _bad(f"{path}/type", f"unknown format type {t!r}")
        return h(f, path, ends)

    def f_const_string(self, f, path, ends):
        return _lit(self.field(f, "value", path, str))

    def f_json_schema(self, f, path, ends):
        schema = self.field(f, "json_schema", path, (dict, bool))
        style = self.field(f, "style", path, str, "json")
        if style != "json":
            raise UnsupportedFeatureError(f"json_schema style {style!r}", "only style 'json' is supported natively",
                                          f"{path}/style")
        if self.field(f, "any_order", path, bool, False):
            raise UnsupportedFeatureError("json_schema any_order", "", f"{path}/any_order")
        if self.excludes(f, path):
            raise UnsupportedFeatureError("json_schema excludes", "", f"{path}/excludes")
        options = self.options
        mw = self.field(f, "max_whitespace_cnt", path, (int, type(None)), None)
        if mw is not None:
            if mw < 0:
                raise _bad(f"{path}/max_whitespace_cnt", "must be >= 0")
            options = options.updated(max_whitespace=int(mw))
        return self.schema(schema, options, path, self.source.get(id(f), f"{path}/json_schema"))

    def schema(self, schema, options, path: str, where: str) -> Expr:
        from .. import json_schema as js

        try:
            g = js.schema_to_grammar(schema, options)
            if g.empty_reason:  # a tag whose schema admits no value: never a silently dead branch
                raise InvalidConstraintError(g.empty_reason)
        except StructgateError as e:  # located from the tag's side: /format/json_schema/properties/a
            raise nested_error(e, f"structural_tag {where}") from None
        return self.merge(g, path)

    def merge(self, g: Grammar, path: str) -> Ref:
        """Add the rules of ``g`` under fresh prefixed names; the reference to its root."""
        self.n += 1
        prefix = f"g{self.n}_"
        mapping = {r: prefix + r for r in g.rules}
        for r, body in g.rules.items():
            self.rules[mapping[r]] = _rename(body, mapping)
            self.origin[mapping[r]] = f"structural_tag {path} ({g.origin.get(r, r)})"
        return Ref(mapping[g.root])

    def f_regex(self, f, path, ends):
        from ..regex.parser import parse_regex

        pat = self.field(f, "pattern", path, str)
        return self.new_rule("regex", _strip_anchors(parse_regex(pat, where=f"structural_tag {path}/pattern"),
                                                     path), path)

    def f_grammar(self, f, path, ends):
        text = self.field(f, "grammar", path, str)
        try:
            from .gbnf import parse_gbnf
        except ImportError:  # pragma: no cover - the GBNF front end ships with structgate
            raise UnsupportedFeatureError("structural_tag format 'grammar'", "the native GBNF front end is not "
                                          "available", path) from None
        try:
            g = parse_gbnf(text, dialect="ebnf")
        except StructgateError as e:
            raise nested_error(e, f"structural_tag {path}/grammar") from None
        return self.merge(g, path)

    def f_any_text(self, f, path, ends):
        xs = self.excludes(f, path) + [e for e in ends if e]
        if self.field(f, "max_tokens", path, (int, type(None)), None) is not None:
            raise UnsupportedFeatureError("any_text max_tokens", "a token budget depends on the tokenization",
                                          f"{path}/max_tokens")
        mc = self.field(f, "max_chars", path, (int, type(None)), None)
        if mc is not None:
            if mc < 0:
                raise _bad(f"{path}/max_chars", "must be >= 0")
            if xs:
                raise UnsupportedFeatureError("any_text max_chars with excludes (or inside a tag)", "",
                                              f"{path}/max_chars")
            return rep(ANY_CHAR, 0, mc)
        if not xs:
            return star(ANY_CHAR)
        free, _ = free_text_parts([], xs)
        return self.new_rule("text", free, path)

    def f_sequence(self, f, path, ends):
        els = self.field(f, "elements", path, list)
        if not els:
            raise _bad(f"{path}/elements", "a sequence needs at least one element")
        return seq(*(self.fmt(e, f"{path}/elements/{i}", ends) for i, e in enumerate(els)))

    def f_or(self, f, path, ends):
        els = self.field(f, "elements", path, list)
        if not els:
            raise _bad(f"{path}/elements", "an or needs at least one element")
        return alt(*(self.fmt(e, f"{path}/elements/{i}", ends) for i, e in enumerate(els)))

    def f_optional(self, f, path, ends):
        return opt(self.fmt(self.field(f, "content", path, dict), f"{path}/content", ends))

    def f_star(self, f, path, ends):
        return star(self.fmt(self.field(f, "content", path, dict), f"{path}/content", ends))

    def f_plus(self, f, path, ends):
        return plus(self.fmt(self.field(f, "content", path, dict), f"{path}/content", ends))

    def f_repeat(self, f, path, ends):
        lo = self.field(f, "min", path, int)
        hi = self.field(f, "max", path, int)
        if lo < 0 or (hi != -1 and hi < lo):
            raise _bad(path, f"repeat bounds min={lo}, max={hi} are invalid (max -1 = unbounded)")
        return rep(self.fmt(self.field(f, "content", path, dict), f"{path}/content", ends), lo,
                   None if hi == -1 else hi)

    def tag_parts(self, f, path) -> tuple[str, tuple[str, ...]]:
        if not isinstance(f, dict):
            raise _bad(path, f"a tag must be an object, got {type(f).__name__}")
        if f.get("type", "tag") != "tag":
            raise _bad(f"{path}/type", f"must be 'tag', got {f.get('type')!r}")
        begin = f.get("begin")
        if isinstance(begin, dict):
            raise UnsupportedFeatureError("tag begin as a token", "token-level formats depend on token ids",
                                          f"{path}/begin")
        if not isinstance(begin, str):
            raise _bad(f"{path}/begin", "is missing" if begin is None else "must be a string")
        end = f.get("end")
        if isinstance(end, dict):
            raise UnsupportedFeatureError("tag end as a token", "token-level formats depend on token ids",
                                          f"{path}/end")
        if isinstance(end, str):
            ends = (end,)
        elif isinstance(end, list) and end and all(isinstance(e, str) for e in end):
            ends = tuple(end)
        else:
            raise _bad(f"{path}/end", "is missing" if end is None else "must be a string or a non-empty list of strings")
        if "content" not in f:
            raise _bad(f"{path}/content", "is missing")
        return begin, ends

    def tag_body(self, f, path) -> tuple[str, Expr, Expr]:
        """``(begin, content, end)`` of a tag: the content as one rule reference (shared by the
        tag's uses), ``end`` the alternation of its end strings."""
        begin, ends = self.tag_parts(f, path)
        content = self.fmt(f["content"], f"{path}/content", ends)
        if not isinstance(content, Ref):
            content = self.new_rule("content", content, f"{path}/content")
        return begin, content, alt(*(lit(e) if e else EMPTY for e in ends))

    def f_tag(self, f, path, ends):
        begin, content, end = self.tag_body(f, path)
        return self.new_rule("tag", seq(_lit(begin), content, end), path)

    def dispatch(self, triggers: list[str], groups: list[Expr], loop: bool, excludes: list[str], path: str) -> Expr:
        free, pre = free_text_parts(triggers, excludes)
        step = alt(*(seq(p, g) for p, g in zip(pre, groups)))
        if loop:
            body = seq(star(self.new_rule("dispatch_step", step, path)), free)
        else:
            body = alt(free, step)
        return self.new_rule("dispatch", body, path)

    def f_triggered_tags(self, f, path, ends):
        triggers = self.strings(f, "triggers", path)
        if not triggers:
            raise _bad(f"{path}/triggers", "must not be empty")
        for i, t in enumerate(triggers):
            if not t:
                raise _bad(f"{path}/triggers/{i}", "a trigger must not be empty")
        tags = self.field(f, "tags", path, list)
        if not tags:
            raise _bad(f"{path}/tags", "must not be empty")
        at_least_one = self.field(f, "at_least_one", path, bool, False)
        stop_after_first = self.field(f, "stop_after_first", path, bool, False)
        xs = self.excludes(f, path) + [e for e in ends if e]
        groups: list[list[Expr]] = [[] for _ in triggers]
        whole: list[Expr] = []
        for j, tg in enumerate(tags):
            p = f"{path}/tags/{j}"
            begin, _ = self.tag_parts(tg, p)
            hits = [i for i, t in enumerate(triggers) if begin.startswith(t)]
            if not hits:
                raise _bad(f"{p}/begin", f"{begin!r} does not start with any trigger")
            if len(hits) > 1:
                raise _bad(f"{p}/begin", f"{begin!r} starts with several triggers: {[triggers[i] for i in hits]}")
            _, content, end = self.tag_body(tg, p)
            whole.append(seq(_lit(begin), content, end))
            groups[hits[0]].append(seq(_lit(begin[len(triggers[hits[0]]):]), content, end))
        keep = [i for i, g in enumerate(groups) if g]
        trig = [triggers[i] for i in keep]
        grp = [self.new_rule("tag_group", alt(*groups[i]), f"{path}/tags") for i in keep]
        # a trigger without tags still dispatches (and then nothing can follow): keep it with NOTHING
        for i, t in enumerate(triggers):
            if not groups[i]:
                trig.append(t)
                grp.append(NOTHING)
        first = self.new_rule("tag_first", alt(*whole), f"{path}/tags")
        if at_least_one and stop_after_first:
            return first
        if at_least_one:
            return seq(first, self.dispatch(trig, grp, True, xs, path))
        return self.dispatch(trig, grp, not stop_after_first, xs, path)

    def f_dispatch(self, f, path, ends):
        rules = self.field(f, "rules", path, list)
        if not rules:
            raise _bad(f"{path}/rules", "must not be empty")
        trig, grp = [], []
        for i, r in enumerate(rules):
            p = f"{path}/rules/{i}"
            if not (isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], str)):
                raise _bad(p, "a rule must be a [pattern, format] pair")
            if not r[0]:
                raise _bad(f"{p}/0", "a pattern must not be empty")
            trig.append(r[0])
            grp.append(self.fmt(r[1], f"{p}/1", ()))
        loop = self.field(f, "loop", path, bool, True)
        return self.dispatch(trig, grp, loop, self.excludes(f, path), path)

    def f_tags_with_separator(self, f, path, ends):
        tags = self.field(f, "tags", path, list)
        if not tags:
            raise _bad(f"{path}/tags", "must not be empty")
        sep = self.field(f, "separator", path, str)
        at_least_one = self.field(f, "at_least_one", path, bool, False)
        stop_after_first = self.field(f, "stop_after_first", path, bool, False)
        bodies = []
        for j, t in enumerate(tags):
            begin, content, end = self.tag_body(t, f"{path}/tags/{j}")
            bodies.append(seq(_lit(begin), content, end))
        one = self.new_rule("tags", alt(*bodies), f"{path}/tags")
        if stop_after_first:
            return one if at_least_one else opt(one)
        many = seq(one, star(seq(_lit(sep), one)))
        return many if at_least_one else opt(many)

    def f_qwen_xml_parameter(self, f, path, ends):
        raise UnsupportedFeatureError("structural_tag format 'qwen_xml_parameter'", "XML parameter styles are not "
                                      "supported natively", path)


def _lit(text: str) -> Expr:
    return lit(text) if text else EMPTY


def _strip_anchors(node: Expr, path: str) -> Expr:
    """Drop ``^``/``$`` at the very start / end of a content regex (the content is matched whole);
    an anchor elsewhere raises :class:`UnsupportedFeatureError`."""
    if isinstance(node, Concat):
        items = list(node.items)
        while items and isinstance(items[0], Anchor) and items[0].kind == "start":
            items.pop(0)
        while items and isinstance(items[-1], Anchor) and items[-1].kind == "end":
            items.pop()
        node = seq(*items) if items else EMPTY
    elif isinstance(node, Anchor):
        return EMPTY
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Anchor):
            raise UnsupportedFeatureError("anchor inside a structural-tag regex", "", path)
        if isinstance(n, (Concat, Alt)):
            stack.extend(n.items)
        elif isinstance(n, Repeat):
            stack.append(n.item)
    return node


def _rename(node: Expr, mapping: dict[str, str]) -> Expr:
    if isinstance(node, Ref):
        return Ref(mapping.get(node.name, node.name))
    if isinstance(node, Concat):
        return Concat(tuple(_rename(x, mapping) for x in node.items))
    if isinstance(node, Alt):
        return Alt(tuple(_rename(x, mapping) for x in node.items))
    if isinstance(node, Repeat):
        return Repeat(_rename(node.item, mapping), node.min, node.max)
    return node


def structural_tag_to_grammar(spec: dict | str, options=None) -> Grammar:
    """Compile a structural-tag spec (either form, see the module docstring) into a checked
    :class:`~structgate.native.ir.Grammar`.

    Parameters
    ----------
    spec : dict | str
        The spec, or its JSON text.
    options : CompileOptions | None
        JSON-schema content options (whitespace, additional properties, ...).

    Returns
    -------
    Grammar
        Root rule ``root``; rule origins name the spec field (JSON pointer) they come from.

    Raises
    ------
    GrammarSyntaxError
        ``spec`` text that is not JSON; invalid regex / grammar content (from those front ends).
    InvalidConstraintError
        A malformed spec; the message names the field by JSON pointer.
    UnsupportedFeatureError
        A token-level format or option the native engine cannot enforce (``.where`` = the field).
    CompileLimitError
        Free text over too many trigger / exclude strings.
    """
    if isinstance(spec, (str, bytes)):
        text = spec.decode("utf-8") if isinstance(spec, bytes) else spec
        try:
            spec = _jsontext.loads(text)
        except json.JSONDecodeError as e:
            raise GrammarSyntaxError(f"structural_tag is not valid JSON: {e.msg}", text, e.pos) from None
    if not isinstance(spec, dict):
        raise _bad("", f"must be a JSON object, got {type(spec).__name__}")
    t = spec.get("type", "structural_tag")
    if t != "structural_tag":
        raise _bad("/type", f"must be 'structural_tag', got {t!r}")
    b = _Builder(options)
    if "structures" in spec:
        fmt, path = legacy_to_format(spec), ""
        for i, tag in enumerate(fmt["tags"]):
            b.source[id(tag["content"])] = f"/structures/{i}/schema"
    elif "format" in spec:
        fmt, path = spec["format"], "/format"
    else:
        raise _bad("", "needs a 'format' (XGrammar's structural tag) or 'structures' and 'triggers' (the legacy form)")
    try:
        body = b.fmt(fmt, path, ())
    except StructgateError as e:
        if "structures" in spec:  # name the fields of the legacy spelling the user wrote
            raise _legacy_located(e) from None
        raise
    b.rules["root"] = body
    b.origin["root"] = "structural_tag /"
    return Grammar(b.rules, "root", origin=b.origin).check()
