"""Negation: fold ``not`` into the rest of the schema for the forms that have a positive
equivalent (types, ``enum``/``const`` of scalars, ``anyOf``, ``required``, ``not``)."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import _NOT_BOOL, _NOT_INT, _NOT_STR, ANNOTATIONS, KNOWN, TYPES, _is_num, _is_whole, _ptr


class NegationMixin:
    """``not`` (part of ``compiler._Compiler``)."""

    def apply_not(self, schema, where):
        """Fold ``not`` into the rest of the schema, or raise UnsupportedFeatureError("not").

        Supported: ``not`` of ``true``/``{}``/``false``, of a type list, of ``not X`` (= X), of
        ``anyOf`` (= every branch negated), and of ``enum``/``const`` whose values are strings,
        booleans or null (strings are then written in canonical spelling, see docs).
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
            for i, b in enumerate(inner["anyOf"]):
                rest = self._negate(rest, b, _ptr(w, "anyOf", i))
                if rest is False:
                    return False
            return rest
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
            cur = rest.get("type", list(TYPES))
            cur = [cur] if isinstance(cur, str) else list(cur)
            if "number" in cur:
                cur = cur + ["integer"]
            keep = [x for x in TYPES if x in cur and x not in banned and not (x == "integer" and "number" in banned)]
            if "integer" in banned and "number" in keep:
                raise UnsupportedFeatureError("not", "not integer of a number", w)
            if not keep:
                return False
            return {**rest, "type": keep}
        if keys in ({"enum"}, {"const"}):
            vals = [inner["const"]] if "const" in inner else inner["enum"]
            if not isinstance(vals, list):
                raise GrammarSyntaxError("enum must be an array", json.dumps(vals), 0, _ptr(w, "enum"))
            rest = dict(rest)
            for v in vals:
                if v is None:
                    cur = rest.get("type", list(TYPES))
                    cur = [cur] if isinstance(cur, str) else list(cur)
                    rest["type"] = [x for x in cur if x != "null"]
                elif isinstance(v, bool):
                    rest[_NOT_BOOL] = sorted(set(rest.get(_NOT_BOOL, [])) | {v})
                elif isinstance(v, str):
                    rest[_NOT_STR] = list(dict.fromkeys(rest.get(_NOT_STR, []) + [v]))
                elif _is_num(v) and _integers_only(rest):
                    if _is_whole(v):  # a non-integer value excludes no integer
                        rest[_NOT_INT] = sorted(set(rest.get(_NOT_INT, [])) | {int(v)})
                else:
                    raise UnsupportedFeatureError("not", "not enum/const of a number, array or object", w)
            return rest
        branches = self._negated_keywords(inner, keys, w, rest)
        if branches is not None:
            if not branches:
                return False  # no keyword can fail (e.g. minLength 0): every value is valid against inner
            return {"allOf": [rest, {"anyOf": branches}]}
        raise UnsupportedFeatureError("not", "supported: not of a type list, enum/const of strings/"
                                      "booleans/null, anyOf, not, required, true/false, numeric bounds, "
                                      "length/count bounds, properties, dependentRequired, additionalProperties "
                                      "inside an object whose keys are listed, and schemas made of these", w)

    #: keywords :meth:`_negated_keywords` negates one by one (De Morgan over the schema's keywords)
    NEGATABLE = frozenset({"type", "required", "properties", "minimum", "maximum", "exclusiveMinimum",
                           "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
                           "minProperties", "maxProperties", "enum", "const", "not", "anyOf", "oneOf",
                           "additionalProperties", "dependentRequired", "dependencies", "items",
                           "prefixItems", "contains", "if", "then", "else"})

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
        with ``k`` missing some ``d``, draft-4 ``dependencies`` no branch (2020-12 ignores it: the
        negation stays inside both readings, sound but not exact), and ``additionalProperties``
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
        else: E}`` = ``allOf [I, not T]`` or ``allOf [not I, not E]``."""
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
                n = self._negate({}, {k: v}, _ptr(w, k))
                if n is not False:
                    out.append(n)
            elif k == "not":
                if v is not False:
                    out.append(v)
            elif k == "anyOf":
                out.append({"not": {"anyOf": v}})
            elif k == "dependencies":
                # draft-4..7 only: 2020-12 validators ignore it, so it adds no way to fail that both
                # readings share; leaving it out keeps the negation inside both (sound, not exact)
                continue
            elif k == "dependentRequired":
                if not isinstance(v, dict):
                    return None
                for key, dep in v.items():
                    if not (isinstance(dep, list) and all(isinstance(d, str) for d in dep)):
                        return None
                    out += [{"type": "object", "required": [key], "properties": {d: False}} for d in dep]
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
                for i in range(len(v)):  # or two do
                    for j in range(i + 1, len(v)):
                        if not self.disjoint(v[i], v[j]):
                            out.append({"allOf": [v[i], v[j]]})
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
                ctx = {"type": rest["type"]} if isinstance(rest, dict) and "type" in rest else {}
                n = self._negate(ctx, {"type": v}, _ptr(w, "type"))
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


def _integers_only(s) -> bool:
    """Whether ``s`` allows numbers only as integers (``type`` lists ``integer`` but not ``number``):
    then ``not`` of numeric values excludes integers from a range (``_NOT_INT``)."""
    t = s.get("type") if isinstance(s, dict) else None
    t = [t] if isinstance(t, str) else t
    return isinstance(t, list) and "integer" in t and "number" not in t
