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


def _vllm_refusal_line_passes(rid) -> bool:
    """Whether vLLM's own line for a refused token (its scheduler's ERROR) would be written."""
    name = "vllm.v1.core.sched.scheduler"
    rec = logging.LogRecord(name, logging.ERROR, __file__, 1, "Unexpected: grammar rejected tokens %s for "
                            "request %s. Terminating request.", ([A], rid), None)
    return bool(logging.getLogger(name).filter(rec))


def _request_at_the_limit(max_num_seqs: int):
    """``(manager, request "bad-1")``: the request's grammar (``BAD`` under ``max_dfa_states=20``)
    advanced to where its next ``A`` meets the limit in ``advance``."""
    mh = harness()
    be = NativeBackend(VOCAB, max_dfa_states=20)
    bad = bridge_grammar(be.compile(Constraint.regex(BAD)))
    assert bad.accept_tokens("bad-1", TO_BAD_ADVANCE)
    return mh.make_manager(mh.HarnessBackend(be), max_num_seqs=max_num_seqs), mh.make_request("bad-1", bad)


def test_a_refused_token_logs_one_line(caplog):
    """A sampled token the failed grammar refuses used to log four lines: fail_grammar's warning, the
    bridge's error, the scheduler hook's error and vLLM's own. Now one, at WARNING (the request ends
    with its stop_reason naming the failure): the request, the token, why; the traceback at DEBUG
    only; vLLM's line for it dropped."""
    mgr, req = _request_at_the_limit(max_num_seqs=1)
    with caplog.at_level(logging.DEBUG, logger="structgate"):
        assert mgr.accept_tokens(req, [A]) is False
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    msg = lines[0].getMessage()
    assert lines[0].levelno == logging.WARNING and not lines[0].exc_info
    assert "request bad-1" in msg and f"token {A}:" in msg and "CompileLimitError(max_dfa_states)" in msg, msg
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(debug) == 1 and isinstance(debug[0].exc_info[1], CompileLimitError)
    assert not _vllm_refusal_line_passes("bad-1")  # structgate's line says it all
    assert _vllm_refusal_line_passes("bad-1")  # (once: a later one is vLLM's to write)
    assert _vllm_refusal_line_passes("someone-else")
    # at INFO no traceback at all; a second refusal of the same grammar logs nothing more
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="structgate"):
        assert mgr.accept_tokens(req, [B]) is False
    assert not caplog.records
    # the EOS a grammar failing in that very advance allows: the failure's one warning
    other = bridge_grammar(NativeBackend(VOCAB, max_dfa_states=20).compile(Constraint.regex(BAD)))
    assert other.accept_tokens("bad-2", TO_BAD_ADVANCE)
    other.matcher.advance = lambda t: (_ for _ in ()).throw(CompileLimitError("max_dfa_states", 21, 20))
    with caplog.at_level(logging.INFO, logger="structgate"):
        assert other.accept_tokens("bad-2", [EOS]) is True
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and "bad-2" in lines[0].getMessage()


def test_a_refused_token_schedules_no_prefetch(caplog):
    """A refused sampled token ends its request: no next mask to prefetch. It used to schedule one
    (the bridge's grammar logs its own refusals, and the hook then fell into its prefetch branch),
    which for a grammar failing in that very advance redid the failed work in the background and
    logged a second DEBUG traceback. An accepted token still schedules one."""
    mh = harness()
    mgr, req = _request_at_the_limit(max_num_seqs=2)
    with caplog.at_level(logging.DEBUG, logger="structgate"):
        assert mgr.accept_tokens(req, [A]) is False  # the grammar fails in this advance
        sound = bridge_grammar(NativeBackend(VOCAB).compile(Constraint.regex("(ab)+")))
        assert mgr.accept_tokens(mh.make_request("sound", sound), [B]) is False  # refused: mask not applied
        sh.prefetcher().drain()
    assert not any(k.startswith("prefetch_") for k in sh.stats), sh.stats
    assert len([r for r in caplog.records if r.exc_info]) == 1  # the failure's one traceback
    assert mgr.accept_tokens(mh.make_request("sound-2", sound), [AB]) is True
    sh.prefetcher().drain()
    assert sh.stats.get("prefetch_native_submitted") == 1, sh.stats


def test_a_refusal_logged_at_info_leaves_vllms_line(caplog):
    """A grammar that failed in a mask fill (its warning then) and refuses the next sampled token
    (the mask was not applied): structgate's line for the refusal is INFO ("warned already"), which
    vLLM's default logging does not show (it configures only the ``vllm`` logger; structgate's
    records reach Python's last-resort handler, WARNING and above). vLLM's ERROR line for it used to
    be dropped all the same: nothing visible. Now it is written; a WARNING or ERROR of ours still
    drops it."""
    mgr, reqs, _ = setup_batch()
    with caplog.at_level(logging.INFO, logger="structgate"):
        mgr.grammar_bitmask({"bad": reqs["bad"]}, ["bad"], {})  # the grammar fails in this fill
    assert [r.levelno for r in caplog.records if r.name.startswith("structgate")] == [logging.WARNING]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="structgate"):
        assert mgr.accept_tokens(reqs["bad"], [A]) is False
    lines = [r for r in caplog.records if r.name.startswith("structgate") and r.levelno >= logging.INFO]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO, [r.getMessage() for r in lines]
    assert "request bad" in lines[0].getMessage() and f"token {A}:" in lines[0].getMessage()
    assert _vllm_refusal_line_passes("bad")


def test_a_refusal_held_back_by_structgates_level_leaves_vllms_line(monkeypatch):
    """The ``structgate`` logger's level set above a refusal's WARNING (a user quieting structgate):
    that line is not written, so vLLM's ERROR line for the refusal is not dropped either (it was:
    no line at all; a break-it finding)."""
    lg = logging.getLogger("structgate")
    monkeypatch.setattr(lg, "level", logging.ERROR)
    mgr, req = _request_at_the_limit(max_num_seqs=1)
    assert mgr.accept_tokens(req, [A]) is False  # the grammar fails in this advance: a WARNING, held back
    assert _vllm_refusal_line_passes("bad-1")


def test_a_token_a_sound_grammar_refuses_logs_one_error(caplog):
    """A token refused by a grammar that has not failed (a mask not applied): one ERROR line naming
    the request and the token."""
    mh = harness()
    be = NativeBackend(VOCAB)
    g = bridge_grammar(be.compile(Constraint.regex("(ab)+")))
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=1)
    req = mh.make_request("sound", g)
    with caplog.at_level(logging.DEBUG, logger="structgate"):
        assert mgr.accept_tokens(req, [B]) is False
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR, [r.getMessage() for r in lines]
    assert "request sound" in lines[0].getMessage() and f"token {B}:" in lines[0].getMessage()
    assert not _vllm_refusal_line_passes("sound")


@pytest.mark.parametrize("case", ["sound", "failed"])
def test_a_refused_draft_token_logs_one_line(case, caplog):
    """A draft token the grammar refuses in the speculative bitmask fill used to log two lines (the
    bridge's, as if a sampled token had failed the request, and the hook's). Now one: the request,
    the draft token, why; a WARNING when the grammar failed in that very advance (its traceback at
    DEBUG only), else an ERROR. A refused draft fails nothing, so vLLM's line for a later sampled
    token is not dropped for it, and that token still gets structgate's own line."""
    mh = harness()
    if case == "sound":
        be = NativeBackend(VOCAB)
        g = bridge_grammar(be.compile(Constraint.regex("(ab)+")))
        token, rid = B, "spec-sound"
    else:
        be = NativeBackend(VOCAB, max_dfa_states=20)
        g = bridge_grammar(be.compile(Constraint.regex(BAD)))
        assert g.accept_tokens("spec-failed", TO_BAD_ADVANCE)
        token, rid = A, "spec-failed"
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=1, num_speculative_tokens=2)
    req = mh.make_request(rid, g)
    with caplog.at_level(logging.DEBUG, logger="structgate"):
        mgr.grammar_bitmask({rid: req}, [rid], {rid: [token, token]})
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    msg = lines[0].getMessage()
    assert f"request {rid}" in msg and f"draft token {token}:" in msg and not lines[0].exc_info, msg
    if case == "sound":
        assert lines[0].levelno == logging.ERROR
    else:
        assert lines[0].levelno == logging.WARNING and "CompileLimitError(max_dfa_states)" in msg, msg
        debug = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
        assert len(debug) == 1 and isinstance(debug[0].exc_info[1], CompileLimitError)
    assert _vllm_refusal_line_passes(rid)  # a refused draft is not the request's refusal
    # a sampled token refused next: structgate's one line, vLLM's dropped
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="structgate"):
        assert mgr.accept_tokens(req, [token]) is False
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and f"request {rid}" in lines[0].getMessage(), [r.getMessage() for r in lines]
    assert f"token {token}:" in lines[0].getMessage() and "draft" not in lines[0].getMessage()
    if case == "sound":
        assert lines[0].levelno == logging.ERROR
        assert not _vllm_refusal_line_passes(rid)
    else:  # the failure was warned at the draft: INFO (not shown by vLLM's logging), vLLM's line stays
        assert lines[0].levelno == logging.INFO
        assert _vllm_refusal_line_passes(rid)


def test_a_draft_refused_in_vllms_own_fill_loop_is_a_draft(monkeypatch, caplog):
    """With the scheduler hook off, vLLM's own fill loop advances the bridge's grammar through the
    drafts without saying so. A refused draft there was logged as a sampled refusal ("the request
    fails"), and it marked the request's refusal as logged and dropped vLLM's next line for it: a
    sampled token refused later logged no line at all. The fill runs inside ``bridge.mask_fill``
    (ledger entry metrics-mask-fill), so the refusal is a draft's: structgate's one line says so
    (vLLM writes its own "rejected draft token" line beside it), and a later sampled refusal still
    gets structgate's line."""
    from structgate.plugin import bridge

    mh = harness()
    monkeypatch.setenv(sh.ENV_DISABLE, "0")
    be = NativeBackend(VOCAB)
    g = bridge_grammar(be.compile(Constraint.regex("(ab)+")))
    rid = "loop-spec"
    mgr = mh.make_manager(mh.HarnessBackend(be), max_num_seqs=1, num_speculative_tokens=2)
    req = mh.make_request(rid, g)
    assert not bridge.in_mask_fill()
    with caplog.at_level(logging.INFO, logger="structgate"):
        mgr.grammar_bitmask({rid: req}, [rid], {rid: [B, B]})
    assert not sh.stats  # vLLM's loop ran
    assert not bridge.in_mask_fill()
    lines = [r for r in caplog.records if r.name.startswith("structgate") and r.levelno >= logging.INFO]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert f"request {rid}" in lines[0].getMessage() and f"draft token {B}:" in lines[0].getMessage()
    assert _vllm_refusal_line_passes(rid)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="structgate"):
        assert mgr.accept_tokens(req, [B]) is False
    lines = [r for r in caplog.records if r.name.startswith("structgate") and r.levelno >= logging.INFO]
    assert len(lines) == 1 and f"token {B}:" in lines[0].getMessage(), [r.getMessage() for r in lines]
    assert "draft" not in lines[0].getMessage()
    assert not _vllm_refusal_line_passes(rid)


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


# ------------------------------------------------------------------ the reason in the finished output
def test_failure_reasons_are_bounded_and_forgotten():
    """The rid -> stop_reason record (grammar_failure.reasons): popped when the finished output goes
    out, pruned for requests freed or aborted without one (their grammar is gone), bounded."""
    import gc

    from structgate.plugin.grammar_failure import FailureReasons

    class G:  # a grammar object (weak-referenceable)
        pass

    r = FailureReasons(max_len=3)
    g1, g2 = G(), G()
    r.note("r1", "t1", g1)
    r.note("r2", "t2", g2)
    r.note("r3", "t3")  # grammar unknown: pruned by request id
    assert len(r) == 3 and r.get("r1") == "t1" and "r2" in r
    assert r.pop("r1") == "t1" and r.pop("r1") is None and "r1" not in r  # the finished output took it
    # freed / aborted without an output: the grammar goes with the request
    del g2
    gc.collect()
    assert r.prune(live={"r3"}) == 1 and r.ids() == ["r3"]
    assert r.prune(live=set()) == 1 and len(r) == 0  # unknown grammar, request no longer scheduled
    # a request another engine of the process still runs (grammar alive, not in this scheduler) stays
    g3 = G()
    r.note("other-engine", "t", g3)
    assert r.prune(live=set()) == 0 and r.ids() == ["other-engine"]
    # bounded, whatever never meets a scheduler: the oldest go first
    keep = [G() for _ in range(10)]
    for i, g in enumerate(keep):
        r.note(f"x{i}", f"t{i}", g)
    assert r.ids() == ["x7", "x8", "x9"] and r.dropped == 8
    r.note("x8", "again", keep[8])  # a re-note refreshes the entry's age
    assert r.ids() == ["x7", "x9", "x8"] and r.get("x8") == "again"
    with pytest.raises(ValueError):
        FailureReasons(max_len=0)


def test_fail_grammar_records_the_request_reason(monkeypatch):
    """fail_grammar records the request's stop_reason text when its caller knows the request; a
    failure where it does not (vLLM's own fill loop, a validate, a rollback) is attributed by the
    bridge's next accept_tokens, which vLLM always calls with the request id."""
    from structgate.plugin import grammar_failure as gf

    monkeypatch.setattr(gf, "reasons", gf.FailureReasons())
    def fresh():  # its own automaton (the limit counts what every request of a compiled grammar reached)
        return bridge_grammar(NativeBackend(VOCAB, max_dfa_states=20).compile(Constraint.regex(BAD)))

    known, unknown, fine = fresh(), fresh(), fresh()
    assert known.accept_tokens("known", TO_BAD_ADVANCE)
    assert known.accept_tokens("known", [A]) is False  # the limit, met in the advance: refused
    want = "structgate decode error: CompileLimitError(max_dfa_states): "
    assert gf.reasons.get("known").startswith(want) and "max_dfa_states reached" in gf.reasons.get("known")
    assert known.matcher.request_id == "known"
    # the mask fill through the bridge's own fill_bitmask (vLLM's loop, hook off): no request id yet
    assert unknown.accept_tokens("unknown", [AB])  # a state whose row is not computed yet
    unknown.matcher.token_index.step_timeout_s = 1e-9  # no first visit can finish now
    unknown.fill_bitmask(np.zeros((1, WIDTH), dtype=np.int32), 0)
    assert isinstance(unknown.matcher, gf.FailedMatcher) and "unknown" not in gf.reasons
    assert unknown.accept_tokens("unknown", [EOS])  # the EOS it allows; now attributed
    assert gf.reasons.get("unknown").startswith("structgate decode error: CompileLimitError(step_timeout_s): ")
    assert fine.accept_tokens("fine", [B]) and "fine" not in gf.reasons
    assert sorted(gf.reasons.ids()) == ["known", "unknown"]
    # later calls change nothing: one entry per request
    gf.fail_grammar(known, CompileLimitError("step_timeout_s", 3.0, 2.0), "known")
    assert "max_dfa_states" in gf.reasons.get("known") and len(gf.reasons) == 2


def test_decode_reasons_in_the_scheduler_outputs(monkeypatch):
    """What the scheduler wrapper (ledger entry engine-compile-error-reason) does to one step's
    outputs, on vLLM's own EngineCoreOutput: a failed request's finished output names the failure
    (over None or the EOS id vLLM reports for an extra EOS), a FINISHED_ERROR carrying the refused
    token becomes STOP (not for a streaming-input session, nor an error without tokens: vLLM's own);
    the others are untouched; nothing stays behind."""
    import types

    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

    from structgate.plugin import grammar_failure as gf
    from structgate.plugin.patches import apply_decode_reasons

    monkeypatch.setattr(gf, "reasons", gf.FailureReasons())

    class G:
        pass

    grammars = {rid: G() for rid in ("eos", "eos-id", "refused", "session", "kv", "later", "aborted")}
    for rid in grammars:
        gf.reasons.note(rid, f"structgate decode error: X({rid})", grammars[rid])

    def out(rid, tokens, finish, stop=None):
        return EngineCoreOutput(request_id=rid, new_token_ids=tokens, finish_reason=finish, stop_reason=stop)

    outs = {0: EngineCoreOutputs(outputs=[
        out("eos", [5], FinishReason.STOP), out("eos-id", [7], FinishReason.STOP, 7),
        out("refused", [3], FinishReason.ERROR), out("session", [3], FinishReason.ERROR),
        out("kv", [], FinishReason.ERROR), out("later", [1], None),
        out("normal", [5], FinishReason.STOP), out("stop-id", [7], FinishReason.STOP, 7),
        out("error", [3], FinishReason.ERROR)])}
    running = [types.SimpleNamespace(request_id="session", streaming_queue=[]),
               types.SimpleNamespace(request_id="refused", streaming_queue=None)]
    del grammars["aborted"]  # freed without an output
    apply_decode_reasons(outs, running, {"later": object()}, FinishReason)
    got = {o.request_id: (o.finish_reason, o.stop_reason) for o in outs[0].outputs}
    text = "structgate decode error: X({})".format
    assert got == {
        "eos": (FinishReason.STOP, text("eos")), "eos-id": (FinishReason.STOP, text("eos-id")),
        "refused": (FinishReason.STOP, text("refused")), "session": (FinishReason.ERROR, text("session")),
        "kv": (FinishReason.ERROR, None), "later": (None, None),
        "normal": (FinishReason.STOP, None), "stop-id": (FinishReason.STOP, 7), "error": (FinishReason.ERROR, None)}
    assert gf.reasons.ids() == ["later"]  # still running; the aborted one was pruned
    later = [out("later", [5], FinishReason.LENGTH)]
    apply_decode_reasons({0: EngineCoreOutputs(outputs=later)}, [], {}, FinishReason)
    assert later[0].stop_reason == text("later") and len(gf.reasons) == 0
    apply_decode_reasons({0: EngineCoreOutputs(outputs=[out("x", [5], FinishReason.STOP)])}, [], {}, FinishReason)


def test_an_abort_drops_the_decode_reason_at_once(monkeypatch):
    """A failed request aborted (client gone, stop string, shutdown: ``Scheduler.finish_requests``)
    has no finished output from the scheduler; its reason used to stay in the record until the next
    step that had requests (none, on an idle server). The ledger entry engine-compile-error-reason
    wraps finish_requests too: the aborted requests' reasons go at once, the others stay."""
    import types

    import structgate.plugin as plugin
    from structgate.plugin import grammar_failure as gf
    from structgate.plugin import ledger

    plugin.register()
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import RequestStatus

    assert "engine-compile-error-reason" in ledger.applied()
    monkeypatch.setattr(gf, "reasons", gf.FailureReasons())

    class G:
        pass

    keep = {rid: G() for rid in ("a", "b", "c", "d", "elsewhere")}  # grammars alive: prune would keep them
    for rid, g in keep.items():
        gf.reasons.note(rid, f"structgate decode error: X({rid})", g)
    done = types.SimpleNamespace(is_finished=lambda: True)  # (vLLM skips finished requests)
    sched = types.SimpleNamespace(requests={"a": done, "b": done, "c": done, "d": done})
    Scheduler.finish_requests(sched, "a", RequestStatus.FINISHED_ABORTED)
    assert gf.reasons.ids() == ["b", "c", "d", "elsewhere"]
    Scheduler.finish_requests(sched, (r for r in ("b", "zz")), RequestStatus.FINISHED_ABORTED)  # an iterator
    assert gf.reasons.ids() == ["c", "d", "elsewhere"]
    Scheduler.finish_requests(sched, None, RequestStatus.FINISHED_ABORTED)  # all of this scheduler's
    assert gf.reasons.ids() == ["elsewhere"]  # another engine's request stays
    gf.reasons.clear()
    ids = iter(["x"])  # nothing pending: vLLM's method gets the caller's arguments as they are
    Scheduler.finish_requests(sched, ids, RequestStatus.FINISHED_ABORTED)
    assert next(ids, None) is None


OFFLINE = r'''
import json, sys
MASK_RX = "[ab]*a[ab]{8}"  # ambiguous: its configurations are built lazily, at each first visit
ADVANCE_RX = "[a-y]{30}"
if __name__ == "__main__":
    import structgate.plugin
    structgate.plugin.autoload()   # what `import structgate` does
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from structgate.errors import CompileLimitError
    from structgate.plugin import bridge, grammar_failure, ledger

    orig = bridge.StructgateVllmBackend.compile_grammar

    def compile_grammar(self, request_type, grammar_spec, *a, **k):
        g = orig(self, request_type, grammar_spec, *a, **k)
        if grammar_spec == MASK_RX:  # no first visit of a configuration finishes: the first new mask fails
            g.matcher.token_index.step_timeout_s = 1e-9
        elif grammar_spec == ADVANCE_RX:  # the advance by the third sampled token meets a limit
            m, n, inner = g.matcher, [0], g.matcher.advance
            def advance(token_ids):
                n[0] += 1
                if n[0] == 3:
                    raise CompileLimitError("max_dfa_states", 200_001, 200_000)
                return inner(token_ids)
            m.advance = advance
        return g

    bridge.StructgateVllmBackend.compile_grammar = compile_grammar
    llm = LLM(model=sys.argv[1], structured_outputs_config={"backend": "native"}, enforce_eager=True,
              max_model_len=512, max_num_seqs=8, distributed_executor_backend="uni")
    so = lambda rx: StructuredOutputsParams(regex=rx)
    cases = {"mask": SamplingParams(max_tokens=40, seed=1, structured_outputs=so(MASK_RX)),
             "advance": SamplingParams(max_tokens=40, seed=2, structured_outputs=so(ADVANCE_RX)),
             "choice": SamplingParams(max_tokens=40, seed=3, structured_outputs=so("(yes|no)")),
             "stopstr": SamplingParams(max_tokens=40, seed=4, stop=["yx"], structured_outputs=so("(xy){20}")),
             "free": SamplingParams(max_tokens=5, seed=5)}
    outs = llm.generate([f"{k}: " for k in cases], list(cases.values()))
    eos = sorted(set(llm.llm_engine.model_config.hf_config.eos_token_id or []))
    res = {k: {"text": o.outputs[0].text, "token_ids": list(o.outputs[0].token_ids),
               "finish_reason": o.outputs[0].finish_reason, "stop_reason": o.outputs[0].stop_reason}
           for k, o in zip(cases, outs)}
    print("RESULT " + json.dumps({"outputs": res, "pending": len(grammar_failure.reasons), "eos": eos,
                                  "failures": grammar_failure.failures, "applied": sorted(ledger.applied())}))
'''


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_offline_llm_output_names_the_decode_failure(tmp_path):
    """A real offline ``LLM(...)`` run on the embedded tiny model, one batch: a request whose mask
    meets ``step_timeout_s`` (ends by the EOS its failed grammar allows), one whose advance meets
    ``max_dfa_states`` (its grammar refuses the sampled token: FINISHED_ERROR in the engine), and
    requests that end normally (EOS, a stop string, length). The two failed ones finish with
    ``finish_reason="stop"`` and ``stop_reason`` naming the limit; the others keep theirs; nothing is
    left in the record."""
    import json
    import os
    import re
    import subprocess
    import sys

    from structgate.plugin.cli import setup_cpu_env
    from structgate.plugin.model import embedded_model_dir

    script = tmp_path / "offline.py"
    script.write_text(OFFLINE)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # the engine in-process
    setup_cpu_env(env, shim_version=False)
    out = subprocess.run([sys.executable, str(script), str(embedded_model_dir())], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    r = json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT "):])
    assert "engine-compile-error-reason" in r["applied"]
    o = r["outputs"]
    mask, adv = o["mask"], o["advance"]
    assert mask["finish_reason"] == "stop", mask
    assert mask["stop_reason"].startswith("structgate decode error: CompileLimitError(step_timeout_s): "), mask
    assert mask["token_ids"][-1] in r["eos"] and not re.fullmatch(r"[ab]*a[ab]{8}", mask["text"]), mask  # cut short
    assert adv["finish_reason"] == "stop", adv  # FINISHED_ERROR in the engine, then STOP
    assert adv["stop_reason"].startswith("structgate decode error: CompileLimitError(max_dfa_states): "), adv
    # the refused (third) token is in token_ids but not in the text, as an EOS would not be
    assert len(adv["token_ids"]) == 3 and adv["token_ids"][-1] not in r["eos"], adv
    assert adv["text"] and re.fullmatch(r"[a-y]+", adv["text"]) and len(adv["text"]) < 30, adv
    # the other requests of the batch keep their own reasons
    assert o["choice"]["finish_reason"] == "stop" and o["choice"]["text"] in ("yes", "no"), o["choice"]
    assert o["choice"]["stop_reason"] in (None, *r["eos"]), o["choice"]  # vLLM's (an extra EOS id reports its id)
    assert (o["stopstr"]["finish_reason"], o["stopstr"]["stop_reason"]) == ("stop", "yx"), o["stopstr"]
    assert (o["free"]["finish_reason"], o["free"]["stop_reason"]) == ("length", None), o["free"]
    assert r["failures"] == 2 and r["pending"] == 0
