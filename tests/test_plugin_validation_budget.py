"""Request validation with a time budget (structgate.plugin.validation): the API server's event loop
is held for at most the budget; a constraint found bad within it still raises; a slow one is
deferred (the engine compiles and checks it) and counted; an existing tracer survives."""
from __future__ import annotations

import sys
import time

import pytest

from structgate import Constraint
from structgate.errors import GrammarSyntaxError
from structgate.plugin import metrics, validation


def _busy(seconds: float) -> None:
    """Pure-Python work made of many small calls (what a schema checker looks like)."""
    def step(i):
        return i + 1

    t_end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < t_end:
        i = step(i)


def test_slow_work_is_cut_at_the_budget():
    t0 = time.monotonic()
    ok = validation.run_with_deadline(lambda: _busy(3.0), 0.05)
    took = time.monotonic() - t0
    assert ok is False
    assert took < 0.5, took  # 3 s of work, cut near 50 ms (generous bound for a loaded machine)
    assert sys.gettrace() is None


def test_fast_work_passes_and_errors_within_budget_raise():
    assert validation.run_with_deadline(lambda: _busy(0.001), 1.0) is True

    def bad():
        raise GrammarSyntaxError("unterminated character set", "[0-9", 0)

    with pytest.raises(GrammarSyntaxError):
        validation.run_with_deadline(bad, 1.0)
    assert sys.gettrace() is None


def test_swallowing_except_exception_does_not_hide_the_deadline():
    def swallowing():
        for _ in range(100):
            try:
                _busy(0.05)
            except Exception:  # noqa: BLE001 - what a careless validator might do
                pass

    t0 = time.monotonic()
    assert validation.run_with_deadline(swallowing, 0.05) is False
    assert time.monotonic() - t0 < 2.0  # cut near the 0.05 s budget, not after the 5-10 s of work (slack for a loaded machine)


def test_existing_tracer_is_chained_and_restored():
    seen = []

    def outer(frame, event, arg):
        seen.append(event)
        return None

    sys.settrace(outer)
    try:
        assert validation.run_with_deadline(lambda: _busy(0.001), 1.0) is True
        assert sys.gettrace() is outer
    finally:
        sys.settrace(None)
    assert "call" in seen


def test_non_positive_budget_is_unbounded():
    t0 = time.monotonic()
    assert validation.run_with_deadline(lambda: _busy(0.2), 0.0) is True
    assert time.monotonic() - t0 >= 0.2


def test_budget_env(monkeypatch):
    monkeypatch.delenv(validation.ENV_BUDGET, raising=False)
    assert validation.budget_s() == validation.DEFAULT_BUDGET_S
    monkeypatch.setenv(validation.ENV_BUDGET, "0.2")
    assert validation.budget_s() == 0.2
    monkeypatch.setenv(validation.ENV_BUDGET, "soon")
    with pytest.raises(ValueError, match="STRUCTGATE_VALIDATE_BUDGET_S"):
        validation.budget_s()


class _SlowBackend:
    def validate(self, constraint):
        _busy(5.0)


def test_validate_bounded_defers_and_counts(monkeypatch):
    monkeypatch.setenv(validation.ENV_BUDGET, "0.05")
    before = {tuple(k): v for k, v in metrics.snapshot()["counters"]}
    t0 = time.monotonic()
    assert validation.validate_bounded(_SlowBackend(), Constraint.regex("a+")) is False
    assert time.monotonic() - t0 < 2.0  # cut near the 0.05 s budget, not after the 5-10 s of work (slack for a loaded machine)
    after = {tuple(k): v for k, v in metrics.snapshot()["counters"]}
    key = ("fallbacks_total", "validation_deferred")
    assert after.get(key, 0) == before.get(key, 0) + 1


def test_validate_bounded_real_backend_keeps_its_errors(llama3_vocab):
    from structgate.native.backend import NativeBackend

    be = NativeBackend(llama3_vocab)
    assert validation.validate_bounded(be, Constraint.regex("[a-z]+@x"), 5.0) is True
    with pytest.raises(GrammarSyntaxError):
        validation.validate_bounded(be, Constraint.regex("[0-9"), 5.0)


def test_a_loop_of_c_calls_without_python_calls_is_cut():
    # what native's unicode-class table builder looks like: one frame, 1.1 M C calls
    def table():
        out = []
        for _ in range(50):
            for cp in range(0x110000):
                if chr(cp).isdecimal():
                    out.append(cp)
        return out

    t0 = time.monotonic()
    assert validation.run_with_deadline(table, 0.05) is False
    assert time.monotonic() - t0 < 2.0  # cut near the 0.05 s budget, not after the 5-10 s of work (slack for a loaded machine)


from structgate.backends.interface import Backend  # noqa: E402


class _CompileOnlyBackend:
    """A backend whose validate is the interface's default (compile and drop), like a third-party
    engine whose compile is one long native call the budget cannot cut."""

    validate = Backend.validate
    supported_kinds = frozenset({"regex"})
    name = "compile-only"

    def __init__(self):
        self.compiled = []

    def compile(self, constraint):
        self.compiled.append(constraint)
        raise AssertionError("a full compile ran on the event loop")


def test_backend_without_cheap_validate_is_not_compiled_on_the_loop():
    """Kind checked, nothing compiled, deferred to the engine and counted; each built-in adapter has a
    check of its own (so it is validated, within the budget)."""
    from structgate.backends.interface import has_cheap_validate
    from structgate.errors import ConstraintKindError

    be = _CompileOnlyBackend()
    assert not has_cheap_validate(be)
    before = {tuple(k): v for k, v in metrics.snapshot()["counters"]}
    assert validation.validate_bounded(be, Constraint.regex("(a|b)*a(a|b){20}"), 5.0) is False
    assert be.compiled == []
    after = {tuple(k): v for k, v in metrics.snapshot()["counters"]}
    key = ("fallbacks_total", "validation_deferred")
    assert after.get(key, 0) == before.get(key, 0) + 1
    with pytest.raises(ConstraintKindError):
        validation.validate_bounded(be, Constraint.json_object(), 5.0)
    from structgate.adapters.llguidance import LLGuidanceBackend
    from structgate.adapters.outlines_core import OutlinesCoreBackend
    from structgate.adapters.xgrammar import XGrammarBackend
    from structgate.backends.auto import AutoBackend
    from structgate.native.backend import NativeBackend

    for cls in (NativeBackend, AutoBackend, LLGuidanceBackend, XGrammarBackend, OutlinesCoreBackend):
        assert has_cheap_validate(cls.__new__(cls)), cls
