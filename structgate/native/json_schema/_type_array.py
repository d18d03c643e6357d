"""Emitter for ``array`` values: ``prefixItems``, ``items``, length bounds, ``uniqueItems`` over a
finite item set."""
from __future__ import annotations

import itertools
import json

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ._automata import CPDFA, trim
from ._common import _CONTAINS_ALL, ANNOTATIONS, _json_equal, _ptr
from ._numeric import alt


#: in grammar mode, the optional ``prefixItems`` positions nest in the regex text at most this deep
#: before the rest becomes a rule (1,000 positions nested 1,000 deep: ``nesting_depth``)
PREFIX_CHUNK = 64
#: most different ``contains`` of merged ``allOf`` members counted together (each element is in one
#: of ``2**n`` classes, each a schema compiled on its own)
MAX_CONTAINS = 4


class ArrayMixin:
    """Arrays (part of ``compiler._Compiler``)."""

    def array(self, schema, where):
        if "contains" in schema or _CONTAINS_ALL in schema:
            # (a oneOf expansion reaches the same array many times: Github_trivial---o25751 73
            # times, 11 different ones; each compiles 2**n element classes)
            key = ("contains", self.depth, json.dumps(schema, sort_keys=True, default=repr))
            if key not in self._dfa_texts:
                self._dfa_texts[key] = self._contains(schema, where)
            return self._dfa_texts[key]
        for kw, ok in (("uniqueItems", lambda v: v is False), ("contains", None), ("minContains", None),
                       ("maxContains", None), ("unevaluatedItems", None)):
            if kw in schema:
                if ok is not None and ok(schema[kw]):
                    continue
                if kw == "uniqueItems" and "maxItems" in schema and self._count(schema, "maxItems", where) <= 1:
                    continue
                if kw == "uniqueItems" and schema[kw] is True:
                    r = self._unique_finite(schema, where)
                    if r is not False:
                        return r
                if kw in ("minContains", "maxContains") and "contains" not in schema:
                    continue
                if kw == "unevaluatedItems" and (schema[kw] is True):
                    continue
                raise UnsupportedFeatureError(kw, "", _ptr(where, kw))
        mn = self._count(schema, "minItems", where) if "minItems" in schema else 0
        mx = self._count(schema, "maxItems", where) if "maxItems" in schema else None
        prefix = schema.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise GrammarSyntaxError("prefixItems must be an array", json.dumps(prefix), 0, _ptr(where, "prefixItems"))
        pre: list[str] = []
        cap = mx
        for i, p in enumerate(prefix):
            r = self.value(p, _ptr(where, "prefixItems", i))
            if r is None:
                cap = i if cap is None else min(cap, i)
                break
            pre.append(r)
        k = len(prefix)
        if not prefix and "items" not in schema and mn == 0 and mx is None:
            return self._array_of(self.any_value(max(self.depth - 1, 0)))
        if len(pre) == k:
            items = schema.get("items", True)
            item = self.value(items, _ptr(where, "items")) if "items" in schema else self.any_value()
            if item is None:
                cap = k if cap is None else min(cap, k)
        else:
            item = None
        if cap is not None and mn > cap:
            return None
        ws, comma = self.ws, self.comma

        def tail(j: int) -> str:
            """Elements from position ``j >= len(pre)`` on (``j >= 1`` elements already written)."""
            if cap is not None and j >= cap:
                return ""
            lo = max(mn - j, 0)
            hi = None if cap is None else cap - j
            if item is None or hi == 0:
                return ""
            return self._rep(comma + item, lo, hi)

        def rest(j0: int) -> str:
            """Elements from position ``j0 >= 1`` on: each optional one nests the next, built from
            the last (no recursion: thousands of positions); in grammar mode every
            :data:`PREFIX_CHUNK` positions the text so far becomes a rule, so the nesting of the
            regex text stays bounded too."""
            end = len(pre) if cap is None else min(len(pre), cap)
            r = tail(len(pre)) if end == len(pre) else ""
            for j in range(end - 1, j0 - 1, -1):
                e = comma + pre[j] + r
                r = e if j < mn else f"(?:{e})?"
                if self.grammar and j > j0 and (end - j) % PREFIX_CHUNK == 0:
                    r = self.as_rule(r, _ptr(where, "prefixItems", j))
            return r

        if cap == 0:
            ne = None
        elif pre:
            ne = pre[0] + rest(1)
        elif item is None:
            ne = None
        else:
            ne = item + tail(1)
        if ne is None:
            return rf"\[{ws}\]" if mn == 0 else None
        if mn == 0:
            return rf"\[{ws}(?:{ne}{ws})?\]"
        return rf"\[{ws}{ne}{ws}\]"

    def _unique_finite(self, schema, where):
        """``uniqueItems: true`` over a finite item set (enum/const/boolean/null items, no
        prefixItems): distinct values in the order of the value list, a linear chain like the
        optional-property one (sound subset: other orders are not generated). Returns False when
        this form does not apply (the caller raises UnsupportedFeatureError)."""
        if schema.get("prefixItems") or "items" not in schema:
            return False
        item = self._deref(schema["items"])
        if not isinstance(item, dict):
            return False
        keys = set(item) - ANNOTATIONS
        if keys & {"enum", "const"}:
            cands = [item["const"]] if "const" in item else list(item.get("enum", []))
            if not isinstance(item.get("enum", []), list):
                return False
            rest = {k: v for k, v in item.items() if k not in ANNOTATIONS}
            if set(rest) - {"enum", "const"}:
                v = self._validator_for(item)
                cands = [c for c in cands if v.is_valid(c)]
        elif keys == {"type"} and item["type"] in ("boolean", "null", ["boolean", "null"], ["null", "boolean"]):
            t = item["type"]
            cands = ([True, False] if "boolean" in t else []) + ([None] if "null" in t else [])
        else:
            return False
        vals: list = []
        for c in cands:
            if not any(_json_equal(c, x) for x in vals):
                vals.append(c)
        mn = self._count(schema, "minItems", where) if "minItems" in schema else 0
        mx = self._count(schema, "maxItems", where) if "maxItems" in schema else None
        if mn > len(vals) or (mx is not None and mx < mn):
            return None
        if mn > 1 or (mx is not None and mx < len(vals)):
            return False
        regs = [self.const(v, _ptr(where, "items")) for v in vals]
        comma, ws = self.comma, self.ws
        nxt = None
        for r in reversed(regs):
            nxt = r if nxt is None else f"(?:(?:{r}{comma})?{nxt}|{r})"
        if nxt is None:
            return rf"\[{ws}\]"
        if mn == 0:
            return rf"\[{ws}(?:{nxt}{ws})?\]"
        return rf"\[{ws}{nxt}{ws}\]"

    @staticmethod
    def _rep(r: str, lo: int, hi: int | None) -> str:
        g = f"(?:{r})"
        if hi is None:
            return g + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
        if lo == hi:
            return "" if lo == 0 else (g if lo == 1 else g + f"{{{lo}}}")
        return g + ("?" if (lo, hi) == (0, 1) else f"{{{lo},{hi}}}")

    def _contains(self, schema, where):
        """``contains`` with ``minContains``/``maxContains`` (and ``items``, ``minItems``,
        ``maxItems``), exact; also several different ``contains`` of merged ``allOf`` members
        (``_CONTAINS_ALL``, at most :data:`MAX_CONTAINS`), each bounding its own count. Each element
        is in exactly one class ``items`` ∧ (``C_i`` or ``not C_i`` for every ``contains`` ``C_i``)
        (disjoint, so every count is known): an automaton over those classes whose state is
        (elements matching each ``C_i``, saturating; elements), bounded by
        ``options.extra["max_product_states"]``. When a ``not C`` has no positive form (see
        :meth:`_negate`), one ``contains`` and no maximum (``maxContains``, ``maxItems``), the
        exact form ``I* A I* A ... I*`` (``minContains`` times A, I = ``items``) is used;
        otherwise ``UnsupportedFeatureError("contains")``. With ``prefixItems``, ``uniqueItems:
        true`` or ``unevaluatedItems``: ``UnsupportedFeatureError``."""
        cw = _ptr(where, "contains")
        for kw in ("prefixItems", "unevaluatedItems"):
            if schema.get(kw) not in (None, [], True):
                raise UnsupportedFeatureError("contains", f"together with {kw}", cw)
        mn = self._count(schema, "minItems", where) if "minItems" in schema else 0
        mx = self._count(schema, "maxItems", where) if "maxItems" in schema else None
        if schema.get("uniqueItems") is True and not (mx is not None and mx <= 1):
            raise UnsupportedFeatureError("contains", "together with uniqueItems", cw)
        conts = []  # (contains, minimum, maximum or None)
        for c, lo, hi in (schema.get(_CONTAINS_ALL) or
                          [[schema["contains"], schema.get("minContains"), schema.get("maxContains")]]):
            kmin = 1 if lo is None else self._count({"minContains": lo}, "minContains", where)
            kmax = None if hi is None else self._count({"maxContains": hi}, "maxContains", where)
            if kmax is not None and kmin > kmax or mx is not None and kmin > mx:
                return None
            if kmin > 0 or kmax is not None:  # (else always satisfied)
                conts.append((c, kmin, kmax))
        rest = {k: v for k, v in schema.items() if k not in ("contains", "minContains", "maxContains", _CONTAINS_ALL)}
        if not conts:
            return self.array(rest, where)
        if len(conts) > MAX_CONTAINS:
            raise UnsupportedFeatureError("contains", f"{len(conts)} different contains in allOf members (at most "
                                          f"{MAX_CONTAINS}: every element is in one of 2**n classes)", cw)
        items = schema.get("items", True)
        signs = list(itertools.product((True, False), repeat=len(conts)))  # (all matching first)
        texts = []
        for sv in signs:
            cls = {"allOf": [items] + [c if m else {"not": c} for m, (c, _, _) in zip(sv, conts)]}
            if all(sv):  # (no negation: its errors are the schema's own)
                texts.append(self.value(cls, cw))
                continue
            try:
                texts.append(self.value(cls, cw))
            except UnsupportedFeatureError as e:
                _, kmin, kmax = conts[0]
                if len(conts) > 1 or kmax is not None or mx is not None or mn > kmin:
                    raise UnsupportedFeatureError("contains", "an exact count needs the negation of contains, "
                                                  f"which is not supported here ({e.feature}: {e.detail})", cw) from None
                return self._contains_at_least(items, texts[0], kmin, where)
        tops = [kmax if kmax is not None else kmin for _, kmin, kmax in conts]  # saturating counters
        top_n = mx if mx is not None else max([mn, 1] + [kmin for _, kmin, _ in conts])
        nv = len(signs)
        syms = texts + [None if t is None else self.comma + t for t in texts]
        start = (tuple(0 for _ in conts), 0)
        index = {start: 0}
        todo = [start]
        delta, accept = [], []
        i = 0
        while i < len(todo):
            cs, nn = todo[i]
            i += 1
            row = [-1] * (2 * nv)
            if mx is None or nn < mx:
                n2 = nn + 1 if mx is not None else min(nn + 1, top_n)
                for v, (sv, text) in enumerate(zip(signs, texts)):
                    if text is None:
                        continue
                    c2 = []
                    for m, cc, (_, _, kmax), top in zip(sv, cs, conts, tops):
                        cc = cc + 1 if m else cc
                        if kmax is None:
                            cc = min(cc, top)
                        elif cc > kmax:
                            break
                        c2.append(cc)
                    else:
                        tgt = (tuple(c2), n2)
                        j = index.get(tgt)
                        if j is None:
                            j = index[tgt] = len(todo)
                            if j >= self.max_product_states:
                                raise CompileLimitError("max_product_states", j + 1, self.max_product_states,
                                                        f"contains counting at {cw} needs a larger automaton", where=cw)
                            todo.append(tgt)
                        row[v + (0 if nn == 0 else nv)] = j
            delta.append(row)
            accept.append(nn >= mn and all(cc >= kmin for cc, (_, kmin, _) in zip(cs, conts)))
        d = trim(CPDFA([((s, s),) for s in range(2 * nv)], delta, accept))

        def enc(cs):
            return alt(syms[s] for a, b in cs for s in range(a, b + 1) if syms[s] is not None)

        body = self._emit_dfa(d, enc, "contains", cw, lazy=False)
        if body is None:
            return None
        ws = self.ws
        return rf"\[{ws}{body}{ws}\]"

    def _contains_at_least(self, items, a_text, k, where):
        """Arrays of ``items`` values with at least ``k >= 1`` elements in A (A ⊆ items):
        ``I* A (, I* A){k-1} I*`` with commas (exact: the first ``k`` matching elements are the A's)."""
        if a_text is None:
            return None
        item = self.value(items, _ptr(where, "items")) if items is not True else self.any_value()
        comma, ws = self.comma, self.ws
        i_pre = "" if item is None else f"(?:{item}{comma})*"
        i_post = "" if item is None else f"(?:{comma}{item})*"
        more = self._rep(f"{comma}{i_pre}{a_text}", k - 1, k - 1)
        return rf"\[{ws}{i_pre}{a_text}{more}{i_post}{ws}\]"
