"""outlines-core's index built in worker processes (``outlines_compile_processes`` /
``$STRUCTGATE_OUTLINES_COMPILE_PROCESSES``, :class:`structgate.adapters.outlines_core.IndexPool`).

``outlines_core.Index(regex, vocabulary)`` is one Rust call that cannot be stopped once started (a
break-it measured 219 s for ``(a|b)*a(a|b){14}`` on Llama 3, and ``compile_timeout_s`` did not cut
it). Oracles: the pool-built index gives the same masks as an in-process
one (walked token by token); a syntax error arrives with the in-process type and message;
``compile_timeout_s`` stops a build that runs for minutes, and the replaced worker then compiles a
regex whose outputs agree with ``re.fullmatch``; a thread of the calling process keeps running
during a long build in the worker (and, as measured, during one in process: outlines-core 0.2.14
releases the GIL in ``Index()``; what the pool adds is the stop at the deadline).
"""
from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.backends.registry import get_backend_spec
from structgate.errors import CompileLimitError, GrammarSyntaxError, InvalidConstraintError, UnsupportedFeatureError

from _pool_checks import race, walk_same_masks

pytestmark = [
    pytest.mark.engines,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not get_backend_spec("structgate-outlines-core").availability()[0],
                       reason="outlines-core not installed"),
]

OC = "structgate-outlines-core"
#: minutes on Llama 3 in one Rust call (2^14 DFA states times 128k tokens)
PATHOLOGICAL = r"(a|b)*a(a|b){14}"


@pytest.fixture(scope="module")
def local(llama3_vocab):
    return get_backend(OC, llama3_vocab, outlines_compile_processes=0)


@pytest.fixture(scope="module")
def pooled(llama3_vocab):
    return get_backend(OC, llama3_vocab, outlines_compile_processes=1)


def _counting_thread():
    """A thread that counts loop iterations and records the longest pause between two of them
    (seconds); stop it with the returned event."""
    stop = threading.Event()
    out = {"n": 0, "max_gap": 0.0}

    def loop():
        last = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            out["max_gap"] = max(out["max_gap"], now - last)
            last = now
            out["n"] += 1
            sum(range(200))  # some bytecode: the thread needs the GIL to progress

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t, stop, out


CONSTRAINTS = [
    Constraint.regex(r"[a-z]{1,8}@[a-z]+\.(com|org)"),
    Constraint.regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?"),
    Constraint.json_schema({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}, "kind": {"enum": ["a", "b", "c"]}},
        "required": ["name", "age"]}),
    Constraint.json_schema({"type": "array", "items": {"type": "boolean"}, "maxItems": 3}),
    Constraint.choice(["yes", "no", "maybe"]),
]


@pytest.mark.parametrize("i", range(len(CONSTRAINTS)))
def test_pool_built_index_gives_the_same_masks(i, local, pooled, llama3_vocab):
    v = llama3_vocab
    c = CONSTRAINTS[i]
    ga, gb = local.compile(c), pooled.compile(c)
    assert ga.regex == gb.regex
    steps = walk_same_masks(ga, gb, v, seed=i, walks=4, steps=30)
    assert steps >= 4  # the walks went somewhere


@pytest.mark.parametrize("pattern,err", [
    ("(ab", GrammarSyntaxError),
    ("a{2,1}", GrammarSyntaxError),
    ("[z-a]", GrammarSyntaxError),
    ("a(?=b)", UnsupportedFeatureError),
    (r"(a)\1", UnsupportedFeatureError),
])
def test_regex_errors_from_the_worker_are_the_in_process_ones(pattern, err, local, pooled):
    with pytest.raises(err) as remote:
        pooled.compile(Constraint.regex(pattern))
    with pytest.raises(err) as here:
        local.compile(Constraint.regex(pattern))
    assert type(remote.value) is type(here.value)
    assert str(remote.value) == str(here.value)
    assert remote.value.__dict__ == here.value.__dict__


@pytest.mark.timeout(60)
def test_timeout_stops_a_pathological_build_and_the_worker_is_replaced(pooled, llama3_vocab):
    from structgate.adapters.outlines_core import IndexPool

    v = llama3_vocab
    pooled.compile(Constraint.regex("warm"))  # the worker is up
    hasty = get_backend(OC, v, outlines_compile_processes=1, compile_timeout_s=1)
    before = IndexPool.get(1, v.fingerprint, hasty._oc_vocab)
    t = time.monotonic()
    with pytest.raises(CompileLimitError) as e:
        hasty.compile(Constraint.regex(PATHOLOGICAL))
    took = time.monotonic() - t
    assert e.value.limit_name == "compile_timeout_s" and e.value.limit == 1
    assert took < 20.0, f"the build was not stopped ({took:.1f} s; in one process it runs for minutes)"
    assert before._dropped and IndexPool.get(1, v.fingerprint, hasty._oc_vocab) is not before
    # the replacement serves the next compile, and its index is right (oracle: re.fullmatch)
    g = hasty.compile(Constraint.regex(r"(ab|c)+d?"))
    for text in ["ab", "abcd", "c", "cc", "abd", "", "a", "d", "abca", "dd"]:
        m = g.matcher()
        got = m.advance(v.encode(text)) and m.is_accepting() if text else m.is_accepting()
        assert got == bool(re.fullmatch(r"(ab|c)+d?", text)), text


@pytest.mark.timeout(120)
def test_a_timeout_does_not_fail_a_concurrent_compile(local, llama3_vocab):
    """Two grammar threads share the one worker: the pathological build's timeout terminates the
    worker while the other compile waits behind it; that compile is run again on the replacement
    and succeeds, with the in-process masks."""
    v = llama3_vocab
    hasty = get_backend(OC, v, outlines_compile_processes=1, compile_timeout_s=1)
    plain = get_backend(OC, v, outlines_compile_processes=1, compile_timeout_s=60)
    plain.compile(Constraint.regex("warm"))
    slow, g = race(lambda: hasty.compile(Constraint.regex(PATHOLOGICAL)), lambda: plain.compile(CONSTRAINTS[2]),
                   join_s=100, innocent_delay_s=0.2)  # the innocent compile queued behind the slow build
    assert isinstance(slow, CompileLimitError) and slow.limit_name == "compile_timeout_s"
    assert not isinstance(g, Exception), f"the concurrent compile failed: {g!r}"
    ref = local.compile(CONSTRAINTS[2])
    a = np.zeros((1, (v.vocab_size + 31) // 32), np.int32)
    b = np.zeros_like(a)
    ma, mb = ref.matcher(), g.matcher()
    for tok in v.encode('{"name": "x", "age": 7}'):
        ma.fill_bitmask(a, 0)
        mb.fill_bitmask(b, 0)
        assert (a == b).all()
        assert ma.advance(tok) and mb.advance(tok)
    assert ma.is_accepting() and mb.is_accepting()


@pytest.mark.timeout(60)
def test_other_threads_run_during_a_build_in_a_worker(pooled, llama3_vocab):
    """The GIL property: during a long index build in the worker (cut at 3 s by compile_timeout_s)
    a counting thread of this process keeps going, with no pause near the build's length."""
    v = llama3_vocab
    pooled.compile(Constraint.regex("warm"))
    be = get_backend(OC, v, outlines_compile_processes=1, compile_timeout_s=3)
    t, stop, out = _counting_thread()
    time.sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(CompileLimitError):
        be.compile(Constraint.regex(PATHOLOGICAL))
    build_s = time.monotonic() - t0
    stop.set()
    t.join(5)
    assert build_s >= 2.5
    assert out["n"] > 1000
    assert out["max_gap"] < 1.0, f"the thread stood still {out['max_gap']:.2f} s of a {build_s:.1f} s build"


@pytest.mark.timeout(60)
def test_in_process_build_releases_the_gil_too(local):
    """The same measure in process: outlines-core 0.2.14's ``Index()`` releases the GIL while it
    builds (measured: 20 ms longest pause during a 5.6 s build), so in process a long build stalls
    no other thread either, it only cannot be stopped (``compile_timeout_s`` is checked after it,
    ``test_in_process_build_over_the_limit_is_refused_after_it``). If a later outlines-core held
    the GIL, this fails, and docs/vllm.md's known issue about it must come back."""
    t, stop, out = _counting_thread()
    time.sleep(0.05)
    t0 = time.monotonic()
    local.compile(Constraint.regex(r"(a|b)*a(a|b){6}"))  # about 1.5 s on Llama 3
    build_s = time.monotonic() - t0
    stop.set()
    t.join(5)
    assert build_s >= 0.3
    assert out["max_gap"] < max(1.0, 0.5 * build_s), (out, build_s)


def test_in_process_build_over_the_limit_is_refused_after_it(llama3_vocab):
    be = get_backend(OC, llama3_vocab, outlines_compile_processes=0, compile_timeout_s=0.01)
    with pytest.raises(CompileLimitError) as e:
        be.compile(CONSTRAINTS[2])  # ~0.5 s on Llama 3
    assert e.value.limit_name == "compile_timeout_s"


def test_bad_compile_processes_is_a_typed_error(llama3_vocab, monkeypatch):
    from structgate.adapters.outlines_core import IndexPool

    for bad in ("two", -1, 33, 10_000, 1.5, True, [1]):
        with pytest.raises(InvalidConstraintError, match="outlines_compile_processes"):
            get_backend(OC, llama3_vocab, outlines_compile_processes=bad)
    monkeypatch.setenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES", "lots")
    with pytest.raises(InvalidConstraintError, match="STRUCTGATE_OUTLINES_COMPILE_PROCESSES"):
        get_backend(OC, llama3_vocab)
    monkeypatch.setenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES", "2")
    assert get_backend(OC, llama3_vocab).compile_processes == 2
    assert get_backend(OC, llama3_vocab, outlines_compile_processes=0).compile_processes == 0  # the option wins
    monkeypatch.delenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES")
    assert get_backend(OC, llama3_vocab).compile_processes == 0  # library default: in process
    assert not any(n > 32 for n, _ in IndexPool._pools)


def test_the_vllm_plugin_defaults_to_one_worker(monkeypatch):
    """Under vLLM outlines-core builds in 1 worker unless the options or its variable say otherwise;
    the default is outlines-core's alone (``engine_defaults``), not among the options every engine
    gets (``backend_options``)."""
    from structgate.plugin.bridge import backend_options, engine_defaults

    monkeypatch.delenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES", raising=False)
    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS", raising=False)
    assert engine_defaults() == {OC: {"outlines_compile_processes": 1}}
    assert "outlines_compile_processes" not in backend_options()
    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"outlines_compile_processes": 0}')
    assert backend_options()["outlines_compile_processes"] == 0 and engine_defaults() == {}
    monkeypatch.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"extra": {"outlines_compile_processes": 0}}')
    assert "outlines_compile_processes" not in backend_options() and engine_defaults() == {}
    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS")
    monkeypatch.setenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES", "0")
    assert "outlines_compile_processes" not in backend_options()  # the variable decides
    assert engine_defaults() == {}


def test_a_native_backend_takes_the_plugin_options(llama3_vocab, monkeypatch):
    from structgate.plugin.bridge import backend_options, check_backend_options

    monkeypatch.delenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES", raising=False)
    monkeypatch.delenv("STRUCTGATE_BACKEND_OPTIONS", raising=False)
    check_backend_options("native")
    check_backend_options(OC)
    g = get_backend("native", llama3_vocab, **backend_options()).compile(Constraint.regex("ab"))
    m = g.matcher()
    assert m.advance(llama3_vocab.encode("ab")) and m.is_accepting()


_ENV = ("STRUCTGATE_BACKEND_OPTIONS", "STRUCTGATE_OUTLINES_COMPILE_PROCESSES", "STRUCTGATE_COMPILE_PROCESSES",
        "STRUCTGATE_COMPILE_TIMEOUT_S")


@pytest.fixture
def clean_env(monkeypatch):
    for k in _ENV:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


#: (backend, environment, what the error names): bad worker-process options and other values the
#: backend's constructor checks without a vocabulary (Backend.check_options)
BAD_AT_STARTUP = [
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_compile_processes": "abc"}'}, "'outlines_compile_processes'"),
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_compile_processes": -1}'}, "'outlines_compile_processes'"),
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_compile_processes": 33}'}, "'outlines_compile_processes'"),
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_compile_processes": 1.5}'}, "'outlines_compile_processes'"),
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"extra": {"outlines_compile_processes": -4}}'},
     "'outlines_compile_processes'"),
    (OC, {"STRUCTGATE_OUTLINES_COMPILE_PROCESSES": "x"}, "$STRUCTGATE_OUTLINES_COMPILE_PROCESSES"),
    (OC, {"STRUCTGATE_OUTLINES_COMPILE_PROCESSES": "-2"}, "$STRUCTGATE_OUTLINES_COMPILE_PROCESSES"),
    (OC, {"STRUCTGATE_OUTLINES_COMPILE_PROCESSES": "1000"}, "$STRUCTGATE_OUTLINES_COMPILE_PROCESSES"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"compile_processes": "abc"}'}, "'compile_processes'"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"compile_processes": -1}'}, "'compile_processes'"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"compile_processes": 10000}'}, "'compile_processes'"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"extra": {"compile_processes": 33}}'}, "'compile_processes'"),
    ("native", {"STRUCTGATE_COMPILE_PROCESSES": "x"}, "$STRUCTGATE_COMPILE_PROCESSES"),
    ("native", {"STRUCTGATE_COMPILE_PROCESSES": "-3"}, "$STRUCTGATE_COMPILE_PROCESSES"),
    ("native", {"STRUCTGATE_COMPILE_PROCESSES": "99"}, "$STRUCTGATE_COMPILE_PROCESSES"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"max_product_states": "lots"}'}, "'max_product_states'"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"compile_cache_size": 2.5}'}, "'compile_cache_size'"),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"row_budget_bytes": -5}'}, "'row_budget_bytes'"),
    # structgate-auto builds each engine of its chain with the options at its first use
    ("structgate-auto", {"STRUCTGATE_COMPILE_PROCESSES": "x"}, "$STRUCTGATE_COMPILE_PROCESSES"),
    ("structgate-auto", {"STRUCTGATE_BACKEND_OPTIONS": '{"auto_chain": "native,structgate-outlines-core", '
                                                       '"outlines_compile_processes": "many"}'},
     "'outlines_compile_processes'"),
]


@pytest.mark.parametrize("name,env,needle", BAD_AT_STARTUP)
def test_startup_check_stops_bad_option_values(llama3_vocab, clean_env, name, env, needle):
    """A value the backend would refuse for every request stops check_backend_options (the server's
    startup) with a ValueError naming the option or variable; the constructor refuses it alike."""
    from structgate.plugin.bridge import backend_options, check_backend_options

    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ValueError) as ei:
        check_backend_options(name)
    assert needle in str(ei.value), str(ei.value)
    if name != "structgate-auto":  # the oracle: what get_backend says about the same options
        with pytest.raises(InvalidConstraintError, match=re.escape(needle)):
            get_backend(name, llama3_vocab, **backend_options())


def test_native_formats_value_is_checked_at_startup(clean_env):
    from structgate.plugin.bridge import check_backend_options

    clean_env.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"formats": "assert"}')
    with pytest.raises(ValueError, match="formats"):
        check_backend_options("native")
    clean_env.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"formats": "lenient"}')
    check_backend_options("native")


@pytest.mark.parametrize("name,env", [
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_compile_processes": 0}'}),
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_compile_processes": "3"}'}),
    (OC, {"STRUCTGATE_BACKEND_OPTIONS": '{"extra": {"outlines_compile_processes": 32}}'}),
    (OC, {"STRUCTGATE_OUTLINES_COMPILE_PROCESSES": "2"}),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"compile_processes": 2, "max_product_states": 5000}'}),
    ("native", {"STRUCTGATE_BACKEND_OPTIONS": '{"extra": {"compile_processes": "0", "row_budget_bytes": -1}}'}),
    ("native", {"STRUCTGATE_COMPILE_PROCESSES": "32"}),
    ("structgate-auto", {"STRUCTGATE_COMPILE_PROCESSES": "1"}),
])
def test_startup_check_passes_good_option_values(clean_env, name, env):
    from structgate.plugin.bridge import check_backend_options

    for k, v in env.items():
        clean_env.setenv(k, v)
    check_backend_options(name)


def test_every_backend_takes_the_default_plugin_options(clean_env):
    """The plugin's outlines_compile_processes=1 is outlines-core's alone: no other engine's check
    sees it. A bad outlines-core variable stops every server all the same, since any server's
    requests may choose outlines-core (``vllm_xargs.structured_output_backend``)."""
    from structgate.plugin.bridge import check_backend_options

    names = ["native", OC, "structgate-auto"] + [n for n in ("structgate-xgrammar", "structgate-llguidance")
                                                 if get_backend_spec(n).availability()[0]]
    for name in names:
        assert "outlines_compile_processes" not in check_backend_options(name)
    clean_env.setenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES", "x")  # outlines-core's variable
    for name in names:
        with pytest.raises(ValueError, match="STRUCTGATE_OUTLINES_COMPILE_PROCESSES"):
            check_backend_options(name)
    clean_env.delenv("STRUCTGATE_OUTLINES_COMPILE_PROCESSES")
    clean_env.setenv("STRUCTGATE_COMPILE_PROCESSES", "x")  # native's
    with pytest.raises(ValueError, match="STRUCTGATE_COMPILE_PROCESSES"):
        check_backend_options("native")


def _strict_backend_cls():
    """A third-party engine that refuses every option it does not know (CompileOptions fields and
    its own ``strict_depth``), in ``check_options`` and in its constructor."""
    from structgate.backends.interface import Backend, CompileOptions

    class StrictBackend(Backend):
        name = "sg-test-strict"
        supported_kinds = frozenset({"regex"})
        extra_options = frozenset({"strict_depth"})

        @classmethod
        def check_options(cls, options):
            known = set(CompileOptions.__dataclass_fields__) | cls.extra_options
            bad = sorted(k for k in options if k not in known)
            if bad:
                raise InvalidConstraintError(f"sg-test-strict does not know option {bad[0]!r}")

        def __init__(self, vocab, **options):
            flat = {k: v for k, v in options.items() if k != "extra"}
            flat.update(options.get("extra") or {})
            type(self).check_options(flat)
            super().__init__(vocab, **options)

        def _compile(self, constraint):
            raise NotImplementedError("built, never compiled here")

    return StrictBackend


@pytest.fixture
def strict_engine(clean_env):
    from structgate.backends import registry

    registry.register_backend(registry.BackendSpec(name="sg-test-strict", factory=_strict_backend_cls(),
                                                   kinds=("regex",), options=("strict_depth",)))
    try:
        yield clean_env
    finally:
        registry._extra[:] = [s for s in registry._extra if not s.name.startswith("sg-test-")]
        registry._specs = None


def test_a_strict_third_party_engine_never_sees_the_plugin_default(strict_engine):
    """A third-party engine whose check_options refuses unknown options (as the interface allows:
    "check only what you read", and it reads nothing of outlines-core's) used to stop a native
    server's startup: the plugin put its outlines_compile_processes=1 among the options every
    installed engine checks. The default is outlines-core's alone now; options the user gives are
    still checked by every engine a request may choose."""
    from structgate.plugin.bridge import check_backend_options

    for name in ("native", OC, "structgate-auto"):
        check_backend_options(name)  # raised "... not valid for 'sg-test-strict' ..." before
    strict_engine.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"outlines_compile_processes": 2}')
    with pytest.raises(ValueError, match="sg-test-strict.*outlines_compile_processes"):
        check_backend_options("native")  # the user's option: the strict engine may run it
    strict_engine.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"strict_depth": 3}')
    check_backend_options("native")


def test_engines_get_only_their_own_plugin_defaults(strict_engine):
    """The engines a vLLM server builds (its own, those a request chooses, a structgate-auto chain's)
    get the plugin default only where it is read: outlines-core builds in 1 worker, the others are
    built without it (the strict engine's constructor would refuse it)."""
    pytest.importorskip("vllm")
    import types

    from _vllm_engine import engine_backend
    from transformers import AutoTokenizer

    from structgate.backends.auto import AutoBackend
    from structgate.tokenizers import bundled_tokenizer_dir

    tok = AutoTokenizer.from_pretrained(str(bundled_tokenizer_dir("llama3")))
    mc = types.SimpleNamespace(is_diffusion=False, get_vocab_size=lambda: 128256,
                               try_get_generation_config=lambda: {"eos_token_id": [128001]},
                               hf_config=types.SimpleNamespace(eos_token_id=[128001]))
    native = engine_backend("native", tok, mc)
    assert "outlines_compile_processes" not in native.sg_backend.options.extra
    native._compile_with("native", Constraint.regex("ab"))  # a request's choice: the server's engine wrapped
    router = native.sg_backend
    assert isinstance(router, AutoBackend)
    assert router.engine(OC).compile_processes == 1  # outlines-core chosen by a request: its default
    assert "outlines_compile_processes" not in router.engine("sg-test-strict").options.extra  # built
    oc = engine_backend(OC, tok, mc)  # an outlines-core server: its engine holds the default ...
    assert oc.sg_backend.compile_processes == 1
    with pytest.raises(NotImplementedError):  # ... which a request's strict engine is not built with
        oc._compile_with("sg-test-strict", Constraint.regex("ab"))  # (InvalidConstraintError before)
    assert "outlines_compile_processes" not in oc.sg_backend.engine("sg-test-strict").options.extra
    strict_engine.setenv("STRUCTGATE_BACKEND_OPTIONS", '{"auto_chain": ["native", "%s", "sg-test-strict"]}' % OC)
    auto = engine_backend("structgate-auto", tok, mc).sg_backend
    assert auto.engine(OC).compile_processes == 1
    assert "outlines_compile_processes" not in auto.engine("sg-test-strict").options.extra
    assert "outlines_compile_processes" not in auto.engine("native").options.extra
    assert auto._full_chain() is auto


def test_extra_wins_over_the_top_level_option_as_in_the_backend(llama3_vocab, clean_env):
    """An option given both at the top level and in ``extra`` takes the ``extra`` value, in the
    startup check as in Backend.__init__ (the rule for every option)."""
    from structgate.plugin.bridge import backend_options, check_backend_options

    clean_env.setenv("STRUCTGATE_BACKEND_OPTIONS",
                     '{"outlines_compile_processes": 40, "extra": {"outlines_compile_processes": 1}}')
    check_backend_options(OC)
    assert get_backend(OC, llama3_vocab, **backend_options()).compile_processes == 1
    clean_env.setenv("STRUCTGATE_BACKEND_OPTIONS",
                     '{"outlines_compile_processes": 1, "extra": {"outlines_compile_processes": 40}}')
    with pytest.raises(ValueError, match="got 40"):
        check_backend_options(OC)
    with pytest.raises(InvalidConstraintError, match="got 40"):
        get_backend(OC, llama3_vocab, **backend_options())


def teardown_module(module):
    from structgate.adapters.outlines_core import IndexPool

    for p in list(IndexPool._pools.values()):
        IndexPool._drop(p)


@pytest.mark.parametrize("env, engine, needle", [
    ({"STRUCTGATE_BACKEND_OPTIONS": '{"outlines_max_recursion_depth": "abc"}'}, OC, "'outlines_max_recursion_depth'"),
    ({"STRUCTGATE_OUTLINES_COMPILE_PROCESSES": "x"}, OC, "$STRUCTGATE_OUTLINES_COMPILE_PROCESSES"),
    ({"STRUCTGATE_BACKEND_OPTIONS": '{"llguidance_lenient": "false"}'}, "structgate-llguidance", "'llguidance_lenient'"),
])
def test_startup_check_covers_engines_a_request_may_choose(clean_env, env, engine, needle):
    """A native server's requests may choose any installed structgate engine
    (``vllm_xargs.structured_output_backend``), which gets the server's options: a value that engine
    would refuse stops the server at startup, naming the engine and the option (it used to pass, and
    every request choosing that engine then failed)."""
    from structgate.plugin.bridge import check_backend_options

    if not get_backend_spec(engine).availability()[0]:
        pytest.skip(f"{engine} not installed")
    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ValueError) as ei:
        check_backend_options("native")
    msg = str(ei.value)
    assert needle in msg and repr(engine) in msg and "vllm_xargs.structured_output_backend" in msg, msg
