"""Scale-out on the CPU build: `vllm serve ... --structured-output-backend native --api-server-count 2`.

Two API-server processes share one port (vLLM balances connections between them) and one engine. Each
API server loads the plugin, validates structured requests and serves /metrics from vLLM's
multiprocess registry. Checked: every structured output is valid for its oracle, across many
connections (so both API servers serve some); invalid requests are 400 on either. (Known gap: under --api-server-count 2 the
structgate series do not appear on /metrics yet; see docs/vllm.md.)"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")

from structgate.cli.demo import build_requests, send  # noqa: E402
from structgate.plugin.server import VllmServer  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from structgate.plugin.model import embedded_model_dir

    tmp = tmp_path_factory.mktemp("scaleout")
    srv = VllmServer("native", model=str(embedded_model_dir()), log_path=str(tmp / "server.log"),
                     extra_args=["--api-server-count", "2"])
    srv.start()
    try:
        srv.wait_ready(timeout_s=600)
        yield srv
    finally:
        srv.stop()


def test_two_api_servers_started_with_the_plugin(server):
    log = server.log_tail(400_000)
    pids = {ln.split("pid ")[1].split(")")[0] for ln in log.splitlines() if "structgate 0.1.0 active (" in ln}
    assert len(pids) >= 2, log[-4000:]  # at least the engine and one API server logged their line


def test_structured_outputs_valid_under_two_api_servers(server):
    reqs = build_requests() * 2
    results = []
    # a fresh connection per request, so vLLM spreads them over both API servers
    with ThreadPoolExecutor(6) as pool:
        def one(r):
            with httpx.Client(timeout=300.0) as c:
                return send(c, server.url, r, "native", server.served_model_name)
        results = list(pool.map(one, reqs))
    bad = [(r.request, r.error, r.output) for r in results if not r.valid]
    assert not bad, bad
    for _ in range(6):
        with httpx.Client(timeout=60.0) as c:
            r = c.post(server.url + "/v1/completions", json={"model": server.served_model_name, "prompt": "x",
                                                             "max_tokens": 4, "structured_outputs": {"regex": "(a"}})
        assert r.status_code == 400 and "GrammarSyntaxError" in r.json()["error"]["message"]
