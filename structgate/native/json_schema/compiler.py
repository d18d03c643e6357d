"""JSON Schema (draft 2020-12 subset) → regex / rule grammar for the native engine.

See ``docs/json-schema.md`` for the supported keywords and every policy/approximation. In short:
the output accepts a *sound subset* of the schema's valid instances (every accepted text is a JSON
document valid against the schema), never more; where a keyword cannot be enforced exactly the
compiler raises :class:`UnsupportedFeatureError` with the keyword and its JSON pointer.

The construction follows Outlines' ``build_regex_from_schema`` (Willard & Louf 2023, "Efficient
Guided Generation for Large Language Models"), with exact numeric ranges, decoded-length string
bounds, JSON-encoded pattern translation and a linear chain for optional properties.

This module holds the compiler's core (:class:`_Compiler`: options, dispatch, ``enum``/``const``,
``type``) and the public functions; the rest is split by concern:

* :mod:`._refs` — ``$ref`` resolution, ``$ref``/``allOf`` flattening, the grammar-mode rule registry;
* :mod:`._merge` — ``allOf`` intersection;  :mod:`._union` — ``anyOf``/``oneOf``;
* :mod:`._negation` — ``not``;
* :mod:`._type_string`, :mod:`._type_number`, :mod:`._type_array`, :mod:`._type_object` — per-type
  emitters;  :mod:`._formats` — ``format`` regexes;
* :mod:`._common` — keyword sets, defaults, helpers;  :mod:`._grammar` — rule texts → IR.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from functools import lru_cache
from typing import Any

from ...backends.interface import CompileOptions, _nesting_limit
from ...errors import CompileLimitError, GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError, clip
from ._charset import _SPLIT_PAIR, STRING, literal_string_regex
from ._automata import from_ast, matches
from ._common import (_ADDL_UNLESS, _CONTAINS_ALL, _FRACTIONAL, _MULT_INT, _NOT_BOOL, _NOT_INT, _NOT_MULT, _NOT_PATTERNS,
                      _NOT_STR, _PATTERNS, ANNOTATIONS, DEFAULT_AUTOMATON_INLINE_MAX_CHARS,
                      DEFAULT_MAX_AUTOMATON_RULES, DEFAULT_MAX_PATTERN_REGIONS, DEFAULT_MAX_PRODUCT_STATES,
                      DEFAULT_MAX_REGEX_SIZE, DEFAULT_REGEX_UNROLL_DEPTH, DEFAULT_RULE_INLINE_MAX_CHARS,
                      DEFAULT_SHARED_INLINE_MAX_CHARS, JSON_VALUE_RULE, MAX_COUNT, NEVER, REPEAT_COUNT_KW,
                      SOURCE_KEYWORD, TYPES, _count_refs, _is_num, _is_whole, _json_equal, _json_key, _load, _ptr, _with_twins)
from ._formats import FORMAT_MAX_LENGTH, FORMAT_REGEX, LENIENT_ANNOTATIONS, UNASSERTED_FORMATS
from ._grammar import KEY_TAIL_RULE, STRING_RULE, _grammar, key_not_in_ir, shared_rule_ir
from ._merge import MergeMixin
from ._negation import NegationMixin
from ._normalize import normalize
from ._numeric import JSON_NUMBER, alt, number_literal_regex
from ._pattern import parse_pattern, pattern_ast
from ._refs import RefsMixin
from ._shape import check_shapes
from ._type_array import ArrayMixin
from ._type_number import NumberMixin
from ._type_object import ObjectMixin
from ._type_string import StringMixin
from ._union import UnionMixin

# names that lived in this module before the split (structgate.native.backend imports KEY_TAIL)
from ._common import MAX_REF_NESTING, ROOT_RULE  # noqa: F401
from ._formats import FORMAT_LENGTH  # noqa: F401
from ._grammar import _prune  # noqa: F401
from ._numeric import JSON_INTEGER  # noqa: F401
from ._type_string import KEY_TAIL, _key_not_in  # noqa: F401

__all__ = ["check_schema", "schema_to_regex", "json_object_regex", "json_value_regex", "schema_to_grammar",
           "json_object_grammar", "json_value_grammar", "NEVER", "FORMAT_REGEX", "LENIENT_ANNOTATIONS",
           "UNASSERTED_FORMATS"]


class _CheckedValidator:
    """``is_valid`` of a jsonschema validator, with the errors of a schema it cannot evaluate
    turned into :class:`GrammarSyntaxError` (see :meth:`_Compiler._validator_for`)."""

    __slots__ = ("_v", "_schema", "_where")

    def __init__(self, v, schema, where: str) -> None:
        self._v, self._schema, self._where = v, schema, where

    def is_valid(self, instance) -> bool:
        try:
            return self._v.is_valid(instance)
        except RecursionError:
            raise
        except _RefusedFormat as e:  # a string checked against a format the compile refuses
            w = self._where or "#"
            if isinstance(self._schema, dict) and self._schema.get("format") == e.fmt:
                w = _ptr(self._where, "format")
            raise _refused_format_error(e.fmt, w) from None
        except Exception as e:  # jsonschema's UnknownType, referencing's Unresolvable, re.error...
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            try:
                text = json.dumps(self._schema)[:200]
            except (TypeError, ValueError):
                text = repr(self._schema)[:200]
            raise GrammarSyntaxError(f"the schema cannot be evaluated ({type(e).__name__}: {msg})", text, 0,
                                     self._where or "#") from None


_VALIDATOR_CLASSES: dict = {}

#: an ``enum`` (an ``anyOf`` of ``const``/``enum`` branches) of at least this many values
#: (branches) is checked through a key set: :func:`_hashed_enum`, :func:`_hashed_any_of`
ENUM_SET_MIN = 16
#: (id(list), kind) -> (the list, its length, its key set or None); at most :data:`_KEY_SETS_MAX`
#: lists (then emptied): the lists of the schemas being compiled
_KEY_SETS: dict[tuple, tuple] = {}
_KEY_SETS_MAX = 64


def _branch_values(b) -> list | None:
    """The values of an ``anyOf`` branch that only lists values (``const`` or ``enum``, beside
    annotations), else None."""
    if not isinstance(b, dict):
        return None
    ks = set(b) - ANNOTATIONS
    if ks == {"const"}:
        return [b["const"]]
    if ks == {"enum"} and isinstance(b["enum"], list):
        return b["enum"]
    return None


def _key_set(lst: list, kind: str):
    """The :func:`._common._json_key` set of the values of ``lst`` (``kind`` ``"enum"``: its items;
    ``"anyOf"``: the values of its branches, None unless every branch only lists values), None when
    a value has no key; cached by the list's identity."""
    hit = _KEY_SETS.get((id(lst), kind))
    if hit is None or hit[0] is not lst or hit[1] != len(lst):
        if kind == "enum":
            vals: list | None = lst
        else:
            parts = [_branch_values(b) for b in lst]
            vals = None if None in parts else [v for p in parts for v in p]
        keys = None if vals is None else [_json_key(x) for x in vals]
        if len(_KEY_SETS) >= _KEY_SETS_MAX:
            _KEY_SETS.clear()
        hit = _KEY_SETS[(id(lst), kind)] = (lst, len(lst), None if keys is None or None in keys else frozenset(keys))
    return hit[2]


def _hashed(keyword: str, what: str):
    """jsonschema's ``keyword`` check (``enum`` or ``anyOf``) with the same verdicts, in O(1) per
    instance for a long list: a lookup in the list's key set (:func:`_key_set`; the
    :func:`._common._json_key` equality is jsonschema's ``equal``). jsonschema scans the list (an
    ``anyOf`` tries each branch) and, for an instance not in an ``enum``, writes the whole list into
    the error message — checking the values of an ``enum`` of N against a schema with a ``$ref``'d,
    ``allOf``'d or negated ``enum`` of M costs N·M (20,000 values: minutes). Lists shorter than
    :data:`ENUM_SET_MIN`, an ``anyOf`` with a branch that does not only list values
    (``const``/``enum``), and instances without a key go to jsonschema's own check."""
    from jsonschema import _keywords

    fallback = getattr(_keywords, keyword)

    def check(validator, values, instance, schema):
        from jsonschema.exceptions import ValidationError

        if isinstance(values, list) and len(values) >= ENUM_SET_MIN:
            keys, k = _key_set(values, keyword), _json_key(instance)
            if keys is not None and k is not None:
                if k not in keys:
                    yield ValidationError(f"{instance!r} is not one of the {len(values)} {what}")
                return
        yield from fallback(validator, values, instance, schema)

    check.__name__ = f"_hashed_{keyword}"
    return check


_hashed_enum = _hashed("enum", "values of the enum")
_hashed_any_of = _hashed("anyOf", "value-listing branches of the anyOf")


def exact_multiple_of(validator, dB, instance, schema):
    """jsonschema's ``multipleOf`` keyword with its verdicts wherever it reaches one, and the exact
    test (``Fraction(instance) / Fraction(dB)`` integral) where it raises ``OverflowError``: a float
    against an int beyond the doubles (``0.5`` and ``multipleOf: 10**400``: ``0.5 % 10**400``), an
    int beyond the doubles against a float (``10**400`` and ``multipleOf: 0.5``: ``10**400 /
    0.5``). jsonschema's own fallback, where only the quotient overflows, is that exact test too;
    so an ``enum`` of huge integers beside a ``multipleOf`` is filtered exactly instead of failing
    the compile."""
    from fractions import Fraction

    from jsonschema import _keywords
    from jsonschema.exceptions import ValidationError

    try:
        errors = list(_keywords.multipleOf(validator, dB, instance, schema))
    except OverflowError:
        if (Fraction(instance) / Fraction(dB)).denominator != 1:
            errors = [ValidationError(f"{instance!r} is not a multiple of {dB}")]
        else:
            errors = []
    yield from errors


def _short_not(validator, not_schema, instance, schema):
    """jsonschema's ``not`` keyword, the same verdicts, without writing ``not_schema`` (a list of
    20,000 values) into the message of each failure: the compiler reads verdicts only."""
    from jsonschema.exceptions import ValidationError

    if validator.evolve(schema=not_schema).is_valid(instance):
        yield ValidationError(f"{instance!r} should not be valid under the schema of not")


def _validator_class(draft: int):
    """The ``jsonschema`` validator class of the compiler's checks (``enum`` values against their
    siblings, finite branches, disjointness) in a normalised document (:mod:`._normalize`) whose
    root declares ``draft`` (4, 6, 7, 2019, 2020; 0: none). The normalisation has already written
    the document in 2020-12 form (``prefixItems``, numeric ``exclusive*``, ``$recursiveRef`` as
    ``$ref``) and removed, per resource, the keywords that resource's draft does not define
    (``const`` in draft 4, ``dependencies`` in 2019-09 and later, every sibling of ``$ref`` in drafts 4
    to 7), so the checks read it with Draft 2020-12, plus:

    * ``dependencies`` (draft 7's: arrays of names or a schema), which stays only in a resource of a
      draft that defines it, or undeclared (where the compiler enforces it too);
    * for a draft-4 document (root or embedded resource), draft 4's type checker: an integral float
      (``2.0``) is no ``integer``, the one reading that 2020-12 keywords cannot express (the rest
      of the compiler writes integers as integer literals, and in such a document spells an
      ``enum`` value with the type it has: :meth:`_Compiler.const`). The normalisation reports
      draft 4 when any resource declares it: the whole document's integers are then read that way
      (stricter elsewhere, never looser).

    ``enum``, ``anyOf`` and ``not`` are jsonschema's with the same verdicts, made linear for long
    value lists (:func:`_hashed_enum`, :func:`_hashed_any_of`, :func:`_short_not`): the compiler
    checks thousands of ``enum`` values against schemas holding thousands more. ``multipleOf`` is
    jsonschema's, exact where jsonschema overflows (:func:`exact_multiple_of`)."""
    cls = _VALIDATOR_CLASSES.get(draft)
    if cls is None:
        import jsonschema
        from jsonschema import Draft202012Validator, validators

        extra = {"dependencies": jsonschema.Draft7Validator.VALIDATORS["dependencies"], "enum": _hashed_enum,
                 "anyOf": _hashed_any_of, "not": _short_not, "multipleOf": exact_multiple_of, **_INTERNAL_CHECKS}
        if draft == 4:
            cls = validators.extend(Draft202012Validator, extra, type_checker=jsonschema.Draft4Validator.TYPE_CHECKER)
        else:
            cls = validators.extend(Draft202012Validator, extra)
        cls.evolve = _evolve_in_class(cls.evolve)
        cls = _VALIDATOR_CLASSES[draft] = cls
    return cls


# -- the internal keywords (a folded ``not``, merged ``allOf`` members) as the validator reads them ---
# The compiler's checks (an ``enum``/``const`` value against its siblings, an ``allOf`` with a finite
# member, finite ``oneOf`` branches, disjointness) may see a schema the compiler rewrote, holding
# the internal keywords of :mod:`._common`; jsonschema would ignore them as unknown keywords and
# keep values they exclude (``oneOf [{pattern: a}, {anyOf: [{const: a}, {const: b}]}]``: the second
# branch minus the first is ``allOf [anyOf [...], {not-patterns: [a]}]``, whose allOf-with-a-finite
# -member check kept "a", valid against both branches). Each is checked as its emitter reads it.
def _err(msg: str):
    from jsonschema.exceptions import ValidationError

    return ValidationError(msg)


#: (id(list)) -> (the list, its length, the set of its hashable items): the excluded values of a
#: folded ``not`` (20,000 of them: a list scan per checked value would be quadratic)
_VALUE_SETS: dict[int, tuple] = {}


def _value_set(lst) -> frozenset:
    hit = _VALUE_SETS.get(id(lst))
    if hit is None or hit[0] is not lst or hit[1] != len(lst):
        if len(_VALUE_SETS) >= _KEY_SETS_MAX:
            _VALUE_SETS.clear()
        hit = _VALUE_SETS[id(lst)] = (lst, len(lst), frozenset(v for v in lst if isinstance(v, (str, int, float))))
    return hit[2]


def _check_not_strings(validator, names, instance, schema):
    if isinstance(instance, str) and instance in _value_set(names):
        yield _err(f"{instance!r} is an excluded string")


def _check_not_booleans(validator, values, instance, schema):
    if isinstance(instance, bool) and any(isinstance(v, bool) and v is instance for v in values):
        yield _err(f"{instance!r} is an excluded boolean")


def _check_not_integers(validator, values, instance, schema):
    # (numbers hash by value: 1.0 is found among ints as 1; a boolean instance is never a number)
    if _is_num(instance) and not isinstance(instance, bool) and instance in _value_set(values):
        yield _err(f"{instance!r} is an excluded number")


@lru_cache(maxsize=256)
def _either_dialect_dfa(p: str):
    """The automaton of the strings ``p`` matches as ECMA-262 or Python's ``re`` reads it (the
    string emitter's reading of a ``not {pattern}``); None when it cannot be built."""
    try:
        return from_ast(pattern_ast(parse_pattern(p, "", upper=True), upper=True), max_states=100_000,
                        what="not pattern", where="")
    except Exception:  # (the string emitter raises its typed error for it)
        return None


def _check_not_patterns(validator, pats, instance, schema):
    if isinstance(instance, str):
        for p in pats:
            d = _either_dialect_dfa(p) if isinstance(p, str) else None
            if d is None or matches(d, instance):  # (undecided: excluded, never kept)
                yield _err(f"{instance!r} matches an excluded pattern")
                return


def _check_patterns(validator, pats, instance, schema):
    from jsonschema import _keywords

    for p in pats:
        yield from _keywords.pattern(validator, p, instance, schema)


def _check_fractional(validator, on, instance, schema):
    if on and _is_num(instance) and not isinstance(instance, bool) and (
            isinstance(instance, int) or float(instance).is_integer()):
        yield _err(f"{instance!r} is an integer")


def _check_not_multiples(validator, ms, instance, schema):
    # (as jsonschema tests an int multipleOf: Python's %)
    if _is_num(instance) and not isinstance(instance, bool) and any(instance % m == 0 for m in ms):
        yield _err(f"{instance!r} is a multiple of an excluded integer")


def _check_contains_all(validator, conts, instance, schema):
    for c, lo, hi in conts:
        sub = {"contains": c}
        if lo is not None:
            sub["minContains"] = lo
        if hi is not None:
            sub["maxContains"] = hi
        yield from validator.descend(instance, sub)


def _check_additional_unless(validator, entries, instance, schema):
    import re

    if not isinstance(instance, dict):
        return
    for addl, pats, names in entries:
        for k, v in instance.items():
            if k in names or any(re.search(p, k) for p in pats):
                continue
            yield from validator.descend(v, addl, path=k)


def _check_multiple_of_int(validator, on, instance, schema):
    m = schema.get("multipleOf")
    if on and _is_num(m) and float(m).is_integer() and _is_num(instance) and not isinstance(instance, bool):
        yield from exact_multiple_of(validator, int(m), instance, schema)


_INTERNAL_CHECKS = {_NOT_STR: _check_not_strings, _NOT_BOOL: _check_not_booleans, _NOT_INT: _check_not_integers,
                    _NOT_PATTERNS: _check_not_patterns, _PATTERNS: _check_patterns, _FRACTIONAL: _check_fractional,
                    _CONTAINS_ALL: _check_contains_all, _ADDL_UNLESS: _check_additional_unless,
                    _MULT_INT: _check_multiple_of_int, _NOT_MULT: _check_not_multiples}


def _evolve_in_class(evolve):
    """``evolve`` (which ``descend`` calls for every subschema) keeping the validator's class: the
    normalised document is in 2020-12 form everywhere, but jsonschema's ``evolve`` switches to the
    stock class of a subschema's ``$schema`` (a draft-4 resource, or a root's keywords copied into
    an ``allOf`` member, ``$schema`` included), which reads a normalised ``exclusiveMaximum: 0`` as
    draft 4 does (no bound without ``maximum``) and drops this class's checks: a break-it found
    ``{"$schema": draft-04, "maximum": 0, "exclusiveMaximum": true, "anyOf": [{"enum": [1]}]}``
    accepting ``1``. A subschema's ``$schema`` is dropped before ``evolve`` picks the class."""

    def keep_class(self, **changes):
        schema = changes.get("schema")
        if isinstance(schema, dict) and "$schema" in schema:
            changes["schema"] = {k: v for k, v in schema.items() if k != "$schema"}
        return evolve(self, **changes)

    return keep_class


class _RefusedFormat(Exception):
    """Raised by :func:`_format_checker`'s check of a refused format (:data:`UNASSERTED_FORMATS`) on a
    string; :class:`_CheckedValidator` turns it into :func:`_refused_format_error`."""

    def __init__(self, fmt: str) -> None:
        super().__init__(fmt)
        self.fmt = fmt


#: why each of :data:`UNASSERTED_FORMATS` is refused (the error's detail)
_REFUSED_WHY = {
    "idn-hostname": "IDNA2008 host names (RFC 5890-5893: Unicode code-point tables, contextual and Bidi rules, "
                    "Punycode A-labels)",
    "idn-email": "RFC 6531 addresses, whose domain is an IDNA2008 host name",
    "regex": "ECMA-262 regular expression syntax (group names and back-references that must match, "
             "{n,m} with n <= m)",
}


def _refused_format_error(fmt: str, where: str) -> UnsupportedFeatureError:
    """The typed error for ``format`` ``fmt`` (one of :data:`UNASSERTED_FORMATS`) at ``where``."""
    return UnsupportedFeatureError("format", f"{fmt!r}: {_REFUSED_WHY.get(fmt, fmt)} are not asserted by the "
                                   "native compiler; options.extra[\"formats\"] = \"lenient\" leaves the format "
                                   "an annotation", where)


@lru_cache(maxsize=8)
def format_policy(value: Any) -> str:
    """``value`` of the ``formats`` option (``"default"``, ``"strict"`` or ``"lenient"``), checked:
    every JSON Schema compile calls it, and :meth:`NativeBackend.check_options` at startup.

    Raises
    ------
    UnsupportedFeatureError
        Any other value.
    """
    if value not in ("default", "strict", "lenient"):
        raise UnsupportedFeatureError('options.extra["formats"]',
                                      f'{value!r} (expected "default", "strict" or "lenient")', "")
    return value


#: :data:`FORMAT_REGEX` compiled, by format, for the process: compiled on a format's first check
#: (``iri-reference`` takes ~120 ms to compile, the 16 together ~140 ms), not on every compile that
#: builds a validator (Python's own ``re`` cache keeps 512 patterns and drops the oldest first, so
#: a long-lived process compiled them again after 512 other patterns); a format no value is checked
#: against is never compiled
_FORMAT_RX: dict[str, Any] = {}


def _format_rx(fmt: str):
    """The compiled :data:`FORMAT_REGEX` of ``fmt`` (memoised for the process)."""
    rx = _FORMAT_RX.get(fmt)
    if rx is None:
        import re

        rx = _FORMAT_RX[fmt] = re.compile(FORMAT_REGEX[fmt])
    return rx


def _format_checker(formats: tuple[str, ...], refused: tuple[str, ...] = ()):
    """A ``jsonschema.FormatChecker`` of exactly ``formats``, each by its :data:`FORMAT_REGEX`
    (full match on the decoded string) and :data:`FORMAT_MAX_LENGTH` (other instances pass), so
    the validators the compiler consults (``enum``/``const`` values, ``oneOf`` disjointness,
    ``propertyNames``) read a format as the emitters do: asserted, with the same language. A
    ``refused`` format's check raises :class:`_RefusedFormat` on a string (the emitters refuse it:
    no value of it is decided either)."""
    from jsonschema import FormatChecker

    checker = FormatChecker(formats=())
    for fmt in formats:
        top = FORMAT_MAX_LENGTH.get(fmt)
        checker.checks(fmt)(lambda x, fmt=fmt, top=top: not isinstance(x, str) or (
            _format_rx(fmt).fullmatch(x) is not None and (top is None or len(x) <= top)))

    def refuse(x, fmt):
        if isinstance(x, str):
            raise _RefusedFormat(fmt)
        return True

    for fmt in refused:
        checker.checks(fmt)(lambda x, fmt=fmt: refuse(x, fmt))
    return checker


class _Compiler(RefsMixin, MergeMixin, UnionMixin, NegationMixin, NumberMixin, StringMixin, ArrayMixin,
                ObjectMixin):
    def __init__(self, root: Any, options: CompileOptions, grammar: bool = False, draft: int = 0):
        self.root = root
        #: the draft the document's root declares (:func:`._normalize.normalize`; 0: none)
        self.draft = draft
        self.opt = options
        #: ``time.monotonic()`` past which :meth:`value` raises ``CompileLimitError("compile_timeout_s")``
        #: (the backend checks the deadline again between stages; this keeps a long schema walk prompt)
        lim = options.compile_timeout_s
        self.deadline = time.monotonic() + lim if lim and lim > 0 else None
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
        #: grammar mode: rule name -> the ``$ref`` it stands for (rules named by :meth:`_new_rule_name`)
        self.rule_ref: dict[str, str] = {}
        #: grammar mode: rules whose IR is built directly (no text): the shared JSON string and
        #: key-tail rules, key exclusions
        self.ir_rules: dict = {}
        #: grammar mode: rules kept as calls (:attr:`structgate.native.ir.Grammar.keep_calls`): the
        #: member-set rules of any-order objects, a DAG that inlining would expand into n! paths
        self.keep_calls: set[str] = set()
        self._keyx: dict[tuple, str] = {}  # names -> key-exclusion rule
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
        #: subschemas found to admit no value, in the order they were finished (deepest first):
        #: (JSON pointer, their keywords), for the message of an unsatisfiable schema
        self.empty: list[tuple[str, tuple[str, ...]]] = []
        self._any: dict[int, str] = {}
        self._validator = None
        #: draft 4 (the root's): ``1`` and ``1.0`` are different instances (only the first is an
        #: ``integer``), so an ``enum``/``const`` number is spelled with its own type
        self.int_strict = draft == 4
        #: regex text size limit, characters (``options.extra["max_regex_size"]``)
        self.max_size = int(options.extra.get("max_regex_size", DEFAULT_MAX_REGEX_SIZE))
        #: product automata (:mod:`._automata`): state bound, inline-text bound, texts by key
        self.max_product_states = int(options.extra.get("max_product_states", DEFAULT_MAX_PRODUCT_STATES))
        #: ``patternProperties`` key regions: most partially overlapping patterns (``2**n - 1`` regions)
        self.max_pattern_regions = int(options.extra.get("max_pattern_regions", DEFAULT_MAX_PATTERN_REGIONS))
        self.automaton_inline_max = int(options.extra.get("automaton_inline_max_chars",
                                                          DEFAULT_AUTOMATON_INLINE_MAX_CHARS))
        self.max_automaton_rules = int(options.extra.get("max_automaton_rules", DEFAULT_MAX_AUTOMATON_RULES))
        self._dfa_texts: dict[tuple, str | None] = {}
        #: liveness cells of the lazily generated remainder automata so far (one budget per compile)
        self._residue_cells = 0
        #: format policy (``options.extra["formats"]``): "default" (or its old name "strict") enforces
        #: every FORMAT_REGEX and refuses UNASSERTED_FORMATS (:meth:`refused_format`); "lenient"
        #: leaves LENIENT_ANNOTATIONS and UNASSERTED_FORMATS as annotations; other formats are
        #: annotations either way
        fmode = format_policy(options.extra.get("formats", "default"))
        self.formats = ({k: v for k, v in FORMAT_REGEX.items() if k not in LENIENT_ANNOTATIONS}
                        if fmode == "lenient" else dict(FORMAT_REGEX))
        #: formats whose strings this compile refuses to constrain (``UnsupportedFeatureError``)
        self.refused_formats = frozenset() if fmode == "lenient" else UNASSERTED_FORMATS

    # -- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def refused_format(fmt: str, where: str) -> UnsupportedFeatureError:
        """The error for a string constrained by ``format`` ``fmt`` (in :attr:`refused_formats`) at
        ``where`` (the ``format`` keyword's pointer)."""
        return _refused_format_error(fmt, where)

    @property
    def any_string(self) -> str:
        """Any JSON string: in grammar mode a call of :data:`._grammar.STRING_RULE`, else
        :data:`STRING`."""
        if not self.grammar:
            return STRING
        if STRING_RULE not in self.ir_rules:
            self.ir_rules[STRING_RULE] = shared_rule_ir(STRING_RULE)
        return f"(?&{STRING_RULE})"

    def string_rule(self, name: str, text: str, where: str = "a JSON string") -> str:
        """``text`` (a JSON string's regex, quotes included) in regex mode; in grammar mode a call
        of rule ``name`` holding it, kept as a call (:attr:`keep_calls`) like
        :data:`._grammar.STRING_RULE`: inlined, every value position of such a string is a
        configuration of its own whose walk covers most of the vocabulary; called, the walk inside
        the rule is one per grammar (and shared across grammars by the rule's structure,
        :func:`~structgate.native.pushdown._shared_walks`), and each position checks only the
        tokens that close the string mid-token. ``name`` must determine ``text``; ``where`` (the
        keyword's JSON pointer) is what errors in the rule's text name."""
        if not self.grammar:
            return text
        if name not in self.rules:
            self.rules[name] = text
            self.rule_where[name] = where
        self.keep_calls.add(name)
        return f"(?&{name})"

    def string_body_rule(self, body: str | None, where: str) -> str | None:
        """:meth:`string_rule` for the string ``"body"`` (None for None), the rule named by a
        digest of ``body`` (the same pattern or format under several properties is one rule)."""
        if body is None:
            return None
        return self.string_rule("__json_str_" + hashlib.blake2b(body.encode(), digest_size=8).hexdigest(),
                                f'"{body}"', where)

    def key_not_in(self, names) -> str:
        """Canonically spelled JSON strings (quotes included) whose decoded value is not in
        ``names``: in grammar mode a call of a rule built as IR (:func:`._grammar.key_not_in_ir`;
        used once, the engine inlines it), else the text of :func:`_key_not_in`."""
        if not self.grammar:
            return _key_not_in(names)
        key = tuple(names)
        name = self._keyx.get(key)
        if name is None:
            name = self._keyx[key] = f"__keyx{len(self._keyx)}"
            self.ir_rules[name] = key_not_in_ir(key)
            if KEY_TAIL_RULE not in self.ir_rules:
                self.ir_rules[KEY_TAIL_RULE] = shared_rule_ir(KEY_TAIL_RULE)
        return f"(?&{name})"

    def any_value(self, depth: int | None = None) -> str:
        """Any JSON value: in grammar mode a call of the recursive rule :data:`JSON_VALUE_RULE` (any
        depth; ``depth`` ignored), in regex mode with at most ``depth`` (default :attr:`depth`)
        nested container levels."""
        if self.grammar:
            if JSON_VALUE_RULE not in self.rules:
                call = f"(?&{JSON_VALUE_RULE})"
                self.rules[JSON_VALUE_RULE] = ""  # reserved before the body refers to it
                self.rules[JSON_VALUE_RULE] = ("(?:" + "|".join(["null", "true", "false", JSON_NUMBER, self.any_string,
                                                                 self._array_of(call),
                                                                 self._object_of(self.any_string, call)]) + ")")
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

    def _check_schema(self, s, where):
        if not isinstance(s, (dict, bool)):
            raise GrammarSyntaxError("a schema must be a JSON object or a boolean",
                                     json.dumps(s, default=str)[:200], 0, where)

    def check_deadline(self, where: str) -> None:
        """Raise ``CompileLimitError("compile_timeout_s")`` (naming ``where``) once :attr:`deadline`
        has passed. :meth:`value` calls it per subschema; loops that run once per value or branch
        of one keyword (a ``not`` of 20,000 ``enum`` values, the pairs of a wide ``oneOf``) call
        it too, so that one keyword cannot run far past the limit."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise CompileLimitError("compile_timeout_s", self.opt.compile_timeout_s, self.opt.compile_timeout_s,
                                    f"compiling the schema at {where or '#'}: raise compile_timeout_s or simplify it")

    def value(self, schema, where: str) -> str | None:
        """Regex of the JSON texts valid against ``schema`` (our subset), None = nothing.

        Raises ``CompileLimitError("compile_timeout_s")`` once :attr:`deadline` has passed."""
        self.check_deadline(where)
        r = self._value(schema, where)
        if r is None and not self.cut:
            self.empty.append((where, ("false",) if schema is False else
                               tuple(sorted({SOURCE_KEYWORD.get(k, k) for k in schema if k not in ANNOTATIONS}))
                               if isinstance(schema, dict)
                               else ()))
        if r is not None and len(r) > self.max_size:
            raise CompileLimitError("max_regex_size", len(r), self.max_size, _size_hint(schema, where))
        if self.grammar and r is not None and len(r) > self.inline_max:
            # a long value text becomes a rule named by its digest, the site a call: an emitter that
            # writes a value twice (array items `X(,X)*`, extra property values) otherwise doubles
            # the text per nesting level (arrays of arrays 20 deep: 6 MB, max_regex_size)
            return self.as_rule(r, where)
        return r

    def as_rule(self, r: str, where: str) -> str:
        """A call of a rule (named by the digest of its text, ``__value_<hex>``) whose body is the
        regex text ``r``, for ``where`` (the JSON pointer named by its errors); grammar mode only."""
        name = "__value_" + hashlib.blake2b(r.encode(), digest_size=8).hexdigest()
        if name not in self.rules:
            self.rules[name] = r
            self.rule_where[name] = where or "#"
        return f"(?&{name})"

    def empty_reason(self, cycles=()) -> str:
        """Why the schema admits no value, for :class:`~structgate.errors.InvalidConstraintError`:
        the smallest subschemas found to admit none (no recorded subschema below them), by JSON
        pointer with their keywords; else, with ``cycles`` (grammar rules on a reference cycle that
        produce nothing: a recursion that never bottoms out), the ``$ref``s they stand for and the
        JSON pointers of the schemas using them."""
        pts = [w for w, _ in self.empty]
        leaves = [(w, k) for w, k in self.empty if not any(q.startswith(w + "/") for q in pts if q != w)]
        seen, parts = set(), []
        for w, k in leaves:
            if w not in seen:
                seen.add(w)
                parts.append(clip(f"{w or '/'}" + (f" ({', '.join(k)})" if k else "")))
        more = f" and {len(parts) - 3} more" if len(parts) > 3 else ""
        if parts:
            found = f"; subschemas that admit no value: {'; '.join(parts[:3])}{more}"
        else:
            found = ": no finite JSON value satisfies it (a $ref cycle that every value must follow"
            sites = []
            for r in cycles:
                ref, w = self.rule_ref.get(r), self.rule_where.get(r)
                sites.append(clip(f"$ref {ref!r} at {w or '#'}" if ref is not None else f"the schema at {w or '#'}"))
            if sites:
                found += (f": the recursion through {', '.join(sites[:3])}"
                          f"{f' and {len(sites) - 3} more' if len(sites) > 3 else ''} never bottoms out, "
                          "every value there needs another such value inside")
            found += ")"
        return f"the JSON Schema matches nothing (no JSON value is valid against it){found}"

    def _value(self, schema, where: str) -> str | None:
        self._check_schema(schema, where)
        if isinstance(schema, dict) and not schema.keys().isdisjoint(REPEAT_COUNT_KW):
            for kw in REPEAT_COUNT_KW:
                v = schema.get(kw)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > MAX_COUNT:
                    raise CompileLimitError("max_count", v, MAX_COUNT, f"{kw} at {_ptr(where, kw)}: counts are "
                                            f"repetitions of at most {MAX_COUNT}", where=_ptr(where, kw))
        if schema is True or (isinstance(schema, dict) and not (schema.keys() - ANNOTATIONS)):
            return self.any_value()
        if schema is False:
            return None
        if "const" in schema or "enum" in schema:
            # finitely many values: each kept iff jsonschema validates it against the whole schema
            # (exact whatever the siblings: `not`, `allOf`, `$ref`, ...)
            return self.enum(schema, where)
        if _has_dependent_schemas(schema):
            rewritten = self._dependent_schemas(schema, where)
            if rewritten is not None:
                return self.value(rewritten, where)
        if isinstance(schema.get("allOf"), list):
            fin = next((m for m in schema["allOf"] if isinstance(m, dict) and ("const" in m or "enum" in m)), None)
            if fin is not None:  # allOf with a finite member: its values that the whole schema accepts
                i = schema["allOf"].index(fin)
                vals = self._finite_values(fin, _ptr(where, "allOf", str(i)))
                ok = self._validator_for(schema, where).is_valid
                return self._values_regex([c for c in vals if ok(c)], where)
        if "$ref" in schema or "allOf" in schema or "$dynamicRef" in schema or "$recursiveRef" in schema:
            refs: list[str] = []
            flat = self.flatten([(schema, where)], where, refs, set())
            if flat is False:
                return None
            if self.grammar and refs:
                merged = self.merge(flat, where)
                fin = self._merged_values(schema, merged, where)
                return fin if fin is not False else self._ref_value(merged, where, refs)
            for r in refs:
                if self.active.get(r, 0) >= self.depth:
                    self.cut = True
                    return None
            for r in refs:
                self.active[r] = self.active.get(r, 0) + 1
            try:
                merged = self.merge(flat, where)
                fin = self._merged_values(schema, merged, where)
                return fin if fin is not False else self.value(merged, where)
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
                return self.value(self._if_then_else(schema, where), where)
        return self.typed(schema, where)

    #: most dependencies (``dependentSchemas``, ``dependentRequired``, draft 4-7 ``dependencies``)
    #: one schema object has written exactly (each doubles the alternatives the ``allOf`` merge
    #: distributes: ``2**n`` of them, within its 256)
    MAX_DEPENDENCIES = 8

    def _dependent_schemas(self, schema, where):
        """The dependencies of ``schema`` (``dependentSchemas``, ``dependentRequired``, draft 4-7
        ``dependencies``: a schema or a list of names per key) as ``allOf [the other keywords,
        anyOf [{properties: {k: false}}, {required: [k], allOf: [S]}] ...]`` (for names ``N``:
        ``{required: [k, *N]}``, names required anyway left out): an object without key ``k``, or
        with it and what depends on it.
        The two branches are disjoint on objects and a non-object passes both, as it passes the
        dependency: exact. ``S`` true (or no names) adds nothing, false forbids ``k``.

        At most :attr:`MAX_DEPENDENCIES` in all; past it, the lists of names stay for the object
        emitter's sound subset (docs/json-schema.md) and only the schemas are written this way,
        more than that many of them being ``UnsupportedFeatureError`` at the keyword. Each ``S``
        is compiled once at its own pointer first, so that an error inside it names
        ``/dependentSchemas/k`` (``/dependencies/k``), not the rewrite's. None when nothing is
        rewritten (only lists of names, past the bound)."""
        schemas, lists = [], []
        for kw in ("dependentSchemas", "dependentRequired", "dependencies"):
            v = schema.get(kw)
            if isinstance(v, dict):
                for k, x in v.items():
                    (lists if isinstance(x, list) else schemas).append((k, x, _ptr(where, kw, k)))
        exact_lists = len(schemas) + len(lists) <= self.MAX_DEPENDENCIES
        rest = {k: v for k, v in schema.items() if k != "dependentSchemas"}
        for kw in ("dependentRequired", "dependencies"):
            if isinstance(rest.get(kw), dict):
                kept = {} if exact_lists else {k: x for k, x in rest[kw].items() if isinstance(x, list)}
                if kept:
                    rest[kw] = kept
                else:
                    del rest[kw]
        members = [rest]
        for k, s, w in schemas:
            self._check_schema(s, w)
            if s is True or (isinstance(s, dict) and not (s.keys() - ANNOTATIONS)):
                continue
            if s is False:
                members.append({"properties": {k: False}})
                continue
            members.append({"anyOf": [{"properties": {k: False}}, {"required": [k], "allOf": [s]}]})
        if len(members) - 1 > self.MAX_DEPENDENCIES:
            kw = "dependentSchemas" if "dependentSchemas" in schema else "dependencies"
            raise UnsupportedFeatureError(kw, f"{len(members) - 1} dependent schemas (at most "
                                          f"{self.MAX_DEPENDENCIES}: 2**n alternatives)", _ptr(where, kw))
        if exact_lists:
            req = schema.get("required") if isinstance(schema.get("required"), list) else []
            for k, names, w in lists:
                if not all(isinstance(n, str) for n in names):
                    raise GrammarSyntaxError("a dependency must list property names", json.dumps(names), 0, w)
                # (dependents required anyway: the trigger constrains nothing, an ordinary key)
                need = [n for n in dict.fromkeys(names) if n != k and n not in req]
                if need:
                    members.append({"anyOf": [{"properties": {k: False}}, {"required": [k, *need]}]})
        for k, s, w in schemas:
            if isinstance(s, dict) and (s.keys() - ANNOTATIONS):
                self.value(s, w)  # (its own errors at its own pointer; the text is not kept)
        if len(members) == 1 and not exact_lists:
            return None  # only lists of names, too many: the object emitter's subset
        return {"allOf": members} if len(members) > 1 else rest

    def _if_then_else(self, schema, where):
        """``if``/``then``/``else`` as ``allOf [the other keywords, anyOf`` :meth:`conditional_branches` ``]``."""
        rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
        return {"allOf": [rest, {"anyOf": self.conditional_branches(schema, where)}]}

    def conditional_branches(self, schema, where) -> list:
        """The ``if``/``then``/``else`` of ``schema`` as the branches ``[allOf [if, then], allOf
        [not if, else]]`` of an ``anyOf`` (disjoint, so this is exact);
        ``UnsupportedFeatureError("if/then/else")`` when ``not if`` has no positive form
        (:meth:`_negate`)."""
        w = _ptr(where, "if")
        cond = schema["if"]
        try:
            self._negate({}, cond, w)
        except UnsupportedFeatureError as e:
            raise UnsupportedFeatureError("if/then/else", f"needs the negation of if ({e.detail})", w) from None
        return [{"allOf": [cond, schema.get("then", True)]}, {"allOf": [{"not": cond}, schema.get("else", True)]}]

    def _validator_for(self, schema, where: str = ""):
        """A jsonschema validator of ``schema`` with references resolved in the root document
        (normalised: :mod:`._normalize`), read as the root's draft reads it wherever it sits
        (:func:`_validator_class`), asserting the formats this compile asserts (:attr:`formats`,
        by :func:`_format_checker`: an ``enum`` value outside its sibling ``format`` is left out,
        as the emitters leave out every other string); its ``is_valid`` raises
        :class:`GrammarSyntaxError` (naming ``where``) instead of jsonschema's own exceptions when
        the schema cannot be evaluated (an unknown ``type``, a ``$ref`` to nowhere, an invalid
        pattern: every caller's request then fails with a typed error, never an untyped one)."""
        if self._validator is None:
            root = self.root if isinstance(self.root, (dict, bool)) else {}
            if isinstance(root, dict) and "$schema" in root:
                root = {k: v for k, v in root.items() if k != "$schema"}
            checker = _format_checker(tuple(self.formats), tuple(sorted(self.refused_formats)))
            self._validator = _validator_class(self.draft)(root, format_checker=checker)
        if isinstance(schema, dict) and "$schema" in schema:  # (evolve would pick the class it names)
            schema = {k: x for k, x in schema.items() if k != "$schema"}
        return _CheckedValidator(self._validator.evolve(schema=schema), schema, where)

    def _merged_values(self, schema, merged, where):
        """When merging ``$ref``/``allOf`` left finitely many values (``enum``/``const`` in
        ``merged``): the regex of those that jsonschema accepts against the *original* ``schema``
        (None: none); ``False`` otherwise. The merge is not exact for every keyword
        (``unevaluatedProperties`` of a ``$ref`` target would see its siblings' ``properties``;
        draft-4 boolean ``exclusiveMaximum``), so the values are never checked against it alone."""
        if not isinstance(merged, dict) or not ("const" in merged or "enum" in merged):
            return False
        cands = self._finite_values(merged, where)
        try:  # the same $ref'd enum at many places: its values are checked once per compile
            key = json.dumps([schema, merged], sort_keys=True)
        except (TypeError, ValueError):
            key = None
        memo = self.__dict__.setdefault("_merged_memo", {})
        hit = memo.get(key) if key is not None else None
        if hit is None:
            ok = self._validator_for(schema, where).is_valid
            # every candidate is one of merged's enum/const values: checked against the rest of it
            # (jsonschema's enum check scans the whole list per value: quadratic for long enums)
            rest = {k: v for k, v in merged.items() if k not in ("enum", "const")}
            ok2 = self._validator_for(rest, where).is_valid
            hit = [c for c in cands if ok(c) and ok2(c)]
            if key is not None:
                memo[key] = hit
        return self._values_regex(hit, where)

    def _values_regex(self, vals: list, where) -> str | None:
        """The alternation of the JSON values ``vals`` (their :meth:`const` spellings; :func:`alt`
        drops repeats); None for no value. A value no JSON text decodes to (a string or key of a
        Python value holding a split surrogate pair, see :func:`literal_string_regex`) is left out."""
        return alt(self.const(c, where) for c in vals if not _has_split_pair(c))

    def _finite_values(self, schema, where) -> list:
        """The candidate values of a schema with ``const``/``enum`` (both: the const if listed).
        In a draft-4 document (:attr:`int_strict`) each value with integral numbers comes with its
        twins (all of them as ints, all as floats: ``2.0`` and ``2``), equal to it for ``enum`` and
        ``const`` but not for ``type: integer``: the callers keep those the validator accepts, each
        spelled with its own type (:meth:`const`)."""
        if "enum" in schema and not isinstance(schema["enum"], list):
            raise GrammarSyntaxError("enum must be an array", json.dumps(schema["enum"]), 0, _ptr(where, "enum"))
        cands = [schema["const"]] if "const" in schema else list(schema["enum"])
        if "const" in schema and "enum" in schema:
            cands = [c for c in cands if any(_json_equal(c, e) for e in schema["enum"])]
        if self.int_strict:
            cands = [t for c in cands for t in _with_twins(c)]
        return cands

    def enum(self, schema, where):
        cands = self._finite_values(schema, where)
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const") and k not in ANNOTATIONS}
        # values excluded by a folded `not` (internal keywords jsonschema does not know), as sets:
        # a list scan per candidate was quadratic (an enum of 20,000 minus half of it: 30 s); a
        # number is found in a set of ints iff it equals one (Python numbers hash by value)
        nstr, nbool, nint = (set(schema.get(k, ())) for k in (_NOT_STR, _NOT_BOOL, _NOT_INT))
        cands = [c for c in cands if not (isinstance(c, str) and c in nstr)
                 and not (isinstance(c, bool) and c in nbool)
                 and not (_is_num(c) and c in nint)]
        for p in schema.get(_NOT_PATTERNS, ()):  # (as either dialect reads it, as the string emitter)
            d = from_ast(pattern_ast(parse_pattern(p, _ptr(where, "not"), upper=True), upper=True),
                         max_states=self.max_product_states, what="not pattern", where=_ptr(where, "not"))
            cands = [c for c in cands if not (isinstance(c, str) and matches(d, c))]
        if rest:
            # the candidates come from the enum (or the const): checked against the other keywords
            # only (jsonschema's enum check scans the whole list per value: a 416-name time-zone
            # enum took 260,000 comparisons, half the schema's compile)
            # (``$schema`` and ``$id`` stay: the validator's draft is read from them)
            v = self._validator_for({k: x for k, x in schema.items() if k not in ("enum", "const")}, where)
            cands = [c for c in cands if v.is_valid(c)]
        return self._values_regex(cands, where)

    def const(self, v, where) -> str:
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and not math.isfinite(v):
            raise GrammarSyntaxError("non-finite number in const/enum", repr(v), 0, where)
        if isinstance(v, (int, float)):
            # the spellings a validator reads as this number: 1e-9, 1E-9, 1.0e-09, 0.000000001 for
            # 1e-09; 1, 1.0, 1e0 for 1 (draft 4: 1 and 1.0 each their own type's)
            return number_literal_regex(v, self.int_strict)
        if isinstance(v, str):
            return literal_string_regex(v)
        if isinstance(v, list):
            if not v:
                return rf"\[{self.ws}\]"
            return rf"\[{self.ws}" + self.comma.join(self.const(x, where) for x in v) + rf"{self.ws}\]"
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise GrammarSyntaxError("const/enum object with a non-string key", repr(v)[:200], 0, where)
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

    def _count(self, schema, kw, where):
        v = schema[kw]
        if _is_num(v) and _is_whole(v) and v >= 0:
            return int(v)
        raise GrammarSyntaxError(f"{kw} must be a non-negative integer", json.dumps(v), 0, _ptr(where, kw))


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
        Malformed schema or ``pattern`` (``where`` = JSON pointer of the keyword): a keyword value
        of the wrong shape anywhere in the document (:func:`._shape.check_shapes`), before anything
        is compiled.
    UnsupportedFeatureError
        A keyword that cannot be enforced exactly (``where`` = its JSON pointer), or a recursive
        schema whose unrolling to ``max_recursion_depth`` leaves no valid value.
    CompileLimitError
        ``max_regex_size``: the regex text would exceed ``options.extra["max_regex_size"]``
        characters (default 4,000,000; expansions of shared/recursive ``$ref`` can grow
        exponentially); ``nesting_depth``: a schema nested too deeply for the compiler's recursion.
    """
    options = options or CompileOptions()
    schema, draft = normalize(_load(schema))
    check_shapes(schema)
    c = _Compiler(schema, options, draft=draft)
    r = _nesting_guard(lambda: c.value(schema, ""))
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
#: a keyword with at least this many members is named as the cause of a ``max_regex_size`` error
WIDE_KEYWORD = 100


def _has_dependent_schemas(schema) -> bool:
    """Whether ``schema`` (a dict) has a dependency (:meth:`_Compiler._dependent_schemas`): a
    ``dependentSchemas``, ``dependentRequired`` or ``dependencies`` entry other than an empty list
    of names (a list of the key itself is one, written as nothing there)."""
    if not isinstance(schema, dict):
        return False
    for kw in ("dependentSchemas", "dependentRequired", "dependencies"):
        v = schema.get(kw)
        if isinstance(v, dict) and any(not isinstance(x, list) or x for x in v.values()):
            return True
    return False


def _size_hint(schema, where: str) -> str:
    """The hint of a ``max_regex_size`` error for the schema at ``where``: a wide keyword (an object
    of 20,000 properties, an enum of 50,000 values) is named with its size, and the remedy is a
    larger ``max_regex_size``; otherwise the text grew by nesting or shared ``$ref`` expansion."""
    at = where or "the schema"
    if isinstance(schema, dict):
        for key, what in (("properties", "an object of {:,} properties"), ("enum", "an enum of {:,} values"),
                          ("anyOf", "an anyOf of {:,} branches"), ("oneOf", "a oneOf of {:,} branches"),
                          ("patternProperties", "an object of {:,} patternProperties")):
            v = schema.get(key)
            if isinstance(v, (dict, list)) and len(v) >= WIDE_KEYWORD:
                return (f"the regex for {at}, {what.format(len(v))}, is too large; raise max_regex_size or "
                        "split the schema")
    return (f"the regex for {at} is too large (deeply nested or heavily shared $refs); lower "
            "max_recursion_depth or simplify the schema")


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


def _compile_texts(schema, options, deadline: bool = True):
    """The compiler pass of :func:`schema_to_grammar`: (compiler holding the rule texts, root text);
    ``deadline=False``: ``compile_timeout_s`` is not checked (validation, which its caller bounds)."""
    options = options or CompileOptions()
    schema, draft = normalize(_load(schema))
    check_shapes(schema)
    c = _Compiler(schema, options, grammar=True, draft=draft)
    if not deadline:
        c.deadline = None
    if isinstance(schema, dict) and (schema.keys() - ANNOTATIONS):
        # the root as the target of "#", so that a recursive "$ref": "#" calls the root's own rule
        r = _nesting_guard(lambda: c._ref_value(schema, "", ["#"]) if "$ref" not in schema and "allOf" not in schema
                           else c.value(schema, ""))
    else:
        r = _nesting_guard(lambda: c.value(schema, ""))
    return c, r


def _nesting_guard(run):
    """``run()``, with a ``RecursionError`` (a schema nested too deeply for the compiler's
    recursion) turned into ``CompileLimitError("nesting_depth")``, as the native backend reports
    it: the public functions are called directly too (the JSTS run, the structural-tag frontend)."""
    try:
        return run()
    except RecursionError:
        raise _nesting_limit() from None


def check_schema(schema: dict | bool | str, options: CompileOptions | None = None) -> None:
    """Raise what :func:`schema_to_grammar` raises for the schema's keywords, without parsing the
    generated rule texts into the IR (about a tenth of the cost): the cheap check a server runs on
    a request before queueing it (``compile_timeout_s`` is not checked here: it limits the compile;
    a server bounds this check with its own budget). An unsatisfiable schema is found only by the
    full compile.

    Raises
    ------
    GrammarSyntaxError, UnsupportedFeatureError, CompileLimitError
        As :func:`schema_to_grammar`.
    InvalidConstraintError
        The root schema admits no value (``false``, ``minimum`` > ``maximum``, ...): the message
        names the smallest subschemas that admit none. A schema that admits none only through
        recursion (a required self-reference) is found by the full compile.
    """
    c, r = _compile_texts(schema, options, deadline=False)  # compile_timeout_s is the compile's limit
    if r is None or any(w == "" for w, _ in c.empty):
        raise InvalidConstraintError(c.empty_reason())


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
    return _grammar(c, c._object_of(c.any_string, c.any_value()), "json_object")


def json_object_regex(options: CompileOptions | None = None) -> str:
    """Any JSON *object* (the ``json_object`` constraint, as vLLM / OpenAI ``response_format``
    define it) whose values nest at most ``options.max_recursion_depth`` further container levels.
    Sound approximation: every match is a JSON object; deeper objects are excluded."""
    opt = options or CompileOptions()
    c = _Compiler(True, opt)
    return c._object_of(STRING, c.any_value(c.depth))


def _has_split_pair(v) -> bool:
    """Whether a JSON value (as Python) holds, in a string or an object key, a high surrogate
    followed by a low one: no JSON text decodes to it (iterative walk)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if _SPLIT_PAIR.search(x):
                return True
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x)
            stack.extend(x.values())
    return False

