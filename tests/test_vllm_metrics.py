"""structgate's Prometheus series: recording, the per-process snapshot files, the collector that
sums them (oracle: prometheus_client's own text parser), and the registry patch. No server here
(tests/test_vllm_errors.py scrapes a real /metrics)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

prom = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(fams, family, suffix="", **labels):
    for s in fams[family].samples:
        if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_two_processes_are_summed(tmp_path):
    """Two engine processes write snapshots; the collector sums counters and histograms exactly."""
    code = textwrap.dedent("""
        import sys
        from structgate.plugin import metrics
        k = int(sys.argv[1])
        for i in range(k):
            metrics.record_compile("native", "regex", 0.003 * (i + 1))
        metrics.record_compile_failure("native", "json_schema", "limit")
        metrics.record_fill("native", 0.0004, rows=3)
        metrics.record_fallback("adapter-per-row")
        metrics.record_cache("native", True); metrics.record_cache("native", False)
        metrics.register_cache("native", lambda: {"entries": k, "bytes": 1000 * k})
        metrics.register_engine_caches("native", lambda: {"walks": {"entries": k, "bytes": 10 * k, "hits": k,
                                                                    "misses": 1},
                                                          "nodes": {"entries": 7}})
        metrics.register_engine_caches("broken", lambda: 1 / 0)  # skipped, never breaks the others
        metrics.set_info(version="0.1.0", backends="native", patches="a,b")
        print(metrics.flush())
    """)
    env = {**os.environ, "STRUCTGATE_METRICS_DIR": str(tmp_path)}
    for k in (2, 3):
        out = subprocess.run([sys.executable, "-c", code, str(k)], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().startswith(str(tmp_path))
    (tmp_path / "999999.json").write_text('{"pid": 999999, "hist": [')  # a torn file is skipped
    # render in a fresh process, as the API server does: this test process may hold metrics of its
    # own from earlier tests, which read_all() adds to the files' (the test was order-dependent)
    rendered = subprocess.run([sys.executable, "-c", "import sys; from structgate.plugin import metrics; "
                               "sys.stdout.write(metrics.render_text(sys.argv[1]))", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    fams = _families(rendered.stdout)
    assert _sample(fams, "structgate_compile_seconds", "_count", backend="native", kind="regex") == 5
    want_sum = sum(0.003 * (i + 1) for i in range(2)) + sum(0.003 * (i + 1) for i in range(3))
    assert abs(_sample(fams, "structgate_compile_seconds", "_sum", backend="native", kind="regex") - want_sum) < 1e-9
    # cumulative buckets: values 0.003, 0.006, 0.003, 0.006, 0.009 -> le=0.005: 2, le=0.01: 5
    assert _sample(fams, "structgate_compile_seconds", "_bucket", backend="native", kind="regex", le="0.005") == 2
    assert _sample(fams, "structgate_compile_seconds", "_bucket", backend="native", kind="regex", le="0.01") == 5
    assert _sample(fams, "structgate_compile_seconds", "_bucket", backend="native", kind="regex", le="+Inf") == 5
    assert _sample(fams, "structgate_compile_failures", "_total", stage="compile",
                   backend="native", kind="json_schema",
                   error="limit") == 2
    assert _sample(fams, "structgate_mask_fill_seconds", "_count", backend="native") == 2
    assert _sample(fams, "structgate_mask_fill_rows", "_total", backend="native") == 6
    assert _sample(fams, "structgate_fallbacks", "_total", reason="adapter-per-row") == 2
    assert _sample(fams, "structgate_cache_hit_rate", backend="native") == 0.5
    assert _sample(fams, "structgate_cache_entries", backend="native") == 5
    assert _sample(fams, "structgate_cache_bytes", backend="native") == 5000
    # the engines' process-wide caches: summed over processes; hit rate from the summed counts
    assert _sample(fams, "structgate_engine_cache_entries", backend="native", cache="walks") == 5
    assert _sample(fams, "structgate_engine_cache_bytes", backend="native", cache="walks") == 50
    assert _sample(fams, "structgate_engine_cache_hit_rate", backend="native", cache="walks") == 5 / 7
    assert _sample(fams, "structgate_engine_cache_entries", backend="native", cache="nodes") == 14
    assert _sample(fams, "structgate_engine_cache_bytes", backend="native", cache="nodes") is None
    assert _sample(fams, "structgate_engine_cache_entries", backend="broken", cache="walks") is None
    assert _sample(fams, "structgate_info", version="0.1.0", backends="native", patches="a,b") == 1


def test_ensure_dir_is_inherited_and_removed(tmp_path):
    code = textwrap.dedent("""
        import os, subprocess, sys
        from structgate.plugin import metrics
        d = metrics.ensure_dir()
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['STRUCTGATE_METRICS_DIR'])"],
                               capture_output=True, text=True).stdout.strip()
        print(d, child, os.path.isdir(d))
    """)
    env = {k: v for k, v in os.environ.items() if k != "STRUCTGATE_METRICS_DIR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    d, child, isdir = out.stdout.split()
    assert d == child and isdir == "True"
    assert not os.path.exists(d)  # removed when its creator exited


def test_flush_leaves_no_cyclic_garbage(tmp_path):
    """The metrics writer flushes a snapshot every interval, in a thread of every process: it must
    leave nothing for the cyclic collector (``json.dump`` left 32 objects a flush, which another
    test counted as its own garbage in CI). In a fresh interpreter, after a first flush."""
    code = textwrap.dedent("""
        import gc
        from structgate.plugin import metrics
        metrics.record_fill("native", 0.001, 3)
        assert metrics.flush()
        gc.collect()
        gc.disable()
        assert metrics.flush()
        gc.set_debug(gc.DEBUG_SAVEALL)
        print(gc.collect())
    """)
    env = dict(os.environ, STRUCTGATE_METRICS_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "0"


def test_approx_nbytes_counts_arrays():
    import numpy as np

    from structgate.plugin.metrics import approx_nbytes

    class G:
        def __init__(self):
            self.table = np.zeros((100, 10), dtype=np.int32)
            self.rows = {1: np.zeros(50, dtype=np.int64)}

    assert approx_nbytes(G()) >= 4000 + 400


def test_grammar_size_is_the_grammars_own_and_never_walks_the_vocabulary(llama3_vocab):
    """The cache gauge takes a grammar's own ``memory_size_bytes`` (native: its arrays and rows);
    the generic walk, for grammars that report none, leaves the shared vocabulary out (it used to
    walk 20,000 objects of it on every compile, holding the engine's GIL for ~15 ms) and stays
    bounded."""
    import numpy as np

    from structgate import Constraint, get_backend
    from structgate.plugin.metrics import APPROX_MAX_OBJECTS, approx_nbytes, grammar_nbytes

    g = get_backend("native", llama3_vocab).compile(Constraint.regex("[a-z]{1,8}@x"))
    assert grammar_nbytes(g) == g.memory_size_bytes > 0

    class CountingList(list):  # counts the items a walk takes
        taken = 0

        def __iter__(self):
            for x in super().__iter__():
                CountingList.taken += 1
                yield x

    class Opaque:  # a third-party grammar without a size of its own
        memory_size_bytes = 0

        def __init__(self):
            self.vocab = llama3_vocab
            self.table = np.zeros((100, 10), dtype=np.int32)
            self.many = CountingList(bytes([i % 256]) * 3 for i in range(100_000))

    o = Opaque()
    CountingList.taken = 0
    n = grammar_nbytes(o)
    assert CountingList.taken <= 200  # a bounded sample of the 100,000 items, not a walk of them
    assert 4000 <= n < 1 << 20  # the table, a bounded sample of the list; no 128k-token vocabulary
    assert approx_nbytes(llama3_vocab) == 0
    seen: set = set()
    approx_nbytes([[i] for i in range(10_000)], _seen=seen)
    assert len(seen) <= APPROX_MAX_OBJECTS


def test_registry_patch_adds_the_collector_once():
    pytest.importorskip("vllm")
    import structgate.plugin as p

    p.register()
    import vllm.entrypoints.serve.instrumentator.metrics as im

    from structgate.plugin import ledger

    assert "metrics-registry" in ledger.applied()
    reg1 = im.get_prometheus_registry()
    reg2 = im.get_prometheus_registry()
    assert reg1 is reg2
    text = prom.generate_latest(reg1).decode()
    assert "structgate_compile_seconds" in text and "structgate_cache_hit_rate" in text
    assert text.count("# TYPE structgate_compile_seconds histogram") == 1


def _vllm_engine():
    """``(make, tok)``: ``make()`` builds a native StructgateVllmBackend over the bundled Llama 3
    tokenizer as vLLM's engine would (it reads the STRUCTGATE_* variables set at that moment)."""
    pytest.importorskip("vllm")
    import types

    from transformers import AutoTokenizer

    from structgate.plugin.bridge import StructgateVllmBackend
    from structgate.tokenizers import bundled_tokenizer_dir

    tok = AutoTokenizer.from_pretrained(str(bundled_tokenizer_dir("llama3")))
    mc = types.SimpleNamespace(get_vocab_size=lambda: 128256, try_get_generation_config=lambda: {},
                               hf_config=types.SimpleNamespace(eos_token_id=128009))
    cfg = types.SimpleNamespace(model_config=mc, structured_outputs_config=None, speculative_config=None)
    return (lambda: StructgateVllmBackend(cfg, tokenizer=tok, vocab_size=128256, backend_name="native")), tok


def test_bridge_records_compile_cache_and_failures(monkeypatch, tmp_path):
    make, tok = _vllm_engine()
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.plugin import metrics

    monkeypatch.setenv("STRUCTGATE_METRICS_DIR", str(tmp_path))
    be = make()
    be.compile_grammar(StructuredOutputOptions.REGEX, "(yes|no)")
    be.compile_grammar(StructuredOutputOptions.REGEX, "(yes|no)")
    from structgate.errors import CompileLimitError, GrammarSyntaxError

    with pytest.raises(GrammarSyntaxError):
        be.compile_grammar(StructuredOutputOptions.REGEX, "[a-")
    # the compile time limit (STRUCTGATE_COMPILE_TIMEOUT_S) is a typed error naming it
    monkeypatch.setenv("STRUCTGATE_COMPILE_TIMEOUT_S", "1e-6")
    slow = make()
    with pytest.raises(CompileLimitError, match="compile_timeout_s"):
        slow.compile_grammar(StructuredOutputOptions.REGEX, "[a-z]{1,20}@x")
    monkeypatch.setenv("STRUCTGATE_COMPILE_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="STRUCTGATE_COMPILE_TIMEOUT_S"):
        make()
    metrics.flush()
    fams = _families(metrics.render_text(str(tmp_path)))
    assert _sample(fams, "structgate_compile_seconds", "_count", backend="native", kind="regex") >= 1
    assert _sample(fams, "structgate_cache_hits", "_total", backend="native") >= 1
    assert _sample(fams, "structgate_compile_failures", "_total", stage="compile",
                   backend="native", kind="regex",
                   error="limit") >= 1
    assert _sample(fams, "structgate_compile_failures", "_total", stage="compile",
                   backend="native", kind="regex",
                   error="syntax") >= 1
    assert _sample(fams, "structgate_cache_bytes", backend="native") > 0
    # the gauge follows a cached grammar that grows after its compile (native computes rows lazily)
    import numpy as np

    be.compile_grammar(StructuredOutputOptions.JSON, '{"type": "object", "properties": {"a": {"type": "string"}}}')
    grown = list(be._cache.values())[-1]
    assert be.cache_stats()["bytes"] == sum(g.memory_size_bytes for g in be._cache.values())
    before = grown.memory_size_bytes
    m = grown.matcher()
    bm = np.zeros((1, (128256 + 31) // 32), dtype=np.int32)
    for t in tok.encode('{"a": "some words in a string"}', add_special_tokens=False):
        m.fill_bitmask(bm, 0)
        assert m.advance(t)
    assert grown.memory_size_bytes > before
    assert be.cache_stats()["bytes"] == sum(g.memory_size_bytes for g in be._cache.values())
    # native's process-wide caches: the class tries its masks walked
    assert _sample(fams, "structgate_engine_cache_entries", backend="native", cache="class_tries") >= 1
    assert _sample(fams, "structgate_engine_cache_bytes", backend="native", cache="class_tries") > 1 << 20


def test_compiled_grammar_cache_is_bounded_in_entries_and_bytes(monkeypatch):
    """The engine's compiled-grammar cache was bounded by entries only (256 grammars of any size):
    it is bounded in bytes too, both configurable, least recently used evicted, a bad setting named."""
    make, _ = _vllm_engine()
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    def engine():
        return make()

    regexes = [f"(yes|no){i}[a-z]{{1,{i + 2}}}" for i in range(6)]
    monkeypatch.setenv("STRUCTGATE_GRAMMAR_CACHE_ENTRIES", "3")
    be = engine()
    for rx in regexes:
        be.compile_grammar(StructuredOutputOptions.REGEX, rx)
    assert be.cache_stats()["entries"] == 3
    from structgate import Constraint

    assert list(be._cache) == [Constraint.regex(rx).cache_key() for rx in regexes[3:]]  # the 3 newest
    # a byte budget a little over the largest grammar keeps one or two, never over the budget
    monkeypatch.delenv("STRUCTGATE_GRAMMAR_CACHE_ENTRIES")
    sizes = [be._cache_bytes[k] for k in be._cache]
    budget = max(sizes) + min(sizes) // 2
    monkeypatch.setenv("STRUCTGATE_GRAMMAR_CACHE_BYTES", str(budget))
    be = engine()
    for rx in regexes:
        be.compile_grammar(StructuredOutputOptions.REGEX, rx)
        st = be.cache_stats()
        assert 1 <= st["entries"] <= 2 and st["bytes"] <= budget, (st, budget)
    misses = []
    orig = be.sg_backend.compile
    monkeypatch.setattr(be.sg_backend, "compile", lambda c: misses.append(c) or orig(c))
    be.compile_grammar(StructuredOutputOptions.REGEX, regexes[-1])  # the newest: kept
    be.compile_grammar(StructuredOutputOptions.REGEX, regexes[0])  # the oldest: evicted, compiled again
    assert [c.value for c in misses] == [regexes[0]]
    # the newest grammar is kept even when it alone is over the budget
    monkeypatch.setenv("STRUCTGATE_GRAMMAR_CACHE_BYTES", "1")
    be = engine()
    be.compile_grammar(StructuredOutputOptions.REGEX, regexes[0])
    assert be.cache_stats()["entries"] == 1
    for bad in ("0", "-5", "lots"):
        monkeypatch.setenv("STRUCTGATE_GRAMMAR_CACHE_BYTES", bad)
        with pytest.raises(ValueError, match="STRUCTGATE_GRAMMAR_CACHE_BYTES"):
            engine()


def test_a_failing_constraint_is_compiled_once_and_counted_per_request(monkeypatch, tmp_path):
    """Regression: a request with n=3 whose constraint failed in the engine was compiled three times
    (vLLM compiles per sample). A failure that does not depend on the moment is remembered and not
    compiled again, but still counted per refused engine request; the compile time limit is not
    remembered."""
    make, _ = _vllm_engine()
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.errors import CompileLimitError, GrammarSyntaxError
    from structgate.plugin import metrics

    monkeypatch.setenv("STRUCTGATE_METRICS_DIR", str(tmp_path))
    be = make()
    calls = []
    orig = be.sg_backend.compile
    monkeypatch.setattr(be.sg_backend, "compile", lambda c: calls.append(c.value) or orig(c))

    def failures(error):
        return {tuple(k[1:]): v for k, v in metrics.snapshot()["counters"]
                if k[0] == "compile_failures_total"}.get(("native", "regex", error, "compile"), 0)

    before = failures("syntax")
    messages = set()
    for _ in range(3):
        with pytest.raises(GrammarSyntaxError) as ei:
            be.compile_grammar(StructuredOutputOptions.REGEX, "ab(c")
        messages.add(str(ei.value))
    assert calls == ["ab(c"] and len(messages) == 1 and "position 2" in messages.pop()
    # each refused request is counted, also those refused from the memory (a repeat was hidden)
    assert failures("syntax") == before + 3
    # a time-limit failure may pass later (less load): compiled again each time
    def over_time(c):
        calls.append(c.value)
        raise CompileLimitError("compile_timeout_s", 0.2, 0.1)

    calls.clear()
    monkeypatch.setattr(be.sg_backend, "compile", over_time)
    for _ in range(2):
        with pytest.raises(CompileLimitError, match="compile_timeout_s"):
            be.compile_grammar(StructuredOutputOptions.REGEX, "[a-z]{1,20}@y")
    assert calls == ["[a-z]{1,20}@y"] * 2


def test_native_engine_cache_stats_follow_the_caches(llama3_vocab):
    """What native reports is what its caches hold: the shared walks' entries, bytes and lookups
    move with a compile that uses them, the class tries' bytes are their arrays'."""
    import numpy as np

    from structgate import Constraint, get_backend
    from structgate.native import pushdown as pd

    be = get_backend("native", llama3_vocab)
    before = be.engine_cache_stats()
    assert set(before) == {"shared_walks", "class_tries", "regex_nodes", "numeric_automata"}
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
              "items": {"type": "string"}}, "n": {"type": "integer", "multipleOf": 7, "minimum": 3}},
              "required": ["name"]}
    g = be.compile(Constraint("json_schema", schema))
    m = g.matcher()
    bm = np.zeros((1, (llama3_vocab.vocab_size + 31) // 32), np.int32)
    for tok in llama3_vocab.encode('{"name": "a long enough value", "tags": ["x"]}'):
        m.fill_bitmask(bm, 0)
        assert m.advance(tok)
    after = be.engine_cache_stats()
    sw = after["shared_walks"]
    assert sw["hits"] + sw["misses"] > before["shared_walks"]["hits"] + before["shared_walks"]["misses"]
    assert sw["entries"] == len(pd._shared_walks._d) and sw["bytes"] == pd._shared_walks.nbytes
    tries = [t for _v, t in pd._tries.values()]
    assert after["class_tries"]["entries"] == len(tries) >= 1
    assert after["class_tries"]["bytes"] == pd._nbytes_once(tries)  # an array shared by two tries once
    assert all(t.nbytes >= t.tokens_by_node.nbytes + t.token_cnode.nbytes for t in tries)
    assert after["regex_nodes"]["entries"] >= 1
    from structgate.native.json_schema import _type_number as tn

    na = after["numeric_automata"]
    assert na["entries"] == len(tn._SHARED_DFAS) >= 1
    assert na["bytes"] == 8 * sum(len(d.delta) * len(d.atoms) for d in tn._SHARED_DFAS.values() if d is not None) > 0
    from structgate.backends.auto import AutoBackend

    auto = AutoBackend.wrap(be).engine_cache_stats()
    assert auto["native/class_tries"] == be.engine_cache_stats()["class_tries"]


# -- several API servers (vLLM's --api-server-count N) ---------------------------------------------
_ENGINE = textwrap.dedent("""
    import sys
    from structgate.plugin import metrics
    for i in range(3):
        metrics.record_compile("native", "json_schema", 0.002 * (i + 1))
    metrics.record_compile_failure("native", "json_schema", "invalid")
    metrics.record_fill("native", 0.0003, rows=4)
    metrics.register_cache("native", lambda: {"entries": 3, "bytes": 3000})
    metrics.set_info(version="0.1.0", backends="native", patches="engine-a")
    print(metrics.flush())
""")

# an API-server process: records k deferred validations, leaves a snapshot file (its writer's flush),
# records one more that only its fresh figures hold, then renders what its /metrics would show
_API = textwrap.dedent("""
    import sys
    from structgate.plugin import metrics
    k = int(sys.argv[1])
    metrics.set_info(version="0.1.0", backends="", patches="api-a")
    metrics.record_fallback("validation_deferred", k)
    metrics.flush()
    metrics.record_fallback("validation_deferred")
    sys.stdout.write(metrics.render_text())
""")


def test_each_api_server_renders_the_same_totals_counting_each_process_once(tmp_path):
    """Engine figures (one snapshot file) appear once in each API server's render; an API server's own
    figures are its fresh ones, not fresh + its file; the other API server's come from its file."""
    env = {**os.environ, "STRUCTGATE_METRICS_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", _ENGINE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    a = subprocess.run([sys.executable, "-c", _API, "2"], capture_output=True, text=True, env=env, timeout=120)
    assert a.returncode == 0, a.stderr
    # the first API server exited after its render: its atexit flush left its final figures (3)
    b = subprocess.run([sys.executable, "-c", _API, "5"], capture_output=True, text=True, env=env, timeout=120)
    assert b.returncode == 0, b.stderr
    fa, fb = _families(a.stdout), _families(b.stdout)
    # A saw: the engine, itself (2 + 1 fresh); B saw: the engine, A's file (3), itself (5 + 1 fresh)
    assert _sample(fa, "structgate_fallbacks", "_total", reason="validation_deferred") == 3
    assert _sample(fb, "structgate_fallbacks", "_total", reason="validation_deferred") == 3 + 6
    for f in (fa, fb):  # the engine's figures once, whichever API server renders
        assert _sample(f, "structgate_compile_seconds", "_count", backend="native", kind="json_schema") == 3
        assert abs(_sample(f, "structgate_compile_seconds", "_sum", backend="native", kind="json_schema")
                   - 0.012) < 1e-9
        assert _sample(f, "structgate_compile_failures", "_total", stage="compile",
                   backend="native", kind="json_schema",
                       error="invalid") == 1
        assert _sample(f, "structgate_mask_fill_rows", "_total", backend="native") == 4
        assert _sample(f, "structgate_cache_entries", backend="native") == 3
        infos = f["structgate_info"].samples
        assert len(infos) == 1 and infos[0].labels["backends"] == "native"
        assert infos[0].labels["patches"] == "api-a,engine-a"
    # a third render after both exited (any API server scraping now): the same totals as B's
    c = subprocess.run([sys.executable, "-c", "import sys; from structgate.plugin import metrics; "
                        "sys.stdout.write(metrics.render_text())"], capture_output=True, text=True, env=env,
                       timeout=120)
    fc = _families(c.stdout)
    assert _sample(fc, "structgate_fallbacks", "_total", reason="validation_deferred") == 9
    assert _sample(fc, "structgate_compile_seconds", "_count", backend="native", kind="json_schema") == 3


_MULTIPROC_APP = textwrap.dedent("""
    # an API server of `vllm serve --api-server-count 2`: PROMETHEUS_MULTIPROC_DIR is set before
    # prometheus_client is imported (vLLM sets it in the launcher), the app gets vLLM's routers
    import json, os, sys
    import structgate.plugin as p
    p.register()
    if sys.argv[1:] == ["changed"]:  # the route vLLM adds no longer looks like the instrumentator's
        from structgate.plugin import patches
        patches._INSTRUMENTATOR_ENDPOINT = ("prometheus_fastapi_instrumentator", "no_such_endpoint")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
    from vllm.entrypoints.serve.instrumentator import register_instrumentator_api_routers
    from structgate.plugin import ledger
    Counter("sgtest_requests", "a multiprocess counter of this process", ["x"]).labels(x="1").inc(7)
    app = FastAPI()
    register_instrumentator_api_routers(app)
    with TestClient(app) as c:
        r1, r2 = c.get("/metrics"), c.get("/metrics")
    ref = CollectorRegistry()
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:  # what the route served before
        multiprocess.MultiProcessCollector(ref)
    json.dump({"status": r1.status_code, "ctype": r1.headers["content-type"], "text": r1.text, "text2": r2.text,
               "ref": generate_latest(ref).decode(), "applied": sorted(ledger.applied()),
               "errors": {k: str(v) for k, v in ledger.errors().items()}, "disabled": ledger.disabled_reason(),
               "schema": "/metrics" in c.get("/openapi.json").json()["paths"]}, sys.stdout)
""")


@pytest.mark.parametrize("multiproc", [True, False])
def test_metrics_route_serves_the_collector_with_several_api_servers(tmp_path, multiproc):
    """vLLM's own attach_router in a fresh process, as one of N API servers (PROMETHEUS_MULTIPROC_DIR
    set: the instrumentator's route rebuilt a registry per scrape and lost structgate's series) and as
    the only one; oracle for vLLM's series: prometheus_client's MultiProcessCollector on the same folder."""
    pytest.importorskip("vllm")
    pytest.importorskip("fastapi")
    sg = tmp_path / "sg"
    sg.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")}
    env["STRUCTGATE_METRICS_DIR"] = str(sg)
    if multiproc:
        (tmp_path / "prom").mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "prom")
    out = subprocess.run([sys.executable, "-c", _ENGINE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    run = subprocess.run([sys.executable, "-c", _MULTIPROC_APP], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert res["status"] == 200 and res["ctype"].startswith("text/plain"), res["ctype"]
    assert {"metrics-registry", "metrics-multiproc-route"} <= set(res["applied"]) and not res["errors"]
    assert res["schema"]  # the route is still in the OpenAPI schema
    for text in (res["text"], res["text2"]):  # every scrape, not only the first
        fams = _families(text)
        assert _sample(fams, "structgate_compile_seconds", "_count", backend="native", kind="json_schema") == 3
        assert _sample(fams, "structgate_compile_failures", "_total", stage="compile",
                   backend="native", kind="json_schema",
                       error="invalid") == 1
        assert _sample(fams, "structgate_mask_fill_seconds", "_count", backend="native") == 1
        assert _sample(fams, "structgate_cache_entries", backend="native") == 3
        info = fams["structgate_info"].samples
        assert len(info) == 1 and info[0].labels["backends"] == "native"
        assert "metrics-multiproc-route" in info[0].labels["patches"]
        assert text.count("# TYPE structgate_compile_seconds histogram") == 1
        if multiproc:  # vLLM's multiprocess series as before: exactly the reference's samples
            ref = _families(res["ref"])
            assert _sample(ref, "sgtest_requests", "_total", x="1") == 7
            for name, fam in ref.items():
                got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fams[name].samples}
                want = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
                assert got == want, name
        else:
            assert _sample(fams, "sgtest_requests", "_total", x="1") == 7


def test_metrics_route_shape_changed_fails_closed(tmp_path):
    """Under PROMETHEUS_MULTIPROC_DIR, a /metrics route the entry does not recognise is left alone: vLLM's
    /metrics works as without structgate, the entry is reported failed (optional: structgate stays on)."""
    pytest.importorskip("vllm")
    pytest.importorskip("fastapi")
    (tmp_path / "prom").mkdir()
    (tmp_path / "sg").mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prom"),
           "STRUCTGATE_METRICS_DIR": str(tmp_path / "sg")}
    out = subprocess.run([sys.executable, "-c", _ENGINE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    run = subprocess.run([sys.executable, "-c", _MULTIPROC_APP, "changed"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert res["status"] == 200 and res["schema"]
    assert "metrics-multiproc-route" in res["errors"] and "metrics-multiproc-route" not in res["applied"]
    assert "0 such route(s)" in res["errors"]["metrics-multiproc-route"]
    assert res["disabled"] is None  # optional entry: structgate names still accepted
    assert "structgate_" not in res["text"]  # the instrumentator's route, as without the entry
    assert _families(res["text"]).keys() == _families(res["ref"]).keys()
    assert "optional patch metrics-multiproc-route not applied" in run.stderr


def test_xgrammar_engine_cache_stats_follow_its_compiler_cache(llama3_vocab):
    pytest.importorskip("xgrammar")
    from structgate import Constraint, get_backend

    be = get_backend("structgate-xgrammar", llama3_vocab)
    before = be.engine_cache_stats()["compiler_cache"]["bytes"]
    be.compile(Constraint("json_schema", {"type": "object", "properties": {"q": {"type": "integer"}}}))
    after = be.engine_cache_stats()["compiler_cache"]
    assert set(after) == {"bytes"} and after["bytes"] > before
