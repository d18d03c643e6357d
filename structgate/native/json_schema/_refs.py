"""References: ``$ref`` resolution (local JSON pointers), ``$ref``/``allOf`` flattening, and the
rule registry of grammar mode (shared and recursive ``$ref`` targets become named rules)."""
from __future__ import annotations

import json
import re
from urllib.parse import unquote

from ...errors import CompileLimitError, GrammarSyntaxError, UnsupportedFeatureError
from ._automata import LengthProduct, emit, length_dfa, minimize, product, trim
from ._common import ANNOTATIONS, MAX_REF_NESTING, NEVER, ROOT_RULE, _pointer_target, _ptr


class RefsMixin:
    """``$ref`` resolution and the grammar-mode rule registry (part of ``compiler._Compiler``)."""

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
        hit = _pointer_target(self.root, frag)
        if hit is None:
            raise GrammarSyntaxError(f"$ref target not found: {ref}", ref, 0, where)
        node = hit[0]
        if not isinstance(node, (dict, bool)):
            raise GrammarSyntaxError(f"$ref target is not a schema: {ref}", ref, 0, where)
        return node

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
            for kw in ("$dynamicRef", "$recursiveRef"):  # ($recursiveRef: where the normalisation left it)
                if kw in s:
                    raise UnsupportedFeatureError(kw, "", _ptr(w, kw))
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

    def _emit_dfa(self, d, enc, what: str, where: str, lazy: bool = True) -> str | None:
        """Text for a code-point automaton (:func:`._automata.emit`): inline when its eliminated
        regex is at most :attr:`automaton_inline_max` characters (regex mode: :attr:`max_size`),
        else (grammar mode) right-linear rules ``dfa:<pointer>.<n>.<state>`` in :attr:`rules`, or,
        past ``max_automaton_rules`` states and with ``lazy``, rules generated when first reached
        (:meth:`_lazy_dfa`; without ``lazy`` the ``CompileLimitError`` is raised)."""
        base = "dfa:" + (re.sub(r"[^A-Za-z0-9_.:/-]", "_", where.lstrip("/")) or "root")
        n = 1
        while f"{base}.{n}.0" in self.rules:
            n += 1
        base = f"{base}.{n}"
        def define(name, text):
            self.rules[name] = text
            self.rule_where[name] = where or "#"
        cap = self.automaton_inline_max if self.grammar else self.max_size
        try:
            return emit(d, enc, inline_cap=cap, define=define if self.grammar else None, name_base=base, what=what,
                        where=where, max_rules=self.max_automaton_rules)
        except CompileLimitError as e:
            if not (lazy and self.grammar) or e.limit_name != "max_automaton_rules":
                raise
        # more states than eager rules may have: the automaton's rules generated lazily, when
        # the matcher first reaches each state (:meth:`_lazy_dfa`); nothing is dropped
        return self._lazy_dfa(d, enc, where)

    def _lazy_dfa(self, d, enc, where: str) -> str | None:
        """Grammar mode: a rule ``auto:<pointer>.<n>`` whose body is the start of ``d`` as a
        :class:`._automata.LengthProduct` without bounds (its states' rules built when first
        reached; its symbols must be characters: a body built after the grammar was analysed
        references no grammar rule); the text calls it. None = the empty language."""
        d = trim(d)
        if d is None:
            return None
        d = minimize(d)
        return self._lazy_rule("auto:", where, enc, lambda name, enc_ir: LengthProduct(d, 0, None, enc_ir, name))

    def _lazy_rule(self, prefix: str, where: str, enc, make) -> str | None:
        """Register a rule ``<prefix><pointer>.<n>`` (the first ``n`` not taken) whose body is the
        start state of the lazily generated automaton ``make(name, enc_ir)`` (``enc_ir``: ``enc``'s
        text parsed to IR, memoised per symbol set); returns the text calling it, or None when the
        automaton's start matches nothing (``live``)."""
        from ..ir import LazyRule
        from ._grammar import parse_rule

        memo: dict = {}

        def enc_ir(cs):
            if cs not in memo:
                t = enc(cs)
                memo[cs] = None if t is None else parse_rule(t)
            return memo[cs]

        base = prefix + (re.sub(r"[^A-Za-z0-9_.:/-]", "_", where.lstrip("/")) or "root")
        n = 1
        while f"{base}.{n}" in self.ir_rules:
            n += 1
        name = f"{base}.{n}"
        auto = make(name, enc_ir)
        if not auto.live(auto.start):
            return None
        self.ir_rules[name] = LazyRule(auto, auto.start)
        self.rule_where[name] = where or "#"
        return f"(?&{name})"

    #: a length product estimated (pattern states × (bound + 1)) at most this large is built eagerly
    #: and written inline when its text fits; anything larger is a :class:`._automata.LengthProduct`
    EAGER_PRODUCT_MAX = 1024

    def _length_product(self, d, lmin: int, lmax: int | None, enc, what: str, where: str) -> str | None:
        """Text for ``L(d)`` ∩ strings of ``lmin``..``lmax`` code points (``enc(charset)`` spells one
        code point, as for :meth:`_emit_dfa`); None = the empty language.

        Small products are built and written inline. In grammar mode a larger one is never built:
        a rule ``len:<pointer>.<n>`` whose body is the start of a :class:`._automata.LengthProduct`
        (its states' rules are generated when the matcher reaches them), so compile time does not
        grow with ``maxLength``/``minLength``. In regex mode the product is built, bounded by
        ``max_product_states`` and the inline cap (:class:`~structgate.errors.CompileLimitError`).
        """
        if not getattr(d, "minimal", False):  # (a format's automaton is minimal already: _format_dfa)
            d = trim(d)
            if d is None:
                return None
            d = minimize(d)
        top = lmax if lmax is not None else lmin
        cap = self.max_product_states
        if not self.grammar:
            return self._emit_dfa(trim(product(d, length_dfa(lmin, lmax, max_states=cap, what=what, where=where), max_states=cap, what=what, where=where)),
                                  enc, what, where)
        if len(d.delta) * (top + 1) <= self.EAGER_PRODUCT_MAX:
            p = trim(product(d, length_dfa(lmin, lmax, max_states=cap, what=what, where=where), max_states=cap, what=what, where=where))
            if p is None:
                return None
            try:  # inline, or at most max_automaton_rules right-linear rules (else the lazy product
                # below, whose count-free states alias the masks of long strings)
                return self._emit_dfa(p, enc, what, where, lazy=False)
            except CompileLimitError as e:
                if e.limit_name != "max_automaton_rules":
                    raise
        return self._lazy_rule("len:", where, enc, lambda name, enc_ir: LengthProduct(
            d, lmin, lmax, enc_ir, name, max_period=cap, what=what, where=where))

    def _new_rule_name(self, refs: list[str]) -> str:
        """A deterministic, unused rule name for the schema that ``refs`` (its ``$ref`` strings,
        outermost first) lead to: ``ref:`` + the last pointer, characters outside
        ``[A-Za-z0-9_.:/-]`` as ``_``, ``.2``, ``.3``... on a clash."""
        base = "ref:" + re.sub(r"[^A-Za-z0-9_.:/-]", "_", unquote(refs[-1].lstrip("#")) or "root")
        name, i = base, 1
        while name in self.rules or name in self._progress.values() or name == ROOT_RULE:
            i += 1
            name = f"{base}.{i}"
        self.rule_ref[name] = refs[-1]
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

    def _deref(self, s, hops: int = 0):
        """Follow a ``$ref`` that has only annotation siblings (for the disjointness checks)."""
        while isinstance(s, dict) and "$ref" in s and not (set(s) - ANNOTATIONS - {"$ref"}) and hops < 16:
            try:
                s = self.resolve(s["$ref"], "")
            except Exception:
                return s
            hops += 1
        return s
