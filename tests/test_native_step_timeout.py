"""``CompileOptions.step_timeout_s``: the native engine's lazy work in one matcher step is bounded.

The native engine determinises its pushdown automaton lazily: a mask fill, an advance or a validate
may compute configurations, closures and table rows the first time they are met. For a highly
ambiguous grammar one such step can take minutes (``bench/data/slow_first_mask.gbnf``, a random
GBNF grammar found by a break-it helper: ~52 s for its first mask), and in vLLM that step runs in
the engine core, where every request waits. So each step has a limit (in the thread's CPU time);
past it the call raises ``CompileLimitError("step_timeout_s")`` and changes no matcher state (the
plugin then fails that request alone: tests/test_vllm_mask_errors.py). The work done before the limit is kept, and
must leave the grammar consistent: the masks and transitions computed afterwards, across any number
of interrupted steps, equal those of an index that was never interrupted (the oracle here). The
start's mask, computed with the compile (``warm_start``), stops at the compile's deadline instead.

Interruption points are made deterministic with a clock that moves one unit per reading
(:class:`TickClock`): a limit of ``K`` units interrupts a step at its ``K``-th check. Progress is
kept per unit of work (a closure, a target configuration, a table row, a mask row), and one unit
nests a few checks (a row's, its targets', their closures'), so ``K`` below that (2-3 here) lets no
unit finish and a retried step never completes; with the real clock a unit takes microseconds to
milliseconds against a limit of seconds.
"""
from __future__ import annotations

import math
import pathlib
import random
import threading
import time

import numpy as np
import pytest

from structgate import Constraint, allocate_bitmask
from structgate.backends.interface import CompileOptions, warm_start_row
from structgate.errors import CompileLimitError, InvalidConstraintError
from structgate.native import pushdown
from structgate.native.automaton import START
from structgate.native.backend import NativeBackend

ROOT = pathlib.Path(__file__).parents[1]
#: ~52 s for its first mask without the limit (bench/README.md, Day-24 break-it findings)
SLOW = (ROOT / "bench" / "data" / "slow_first_mask.gbnf").read_text()
#: the slow grammar with one alternative of ``r0`` and ``r1`` kept: ~0.1 s for its first mask
SMALL = (ROOT / "tests" / "data" / "grammars" / "ambiguous_small.gbnf").read_text()
#: a recursive JSON Schema (groups of stacks, re-rooted walks, suffix checks)
TREE = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                         "kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["name"]}


class TickClock:
    """``time`` for :mod:`structgate.native.pushdown`: each clock (a step's CPU time, the
    compile's wall-clock) moves one unit per reading."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        self.t += 1.0
        return self.t

    thread_time = monotonic


def _row(m, width_of) -> np.ndarray:
    row = allocate_bitmask(1, width_of)
    m.fill_bitmask(row, 0)
    return np.asarray(row)[0].copy()


def _retrying(call, counter: list[int], cap: int = 20_000):
    """``call()`` again after each ``step_timeout_s`` error (counted in ``counter[0]``)."""
    for _ in range(cap):
        try:
            return call()
        except CompileLimitError as e:
            assert e.limit_name == "step_timeout_s"
            counter[0] += 1
    raise AssertionError(f"no progress in {cap} interrupted steps")


def _allowed(row: np.ndarray, vocab) -> np.ndarray:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size]
    ids = np.flatnonzero(bits)
    return ids[~np.isin(ids, list(vocab.eos_token_ids))]


# ------------------------------------------------------------------------------------ real clock
def test_slow_first_mask_stops_at_the_limit_and_changes_nothing(llama3_vocab):
    be = NativeBackend(llama3_vocab, step_timeout_s=0.3)
    m = be.compile(Constraint.grammar(SLOW)).matcher()
    for _ in range(2):  # the second try goes on from the first's work, and stops again
        t = time.monotonic()
        with pytest.raises(CompileLimitError) as ei:
            _row(m, llama3_vocab.vocab_size)
        assert time.monotonic() - t < 15  # without the limit: ~52 s
        e = ei.value
        assert (e.limit_name, e.limit) == ("step_timeout_s", 0.3) and e.given >= 0.3
        assert "step_timeout_s" in str(e)
        assert m.state == START and m.num_tokens_rollbackable() == 0 and not m.is_terminated()
    # the backend and its other grammars are unaffected
    other = be.compile(Constraint.json_schema({"type": "integer"})).matcher()
    assert other.advance(llama3_vocab.encode("42")) and other.is_accepting()


def test_start_mask_stops_at_the_compile_deadline(llama3_vocab):
    be = NativeBackend(llama3_vocab, compile_timeout_s=0.5, step_timeout_s=0)
    cg = be.compile(Constraint.grammar(SLOW))  # the compile itself is quick (~40 ms)
    t = time.monotonic()
    with pytest.raises(CompileLimitError) as ei:
        warm_start_row(cg)  # what the vLLM plugin runs in its compile thread
    assert time.monotonic() - t < 15
    assert ei.value.limit_name == "compile_timeout_s" and ei.value.given >= 0.5


def test_the_limit_applies_to_every_lazy_entry_point(llama3_vocab):
    """A limit no step can meet (1 ns): mask fills, batched fills, advance and validate of tokens
    that need new rows all raise and change nothing; lifted, they give the reference's answers."""
    ref = NativeBackend(llama3_vocab, step_timeout_s=0).compile(Constraint.grammar(SMALL))
    rm = ref.matcher()
    want = _row(rm, llama3_vocab.vocab_size)
    # a token of several bytes the start allows: its advance needs the rows after its first byte
    multi = [int(t) for t in _allowed(want, llama3_vocab) if len(llama3_vocab.token_bytes[int(t)]) > 2]
    assert multi
    tok = multi[0]
    cg = NativeBackend(llama3_vocab, step_timeout_s=1e-9).compile(Constraint.grammar(SMALL))
    ti = cg.token_index
    m = cg.matcher()
    for call in (lambda: m.advance(tok), lambda: m.validate([tok]), lambda: _row(m, llama3_vocab.vocab_size),
                 lambda: m.forced_tokens(2), lambda: ti.slots(np.array([START])),
                 lambda: ti.fill_rows(np.array([START]), np.empty((1, ti.width), np.int32))):
        with pytest.raises(CompileLimitError) as ei:
            call()
        assert ei.value.limit_name == "step_timeout_s"
        assert m.state == START and m.num_tokens_rollbackable() == 0
    ti.step_timeout_s = 0.0
    np.testing.assert_array_equal(_row(m, llama3_vocab.vocab_size), want)
    assert m.validate([tok]) == 1 and m.advance(tok) and rm.advance(tok)
    np.testing.assert_array_equal(_row(m, llama3_vocab.vocab_size), _row(rm, llama3_vocab.vocab_size))


# -------------------------------------------------------------------- interrupted at every point
@pytest.mark.parametrize("which, units", [("small", 20), ("small", 200), ("tree", 4), ("tree", 12)])
def test_interrupted_steps_keep_the_grammar_exact(llama3_vocab, monkeypatch, which, units):
    """Walk 25 tokens (seeded choices among the allowed ones) with a limit that interrupts steps
    at many points; every step retried until it completes. Each mask, advance and validate equals
    the uninterrupted index's."""
    c = Constraint.grammar(SMALL) if which == "small" else Constraint.json_schema(TREE)
    monkeypatch.setattr(pushdown, "time", TickClock())
    monkeypatch.setattr(pushdown.PushdownIndex, "_TICK_STRIDE", 1)  # every check reads the clock
    ref = NativeBackend(llama3_vocab, step_timeout_s=0).compile(c).matcher()
    m = NativeBackend(llama3_vocab, step_timeout_s=units).compile(c).matcher()
    rng = random.Random(units)
    interrupted = [0]
    V = llama3_vocab.vocab_size
    for _ in range(25):
        want = _row(ref, V)
        got = _retrying(lambda: _row(m, V), interrupted)
        np.testing.assert_array_equal(got, want)
        ids = _allowed(want, llama3_vocab)
        if not ids.size:
            break
        tok = int(ids[rng.randrange(ids.size)])
        bad = int(rng.randrange(V))  # a token that may or may not be allowed: both answer alike
        assert _retrying(lambda: m.validate([tok, bad]), interrupted) == ref.validate([tok, bad])
        assert ref.advance(tok)
        assert _retrying(lambda: m.advance(tok), interrupted)
        assert m.is_accepting() == ref.is_accepting()  # (the rows: at the next step)
    assert interrupted[0] > 0  # the limit was met (else this test shows nothing)


def test_waiting_for_the_lock_is_not_charged(llama3_vocab):
    """Another thread holding the grammar's lock (computing a row, the plugin's prefetch) for
    longer than the limit: a step that then has little work of its own completes (a break-it
    finding: ``step_bytes`` charged the wait)."""
    be = NativeBackend(llama3_vocab, step_timeout_s=0.3)
    cg = be.compile(Constraint.json_schema(TREE))
    ti = cg.token_index
    ref = NativeBackend(llama3_vocab, step_timeout_s=0).compile(Constraint.json_schema(TREE)).matcher()
    toks = llama3_vocab.encode('{"name": "ab", "kids": [{"name": "c"}]}')
    calls = (lambda m: m.advance(toks), lambda m: _row(m, llama3_vocab.vocab_size).tolist(),
             lambda m: m.forced_tokens(3))
    m = cg.matcher()
    for call in calls:
        held, go = threading.Event(), threading.Event()

        def hold():
            with ti._lock:
                held.set()
                go.wait(5)
                time.sleep(0.6)  # twice the limit, after the step below is waiting

        th = threading.Thread(target=hold)
        th.start()
        held.wait(5)
        go.set()
        try:
            got = call(m)  # waits ~0.6 s for the lock, then does its own (small) work
        finally:
            th.join()
        assert got == call(ref)


def test_grouped_sweep_gives_the_same_rows(llama3_vocab, monkeypatch):
    """Configurations of many items sweep over groups of items with the same class intervals
    (``PushdownIndex._sweep``: a 200,000-word alternation's first row took 1-2 s with one
    bit per item). Oracle: the per-item sweep (the group threshold raised past every row), masks
    along seeded walks of grammars whose rows have hundreds of items."""
    rnd = random.Random(7)
    words = sorted({"".join(rnd.choice("abcdefghij") for _ in range(rnd.randint(2, 9))) for _ in range(400)})
    cases = [Constraint.grammar('root ::= "x" (' + " | ".join(f'"{w}"' for w in words) + ") \"!\""),
             Constraint.json_schema({"enum": words}),
             Constraint.json_schema({"type": "object", "properties": {w: {"type": "integer"} for w in words[:60]},
                                     "additionalProperties": False})]
    V = llama3_vocab.vocab_size

    def per_item(call):  # ``call()`` with the per-item sweep everywhere
        with monkeypatch.context() as mp:
            mp.setattr(pushdown.PushdownIndex, "_GROUP_PAIRS", 10**9)
            return call()

    for c in cases:
        a = NativeBackend(llama3_vocab).compile(c).matcher()
        b = per_item(lambda: NativeBackend(llama3_vocab).compile(c).matcher())
        for _ in range(12):
            ra = _row(a, V)
            np.testing.assert_array_equal(ra, per_item(lambda: _row(b, V)))
            ids = _allowed(ra, llama3_vocab)
            if not ids.size:
                break
            tok = int(ids[rnd.randrange(ids.size)])
            assert a.advance(tok) and per_item(lambda: b.advance(tok))


# --------------------------------------------------------------------------------------- options
@pytest.mark.parametrize("bad", ["2s", "nan", "infinite", None, True, math.nan, [1]])
def test_option_is_validated(bad):
    with pytest.raises(InvalidConstraintError, match="step_timeout_s"):
        CompileOptions(step_timeout_s=bad)


@pytest.mark.parametrize("ok", [0, -1, math.inf, np.float64(0.5), np.int64(3)])
def test_option_values_accepted(ok):
    assert CompileOptions(step_timeout_s=ok).step_timeout_s == ok


@pytest.mark.parametrize("v", ["inf", "-Infinity", 10**400, "1e400"])
def test_option_no_limit_values(v):
    """``inf`` text is read as ``$STRUCTGATE_COMPILE_TIMEOUT_S`` reads it (no limit), and a number past
    a float's range is ``inf`` whatever its type (``"1e400"`` was ``inf`` while ``10**400`` was
    refused)."""
    assert abs(CompileOptions(step_timeout_s=v).step_timeout_s) == math.inf


def test_option_text_is_a_number():
    """ASCII decimal text is read as the number, as the integer fields read theirs."""
    assert CompileOptions(step_timeout_s=" 2 ").step_timeout_s == 2.0
    assert CompileOptions(compile_timeout_s="0.5").compile_timeout_s == 0.5


def test_option_reaches_the_index(llama3_vocab):
    assert CompileOptions().step_timeout_s == 2.0
    cg = NativeBackend(llama3_vocab, step_timeout_s=0.25).compile(Constraint.grammar(SMALL))
    assert cg.token_index.step_timeout_s == 0.25


def test_each_step_reads_the_clock_at_its_first_unit_of_work(llama3_vocab, monkeypatch):
    """The clock is read at every ``_TICK_STRIDE``-th check, but the count restarts with each step
    and each bounded block: a step whose lazy work is fewer checks than the stride still meets its
    limit. (The count used to carry over: after the compile's warm start read the clock, a regex's
    mask steps ticked 1 and 2 times and read none; ``structgate check --options
    '{"step_timeout_s": 1e-9}'`` then passed. Found when the mask path got cheaper.)"""
    ticks = [0]
    real = pushdown.PushdownIndex._tick

    def counting(self):
        ticks[0] += 1
        return real(self)

    monkeypatch.setattr(pushdown.PushdownIndex, "_tick", counting)
    row = allocate_bitmask(1, llama3_vocab.vocab_size)
    for text in ("ab@cd", "xy@z"):
        g = NativeBackend(llama3_vocab, step_timeout_s=1e-9).compile(Constraint.regex("[a-z]+@[a-z]+"))
        m = g.matcher()
        m.token_index._tick_n = m.token_index._TICK_STRIDE  # (as a clock reading just before left it)
        for tk in llama3_vocab.encode(text):
            ticks[0] = 0
            try:
                m.fill_bitmask(row, 0)
            except CompileLimitError as e:
                assert e.limit_name == "step_timeout_s"
                break
            # no lazy work (every row cached: nothing to bound), or the limit was met
            assert ticks[0] == 0, f"{ticks[0]} checks of lazy work past a 1 ns limit"
            try:
                assert m.advance(tk)
            except CompileLimitError as e:
                assert e.limit_name == "step_timeout_s"
                break
