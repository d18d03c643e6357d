"""The conformance test class (pytest). See :mod:`structgate.testing` for how to use it.

What is checked (each a test method; names are the keys of ``deviations``):

* ``test_bitmask_layout``: one row of a caller-owned ``(batch, ceil(V/32))`` int32 buffer is
  written (numpy and torch), other rows untouched, ``need_apply`` is right, a wrong dtype / width /
  row raises :class:`~structgate.errors.BitmaskError`;
* ``test_padding_and_specials_forbidden``: at every step, ids ``>= n_tokens`` and non-EOS special
  ids are never allowed, and advancing by them returns False;
* ``test_eos_only_when_accepting``: the EOS bit equals ``is_accepting()`` and ``is_final()``
  follows rule 3 at every step; EOS in a non-accepting state is rejected without changing the state;
* ``test_termination``: after EOS: ``is_terminated``, ``is_final``, the mask allows EOS only, EOS
  again is accepted and changes nothing, any other token is rejected;
* ``test_rollback_exact``: masks after rolling back ``k`` tokens (including an accepted EOS) equal
  the masks recorded on the way; rollback past the history or by a negative count raises
  :class:`~structgate.errors.MatcherStateError`;
* ``test_validate_does_not_change_state`` and ``test_rejected_advance_is_atomic``;
* ``test_mask_agrees_with_advance``: a token is allowed iff ``advance`` accepts it (sampled);
* ``test_forced_tokens_match_definition``: ``forced_tokens(k)`` equals its definition (exactly one
  allowed non-EOS id per step, found through ``allowed_token_ids``) at every prefix of every corpus
  accept path, leaves the state unchanged, and ``forced_bytes`` agrees with it;
* ``test_reset``; ``test_thread_safety`` (one compiled grammar, 4 threads, same masks);
* ``test_unsupported_kind_raises``: a kind outside ``supported_kinds`` raises
  :class:`~structgate.errors.ConstraintKindError`;
* ``test_corpus_accept`` / ``test_corpus_dead`` / ``test_corpus_live`` over
  :data:`~structgate.testing.corpus.CORPUS` (entries whose kind is outside ``supported_kinds`` are
  skipped; an entry the backend refuses with :class:`~structgate.errors.UnsupportedFeatureError` or
  :class:`~structgate.errors.CompileLimitError` **fails**, unless the class lists it in ``refusals``,
  and then the test checks that it is still refused, so a lifted limit is noticed too).

Documented deviations (``deviations``) are strict xfails: a deviation that is fixed makes the test
fail (XPASS(strict)) until it is taken out of the list.
"""
from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np
import pytest

from ..backends.interface import CONSTRAINT_KINDS, Backend, CompiledGrammar, Constraint, Matcher
from ..bitmask import allowed_ids, bitmask_to_bool
from ..errors import BitmaskError, ConstraintKindError, GrammarSyntaxError, MatcherStateError, \
    UnsupportedFeatureError, CompileLimitError
from ..vocab import Vocabulary
from .corpus import CORPUS, CorpusEntry
from .vocab import tiny_vocabulary

__all__ = ["BackendConformance", "drive", "row_of"]

_CORPUS_IDS = [e.id for e in CORPUS]


def row_of(m: Matcher) -> np.ndarray:
    """A fresh mask row (int32 words) of ``m``'s current state."""
    words = np.full((1, (m.vocab.vocab_size + 31) // 32), -1, dtype=np.int32)
    m.fill_bitmask(words, 0)
    return words[0]


def drive(m: Matcher, tokens: list[int]) -> int:
    """Advance ``m`` one token at a time; return how many tokens were accepted."""
    for i, t in enumerate(tokens):
        if not m.advance(t):
            return i
    return len(tokens)


class BackendConformance:
    """Subclass with ``backend_name = "<registered name>"`` (class name starting with ``Test``)."""

    #: registry name (or alias) of the backend under test
    backend_name: ClassVar[str] = ""
    #: keyword options for ``get_backend``
    backend_options: ClassVar[dict] = {}
    #: ``{test name or corpus id: reason}`` checks expected to fail (documented deviations; strict:
    #: a check listed here that passes fails the run)
    deviations: ClassVar[dict] = {}
    #: ``{corpus id: reason}`` entries the backend refuses on purpose with a typed compile error
    #: (``UnsupportedFeatureError`` / ``CompileLimitError``); any other refusal fails the corpus test
    refusals: ClassVar[dict] = {}
    #: corpus ids tried, in order, for the contract checks (the first the backend compiles is used)
    contract_entries: ClassVar[tuple[str, ...]] = ("regex-alternation-overlap", "choice-prefixes")

    # -- hooks -----------------------------------------------------------------------------------
    def make_vocabulary(self) -> Vocabulary:
        """The vocabulary the checks run on (override for a real tokenizer)."""
        return tiny_vocabulary()

    def make_backend(self, vocab: Vocabulary) -> Backend:
        """Create the backend (default: through the registry, as users do)."""
        from ..backends.registry import get_backend

        if not self.backend_name:
            pytest.skip("backend_name is not set")
        return get_backend(self.backend_name, vocab, **self.backend_options)

    # -- fixtures --------------------------------------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def vocab(cls) -> Vocabulary:
        return cls.make_vocabulary(cls)

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, vocab) -> Backend:
        return cls.make_backend(cls, vocab)

    @pytest.fixture(scope="class")
    @classmethod
    def contract_grammar(cls, backend) -> tuple[CompiledGrammar, CorpusEntry]:
        """A compiled corpus entry for the contract checks: the first supported one of
        ``contract_entries``."""
        refused = []
        for cid in cls.contract_entries:
            e = next(x for x in CORPUS if x.id == cid)
            if e.kind in backend.supported_kinds:
                try:
                    return backend.compile(e.constraint()), e
                except (UnsupportedFeatureError, CompileLimitError) as exc:
                    refused.append(f"{cid}: {type(exc).__name__}: {exc}")
        if refused:
            pytest.fail(f"{backend.name} compiles none of the contract entries {cls.contract_entries}: "
                        + "; ".join(refused))
        pytest.skip(f"{backend.name} supports the kind of none of {cls.contract_entries} "
                    "(set contract_entries to an entry of a kind it supports)")

    @pytest.fixture(autouse=True)
    def _deviation(self, request):
        name = request.node.originalname or request.node.name
        reason = self.deviations.get(name)
        if reason is None and hasattr(request.node, "callspec"):
            cid = request.node.callspec.params.get("entry_id")
            reason = self.deviations.get(cid) or self.deviations.get(f"{name}[{cid}]")
        if reason:
            request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _paths(entry: CorpusEntry, vocab: Vocabulary) -> list[list[int]]:
        return [vocab.encode(s) for s in entry.accept]

    def _compile_entry(self, backend: Backend, entry: CorpusEntry) -> CompiledGrammar:
        if entry.kind not in backend.supported_kinds:
            pytest.skip(f"{backend.name} does not support kind {entry.kind!r}")
        why = self.refusals.get(entry.id)
        if why is not None:
            with pytest.raises((UnsupportedFeatureError, CompileLimitError)):
                backend.compile(entry.constraint())
            pytest.skip(f"{backend.name} refuses {entry.id} (declared in refusals: {why})")
        try:
            return backend.compile(entry.constraint())
        except (UnsupportedFeatureError, CompileLimitError) as e:
            pytest.fail(f"{backend.name} refuses corpus entry {entry.id} with {type(e).__name__}: {e} "
                        "(list it in the class's refusals with a reason if that is intended)")

    # -- contract ----------------------------------------------------------------------------------
    def test_bitmask_layout(self, contract_grammar, vocab):
        g, _ = contract_grammar
        m = g.matcher()
        w = (vocab.vocab_size + 31) // 32
        buf = np.full((3, w), 0x5A5A5A5A, dtype=np.int32)
        need = m.fill_bitmask(buf, 1)
        assert (buf[0] == 0x5A5A5A5A).all() and (buf[2] == 0x5A5A5A5A).all()
        assert isinstance(need, (bool, np.bool_))
        allowed = bitmask_to_bool(buf[1], vocab.vocab_size)
        assert bool(need) == (not allowed.all())
        assert allowed.any(), "the start state of a satisfiable constraint allows something"
        try:
            import torch
        except ImportError:  # pragma: no cover
            torch = None
        if torch is not None:
            t = torch.zeros((2, w), dtype=torch.int32)
            m.fill_bitmask(t, 1)
            assert (t[1].numpy() == buf[1]).all() and (t[0] == 0).all()
        with pytest.raises(BitmaskError):
            m.fill_bitmask(np.zeros((1, w), dtype=np.int64), 0)
        with pytest.raises(BitmaskError):
            m.fill_bitmask(np.zeros((1, w + 1), dtype=np.int32), 0)
        with pytest.raises(BitmaskError):
            m.fill_bitmask(np.zeros((1, w), dtype=np.int32), 1)

    def _walk_states(self, g: CompiledGrammar, entry: CorpusEntry, vocab: Vocabulary):
        """Yield (matcher, step) at every prefix of every accept path."""
        for path in self._paths(entry, vocab):
            m = g.matcher()
            yield m, path, -1
            for i, t in enumerate(path):
                assert m.advance(t), f"token {vocab.describe(t)} at step {i} of an accepted string rejected"
                yield m, path, i

    def test_padding_and_specials_forbidden(self, contract_grammar, vocab):
        g, e = contract_grammar
        forbidden = [i for i in vocab.special_token_ids if i not in vocab.eos_token_ids]
        pads = list(range(vocab.n_tokens, vocab.vocab_size))
        for m, _, _ in self._walk_states(g, e, vocab):
            ok = bitmask_to_bool(row_of(m), vocab.vocab_size)
            assert not ok[vocab.n_tokens:].any(), "a padding id is allowed"
            assert not ok[forbidden].any() if forbidden else True, "a non-EOS special token is allowed"
            for t in forbidden[:3] + pads[:2] + pads[-1:]:
                assert m.advance(t) is False

    def test_eos_only_when_accepting(self, contract_grammar, vocab):
        g, e = contract_grammar
        eos = vocab.eos_token_ids
        for m, _, _ in self._walk_states(g, e, vocab):
            ok = bitmask_to_bool(row_of(m), vocab.vocab_size)
            acc = m.is_accepting()
            assert all(ok[x] == acc for x in eos), "EOS bit differs from is_accepting()"
            others = ok.copy()
            others[list(eos)] = False
            assert m.is_final() == (acc and not others.any()), "is_final() differs from rule 3"
            if not acc:
                before = row_of(m)
                assert m.advance(eos[0]) is False
                assert not m.is_terminated()
                assert (row_of(m) == before).all()

    def test_termination(self, contract_grammar, vocab):
        g, e = contract_grammar
        eos = vocab.eos_token_ids[0]
        m = g.matcher()
        assert m.advance(vocab.encode(e.accept[0]))
        assert m.is_accepting()
        assert m.advance(eos)
        assert m.is_terminated() and m.is_final() and m.is_accepting()
        assert list(m.allowed_token_ids()) == sorted(vocab.eos_token_ids)
        assert m.advance(eos) is True and m.is_terminated()
        some = vocab.encode(e.accept[0])[0]
        assert m.advance(some) is False and m.is_terminated()
        assert m.validate([eos, eos]) == 2 and m.validate([some]) == 0

    def test_rollback_exact(self, contract_grammar, vocab):
        g, e = contract_grammar
        eos = vocab.eos_token_ids[0]
        for s in e.accept:
            path = vocab.encode(s) + [eos]
            m = g.matcher()
            rows = [row_of(m)]
            for t in path:
                assert m.advance(t)
                rows.append(row_of(m))
            assert m.is_terminated()
            for k in range(1, len(path) + 1):
                m.rollback(1)
                assert (row_of(m) == rows[-1 - k]).all(), f"mask after rolling back {k} differs"
                assert not m.is_terminated()
            with pytest.raises(MatcherStateError):
                m.rollback(1)
            # whole-path rollback in one call, from the terminated state
            assert m.advance(path) and m.is_terminated()
            m.rollback(len(path))
            assert (row_of(m) == rows[0]).all()
        with pytest.raises(MatcherStateError):
            g.matcher().rollback(-1)

    def test_validate_does_not_change_state(self, contract_grammar, vocab):
        g, e = contract_grammar
        eos = vocab.eos_token_ids[0]
        path = vocab.encode(e.accept[0])
        m = g.matcher()
        before = row_of(m)
        assert m.validate(path + [eos]) == len(path) + 1
        assert (row_of(m) == before).all() and not m.is_terminated()
        bad = self._a_forbidden_token(m, vocab)
        assert m.validate([bad]) == 0
        assert m.advance(path[:1])
        bad2 = self._a_forbidden_token(m, vocab)
        m.rollback(1)
        assert m.validate(path[:1] + [bad2] + path[1:]) == 1
        assert (row_of(m) == before).all()
        assert m.validate([]) == 0

    @staticmethod
    def _a_forbidden_token(m: Matcher, vocab: Vocabulary) -> int:
        ok = bitmask_to_bool(row_of(m), vocab.vocab_size)
        for t in range(vocab.n_tokens):
            if not ok[t] and t not in vocab.special_token_ids:
                return t
        raise AssertionError("every token is allowed")  # pragma: no cover

    def test_rejected_advance_is_atomic(self, contract_grammar, vocab):
        g, e = contract_grammar
        path = vocab.encode(e.accept[0])
        m = g.matcher()
        before = row_of(m)
        bad = self._a_forbidden_token(m, vocab)
        assert m.advance(path[:1] + [bad] + path[1:]) is False or len(path) == 0
        assert (row_of(m) == before).all(), "a rejected multi-token advance changed the state"
        assert m.advance(bad) is False
        assert (row_of(m) == before).all()
        assert m.advance(path) is True and m.is_accepting(), "state unusable after a rejected token"
        with pytest.raises(MatcherStateError):
            m.advance(-1)

    def test_mask_agrees_with_advance(self, contract_grammar, vocab):
        g, e = contract_grammar
        rng = np.random.default_rng(0)
        for m, _, _ in self._walk_states(g, e, vocab):
            ok = bitmask_to_bool(row_of(m), vocab.vocab_size)
            yes = np.flatnonzero(ok)
            no = np.flatnonzero(~ok)
            sample = list(yes[:64]) + list(rng.choice(no, size=min(32, len(no)), replace=False))
            for t in sample:
                t = int(t)
                got = m.advance(t)
                assert got == bool(ok[t]), f"mask says {bool(ok[t])} for {vocab.describe(t)}, advance says {got}"
                if got:
                    m.rollback(1)

    def test_reset(self, contract_grammar, vocab):
        g, e = contract_grammar
        m = g.matcher()
        start = row_of(m)
        assert m.advance(vocab.encode(e.accept[0]) + [vocab.eos_token_ids[0]])
        m.reset()
        assert not m.is_terminated() and (row_of(m) == start).all()
        with pytest.raises(MatcherStateError):
            m.rollback(1)

    def _accepted_prefixes(self, g: CompiledGrammar, entry: CorpusEntry, vocab: Vocabulary):
        """Yield (matcher, path, step) at every prefix of every accept path, as far as the backend
        accepts it (acceptance itself is the corpus tests' business)."""
        for path in self._paths(entry, vocab):
            m = g.matcher()
            yield m, path, -1
            for i, t in enumerate(path):
                if not m.advance(t):
                    break
                yield m, path, i

    @staticmethod
    def _forced_oracle(m: Matcher, vocab: Vocabulary, max_n: int) -> list[int]:
        """``forced_tokens`` by its definition, through the public API only: while the allowed ids
        are exactly one non-EOS id, take it; then roll back."""
        out: list[int] = []
        eos = set(vocab.eos_token_ids)
        try:
            while len(out) < max_n and not m.is_terminated():
                ids = m.allowed_token_ids()
                if len(ids) != 1 or int(ids[0]) in eos:
                    break
                assert m.advance(int(ids[0])), f"the only allowed token {vocab.describe(int(ids[0]))} was rejected"
                out.append(int(ids[0]))
        finally:
            if out:
                m.rollback(len(out))
        return out

    @pytest.mark.parametrize("entry_id", _CORPUS_IDS)
    def test_forced_tokens_match_definition(self, backend, vocab, entry_id):
        """``forced_tokens(k)`` equals the definition at every prefix of every accept path (k = 1, 3,
        16), never changes the state, is empty when terminated / for k = 0, and the forced bytes start
        with the forced tokens' bytes."""
        e = next(x for x in CORPUS if x.id == entry_id)
        g = self._compile_entry(backend, e)
        for m, path, i in self._accepted_prefixes(g, e, vocab):
            before = row_of(m)
            rest_before = m.validate(path[i + 1:])
            want = self._forced_oracle(m, vocab, 16)
            for k in (1, 3, 16):
                got = m.forced_tokens(k)
                assert got == want[:k], (f"{e.id} after {i + 1} tokens, k={k}: forced_tokens "
                                         f"{[vocab.describe(t) for t in got]} != definition "
                                         f"{[vocab.describe(t) for t in want[:k]]}")
            assert (row_of(m) == before).all(), "forced_tokens changed the state"
            assert m.forced_tokens(0) == []
            fb = m.forced_bytes()
            assert isinstance(fb, bytes)
            tb = b"".join(vocab.token_bytes[t] for t in want)
            assert fb.startswith(tb) or tb.startswith(fb), (fb, tb)
            assert m.validate(path[i + 1:]) == rest_before, "forced_tokens changed the history"
        m = g.matcher()
        if m.advance(vocab.encode(e.accept[0]) + [vocab.eos_token_ids[0]]):
            assert m.is_terminated() and m.forced_tokens(8) == []
        with pytest.raises(MatcherStateError):
            m.forced_tokens(-1)

    def test_thread_safety(self, contract_grammar, vocab):
        g, e = contract_grammar
        paths = self._paths(e, vocab)

        def trace():
            out = []
            for p in paths:
                m = g.matcher()
                out.append(row_of(m).copy())
                for t in p:
                    assert m.advance(t)
                    out.append(row_of(m).copy())
            return out

        ref = trace()
        results: list[Any] = [None] * 4
        errors: list[BaseException] = []

        def work(i):
            try:
                for _ in range(3):
                    results[i] = trace()
            except BaseException as ex:  # pragma: no cover - reported below
                errors.append(ex)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for r in results:
            assert len(r) == len(ref) and all((a == b).all() for a, b in zip(r, ref))

    def test_unsupported_kind_raises(self, backend):
        missing = [k for k in CONSTRAINT_KINDS if k not in backend.supported_kinds and k != "structural_tag"]
        if not missing:
            pytest.skip("backend supports every kind")
        samples = {"regex": Constraint.regex("a"), "json_schema": Constraint.json_schema({"type": "integer"}),
                   "json_object": Constraint.json_object(), "choice": Constraint.choice(["a"]),
                   "grammar": Constraint.grammar('start: "a"', "lark")}
        for k in missing:
            with pytest.raises(ConstraintKindError):
                backend.compile(samples[k])

    # -- corpus ------------------------------------------------------------------------------------
    @pytest.mark.parametrize("entry_id", _CORPUS_IDS)
    def test_corpus_accept(self, backend, vocab, entry_id):
        e = next(x for x in CORPUS if x.id == entry_id)
        g = self._compile_entry(backend, e)
        for s in e.accept:
            m = g.matcher()
            toks = vocab.encode(s)
            n = drive(m, toks)
            assert n == len(toks), f"{s!r}: rejected at token {n} ({vocab.describe(toks[n])})"
            assert m.is_accepting(), f"{s!r}: complete but not accepting"
            assert m.advance(vocab.eos_token_ids[0]), f"{s!r}: EOS rejected"

    @pytest.mark.parametrize("entry_id", _CORPUS_IDS)
    def test_corpus_dead(self, backend, vocab, entry_id):
        e = next(x for x in CORPUS if x.id == entry_id)
        g = self._compile_entry(backend, e)
        for s in e.dead:
            m = g.matcher()
            toks = vocab.encode(s)
            n = drive(m, toks)
            assert n < len(toks), f"{s!r}: a dead output was generated entirely"

    @pytest.mark.parametrize("entry_id", _CORPUS_IDS)
    def test_corpus_live(self, backend, vocab, entry_id):
        e = next(x for x in CORPUS if x.id == entry_id)
        g = self._compile_entry(backend, e)
        for s in e.live:
            m = g.matcher()
            toks = vocab.encode(s)
            n = drive(m, toks)
            assert n == len(toks), f"{s!r}: live prefix rejected at token {n}"
            assert not m.is_accepting(), f"{s!r}: an incomplete output is accepting"
            assert not m.is_final()
            ok = bitmask_to_bool(row_of(m), vocab.vocab_size)
            assert not ok[list(vocab.eos_token_ids)].any(), f"{s!r}: EOS allowed on an incomplete output"
            assert ok[: vocab.n_tokens].any()
