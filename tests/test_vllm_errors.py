"""A real server started exactly as the README says (`vllm serve MODEL --structured-output-backend
native`, the plain `vllm` command, no VLLM_CPU_* variables) whose engine compiles fail: the compile
time limit is set to 1 µs (STRUCTGATE_COMPILE_TIMEOUT_S), which request validation in the API server
does not check, so every structured request fails later, in the engine's grammar thread, on vLLM's
WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR path. Each must be an HTTP 400 naming the cause (never a 500),
while unconstrained requests streaming at the same time are unaffected; /metrics counts the
failures; the startup line names structgate's version and patches."""
from __future__ import annotations

import json
import os
import pathlib
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")

from structgate.plugin.server import VllmServer  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from structgate.plugin.model import embedded_model_dir

    tmp = tmp_path_factory.mktemp("errors")
    srv = VllmServer("native", model=str(embedded_model_dir()), log_path=str(tmp / "server.log"),
                     # a generous validation budget: the tests below assert which process refused a
                     # request (the API server's validation or the engine's compile); under load the
                     # default 0.05 s can run out on a cold path and defer a bad request to the engine
                     env={"STRUCTGATE_COMPILE_TIMEOUT_S": "1e-6", "STRUCTGATE_VALIDATE_BUDGET_S": "60"})
    # the README line: the plain `vllm` console script, not structgate's launcher
    vllm_bin = pathlib.Path(sys.executable).with_name("vllm")
    assert vllm_bin.exists()
    i = srv.cmd.index("serve")
    srv.cmd = [str(vllm_bin), *srv.cmd[i:]]
    for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_TARGET_DEVICE", "STRUCTGATE_METRICS_DIR"):
        srv.env.pop(k, None)
    srv.start()
    try:
        srv.wait_ready(timeout_s=600)
        yield srv
    finally:
        srv.stop()


def _post(srv, path, body, timeout=300.0):
    return httpx.post(srv.url + path, json={"model": srv.served_model_name, **body}, timeout=timeout)


def test_readme_line_starts_on_cpu_and_logs_startup_line(server):
    # the server started without VLLM_CPU_KVCACHE_SPACE / VLLM_TARGET_DEVICE (popped in the fixture):
    # the plugin's cpu-env-defaults entry applied in the API server before the engine was started
    api = [ln for ln in server.log_tail(400_000).splitlines() if "structgate 0.1.0 active (api-server" in ln]
    assert api and "metrics-registry" in api[0] and "sampling-validate" in api[0] and "cpu-env-defaults" in api[0]
    # the engine builds its backend (and logs its line) on the first structured request
    _post(server, "/v1/completions", {"prompt": "x", "max_tokens": 4, "structured_outputs": {"regex": "q"}})
    line = next(ln for ln in server.log_tail(400_000).splitlines() if "structgate 0.1.0 active (engine" in ln)
    assert "backends [native]" in line and "manager-grammar-init" in line and "engine-compile-error-reason" in line


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "x", "structured_outputs": {"regex": "[a-z]{1,20}@x"}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}}),
])
def test_engine_compile_failure_is_400_naming_the_cause(server, path, body):
    r = _post(server, path, {**body, "max_tokens": 8})
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert "CompileLimitError" in msg and "compile_timeout_s" in msg, msg
    # it did fail in the engine (the API-server validation passed it)
    assert "Failed to compile grammar for request" in server.log_tail(400_000)


def test_engine_compile_failure_in_a_stream_names_the_cause(server):
    with httpx.stream("POST", server.url + "/v1/completions", timeout=300.0, json={
            "model": server.served_model_name, "prompt": "x", "stream": True, "max_tokens": 8,
            "structured_outputs": {"regex": "(yes|no) [0-9]+"}}) as r:
        text = r.read().decode()
    assert r.status_code in (200, 400)
    if r.status_code == 200:  # the stream had started: vLLM's in-band error event
        assert '"code":400' in text.replace(" ", "") or '"code": 400' in text
    assert "compile_timeout_s" in text and "Internal server error" not in text


def test_failures_do_not_affect_other_streams(server):
    def plain(i):
        toks = 0
        with httpx.stream("POST", server.url + "/v1/completions", timeout=300.0, json={
                "model": server.served_model_name, "prompt": f"story {i}", "stream": True, "max_tokens": 24,
                "ignore_eos": True, "seed": i}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    toks += len(json.loads(line[6:])["choices"][0]["text"]) > 0
        return toks

    def bad(i):
        return _post(server, "/v1/completions", {"prompt": "x", "max_tokens": 8,
                                                 "structured_outputs": {"regex": f"a{{{i + 1}}}b"}}).status_code

    with ThreadPoolExecutor(8) as pool:
        plains = [pool.submit(plain, i) for i in range(4)]
        bads = [pool.submit(bad, i) for i in range(6)]
        assert [f.result() for f in bads] == [400] * 6
        assert all(f.result() > 0 for f in plains)
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200


def test_validation_errors_stay_400(server):
    r = _post(server, "/v1/completions", {"prompt": "x", "max_tokens": 8, "structured_outputs": {"regex": "[0-9"}})
    assert r.status_code == 400 and "GrammarSyntaxError" in r.json()["error"]["message"]


@pytest.mark.parametrize("path,body,where", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "response_format": {
        "type": "structural_tag", "format": {"type": "json_schema", "json_schema": {"type": "strin"}}}},
     "structural_tag /format/json_schema/type"),
    ("/v1/completions", {"prompt": "x", "structured_outputs": {"structural_tag": json.dumps({
        "type": "structural_tag", "triggers": ["<f>"],
        "structures": [{"begin": "<f>", "schema": {"type": "object", "required": 3}, "end": "</f>"}]})}},
     "structural_tag /structures/0/schema/required"),
])
def test_bad_structural_tag_is_400_naming_the_cause(server, path, body, where):
    """Regression: vLLM's front end checked structural tags with xgrammar first and answered
    'Invalid ... structural_tag specification.' with no cause."""
    r = _post(server, path, {**body, "max_tokens": 8})
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert "(structgate) rejected the request" in msg and where in msg, msg


def _failures(server, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.url + "/metrics", timeout=30).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return sum(s.value for s in fams["structgate_compile_failures"].samples
               if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_count_the_failures(server):
    import time

    from prometheus_client.parser import text_string_to_metric_families

    refused = _failures(server, backend="native", kind="regex", error="syntax", stage="validate")
    _post(server, "/v1/completions", {"prompt": "x", "max_tokens": 8, "structured_outputs": {"regex": "z+q"}})
    r = _post(server, "/v1/completions", {"prompt": "x", "max_tokens": 8, "structured_outputs": {"regex": "z(q"}})
    assert r.status_code == 400
    time.sleep(2.5)  # engine snapshots are written at most once a second
    text = httpx.get(server.url + "/metrics", timeout=30).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    fails = [s for s in fams["structgate_compile_failures"].samples
             if s.name.endswith("_total") and s.labels.get("error") == "limit" and s.labels.get("backend") == "native"]
    assert fails and sum(s.value for s in fails) >= 2, text[-3000:]
    assert {s.labels["stage"] for s in fails} == {"compile"}  # the limit is the engine's (compile_timeout_s)
    # the request the API server refused in validation is counted there, once
    assert _failures(server, backend="native", kind="regex", error="syntax", stage="validate") == refused + 1
    assert _failures(server, backend="native", kind="regex", error="syntax", stage="compile") == 0
    info = fams["structgate_info"].samples[0]
    assert info.labels["version"] == "0.1.0" and "native" in info.labels["backends"]
    assert "manager-grammar-init" in info.labels["patches"]
    assert "vllm:num_requests_running" in text  # vLLM's own series are still there
