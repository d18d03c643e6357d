"""``anyOf`` / ``oneOf``: alternation; ``oneOf`` as the ``anyOf`` of its branches where they are
proven disjoint (:mod:`._disjoint`), else of each branch minus the branches it may overlap (plus
the compact exact ``oneOf`` of ``required``-only branches)."""
from __future__ import annotations

import json

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ._common import ANNOTATIONS, _json_key, _ptr, _with_twins
from ._disjoint import DisjointMixin, _kinds, _member
from ._numeric import alt


class UnionMixin(DisjointMixin):
    """``anyOf``/``oneOf`` (part of ``compiler._Compiler``)."""

    def union(self, schema, where):
        key = "anyOf" if "anyOf" in schema else "oneOf"
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise GrammarSyntaxError(f"{key} must be a non-empty array", json.dumps(branches), 0, _ptr(where, key))
        rest = {k: v for k, v in schema.items() if k != key}
        constraining = {k for k in rest if k not in ANNOTATIONS}
        if key == "oneOf":
            items = self.oneof_as_anyof(branches, rest if constraining else None, _ptr(where, key))
            if not items:
                return None
        else:
            items = [(i, b, None) for i, b in enumerate(branches)]
        outs = []
        for i, b, blame in items:
            w = _ptr(where, key, i)
            sub = {"allOf": [rest, b]} if constraining else b
            if blame is None:
                r = self.value(sub, w)
            else:
                try:
                    r = self.value(sub, w)
                except (UnsupportedFeatureError, RecursionError) as e:
                    plain = {"allOf": [rest, branches[i]]} if constraining else branches[i]
                    self.value(plain, w)  # the branch itself unsupported: that error, not the oneOf's
                    why = f"{e.feature} at {e.where}: {e.detail}" if isinstance(e, UnsupportedFeatureError) \
                        else "a recursive schema"
                    raise self._overlap_error(*blame, _ptr(where, key), "the exact form (allOf [A, not B]) "
                                              f"is not supported here ({why})") from None
            if r is not None:
                outs.append(r)
        return alt(outs)

    #: most anyOf branches the exact oneOf (each branch minus the branches it may overlap) may
    #: expand to (the product, per branch, of the alternatives of each negation it needs)
    MAX_ONEOF_EXPANSION = 64

    def oneof_as_anyof(self, branches, rest, where) -> list[tuple[int, object, tuple | None]]:
        """``oneOf`` as the branches of an ``anyOf`` of the same language: ``(index of the oneOf
        branch, schema, blame)`` each.

        A value is valid against ``oneOf`` iff it is valid against one branch and against no other:
        ``oneOf(B) = ∨_i (B_i ∧ ∧_{j≠i} ¬B_j)``. Where ``B_i`` and ``B_j`` are proven disjoint
        (:mod:`._disjoint`, each branch taken together with ``rest``, the keywords beside ``oneOf``),
        ``B_i`` implies ``¬B_j`` and the term is left out: pairwise disjoint branches are the anyOf
        as written. A branch that may overlap others becomes ``allOf [B_i, ¬B_j, ...]`` with each
        ``¬B_j`` in positive form (:meth:`._negation.NegationMixin._negate`, exact; written
        context-free where it can be, else in the context of ``rest ∧ B_i``), keeping only the alternatives of ``¬B_j`` not proven disjoint from
        ``B_i`` (a branch left with none allows nothing and is dropped). ``blame`` = the pair
        ``(i, j)`` such a branch was built for (for the error if it does not compile).
        Branches that only list ``required`` keys use :meth:`oneof_of_required` (compact).

        Raises ``UnsupportedFeatureError("oneOf (overlapping branches)")`` naming a pair when a
        ``¬B_j`` has no positive form or the expansion exceeds :attr:`MAX_ONEOF_EXPANSION`."""
        reduced = [self._conjuncts({"allOf": [rest, b]} if rest is not None else b) for b in branches]
        pairs = self.overlapping_pairs(reduced, where)
        if not pairs:
            return [(i, b, None) for i, b in enumerate(branches)]
        exact = self.oneof_of_required(branches)
        if exact is not None:
            return [(i, b, None) for i, b in enumerate(exact)]  # the same language (see oneof_of_required)
        out, total = [], 0
        near: dict[int, list[int]] = {}
        for x, y in pairs:
            near.setdefault(x, []).append(y)
            near.setdefault(y, []).append(x)
        for i, b in enumerate(branches):
            js = sorted(near.get(i, ()))
            if not js:
                out.append((i, b, None))
                total += 1
                continue
            ctx = reduced[i][0] if len(reduced[i]) == 1 else {}
            vals = self._values_only_in(ctx, [branches[j] for j in js])
            if vals is not None:  # finitely many values: keep those no overlapping branch allows
                if vals:
                    out.append((i, {"enum": vals}, None))
                    total += 1
                continue
            parts, n = [b], 1
            for j in js:
                neg, base = self._negation_in(ctx, branches[j], (min(i, j), max(i, j)), j, where)
                kept = [] if neg is False else [
                    a for a in _alternatives(neg, base)
                    if not self._reduced_disjoint(reduced[i], self._conjuncts(a))]
                if not kept:
                    parts = None  # B_i ∧ ¬B_j allows nothing (B_i inside B_j): no branch
                    break
                if any(self._covers_objects(ctx, a) for a in kept):
                    # every object of B_i fails B_j: ¬B_j only matters for B_i's other values
                    kept = [{"type": "object"}] + [a for a in kept if not _object_only(self._conjuncts(a))]
                parts.append(kept[0] if len(kept) == 1 else {"anyOf": kept})
                n *= len(kept)
            if parts is None:
                continue
            total += n
            if total > self.MAX_ONEOF_EXPANSION:
                x, y = min(i, js[0]), max(i, js[0])
                raise self._overlap_error(x, y, where, "the exact form (each branch minus the branches it may "
                                          f"overlap) would need more than {self.MAX_ONEOF_EXPANSION} alternatives")
            out.append((i, {"allOf": parts}, (min(i, js[0]), max(i, js[0]))))
        return out

    def overlapping_pairs(self, reduced, where) -> list[tuple[int, int]]:
        """The pairs ``(i, j)``, ``i < j``, in order, of branches (their :meth:`_conjuncts`;
        None: allows nothing, overlaps nothing) not proven disjoint (:meth:`_reduced_disjoint`).

        A branch one of whose conjuncts lists values (``const``/``enum``) allows only those: two
        such branches whose values share no :func:`._common._json_key` are disjoint without a
        proof, so only the pairs that share a value (found through a dict of the keys) and the
        pairs with an unlisted branch are proved — a ``oneOf`` of N ``const`` branches took N²/2
        validator proofs (1,000 branches: 10 s). Checks the compile deadline once per branch."""
        listed: list = [None] * len(reduced)
        for i, r in enumerate(reduced):
            for c in r or ():
                vals = c.get("enum") if isinstance(c.get("enum"), list) else [c["const"]] if "const" in c else None
                if vals is not None:
                    keys = {_json_key(v) for v in vals}
                    listed[i] = None if None in keys else keys
                    break
        live = [i for i, r in enumerate(reduced) if r is not None]
        unlisted = [i for i in live if listed[i] is None]
        by_key: dict = {}
        for i in live:
            for k in listed[i] or ():
                by_key.setdefault(k, []).append(i)
        shares: dict[int, set] = {}  # listed branch -> the later listed branches sharing a value
        for idx in by_key.values():
            for a, i in enumerate(idx):
                if a + 1 < len(idx):
                    shares.setdefault(i, set()).update(idx[a + 1:])
        pairs = []
        for i in live:
            if listed[i] is None:
                js = [j for j in live if j > i]
            else:
                js = sorted(shares.get(i, set()).union(j for j in unlisted if j > i))
            for j in js:
                self.check_deadline(where)  # a proof may build automata: checked before each
                if not self._reduced_disjoint(reduced[i], reduced[j]):
                    pairs.append((i, j))
        return pairs

    def _negation_in(self, ctx, b, pair, j, where):
        """``(not b, base)`` for branch ``j`` = ``b``: ``_negate(base, b)`` with ``base`` = ``{}``
        (alternatives valid anywhere), else ``ctx`` (the branch it is conjoined with:
        ``additionalProperties`` of ``b`` is negated relative to the keys ``ctx`` allows); the
        oneOf refusal naming ``pair`` when neither has a positive form."""
        why = None  # the last refusal's text, not the exception: one kept in a local of this frame
        # (which its traceback holds) would be a reference cycle, left to the cyclic collector (and
        # frozen for good under the plugin's STRUCTGATE_GC_FREEZE_AFTER_COMPILE)
        for base in ({}, ctx) if ctx else ({},):
            try:
                return self._negate(base, b, _ptr(where, j)), base
            except UnsupportedFeatureError as e:
                why = f"{e.feature} at {e.where}: {e.detail}"
            except RecursionError:
                raise self._overlap_error(*pair, where, f"the exact form needs not branch {j}, a recursive "
                                          "schema") from None
        raise self._overlap_error(*pair, where, f"the exact form needs not branch {j}, which has no positive "
                                  f"form here ({why})") from None

    def _values_only_in(self, ctx, others) -> list | None:
        """When ``ctx`` (a branch with the keywords beside ``oneOf``) lists finitely many values
        (``enum``/``const``): those valid against it and against none of ``others`` (decided by the
        validator); None otherwise.

        Draft 4 (:attr:`int_strict`): the compiled ``enum`` also spells each value's twins (``1``
        for ``1.0``, equal for ``enum``, not for ``type``), so a value is kept only when every twin
        is valid against ``ctx`` and none of ``others`` (``oneOf [{type: integer}, {enum: [1.0]}]``:
        ``1.0`` is dropped, since its twin ``1`` matches both branches)."""
        vals = ctx.get("enum") if isinstance(ctx.get("enum"), list) else [ctx["const"]] if "const" in ctx else None
        if vals is None or len(vals) > self.MAX_DISJOINT_VALUES:
            return None
        try:
            mine = self._validator_for(ctx)
            theirs = [self._validator_for(o) for o in others]

            def only_mine(v) -> bool:
                return mine.is_valid(v) and not any(t.is_valid(v) for t in theirs)

            if not self.int_strict:
                return [v for v in vals if only_mine(v)]
            return [v for v in vals if all(only_mine(t) for t in _with_twins(v))]
        except Exception:  # a schema the validator cannot read: the general form
            return None

    def _covers_objects(self, ctx, a) -> bool:
        """Whether every object valid against ``ctx`` is valid against ``a``, for ``a`` of the
        forms the negation writes for objects (a sufficient check): ``{type: object, required: R,
        properties: {k: {not: S}, ...}}`` where ``ctx`` requires ``R`` and each ``k`` with a value
        disjoint from ``S``."""
        if not isinstance(a, dict) or set(a) - ANNOTATIONS - {"type", "required", "properties"}:
            return False
        if a.get("type") != "object" or not isinstance(ctx, dict):
            return False
        req = a.get("required", [])
        have = ctx.get("required", [])
        if not (isinstance(req, list) and isinstance(have, list) and set(req) <= set(have)):
            return False
        props = a.get("properties", {})
        if not isinstance(props, dict):
            return False
        for k, sub in props.items():
            if not (k in req and isinstance(sub, dict) and set(sub) == {"not"}):
                return False
            if not self._reduced_disjoint(self._conjuncts(_member(ctx, k)), self._conjuncts(sub["not"])):
                return False
        return True

    def _reduced_disjoint(self, ca, cb) -> bool:
        """:meth:`._disjoint.DisjointMixin.disjoint` of two :meth:`_conjuncts` results."""
        if ca is None or cb is None:
            return True
        self._disjoint_steps = 0
        try:
            return any(self._dicts_disjoint(x, y, 0) for x in ca for y in cb)
        except (UnsupportedFeatureError, GrammarSyntaxError, CompileLimitError, RecursionError,
                ValueError, TypeError, KeyError):
            return False

    @staticmethod
    def _overlap_error(i, j, where, why: str) -> UnsupportedFeatureError:
        return UnsupportedFeatureError(
            "oneOf (overlapping branches)",
            f"branches {i} and {j} may both match a value; oneOf is compiled as anyOf when the branches "
            "are provably disjoint (different types, distinct const/enum values, disjoint numeric ranges "
            "or string patterns/lengths, a property one requires with disjoint values or forbidden by "
            "the other), else as each branch minus the branches it may overlap (allOf [A, not B]); "
            f"{why}", where)

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


def _alternatives(neg, ctx) -> list:
    """The alternatives of ``neg`` = ``_negate(ctx, B)`` (``ctx ∧ ¬B``) to conjoin with a schema
    inside ``ctx``: ``[X, Y, ...]`` for ``allOf [ctx, anyOf [X, Y, ...]]``, ``[X]`` for ``allOf
    [ctx, X]``, ``[true]`` for ``ctx`` itself, else ``[neg]`` (which repeats ``ctx``)."""
    if neg is ctx:
        return [True]
    if isinstance(neg, dict) and set(neg) == {"allOf"} and isinstance(neg["allOf"], list) \
            and len(neg["allOf"]) == 2 and neg["allOf"][0] is ctx:
        second = neg["allOf"][1]
        if isinstance(second, dict) and set(second) == {"anyOf"} and isinstance(second["anyOf"], list):
            return list(second["anyOf"])
        return [second]
    return [neg]


def _object_only(conj) -> bool:
    """Whether a :meth:`._disjoint.DisjointMixin._conjuncts` result allows objects only."""
    return conj is None or any(_kinds(c) <= {"object"} for c in conj)
