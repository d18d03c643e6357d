"""Cached mask rows under a bounded ``row_budget_bytes`` while several threads use one compiled
grammar: a row another thread computes may evict (overwrite) the slot a reader just looked up.
Oracle: the masks of the same walks in an unbounded grammar, single threaded. Also the batched
fill with more distinct states than the budget holds rows (it must fill them all, as per-matcher
fills do)."""
from __future__ import annotations

import random
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.plugin.scheduler_hook import BatchFill

C = Constraint.regex(r"[a-c]{0,40}x[0-9]{2,30}")


def _ids(row):
    return set(np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")).tolist())


@pytest.fixture(scope="module")
def paths(llama3_vocab):
    v = llama3_vocab
    W = (v.vocab_size + 31) // 32
    ref = get_backend("native", v, compile_cache_size=0).compile(C)
    out = []
    for s in range(12):
        rnd = random.Random(s)
        m = ref.matcher()
        toks, rows = [], []
        for _ in range(24):
            r = np.zeros((1, W), dtype=np.int32)
            m.fill_bitmask(r, 0)
            rows.append(r[0].copy())
            allowed = sorted(_ids(r[0]) - set(v.eos_token_ids))
            if not allowed:
                break
            t = rnd.choice(allowed)
            m.advance(t)
            toks.append(t)
        out.append((toks, rows))
    return out


@pytest.fixture
def fast_switches():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the threads often (the race needs no more than two)
    yield
    sys.setswitchinterval(old)


@pytest.mark.parametrize("path", ["fill_bitmask", "batch_fill"])
def test_rows_stay_exact_when_threads_evict_each_others_rows(path, paths, llama3_vocab, fast_switches):
    """16 rows of budget, 4 threads walking 12 paths: before, ``fill_row`` copied a slot without
    the lock and the scheduler hook gathered ``rows[slots(states)]`` after ``slots`` released it,
    so a row computed meanwhile by another thread (the hook's prefetcher) could overwrite the slot:
    1,112 forbidden tokens allowed on the first attempt."""
    v = llama3_vocab
    W = (v.vocab_size + 31) // 32
    small = get_backend("native", v, compile_cache_size=0, row_budget_bytes=W * 4)
    wrong = []
    for attempt in range(4):
        g = small.compile(C)

        def work(i):
            try:
                walk(i)
            except BaseException as e:  # an exception in a thread fails the test too
                import traceback
                wrong.append((attempt, i, traceback.format_exc()))

        def walk(i):
            bm = np.zeros((2, W), dtype=np.int32)
            for toks, rows in paths[i::4]:
                m = g.matcher()
                for k, want in enumerate(rows):
                    if path == "fill_bitmask":
                        m.fill_bitmask(bm, 1)
                    else:
                        bf = BatchFill(bm)
                        bf.add(SimpleNamespace(matcher=m), 1, True)
                        bf.run()
                    if not np.array_equal(bm[1], want):
                        wrong.append((attempt, i, k))
                        return
                    if k < len(toks):
                        m.advance(toks[k])

        th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert not wrong, f"a thread read another state's row: {wrong[:3]}"


def test_a_batch_larger_than_the_row_budget_is_filled(llama3_vocab):
    """70 requests in 70 states of one grammar whose budget holds 64 rows: the batched fill (the
    hook's path) fills every row as the per-matcher fills do; before, it raised
    ``CompileLimitError("row_budget_bytes")`` (every cached row pinned by the batch)."""
    v = llama3_vocab
    W = (v.vocab_size + 31) // 32
    g = get_backend("native", v, compile_cache_size=0, row_budget_bytes=64 * W * 4).compile(
        Constraint.regex(r"[a-z]{0,200}"))
    (a,) = v.encode("a")
    ms = []
    for k in range(70):
        m = g.matcher()
        m.advance([a] * k)
        ms.append(m)
    one = np.zeros((70, W), dtype=np.int32)
    for i, m in enumerate(ms):
        m.fill_bitmask(one, i)
    batched = np.zeros((70, W), dtype=np.int32)
    bf = BatchFill(batched)
    for i, m in enumerate(ms):
        bf.add(SimpleNamespace(matcher=m), i, True)
    bf.run()
    assert np.array_equal(one, batched)
    assert len({m.row_source()[1] for m in ms}) == 70  # 70 states: more rows than the budget


@pytest.mark.parametrize("budget", [0, 1, "one row - 1", "one row"])
def test_a_budget_under_one_row_keeps_the_floor_not_everything(budget, llama3_vocab):
    """``row_budget_bytes`` 0 (or anything under one row) kept every row (the eviction test read
    ``budget // row_bytes > 0``) while one row's worth kept 16: now each keeps the 16-row floor,
    and the masks stay exact (a break-it helper's find)."""
    v = llama3_vocab
    W = (v.vocab_size + 31) // 32
    b = {"one row - 1": W * 4 - 1, "one row": W * 4}.get(budget, budget)
    g = get_backend("native", v, compile_cache_size=0, row_budget_bytes=b).compile(
        Constraint.regex(r"[a-z]{0,200}!"))
    ref = get_backend("native", v, compile_cache_size=0).compile(Constraint.regex(r"[a-z]{0,200}!"))
    (a,) = v.encode("a")
    m, r = g.matcher(), ref.matcher()
    x, y = np.zeros((1, W), np.int32), np.zeros((1, W), np.int32)
    for _ in range(60):
        m.fill_bitmask(x, 0)
        r.fill_bitmask(y, 0)
        assert np.array_equal(x, y)
        assert m.advance(a) and r.advance(a)
    assert g.token_index.n_cached <= 16 < ref.token_index.n_cached


@pytest.mark.parametrize("budget", [-2, -5, -16032])
def test_a_negative_budget_other_than_minus_one_is_refused(budget, llama3_vocab):
    """Only -1 means unlimited; other negative budgets were taken silently as unlimited."""
    from structgate.errors import InvalidConstraintError

    with pytest.raises(InvalidConstraintError, match="row_budget_bytes"):
        get_backend("native", llama3_vocab, row_budget_bytes=budget)
    get_backend("native", llama3_vocab, row_budget_bytes=-1)  # unlimited, as documented
