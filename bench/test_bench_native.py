"""Native engine benchmarks (pytest-benchmark), Llama 3 vocabulary (128,256 tokens).

Run: ``.venv/bin/pytest bench/test_bench_native.py --benchmark-columns=min,median,mean,max,rounds``

* compile: constraint → regex → DFA → TokenIndex (+ the start row), compile cache off;
* first visit: the mask of one state in a *fresh* TokenIndex each round (the class trie is built in
  the round's setup, not timed), for the start state and the worst states of each grammar, plus a
  sweep over every state (mean / max in ``extra_info``);
* cached fill: copying a computed row into a caller's bitmask row (the per-step cost);
* batch fill: ``TokenIndex.fill_rows`` for 64 requests in one gather.

Every benchmark checks the mask against a per-token byte walk first (correctness before timing).
Targets (the project's design notes, 2 CPU cores): first visit <= 2 ms, cached fill <= 10 us.
Data: ``bench/data/structured_schema_1.json`` from vLLM's benchmarks (Apache-2.0, see bench/data/).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np
import pytest

from structgate.backends.interface import Constraint
from structgate.bitmask import allocate_bitmask, bitmask_to_bool
from structgate.native.backend import NativeBackend
from structgate.native.token_index import TokenIndex

DATA = pathlib.Path(__file__).parent / "data"
SCHEMA_1 = json.loads((DATA / "structured_schema_1.json").read_text())

CONSTRAINTS = {
    "schema1": Constraint.json_schema(SCHEMA_1),
    "email": Constraint.regex(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,6}"),
    "date": Constraint.regex(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"),
    "ipv4": Constraint.regex(r"((25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(25[0-5]|2[0-4]\d|1?\d?\d)"),
    "json_string": Constraint.json_schema({"type": "string"}),
    "json_object": Constraint.json_object(),
}


@pytest.fixture(scope="module")
def vocab():
    from structgate import load_vocabulary

    return load_vocabulary("llama3")


@pytest.fixture(scope="module")
def backend(vocab):
    return NativeBackend(vocab)


def _oracle_check(index: TokenIndex, state: int, vocab, n_sample: int = 4000, seed: int = 0) -> None:
    """Allowed iff the token's bytes, walked from ``state``, never reach 0 (sampled tokens)."""
    got = bitmask_to_bool(index.row(state), vocab.vocab_size)
    rng = np.random.default_rng(seed)
    dfa = index.dfa
    for t in rng.integers(0, vocab.n_tokens, n_sample):
        b = vocab.token_bytes[t]
        want = bool(b) and dfa.step(state, b) != 0
        if t in vocab.eos_token_ids:
            want = bool(dfa.accepting[state])
        assert got[t] == want, (state, vocab.describe(int(t)))


def _string_state(grammar, vocab, prefix: str) -> int:
    m = grammar.matcher()
    assert m.advance(vocab.encode(prefix)), prefix
    return m.state


@pytest.mark.parametrize("name", list(CONSTRAINTS))
def test_compile(benchmark, vocab, name):
    """Full compile, cache off (ms)."""
    b = NativeBackend(vocab, compile_cache_size=0)
    g = benchmark.pedantic(b.compile, args=(CONSTRAINTS[name],), rounds=3, warmup_rounds=1)
    _oracle_check(g.token_index, 1, vocab)
    benchmark.extra_info.update(states=g.dfa.n_states, classes=g.dfa.n_classes,
                                class_nodes=g.token_index.n_class_nodes,
                                memory_kib=g.memory_size_bytes // 1024)


FIRST_VISIT = [("schema1", None), ("schema1", '[{"name":"'), ("json_object", '{"k":"'),
               ("json_object", None), ("email", None), ("json_string", '"')]


@pytest.mark.parametrize("name,prefix", FIRST_VISIT, ids=[f"{n}-{'start' if p is None else 'in-string'}"
                                                          for n, p in FIRST_VISIT])
def test_first_visit(benchmark, vocab, backend, name, prefix):
    """One state's mask in a fresh TokenIndex per round (ms)."""
    g = backend.compile(CONSTRAINTS[name])
    state = 1 if prefix is None else _string_state(g, vocab, prefix)
    _oracle_check(g.token_index, state, vocab)

    def setup():
        return (TokenIndex(g.dfa, vocab),), {}

    benchmark.pedantic(lambda idx: idx.row(state), setup=setup, rounds=15, warmup_rounds=1)
    benchmark.extra_info.update(state=state, allowed=g.token_index.n_allowed(state))


@pytest.mark.parametrize("name", ["schema1", "json_object"])
def test_first_visit_sweep(benchmark, vocab, backend, name):
    """Every state of the grammar visited once in a fresh index (mean and max per state, ms)."""
    g = backend.compile(CONSTRAINTS[name])
    n = g.dfa.n_states
    per_state = np.zeros(n - 1)

    def sweep(idx):
        for s in range(1, n):
            t0 = time.perf_counter()
            idx.row(s)
            per_state[s - 1] = time.perf_counter() - t0

    benchmark.pedantic(sweep, setup=lambda: ((TokenIndex(g.dfa, vocab),), {}), rounds=1)
    benchmark.extra_info.update(states=n - 1, mean_ms=round(per_state.mean() * 1e3, 3),
                                p99_ms=round(float(np.percentile(per_state, 99)) * 1e3, 3),
                                max_ms=round(per_state.max() * 1e3, 3))


def test_cached_fill(benchmark, vocab, backend):
    """Per-step cost once the state's row is cached: copy into the caller's bitmask (us)."""
    g = backend.compile(CONSTRAINTS["schema1"])
    m = g.matcher()
    m.advance(vocab.encode('[{"name":"'))
    bm = allocate_bitmask(8, vocab.vocab_size)
    m.fill_bitmask(bm, 3)
    _oracle_check(g.token_index, m.state, vocab)
    benchmark(m.fill_bitmask, bm, 3)
    assert (bm[3] == g.token_index.row(m.state)).all()


def test_fill_rows_batch64(benchmark, vocab, backend):
    """``TokenIndex.fill_rows`` for 64 rows of cached states in one gather (us)."""
    g = backend.compile(CONSTRAINTS["schema1"])
    states = []
    m = g.matcher()
    for t in vocab.encode('[{"name":"Aria","race":"elf","class":"bard","level":3}]'):
        states.append(m.state)
        m.advance(t)
    states = np.resize(np.array(states), 64)
    out = allocate_bitmask(64, vocab.vocab_size)
    g.token_index.fill_rows(states, out)
    benchmark(g.token_index.fill_rows, states, out)
    for r in (0, 17, 63):
        assert (out[r] == g.token_index.row(int(states[r]))).all()
