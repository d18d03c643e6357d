"""``allOf`` merging: intersect a flat list of ref-free schemas into one schema (or raise
``UnsupportedFeatureError("allOf")`` where they cannot be intersected)."""
from __future__ import annotations

import json
import math
from itertools import product

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import (_ADDL_UNLESS, _CONTAINS_ALL, _FRACTIONAL, _MULT_INT, _NOT_BOOL, _NOT_INT, _NOT_MULT, _NOT_PATTERNS,
                      _NOT_STR, _PATTERNS, ANNOTATIONS,
                      KNOWN, TYPES, _is_num, _json_equal, _json_key, _ptr)


class MergeMixin:
    """``allOf`` intersection and numeric bounds (part of ``compiler._Compiler``)."""

    def merge(self, parts, where) -> dict | bool:
        """Intersect flat schemas into one dict, or raise UnsupportedFeatureError("allOf").

        Linear in the members and their ``required`` keys, ``properties`` keys and ``enum`` values
        (keys and values are matched through dicts and sets; the ``not`` of many values folded by
        :meth:`._negation.NegationMixin._negate_all` merges thousands of members), except: a key is
        checked against each member with ``additionalProperties``, and ``enum`` values without a
        :func:`._common._json_key` are compared one by one."""
        parts = [(s, w) for s, w in parts if s]
        if not parts:
            return True
        if len(parts) == 1:
            return parts[0][0]

        def unsup(detail, w=where):
            raise UnsupportedFeatureError("allOf", detail, w)

        m: dict = {}
        # types
        tsets = []
        for s, w in parts:
            if "type" in s:
                t = s["type"]
                tsets.append(set([t] if isinstance(t, str) else t))
        if tsets:
            ts = set(TYPES)
            for t in tsets:
                t = set(t)
                if "number" in t:
                    t.add("integer")
                ts &= t
            if "number" in ts and not all("number" in t for t in tsets):
                ts.discard("number")
            m["type"] = [t for t in TYPES if t in ts]
        # numeric bounds (draft-4 boolean exclusives normalised)
        lows, highs = [], []
        for s, w in parts:
            lo, hi = self._bounds(s, w)
            if lo:
                lows.append(lo)
            if hi:
                highs.append(hi)
        if lows:
            v, x = max(lows, key=lambda b: (b[0], b[1]))
            m["exclusiveMinimum" if x else "minimum"] = v
        if highs:
            v, x = min(highs, key=lambda b: (b[0], not b[1]))
            m["exclusiveMaximum" if x else "maximum"] = v
        for kw, f in (("minLength", max), ("maxLength", min), ("minItems", max), ("maxItems", min),
                      ("minProperties", max), ("maxProperties", min)):
            vals = [s[kw] for s, _ in parts if kw in s]
            if vals:
                m[kw] = f(vals)
        req = list(dict.fromkeys(r for s, _ in parts for r in s.get("required", [])))
        if req:
            m["required"] = req
        # enum / const → enum intersection
        enums = []
        for s, _ in parts:
            if "const" in s:
                enums.append([s["const"]])
            if "enum" in s:
                enums.append(list(s["enum"]))
        if enums:
            cur = enums[0]
            for e in enums[1:]:
                ks = {_json_key(x) for x in e}
                cur = [v for v in cur if (_json_key(v) in ks if _json_key(v) is not None
                                          else any(_json_equal(v, x) for x in e))]
            m["enum"] = cur
        # properties
        if any("patternProperties" in s or _ADDL_UNLESS in s for s, _ in parts):
            self._merge_pattern_members(parts, m)
        elif any(k in s for s, _ in parts for k in ("properties", "additionalProperties")):
            # key -> the indices of the members that list it; each key's value schemas are those
            # members' and, from each other member with additionalProperties, that (in member order)
            listed: dict = {}
            for i, (s, _) in enumerate(parts):
                for k in s.get("properties", {}):
                    listed.setdefault(k, []).append(i)
            with_ap = [i for i, (s, _) in enumerate(parts) if "additionalProperties" in s]
            props = {}
            for k, idx in listed.items():
                own = set(idx)
                subs = [parts[i][0]["properties"][k] if i in own else parts[i][0]["additionalProperties"]
                        for i in (sorted(own.union(with_ap)) if with_ap else idx)]
                props[k] = subs[0] if len(subs) == 1 else {"allOf": subs}
            if props:
                m["properties"] = props
            addl = [s["additionalProperties"] for s, _ in parts if "additionalProperties" in s]
            if addl:
                m["additionalProperties"] = addl[0] if len(addl) == 1 else {"allOf": addl}
        # arrays
        if any("prefixItems" in s for s, _ in parts):
            pre = [s for s, _ in parts if "prefixItems" in s]
            if len(pre) > 1:
                unsup("prefixItems in several allOf members")
            p = pre[0]
            others = [s["items"] for s, _ in parts if s is not p and "items" in s]
            m["prefixItems"] = [x if not others else {"allOf": [x] + others} for x in p["prefixItems"]]
        items = [s["items"] for s, _ in parts if "items" in s]
        if items:
            m["items"] = items[0] if len(items) == 1 else {"allOf": items}
        # contains: minContains/maxContains bound their own member's contains only, and have no
        # effect in a member without one (2020-12 Validation §6.4.4-5), so they never combine with
        # another member's contains
        # (several different ones: each counted on its own, :meth:`._type_array.ArrayMixin._contains`)
        cont = []
        for s, _ in parts:
            for c in s.get(_CONTAINS_ALL) or ([[s["contains"], s.get("minContains"), s.get("maxContains")]]
                                              if "contains" in s else []):
                if c not in cont:
                    cont.append(c)
        if cont:
            m.update({k: v for k, v in zip(("contains", "minContains", "maxContains"), cont[0]) if v is not None})
        if len(cont) > 1:
            m[_CONTAINS_ALL] = cont
        # strings
        # patterns: every one applies (the string emitter intersects their automata)
        pats = []
        for s, _ in parts:
            for p in s.get(_PATTERNS) or ([s["pattern"]] if "pattern" in s else []):
                if p not in pats:
                    pats.append(p)
        if pats:
            m["pattern"] = pats[0]
        if len(pats) > 1:
            m[_PATTERNS] = pats
        fmts = [s["format"] for s, _ in parts if "format" in s]
        if fmts:
            # asserted formats (self.formats) are constraints: two different ones would need the
            # product of their automata, so they are refused, never dropped; so are refused ones
            # (self.refused_formats: the string emitter raises for them); a format the compiler
            # does not assert is an annotation and gives way to an asserted one
            asserted = sorted({f for f in fmts if isinstance(f, str)
                               and (f in self.formats or f in self.refused_formats)})
            if len(asserted) > 1:
                unsup(f"two different formats ({', '.join(map(repr, asserted))}) cannot be intersected")
            m["format"] = asserted[0] if asserted else fmts[0]
        mult = [s["multipleOf"] for s, _ in parts if "multipleOf" in s]
        if mult and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in mult):
            # integers: a multiple of each is a multiple of their least common multiple (exact)
            mult = [math.lcm(*mult)]
        if mult:
            if any(x != mult[0] for x in mult):
                unsup("different multipleOf values")
            # 3 == 3.0, but a validator divides by a float in floating point (9007199254740993 is
            # a multiple of 3, not of 3.0; 2**60 one of 3.0, not of 3): the float one, which the
            # compiler reads that way, marked when an int was given too (both tests apply)
            m["multipleOf"] = next((x for x in mult if isinstance(x, float)), mult[0])
            if isinstance(m["multipleOf"], float) and (any(not isinstance(x, float) for x in mult)
                                                       or any(s.get(_MULT_INT) for s, _ in parts)):
                m[_MULT_INT] = True
        anyofs = [s["anyOf"] for s, _ in parts if "anyOf" in s]
        # oneOf: the first member's is kept (compiled with every merged keyword beside it); each
        # other member's becomes the anyOf of the same language (:meth:`._union.UnionMixin.oneof_as_anyof`,
        # its branches proved disjoint beside that member's own keywords, or each minus the
        # branches it may overlap), combined with the anyOfs below
        oneofs = [(s, w) for s, w in parts if "oneOf" in s]
        for s, w in oneofs[1:]:
            rest = {k: v for k, v in s.items() if k != "oneOf" and k not in ANNOTATIONS}
            branches = s["oneOf"]
            if not isinstance(branches, list) or not branches:
                raise GrammarSyntaxError("oneOf must be a non-empty array", json.dumps(branches), 0,
                                         _ptr(w, "oneOf"))
            anyofs.append([b for _, b, _ in self.oneof_as_anyof(branches, rest or None, _ptr(w, "oneOf"))]
                          or [False])
        # if/then/else: a member's then/else apply under its own if only, and an if without them
        # constrains nothing (2020-12 Core §10.2.2), so members' conditionals are never combined
        # across members (an if of one with the then of another); one member's conditional is kept
        # as it is, several become one anyOf each (both branches of one are disjoint: exact)
        conds = [(s, w) for s, w in parts if "if" in s and ("then" in s or "else" in s)]
        if len(conds) == 1:
            s, _ = conds[0]
            m.update({k: s[k] for k in ("if", "then", "else") if k in s})
        elif conds:
            anyofs.extend(self.conditional_branches(s, w) for s, w in conds)
        if len(anyofs) == 1:
            m["anyOf"] = anyofs[0]
        elif anyofs:
            combos = list(product(*anyofs)) if math.prod(len(a) for a in anyofs) <= 256 else None
            if combos is None:
                unsup("too many anyOf combinations")
            m["anyOf"] = [{"allOf": list(c)} for c in combos]
        if oneofs:
            m["oneOf"] = oneofs[0][0]["oneOf"]
        handled = {"patternProperties", _ADDL_UNLESS,
                   "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                   "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "required",
                   "const", "enum", "properties", "additionalProperties", "prefixItems", "items",
                   "pattern", "format", "multipleOf", "anyOf", "oneOf", "if", "then", "else",
                   "contains", "minContains", "maxContains"}
        nots = [s["not"] for s, _ in parts if "not" in s]
        if nots:
            m["not"] = nots[0] if len(nots) == 1 else {"anyOf": nots}  # ¬A ∧ ¬B = ¬(A ∨ B)
        for key in (_NOT_STR, _NOT_BOOL, _NOT_INT, _NOT_PATTERNS, _NOT_MULT):
            vals = [v for s, _ in parts for v in s.get(key, [])]
            if vals:
                m[key] = list(dict.fromkeys(vals))
        if any(s.get(_FRACTIONAL) for s, _ in parts):
            m[_FRACTIONAL] = True
        handled |= {"not", _NOT_STR, _NOT_BOOL, _NOT_INT, _MULT_INT, _PATTERNS, _NOT_PATTERNS, _CONTAINS_ALL, _FRACTIONAL,
                    _NOT_MULT}
        # dependencies: every member's apply, so their maps are united per key (names: the union
        # of the lists; schemas, or names beside a schema under draft 4-7 dependencies, where
        # names [d, ...] mean {required: [d, ...]}: the allOf); the compiler then writes them
        # exactly (compiler._Compiler._dependent_schemas)
        for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            maps = [(s[kw], w) for s, w in parts if kw in s]
            if len(maps) < 2 or not all(isinstance(v, dict) for v, _ in maps):
                continue  # (one, or a malformed one: the generic merge below, the emitters' errors)
            united: dict = {}
            for v, _ in maps:
                for k, x in v.items():
                    united.setdefault(k, []).append(x)
            out: dict = {}
            for k, xs in united.items():
                if kw != "dependentSchemas" and all(isinstance(x, list) and all(isinstance(n, str) for n in x)
                                                    for x in xs):
                    out[k] = list(dict.fromkeys(n for x in xs for n in x))
                    continue
                if kw == "dependentRequired":
                    continue  # (not lists of names: the generic merge below refuses the conflict)
                subs: list = []
                for x in xs:
                    x = {"required": x} if isinstance(x, list) else x
                    if x not in subs:
                        subs.append(x)
                out[k] = subs[0] if len(subs) == 1 else {"allOf": subs}
            if len(out) == len(united):
                m[kw] = out
                handled.add(kw)
        for s, w in parts:
            for k, v in s.items():
                if k in handled or k in ANNOTATIONS or k not in KNOWN:
                    continue  # unknown keywords (x-..., vendor extensions) are annotations
                if k in m and m[k] != v:
                    unsup(f"keyword {k!r} in several allOf members", _ptr(w, k))
                m[k] = v
        return m

    @staticmethod
    def _merge_pattern_members(parts, m: dict) -> None:
        """``properties``, ``patternProperties`` and ``additionalProperties`` of ``allOf`` members
        some of which have ``patternProperties``, into ``m``. A key's value must satisfy, in each
        member, that member's ``properties`` entry for it, every pattern of that member matching
        it, and, when it is neither, that member's ``additionalProperties``. So: ``properties`` and
        ``patternProperties`` are united (a name or pattern in several members: the ``allOf`` of
        theirs); ``additionalProperties`` is the ``allOf`` of every member's (the keys no pattern
        matches and no member lists); and each member's ``additionalProperties`` is also listed
        under :data:`._common._ADDL_UNLESS` with its own patterns and names, for the object
        emitter to apply to the other keys that member neither lists nor matches (another
        member's listed names and pattern keys). A member that is itself such a merge brings its
        own list."""
        props: dict = {}
        pats: dict = {}
        entries: list = []
        for s, _ in parts:
            for k, v in s.get("properties", {}).items():
                props.setdefault(k, []).append(v)
            for p, v in (s.get("patternProperties") or {}).items():
                pats.setdefault(p, []).append(v)
            if _ADDL_UNLESS in s:
                entries.extend(s[_ADDL_UNLESS])
            elif "additionalProperties" in s:
                entries.append((s["additionalProperties"], tuple(s.get("patternProperties") or ()),
                                tuple(s.get("properties", {}))))
        if props:
            m["properties"] = {k: v[0] if len(v) == 1 else {"allOf": v} for k, v in props.items()}
        if pats:
            m["patternProperties"] = {p: v[0] if len(v) == 1 else {"allOf": v} for p, v in pats.items()}
        if entries:
            m[_ADDL_UNLESS] = entries
            addl = [a for a, _, _ in entries]
            m["additionalProperties"] = addl[0] if len(addl) == 1 else {"allOf": addl}

    def _bounds(self, s, where):
        """((lo, lo_excl) | None, (hi, hi_excl) | None) from a schema's numeric keywords."""
        lo = hi = None
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if kw in s and not _is_num(s[kw]) and not (kw.startswith("exclusive") and isinstance(s[kw], bool)):
                raise GrammarSyntaxError(f"{kw} must be a number", json.dumps(s[kw]), 0, _ptr(where, kw))
        if "minimum" in s:
            lo = (s["minimum"], s.get("exclusiveMinimum") is True)
        if _is_num(s.get("exclusiveMinimum")):
            c = (s["exclusiveMinimum"], True)
            lo = c if lo is None or c[0] >= lo[0] else lo
        if "maximum" in s:
            hi = (s["maximum"], s.get("exclusiveMaximum") is True)
        if _is_num(s.get("exclusiveMaximum")):
            c = (s["exclusiveMaximum"], True)
            hi = c if hi is None or c[0] <= hi[0] else hi
        return lo, hi
