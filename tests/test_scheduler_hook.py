"""The scheduler hook (structgate.plugin.scheduler_hook) driven through a real vLLM
StructuredOutputManager: the batched fill gives exactly the rows of vLLM's own per-request loop
(speculative rows included), the background prefetch never lets a stale mask through (concurrent
requests whose states change every step, slow fills racing the prefetch thread), and the switches."""
from __future__ import annotations

import os
import random
import threading
import time

import numpy as np
import pytest

pytest.importorskip("vllm")

from structgate.backends.interface import Backend, Matcher  # noqa: E402
from structgate.bitmask import bitmask_to_bool  # noqa: E402
from structgate.errors import MatcherStateError  # noqa: E402
from structgate.plugin import scheduler_hook as sh  # noqa: E402
from structgate.vocab import Vocabulary  # noqa: E402

# ---------------------------------------------------------------------------------- a toy language
# Strings of exactly LENGTH letters where letter k must be in SETS[k]; a DFA with states
# 1 (start) .. LENGTH+1 (accepting, final), so masks differ at every position.
LETTERS = b"abcd"
LENGTH = 10
SETS = [b"abcd", b"ab", b"cd", b"a", b"bcd", b"abc", b"d", b"abcd", b"b", b"cd"]
TOKENS = [b"a", b"b", b"c", b"d", b"ab", b"cd", b"abc", b"bc", b"dd", b"x", b""]  # last = EOS
EOS = len(TOKENS) - 1
VOCAB = Vocabulary(TOKENS, eos_token_ids=[EOS], vocab_size=45)  # 34 padding ids, 2 words per row


def toy_dfa():
    from structgate.native.automaton import DFA

    classes = np.full(256, 4, dtype=np.uint8)
    for i, ch in enumerate(LETTERS):
        classes[ch] = i
    n_states = LENGTH + 2
    table = np.zeros((n_states, 5), dtype=np.int32)
    for s in range(1, LENGTH + 1):
        for ch in SETS[s - 1]:
            table[s, LETTERS.index(ch)] = s + 1
    accepting = np.zeros(n_states, dtype=bool)
    accepting[LENGTH + 1] = True
    return DFA(classes, table, accepting, "toy")


def walk(state: int, data: bytes) -> int:
    for ch in data:
        if state == 0 or state > LENGTH or ch not in SETS[state - 1]:
            return 0
        state += 1
    return state


class ToyAdapterMatcher(Matcher):
    """An adapter-style matcher (no token_index): masks computed on each fill, optionally slowly,
    and it detects concurrent use (the hook must never fill it while it advances)."""

    def __init__(self, fill_delay_s: float = 0.0):
        self.vocab = VOCAB
        self._hist = [1]
        self._term = False
        self.fill_delay_s = fill_delay_s
        self._busy = threading.Lock()
        self.fills = 0

    @property
    def _state(self):
        return self._hist[-1]

    def _guard(self):
        if not self._busy.acquire(blocking=False):
            raise AssertionError("matcher used from two threads at once")

    def _fill_row(self, row):
        self._guard()
        try:
            if self.fill_delay_s:
                time.sleep(self.fill_delay_s)
            self.fills += 1
            allowed = np.zeros(32 * row.shape[0], dtype=bool)
            if self._term:
                allowed[EOS] = True
            else:
                for t, data in enumerate(TOKENS):
                    if data and walk(self._state, data):
                        allowed[t] = True
                allowed[EOS] = self._state == LENGTH + 1
            from structgate.bitmask import bool_to_bitmask

            row[:] = bool_to_bitmask(allowed)
            return True
        finally:
            self._busy.release()

    def advance(self, token_ids):
        self._guard()
        try:
            ids = self._as_list(token_ids)
            st, term, pushed = self._state, self._term, []
            for t in ids:
                if term:
                    if t != EOS:
                        return False
                    continue
                if t == EOS:
                    if st != LENGTH + 1:
                        return False
                    term = True
                    continue
                if t >= len(TOKENS) or not TOKENS[t]:
                    return False
                st = walk(st, TOKENS[t])
                if not st:
                    return False
                pushed.append(st)
            self._hist += pushed
            self._term = term
            return True
        finally:
            self._busy.release()

    def rollback(self, num_tokens):
        if num_tokens > len(self._hist) - 1 + int(self._term):
            raise MatcherStateError("too far")
        if self._term and num_tokens:
            self._term = False
            num_tokens -= 1
        if num_tokens:
            del self._hist[-num_tokens:]

    def is_accepting(self):
        return self._term or self._state == LENGTH + 1

    def is_terminated(self):
        return self._term

    def reset(self):
        self._hist, self._term = [1], False


class ToyBatchBackend(Backend):
    """Stands in for an adapter backend with a batched fill (records its calls)."""

    name = "toy"
    supported_kinds = frozenset({"regex"})

    def __init__(self):
        super().__init__(VOCAB)
        self.batch_calls: list[int] = []

    def _compile(self, constraint):  # pragma: no cover
        raise NotImplementedError

    def fill_bitmask_batch(self, pairs, bitmask):
        self.batch_calls.append(len(pairs))
        for m, r in pairs:
            m.fill_bitmask(bitmask, r)


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(autouse=True)
def _hook(monkeypatch):
    monkeypatch.delenv(sh.ENV_DISABLE, raising=False)
    monkeypatch.delenv(sh.ENV_PREFETCH, raising=False)
    sh.install()
    sh.stats.clear()
    yield
    sh.prefetcher().drain()


@pytest.fixture(scope="module")
def token_index():
    ti_mod = pytest.importorskip("structgate.native.token_index")
    return ti_mod.TokenIndex(toy_dfa(), VOCAB)


def native_matcher(ti):
    from structgate.native.matcher import NativeMatcher

    return NativeMatcher(ti)


def harness():
    from structgate_bench import maskstep

    return maskstep


def orig_grammar_bitmask():
    from vllm.v1.structured_output import StructuredOutputManager

    f = StructuredOutputManager.grammar_bitmask
    return getattr(f, "__structgate_original__", f)


def reference_row(matcher) -> np.ndarray:
    row = np.empty((1, (VOCAB.vocab_size + 31) // 32), dtype=np.int32)
    matcher.fill_bitmask(row, 0)
    return row[0]


def random_prefix(rng, n):
    """Token ids of a valid prefix of n letters (single-letter tokens)."""
    out = []
    for k in range(n):
        out.append(LETTERS.index(rng.choice(list(SETS[k]))))
    return out


def build_batch(kinds, rng, spec_k=0, backend=None):
    mh = harness()
    MG, HB = mh.MatcherGrammar, mh.HarnessBackend
    be = HB(backend or ToyBatchBackend())
    mgr = mh.make_manager(be, max_num_seqs=max(1, len(kinds)), num_speculative_tokens=spec_k)
    reqs, ids = {}, []
    for k, make in enumerate(kinds):
        g = MG(make())
        n = rng.randrange(0, LENGTH + 1)
        assert g.accept_tokens("x", random_prefix(rng, n))
        rid = f"r{k}"
        reqs[rid] = mh.make_request(rid, g)
        ids.append(rid)
    return mgr, reqs, ids


# ---------------------------------------------------------------------------------------- tests
def test_hook_installed_and_in_ledger():
    from vllm.v1.structured_output import StructuredOutputManager

    from structgate.plugin import ledger

    assert ledger.is_marked(StructuredOutputManager.grammar_bitmask)
    assert ledger.is_marked(StructuredOutputManager.accept_tokens)
    names = {p.name for p in ledger.patches()}
    assert "scheduler-batched-bitmask" in names
    sh.install()  # idempotent
    assert StructuredOutputManager.grammar_bitmask.__structgate_original__ is orig_grammar_bitmask()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_rows_equal_vllm_loop_mixed_batch(token_index, seed):
    rng = random.Random(seed)
    kinds = [lambda: native_matcher(token_index), ToyAdapterMatcher] * 10
    mgr, reqs, ids = build_batch(kinds, rng)
    got = mgr.grammar_bitmask(reqs, ids, {}).copy()
    want = orig_grammar_bitmask()(mgr, reqs, ids, {}).copy()
    assert got.shape == (20, 2)
    np.testing.assert_array_equal(got, want)
    # every row is the matcher's own mask
    for k, rid in enumerate(ids):
        np.testing.assert_array_equal(got[k], reference_row(reqs[rid].structured_output_request.grammar.matcher))
    assert sh.stats.get("fill_native_rows") == 10
    assert mgr.backend.sg_backend.batch_calls == [10]


def test_speculative_rows_equal_vllm_loop_and_state_restored(token_index):
    rng = random.Random(5)
    kinds = [lambda: native_matcher(token_index), ToyAdapterMatcher] * 4
    mgr, reqs, ids = build_batch(kinds, rng, spec_k=3)
    spec = {}
    for k, rid in enumerate(ids):
        m = reqs[rid].structured_output_request.grammar.matcher
        st = m.state if hasattr(m, "state") else m._state
        good = [LETTERS.index(SETS[p - 1][0]) for p in range(st, min(st + 3, LENGTH + 1))]
        if k % 4 == 1:
            drafts = good[:1] + [9, 0]  # 'x' is never allowed: a rejected draft mid-way
        elif k % 4 == 2:
            drafts = good[:2] + [-1]  # speculative padding
        else:
            drafts = (good + [EOS, EOS])[:3]
        spec[rid] = drafts
    before = [reqs[r].structured_output_request.grammar.matcher.history if hasattr(
        reqs[r].structured_output_request.grammar.matcher, "history") else list(
        reqs[r].structured_output_request.grammar.matcher._hist) for r in ids]
    got = mgr.grammar_bitmask(reqs, ids, spec).copy()
    after = [reqs[r].structured_output_request.grammar.matcher.history if hasattr(
        reqs[r].structured_output_request.grammar.matcher, "history") else list(
        reqs[r].structured_output_request.grammar.matcher._hist) for r in ids]
    assert [tuple(b) for b in before] == [tuple(a) for a in after]
    want = orig_grammar_bitmask()(mgr, reqs, ids, spec).copy()
    assert got.shape == (8 * 4, 2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spec_k", [0, 3])
def test_uneven_drafts_and_reasoning_rows_equal_vllm_loop(token_index, spec_k):
    """Drafts of 0 to 3 tokens in one step and requests still reasoning (constraint_start past some or
    all of their rows): vLLM 0.32 packs each request's rows, 0.33 gives each a block of
    1 + num_speculative_tokens rows and keeps the implicit reasoning ends masked in rows it leaves
    unconstrained; the batched fill gives vLLM's loop's rows in either release."""
    from vllm.v1.structured_output import ConstraintBounds

    rng = random.Random(11 + spec_k)
    kinds = [lambda: native_matcher(token_index), ToyAdapterMatcher] * 4
    mgr, reqs, ids = build_batch(kinds, rng, spec_k=spec_k)
    spec, bounds = {}, {}
    for k, rid in enumerate(ids):
        m = reqs[rid].structured_output_request.grammar.matcher
        st = m.state if hasattr(m, "state") else m._state
        good = [LETTERS.index(SETS[p - 1][0]) for p in range(st, min(st + 3, LENGTH + 1))]
        spec[rid] = (good + [EOS, EOS])[:k % 4] if spec_k else []
        start = (0, 1, 2, 5)[(k // 2) % 4]  # 5: every row of the request is still reasoning
        bounds[rid] = ConstraintBounds(start, start)
    mgr._get_constraint_bounds = lambda request, tokens: bounds[request.request_id]
    mgr._masked_reasoning_ends = lambda request: (1, 3, int(request.request_id[1:]) + 8)
    got = mgr.grammar_bitmask(reqs, ids, spec).copy()
    sentinel = np.int32(0x5A5A5A5A)
    np.asarray(mgr._grammar_bitmask)[:] = sentinel  # the rows vLLM's loop writes are the ones that change
    want = orig_grammar_bitmask()(mgr, reqs, ids, spec).copy()
    from structgate.plugin.patches import filled_rows

    assert filled_rows(mgr, ids, spec) == int((want != sentinel).any(axis=1).sum())  # the metrics' row count
    written = (want != sentinel).any(axis=1)
    want[~written] = got[~written]  # rows neither loop writes (fixed layout: past a request's drafts)
    fixed = hasattr(type(mgr), "_masked_reasoning_ends")  # vLLM 0.33
    assert got.shape[0] == (8 * (1 + spec_k) if fixed else sum(1 + len(v) for v in spec.values()))
    np.testing.assert_array_equal(got, want)
    assert not (got == -1).all()
    if fixed:  # unconstrained rows lack the masked ids (1 and 3)
        assert ((got[:, 0] & 0b1010) == 0).any()
    else:
        assert (got == -1).all(axis=1).any()


def test_terminated_and_unconstrained_rows_are_full(token_index):
    mh = harness()
    m = native_matcher(token_index)
    assert m.advance([LETTERS.index(SETS[k][0]) for k in range(LENGTH)] + [EOS])
    assert m.is_terminated()
    g = mh.MatcherGrammar(m)
    mgr = mh.make_manager(mh.HarnessBackend(ToyBatchBackend()), 2)
    reqs = {"t": mh.make_request("t", g), "n": mh.make_request("n", mh.MatcherGrammar(native_matcher(token_index)))}
    got = mgr.grammar_bitmask(reqs, ["t", "n"], {})
    assert (got[0] == -1).all()
    assert bitmask_to_bool(got[1], VOCAB.vocab_size).nonzero()[0].tolist() == [0, 1, 2, 3, 4, 6]


@pytest.mark.parametrize("delay", [0.0, 0.002])
def test_no_stale_mask_with_concurrent_requests(token_index, delay):
    """Each step every request accepts a random legal token (sometimes two accept calls before the
    next mask, sometimes none); prefetches race the engine thread; every row must equal the mask of
    the matcher's state at the time of the call."""
    rng = random.Random(11)
    mh = harness()
    kinds = [lambda: ToyAdapterMatcher(fill_delay_s=delay), lambda: native_matcher(token_index)] * 6
    mgr, reqs, ids = build_batch(kinds, rng)
    for step in range(40):
        for rid in ids:
            g = reqs[rid].structured_output_request.grammar
            for _ in range(rng.choice([0, 1, 1, 2])):
                allowed = bitmask_to_bool(reference_row_locked(g), VOCAB.vocab_size).nonzero()[0]
                if len(allowed) == 0:
                    break
                tok = int(rng.choice(list(allowed)))
                if tok == EOS or g.matcher.is_terminated():  # restart the request
                    reqs[rid] = mh.make_request(rid, mh.MatcherGrammar(kinds[ids.index(rid)]()))
                    break
                assert mgr.accept_tokens(reqs[rid], [tok])
        if step % 3 == 0:
            time.sleep(delay * 2)  # let some prefetches finish, leave others in flight
        got = mgr.grammar_bitmask(reqs, ids, {}).copy()
        for k, rid in enumerate(ids):
            g = reqs[rid].structured_output_request.grammar
            np.testing.assert_array_equal(got[k], reference_row_locked(g), err_msg=f"step {step} row {k}")
    sh.prefetcher().drain()
    assert sh.stats.get("prefetch_adapter_submitted", 0) > 0
    if delay == 0.0:
        assert sh.stats.get("fill_adapter_prefetched", 0) > 0


def reference_row_locked(grammar):
    with sh._slot(grammar).lock:
        return reference_row(grammar.matcher)


def test_native_prefetch_computes_new_state_rows_in_background():
    from structgate.native.token_index import TokenIndex

    ti = TokenIndex(toy_dfa(), VOCAB)  # fresh: nothing cached
    mh = harness()
    mgr = mh.make_manager(mh.HarnessBackend(ToyBatchBackend()), 1)
    g = mh.MatcherGrammar(native_matcher(ti))
    req = mh.make_request("a", g)
    mgr.grammar_bitmask({"a": req}, ["a"], {})
    assert mgr.accept_tokens(req, [LETTERS.index(b"a")])
    sh.prefetcher().drain()
    assert sh._row_cached(ti, g.matcher.state)
    assert sh.stats.get("prefetch_native_done") == 1


def test_disable_env_runs_vllm_loop(token_index, monkeypatch):
    rng = random.Random(3)
    mgr, reqs, ids = build_batch([lambda: native_matcher(token_index)] * 3, rng)
    monkeypatch.setenv(sh.ENV_DISABLE, "0")
    got = mgr.grammar_bitmask(reqs, ids, {}).copy()
    assert not sh.stats
    monkeypatch.setenv(sh.ENV_DISABLE, "1")
    np.testing.assert_array_equal(mgr.grammar_bitmask(reqs, ids, {}), got)
    assert sh.stats.get("fill_native_rows") == 3
    monkeypatch.setenv(sh.ENV_PREFETCH, "0")
    sh.stats.clear()
    assert mgr.accept_tokens(reqs[ids[0]], [reqs[ids[0]].structured_output_request.grammar.matcher.allowed_token_ids()[0]]) in (True, False)
    assert "prefetch_native_submitted" not in sh.stats and "prefetch_adapter_submitted" not in sh.stats


def test_non_structgate_backend_untouched(token_index):
    """A manager whose backend has no .sg_backend (vLLM's own) runs the original code."""
    mh = harness()
    be = mh.HarnessBackend(ToyBatchBackend())
    mgr = mh.make_manager(be, 2)
    del be.sg_backend
    be.sg_backend = None
    g = mh.MatcherGrammar(native_matcher(token_index))
    reqs = {"a": mh.make_request("a", g)}
    mgr.grammar_bitmask(reqs, ["a"], {})
    assert not sh.stats


def test_rejected_token_logs_clear_error(token_index, caplog):
    mh = harness()
    mgr = mh.make_manager(mh.HarnessBackend(ToyBatchBackend()), 1)
    req = mh.make_request("bad", mh.MatcherGrammar(native_matcher(token_index)))
    with caplog.at_level("ERROR", logger="structgate.plugin"):
        assert mgr.accept_tokens(req, [9]) is False
    assert "rejected sampled token" in caplog.text and "bad" in caplog.text


# ------------------------------------------------------------- the maskstep harness, real engines
@pytest.mark.parametrize("system", ["native", "vllm-xgrammar"])
def test_maskstep_harness_drives_real_manager(llama3_vocab, system):
    """The benchmark harness end to end at a tiny size: every row allows the instance's next token
    (run_system checks it), through the hook for native and vLLM's own loop for vllm-xgrammar."""
    mh = harness()
    tok = None
    if system == "vllm-xgrammar":
        pytest.importorskip("xgrammar")
        tok = mh._llama3_hf_tokenizer(llama3_vocab)
    s = mh.build_system(system, llama3_vocab, max_num_seqs=6, tokenizer=tok)
    t = mh.run_system(s, llama3_vocab, 6, steps=4)
    assert len(t.fill_warm_ms) == 4 and len(t.fill_cold_ms) == 4
    if system == "native":
        assert sh.stats.get("fill_native_rows", 0) >= 6 * 8
    else:
        assert "fill_native_rows" not in sh.stats
