"""Proofs that two schemas share no JSON value, for ``oneOf``: a ``oneOf`` whose branches are
pairwise disjoint is the ``anyOf`` of its branches; a pair not proven disjoint needs the exact form
``A ∧ ¬B`` (see :mod:`._union`).

Every proof is sufficient, never necessary: "disjoint" is only answered when no value can be valid
against both schemas (draft 2020-12, as the ``jsonschema`` validator reads them). Each side is
first reduced to the conjunction of its keywords (``$ref`` and ``allOf`` flattened and merged, see
:meth:`._merge.MergeMixin.merge`; a schema that cannot be merged keeps its members, and two schemas
are disjoint when any member of one is disjoint from any member of the other). Then, in order:

* a side with finitely many values (``enum``/``const``): disjoint iff none of them is valid against
  both sides (decided by the validator, exactly);
* ``anyOf``/``oneOf`` inside a side: disjoint when every branch is (a ``oneOf`` allows a subset of
  what its ``anyOf`` allows);
* ``not`` of ``required`` keys that the other side requires, ``not`` of types;
* per JSON type both sides allow (``type``), a proof for that type: numbers with disjoint ranges
  (integers only: no integer in the common range); strings whose ``pattern``/length automata
  (each pattern read as a *superset*: every character set as either dialect matches it, ``$``
  also before a final newline as in Python's ``re``) have an empty product; arrays with disjoint
  length ranges or an item position both must have with disjoint item schemas; objects with a key
  that one side requires and whose value schemas are disjoint (a discriminator ``const``, a key
  the other side forbids through ``properties: {k: false}`` or ``additionalProperties: false``),
  or more required keys than the other side's ``maxProperties``. ``null`` and booleans are only
  told apart by values.
"""
from __future__ import annotations

from fractions import Fraction
from math import ceil, floor

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ._common import ANNOTATIONS, _is_num, _is_whole, _with_twins

_ERRORS = (UnsupportedFeatureError, GrammarSyntaxError, CompileLimitError, RecursionError, ValueError,
           TypeError, KeyError)
_KINDS = ("null", "boolean", "object", "array", "number", "string")


class DisjointMixin:
    """Disjointness proofs (part of ``compiler._Compiler``, through :class:`._union.UnionMixin`)."""

    #: nesting of the proofs (properties, items, anyOf branches) before "not proven"
    MAX_DISJOINT_DEPTH = 8
    #: most schema pairs one :meth:`disjoint` call compares (wide anyOfs, many keys), then "not proven"
    MAX_DISJOINT_STEPS = 4000
    #: most values tried against the validator in the finite-values proof
    MAX_DISJOINT_VALUES = 512
    #: state bound of the string automata and their product
    DISJOINT_MAX_STATES = 4000

    def disjoint(self, a, b) -> bool:
        """True when no JSON value is valid against both ``a`` and ``b`` (a sufficient check)."""
        self._disjoint_steps = 0
        try:
            return self._disjoint(a, b, 0)
        except _ERRORS:
            return False

    # -- reduction ------------------------------------------------------------------------------
    def _conjuncts(self, s) -> list | None:
        """``s`` as a list of ref/allOf-free dicts whose conjunction it is (one merged dict when
        they merge); None when it allows nothing (``false`` somewhere)."""
        if s is False:
            return None
        if s is True or not isinstance(s, dict):
            return [{}]
        if "$ref" not in s and "allOf" not in s:
            return [s]
        try:
            flat = self.flatten([(s, "")], "", [], set())
        except _ERRORS:
            return [{}]
        if flat is False:
            return None
        if not flat:
            return [{}]
        try:
            m = self.merge(flat, "")
        except _ERRORS:
            return [d for d, _ in flat]
        if m is False:
            return None
        return [m if isinstance(m, dict) else {}]

    def _disjoint(self, a, b, depth: int) -> bool:
        self._disjoint_steps += 1
        if depth > self.MAX_DISJOINT_DEPTH or self._disjoint_steps > self.MAX_DISJOINT_STEPS:
            return False
        ca, cb = self._conjuncts(a), self._conjuncts(b)
        if ca is None or cb is None:
            return True
        return any(self._dicts_disjoint(x, y, depth) for x in ca for y in cb)

    # -- two ref/allOf-free dicts -----------------------------------------------------------------
    def _dicts_disjoint(self, a: dict, b: dict, depth: int) -> bool:
        if not (set(a) - ANNOTATIONS) or not (set(b) - ANNOTATIONS):
            return False  # one side allows everything (the other is not empty: not proven)
        # finitely many values on one side: decided exactly by the validator
        for x, y in ((a, b), (b, a)):
            vals = _listed(x)
            if vals is not None and self.int_strict:
                # draft 4: 1 and 1.0 are one value for enum/const but not for type: each value
                # with its twins (the compiler's finite values do the same)
                vals = [t for v in vals for t in _with_twins(v)]
            if vals is not None and len(vals) <= self.MAX_DISJOINT_VALUES:
                try:
                    va, vb = self._validator_for(x), self._validator_for(y)
                    return not any(va.is_valid(v) and vb.is_valid(v) for v in vals)
                except Exception:  # a schema the validator cannot read: not proven this way
                    break
        # alternatives inside a side: every alternative must be disjoint from the other side
        for x, y in ((a, b), (b, a)):
            for key in ("anyOf", "oneOf"):
                alts = x.get(key)
                if isinstance(alts, list) and alts:
                    if len(alts) > 64:
                        return False
                    rest = {k: v for k, v in x.items() if k != key}
                    return all(self._disjoint({"allOf": [rest, c]} if rest else c, y, depth + 1) for c in alts)
        # `not` of what the other side implies
        for x, y in ((a, b), (b, a)):
            n = x.get("not")
            req = self._required_only(n)
            if req is not None and set(req) <= set(_required(y)):
                return True  # y's values all have the keys (non-objects: vacuously), x's never
        ta, tb = _kinds(a), _kinds(b)
        common = ta & tb
        return all(self._kind_disjoint(t, a, b, depth) for t in common)

    def _kind_disjoint(self, t: str, a: dict, b: dict, depth: int) -> bool:
        if t == "number":
            return self._numbers_disjoint(a, b)
        if t == "string":
            return self._strings_disjoint(a, b)
        if t == "array":
            return self._arrays_disjoint(a, b, depth)
        if t == "object":
            return self._objects_disjoint(a, b, depth)
        return False  # null, booleans: only told apart by values

    def _numbers_disjoint(self, a, b) -> bool:
        if any(isinstance(s.get(k), bool) for s in (a, b) for k in ("exclusiveMinimum", "exclusiveMaximum")):
            return False  # draft-4 boolean exclusives: 2020-12 reads them as bounds 0/1, draft 4 as flags
        lows, highs = [], []
        for s in (a, b):
            lo, hi = self._bounds(s, "")
            if lo is not None:
                lows.append((Fraction(lo[0]), lo[1]))
            if hi is not None:
                highs.append((Fraction(hi[0]), hi[1]))
        if not lows or not highs:
            return False
        lo = max(lows, key=lambda x: (x[0], x[1]))
        hi = min(highs, key=lambda x: (x[0], not x[1]))
        if lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1])):
            return True
        if _integers_only(a) or _integers_only(b):  # the common values are integers
            first = floor(lo[0]) + 1 if lo[1] else ceil(lo[0])  # the least integer in range
            last = ceil(hi[0]) - 1 if hi[1] else floor(hi[0])  # the greatest
            return first > last
        return False

    def _string_dfa(self, s):
        """Code-point automaton of a superset of the strings ``s`` allows (None: no bound known),
        memoised per compile by what it reads (``pattern``, ``minLength``, ``maxLength`` with their
        types): a ``oneOf`` of N string branches proves N²/2 pairs, and each pair built both
        automata again (a 17-branch ``oneOf`` of patterns: 272 pattern DFAs for 17 distinct ones,
        over half of its compile). The automata are never changed after they are built (``product``
        and ``trim`` make new ones)."""
        pat, lmin, lmax = s.get("pattern"), s.get("minLength", 0), s.get("maxLength")
        key = (self.DISJOINT_MAX_STATES, type(pat), pat if isinstance(pat, str) else None,
               type(lmin), lmin, type(lmax), lmax)
        memo = self.__dict__.setdefault("_string_dfa_memo", {})
        try:
            hit = memo.get(key, memo)
        except TypeError:  # an unhashable bound (an invalid schema): not memoised
            return self._string_dfa_uncached(s)
        if hit is memo:
            hit = memo[key] = self._string_dfa_uncached(s)
        return hit

    def _string_dfa_uncached(self, s):
        from ._automata import from_ast, length_dfa, product

        cap, what = self.DISJOINT_MAX_STATES, "oneOf disjointness"
        d = None
        pat = s.get("pattern")
        if isinstance(pat, str):
            from ._pattern import parse_pattern, pattern_ast

            try:
                d = from_ast(pattern_ast(parse_pattern(pat, "", upper=True), upper=True), max_states=cap,
                             what=what, where="")
            except _ERRORS:
                d = None
        lmin = s.get("minLength", 0)
        lmax = s.get("maxLength")
        ok = _is_num(lmin) and _is_whole(lmin) and lmin >= 0 and (
            lmax is None or (_is_num(lmax) and _is_whole(lmax) and lmax >= 0))
        if ok and (lmin or lmax is not None) and max(lmin, lmax or 0) < cap:
            # (bounds beyond the cap are left out: a superset still, without a huge counter)
            n = length_dfa(int(lmin), None if lmax is None else int(lmax))
            d = n if d is None else product(d, n, max_states=cap, what=what, where="")
        return d

    def _strings_disjoint(self, a, b) -> bool:
        from ._automata import product, trim

        da, db = self._string_dfa(a), self._string_dfa(b)
        if da is None or db is None:
            return (da is not None and trim(da) is None) or (db is not None and trim(db) is None)
        return trim(product(da, db, max_states=self.DISJOINT_MAX_STATES, what="oneOf disjointness",
                            where="")) is None

    def _arrays_disjoint(self, a, b, depth) -> bool:
        lo = max(_count(a, "minItems", 0), _count(b, "minItems", 0))
        his = [h for h in (_count(a, "maxItems", None), _count(b, "maxItems", None)) if h is not None]
        if his and lo > min(his):
            return True
        for i in range(min(lo, 8)):  # positions every common array has
            if self._disjoint(_item(a, i), _item(b, i), depth + 1):
                return True
        return False

    def _objects_disjoint(self, a, b, depth) -> bool:
        ra, rb = _required(a), _required(b)
        keys = list(dict.fromkeys(ra + rb))
        for s in (a, b):
            hi = _count(s, "maxProperties", None)
            if hi is not None and hi < len(keys):
                return True
        lo = max(_count(a, "minProperties", 0), _count(b, "minProperties", 0))
        his = [h for h in (_count(a, "maxProperties", None), _count(b, "maxProperties", None)) if h is not None]
        if his and lo > min(his):
            return True
        for k in keys:  # every common object has k: its value must be valid against both
            if self._disjoint(_member(a, k), _member(b, k), depth + 1):
                return True
        return False


# -- keyword readers (malformed values read as "no constraint") ----------------------------------------
def _listed(s) -> list | None:
    if "const" in s:
        return [s["const"]]
    if isinstance(s.get("enum"), list):
        return s["enum"]
    return None


def _types(s) -> set[str]:
    """JSON types ``s`` allows by ``type`` (``integer`` counted as ``number``)."""
    t = s.get("type")
    if isinstance(t, str):
        t = [t]
    if not isinstance(t, list):
        return set(_KINDS)
    return {"number" if x == "integer" else x for x in t if isinstance(x, str)} & set(_KINDS)


def _kinds(s) -> set[str]:
    """The types of the values ``s`` may allow: ``type`` minus a ``not`` of types."""
    ts = _types(s)
    n = s.get("not")
    if isinstance(n, dict) and set(n) - ANNOTATIONS == {"type"}:
        banned = n["type"]
        banned = {banned} if isinstance(banned, str) else set(banned) if isinstance(banned, list) else set()
        ts -= banned  # "not integer" leaves the non-integer numbers: "number" is not removed by it
    return ts


def _integers_only(s) -> bool:
    t = s.get("type")
    t = [t] if isinstance(t, str) else t
    return isinstance(t, list) and "integer" in t and "number" not in t


def _required(s) -> list[str]:
    r = s.get("required")
    return [k for k in r if isinstance(k, str)] if isinstance(r, list) else []


def _count(s, kw, default):
    v = s.get(kw, default)
    if _is_num(v) and _is_whole(v) and v >= 0:
        return int(v)
    return default


def _member(s, k):
    """A schema every value of member ``k`` of an object valid against ``s`` satisfies."""
    props = s.get("properties")
    if isinstance(props, dict) and k in props:
        return props[k]
    if s.get("patternProperties"):
        return True  # k may match a pattern: additionalProperties may not apply
    return s.get("additionalProperties", True)


def _item(s, i: int):
    """A schema every item at position ``i`` of an array valid against ``s`` satisfies."""
    pre = s.get("prefixItems")
    if isinstance(pre, list):
        if i < len(pre):
            return pre[i]
        return s.get("items", True) if not isinstance(s.get("items"), list) else True
    items = s.get("items", True)
    return True if isinstance(items, list) else items
