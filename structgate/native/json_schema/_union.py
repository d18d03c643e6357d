"""``anyOf`` / ``oneOf``: alternation, and the disjointness checks that make ``oneOf`` compile as
``anyOf`` soundly (plus the exact ``oneOf`` of ``required``-only branches)."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import ANNOTATIONS, TYPES, _json_equal, _ptr
from ._numeric import alt


class UnionMixin:
    """``anyOf``/``oneOf`` (part of ``compiler._Compiler``)."""

    def union(self, schema, where):
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise GrammarSyntaxError(f"{key} must be a non-empty array", json.dumps(branches), 0, _ptr(where, key))
        rest = {k: v for k, v in schema.items() if k != key}
        constraining = {k for k in rest if k not in ANNOTATIONS}
        if key == "oneOf":
            try:
                self.check_disjoint(branches, rest, _ptr(where, key))
            except UnsupportedFeatureError:
                exact = self.oneof_of_required(branches)
                if exact is None:
                    raise
                branches = exact  # the same language as an anyOf (see oneof_of_required)
                if not branches:
                    return None
        outs = []
        for i, b in enumerate(branches):
            w = _ptr(where, key, i)
            sub = {"allOf": [rest, b]} if constraining else b
            r = self.value(sub, w)
            if r is not None:
                outs.append(r)
        return alt(outs)

    #: most anyOf branches :meth:`oneof_of_required` may write (each is a copy of the object regex)
    MAX_ONEOF_REQUIRED_BRANCHES = 64

    def oneof_of_required(self, branches) -> list | None:
        """``oneOf`` whose branches only list ``required`` keys, as an exact ``anyOf`` (or None).

        An object matches branch *i* iff ``R_i ⊆ keys``; exactly one branch matches iff, besides
        ``R_i``, every other ``R_j`` misses a key: ``∀ j≠i ∃ k ∈ R_j \\ R_i: k ∉ keys``. Each choice of
        missing keys is one anyOf branch ``{"type": "object", "required": R_i, "properties": {k:
        false, ...}}`` (only minimal choices are kept; a branch with some ``R_j ⊆ R_i`` can never
        be the only match and is dropped). Non-objects meet every ``required`` vacuously, so with two
        or more branches oneOf rejects them: hence ``"type": "object"``. This is the usual
        "exactly one of these keys" idiom (MaskBench ``Github_easy---o68297``,
        ``Glaiveai2K---calculate_area_*``). None when a branch has other keywords or the expansion
        would exceed :attr:`MAX_ONEOF_REQUIRED_BRANCHES`.
        """
        import itertools

        order = []  # each branch's keys, in the order they are written
        for b in branches:
            if not isinstance(b, dict) or set(b) - ANNOTATIONS != {"required"}:
                return None
            r = b["required"]
            if not isinstance(r, list) or not all(isinstance(k, str) for k in r):
                return None
            order.append(list(dict.fromkeys(r)))
        reqs = [frozenset(o) for o in order]
        out: list = []
        for i, ri in enumerate(reqs):
            misses = [sorted(rj - ri) for j, rj in enumerate(reqs) if j != i]
            if any(not m for m in misses):
                continue
            n = 1
            for m in misses:
                n *= len(m)
                if n > 4096:
                    return None
            choices = {frozenset(c) for c in itertools.product(*misses)}
            minimal = [c for c in choices if not any(o < c for o in choices)]
            for c in sorted(minimal, key=sorted):
                out.append({"type": "object", "required": order[i],
                            "properties": {k: False for k in sorted(c)}})
                if len(out) > self.MAX_ONEOF_REQUIRED_BRANCHES:
                    return None
        return out

    def _branch_types(self, b) -> set[str]:
        """Types a branch's values can have (a superset), for oneOf disjointness."""
        if b is True:
            return set(TYPES) - {"integer"}
        if b is False:
            return set()
        if not isinstance(b, dict):
            return set(TYPES) - {"integer"}  # malformed: value() raises GrammarSyntaxError later
        if "$ref" in b and len(b) == 1:
            try:
                return self._branch_types(self.resolve(b["$ref"], ""))
            except Exception:
                return set(TYPES) - {"integer"}
        ts = set(TYPES) - {"integer"}
        if "type" in b and isinstance(b["type"], (str, list)):
            t = b["type"]
            t = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)}
            ts = {("number" if x == "integer" else x) for x in t}
        vals = self._listed_values(b)
        if vals is not None:
            ts &= {self._type_of(v) for v in vals}
        return ts

    @staticmethod
    def _listed_values(s) -> list | None:
        """The values a schema's ``const`` or (well-formed) ``enum`` allows, else None."""
        if not isinstance(s, dict):
            return None
        if "const" in s:
            return [s["const"]]
        if "enum" in s and isinstance(s["enum"], list):
            return s["enum"]
        return None

    @staticmethod
    def _type_of(v) -> str:
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, (int, float)):
            return "number"
        if isinstance(v, str):
            return "string"
        if isinstance(v, list):
            return "array"
        return "object"

    def check_disjoint(self, branches, rest, where):
        """oneOf is compiled as anyOf: only sound if no value is valid in two branches."""
        n = len(branches)
        types = [self._branch_types(b) for b in branches]
        for i in range(n):
            for j in range(i + 1, n):
                if not (types[i] & types[j]):
                    continue
                bi, bj = branches[i], branches[j]
                if self._disjoint_values(bi, bj):
                    continue
                raise UnsupportedFeatureError(
                    "oneOf (overlapping branches)",
                    f"branches {i} and {j} may both match a value; oneOf is compiled as anyOf only "
                    "when the branches are provably disjoint (different types, distinct const/enum "
                    "values, disjoint numeric ranges, a property required by both with disjoint "
                    "values, or a key one requires and the other forbids)", where)

    def _disjoint_values(self, a, b, depth: int = 0) -> bool:
        """True when no JSON value is valid against both a and b (a sufficient check)."""
        if depth > 8:
            return False
        a, b = self._deref(a), self._deref(b)

        def vals(s):
            return self._listed_values(self._deref(s))

        va, vb = vals(a), vals(b)
        if va is not None and vb is not None:
            return not any(_json_equal(x, y) for x in va for y in vb)
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return False
        # numeric-only branches with disjoint intervals
        if self._branch_types(a) <= {"number"} and self._branch_types(b) <= {"number"}:
            try:
                (la, ha), (lb, hb) = self._bounds(a, ""), self._bounds(b, "")
            except GrammarSyntaxError:
                la = ha = lb = hb = None

            def below(hi, lo):  # every value <= hi is < every value >= lo
                return hi is not None and lo is not None and (
                    hi[0] < lo[0] or (hi[0] == lo[0] and (hi[1] or lo[1])))
            if below(ha, lb) or below(hb, la):
                return True
        pa, pb = a.get("properties", {}), b.get("properties", {})
        ra, rb = set(a.get("required", [])), set(b.get("required", []))
        if not (isinstance(pa, dict) and isinstance(pb, dict)):
            return False
        for k in set(pa) & set(pb) & ra & rb:  # a discriminator property
            x, y = vals(pa[k]), vals(pb[k])
            if x is not None and y is not None and not any(_json_equal(u, v) for u in x for v in y):
                return True
            if self._branch_types(self._deref(pa[k])).isdisjoint(self._branch_types(self._deref(pb[k]))) \
                    or self._disjoint_values(pa[k], pb[k], depth + 1):
                return True

        def forbids(s, props, k):
            if props.get(k) is False:
                return True
            return k not in props and s.get("additionalProperties") is False and not s.get("patternProperties")
        objects_only = self._branch_types(a) == {"object"} or self._branch_types(b) == {"object"}
        if objects_only:
            if any(forbids(b, pb, k) for k in ra) or any(forbids(a, pa, k) for k in rb):
                return True
        return False
