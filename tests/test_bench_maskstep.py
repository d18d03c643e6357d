"""The mask-step harness (:mod:`structgate_bench.maskstep`) survives an engine that raises mid-step.

``MatcherGrammar.accept_tokens`` let a matcher's exception through, and ``run_system`` turned a
rejected token into an ``AssertionError``: one engine failure ended the whole (system, batch) run
instead of being recorded for that request, as ``worker._walk`` records a failing item and goes on.
Oracle: the same walk with a healthy matcher (every token accepted, no error), and the failure
recorded once per failing request with the engine's message.

Run: ``.venv/bin/pytest tests/test_bench_maskstep.py`` (CI runs it: tests/ is the suite's path)
"""
from __future__ import annotations

import pytest

pytest.importorskip("vllm.v1.structured_output")

from structgate_bench import maskstep  # noqa: E402

from structgate import get_backend  # noqa: E402
from structgate.backends.interface import Constraint  # noqa: E402
from structgate.testing import tiny_vocabulary  # noqa: E402


class _Breaking:
    """A matcher proxy whose ``advance`` raises ``RuntimeError`` from its ``fail_at``-th call on."""

    def __init__(self, inner, fail_at: int) -> None:
        self.inner, self.fail_at, self.calls = inner, fail_at, 0

    def advance(self, tokens):
        self.calls += 1
        if self.calls >= self.fail_at:
            raise RuntimeError("engine broke mid-step")
        return self.inner.advance(tokens)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocabulary()


@pytest.fixture(scope="module")
def compiled(vocab):
    sg = get_backend("native", vocab)
    return sg, [sg.compile(Constraint.json_schema(s)) for s, _ in maskstep.SCHEMAS]


def test_matcher_grammar_records_an_engine_failure(vocab, compiled):
    _, cgs = compiled
    g = maskstep.MatcherGrammar(_Breaking(cgs[0].matcher(), fail_at=2))
    toks = vocab.encode('{"')
    assert g.accept_tokens("r0", toks[:1])
    assert g.error is None and not g.is_terminated()
    assert g.accept_tokens("r0", toks[1:2]) is False  # raised inside: recorded, not propagated
    assert g.error == "RuntimeError: engine broke mid-step"
    assert g.is_terminated()
    assert g.validate_tokens(toks) == [] and g.accept_tokens("r0", toks) is False
    g.fill_bitmask(None, 0)  # nothing raised, nothing written


def _system(vocab, compiled, breaking: set[int]):
    """A harness system whose grammars of the schemas in ``breaking`` fail on their 4th advance."""
    sg, cgs = compiled
    mgr = maskstep.make_manager(maskstep.HarnessBackend(sg), 16)

    def new_grammar(i):
        m = cgs[i].matcher()
        return maskstep.MatcherGrammar(_Breaking(m, 4) if i in breaking else m)

    return maskstep._System("native-breaking", mgr, new_grammar)


def test_run_system_records_the_failing_requests_and_goes_on(vocab, compiled):
    healthy = maskstep.run_system(_system(vocab, compiled, set()), vocab, batch=6, steps=12)
    assert healthy.errors == []
    t = maskstep.run_system(_system(vocab, compiled, {0}), vocab, batch=6, steps=12)
    # every step ran in both phases, the failures of schema 0's requests were recorded
    assert len(t.fill_cold_ms) == len(t.fill_warm_ms) == 12
    assert t.errors and all("RuntimeError: engine broke mid-step" in e and "(schema 0," in e for e in t.errors)
    assert {e.split()[0] for e in t.errors} == {"cold", "warm"}
