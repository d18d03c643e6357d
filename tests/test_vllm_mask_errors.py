"""A structgate grammar that fails *during decoding* fails only its own request.

The native engine builds a grammar's configuration automaton lazily, so a mask (or an advance) can
meet a limit for the first time in the middle of a request: ``CompileLimitError("max_dfa_states")``
here, from a ``NativeBackend(max_dfa_states=20)`` and the regex ``[ab]*a[ab]{8}`` (which compiles,
but whose configurations outgrow 20 as decoding goes on). In vLLM these calls run inside the engine
core's step, where an exception kills the engine (``EngineDeadError``: every request fails). As
vLLM's ``guidance`` backend does when llguidance's matcher hits an error, the request's grammar is
marked failed instead (one warning, one ``structgate_decode_failures_total``): its rows allow only
EOS from then on, and it terminates when EOS is accepted. The other requests of the step, including
those sharing the failed grammar's token index, get their usual rows.

Driven without a model through a real ``StructuredOutputManager`` (the maskstep harness, as
tests/test_scheduler_hook.py), with the bridge's real ``StructgateVllmGrammar``: through the batched
scheduler hook, through vLLM's own per-row loop (hook off), with speculative rows, and for
adapter-style matchers filled by an engine's batched fill.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("vllm")

from structgate.backends.interface import Backend, Constraint, Matcher  # noqa: E402
from structgate.bitmask import bitmask_to_bool, bool_to_bitmask  # noqa: E402
from structgate.errors import BitmaskError, CompileLimitError  # noqa: E402
from structgate.native.backend import NativeBackend  # noqa: E402
from structgate.plugin import scheduler_hook as sh  # noqa: E402
from structgate.vocab import Vocabulary  # noqa: E402

TOKENS = [b"a", b"b", b"ab", b"ba", b""]  # last = EOS
A, B, AB, BA, EOS = range(5)
VOCAB = Vocabulary(TOKENS, eos_token_ids=[EOS], vocab_size=40)  # 35 padding ids, 2 words per row
WIDTH = (VOCAB.vocab_size + 31) // 32
#: compiles under max_dfa_states=20, but its configurations outgrow 20 as decoding goes on
BAD = "[ab]*a[ab]{8}"
#: from a fresh index: these tokens advance fine (19 configurations) and the row of the state they
#: reach needs more than 20 (measured; the test checks it)
TO_BAD_ROW = [AB, AB, AB]
#: from a fresh index: these advance fine and the next A is refused by the limit in ``advance``
TO_BAD_ADVANCE = [A, AB, A, AB, A, AB]


def eos_row() -> np.ndarray:
    allowed = np.zeros(VOCAB.vocab_size, dtype=bool)
    allowed[EOS] = True
    return bool_to_bitmask(allowed)


def harness():
    from structgate_bench import maskstep

    return maskstep


def bridge_grammar(compiled):
    from structgate.plugin.bridge import StructgateVllmGrammar

    return StructgateVllmGrammar(compiled.matcher(), "native", frozenset({EOS}))


def own_row(matcher) -> np.ndarray:
    row = np.empty((1, WIDTH), dtype=np.int32)
    matcher.fill_bitmask(row, 0)
    return row[0]


@pytest.fixture(autouse=True)
def _hook(monkeypatch):
    monkeypatch.delenv(sh.ENV_DISABLE, raising=False)
    monkeypatch.delenv(sh.ENV_PREFETCH, raising=False)
    sh.install()
    sh.stats.clear()
    yield
    sh.prefetcher().drain()


def _failures() -> float:
    from structgate.plugin import metrics

    return sum(v for k, v in metrics.snapshot()["counters"] if k[0] == "decode_failures_total")


def setup_batch(spec_k: int = 0):
    """Requests ``bad`` (at a state whose row exceeds the limit), ``mate`` and ``mate2`` (the same
    compiled grammar, so the same token index, at states whose rows were computed before the index
    filled up), ``other`` (another grammar)."""
    mh = harness()
    be = NativeBackend(VOCAB, max_dfa_states=20)
    bad_cg = be.compile(Constraint.regex(BAD))
    other_cg = be.compile(Constraint.regex("(ab|ba)+"))
    bad, mate, mate2, other = (bridge_grammar(bad_cg), bridge_grammar(bad_cg), bridge_grammar(bad_cg),
                               bridge_grammar(other_cg))
    assert bad.matcher.token_index is mate.matcher.token_index is not other.matcher.token_index
    assert mate.accept_tokens("mate", [B]) and mate2.accept_tokens("mate2", [A])
    assert other.accept_tokens("other", [AB])
    want = {r: own_row(g.matcher) for r, g in (("mate", mate), ("mate2", mate2), ("other", other))}
    assert bad.accept_tokens("bad", TO_BAD_ROW)
    with pytest.raises(CompileLimitError):  # the bug's trigger, as the engine meets it
        own_row(bad.matcher)
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=4, num_speculative_tokens=spec_k)
    reqs = {r: mh.make_request(r, g) for r, g in (("bad", bad), ("mate", mate), ("mate2", mate2),
                                                   ("other", other))}
    return mgr, reqs, want


# --------------------------------------------------------------------------------------- the hook
def test_limit_in_a_batched_fill_fails_only_that_request(caplog):
    mgr, reqs, want = setup_batch()
    ids = ["mate", "bad", "other"]  # the failing row sits between two rows of the same gather
    before = _failures()
    with caplog.at_level(logging.WARNING, logger="structgate.plugin"):
        got = mgr.grammar_bitmask(reqs, ids, {}).copy()  # raised CompileLimitError before the fix
    np.testing.assert_array_equal(got[0], want["mate"])
    np.testing.assert_array_equal(got[1], eos_row())
    np.testing.assert_array_equal(got[2], want["other"])
    warned = [r for r in caplog.records if "max_dfa_states" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert "bad" in warned[0].getMessage()
    assert _failures() == before + 1
    bad = reqs["bad"].structured_output_request.grammar
    assert not bad.is_terminated()
    # later steps: still EOS only, no second warning; a non-EOS token is refused (the row forbade it)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="structgate.plugin"):
        got = mgr.grammar_bitmask(reqs, ids, {}).copy()
        assert mgr.accept_tokens(reqs["bad"], [A]) is False
    np.testing.assert_array_equal(got[1], eos_row())
    assert not [r for r in caplog.records if "max_dfa_states" in r.getMessage() and r.levelno == logging.WARNING]
    assert _failures() == before + 1
    assert bad.validate_tokens([A, EOS]) == [] and bad.validate_tokens([EOS, EOS]) == [EOS]
    # EOS ends it, as any grammar: terminated, its row is then unconstrained (vLLM's rule)
    assert mgr.accept_tokens(reqs["bad"], [EOS]) is True
    assert bad.is_terminated()
    # the others go on
    assert mgr.accept_tokens(reqs["mate"], [AB]) and mgr.accept_tokens(reqs["other"], [AB])
    sh.prefetcher().drain()
    got = mgr.grammar_bitmask(reqs, ids, {}).copy()
    assert (got[1] == -1).all()
    np.testing.assert_array_equal(got[0], own_row(reqs["mate"].structured_output_request.grammar.matcher))
    np.testing.assert_array_equal(got[2], own_row(reqs["other"].structured_output_request.grammar.matcher))


def test_limit_in_an_accept_fails_only_that_request(caplog):
    mh = harness()
    be = NativeBackend(VOCAB, max_dfa_states=20)
    cg = be.compile(Constraint.regex(BAD))
    bad, mate = bridge_grammar(cg), bridge_grammar(cg)
    assert bad.accept_tokens("bad", TO_BAD_ADVANCE)
    with pytest.raises(CompileLimitError):  # what the engine's accept meets
        bad.matcher.fork().advance(A)
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=2)
    reqs = {"bad": mh.make_request("bad", bad), "mate": mh.make_request("mate", mate)}
    with caplog.at_level(logging.WARNING, logger="structgate.plugin"):
        # refused (vLLM then finishes only this request, FINISHED_ERROR), not raised
        assert mgr.accept_tokens(reqs["bad"], [A]) is False
    assert any("max_dfa_states" in r.getMessage() and "bad" in r.getMessage() for r in caplog.records)
    got = mgr.grammar_bitmask(reqs, ["bad", "mate"], {}).copy()
    np.testing.assert_array_equal(got[0], eos_row())
    np.testing.assert_array_equal(got[1], own_row(mate.matcher))
    assert mgr.validate_tokens(reqs["bad"], [A, B]) == []
    assert mgr.accept_tokens(reqs["bad"], [EOS]) and bad.is_terminated()


def test_limit_in_speculative_rows_fails_only_that_request():
    mgr, reqs, want = setup_batch(spec_k=2)
    ids = ["mate", "bad", "other"]
    mate = reqs["mate"].structured_output_request.grammar
    other = reqs["other"].structured_output_request.grammar
    hist = (mate.matcher.history, other.matcher.history)
    spec = {"mate": [B, B], "bad": [A, B], "other": [B, A]}
    got = mgr.grammar_bitmask(reqs, ids, spec).copy()  # raised CompileLimitError before the fix
    assert got.shape == (9, WIDTH)
    # every row of bad's in the step of its failure allows only EOS, those before the failing
    # position too: the first token sampled for it is EOS, which its failed grammar accepts
    for k in (3, 4, 5):
        np.testing.assert_array_equal(got[k], eos_row())
    ref = mgr.grammar_bitmask.__structgate_original__(mgr, {"mate": reqs["mate"], "other": reqs["other"]},
                                                      ["mate", "other"], spec).copy()
    np.testing.assert_array_equal(got[[0, 1, 2, 6, 7, 8]], ref)  # vLLM's own loop for the others
    assert (mate.matcher.history, other.matcher.history) == hist  # drafts rolled back
    assert got[0].tolist() == want["mate"].tolist()


@pytest.mark.parametrize("kind", ["native", "adapter"])
def test_failure_at_a_later_draft_makes_the_step_rows_eos_only(kind, monkeypatch):
    """The grammar fails advancing its second draft: its rows of the positions before (computed
    fine) allow only EOS too, so the sampler's first token for it is EOS (which it accepts), not the
    first draft (which its failed grammar would refuse: FINISHED_ERROR)."""
    from structgate.plugin.bridge import StructgateVllmGrammar

    mh = harness()
    be = NativeBackend(VOCAB)
    cg = be.compile(Constraint.regex("(ab|ba)+"))
    probe = cg.matcher()
    assert probe.advance([AB, BA])
    after_ab_ba = probe.state
    good = StructgateVllmGrammar(cg.matcher(), "native", frozenset({EOS}))
    if kind == "native":  # its own index refuses the transition AB from there (as a limit would)
        inner = NativeBackend(VOCAB).compile(Constraint.regex("(ab|ba)+")).matcher()
        assert inner.token_index is not good.matcher.token_index
        ti = inner.token_index
        orig = ti.next_state

        def next_state(state, token_id):
            if state == after_ab_ba and token_id == AB:
                raise CompileLimitError("max_dfa_states", 21, 20)
            return orig(state, token_id)

        monkeypatch.setattr(ti, "next_state", next_state)
        bad = StructgateVllmGrammar(inner, "native", frozenset({EOS}))
        backend = be
    else:
        bad = StructgateVllmGrammar(AdapterMatcher(cg.matcher(), boom_after=2), "toy-batch", frozenset({EOS}))
        backend = BatchBackend()
        good = StructgateVllmGrammar(AdapterMatcher(cg.matcher()), "toy-batch", frozenset({EOS}))
    assert bad.accept_tokens("bad", [AB]) and good.accept_tokens("good", [AB])
    mgr = mh.make_manager(mh.HarnessBackend(backend), max_num_seqs=2, num_speculative_tokens=2)
    reqs = {"bad": mh.make_request("bad", bad), "good": mh.make_request("good", good)}
    spec = {"bad": [BA, AB], "good": [BA, AB]}
    got = mgr.grammar_bitmask(reqs, ["bad", "good"], spec).copy()
    for k in (0, 1, 2):
        np.testing.assert_array_equal(got[k], eos_row(), err_msg=f"row {k}")
    ref = mgr.grammar_bitmask.__structgate_original__(mgr, {"good": reqs["good"]}, ["good"], spec).copy()
    np.testing.assert_array_equal(got[3:], ref)
    assert bitmask_to_bool(ref[0], VOCAB.vocab_size)[BA]  # (the masks the failed grammar would have had)
    assert mgr.accept_tokens(reqs["bad"], [EOS]) and bad.is_terminated()


def test_limit_through_vllm_loop_with_the_hook_off(monkeypatch, caplog):
    """STRUCTGATE_SCHEDULER_HOOK=0: vLLM's own loop calls the bridge's fill_bitmask per row."""
    mgr, reqs, want = setup_batch()
    monkeypatch.setenv(sh.ENV_DISABLE, "0")
    with caplog.at_level(logging.WARNING, logger="structgate.plugin"):
        got = mgr.grammar_bitmask(reqs, ["mate", "bad", "other"], {}).copy()
    assert not sh.stats  # vLLM's loop ran
    np.testing.assert_array_equal(got[0], want["mate"])
    np.testing.assert_array_equal(got[1], eos_row())
    np.testing.assert_array_equal(got[2], want["other"])
    assert sum("max_dfa_states" in r.getMessage() for r in caplog.records) == 1
    bad = reqs["bad"].structured_output_request.grammar
    assert bad.accept_tokens("bad", [EOS]) and bad.is_terminated()


@pytest.mark.parametrize("hook", [True, False])
def test_step_timeout_in_a_fill_fails_only_that_request(hook, monkeypatch, caplog):
    """``step_timeout_s`` (a step's lazy work past its wall-clock limit, test_native_step_timeout.py)
    is a limit like the others: met in one request's row, that request alone gets EOS only; a
    request of the same grammar whose row is cached, and another grammar's, get their rows."""
    mh = harness()
    be = NativeBackend(VOCAB)  # the default limit; made unreachable below
    cg, other_cg = be.compile(Constraint.regex(BAD)), be.compile(Constraint.regex("(ab|ba)+"))
    bad, mate, other = bridge_grammar(cg), bridge_grammar(cg), bridge_grammar(other_cg)
    assert mate.accept_tokens("mate", [B]) and other.accept_tokens("other", [AB])
    want = {"mate": own_row(mate.matcher), "other": own_row(other.matcher)}
    assert bad.accept_tokens("bad", [AB])  # a state whose row is not computed yet
    assert not cg.token_index.is_cached(bad.matcher.state)
    cg.token_index.step_timeout_s = 1e-9  # no first visit can finish now
    if not hook:
        monkeypatch.setenv(sh.ENV_DISABLE, "0")
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=3)
    reqs = {r: mh.make_request(r, g) for r, g in (("bad", bad), ("mate", mate), ("other", other))}
    before = _failures()
    with caplog.at_level(logging.WARNING, logger="structgate.plugin"):
        got = mgr.grammar_bitmask(reqs, ["mate", "bad", "other"], {}).copy()
    np.testing.assert_array_equal(got[0], want["mate"])
    np.testing.assert_array_equal(got[1], eos_row())
    np.testing.assert_array_equal(got[2], want["other"])
    assert sum("step_timeout_s" in r.getMessage() for r in caplog.records) == 1
    assert _failures() == before + 1
    assert mgr.accept_tokens(reqs["bad"], [EOS]) and bad.is_terminated()
    assert mgr.accept_tokens(reqs["mate"], [AB])


def test_rollback_across_the_failure():
    """Tokens accepted after the failure (EOS) roll back first, then the ones before it; the grammar
    stays failed (EOS only)."""
    mgr, reqs, want = setup_batch()
    bad = reqs["bad"].structured_output_request.grammar
    bm = np.zeros((1, WIDTH), dtype=np.int32)
    bad.fill_bitmask(bm, 0)  # the bridge's own path fails it too
    np.testing.assert_array_equal(bm[0], eos_row())
    n = bad.num_processed_tokens
    assert bad.accept_tokens("bad", [EOS, A]) and bad.is_terminated()  # tokens after EOS ignored
    bad.rollback(2)
    assert not bad.is_terminated() and bad.num_processed_tokens == n - 1
    bad.fill_bitmask(bm, 0)
    np.testing.assert_array_equal(bm[0], eos_row())


# ---------------------------------------------------------------------- gathers and batched fills
def test_gather_failure_falls_back_to_rows(monkeypatch):
    """A native gather (fill_rows over several requests' states) that raises: each row alone, only the
    row that raises fails."""
    mgr, reqs, want = setup_batch()
    ti = reqs["mate"].structured_output_request.grammar.matcher.token_index
    calls = []
    orig = ti.fill_rows

    def fill_rows(states, out):
        calls.append(len(states))
        return orig(states, out)

    monkeypatch.setattr(ti, "fill_rows", fill_rows)
    got = mgr.grammar_bitmask(reqs, ["mate", "bad", "mate2", "other"], {}).copy()
    assert calls == [3]  # one gather for the three requests of the index, then row by row
    np.testing.assert_array_equal(got[0], want["mate"])
    np.testing.assert_array_equal(got[1], eos_row())
    np.testing.assert_array_equal(got[2], want["mate2"])
    np.testing.assert_array_equal(got[3], want["other"])


def test_non_structgate_errors_still_raise(monkeypatch):
    """Only StructgateError (not BitmaskError: the caller's buffer) marks a grammar failed; other
    exceptions are bugs and surface."""
    mgr, reqs, want = setup_batch()
    ti = reqs["mate"].structured_output_request.grammar.matcher.token_index

    def boom(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(ti, "fill_rows", boom)
    monkeypatch.setattr(ti, "fill_row", boom)
    with pytest.raises(RuntimeError, match="a bug"):
        mgr.grammar_bitmask(reqs, ["mate", "other"], {})

    def bad_buffer(*a, **k):
        raise BitmaskError("wrong buffer")

    monkeypatch.setattr(ti, "fill_rows", bad_buffer)
    monkeypatch.setattr(ti, "fill_row", bad_buffer)
    with pytest.raises(BitmaskError):
        mgr.grammar_bitmask(reqs, ["mate", "other"], {})
    from structgate.plugin.grammar_failure import FailedMatcher

    assert not isinstance(reqs["mate"].structured_output_request.grammar.matcher, FailedMatcher)


class AdapterMatcher(Matcher):
    """An adapter-style matcher (no row gather) over a native one; ``boom`` makes its fills raise,
    ``boom_after`` its advances once that many tokens were accepted."""

    def __init__(self, inner, boom: Exception | None = None, boom_after: int | None = None):
        self.inner, self.vocab, self.boom, self.boom_after = inner, inner.vocab, boom, boom_after

    def _fill_row(self, row):
        if self.boom is not None:
            raise self.boom
        return self.inner._fill_row(row)

    def advance(self, token_ids):
        if self.boom_after is not None and len(self.inner.history) - 1 >= self.boom_after:
            raise CompileLimitError("max_dfa_states", 21, 20)
        return self.inner.advance(token_ids)

    def rollback(self, num_tokens):
        self.inner.rollback(num_tokens)

    def is_accepting(self):
        return self.inner.is_accepting()

    def is_terminated(self):
        return self.inner.is_terminated()

    def reset(self):
        self.inner.reset()


class BatchBackend(Backend):
    """An adapter backend with a batched fill (one call for every row; it raises as its rows do)."""

    name = "toy-batch"
    supported_kinds = frozenset({"regex"})

    def __init__(self):
        super().__init__(VOCAB)
        self.batch_calls: list[int] = []

    def _compile(self, constraint):  # pragma: no cover
        raise NotImplementedError

    def fill_bitmask_batch(self, pairs, bitmask):
        self.batch_calls.append(len(pairs))
        for m, r in pairs:
            assert isinstance(m, AdapterMatcher)  # never given a matcher of another engine
            m.fill_bitmask(bitmask, r)


def test_adapter_batched_fill_failure_falls_back_to_rows(monkeypatch):
    monkeypatch.setenv(sh.ENV_PREFETCH, "0")
    mh = harness()
    from structgate.plugin.bridge import StructgateVllmGrammar

    cg = NativeBackend(VOCAB).compile(Constraint.regex("(ab|ba)+"))
    grammars = {}
    for rid, boom in (("x", None), ("y", CompileLimitError("max_dfa_states", 21, 20)), ("z", None)):
        m = AdapterMatcher(cg.matcher(), boom)
        assert m.advance(AB if rid != "z" else BA)
        grammars[rid] = StructgateVllmGrammar(m, "toy-batch", frozenset({EOS}))
    be = BatchBackend()
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=3)
    reqs = {r: mh.make_request(r, g) for r, g in grammars.items()}
    got = mgr.grammar_bitmask(reqs, ["x", "y", "z"], {}).copy()
    assert be.batch_calls == [3]
    np.testing.assert_array_equal(got[0], own_row(grammars["x"].matcher.inner))
    np.testing.assert_array_equal(got[1], eos_row())
    np.testing.assert_array_equal(got[2], own_row(grammars["z"].matcher.inner))
    # the failed grammar's matcher is no engine's: later steps never hand it to the engine's batch
    got = mgr.grammar_bitmask(reqs, ["x", "y", "z"], {}).copy()
    assert be.batch_calls == [3, 2]
    np.testing.assert_array_equal(got[1], eos_row())
    assert bitmask_to_bool(got[0], VOCAB.vocab_size).any()


@pytest.mark.parametrize("mode", ["tokens", "bytes"])
def test_forced_draft_walk_failure_fails_only_that_request(mode, monkeypatch):
    """The forced-token drafter walks the grammar (structgate.plugin.drafter, in the scheduler):
    a limit met there fails that request's grammar (no drafts), and raises nothing."""
    import types

    from structgate.plugin import drafter
    from structgate.plugin.grammar_failure import FailedMatcher

    mgr, reqs, want = setup_batch()
    g = reqs["mate"].structured_output_request.grammar

    def boom(*a, **k):
        raise CompileLimitError("max_dfa_states", 21, 20)

    monkeypatch.setattr(g.matcher, "forced_tokens", boom)
    monkeypatch.setattr(g.matcher, "fork", boom)  # the bytes mode walks a fork
    req = reqs["mate"]
    req.max_tokens, req.num_output_tokens = 100, 1
    sched = types.SimpleNamespace(structured_output_manager=mgr)
    assert drafter._forced_for(sched, req, 3, mode) == []
    assert isinstance(g.matcher, FailedMatcher)
    assert drafter._forced_for(sched, req, 3, mode) == []
    got = mgr.grammar_bitmask(reqs, ["mate", "other"], {}).copy()
    np.testing.assert_array_equal(got[0], eos_row())
    np.testing.assert_array_equal(got[1], want["other"])


def test_failed_grammar_is_dropped_from_the_caches():
    """Requests of one constraint share one compiled grammar and its lazily built automaton: after
    one of them fails (a limit that counts what every request reached), the bridge's cache and the
    engine's drop that grammar, so the next request compiles afresh; a request still running keeps
    the grammar it holds."""
    from test_vllm_metrics import _vllm_engine
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.plugin.grammar_failure import FailedMatcher, fail_grammar

    make, tok = _vllm_engine()
    be = make()
    rx = "[a-z]+@[a-z]+"
    g1 = be.compile_grammar(StructuredOutputOptions.REGEX, rx)
    g2 = be.compile_grammar(StructuredOutputOptions.REGEX, rx)
    index = g1.matcher.row_source()[0]
    assert g2.matcher.row_source()[0] is index  # one compiled grammar, shared
    assert be.sg_backend.cache_len == 1
    fail_grammar(g1, CompileLimitError("max_dfa_states", 200_001, 200_000))
    assert isinstance(g1.matcher, FailedMatcher)
    assert be.sg_backend.cache_len == 0 and not be._cache
    g3 = be.compile_grammar(StructuredOutputOptions.REGEX, rx)
    assert g3.matcher.row_source()[0] is not index  # compiled afresh
    # the request still running on the old grammar is unaffected
    at = tok.convert_tokens_to_ids("a")
    assert g2.accept_tokens("r2", [at]) and not isinstance(g2.matcher, FailedMatcher)
