"""Shared constants and helpers of the JSON Schema compiler: keyword sets, the internal keywords
of a folded ``not``, default limits, JSON pointers, JSON equality, numeric helpers, loading."""
from __future__ import annotations

import json
import math
from decimal import Decimal

from ... import _jsontext
from ...errors import GrammarSyntaxError
from ..regex.parser import MAX_REPEAT


#: a regex that matches nothing (a class over no code point) — returned for unsatisfiable schemas
NEVER = "[^\\u0000-\\uffff" + "\U00010000" + "-" + "\U0010ffff" + "]"

# internal keywords produced by `not` of an enum (never in user schemas)
_NOT_STR = "\x00structgate:not-strings"
#: patterns a string must not match (a folded ``not {pattern: P}``; the string emitter intersects
#: the complements of their automata)
_NOT_PATTERNS = "\x00structgate:not-patterns"
#: numbers whose value is not an integer (a folded ``not {type: integer}`` where numbers are
#: allowed; the number emitter writes a sound subset of them, :meth:`._type_number.NumberMixin._fractional`)
_FRACTIONAL = "\x00structgate:fractional"
#: positive integers a number must not be a multiple of (a folded ``not {multipleOf: m}``; the
#: number emitter writes the integer literals outside them and the non-integral numbers)
_NOT_MULT = "\x00structgate:not-multiples"
#: every ``contains`` of merged ``allOf`` members when they differ: a list of ``[contains,
#: minContains, maxContains]`` (``None``: absent), each bounding its own count (the array emitter
#: counts them together; ``contains`` keeps the first)
_CONTAINS_ALL = "\x00structgate:contains-all"
#: every ``pattern`` of a merged ``allOf`` when its members have two or more different ones (the
#: string emitter takes the product of their automata; ``pattern`` keeps the first)
_PATTERNS = "\x00structgate:patterns"
#: the ``additionalProperties`` of merged ``allOf`` members with ``patternProperties``: a list of
#: ``(schema, that member's patterns, that member's property names)``; each applies to a key that
#: is none of those names and that none of those patterns matches (the object emitter)
_ADDL_UNLESS = "\x00structgate:additional-unless"
_NOT_BOOL = "\x00structgate:not-booleans"
_NOT_INT = "\x00structgate:not-integers"
# internal keyword of a merge: the (float) multipleOf beside it was also given as an equal int
# (``allOf [{multipleOf: 3}, {multipleOf: 3.0}]``), tested exactly (``n % 3``) by validators
_MULT_INT = "\x00structgate:multiple-of-int-too"
#: the keyword each internal one was folded from, as error messages name it
SOURCE_KEYWORD = {_NOT_STR: "not", _NOT_BOOL: "not", _NOT_INT: "not", _NOT_PATTERNS: "not", _PATTERNS: "pattern",
                  _MULT_INT: "multipleOf", _ADDL_UNLESS: "additionalProperties",
                  _CONTAINS_ALL: "contains", _FRACTIONAL: "not", _NOT_MULT: "not"}

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
#: most states of a product automaton (pattern ∩ length, range ∩ multipleOf, keys ∩ propertyNames,
#: counted members/items) before ``CompileLimitError("max_product_states")``
#: (``CompileOptions.extra["max_product_states"]``)
DEFAULT_MAX_PRODUCT_STATES = 10_000
#: most ``patternProperties`` patterns whose keys overlap other patterns' partially (split into
#: ``2**n - 1`` key regions, one product automaton each) before ``CompileLimitError(
#: "max_pattern_regions")`` (``CompileOptions.extra["max_pattern_regions"]``)
DEFAULT_MAX_PATTERN_REGIONS = 6
#: an automaton whose eliminated regex text is longer than this (characters) is written as
#: right-linear rules in grammar mode (``CompileOptions.extra["automaton_inline_max_chars"]``)
DEFAULT_AUTOMATON_INLINE_MAX_CHARS = 4_000
#: grammar mode: most states of an automaton written as right-linear rules (the pushdown engine's
#: NFA build grows with the rule count: 3,000 rules cost ~15 s); ``CompileLimitError(
#: "max_automaton_rules")`` beyond (``CompileOptions.extra["max_automaton_rules"]``)
DEFAULT_MAX_AUTOMATON_RULES = 256
#: largest integer ``multipleOf`` compiled, also the least common multiple of the moduli a
#: remainder automaton tracks (one state per residue; ``CompileOptions.extra["max_multiple_of"]``).
#: Past ~1,000 residues each step of a number reaches new states whose masks are computed then:
#: ~0.2 s per mask on a 2-core VM (one digit token set per step), which this default bounds
#: (MaskBench's largest, ``Handwritten---allany8``, is 24,024)
DEFAULT_MAX_MULTIPLE_OF = 25_000
#: a bounded integer range whose ``multipleOf`` automaton is refused (``max_automaton_rules``,
#: ``max_product_states``, ``max_regex_size``) or whose ``multipleOf`` is above ``max_multiple_of``
#: is written as its multiples, one literal each, when it holds at most this many
#: (``CompileOptions.extra["max_enumerated_multiples"]``)
DEFAULT_MAX_ENUMERATED_MULTIPLES = 4_096
#: grammar mode: the rule names of the root and of "any JSON value"
#: the largest count a ``minLength``/``maxLength``/``minItems``/``maxItems``/``minContains``/
#: ``maxContains`` may give: counts become regex repetitions ``{m,n}``, bounded as in Python's re
#: (below 2**32 - 1); beyond it ``CompileLimitError("max_count")`` names the keyword
MAX_COUNT = MAX_REPEAT
#: keywords whose value is a count rendered as a repetition
REPEAT_COUNT_KW = ("minLength", "maxLength", "minItems", "maxItems", "minContains", "maxContains")

ROOT_RULE = "root"
JSON_VALUE_RULE = "json:value"

TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")

ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "$defs",
    "definitions",
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
                        "then", "else", "$dynamicRef", "$recursiveRef"})
KNOWN = ANNOTATIONS | STRING_KW | NUMBER_KW | OBJECT_KW | ARRAY_KW | GENERIC_KW | {
    _NOT_STR, _NOT_BOOL, _NOT_INT, _MULT_INT, _PATTERNS, _ADDL_UNLESS, _NOT_PATTERNS, _CONTAINS_ALL, _FRACTIONAL, _NOT_MULT}


def _ptr(where: str, *parts) -> str:
    return where + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _is_num(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):  # exact; math.isfinite would overflow on ints beyond float range
        return True
    return isinstance(v, float) and math.isfinite(v)


def _is_whole(v) -> bool:
    """A number (:func:`_is_num`) with no fractional part; exact for integers beyond float range
    (``float(10**400)`` would raise ``OverflowError``)."""
    return isinstance(v, int) or v.is_integer()


def _decimal_bound(v, exclusive: bool, toward: float) -> Decimal:
    """The inclusive decimal bound for literals *parsed as doubles* (those with a fraction part)
    for the number bound ``v`` (an int or a finite float; ``exclusive``; ``toward`` is ``+inf``
    for a lower bound, ``-inf`` for an upper one): always an inclusive bound.

    Validators read such a literal ``x`` as the double ``round(x)`` and compare it exactly with
    ``v``. Let ``g`` be the first double the bound admits (``v`` itself, the next double past an
    exclusive ``v``, the nearest double inside an integer ``v`` that is no double, e.g.
    9007199254740995). Rounding is monotonic, so ``x`` beyond ``repr(g)`` (which rounds to ``g``)
    gives ``round(x)`` beyond ``g``: sound, and it loses only decimals that round onto ``v`` from
    outside. With no finite double inside (a lower bound above the largest double), only literals
    that round to infinity pass: ``|x| >= 2**1024``. Integer literals are compared exactly by the
    caller (:func:`._type_number._integer_bounds`). The result may have hundreds of fraction digits
    (``5e-324``, the next double past an exclusive 0): the caller rounds it
    (:func:`._type_number._fit_fraction_digits`)."""
    up = toward > 0
    sign = Decimal(1) if up else Decimal(-1)
    try:
        f = float(v)
    except OverflowError:  # an int beyond the doubles
        if (v > 0) == up:  # a lower bound above every double (or an upper one below every double)
            return sign * Decimal(2 ** 1024)
        f = -math.inf if up else math.inf  # every finite double is inside: start at the extreme one
        g = math.nextafter(f, toward)
    else:
        g = f
        if (g < v if up else g > v) or (exclusive and g == v):
            g = math.nextafter(g, toward)
        if not math.isfinite(g):
            return sign * Decimal(2 ** 1024)
        if g == v and isinstance(v, int) and not isinstance(v, bool):
            return Decimal(v)  # an integer bound that is a double: its own digits
    return Decimal(repr(g))


def _pointer_tokens(frag: str) -> list[str]:
    """The unescaped reference tokens of the JSON pointer ``frag`` (RFC 6901, percent-decoded;
    ``""`` = the root: none)."""
    return [t.replace("~1", "/").replace("~0", "~") for t in frag.split("/")[1:]] if frag else []


def _pointer_target(root, frag: str):
    """``(node, tokens)`` at the JSON pointer ``frag`` (RFC 6901, percent-decoded; ``""`` = the
    root) in the document ``root``, with the pointer's unescaped tokens; None when it points
    nowhere."""
    node, tokens = root, []
    for tok in _pointer_tokens(frag):
        if isinstance(node, dict) and tok in node:
            node = node[tok]
        elif isinstance(node, list) and tok.isdigit() and int(tok) < len(node):
            node = node[int(tok)]
        else:
            return None
        tokens.append(tok)
    return node, tokens


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


def _json_key(v):
    """A hashable key of the JSON value ``v`` such that two values get equal keys iff
    :func:`_json_equal` (and jsonschema's ``equal``) holds: ``true`` is not ``1``, ``1`` is ``1.0``
    (numbers compare and hash by value), arrays and objects by their members. None for what has no
    such key (a NaN, a non-JSON object, nesting deeper than Python's recursion)."""
    try:
        return _key(v)
    except (RecursionError, _NoKey):
        return None


class _NoKey(Exception):
    pass


def _key(v):
    if isinstance(v, bool):
        return ("b", v)
    if _is_num(v) or (isinstance(v, float) and math.isinf(v)):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return ("o", frozenset((k, _key(x)) for k, x in v.items()))
    raise _NoKey


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


def _load(schema):
    if isinstance(schema, (str, bytes)):
        try:
            return _jsontext.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarSyntaxError(f"JSON Schema is not valid JSON: {e.msg}", str(schema), e.pos) from None
        except RecursionError:
            from ...backends.interface import _text_depth, _too_deep

            raise _too_deep(_text_depth(schema), "JSON Schema") from None
    return schema


def _retyped(v, to):
    """``v`` with every number that has an exact twin of type ``to`` (``int`` for an integral
    float, ``float`` for an int a double holds exactly) replaced by it; None when nothing changes."""
    if isinstance(v, bool):
        return None
    if to is int and isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        return int(v)
    if to is float and isinstance(v, int) and abs(v) <= 2 ** 53:
        return float(v)
    if isinstance(v, list):
        new = [_retyped(x, to) for x in v]
        return None if all(x is None for x in new) else [x if n is None else n for x, n in zip(v, new)]
    if isinstance(v, dict):
        new = {k: _retyped(x, to) for k, x in v.items()}
        return None if all(x is None for x in new.values()) else {k: v[k] if n is None else n
                                                                   for k, n in new.items()}
    return None


def _with_twins(v) -> list:
    """``v`` followed by its twins (:func:`_retyped` to ``int`` and to ``float``, where they differ):
    the values draft 4 tells apart by ``type`` while ``enum``/``const`` call them equal."""
    return [v] + [t for t in (_retyped(v, int), _retyped(v, float)) if t is not None]
