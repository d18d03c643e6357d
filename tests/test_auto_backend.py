"""structgate-auto: the fallback chain, its options, served_by, batched fills across engines, and the
per-request engine choice (compile_with / wrap). Oracles: each engine compiled directly, jsonschema."""
from __future__ import annotations

import logging

import jsonschema
import numpy as np
import pytest

from structgate import get_backend
from structgate.backends.auto import DEFAULT_CHAIN, AutoBackend, AutoCompiledGrammar
from structgate.backends.interface import Constraint
from structgate.backends.registry import get_backend_spec, list_backends
from structgate.bitmask import allocate_bitmask
from structgate.errors import (BackendNotFoundError, CompileLimitError, ConstraintKindError, GrammarSyntaxError,
                               InvalidConstraintError, UnsupportedFeatureError)

from _matching import accepts as _accepts

pytestmark = pytest.mark.engines

#: a schema the native engine refuses (multipleOf that does not divide 1) and llguidance enforces
HALVES = {"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 10}


def _installed(name):
    return get_backend_spec(name).availability()[0]


needs_all = pytest.mark.skipif(not all(_installed(n) for n in DEFAULT_CHAIN),
                               reason="needs llguidance and xgrammar installed")


@pytest.fixture(scope="module")
def vocab(llama3_vocab):
    return llama3_vocab


@pytest.fixture(scope="module")
def auto(vocab):
    return get_backend("structgate-auto", vocab)


def test_registered_with_alias_and_default_chain(auto):
    assert get_backend_spec("sg-auto").name == "structgate-auto"
    assert "structgate-auto" in [b.name for b in list_backends()]
    assert auto.chain == tuple(n for n in DEFAULT_CHAIN if _installed(n))
    assert auto.chain[0] == "native"


def test_native_serves_what_it_supports(auto, vocab):
    g = auto.compile(Constraint.regex("[0-9]{2,3}"))
    assert isinstance(g, AutoCompiledGrammar) and g.served_by == "native" and g.fallbacks == ()
    assert _accepts(g, vocab, "123") and not _accepts(g, vocab, "1")


@needs_all
def test_fallback_to_llguidance_is_exact(auto, vocab, caplog):
    with pytest.raises(UnsupportedFeatureError):
        get_backend("native", vocab).compile(Constraint.json_schema(HALVES))
    with caplog.at_level(logging.INFO, logger="structgate.auto"):
        g = auto.compile(Constraint.json_schema(HALVES))
    assert g.served_by == "structgate-llguidance"
    assert [n for n, _ in g.fallbacks] == ["native"] and "multipleOf" in g.fallbacks[0][1]
    assert any("served by structgate-llguidance" in r.getMessage() and "native: UnsupportedFeatureError" in
               r.getMessage() for r in caplog.records)
    v = jsonschema.Draft202012Validator(HALVES)
    for text in ["0", "0.5", "1.5", "10", "1.25", "10.5", "-0.5", "3.0", "7"]:
        assert _accepts(g, vocab, text) == v.is_valid(float(text) if "." in text else int(text)), text
    # the same masks as llguidance compiled directly, along a path
    direct = get_backend("structgate-llguidance", vocab).compile(Constraint.json_schema(HALVES))
    ma, md = g.matcher(), direct.matcher()
    for t in vocab.encode("2.5"):
        assert np.array_equal(ma.allowed_token_ids(), md.allowed_token_ids())
        assert ma.advance(t) and md.advance(t)


@needs_all
def test_chain_continues_past_a_second_refusal(auto):
    schema = {"type": "object", "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}}
    g = auto.compile(Constraint.json_schema(schema))
    assert [n for n, _ in g.fallbacks] == ["native", "structgate-llguidance"]
    assert g.served_by == "structgate-xgrammar"


def test_errors_that_are_not_fallbacks_are_raised_at_once(auto):
    with pytest.raises(GrammarSyntaxError) as ei:
        auto.compile(Constraint.regex("a(b"))
    assert ei.value.position == 1 or "position" in str(ei.value)
    with pytest.raises(GrammarSyntaxError):
        auto.validate(Constraint.regex("a(b"))


@needs_all
def test_all_engines_refusing_names_each(auto):
    with pytest.raises(UnsupportedFeatureError) as ei:
        auto.compile(Constraint.regex(r"(a)\1"))
    msg = str(ei.value)
    assert all(n in msg for n in DEFAULT_CHAIN)
    with pytest.raises(UnsupportedFeatureError):
        auto.validate(Constraint.regex(r"(a)\1"))


def test_chain_option_and_kind_fallback(vocab):
    if not _installed("structgate-outlines-core"):
        pytest.skip("outlines-core not installed")
    b = get_backend("structgate-auto", vocab, auto_chain="structgate-outlines-core, native")
    assert b.chain == ("structgate-outlines-core", "native")
    g = b.compile(Constraint.json_object())  # outlines-core has no json_object kind
    assert g.served_by == "native" and "ConstraintKindError" in g.fallbacks[0][1]
    only = get_backend("structgate-auto", vocab, auto_chain=["structgate-outlines-core"])
    with pytest.raises(ConstraintKindError):
        only.compile(Constraint.json_object())


def test_bad_options_are_typed(vocab):
    with pytest.raises(BackendNotFoundError):
        get_backend("structgate-auto", vocab, auto_chain=["native", "nope"])
    with pytest.raises(InvalidConstraintError, match="auto_fallback_on"):
        get_backend("structgate-auto", vocab, auto_fallback_on=["KeyError"])
    with pytest.raises(InvalidConstraintError, match="auto_chain"):
        get_backend("structgate-auto", vocab, auto_chain=[])
    with pytest.raises(InvalidConstraintError, match="itself"):
        get_backend("structgate-auto", vocab, auto_chain=["sg-auto"])


@needs_all
def test_fallback_on_compile_limit_is_configurable(vocab):
    c = Constraint.regex("[a-z]{0,40}x[a-z]{40}")
    strict = get_backend("structgate-auto", vocab, max_dfa_states=50, compile_timeout_s=5)
    with pytest.raises(CompileLimitError):
        strict.compile(c)
    lenient = get_backend("structgate-auto", vocab, max_dfa_states=50, compile_timeout_s=5,
                          auto_fallback_on="UnsupportedFeatureError,ConstraintKindError,CompileLimitError")
    g = lenient.compile(c)
    assert g.served_by == "structgate-llguidance"
    assert _accepts(g, vocab, "abx" + "q" * 40) and not _accepts(g, vocab, "ab" + "q" * 40)


@needs_all
def test_batched_fill_across_engines_equals_row_by_row(auto, vocab):
    grammars = [auto.compile(Constraint.regex("[a-z]+")),                              # native
                auto.compile(Constraint.json_schema(HALVES)),                           # llguidance
                auto.compile_with("structgate-xgrammar", Constraint.regex("[0-9]+")),   # xgrammar
                auto.compile_with("structgate-llguidance", Constraint.choice(["yes", "no"]))]
    assert [g.served_by for g in grammars] == ["native", "structgate-llguidance", "structgate-xgrammar",
                                               "structgate-llguidance"]
    ms = [g.matcher() for g in grammars]
    ms[1].advance(vocab.encode("1"))
    batch = allocate_bitmask(len(ms), vocab.vocab_size)
    auto.fill_bitmask_batch([(m, i) for i, m in enumerate(ms)], batch)
    for i, m in enumerate(ms):
        one = allocate_bitmask(1, vocab.vocab_size)
        m.fill_bitmask(one, 0)
        assert np.array_equal(batch[i], one[0]), grammars[i].served_by


@needs_all
def test_wrap_keeps_the_engine_and_adds_others(vocab):
    native = get_backend("native", vocab)
    w = AutoBackend.wrap(native)
    assert w.chain == ("native",) and w.engine("native") is native and w.vocab is vocab
    g = w.compile(Constraint.regex("[0-9]+"))
    assert g.served_by == "native"
    g2 = w.compile_with("sg-llguidance", Constraint.json_schema(HALVES))
    assert g2.served_by == "structgate-llguidance" and _accepts(g2, vocab, "4.5")
    with pytest.raises(UnsupportedFeatureError):
        w.compile(Constraint.json_schema(HALVES))  # the wrapped chain does not fall back
    with pytest.raises(BackendNotFoundError):
        w.compile_with("nope", Constraint.regex("a"))


def test_requested_backend_reads_extra_args():
    from types import SimpleNamespace

    from structgate.plugin.request_backend import REQUEST_KEY, requested_backend

    assert requested_backend(SimpleNamespace(extra_args=None)) is None
    assert requested_backend(SimpleNamespace(extra_args={"other": 1})) is None
    assert requested_backend(SimpleNamespace(extra_args={REQUEST_KEY: "native"})) == "native"
    if _installed("structgate-llguidance"):
        assert requested_backend(SimpleNamespace(extra_args={REQUEST_KEY: "sg-llguidance"})) == "structgate-llguidance"
    for bad in ("nope", "xgrammar", 5):  # unknown, vLLM's own name, not a string
        with pytest.raises(ValueError, match=REQUEST_KEY):
            requested_backend(SimpleNamespace(extra_args={REQUEST_KEY: bad}))


def test_refusal_of_a_one_engine_wrap_says_no_chain(vocab):
    """A plain server's engine wrapped for per-request choice (AutoBackend.wrap) is no chain the user
    configured: its refusal names the engine, not "the chain" (it read "no engine of the chain
    (native) can enforce" on a --structured-output-backend native server). A configured chain, even
    of one engine, keeps the chain wording."""
    schema = {"type": "number", "multipleOf": 0.001}
    native = get_backend("native", vocab)
    with pytest.raises(UnsupportedFeatureError, match="multipleOf") as own:  # the oracle: native refuses it
        native.compile(Constraint.json_schema(schema))
    with pytest.raises(UnsupportedFeatureError) as ei:
        AutoBackend.wrap(native).compile(Constraint.json_schema({**schema, "minimum": 0}))
    msg = str(ei.value)
    assert "chain" not in msg and msg.startswith("unsupported: json_schema constraint the native engine cannot "
                                                 "enforce (native: UnsupportedFeatureError")
    assert str(own.value).split(" (")[0] in msg
    with pytest.raises(UnsupportedFeatureError, match=r"no engine of the chain \(native\) can enforce"):
        get_backend("structgate-auto", vocab, auto_chain="native").compile(Constraint.json_schema(schema))
