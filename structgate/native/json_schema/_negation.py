"""Negation: fold ``not`` into the rest of the schema for the forms that have a positive
equivalent (types, ``enum``/``const`` of scalars, ``anyOf``, ``required``, ``not``)."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import _FRACTIONAL, _NOT_BOOL, _NOT_INT, _NOT_MULT, _NOT_PATTERNS, _NOT_STR, ANNOTATIONS, KNOWN, TYPES, _is_num, _is_whole, _ptr


class NegationMixin:
    """``not`` (part of ``compiler._Compiler``)."""

    def apply_not(self, schema, where):
        """Fold ``not`` into the rest of the schema, or raise UnsupportedFeatureError("not").

        Supported: ``not`` of ``true``/``{}``/``false``, of a type list, of ``not X`` (= X), of
        ``anyOf`` (= every branch negated, :meth:`_negate_all`), and of ``enum``/``const`` whose
        values are strings, booleans or null (strings are then written in canonical spelling, see
        docs), integers where the context allows no other number, and any value of a type the
        context does not allow (:meth:`_negate_values`).
        """
        rest = {k: v for k, v in schema.items() if k != "not"}
        return self._negate(rest, schema["not"], _ptr(where, "not"))

    @staticmethod
    def _required_only(s) -> list[str] | None:
        """The keys of a schema that only says ``required`` (or an ``allOf`` of such), else None."""
        if not isinstance(s, dict):
            return None
        keys = set(s) - ANNOTATIONS
        if keys == {"required"} and isinstance(s["required"], list) and all(isinstance(k, str) for k in s["required"]):
            return list(dict.fromkeys(s["required"]))
        if keys == {"allOf"} and isinstance(s["allOf"], list):
            out: list[str] = []
            for m in s["allOf"]:
                r = NegationMixin._required_only(m)
                if r is None:
                    return None
                out += r
            return list(dict.fromkeys(out))
        return None

    def _negate(self, rest, inner, w):
        if rest is False:
            return False
        self._check_schema(inner, w)
        if inner is True:
            return False
        if inner is False:
            return rest
        # keywords unknown to every draft (x-..., typos such as "attributes") are annotations
        keys = {k for k in inner if k not in ANNOTATIONS and k in KNOWN}
        if not keys:
            return False
        if keys == {"not"}:
            return {"allOf": [rest, inner["not"]]}
        if keys == {"anyOf"} and isinstance(inner["anyOf"], list):
            return self._negate_all(rest, inner["anyOf"], _ptr(w, "anyOf"))
        if keys == {"$ref"}:
            return self._negate(rest, self.resolve(inner["$ref"], _ptr(w, "$ref")), _ptr(w, "$ref"))
        if "$ref" in keys or "allOf" in keys:
            # not (X ∧ Y ...) of the merged conjunction (merge: the exact intersection, or a refusal)
            flat = self.flatten([(inner, w)], w, [], set())
            if flat is False:
                return rest
            merged = self.merge(flat, w)
            if merged is True:
                return False
            return self._negate(rest, merged, w)
        req = self._required_only(inner)
        if req is not None:
            # not required(R): an object missing some key of R (non-objects meet every `required`)
            if not req:
                return False
            return {"allOf": [rest, {"anyOf": [{"type": "object", "properties": {k: False}} for k in req]}]}
        if keys == {"type"}:
            t = inner["type"]
            banned = {t} if isinstance(t, str) else set(t)
            cur = _ctx_types(rest)  # through allOf members: the fold of other branches wraps rest
            keep = [x for x in TYPES if x in cur and x not in banned and not (x == "integer" and "number" in banned)]
            if not keep:
                return False
            if "integer" in banned and "number" in keep:
                return {**rest, "type": keep, _FRACTIONAL: True}  # numbers that are not integers
            return {**rest, "type": keep}
        if keys in ({"enum"}, {"const"}):
            vals = [inner["const"]] if "const" in inner else inner["enum"]
            if not isinstance(vals, list):
                raise GrammarSyntaxError("enum must be an array", json.dumps(vals), 0, _ptr(w, "enum"))
            return self._negate_values(rest, [(vals, w)])
        branches = self._negated_keywords(inner, keys, w, rest)
        if branches is not None:
            if not branches:
                return False  # no keyword can fail (e.g. minLength 0): every value is valid against inner
            return {"allOf": [rest, {"anyOf": branches}]}
        raise UnsupportedFeatureError("not", "supported: not of a type list, enum/const of strings/"
                                      "booleans/null, anyOf, not, required, true/false, numeric bounds, "
                                      "length/count bounds, properties, dependencies, additionalProperties "
                                      "inside an object whose keys are listed, and schemas made of these", w)

    def _negate_values(self, rest, groups):
        """``rest`` minus the values of ``groups`` (``[(values, JSON pointer), ...]``, the lists of
        ``enum``/``const`` keywords under ``not``), as ``rest`` with its internal exclusion keywords
        extended: ``null`` leaves ``type``; booleans, strings and integers are listed in ``_NOT_BOOL``/
        ``_NOT_STR``/``_NOT_INT`` (integers only where the context, :func:`_ctx_types`, allows no
        non-integer number; a fraction excludes no integer there). A number, array or object value
        is no exclusion where the context allows no value of its type; elsewhere it is refused
        (``UnsupportedFeatureError("not")`` naming its group's pointer).

        One pass over the values (sets, one copy of ``rest``): folding them one at a time into
        growing sorted lists was quadratic (20,000 values: 10-20 s). Checks the compile deadline
        every 1,024 values."""
        types = _ctx_types(rest)
        null = False
        bools: set = set()
        strs: list = []
        ints: set = set()
        n = 0
        for vals, w in groups:
            for v in vals:
                n += 1
                if not n & 1023:
                    self.check_deadline(w)
                if v is None:
                    null = True
                elif isinstance(v, bool):
                    bools.add(v)
                elif isinstance(v, str):
                    strs.append(v)
                elif _is_num(v) and "number" not in types:
                    if "integer" in types and _is_whole(v):  # a non-integer value excludes no integer
                        ints.add(int(v))
                elif not ((isinstance(v, list) and "array" not in types)
                          or (isinstance(v, dict) and "object" not in types)):
                    raise UnsupportedFeatureError("not", "not enum/const of a number, array or object", w)
        out = dict(rest)
        if null:
            cur = out.get("type", list(TYPES))
            cur = [cur] if isinstance(cur, str) else list(cur)
            out["type"] = [x for x in cur if x != "null"]
        if bools:
            out[_NOT_BOOL] = sorted(set(out.get(_NOT_BOOL, [])) | bools)
        if strs:
            out[_NOT_STR] = list(dict.fromkeys([*out.get(_NOT_STR, []), *strs]))
        if ints:
            out[_NOT_INT] = sorted(set(out.get(_NOT_INT, [])) | ints)
        return out

    def _negate_all(self, rest, branches, w):
        """``rest ∧ ¬b0 ∧ ¬b1 ∧ ...`` (``rest`` and ``not anyOf [b0, b1, ...]``; ``w`` the
        ``anyOf``'s pointer), or False, whatever the order of the branches (the verdict and the
        language).

        * Branches that are an ``anyOf`` themselves are flattened into the list (¬(A ∨ (B ∨ C)) =
          ¬A ∧ ¬B ∧ ¬C).
        * The ``enum``/``const`` branches are excluded together, in one pass
          (:meth:`_negate_values`): folded one branch at a time, each copied the exclusion list so
          far (quadratic: 20,000 ``const`` branches took 10-20 s).
        * Every other branch's positive form is one more member of one flat ``allOf`` beside
          ``rest`` (:class:`_Fold`): wrapping ``rest`` in an ``allOf`` per branch nested them one
          level per branch (``nesting_depth`` at 1,000 branches).
        * A branch whose negation is refused in the context built so far (a number ``const``
          where non-integer numbers are allowed, ``not integer`` of a number: :func:`_ctx_types`)
          is tried again once the others have narrowed that context (``{type: integer, not:
          {anyOf: [{minimum: 10}, {const: 5}]}}`` was refused in that order, compiled in the
          other). The first refusal left is raised only when a whole pass made no progress, and
          not at all when the branches that do fold leave nothing (False: exact). Malformed
          schemas (``GrammarSyntaxError``) and limits are raised at once.

        Checks the compile deadline once per branch tried."""
        groups: list = []  # (values, pointer) of the enum/const branches
        others: list = []  # (schema, pointer) of the rest
        stack = [(branches, w, 0)]
        while stack:  # depth-first, in the written order (errors then name the first branch)
            bs, wp, i = stack.pop()
            if i >= len(bs):
                continue
            stack.append((bs, wp, i + 1))
            b, bw = bs[i], _ptr(wp, i)
            if isinstance(b, dict):
                bk = {k for k in b if k not in ANNOTATIONS and k in KNOWN}
                if bk == {"anyOf"} and isinstance(b["anyOf"], list):
                    stack.append((b["anyOf"], _ptr(bw, "anyOf"), 0))
                    continue
                if bk == {"const"}:
                    groups.append(([b["const"]], bw))
                    continue
                if bk == {"enum"} and isinstance(b["enum"], list):
                    groups.append((b["enum"], bw))
                    continue
            others.append((b, bw))
        todo: list = ([(None, groups)] if groups else []) + others
        fold = _Fold(rest)
        first = None  # a round's first refusal, raised when nothing of the round folds
        try:
            while todo:
                failed, first = [], None
                for b, bw in todo:
                    self.check_deadline(bw if b is not None else w)
                    try:
                        r = self._negate_values(fold.view, bw) if b is None else self._negate(fold.view, b, bw)
                    except UnsupportedFeatureError as e:
                        failed.append((b, bw))
                        if first is None:
                            first = e
                        continue
                    if r is False:
                        return False
                    fold.take(r)
                if len(failed) == len(todo):
                    raise first
                todo = failed
            return fold.result()
        finally:  # its traceback holds this frame: no reference cycle left (returned or raised)
            first = None

    #: keywords :meth:`_negated_keywords` negates one by one (De Morgan over the schema's keywords)
    NEGATABLE = frozenset({"type", "required", "properties", "minimum", "maximum", "exclusiveMinimum",
                           "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
                           "minProperties", "maxProperties", "enum", "const", "not", "anyOf", "oneOf",
                           "additionalProperties", "dependentRequired", "dependentSchemas", "dependencies",
                           "items", "prefixItems", "contains", "if", "then", "else", "pattern", "multipleOf"})

    def _negated_dependencies(self, kw: str, v, w) -> list | None:
        """``not {kw: v}`` for a dependency keyword (``dependentRequired``, ``dependentSchemas``,
        draft 4-7 ``dependencies``) as ``anyOf`` branches: an object that has a key ``k`` and
        fails what depends on it. Names ``[d, ...]``: ``{type: object, required: [k],
        properties: {d: false}}`` per name (``k`` itself asks nothing); a schema ``S``: ``{type:
        object, required: [k], not: S}`` (``S`` true: no branch; false: every object with ``k``).
        Exact: the compiler writes a dependency as ``anyOf [without k, with k and its
        dependents]``, whose negation this is. None for a shape other than these.

        Raises
        ------
        UnsupportedFeatureError
            ``not``, at the dependent schema's pointer (``/not/dependentSchemas/k``), when the
            branch of ``S`` cannot be compiled (``not S`` has no positive form, say), the inner
            refusal named in its detail.
        """
        if not isinstance(v, dict):
            return None
        out: list = []
        for key, dep in v.items():
            if isinstance(dep, list):
                if kw == "dependentSchemas" or not all(isinstance(d, str) for d in dep):
                    return None
                out += [{"type": "object", "required": [key], "properties": {d: False}}
                        for d in dict.fromkeys(dep) if d != key]
            elif kw == "dependentRequired":
                return None
            elif dep is True or (isinstance(dep, dict) and not (set(dep) - ANNOTATIONS)):
                continue
            elif dep is False:
                out.append({"type": "object", "required": [key]})
            elif isinstance(dep, dict):
                dw = _ptr(w, kw, key)
                branch = {"type": "object", "required": [key], "not": dep}
                try:  # compiled once here, so that a refusal names the dependent schema's pointer
                    self.value(branch, dw)  # (the text is not kept; its rules, unreached, are pruned)
                except UnsupportedFeatureError as e:
                    raise UnsupportedFeatureError("not", f"not of the dependent schema at {dw} "
                                                  f"({e.feature} at {e.where}: {e.detail})", dw) from None
                out.append(branch)
            else:
                return None
        return out

    def _negated_keywords(self, inner, keys, w, rest=None) -> list | None:
        """``not inner`` as anyOf branches, one per keyword (a value fails ``inner`` iff it fails one
        of its keywords), or None when a keyword has no positive negation here.

        A type-specific keyword fails only on its own type: ``not {minimum: m}`` = numbers below
        ``m`` (``{type: number, exclusiveMaximum: m}``), ``not {minLength: n}`` = strings shorter
        than ``n``, ``not {properties: {k: S}}`` = objects with a ``k`` whose value fails ``S``
        (``{type: object, required: [k], properties: {k: {not: S}}}``); ``type`` and ``required``
        as above. Draft-4 boolean ``exclusive*`` and ``additionalProperties``/``patternProperties``
        beside ``properties`` are not negated this way (None).

        Also: ``enum``/``const`` (the values' negation as above, a branch), ``not X`` (the branch
        ``X``), ``anyOf`` (the branch ``not anyOf``), ``dependentRequired {k: [d, ...]}`` = objects
        with ``k`` missing some ``d``, ``dependentSchemas {k: S}`` = objects with ``k`` that fail
        ``S``, draft 4-7 ``dependencies`` either way (:meth:`_negated_dependencies`), and ``additionalProperties``
        when the context ``rest`` lists every key an object may have (its own
        ``additionalProperties: false``, no ``patternProperties``): ``not {properties: P,
        additionalProperties: A}`` there = an object with a listed key outside ``P`` whose value
        fails ``A`` (``A`` false: any value) — exact inside that context; with ``A`` false, also
        where the context requires a key outside ``P`` (every object there fails it: ``{type:
        object}``); None elsewhere. Arrays: ``not {items: S}`` = an array that ``contains``
        ``not S`` (no ``prefixItems`` beside it), ``not {contains: S}`` (no ``minContains``/
        ``maxContains``) = an array whose ``items`` are all ``not S``, ``not {prefixItems: [S0,
        ...]}`` = an array with an item ``i`` failing ``Si``. ``not oneOf [B...]`` = ``not anyOf
        [B...]`` or ``allOf [Bi, Bj]`` for each pair not proven disjoint; ``not {if: I, then: T,
        else: E}`` = ``allOf [I, not T]`` or ``allOf [not I, not E]``; ``not {pattern: P}`` = the
        strings ``P`` does not match (``_NOT_PATTERNS``: the string emitter intersects the
        complement of ``P``'s automaton)."""
        if not keys <= self.NEGATABLE:
            return None
        if "patternProperties" in inner:
            return None
        if any(isinstance(inner.get(k), bool) for k in ("exclusiveMinimum", "exclusiveMaximum")):
            return None
        out: list = []
        flip = {"minimum": "exclusiveMaximum", "exclusiveMinimum": "maximum", "maximum": "exclusiveMinimum",
                "exclusiveMaximum": "minimum"}
        below = {"minLength": ("string", "maxLength"), "minItems": ("array", "maxItems"),
                 "minProperties": ("object", "maxProperties")}
        above = {"maxLength": ("string", "minLength"), "maxItems": ("array", "minItems"),
                 "maxProperties": ("object", "minProperties")}
        for k in sorted(keys):
            v = inner[k]
            if k in ("enum", "const"):
                # within the context's own types, as for "type" below: integers can be excluded
                # where the context allows no other number
                n = self._negate(_types_ctx(rest), {k: v}, _ptr(w, k))
                if n is not False:
                    out.append(n)
            elif k == "not":
                if v is not False:
                    out.append(v)
            elif k == "multipleOf":
                if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
                    return None  # (a float multipleOf: validators divide in floating point)
                # numbers that are not multiples of v (an integer): the other integer literals and
                # the non-integral numbers (the number emitter)
                out.append({"type": "number", _NOT_MULT: [v]})
            elif k == "pattern":
                if not isinstance(v, str):
                    return None
                # strings the pattern does not match (the string emitter intersects the complement
                # of its automaton with the rest)
                out.append({"type": "string", _NOT_PATTERNS: [v]})
            elif k == "anyOf":
                out.append({"not": {"anyOf": v}})
            elif k in ("dependentRequired", "dependentSchemas", "dependencies"):
                # (``dependencies`` reaches here only where it is a keyword: a draft 4-7 resource,
                # or an undeclared document, where the compiler enforces it: _normalize removes it
                # elsewhere) an object fails {key: D} iff it has key and fails D
                dep_branches = self._negated_dependencies(k, v, w)
                if dep_branches is None:
                    return None
                out += dep_branches
            elif k == "additionalProperties":
                listed = _listed_keys(rest)
                props = inner.get("properties", {})
                if v is True or v == {}:
                    continue
                if not isinstance(props, dict):
                    return None
                if listed is None:
                    if v is False and any(r not in props for r in _required_keys(rest)):
                        out.append({"type": "object"})  # every object here has a key B forbids
                        continue
                    return None
                out += [{"type": "object", "required": [key]} if v is False else
                        {"type": "object", "required": [key], "properties": {key: {"not": v}}}
                        for key in listed if key not in props]
            elif k == "items":
                if "prefixItems" in inner or not isinstance(v, (dict, bool)):
                    return None  # items then counts from the end of prefixItems (or is draft-4's tuple)
                if v is False:
                    out.append({"type": "array", "minItems": 1})
                elif v is not True:
                    out.append({"type": "array", "contains": {"not": v}})
            elif k == "contains":
                if not isinstance(v, (dict, bool)):
                    return None
                out.append({"type": "array", "items": {"not": v}})
            elif k == "prefixItems":
                if not isinstance(v, list):
                    return None
                out += [{"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [{"not": x}]}
                        for i, x in enumerate(v) if x is not True]
            elif k == "oneOf":
                if not isinstance(v, list) or not v:
                    return None
                out.append({"not": {"anyOf": v}})  # no branch matches
                # or two do (the pairs not proven disjoint)
                out += [{"allOf": [v[i], v[j]]} for i, j in self.overlapping_pairs([self._conjuncts(b) for b in v],
                                                                                    _ptr(w, "oneOf"))]
            elif k == "if":
                if "then" in inner:
                    out.append({"allOf": [v, {"not": inner["then"]}]})
                if "else" in inner:
                    out.append({"allOf": [{"not": v}, {"not": inner["else"]}]})
            elif k in ("then", "else"):
                continue  # with "if" (alone they have no effect)
            elif k == "type":
                # within the context's own types (the branch is intersected with ``rest``): not
                # integer of a value already known to be an integer is no branch, not a refusal
                n = self._negate(_types_ctx(rest), {"type": v}, _ptr(w, "type"))
                if n is not False:
                    out.append(n)
            elif k == "required":
                req = self._required_only({"required": v})
                if req is None:
                    return None
                out += [{"type": "object", "properties": {r: False}} for r in req]
            elif k == "properties":
                if not isinstance(v, dict):
                    return None
                out += [{"type": "object", "required": [p], "properties": {p: {"not": s}}} for p, s in v.items()]
            elif k in flip:
                if not _is_num(v):
                    return None
                out.append({"type": "number", flip[k]: v})
            elif k in below:
                n = self._count(inner, k, w)
                if n > 0:
                    out.append({"type": below[k][0], below[k][1]: n - 1})
            else:
                out.append({"type": above[k][0], above[k][1]: self._count(inner, k, w) + 1})
        return out


def _is_false(s) -> bool:
    """Whether a schema obviously allows nothing (``false``, ``not {}``, an ``allOf`` with such)."""
    if s is False:
        return True
    if isinstance(s, dict):
        n = s.get("not", None)
        if n is True or (isinstance(n, dict) and not (set(n) - ANNOTATIONS)):
            return True
        return isinstance(s.get("allOf"), list) and any(_is_false(m) for m in s["allOf"])
    return False


def _required_keys(s) -> list[str]:
    """Keys every object valid against ``s`` has (``required``, through ``allOf`` members)."""
    if not isinstance(s, dict):
        return []
    out = [k for k in s.get("required", []) if isinstance(k, str)] if isinstance(s.get("required"), list) else []
    for m in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
        out += _required_keys(m)
    return out


def _listed_keys(s) -> list[str] | None:
    """Every key an object valid against ``s`` may have (a superset), when ``s`` closes its object
    (``additionalProperties`` that allows nothing, no ``patternProperties``), through ``allOf``
    members too; None otherwise."""
    if not isinstance(s, dict):
        return None
    if _is_false(s.get("additionalProperties", True)) and not s.get("patternProperties"):
        props = s.get("properties", {})
        return list(props) if isinstance(props, dict) else None
    for m in s.get("allOf", []) if isinstance(s.get("allOf"), list) else []:
        r = _listed_keys(m)
        if r is not None:
            return r
    return None


def _ctx_types(s) -> set[str]:
    """The ``type`` names (:data:`TYPES`) of the values ``s`` may allow, by the ``type`` keywords of
    ``s`` and of its ``allOf`` members, recursively (their intersection; a superset of the truth:
    other keywords are not read); ``integer`` is in it wherever ``number`` is. ``s`` is a context
    of :meth:`NegationMixin._negate`, which wraps it in ``allOf`` as branches fold in: reading the
    top-level ``type`` only made the verdict depend on the branches' order. Iterative (the
    nesting is the schema's)."""
    out = set(TYPES)
    stack = [s]
    while stack and out:
        x = stack.pop()
        if x is False:
            return set()
        if not isinstance(x, dict):
            continue
        t = x.get("type")
        t = [t] if isinstance(t, str) else t
        if isinstance(t, list):
            ts = {y for y in t if isinstance(y, str)}
            out &= ts | ({"integer"} if "number" in ts else set())
        if isinstance(x.get("allOf"), list):
            stack.extend(x["allOf"])
    return out


def _types_ctx(rest) -> dict:
    """``{"type": [...]}`` of :func:`_ctx_types` (``{}`` when it allows every type, or ``rest`` is
    no schema): the context of a branch that :meth:`NegationMixin._negated_keywords` builds, which
    is then conjoined with ``rest``."""
    ts = _ctx_types(rest) if isinstance(rest, dict) else set(TYPES)
    return {} if ts == set(TYPES) else {"type": [t for t in TYPES if t in ts]}


class _Fold:
    """The conjunction that :meth:`NegationMixin._negate_all` builds: :attr:`view` is the context
    plus the positive forms taken so far, one dict whose ``allOf`` list (:attr:`members`, owned
    here, appended in place) holds the added members — so that each branch costs O(1), not a copy
    of the members so far or one more level of nesting."""

    def __init__(self, rest):
        self.rest = self.view = rest
        #: ``view["allOf"]`` when that list is ours to append to, else None
        self.members: list | None = None
        #: the positive forms added to ``rest`` while no branch refined its own keywords
        self.added: list | None = []

    def result(self):
        """The conjunction: ``{"allOf": [rest, X, ...]}`` when the branches only added members
        ``X`` (the shape :func:`._union._alternatives` reads for one), else :attr:`view`."""
        if self.added:
            return {"allOf": [self.rest, *self.added]}
        return self.view

    def take(self, r) -> None:
        """Make ``r`` (``_negate(self.view, b)``, not False) the conjunction."""
        v = self.view
        if r is v:
            return
        if (isinstance(r, dict) and len(r) == 1 and isinstance(r.get("allOf"), list) and len(r["allOf"]) == 2
                and r["allOf"][0] is v and isinstance(v, dict) and isinstance(v.get("allOf", []), list)):
            # {"allOf": [view, X]}: X joins the flat member list
            if self.members is None or v.get("allOf") is not self.members:
                self.members = list(v.get("allOf", []))
                self.view = {**v, "allOf": self.members}
            self.members.append(r["allOf"][1])
            if self.added is not None:
                self.added.append(r["allOf"][1])
            return
        # a refinement of view's own keywords ({**view, "type": ...}, excluded values): it shares
        # view's member list, which stays ours; anything else holds view inside (never appended to)
        self.view = r
        self.added = None
        if not (isinstance(r, dict) and self.members is not None and r.get("allOf") is self.members):
            self.members = None
