"""Negation: fold ``not`` into the rest of the schema for the forms that have a positive
equivalent (types, ``enum``/``const`` of scalars, ``anyOf``, ``required``, ``not``)."""
from __future__ import annotations

import json

from ...errors import GrammarSyntaxError, UnsupportedFeatureError
from ._common import _NOT_BOOL, _NOT_STR, ANNOTATIONS, TYPES, _ptr


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
                else:
                    raise UnsupportedFeatureError("not", "not enum/const of a number, array or object", w)
            return rest
        raise UnsupportedFeatureError("not", "supported: not of a type list, enum/const of strings/"
                                      "booleans/null, anyOf, not, required, true/false", w)
