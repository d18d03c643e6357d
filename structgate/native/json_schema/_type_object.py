"""Emitter for ``object`` values: ``properties`` in declared order (linear optional chain),
``required``, ``additionalProperties``, ``patternProperties``, ``dependentRequired``,
``min/maxProperties``."""
from __future__ import annotations

import json
import re

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._charset import STRING, literal_string_regex
from ._common import _ptr
from ._numeric import alt
from ._pattern import parse_pattern, pattern_body_regex
from ._type_string import _key_not_in


class ObjectMixin:
    """Objects (part of ``compiler._Compiler``)."""

    def _pattern_extras(self, pprops, pkeys, matching, names, where) -> str | None:
        """The extra members a ``patternProperties`` object may have: ``key : value`` for the keys
        of each pattern, the value being the ``allOf`` of exactly the patterns that key matches.

        Pattern key languages are compared pairwise (:func:`._overlap.relation` on their DFAs):
        for pattern *p*, a pattern *q* whose keys are disjoint from *p*'s never applies to them,
        one whose keys contain all of *p*'s always does (its schema joins the ``allOf``). If some
        *q* shares only part of *p*'s keys (its keys lie strictly inside *p*'s, or the two overlap
        partially), *p*'s keys fall into classes that need different schemas and that a regex
        cannot separate without a product automaton: *p*'s own keys are then not generated (extra
        keys are optional; a *q* inside *p* still generates its keys, with both schemas). So a key
        is never given a schema of a pattern it does not match, nor denied one it does. An
        undecided comparison (automata too large) raises ``UnsupportedFeatureError``. Keys
        matched by no pattern, and the keys of a pattern that may match a listed property name,
        are not generated either (sound: extra keys are optional)."""
        from ._overlap import relation

        live = [p for p, kr in pkeys.items() if kr is not None]
        alts: list[str] = []
        for p in live:
            if any(p in matching(k) for k in names):
                continue
            group, skip = [p], False
            for q in live:
                if q == p:
                    continue
                rel = relation(pkeys[p], pkeys[q])
                if rel in ("subset", "equal"):
                    group.append(q)
                elif rel in ("superset", "overlap"):
                    skip = True
                elif rel is None:
                    raise UnsupportedFeatureError(
                        "patternProperties", f"could not decide how the keys of patterns {p!r} and {q!r} "
                        "overlap (automaton too large)", _ptr(where, "patternProperties"))
            if skip:
                continue
            subs = [pprops[x] for x in group]
            v = self.value(subs[0] if len(subs) == 1 else {"allOf": subs}, _ptr(where, "patternProperties", p))
            if v is not None:  # an unsatisfiable combination: those keys can never appear (exact)
                alts.append(f"{pkeys[p]}{self.colon}{v}")
        return alt(alts)

    def object(self, schema, where):
        for kw in ("patternProperties", "propertyNames", "dependentSchemas", "unevaluatedProperties",
                   "dependencies", "dependentRequired", "minProperties", "maxProperties"):
            if kw in schema:
                v = schema[kw]
                if kw == "patternProperties" and isinstance(v, dict):
                    continue  # handled below
                if kw in ("dependentSchemas", "dependencies", "dependentRequired") and v == {}:
                    continue
                if kw == "propertyNames" and v in (True, {}):
                    continue
                if kw == "unevaluatedProperties" and v is True:
                    continue
                if kw in ("minProperties", "maxProperties"):
                    continue  # handled below (sound approximations)
                if kw in ("dependentRequired", "dependencies") and isinstance(v, dict) and all(
                        isinstance(x, list) for x in v.values()):
                    continue  # handled below
                raise UnsupportedFeatureError(kw, "", _ptr(where, kw))
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise GrammarSyntaxError("properties must be an object", json.dumps(props), 0, _ptr(where, "properties"))
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarSyntaxError("required must be an array of strings", json.dumps(required), 0,
                                     _ptr(where, "required"))
        has_addl = "additionalProperties" in schema
        addl = schema.get("additionalProperties", True)
        # dependentRequired {a: [b, ...]}: sound subset = b required whenever a can appear at all
        deps = {**schema.get("dependencies", {}), **schema.get("dependentRequired", {})}
        dep_names: list[str] = []
        if deps:
            required = list(required)
            changed = True
            while changed:
                changed = False
                for a, bs in deps.items():
                    if a not in dep_names:
                        dep_names.append(a)
                    if a in props or a in required or has_addl and addl is not False or \
                            (not has_addl and self.opt.additional_properties) or \
                            schema.get("patternProperties"):
                        for b in bs:
                            if b not in required:
                                required.append(b)
                                changed = True
        pprops = schema.get("patternProperties") or {}
        pkeys = {}  # pattern -> regex of the JSON-encoded keys (quotes included) it matches
        for pat in pprops:
            w = _ptr(where, "patternProperties", pat)
            self._check_schema(pprops[pat], w)
            body = pattern_body_regex(parse_pattern(pat, w), None, w)
            pkeys[pat] = None if body is None else f'"{body}"'

        def matching(k: str) -> list[str]:
            """Patterns that may match key k (ours, or Python's reading of the pattern)."""
            out = []
            for pat, kr in pkeys.items():
                hit = kr is not None and re.fullmatch(kr, json.dumps(k, ensure_ascii=False)) is not None
                if not hit:
                    try:
                        hit = re.search(pat, k) is not None
                    except re.error:
                        pass
                if hit:
                    out.append(pat)
            return out

        def member_schema(k: str, base):
            pats = matching(k)
            return base if not pats else {"allOf": [base] + [pprops[p] for p in pats]}

        listed: list[tuple[str, str | None, bool]] = []
        for k, s in props.items():
            listed.append((k, self.value(member_schema(k, s), _ptr(where, "properties", k)), k in required))
        for r in required:
            if r not in props:
                base = addl if not matching(r) else True
                listed.append((r, self.value(member_schema(r, base), _ptr(where, "additionalProperties")), True))
        # extras policy
        if pprops:
            extra_v = None
            pattern_extra = self._pattern_extras(pprops, pkeys, matching, list(props) + list(required), where)
        if pprops:
            pass
        elif has_addl:
            extra_v = self.value(addl, _ptr(where, "additionalProperties")) if addl is not False else None
        elif not props and not required:
            # {"type": "object"}: any object, as deep as any_value() allows
            extra_v = self.any_value(max(self.depth - 1, 0))
        elif self.opt.additional_properties:
            extra_v = self.any_value()
        else:
            extra_v = None
        if any(v is None and req for _, v, req in listed):
            return None
        # dependentRequired trigger keys are never generated as extras (their dependents were
        # made required only when the trigger is a listed key)
        names = [k for k, _, _ in listed] + [a for a in dep_names if a not in props]
        listed = [(k, v, req) for k, v, req in listed if v is not None]
        n_req = sum(1 for _, _, req in listed if req)
        if "maxProperties" in schema:
            mx = self._count(schema, "maxProperties", where)
            if mx < n_req:
                return None
            if mx < len(listed):
                raise UnsupportedFeatureError("maxProperties", "fewer than the listed properties",
                                              _ptr(where, "maxProperties"))
            extra_v = None  # sound: only listed keys, at most len(listed) <= maxProperties
            pprops = {}
            pattern_extra = None
        if "minProperties" in schema:
            mn = self._count(schema, "minProperties", where)
            if mn > n_req:
                # sound subset: make the first optional listed properties required
                need = mn - n_req
                opt_idx = [i for i, (_, _, req) in enumerate(listed) if not req]
                if len(opt_idx) < need:
                    raise UnsupportedFeatureError("minProperties", "more than the listed properties",
                                                  _ptr(where, "minProperties"))
                for i in opt_idx[:need]:
                    k, v, _ = listed[i]
                    listed[i] = (k, v, True)
        extra = None
        if pprops:
            extra = pattern_extra
        elif extra_v is not None:
            key = STRING if not names else _key_not_in(names)
            extra = f"{key}{self.colon}{extra_v}"
        comma = self.comma
        kvs = [literal_string_regex(k) + self.colon + v for k, v, _ in listed]
        n = len(listed)
        # N[i]: non-empty comma-joined subsequences of members i.. (declared order) that contain
        # every required member. Linear size: N_i = (?:(?:kv_i,)?N_{i+1}|kv_i) for optional i with
        # no required member after it; kv_i(?:,N_{i+1})? / kv_i,N_{i+1} for required i;
        # (?:kv_i,)?N_{i+1} for optional i before a required one.
        nxt: str | None = None
        req_after = False
        for i in range(n - 1, -1, -1):
            kv, req = kvs[i], listed[i][2]
            if nxt is None:
                cur = kv
            elif req:
                cur = f"{kv}{comma}{nxt}" if req_after else f"{kv}(?:{comma}{nxt})?"
            elif req_after:
                cur = f"(?:{kv}{comma})?{nxt}"
            else:
                cur = f"(?:(?:{kv}{comma})?{nxt}|{kv})"
            nxt = cur
            req_after = req_after or req
        ws = self.ws
        if extra is not None:
            extras = f"(?:{comma}{extra})*"
            if nxt is None:
                nxt = f"{extra}{extras}"
            elif req_after:
                nxt = f"{nxt}{extras}"
            else:
                nxt = f"(?:{nxt}|{extra}){extras}"
        if nxt is None:
            return rf"\{{{ws}\}}"
        if not req_after:
            return rf"\{{{ws}(?:{nxt}{ws})?\}}"
        return rf"\{{{ws}{nxt}{ws}\}}"
