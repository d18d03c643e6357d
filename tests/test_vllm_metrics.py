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
    assert _sample(fams, "structgate_compile_failures", "_total", backend="native", kind="json_schema",
                   error="limit") == 2
    assert _sample(fams, "structgate_mask_fill_seconds", "_count", backend="native") == 2
    assert _sample(fams, "structgate_mask_fill_rows", "_total", backend="native") == 6
    assert _sample(fams, "structgate_fallbacks", "_total", reason="adapter-per-row") == 2
    assert _sample(fams, "structgate_cache_hit_rate", backend="native") == 0.5
    assert _sample(fams, "structgate_cache_entries", backend="native") == 5
    assert _sample(fams, "structgate_cache_bytes", backend="native") == 5000
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


def test_approx_nbytes_counts_arrays():
    import numpy as np

    from structgate.plugin.metrics import approx_nbytes

    class G:
        def __init__(self):
            self.table = np.zeros((100, 10), dtype=np.int32)
            self.rows = {1: np.zeros(50, dtype=np.int64)}

    assert approx_nbytes(G()) >= 4000 + 400


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


def test_bridge_records_compile_cache_and_failures(monkeypatch, tmp_path):
    pytest.importorskip("vllm")
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    from structgate.plugin import metrics
    from structgate.plugin.bridge import StructgateVllmBackend
    from structgate.tokenizers import bundled_tokenizer_dir
    from transformers import AutoTokenizer
    import types

    monkeypatch.setenv("STRUCTGATE_METRICS_DIR", str(tmp_path))
    tok = AutoTokenizer.from_pretrained(str(bundled_tokenizer_dir("llama3")))
    mc = types.SimpleNamespace(get_vocab_size=lambda: 128256, try_get_generation_config=lambda: {},
                               hf_config=types.SimpleNamespace(eos_token_id=128009))
    cfg = types.SimpleNamespace(model_config=mc, structured_outputs_config=None, speculative_config=None)
    be = StructgateVllmBackend(cfg, tokenizer=tok, vocab_size=128256, backend_name="native")
    be.compile_grammar(StructuredOutputOptions.REGEX, "(yes|no)")
    be.compile_grammar(StructuredOutputOptions.REGEX, "(yes|no)")
    from structgate.errors import CompileLimitError, GrammarSyntaxError

    with pytest.raises(GrammarSyntaxError):
        be.compile_grammar(StructuredOutputOptions.REGEX, "[a-")
    # the compile time limit (STRUCTGATE_COMPILE_TIMEOUT_S) is a typed error naming it
    monkeypatch.setenv("STRUCTGATE_COMPILE_TIMEOUT_S", "1e-6")
    slow = StructgateVllmBackend(cfg, tokenizer=tok, vocab_size=128256, backend_name="native")
    with pytest.raises(CompileLimitError, match="compile_timeout_s"):
        slow.compile_grammar(StructuredOutputOptions.REGEX, "[a-z]{1,20}@x")
    monkeypatch.setenv("STRUCTGATE_COMPILE_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="STRUCTGATE_COMPILE_TIMEOUT_S"):
        StructgateVllmBackend(cfg, tokenizer=tok, vocab_size=128256, backend_name="native")
    metrics.flush()
    fams = _families(metrics.render_text(str(tmp_path)))
    assert _sample(fams, "structgate_compile_seconds", "_count", backend="native", kind="regex") >= 1
    assert _sample(fams, "structgate_cache_hits", "_total", backend="native") >= 1
    assert _sample(fams, "structgate_compile_failures", "_total", backend="native", kind="regex",
                   error="limit") >= 1
    assert _sample(fams, "structgate_compile_failures", "_total", backend="native", kind="regex",
                   error="syntax") >= 1
    assert _sample(fams, "structgate_cache_bytes", backend="native") > 0
