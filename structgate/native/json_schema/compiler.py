"""JSON Schema (draft 2020-12 subset) → one regex for the native engine.

See ``docs/json-schema.md`` for the supported keywords and every policy/approximation. In short:
the regex accepts a *sound subset* of the schema's valid instances (every accepted text is a JSON
document valid against the schema), never more; where a keyword cannot be enforced exactly the
compiler raises :class:`UnsupportedFeatureError` with the keyword and its JSON pointer.

The construction follows Outlines' ``build_regex_from_schema`` (Willard & Louf 2023, "Efficient
Guided Generation for Large Language Models"), with exact numeric ranges, decoded-length string
bounds, JSON-encoded pattern translation and a linear chain for optional properties.
"""
from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from itertools import product
from typing import Any
from urllib.parse import unquote

from ...backends.interface import CompileOptions
from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ._charset import ANY, STRING, json_char_regex, literal_string_regex, subtract
from ._numeric import JSON_INTEGER, JSON_NUMBER, alt, integer_range, number_range
from ._numeric import _group as _g  # group r only when it has a top-level alternation
from ._pattern import parse_pattern, pattern_body_regex

__all__ = ["check_schema", "schema_to_regex", "json_object_regex", "json_value_regex", "schema_to_grammar",
           "json_object_grammar", "json_value_grammar", "NEVER", "FORMAT_REGEX", "LENIENT_ANNOTATIONS"]

#: a regex that matches nothing (a class over no code point) — returned for unsatisfiable schemas
NEVER = "[^\\u0000-\\uffff" + "\U00010000" + "-" + "\U0010ffff" + "]"

# internal keywords produced by `not` of an enum (never in user schemas)
_NOT_STR = "\x00structgate:not-strings"
_NOT_BOOL = "\x00structgate:not-booleans"

#: default bound on the regex text, characters (CompileOptions.extra["max_regex_size"])
DEFAULT_MAX_REGEX_SIZE = 4_000_000
#: regex mode (:func:`schema_to_regex`): recursion unrolling depth when
#: ``CompileOptions.extra["regex_unroll_depth"]`` is not given (``min(max_recursion_depth, this)``)
DEFAULT_REGEX_UNROLL_DEPTH = 3
#: grammar mode: rule texts longer than this stay rules even when used once
#: (``CompileOptions.extra["rule_inline_max_chars"]``)
DEFAULT_RULE_INLINE_MAX_CHARS = 20_000
#: grammar mode: a ``$ref`` target written more than once is inlined only when its text is at most this
#: long (``CompileOptions.extra["shared_inline_max_chars"]``): copies of small texts stay linear
DEFAULT_SHARED_INLINE_MAX_CHARS = 512
#: grammar mode: most ``$ref`` schemas being compiled inside each other (a chain of references whose
#: merged schemas never repeat); ``CompileLimitError("max_ref_nesting")`` beyond
MAX_REF_NESTING = 100
#: grammar mode: the rule names of the root and of "any JSON value"
ROOT_RULE = "root"
JSON_VALUE_RULE = "json:value"

TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")

ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs", "definitions",
    "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
    "contentEncoding", "contentMediaType", "contentSchema",
})
STRING_KW = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KW = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
OBJECT_KW = frozenset({"properties", "required", "additionalProperties", "patternProperties",
                       "propertyNames", "minProperties", "maxProperties", "dependentRequired",
                       "dependentSchemas", "unevaluatedProperties", "dependencies"})
ARRAY_KW = frozenset({"items", "prefixItems", "minItems", "maxItems", "contains", "minContains",
                      "maxContains", "uniqueItems", "unevaluatedItems", "additionalItems"})
GENERIC_KW = frozenset({"type", "enum", "const", "$ref", "allOf", "anyOf", "oneOf", "not", "if",
                        "then", "else", "$dynamicRef"})
KNOWN = ANNOTATIONS | STRING_KW | NUMBER_KW | OBJECT_KW | ARRAY_KW | GENERIC_KW | {
    "\x00structgate:not-strings", "\x00structgate:not-booleans"}

def _date() -> str:
    # years 0001-9999 (Python's date and RFC 3339 both accept them); Feb 29 only in leap years
    leap = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
    year = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
    return (r"(?:" + year + "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-"
            r"(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|" + leap + "-02-29)")


_TIME = (r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
         r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_HEX = "[0-9a-fA-F]"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# RFC 3986 URI / URI-reference (section 3 and 4.1 ABNF), ASCII spelling only (no \u escapes, no
# IP-literal hosts: a sound subset). A userinfo/host/port split is enforced after "//", so
# "http://a:b" (port not digits) is excluded; a relative-ref's first segment has no ":" so it can
# never be read as a scheme.
_UNRES = r"A-Za-z0-9._~\-"
_SUBD = r"!$&'()*+,;="
_PCT = rf"%{_HEX}{{2}}"
_PCHAR = rf"(?:[{_UNRES}{_SUBD}:@]|{_PCT})"
_SEG_NZ_NC = rf"(?:[{_UNRES}{_SUBD}@]|{_PCT})+"
_AUTHORITY = (rf"(?:(?:[{_UNRES}{_SUBD}:]|{_PCT})*@)?(?:[{_UNRES}{_SUBD}]|{_PCT})*(?::[0-9]*)?")
_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_QF = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI = (rf"[A-Za-z][A-Za-z0-9+.\-]*:(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_PCHAR}+{_ABEMPTY})?"
        rf"|{_PCHAR}+{_ABEMPTY}|){_QF}")
_RELATIVE_REF = (rf"(?://{_AUTHORITY}{_ABEMPTY}|/(?:{_PCHAR}+{_ABEMPTY})?|{_SEG_NZ_NC}{_ABEMPTY}|)"
                 rf"{_QF}")
FORMAT_REGEX = {
    "date": _date(),
    "time": _TIME,
    "date-time": _date() + "[Tt]" + _TIME,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    "email": rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_LABEL}(?:\.{_LABEL})+",
    "uri": _URI,
    "uri-reference": f"(?:{_URI}|{_RELATIVE_REF})",
    # RFC 1123 host name: dot-separated labels of 1-63 letters, digits, hyphens, no hyphen at either
    # end (the 253-character total is not enforced: a regular bound would multiply the states)
    "hostname": rf"{_LABEL}(?:\.{_LABEL})*",
}
#: formats that ``options.extra["formats"] == "lenient"`` leaves as annotations (JSON Schema 2020-12's
#: default; the JSTS "only an annotation by default" tests): asserting them is what users of
#: constrained decoding and the MaskBench labels expect (llguidance and XGrammar assert them too)
LENIENT_ANNOTATIONS = frozenset({"uri", "uri-reference", "hostname"})
#: decoded length range of each format's strings (to drop a length bound the format already meets)
FORMAT_LENGTH = {"date": (10, 10), "uuid": (36, 36), "ipv4": (7, 15)}


def _ptr(where: str, *parts) -> str:
    return where + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _is_num(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):  # exact; math.isfinite would overflow on ints beyond float range
        return True
    return isinstance(v, float) and math.isfinite(v)


def _exclusive_as_float(v, exclusive: bool, toward: float) -> tuple[Decimal, bool]:
    """(bound, exclusive) for a number bound: an exclusive bound becomes the inclusive bound at the
    next double toward ``toward`` when the bound is within float range (see the caller)."""
    if not exclusive:
        return _dec(v), False
    try:
        f = float(v)
    except OverflowError:
        return _dec(v), True
    if not math.isfinite(f):
        return _dec(v), True
    d = Decimal(repr(math.nextafter(f, toward)))
    if d.adjusted() < -30:
        # next to 0 the next double is subnormal (5e-324): its decimal has hundreds of digits.
        # Keep the exclusive decimal bound there (documented: decimals so small that they
        # underflow to the bound are the one residual case).
        return _dec(v), True
    return d, False


def _dec(v) -> Decimal:
    return Decimal(v) if isinstance(v, int) else Decimal(repr(float(v)))


def _json_equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_num(a) and _is_num(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class _Compiler:
    def __init__(self, root: Any, options: CompileOptions, grammar: bool = False):
        self.root = root
        self.opt = options
        #: grammar mode (:func:`schema_to_grammar`): unconstrained values, recursive and shared
        #: ``$ref``s become ``(?&rule)`` calls to the rules in :attr:`rules`; regex mode
        #: (:func:`schema_to_regex`): everything inline, recursion unrolled to :attr:`depth`
        self.grammar = grammar
        #: regex mode only: unrolling depth of recursive ``$ref`` and free-form values
        self.depth = int(options.extra.get("regex_unroll_depth", min(options.max_recursion_depth,
                                                                      DEFAULT_REGEX_UNROLL_DEPTH)))
        #: grammar mode: rule name -> regex text (with ``(?&name)`` calls), and its JSON pointer
        self.rules: dict[str, str] = {}
        self.rule_where: dict[str, str] = {}
        self._rule_of: dict[str, str] = {}  # canonical merged schema -> rule name
        self._inline: dict[str, str | None] = {}  # canonical merged schema -> text, inlined once so far
        self._progress: dict[str, str] = {}  # canonical merged schemas being compiled -> reserved name
        self._recursive: set[str] = set()  # of those, the ones that met themselves
        #: grammar mode: a rule text longer than this (characters) is kept as a rule even when used once
        self.inline_max = int(options.extra.get("rule_inline_max_chars", DEFAULT_RULE_INLINE_MAX_CHARS))
        #: grammar mode: how often each ``$ref`` string is written in the document; the target of one
        #: written more than once becomes a rule unless its text is at most ``shared_inline_max``
        self._ref_count: dict[str, int] = _count_refs(root) if grammar else {}
        self.shared_inline_max = int(options.extra.get("shared_inline_max_chars", DEFAULT_SHARED_INLINE_MAX_CHARS))
        if options.whitespace not in ("flexible", "compact"):
            raise ValueError(f"whitespace must be 'flexible' or 'compact', got {options.whitespace!r}")
        k = int(options.max_whitespace)
        self.ws = "" if options.whitespace == "compact" or k <= 0 else f"[ \\t\\n\\r]{{0,{k}}}"
        self.comma = f"{self.ws},{self.ws}"
        self.colon = f"{self.ws}:{self.ws}"
        self.active: dict[str, int] = {}
        self.cut = False
        self._any: dict[int, str] = {}
        self._validator = None
        #: regex text size limit, characters (``options.extra["max_regex_size"]``)
        self.max_size = int(options.extra.get("max_regex_size", DEFAULT_MAX_REGEX_SIZE))
        #: format policy (``options.extra["formats"]``): "default" (or its old name "strict") enforces
        #: every FORMAT_REGEX; "lenient" leaves LENIENT_ANNOTATIONS as annotations; other formats are
        #: annotations either way
        fmode = options.extra.get("formats", "default")
        if fmode not in ("default", "strict", "lenient"):
            raise UnsupportedFeatureError('options.extra["formats"]',
                                          f'{fmode!r} (expected "default", "strict" or "lenient")', "")
        self.formats = ({k: v for k, v in FORMAT_REGEX.items() if k not in LENIENT_ANNOTATIONS}
                        if fmode == "lenient" else dict(FORMAT_REGEX))

    # -- helpers ----------------------------------------------------------------------------------
    def any_value(self, depth: int | None = None) -> str:
        """Any JSON value: in grammar mode a call of the recursive rule :data:`JSON_VALUE_RULE` (any
        depth; ``depth`` ignored), in regex mode with at most ``depth`` (default :attr:`depth`)
        nested container levels."""
        if self.grammar:
            if JSON_VALUE_RULE not in self.rules:
                call = f"(?&{JSON_VALUE_RULE})"
                self.rules[JSON_VALUE_RULE] = ""  # reserved before the body refers to it
                self.rules[JSON_VALUE_RULE] = ("(?:" + "|".join(["null", "true", "false", JSON_NUMBER, STRING,
                                                                 self._array_of(call),
                                                                 self._object_of(STRING, call)]) + ")")
                self.rule_where[JSON_VALUE_RULE] = "any JSON value"
            return f"(?&{JSON_VALUE_RULE})"
        d = self.depth if depth is None else depth
        if d in self._any:
            return self._any[d]
        scalars = ["null", "true", "false", JSON_NUMBER, STRING]
        if d > 0:
            v = self.any_value(d - 1)
            scalars.append(self._array_of(v))
            scalars.append(self._object_of(STRING, v))
        r = "(?:" + "|".join(scalars) + ")"
        self._any[d] = r
        return r

    def _array_of(self, v: str) -> str:
        return rf"\[{self.ws}(?:{v}(?:{self.comma}{v})*{self.ws})?\]"

    def _object_of(self, key: str, v: str) -> str:
        m = f"{key}{self.colon}{v}"
        return rf"\{{{self.ws}(?:{m}(?:{self.comma}{m})*{self.ws})?\}}"

    def resolve(self, ref: str, where: str):
        if not isinstance(ref, str):
            raise GrammarSyntaxError("$ref must be a string", json.dumps(ref), 0, where)
        if not ref.startswith("#"):
            raise UnsupportedFeatureError("$ref (non-local)", f"only '#...' references are supported: {ref!r}",
                                          where)
        frag = unquote(ref[1:])
        if frag and not frag.startswith("/"):
            raise UnsupportedFeatureError("$ref (anchor)", f"plain-name fragments are not supported: {ref!r}",
                                          where)
        node = self.root
        for tok in frag.split("/")[1:] if frag else []:
            tok = tok.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and tok in node:
                node = node[tok]
            elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
                node = node[int(tok)]
            else:
                raise GrammarSyntaxError(f"$ref target not found: {ref}", ref, 0, where)
        if not isinstance(node, (dict, bool)):
            raise GrammarSyntaxError(f"$ref target is not a schema: {ref}", ref, 0, where)
        return node

    def _check_schema(self, s, where):
        if not isinstance(s, (dict, bool)):
            raise GrammarSyntaxError("a schema must be a JSON object or a boolean",
                                     json.dumps(s, default=str)[:200], 0, where)

    # -- merge (allOf / $ref with siblings) -------------------------------------------------------
    def flatten(self, schemas, where, refs: list[str], seen: set[str]):
        """Expand $ref / allOf into a flat list of ref-free, allOf-free dicts (False = never)."""
        out = []
        for s, w in schemas:
            self._check_schema(s, w)
            if s is True:
                continue
            if s is False:
                return False
            s = dict(s)
            head = len(out)
            if "$dynamicRef" in s:
                raise UnsupportedFeatureError("$dynamicRef", "", _ptr(w, "$dynamicRef"))
            if "$ref" in s:
                ref = s.pop("$ref")
                rw = _ptr(w, "$ref")
                if ref not in seen:  # allOf is idempotent: a ref already included adds nothing
                    seen.add(ref)
                    refs.append(ref)
                    sub = self.flatten([(self.resolve(ref, rw), rw)], w, refs, seen)
                    if sub is False:
                        return False
                    out.extend(sub)
            if "allOf" in s:
                members = s.pop("allOf")
                if not isinstance(members, list) or not members:
                    raise GrammarSyntaxError("allOf must be a non-empty array", json.dumps(members), 0,
                                             _ptr(w, "allOf"))
                sub = self.flatten([(m, _ptr(w, "allOf", i)) for i, m in enumerate(members)], w, refs, seen)
                if sub is False:
                    return False
                out.extend(sub)
            out.insert(head, (s, w))  # the schema's own keywords first: its properties lead
        return out

    def merge(self, parts, where) -> dict | bool:
        """Intersect flat schemas into one dict, or raise UnsupportedFeatureError("allOf")."""
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
        req: list = []
        for s, _ in parts:
            for r in s.get("required", []):
                if r not in req:
                    req.append(r)
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
                cur = [v for v in cur if any(_json_equal(v, x) for x in e)]
            m["enum"] = cur
        # properties
        if any(k in s for s, _ in parts for k in ("properties", "additionalProperties", "patternProperties")):
            if any("patternProperties" in s for s, _ in parts):
                unsup("patternProperties across allOf members")
            keys: list = []
            for s, _ in parts:
                for k in s.get("properties", {}):
                    if k not in keys:
                        keys.append(k)
            props = {}
            for k in keys:
                subs = []
                for s, _ in parts:
                    if k in s.get("properties", {}):
                        subs.append(s["properties"][k])
                    elif "additionalProperties" in s:
                        subs.append(s["additionalProperties"])
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
        # strings
        pats = []
        for s, _ in parts:
            if "pattern" in s and s["pattern"] not in pats:
                pats.append(s["pattern"])
        if len(pats) > 1:
            unsup("two different patterns cannot be intersected")
        if pats:
            m["pattern"] = pats[0]
        fmts = [s["format"] for s, _ in parts if "format" in s]
        if fmts and all(f == fmts[0] for f in fmts):
            m["format"] = fmts[0]  # differing formats: annotations only, dropped
        mult = [s["multipleOf"] for s, _ in parts if "multipleOf" in s]
        if mult:
            if any(x != mult[0] for x in mult):
                unsup("different multipleOf values")
            m["multipleOf"] = mult[0]
        anyofs = [s["anyOf"] for s, _ in parts if "anyOf" in s]
        if len(anyofs) == 1:
            m["anyOf"] = anyofs[0]
        elif anyofs:
            combos = list(product(*anyofs)) if math.prod(len(a) for a in anyofs) <= 256 else None
            if combos is None:
                unsup("too many anyOf combinations")
            m["anyOf"] = [{"allOf": list(c)} for c in combos]
        oneofs = [s["oneOf"] for s, _ in parts if "oneOf" in s]
        if len(oneofs) > 1:
            unsup("oneOf in several allOf members")
        if oneofs:
            m["oneOf"] = oneofs[0]
        handled = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                   "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "required",
                   "const", "enum", "properties", "additionalProperties", "prefixItems", "items",
                   "pattern", "format", "multipleOf", "anyOf", "oneOf"}
        nots = [s["not"] for s, _ in parts if "not" in s]
        if nots:
            m["not"] = nots[0] if len(nots) == 1 else {"anyOf": nots}  # ¬A ∧ ¬B = ¬(A ∨ B)
        for key in (_NOT_STR, _NOT_BOOL):
            vals = [v for s, _ in parts for v in s.get(key, [])]
            if vals:
                m[key] = list(dict.fromkeys(vals))
        handled |= {"not", _NOT_STR, _NOT_BOOL}
        for s, w in parts:
            for k, v in s.items():
                if k in handled or k in ANNOTATIONS or k not in KNOWN:
                    continue  # unknown keywords (x-..., vendor extensions) are annotations
                if k in m and m[k] != v:
                    unsup(f"keyword {k!r} in several allOf members", _ptr(w, k))
                m[k] = v
        return m

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

    # -- main dispatch ----------------------------------------------------------------------------
    def value(self, schema, where: str) -> str | None:
        """Regex of the JSON texts valid against ``schema`` (our subset), None = nothing."""
        r = self._value(schema, where)
        if r is not None and len(r) > self.max_size:
            raise CompileLimitError("max_regex_size", len(r), self.max_size,
                                    f"the regex for {where or 'the schema'} is too large (deeply nested or "
                                    "heavily shared $refs); lower max_recursion_depth or simplify the schema")
        return r

    def _value(self, schema, where: str) -> str | None:
        self._check_schema(schema, where)
        if schema is True or (isinstance(schema, dict) and not (schema.keys() - ANNOTATIONS)):
            return self.any_value()
        if schema is False:
            return None
        if "$ref" in schema or "allOf" in schema or "$dynamicRef" in schema:
            refs: list[str] = []
            flat = self.flatten([(schema, where)], where, refs, set())
            if flat is False:
                return None
            if self.grammar and refs:
                return self._ref_value(self.merge(flat, where), where, refs)
            for r in refs:
                if self.active.get(r, 0) >= self.depth:
                    self.cut = True
                    return None
            for r in refs:
                self.active[r] = self.active.get(r, 0) + 1
            try:
                merged = self.merge(flat, where)
                return self.value(merged, where)
            finally:
                for r in refs:
                    self.active[r] -= 1
        if "anyOf" in schema or "oneOf" in schema:
            return self.union(schema, where)
        if "not" in schema:
            schema = self.apply_not(schema, where)
            if schema is False:
                return None
            return self.value(schema, where)
        if "if" in schema:
            if "then" in schema or "else" in schema:
                raise UnsupportedFeatureError("if/then/else", "", _ptr(where, "if"))
        if "const" in schema or "enum" in schema:
            return self.enum(schema, where)
        return self.typed(schema, where)

    def _new_rule_name(self, refs: list[str]) -> str:
        """A deterministic, unused rule name for the schema that ``refs`` (its ``$ref`` strings,
        outermost first) lead to: ``ref:`` + the last pointer, characters outside
        ``[A-Za-z0-9_.:/-]`` as ``_``, ``.2``, ``.3``... on a clash."""
        base = "ref:" + re.sub(r"[^A-Za-z0-9_.:/-]", "_", unquote(refs[-1].lstrip("#")) or "root")
        name, i = base, 1
        while name in self.rules or name in self._progress.values() or name == ROOT_RULE:
            i += 1
            name = f"{base}.{i}"
        return name

    def _ref_value(self, merged, where: str, refs: list[str]) -> str | None:
        """Grammar mode: the text for a schema reached through ``$ref`` (``merged`` = the schema
        and its references intersected). Keyed by the canonical JSON of ``merged`` (its language
        depends on nothing else: references resolve from the root, the options are global): met
        again while it is being compiled (recursion) or a second time after (a shared reference),
        or longer than :attr:`inline_max`, it becomes the rule it names and the site a call."""
        if isinstance(merged, bool):
            return self.value(merged, where)
        key = json.dumps(merged, ensure_ascii=False, separators=(",", ":"), default=repr)
        name = self._rule_of.get(key)
        if name is not None:
            return f"(?&{name})"
        name = self._progress.get(key)
        if name is not None:  # recursion: the rule is registered when its body is done
            self._recursive.add(key)
            return f"(?&{name})"
        if key in self._inline:  # second use: promote the text to a rule (unless it is small)
            text = self._inline[key]
            if text is None or len(text) <= self.shared_inline_max:
                return text
            del self._inline[key]
            name = self._new_rule_name(refs)
            self.rules[name] = text
            self.rule_where[name] = where or "#"
            self._rule_of[key] = name
            return f"(?&{name})"
        if len(self._progress) >= MAX_REF_NESTING:
            raise CompileLimitError("max_ref_nesting", len(self._progress) + 1, MAX_REF_NESTING,
                                    f"$ref chain at {where or 'the root'} keeps producing new schemas "
                                    f"(last reference {refs[-1]!r})")
        name = self._new_rule_name(refs)
        self._progress[key] = name
        try:
            text = self.value(merged, where)
        finally:
            del self._progress[key]
        shared = any(self._ref_count.get(r, 0) > 1 for r in refs)
        if key in self._recursive or (text is not None and (
                len(text) > self.inline_max or (shared and len(text) > self.shared_inline_max))):
            self._recursive.discard(key)
            self.rules[name] = NEVER if text is None else text  # calls inside it then match nothing
            self.rule_where[name] = where or "#"
            self._rule_of[key] = name
            return None if text is None else f"(?&{name})"
        self._inline[key] = text
        return text

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

    def _deref(self, s, hops: int = 0):
        """Follow a ``$ref`` that has only annotation siblings (for the disjointness checks)."""
        while isinstance(s, dict) and "$ref" in s and not (set(s) - ANNOTATIONS - {"$ref"}) and hops < 16:
            try:
                s = self.resolve(s["$ref"], "")
            except Exception:
                return s
            hops += 1
        return s

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
                r = _Compiler._required_only(m)
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

    # -- enum / const ---------------------------------------------------------------------------
    def _validator_for(self, schema):
        from jsonschema import Draft202012Validator

        if self._validator is None:
            root = self.root if isinstance(self.root, (dict, bool)) else {}
            self._validator = Draft202012Validator(root)
        return self._validator.evolve(schema=schema)

    def enum(self, schema, where):
        if "enum" in schema and not isinstance(schema["enum"], list):
            raise GrammarSyntaxError("enum must be an array", json.dumps(schema["enum"]), 0, _ptr(where, "enum"))
        cands = [schema["const"]] if "const" in schema else list(schema["enum"])
        if "const" in schema and "enum" in schema:
            cands = [c for c in cands if any(_json_equal(c, e) for e in schema["enum"])]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const") and k not in ANNOTATIONS}
        # values excluded by a folded `not` (internal keywords jsonschema does not know)
        cands = [c for c in cands if not (isinstance(c, str) and c in schema.get(_NOT_STR, ()))
                 and not (isinstance(c, bool) and c in schema.get(_NOT_BOOL, ()))]
        if rest:
            v = self._validator_for(schema)
            cands = [c for c in cands if v.is_valid(c)]
        outs = []
        for c in cands:
            r = self.const(c, where)
            if r not in outs:
                outs.append(r)
        return alt(outs)

    def const(self, v, where) -> str:
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            # 1 and 1.0 are the same JSON Schema number (only where a float parser keeps it exact)
            if abs(v) > 2**1000 or float(v) != v:  # "v.0" would parse to a different float
                return str(v)
            return f"{v}(?:\\.0+)?" if v != 0 else "-?0(?:\\.0+)?"
        if isinstance(v, float):
            if not math.isfinite(v):
                raise GrammarSyntaxError("non-finite number in const/enum", repr(v), 0, where)
            if v.is_integer() and abs(v) < 1e16:
                i = int(v)
                return self.const(i, where)
            return repr(v).replace(".", r"\.").replace("+", r"\+")
        if isinstance(v, str):
            return literal_string_regex(v)
        if isinstance(v, list):
            if not v:
                return rf"\[{self.ws}\]"
            return rf"\[{self.ws}" + self.comma.join(self.const(x, where) for x in v) + rf"{self.ws}\]"
        if isinstance(v, dict):
            if not v:
                return rf"\{{{self.ws}\}}"
            body = self.comma.join(literal_string_regex(k) + self.colon + self.const(x, where) for k, x in v.items())
            return rf"\{{{self.ws}{body}{self.ws}\}}"
        raise GrammarSyntaxError("const/enum value is not JSON", repr(v), 0, where)

    # -- typed ----------------------------------------------------------------------------------
    def typed(self, schema, where):
        t = schema.get("type", list(TYPES))
        if isinstance(t, str):
            t = [t]
        if not isinstance(t, list) or not all(x in TYPES for x in t):
            raise GrammarSyntaxError(f"invalid type {t!r}", json.dumps(schema.get("type")), 0, _ptr(where, "type"))
        ts = set(t)
        outs = []
        if "null" in ts:
            outs.append("null")
        if "boolean" in ts:
            bools = [b for b in ("true", "false") if (b == "true") not in schema.get(_NOT_BOOL, [])]
            outs.append(alt(bools))
        if "number" in ts:
            outs.append(self.number(schema, where, integer=False))
        elif "integer" in ts:
            outs.append(self.number(schema, where, integer=True))
        if "string" in ts:
            outs.append(self.string(schema, where))
        if "array" in ts:
            outs.append(self.array(schema, where))
        if "object" in ts:
            outs.append(self.object(schema, where))
        return alt(outs)

    def number(self, schema, where, integer: bool):
        lo, hi = self._bounds(schema, where)
        if "multipleOf" in schema:
            mo = schema["multipleOf"]
            if mo <= 0:
                raise GrammarSyntaxError("multipleOf must be > 0", json.dumps(mo), 0, _ptr(where, "multipleOf"))
            trivial = integer and (Decimal(1) / _dec(mo)) == (Decimal(1) / _dec(mo)).to_integral_value()
            if not trivial:
                raise UnsupportedFeatureError("multipleOf", "only multipleOf dividing 1 on integers",
                                              _ptr(where, "multipleOf"))
        if integer:
            ilo = ihi = None
            if lo is not None:
                d = _dec(lo[0])
                ilo = int(d.to_integral_value(rounding="ROUND_FLOOR")) + 1 if lo[1] else \
                    int(d.to_integral_value(rounding="ROUND_CEILING"))
            if hi is not None:
                d = _dec(hi[0])
                ihi = int(d.to_integral_value(rounding="ROUND_CEILING")) - 1 if hi[1] else \
                    int(d.to_integral_value(rounding="ROUND_FLOOR"))
            if ilo is None and ihi is None:
                return JSON_INTEGER
            return integer_range(ilo, ihi)
        if lo is None and hi is None:
            return JSON_NUMBER
        # Validators parse a number written with a fraction or exponent as a binary float, so
        # 0.10000000000000001 "equals" 0.1. An exclusive bound b is therefore enforced as the
        # inclusive bound nextafter(b) (shortest repr): x >= that decimal implies float(x) > b,
        # by monotonic rounding — sound, and it only excludes decimals that round onto b.
        lo_d = lo_x = hi_d = hi_x = None
        if lo is not None:
            lo_d, lo_x = _exclusive_as_float(lo[0], lo[1], math.inf)
        if hi is not None:
            hi_d, hi_x = _exclusive_as_float(hi[0], hi[1], -math.inf)
        return number_range(lo_d, bool(lo_x), hi_d, bool(hi_x))

    def string(self, schema, where):
        for kw in ("minLength", "maxLength"):
            if kw in schema and not (isinstance(schema[kw], int) and not isinstance(schema[kw], bool)
                                     and schema[kw] >= 0):
                if _is_num(schema[kw]) and float(schema[kw]).is_integer() and schema[kw] >= 0:
                    continue
                raise GrammarSyntaxError(f"{kw} must be a non-negative integer", json.dumps(schema[kw]), 0,
                                         _ptr(where, kw))
        lmin = int(schema.get("minLength", 0))
        lmax = int(schema["maxLength"]) if "maxLength" in schema else None
        if lmax is not None and lmin > lmax:
            return None
        length = None if (lmin == 0 and lmax is None) else (lmin, lmax)
        if schema.get(_NOT_STR):
            if length is not None or "pattern" in schema:
                raise UnsupportedFeatureError("not", "not enum of strings together with a length bound or "
                                              "pattern", _ptr(where, "not"))
            return _key_not_in(schema[_NOT_STR])
        if "pattern" in schema:
            w = _ptr(where, "pattern")
            branches = parse_pattern(schema["pattern"], w)
            body = pattern_body_regex(branches, length, w)
            return None if body is None else f'"{body}"'
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in self.formats:
            flen = FORMAT_LENGTH.get(fmt)
            if length is None or (flen and lmin <= flen[0] and (lmax is None or flen[1] <= lmax)):
                return f'"{self.formats[fmt]}"'
            # format is an annotation in 2020-12: with a length bound we cannot intersect, drop it
        char = json_char_regex(ANY)
        if length is None:
            return STRING
        if lmax is None:
            q = "*" if lmin == 0 else ("+" if lmin == 1 else f"{{{lmin},}}")
        elif lmin == lmax:
            q = f"{{{lmin}}}"
        else:
            q = f"{{{lmin},{lmax}}}"
        if lmax == 0:
            return '""'
        return f'"(?:{char}){q}"'

    def _count(self, schema, kw, where):
        v = schema[kw]
        if _is_num(v) and float(v).is_integer() and v >= 0:
            return int(v)
        raise GrammarSyntaxError(f"{kw} must be a non-negative integer", json.dumps(v), 0, _ptr(where, kw))

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


def _count_refs(doc) -> dict[str, int]:
    """``$ref`` string -> number of times it is written anywhere in ``doc`` (iterative walk)."""
    out: dict[str, int] = {}
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            r = x.get("$ref")
            if isinstance(r, str):
                out[r] = out.get(r, 0) + 1
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return out


def _key_not_in(names: list[str]) -> str:
    """Canonically encoded JSON strings (quotes included) whose decoded value is not in names."""
    trie: dict = {}
    for n in names:
        node = trie
        for ch in n:
            node = node.setdefault(ch, {})
        node[None] = True
    tail = KEY_TAIL  # any canonical characters, then the closing quote

    def rec(node) -> str:
        # every branch ends the string itself, so the open-ended branches all end in the same
        # KEY_TAIL text: the native backend matches it through one shared rule
        parts = []
        chars = [c for c in node if c is not None]
        other = subtract(ANY, tuple((ord(c), ord(c)) for c in sorted(chars)))
        o = json_char_regex(tuple(sorted(set(other))), escapes=False) if other else None
        if o is not None:
            parts.append(f"{o}{tail}")
        for c in chars:
            enc = json_char_regex(((ord(c), ord(c)),), escapes=False)
            if enc is not None:  # a lone surrogate in a name has no canonical spelling
                parts.append(enc + rec(node[c]))
        if None not in node:  # not a listed name: the string may end here
            parts.append('"')
        return alt(parts) if parts else "(?!)"

    return '"' + rec(trie)


#: the end of a JSON string in canonical spelling: any characters, then the closing quote
KEY_TAIL = f'(?:{json_char_regex(ANY, escapes=False)})*"'


def schema_to_regex(schema: dict | bool, options: CompileOptions | None = None) -> str:
    """Compile a JSON Schema into a regex (structgate native dialect, full-match) of valid JSON texts.

    Parameters
    ----------
    schema : dict | bool | str
        Draft 2020-12 schema (a JSON string is parsed). ``$ref`` may point into the same document.
    options : CompileOptions | None
        ``whitespace`` ("flexible": ``[ \\t\\n\\r]{0,max_whitespace}`` between tokens, "compact":
        none), ``additional_properties`` (policy when a schema with ``properties`` omits
        ``additionalProperties``), ``max_recursion_depth`` (recursive ``$ref`` unrolling and the
        nesting depth of unconstrained JSON values, capped at ``extra["regex_unroll_depth"]``,
        default :data:`DEFAULT_REGEX_UNROLL_DEPTH` = 3: a flat regex doubles with every level).
        A recursive schema keeps this unrolled, sound approximation here;
        :func:`schema_to_grammar` is exact.

    Returns
    -------
    str
        The regex. Every text it matches parses as JSON and is valid against ``schema``; object
        keys appear in declared order. An unsatisfiable schema (e.g. ``false``) gives :data:`NEVER`.

    Raises
    ------
    GrammarSyntaxError
        Malformed schema or ``pattern`` (``where`` = JSON pointer of the keyword).
    UnsupportedFeatureError
        A keyword that cannot be enforced exactly (``where`` = its JSON pointer), or a recursive
        schema whose unrolling to ``max_recursion_depth`` leaves no valid value.
    CompileLimitError
        ``max_regex_size``: the regex text would exceed ``options.extra["max_regex_size"]``
        characters (default 4,000,000; expansions of shared/recursive ``$ref`` can grow
        exponentially).
    """
    options = options or CompileOptions()
    schema = _load(schema)
    c = _Compiler(schema, options)
    r = c.value(schema, "")
    if r is None:
        if c.cut:
            raise UnsupportedFeatureError("$ref (recursive)",
                                          f"no value fits within max_recursion_depth={options.max_recursion_depth}")
        return NEVER
    return r


def json_value_regex(options: CompileOptions | None = None, depth: int | None = None) -> str:
    """Any JSON value, containers nested at most ``depth`` (default ``options.max_recursion_depth``)
    levels deep; whitespace per ``options``. A sound approximation of JSON (which is not regular)."""
    c = _Compiler(True, options or CompileOptions())
    return c.any_value(depth)


# -- grammar mode ------------------------------------------------------------------------------------
def schema_to_grammar(schema: dict | bool | str, options: CompileOptions | None = None):
    """Compile a JSON Schema into a :class:`structgate.native.ir.Grammar` with rule references.

    Like :func:`schema_to_regex` (same keywords, policies and errors), except that nothing is
    unrolled: every unconstrained value (``{}``, ``true``, ``{"type": "object"}``, extra property
    values) is a call of one recursive rule ``json:value`` (any JSON value, any depth); a
    recursive ``$ref`` is a call of the rule for its (merged) schema; a ``$ref`` target met twice
    (or whose text exceeds ``options.extra["rule_inline_max_chars"]``, default 20,000) is a rule
    too, so ``$ref`` DAGs are not expanded. Rules are keyed by the canonical JSON of the merged
    schema they stand for and named ``ref:<pointer>`` (``.2``, ``.3``... on a clash), in the
    order the compiler meets them (deterministic). The nesting depth is then bounded only by the
    engine's stack limit (``options.max_recursion_depth``), not by this compiler.

    Parameters
    ----------
    schema : dict | bool | str
        Draft 2020-12 schema (a JSON string is parsed).
    options : CompileOptions | None
        As for :func:`schema_to_regex`; ``max_recursion_depth`` is not used here.

    Returns
    -------
    Grammar
        ``root = "root"``; every rule body is the regex AST with :class:`~structgate.native.ir.Ref`
        leaves (parsed with ``parse_regex(text, calls=True)``); ``origin`` gives each rule's JSON
        pointer. Rules that can produce no string are removed and their calls replaced by
        :data:`~structgate.native.ir.NOTHING`; an unsatisfiable schema (``false``, or a required
        self-reference: every valid value would be infinitely deep) gives a root that matches
        nothing (``Grammar.check`` then raises ``InvalidConstraintError``).

    Raises
    ------
    GrammarSyntaxError, UnsupportedFeatureError
        As :func:`schema_to_regex`.
    CompileLimitError
        ``max_regex_size`` (one rule's text), ``max_ref_nesting`` (a chain of more than
        :data:`MAX_REF_NESTING` ``$ref`` schemas that never repeat).
    """
    c, r = _compile_texts(schema, options)
    return _grammar(c, NEVER if r is None else r, "#")


def _compile_texts(schema, options):
    """The compiler pass of :func:`schema_to_grammar`: (compiler holding the rule texts, root text)."""
    options = options or CompileOptions()
    schema = _load(schema)
    c = _Compiler(schema, options, grammar=True)
    if isinstance(schema, dict) and (schema.keys() - ANNOTATIONS):
        # the root as the target of "#", so that a recursive "$ref": "#" calls the root's own rule
        r = c._ref_value(schema, "", ["#"]) if "$ref" not in schema and "allOf" not in schema \
            else c.value(schema, "")
    else:
        r = c.value(schema, "")
    return c, r


def check_schema(schema: dict | bool | str, options: CompileOptions | None = None) -> None:
    """Raise what :func:`schema_to_grammar` raises for the schema's keywords, without parsing the
    generated rule texts into the IR (about a tenth of the cost): the cheap check a server runs on
    a request before queueing it. An unsatisfiable schema is found only by the full compile.

    Raises
    ------
    GrammarSyntaxError, UnsupportedFeatureError, CompileLimitError
        As :func:`schema_to_grammar`.
    """
    _compile_texts(schema, options)


def json_value_grammar(options: CompileOptions | None = None):
    """Any JSON value, any nesting depth, whitespace per ``options``: a
    :class:`~structgate.native.ir.Grammar` whose root is the recursive rule ``json:value``."""
    c = _Compiler(True, options or CompileOptions(), grammar=True)
    c.any_value()
    return _grammar(c, None, "")


def json_object_grammar(options: CompileOptions | None = None):
    """Any JSON *object* (the ``json_object`` constraint), values of any depth (exact): a
    :class:`~structgate.native.ir.Grammar` with root ``root`` calling ``json:value``."""
    c = _Compiler(True, options or CompileOptions(), grammar=True)
    return _grammar(c, c._object_of(STRING, c.any_value()), "json_object")


def _load(schema):
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarSyntaxError(f"JSON Schema is not valid JSON: {e.msg}", str(schema), e.pos) from None
    return schema


def _grammar(c: _Compiler, root_text: str | None, root_where: str):
    from ..ir import Grammar
    from ..regex.parser import parse_regex

    texts = dict(c.rules)
    where = dict(c.rule_where)
    root = JSON_VALUE_RULE
    m = re.fullmatch(r"\(\?&([^)]*)\)", root_text or "")
    if m:  # the root is one call: that rule is the root
        root, root_text = m.group(1), None
    if root_text is not None:
        root = ROOT_RULE
        texts = {ROOT_RULE: root_text, **texts}
        where[ROOT_RULE] = root_where
    rules = {name: parse_regex(t, calls=True, where=where.get(name)) for name, t in texts.items()}
    g = Grammar(rules, root, origin=where)
    return _prune(g)


def _prune(g):
    """Drop rules that produce no string (their calls become NOTHING, simplified away) and rules
    the root no longer reaches."""
    from ..ir import NOTHING, Grammar, Ref
    from ..regex.parser import EMPTY, Alt, Concat, Repeat

    prod = g.productive_rules()
    if g.root not in prod:
        return Grammar({g.root: NOTHING}, g.root, origin={g.root: g.origin.get(g.root, "")})
    reach = g.reachable()
    if all(r in prod for r in reach):
        if len(reach) == len(g.rules):
            return g
        return Grammar({r: g.rules[r] for r in reach}, g.root, origin={r: g.origin[r] for r in reach if r in g.origin})
    memo: dict[int, Any] = {}

    def simplify(node):
        # iterative post-order over the (hash-consed) AST
        stack = [(node, False)]
        while stack:
            n, done = stack.pop()
            if id(n) in memo:
                continue
            kids = n.items if isinstance(n, (Concat, Alt)) else (n.item,) if isinstance(n, Repeat) else ()
            if not done and kids:
                stack.append((n, True))
                stack.extend((k, False) for k in kids if id(k) not in memo)
                continue
            if isinstance(n, Ref):
                out = n if n.name in prod else NOTHING
            elif isinstance(n, Concat):
                xs = [memo[id(k)] for k in n.items]
                out = NOTHING if any(x == NOTHING for x in xs) else Concat(tuple(xs))
            elif isinstance(n, Alt):
                xs = tuple({id(x): x for x in (memo[id(k)] for k in n.items) if x != NOTHING}.values())
                out = NOTHING if not xs else xs[0] if len(xs) == 1 else Alt(xs)
            elif isinstance(n, Repeat):
                x = memo[id(n.item)]
                out = (EMPTY if n.min == 0 else NOTHING) if x == NOTHING else Repeat(x, n.min, n.max)
            else:
                out = n
            memo[id(n)] = out
        return memo[id(node)]

    rules = {r: simplify(g.rules[r]) for r in reach if r in prod}
    g2 = Grammar(rules, g.root, origin={r: g.origin[r] for r in rules if r in g.origin})
    reach2 = g2.reachable()
    g2.rules = {r: g2.rules[r] for r in reach2}
    return g2


def json_object_regex(options: CompileOptions | None = None) -> str:
    """Any JSON *object* (the ``json_object`` constraint, as vLLM / OpenAI ``response_format``
    define it) whose values nest at most ``options.max_recursion_depth`` further container levels.
    Sound approximation: every match is a JSON object; deeper objects are excluded."""
    opt = options or CompileOptions()
    c = _Compiler(True, opt)
    return c._object_of(STRING, c.any_value(c.depth))
