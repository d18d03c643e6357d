"""Negation: fold ``not`` into the rest of the schema for the forms that have a positive
equivalent (types, ``enum``/``const`` of scalars, ``anyOf``, ``required``, ``not``)."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import _NOT_BOOL, _NOT_INT, _NOT_STR, ANNOTATIONS, TYPES, _is_num, _ptr


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
        keys = set(inner) - ANNOTATIONS
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
                    if float(v).is_integer():  # a non-integer value excludes no integer
                        rest[_NOT_INT] = sorted(set(rest.get(_NOT_INT, [])) | {int(v)})
                else:
                    raise UnsupportedFeatureError("not", "not enum/const of a number, array or object", w)
            return rest
        branches = self._negated_keywords(inner, keys, w)
        if branches is not None:
            if not branches:
                return rest
            return {"allOf": [rest, {"anyOf": branches}]}
        raise UnsupportedFeatureError("not", "supported: not of a type list, enum/const of strings/"
                                      "booleans/null, anyOf, not, required, true/false, numeric bounds, "
                                      "length/count bounds, properties, and schemas made of these", w)

    #: keywords :meth:`_negated_keywords` negates one by one (De Morgan over the schema's keywords)
    NEGATABLE = frozenset({"type", "required", "properties", "minimum", "maximum", "exclusiveMinimum",
                           "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
                           "minProperties", "maxProperties"})

    def _negated_keywords(self, inner, keys, w) -> list | None:
        """``not inner`` as anyOf branches, one per keyword (a value fails ``inner`` iff it fails one
        of its keywords), or None when a keyword has no positive negation here.

        A type-specific keyword fails only on its own type: ``not {minimum: m}`` = numbers below
        ``m`` (``{type: number, exclusiveMaximum: m}``), ``not {minLength: n}`` = strings shorter
        than ``n``, ``not {properties: {k: S}}`` = objects with a ``k`` whose value fails ``S``
        (``{type: object, required: [k], properties: {k: {not: S}}}``); ``type`` and ``required``
        as above. Draft-4 boolean ``exclusive*`` and ``additionalProperties``/``patternProperties``
        beside ``properties`` are not negated this way (None)."""
        if not keys <= self.NEGATABLE:
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
            if k == "type":
                n = self._negate({}, {"type": v}, _ptr(w, "type"))
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


def _integers_only(s) -> bool:
    """Whether ``s`` allows numbers only as integers (``type`` lists ``integer`` but not ``number``):
    then ``not`` of numeric values excludes integers from a range (``_NOT_INT``)."""
    t = s.get("type") if isinstance(s, dict) else None
    t = [t] if isinstance(t, str) else t
    return isinstance(t, list) and "integer" in t and "number" not in t
