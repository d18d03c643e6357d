"""Emitter for ``object`` values: ``properties`` in declared order (linear optional chain),
``required``, ``additionalProperties``, ``patternProperties``, ``dependentRequired``,
``min/maxProperties``."""
from __future__ import annotations

import json
import re

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ._automata import CPDFA, complement, from_ast, length_dfa, literals_ast, product, trim
from ._charset import _SPLIT_PAIR, json_char_regex, literal_string_regex
from ._common import ANNOTATIONS
from ._common import _ADDL_UNLESS, _ptr
from ._numeric import alt
from ._pattern import parse_pattern, pattern_ast, pattern_body_regex


#: with ``maxProperties`` and possible extra keys, the count is exact (extras kept) when the
#: counting automaton has at most this many states; beyond, only listed keys are generated
MAX_EXACT_COUNT_STATES = 512


class ObjectMixin:
    """Objects (part of ``compiler._Compiler``)."""

    def _pattern_extras(self, pprops, pkeys, matching, names, where, beside=None) -> str | None:
        """The extra members a ``patternProperties`` object may have: ``key : value`` for the keys
        of each pattern, the value being the ``allOf`` of exactly the patterns that key matches.

        Pattern key languages are compared pairwise (:class:`._overlap.Relations` on their DFAs,
        each built once): for pattern *p*, a pattern *q* whose keys are disjoint from *p*'s never
        applies to them, one whose keys contain all of *p*'s always does (its schema joins the
        ``allOf``). If some *q* shares only part of *p*'s keys (its keys lie strictly inside
        *p*'s, or the two overlap partially), *p*'s keys fall into classes that need different
        schemas: the keys only such patterns match are split into regions by product automata
        (:meth:`_pattern_regions`; a *q* inside *p* still generates its own keys, with both
        schemas). So a key is given the ``allOf`` of exactly the patterns it matches. An undecided
        comparison (automata too large) raises ``UnsupportedFeatureError``; more than
        ``max_pattern_regions`` such patterns, or a region's product automaton over
        ``max_product_states``, raise ``CompileLimitError``; a value native cannot compile raises
        its typed error. A pattern that may match listed property names generates its keys
        without those names (its automaton times their complement, :meth:`_pattern_keys`). Keys
        matched by no pattern are not generated here (see :meth:`object`). Nothing is left out
        silently: every key is generated exactly, or the schema is refused. ``beside(patterns)``: the
        schemas that also apply to a key matched by exactly ``patterns`` (merged ``allOf`` members'
        ``additionalProperties``, :data:`._common._ADDL_UNLESS`)."""
        from ._overlap import Relations

        beside = beside or (lambda pats: [])
        live = [p for p, kr in pkeys.items() if kr is not None]
        relation = Relations(pkeys)
        alts: list[str] = []
        skipped: list[str] = []
        for p in live:
            group, skip = [p], False
            for q in live:
                if q == p:
                    continue
                rel = relation(p, q)
                if rel in ("subset", "equal"):
                    group.append(q)
                elif rel in ("superset", "overlap"):
                    skip = True
                elif rel is None:
                    raise UnsupportedFeatureError(
                        "patternProperties", f"could not decide how the keys of patterns {p!r} and {q!r} "
                        "overlap (automaton too large)", _ptr(where, "patternProperties"))
            if skip:
                skipped.append(p)
                continue
            key = pkeys[p]
            taken = [k for k in names if p in matching(k)]
            if taken:
                key = self._pattern_keys([p], [], taken, where)
                if key is None:
                    continue  # no key but the listed names (exact)
            subs = [pprops[x] for x in group] + beside(group)
            v = self.value(subs[0] if len(subs) == 1 else {"allOf": subs}, _ptr(where, "patternProperties", p))
            if v is not None:  # an unsatisfiable combination: those keys can never appear (exact)
                alts.append(f"{key}{self.colon}{v}")
        if skipped:
            alts.extend(self._pattern_regions(skipped, live, pprops, matching, names, where, beside))
        return alt(alts)

    def _pattern_regions(self, skipped, live, pprops, matching, names, where, beside=None) -> list[str]:
        """``key : value`` alternatives for the keys that only ``skipped`` patterns match (those
        that overlap another pattern partially, or strictly contain one): for each non-empty set
        ``T`` of them, the keys every pattern of ``T`` matches and no other live pattern does
        (:meth:`_pattern_keys`, listed names left out), with the ``allOf`` of ``T``'s schemas. A
        key matched by a pattern that was not skipped is generated by that pattern's own entry
        (every pattern matching it contains it), so together every key gets the ``allOf`` of
        exactly the patterns it matches. An empty region or an unsatisfiable ``allOf`` leaves its
        region out (no such key can appear: exact); a value native cannot compile raises its
        typed error, a product automaton over ``max_product_states`` (checked as it grows, so
        reaching it costs one bounded product) ``CompileLimitError``.

        Raises
        ------
        CompileLimitError
            ``max_pattern_regions``: more than that many ``skipped`` patterns (``2**n - 1``
            regions); ``max_product_states``: a region's automaton.
        """
        cap = self.max_pattern_regions  # (_common.DEFAULT_MAX_PATTERN_REGIONS)
        if len(skipped) > cap:
            w = _ptr(where, "patternProperties")
            raise CompileLimitError(
                "max_pattern_regions", len(skipped), cap,
                f"patternProperties at {w}: {len(skipped)} patterns whose keys overlap other "
                f"patterns' partially ({', '.join(map(repr, skipped[:8]))}{', ...' if len(skipped) > 8 else ''}) "
                f"split into up to 2**{len(skipped)} - 1 key regions; raise "
                "CompileOptions.extra['max_pattern_regions'] or simplify the schema", where=w)
        out: list[str] = []
        matched = {k: set(matching(k)) for k in names}  # (once: matching runs every pattern on k)
        for bits in range(1, 1 << len(skipped)):
            t = [skipped[i] for i in range(len(skipped)) if bits >> i & 1]
            others = [q for q in live if q not in t]
            taken = [k for k in names if matched[k].issuperset(t)]
            key = self._pattern_keys(t, others, taken, where)
            if key is None:
                continue
            subs = [pprops[x] for x in t] + (beside(t) if beside is not None else [])
            v = self.value(subs[0] if len(subs) == 1 else {"allOf": subs}, _ptr(where, "patternProperties", t[0]))
            if v is not None:
                out.append(f"{key}{self.colon}{v}")
        return out

    def _pattern_automaton(self, pattern: str, upper: bool, where: str) -> CPDFA:
        """The code-point automaton of a ``patternProperties`` pattern's keys (``upper=False``:
        what both ECMA-262 and Python's ``re`` match; ``upper``: what either does), memoised per
        compile (the ``2**n - 1`` region products of ``n`` patterns reuse them). Not minimised
        here: that cost ~17 ms a pattern on MaskBench ``Github_medium---o9819`` for no product
        it shrank on the subset (the products are trimmed and minimised when emitted).

        Raises
        ------
        CompileLimitError
            ``max_product_states``: the automaton has more states.
        """
        memo = self.__dict__.setdefault("_pattern_automata", {})
        k = (pattern, upper, self.max_product_states)
        if k not in memo:
            w = _ptr(where, "patternProperties")
            memo[k] = from_ast(pattern_ast(parse_pattern(pattern, _ptr(w, pattern), upper=upper), upper=upper),
                               max_states=self.max_product_states, what=f"patternProperties pattern {pattern!r}",
                               where=w)
        return memo[k]

    def _pattern_keys(self, pats: list[str], others: list[str], names: list[str], where) -> str | None:
        """JSON text of the keys (canonical spelling, quotes included) that every
        ``patternProperties`` pattern of ``pats`` matches, none of ``others`` matches and that are
        not listed ``names``: the product of the patterns' code-point automata (as both ECMA-262
        and Python's ``re`` read them), the complements of the others' (as either reads them) and
        the complement of the names. None when no key is left (exact).

        Raises
        ------
        CompileLimitError
            ``max_product_states``: an automaton, or the product as it grows (so reaching the
            bound costs at most that many product states); ``max_regex_size`` (regex mode) as
            :meth:`_key_text`.
        UnsupportedFeatureError
            A pattern construct the automata do not support.
        """
        cap = self.max_product_states
        w = _ptr(where, "patternProperties")
        which = " and ".join(map(repr, pats)) if pats else "no pattern"
        what = (f"patternProperties keys matched by {which}" + (f" and none of {len(others)} other pattern(s)"
                                                                  if others else ""))
        d = length_dfa(0, None)
        for pat in pats:
            d = product(d, self._pattern_automaton(pat, False, where), max_states=cap, what=what, where=w)
        for pat in others:
            d = product(d, complement(self._pattern_automaton(pat, True, where)), max_states=cap, what=what, where=w)
        return self._key_text(d, names, what, w)

    def object(self, schema, where):
        for kw in ("patternProperties", "propertyNames", "dependentSchemas", "unevaluatedProperties",
                   "dependencies", "dependentRequired", "minProperties", "maxProperties"):
            if kw in schema:
                v = schema[kw]
                if kw == "patternProperties" and isinstance(v, dict):
                    continue  # handled below
                if kw in ("dependentSchemas", "dependencies", "dependentRequired") and v == {}:
                    continue
                if kw == "propertyNames" and (v in (True, {}) or isinstance(v, (bool, dict))):
                    continue  # handled below (a key automaton)
                if kw == "unevaluatedProperties" and v is True:
                    continue
                if kw in ("minProperties", "maxProperties"):
                    continue  # handled below (sound approximations)
                if kw in ("dependentRequired", "dependencies") and isinstance(v, dict) and all(
                        isinstance(x, list) for x in v.values()):
                    continue  # handled below
                raise UnsupportedFeatureError(kw, "", _ptr(where, kw))
        pn = schema.get("propertyNames", True)
        pn_key = None  # automaton of the keys propertyNames allows (None: every key)
        if pn not in (True, {}):
            pnw = _ptr(where, "propertyNames")
            if schema.get("patternProperties"):
                raise UnsupportedFeatureError("propertyNames", "together with patternProperties", pnw)
            pn_key = self._key_automaton(pn, pnw)
            pn_ok = self._validator_for(pn).is_valid
        props = schema.get("properties", {})
        if not isinstance(props, dict):
            raise GrammarSyntaxError("properties must be an object", json.dumps(props), 0, _ptr(where, "properties"))
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise GrammarSyntaxError("required must be an array of strings", json.dumps(required), 0,
                                     _ptr(where, "required"))
        # a name listed twice is required once (validators check membership): never two keys
        required = list(dict.fromkeys(required))
        if any(_SPLIT_PAIR.search(r) for r in required):
            return None  # a required name no JSON text decodes to (see literal_string_regex): no object
        has_addl = "additionalProperties" in schema
        addl = schema.get("additionalProperties", True)
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

        # merged allOf members' additionalProperties, each for the keys its member neither lists
        # nor matches (:data:`._common._ADDL_UNLESS`; the keys no member lists or matches have
        # them all as additionalProperties)
        unless = schema.get(_ADDL_UNLESS) or ()

        def beside(pats, k: str | None = None) -> list:
            return [a for a, mp, mn in unless if not set(pats).intersection(mp) and (k is None or k not in mn)]

        # dependentRequired {a: [b, ...]}: sound subset = b required whenever a can appear at all;
        # an unlisted trigger a is never generated as an extra key (it joins `names` below), so only
        # a listed or required a, or one a patternProperties pattern may match, counts
        # ... except that a trigger with a dependent that can never appear (its schema is false, or it
        # is not listed under additionalProperties: false) cannot appear itself: exactly that
        # (a key's own name among its dependents asks nothing: it is there whenever the key is)
        deps = {a: [b for b in bs if b != a]
                for a, bs in {**schema.get("dependencies", {}), **schema.get("dependentRequired", {})}.items()}
        dep_names: list[str] = []
        if deps:
            required = list(required)

            def never(b: str) -> bool:
                if props.get(b) is False:
                    return True
                # (merged allOf members: a member's additionalProperties false for a key it
                # neither lists nor matches, whatever the other members list)
                if unless and any(a is False for a in beside(matching(b), b)):
                    return True
                return b not in props and addl is False and not matching(b)

            changed = True
            while changed:  # triggers that cannot appear, through chains of them
                changed = False
                for a, bs in deps.items():
                    if a not in required and props.get(a) is not False and any(never(b) for b in bs):
                        props = {**props, a: False}
                        changed = True
            changed = True
            while changed:
                changed = False
                for a, bs in deps.items():
                    if a not in dep_names:
                        dep_names.append(a)
                    if props.get(a) is False and a not in required:
                        continue
                    if a in props or a in required or matching(a):
                        for b in bs:
                            if b not in required:
                                required.append(b)
                                changed = True
        def member_schema(k: str, base):
            pats = matching(k)
            subs = [pprops[p] for p in pats] + beside(pats, k)
            return base if not subs else {"allOf": [base] + subs}

        listed: list[tuple[str, str | None, bool]] = []
        for k, s in props.items():
            if pn_key is not None and not pn_ok(k):
                listed.append((k, None, k in required))  # propertyNames forbids the key
                continue
            listed.append((k, self.value(member_schema(k, s), _ptr(where, "properties", k)), k in required))
        for r in required:
            if r not in props:
                if pn_key is not None and not pn_ok(r):
                    listed.append((r, None, True))
                    continue
                base = addl if not matching(r) and not unless else True  # (unless: beside() has them)
                listed.append((r, self.value(member_schema(r, base), _ptr(where, "additionalProperties")), True))
        # extras policy
        if pprops:
            extra_v = None
            pattern_extra = self._pattern_extras(pprops, pkeys, matching, list(props) + list(required), where,
                                                 beside if unless else None)
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
        # made required only when the trigger is a listed key), except a trigger whose dependents
        # are all required anyway (an empty list, say): it constrains nothing
        req_set = set(required)
        names = [k for k, _, _ in listed] + [a for a in dep_names
                                             if a not in props and not req_set.issuperset(deps[a])]
        listed = [(k, v, req) for k, v, req in listed if v is not None]
        n_req = sum(1 for _, _, req in listed if req)
        mx = self._count(schema, "maxProperties", where) if "maxProperties" in schema else None
        mn = self._count(schema, "minProperties", where) if "minProperties" in schema else 0
        if mx is not None and (mx < n_req or mn > mx):
            return None  # no object has that many properties: the subschema admits no object
        n_opt = len(listed) - n_req
        counted = None  # (minProperties, maxProperties | None): exact member-counting automaton
        extras_possible = extra_v is not None or bool(pprops)
        if (mx is not None and mx < len(listed)) or mn > n_req + n_opt or (
                mx is not None and extras_possible and (len(listed) + 2) * (mx + 1) <= MAX_EXACT_COUNT_STATES):
            counted = (mn, mx)  # extras kept: they may make up the count
        else:
            if mx is not None:
                extra_v = None  # sound: only listed keys, at most len(listed) <= maxProperties
                pprops = {}
                pattern_extra = None
            if mn > n_req:
                # sound subset: make the first optional listed properties required
                opt_idx = [i for i, (_, _, req) in enumerate(listed) if not req]
                for i in opt_idx[:mn - n_req]:
                    k, v, _ = listed[i]
                    listed[i] = (k, v, True)
        extra = None
        if pprops:
            extra = pattern_extra
            # keys no pattern matches follow additionalProperties (absent: the generation policy):
            # the complement of every pattern's keys (and the names). In regex mode its spelling
            # is often kilobytes: past max_regex_size a CompileLimitError, as a value native
            # cannot compile raises its typed error (as without patternProperties)
            rest = addl if has_addl else bool(self.opt.additional_properties)
            key = self._pattern_keys([], list(pprops), names, where) if rest is not False else None
            if key is not None:
                v = self.value(rest, _ptr(where, "additionalProperties"))
                if v is not None:
                    extra = alt([extra, f"{key}{self.colon}{v}"])
        elif extra_v is not None:
            if pn_key is not None:
                key = self._extra_key(pn_key, names, _ptr(where, "propertyNames"))
            else:
                key = self.any_string if not names else self.key_not_in(names)
            if key is not None:
                extra = f"{key}{self.colon}{extra_v}"
        if counted is not None:
            out = self._counted_members(listed, extra, counted, where)
            if out is None and extra is None and not has_addl and not pprops and counted[0] > len(listed):
                # the count needs keys the additional_properties=False policy does not generate
                raise UnsupportedFeatureError("minProperties", "more than the listed properties, and "
                                              "CompileOptions.additional_properties=False generates no others",
                                              _ptr(where, "minProperties"))
            return out
        comma = self.comma
        kvs = [literal_string_regex(k) + self.colon + v for k, v, _ in listed]
        n = len(listed)
        if self.grammar and n:
            reqs = [req for _, _, req in listed]
            if self.opt.property_order == "any" and n <= self.opt.max_any_order_properties:
                return self._members_any_order(kvs, reqs, extra, where)
            return self._members_linear(kvs, reqs, extra, where)
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


    def _member_rule(self, text: str, tag: str, where: str, always: bool = False, keep: bool = False) -> str:
        """``text`` itself when at most 256 characters (and not ``always``), else a call to a new
        rule ``obj:<pointer>.<tag>`` holding it (so a member or continuation used in several places
        is written, parsed and built once); with ``keep``, the rule stays a call through the NFA
        build (:attr:`keep_calls`)."""
        if len(text) <= 256 and not always:
            return text
        base = re.sub(r"[^A-Za-z0-9_.:/-]", "_", f"obj:{where.lstrip('/') or 'root'}".replace("~", "_"))
        name, k = f"{base}.{tag}", 1
        while name in self.rules:
            k += 1
            name = f"{base}.{tag}.{k}"
        self.rules[name] = text
        self.rule_where[name] = where or "#"
        if keep:
            self.keep_calls.add(name)
        return f"(?&{name})"

    def _members_linear(self, kvs: list[str], req: list[bool], extra: str | None, where: str) -> str:
        """Grammar mode: the members of an object, listed ones in declared order (each optional one
        may be left out), then any number of ``extra`` members. Two families, one text each:
        ``A_i`` = what may follow once a member was written (``(?:,kv_i)?A_(i+1)``, or ``,kv_i
        A_(i+1)`` for a required ``i``) and ``F_i`` = the first member from ``i`` on
        (``kv_i A_(i+1) | F_(i+1)``). A member and an ``A_i`` longer than 256 characters become
        rules, so each is written once and, as both places it appears continue the same way
        (``A_(i+1)``), its automaton is built once: linear in the members and in the nesting
        depth (writing ``kv_i`` twice per object doubles nested values at every level).

        Returns the object's regex text, ``{`` to ``}``."""
        comma, ws = self.comma, self.ws

        def named(text: str, tag: str) -> str:
            return self._member_rule(text, tag, where)

        n = len(kvs)
        kv = [named(t, f"m{i}") for i, t in enumerate(kvs)]
        a = f"(?:{comma}{extra})*" if extra is not None else ""  # A_n
        f = f"{extra}{a}" if extra is not None else None  # F_n (None: nothing can come first)
        for i in range(n - 1, -1, -1):
            ai1 = named(a, f"a{i + 1}") if a else ""
            first = f"{kv[i]}{ai1}"
            f = first if req[i] or f is None else f"(?:{first}|{f})"
            a = f"{comma}{kv[i]}{ai1}" if req[i] else f"(?:{comma}{kv[i]})?{ai1}"
        if any(req):
            return rf"\{{{ws}{f}{ws}\}}"
        return rf"\{{{ws}(?:{f}{ws})?\}}"

    def _members_any_order(self, kvs: list[str], req: list[bool], extra: str | None, where: str) -> str:
        """Grammar mode, ``CompileOptions.property_order="any"``: the listed members in any order
        (each at most once, every required one present), extra members anywhere between them.
        One rule ``R_S`` per set ``S`` of listed members already written (a subset construction
        over the members, ``2**n`` rules, so only for ``n <= max_any_order_properties``):
        ``R_S = (?:,extra)* (?: ,kv_i R_(S+i) | ... )`` over ``i`` not in ``S``, the group
        optional once ``S`` holds every required member. Keys stay deterministic: listed names are
        distinct literals and extra keys exclude them (:meth:`key_not_in`), so at most one
        alternative survives a key's closing quote. The ``R_S`` stay calls (:attr:`keep_calls`):
        inlined, the DAG would grow into ``n!`` paths; each call is in tail position, so it takes
        no stack frame.

        Returns the object's regex text, ``{`` to ``}``."""
        comma, ws = self.comma, self.ws

        def named(text: str, tag: str, always: bool = False, keep: bool = False) -> str:
            return self._member_rule(text, tag, where, always, keep)

        n = len(kvs)
        # each member is written in 2**(n-1) rules: parsed once as a rule (inlined again by the NFA build)
        kv = [named(t, f"m{i}", always=len(t) > 32) for i, t in enumerate(kvs)]
        x = named(extra, "x") if extra is not None else None
        ext = f"(?:{comma}{x})*" if x is not None else ""
        need = sum(1 << i for i in range(n) if req[i])
        full = (1 << n) - 1
        memo: dict[int, str] = {}

        def after(s: int) -> str:
            """What may follow once the members in bit set ``s`` were written."""
            if s in memo:
                return memo[s]
            if s == full:
                memo[s] = ext
                return ext
            alts = "|".join(f"{comma}{kv[i]}{after(s | 1 << i)}" for i in range(n) if not s >> i & 1)
            body = f"{ext}(?:{alts})" + ("?" if s & need == need else "")
            # a call (in tail position: no stack frame), never inlined
            memo[s] = named(body, f"o{s:x}", always=True, keep=True)
            return memo[s]

        try:
            firsts = [f"{kv[i]}{after(1 << i)}" for i in range(n)]
            if extra is not None:
                firsts.append(f"{x}{after(0)}")
        finally:
            after = None  # (recursive: no reference cycle left for the collector, returned or raised)
        f = f"(?:{'|'.join(firsts)})"
        if need:
            return rf"\{{{ws}{f}{ws}\}}"
        return rf"\{{{ws}(?:{f}{ws})?\}}"

    # -- exact counts and key languages (product automata) ---------------------------------------
    def _key_automaton(self, s, where):
        """Code-point automaton of the strings a ``propertyNames`` schema allows (keys are strings:
        ``type`` without ``"string"`` allows none), or None for every string. Supported: ``pattern``,
        ``minLength``/``maxLength``, ``enum``/``const``, ``type``, local ``$ref`` (and ``false``);
        anything else raises ``UnsupportedFeatureError("propertyNames")``."""
        s = self._deref(s)
        if s is True:
            return None
        if s is False:
            return False
        if not isinstance(s, dict):
            raise GrammarSyntaxError("propertyNames must be a schema", json.dumps(s, default=str)[:200], 0, where)
        keys = set(s) - ANNOTATIONS
        extra = keys - {"type", "pattern", "minLength", "maxLength", "enum", "const"}
        if extra:
            raise UnsupportedFeatureError("propertyNames", f"keywords {sorted(extra)} in propertyNames", where)
        if "type" in s:
            ts = [s["type"]] if isinstance(s["type"], str) else s["type"]
            if "string" not in ts:
                return False
        cap, what = self.max_product_states, "propertyNames"
        parts = []
        if "pattern" in s:
            parts.append(from_ast(pattern_ast(parse_pattern(s["pattern"], _ptr(where, "pattern"))), max_states=cap,
                                  what=what, where=where))
        vals = [s["const"]] if "const" in s else s.get("enum")
        if vals is not None:
            parts.append(from_ast(literals_ast([v for v in vals if isinstance(v, str)]), max_states=cap, what=what,
                                  where=where))
        if "minLength" in s or "maxLength" in s:
            lmin = self._count(s, "minLength", where) if "minLength" in s else 0
            lmax = self._count(s, "maxLength", where) if "maxLength" in s else None
            if lmax is not None and lmin > lmax:
                return False
            parts.append(length_dfa(lmin, lmax, max_states=cap, what=what, where=where))
        if not parts:
            return None
        d = parts[0]
        for q in parts[1:]:
            d = product(d, q, max_states=cap, what=what, where=where)
        return d

    def _extra_key(self, key_dfa, names, where) -> str | None:
        """JSON text of the extra keys (canonical spelling, quotes included): the ``propertyNames``
        language minus the listed names; None when there is none."""
        if key_dfa is False:
            return None
        return self._key_text(key_dfa if key_dfa is not None else length_dfa(0, None), names, "propertyNames", where)

    def _key_text(self, d, names, what: str, where) -> str | None:
        """JSON text (canonical spelling, quotes included) of the keys of code-point automaton ``d``
        minus the listed ``names`` (a product with their complement); None when none is left.

        Raises
        ------
        CompileLimitError
            The product exceeds ``max_product_states`` or the spelling ``max_automaton_rules``.
        """
        cap = self.max_product_states
        if names:
            d = product(d, complement(from_ast(literals_ast(names), max_states=cap, what=what, where=where)),
                        max_states=cap, what=what, where=where)
        body = self._emit_dfa(trim(d), lambda cs: json_char_regex(cs, escapes=False), what, where)
        return None if body is None else f'"{body}"'

    def _counted_members(self, listed, extra, counted, where) -> str | None:
        """Object text with between ``counted[0]`` and ``counted[1]`` (None: no maximum) members:
        the listed members in declared order (each required one present), then any number of
        ``extra`` members, as an automaton over member symbols (state = next listed index,
        members so far) emitted by :meth:`_emit_dfa`. Exact for these orders (the key-order
        policy); bounded by ``options.extra["max_product_states"]``."""
        pmin, pmax = counted
        n = len(listed)
        what = "maxProperties" if pmax is not None else "minProperties"
        w = _ptr(where, what)
        if extra is not None and pmin > n + 1:
            # at most one extra member counts toward the minimum (see below): a minimum that needs
            # two or more would give an empty or narrowed object language without saying so
            raise UnsupportedFeatureError("minProperties", f"{pmin} properties need {pmin - n} keys beyond the "
                                          f"{n} listed ones; an automaton cannot tell a repeated key "
                                          '({"b": 2, "b": 3} is one property) from two', _ptr(where, "minProperties"))
        kvs = [literal_string_regex(k) + self.colon + v for k, v, _ in listed]
        if extra is not None:
            kvs.append(extra)
        texts = []
        for j, kv in enumerate(kvs):
            if self.grammar and len(kv) > 256:  # each member is written once, called from every count
                name = f"member:{w.lstrip('/') or 'root'}.{j}".replace("~", "_")
                name = base = re.sub(r"[^A-Za-z0-9_.:/-]", "_", name)
                n_clash = 1
                while name in self.rules:  # the same pointer compiled for another merged schema
                    n_clash += 1
                    name = f"{base}.{n_clash}"
                self.rules[name] = kv
                self.rule_where[name] = w
                kv = f"(?&{name})"
            texts.append(kv)
        m = len(texts)
        sym_text = texts + [self.comma + x for x in texts]  # symbol j: first member; m + j: after a comma
        top = pmax if pmax is not None else max(pmin, 1)
        req_from = [False] * (n + 2)  # a required listed member at index >= i
        for i in range(n - 1, -1, -1):
            req_from[i] = req_from[i + 1] or listed[i][2]
        # state (next listed index | n + 1 after an extra member, members so far, members that
        # count toward minProperties): extra keys may repeat each other ({"b": 2, "b": 3} is one
        # property once parsed), so at most one extra member counts toward the minimum (an extra
        # key is never a listed one); every member counts toward the maximum (sound: a repeated
        # key only narrows)
        index = {(0, 0, 0): 0}
        todo = [(0, 0, 0)]
        delta, accept = [], []
        i = 0
        while i < len(todo):
            at, k, km = todo[i]
            i += 1
            row = [-1] * (2 * m)
            k2 = k + 1 if pmax is not None else min(k + 1, top)
            km2 = min(km + 1, pmin)
            if pmax is None or k + 1 <= pmax:
                for j in range(at, n):
                    self._count_step(row, index, todo, j + (0 if k == 0 else m), (j + 1, k2, km2), w)
                    if listed[j][2]:
                        break  # a required member cannot be skipped
                if extra is not None and not req_from[min(at, n)]:
                    self._count_step(row, index, todo, n + (0 if k == 0 else m),
                                     (n + 1, k2, km2 if at <= n else km), w)
            delta.append(row)
            accept.append(not req_from[min(at, n)] and km >= pmin)
        atoms = [((s, s),) for s in range(2 * m)]
        d = trim(CPDFA(atoms, delta, accept))

        def enc(cs):
            return alt(sym_text[s] for a, b in cs for s in range(a, b + 1))

        body = self._emit_dfa(d, enc, what, w, lazy=False)
        if body is None:
            return None
        ws = self.ws
        return rf"\{{{ws}{body}{ws}\}}"

    def _count_step(self, row, index, todo, sym, target, where):
        j = index.get(target)
        if j is None:
            j = index[target] = len(todo)
            if j >= self.max_product_states:
                raise CompileLimitError("max_product_states", j + 1, self.max_product_states,
                                        f"member counting at {where} needs a larger automaton; raise "
                                        "CompileOptions.extra['max_product_states'] or simplify the schema",
                                        where=where)
            todo.append(target)
        row[sym] = j
