"""Emitter for ``array`` values: ``prefixItems``, ``items``, length bounds, ``uniqueItems`` over a
finite item set."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import ANNOTATIONS, _json_equal, _ptr


class ArrayMixin:
    """Arrays (part of ``compiler._Compiler``)."""

    def array(self, schema, where):
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

        def rest(j: int) -> str:
            """Elements from position j on, j >= 1 elements already written."""
            if cap is not None and j >= cap:
                return ""
            if j < len(pre):
                e = comma + pre[j] + rest(j + 1)
                return e if j < mn else f"(?:{e})?"
            lo = max(mn - j, 0)
            hi = None if cap is None else cap - j
            if item is None or hi == 0:
                return ""
            return self._rep(comma + item, lo, hi)

        if cap == 0:
            ne = None
        elif pre:
            ne = pre[0] + rest(1)
        elif item is None:
            ne = None
        else:
            ne = item + rest(1)
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
