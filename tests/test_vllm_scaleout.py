"""Scale-out on the CPU build: `vllm serve ... --structured-output-backend native --api-server-count 2`.

Two API-server processes share one port (vLLM balances connections between them) and one engine. Each
API server loads the plugin, validates structured requests and serves /metrics from vLLM's
multiprocess registry. Checked: every structured output is valid for its oracle, across many
connections (so both API servers serve some); invalid requests are 400 on either; /metrics on either
API server shows structgate's series with the same totals, the engine's figures counted once (ledger
entry metrics-multiproc-route: the instrumentator's GET /metrics route rebuilt a registry per scrape
without structgate's collector; see docs/vllm.md)."""
from __future__ import annotations

import http.client
import json
import os
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


def _families(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def _total(fams, family, suffix, **labels) -> float:
    return sum(s.value for s in fams[family].samples
               if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items()))


def _structgate_samples(fams) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for name, f in fams.items() if name.startswith("structgate_") for s in f.samples}


def _api_server_pids(server) -> set[int]:
    return {int(ln.split("pid ")[1].split(")")[0]) for ln in server.log_tail(4_000_000).splitlines()
            if "structgate 0.1.0 active (api-server, pid " in ln}


def _owner_of_connection(server_port: int, client_port: int, pids: set[int]) -> int | None:
    """The process (of ``pids``) holding the server side of the TCP connection 127.0.0.1:client_port ->
    :server_port (/proc/net/tcp gives the socket's inode, /proc/PID/fd the process holding it)."""
    inode = None
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            local, remote = parts[1], parts[2]
            if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
                inode = parts[9]
    if inode is None:
        return None
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
            except OSError:
                continue
    return None


def _scrape(server, pids: set[int]) -> tuple[int | None, str]:
    """GET /metrics on a fresh connection; returns (the API-server pid that answered, the text)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.connect()
        client_port = conn.sock.getsockname()[1]
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        text = resp.read().decode()
        assert resp.status == 200, text[:500]
        return _owner_of_connection(server.port, client_port, pids), text  # the connection is still open
    finally:
        conn.close()


def test_metrics_on_both_api_servers_count_each_process_once(server):
    reqs = build_requests()
    distinct = {json.dumps(r["body"].get("response_format") or r["body"].get("structured_outputs"), sort_keys=True)
                for r in reqs}
    def one(r):
        with httpx.Client(timeout=300.0) as c:
            return send(c, server.url, r, "native", server.served_model_name)

    for _ in range(2):  # the second round starts after the first finished: every lookup hits the cache
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(one, reqs))
        assert all(r.valid for r in results), [(r.request, r.error) for r in results if not r.valid]
    # a schema unsatisfiable only through recursion (every value would be infinitely deep) passes
    # the API server's cheap validation and fails in the engine's compile (InvalidConstraintError,
    # HTTP 400): one compile failure, recorded in the engine only
    r = httpx.post(server.url + "/v1/chat/completions", timeout=300.0, json={
        "model": server.served_model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "unsat", "schema": {
            "type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}}}})
    assert r.status_code == 400 and "InvalidConstraintError" in r.json()["error"]["message"], r.text
    deadline = time.monotonic() + 30
    while True:  # engine snapshots are written at most once a second
        with httpx.Client(timeout=30.0) as c:
            fams = _families(c.get(server.url + "/metrics").text)
        if ("structgate_compile_failures" in fams and _total(fams, "structgate_compile_failures", "_total",
                                                             stage="compile",
                                                             kind="json_schema", error="invalid") >= 1):
            break
        assert time.monotonic() < deadline, sorted(fams)[:40]
        time.sleep(1.0)
    time.sleep(2.5)  # every process's last figures are on disk
    # a fresh connection per scrape until each API server answered at least twice: every scrape
    # renders the same figures, whichever API server answers
    pids = _api_server_pids(server)
    assert len(pids) == 2, pids
    scrapes, by_pid = [], {}
    for _ in range(60):
        pid, text = _scrape(server, pids)
        scrapes.append(text)
        by_pid.setdefault(pid, []).append(text)
        if all(len(by_pid.get(p, ())) >= 2 for p in pids):
            break
    assert set(by_pid) == pids, {p: len(t) for p, t in by_pid.items()}
    fams = _families(scrapes[0])
    first = _structgate_samples(fams)
    for text in scrapes[1:]:
        assert _structgate_samples(_families(text)) == first
        assert text.count("# TYPE structgate_compile_seconds histogram") == 1
    assert "vllm:num_requests_running" in scrapes[0]  # vLLM's own series are still there
    native = {"backend": "native"}
    compiles = _total(fams, "structgate_compile_seconds", "_count", **native)
    # every distinct constraint was compiled once by the one engine (this module sent others before)
    assert compiles >= len(distinct), compiles
    assert _total(fams, "structgate_compile_seconds", "_sum", **native) > 0
    assert _total(fams, "structgate_compile_failures", "_total", kind="json_schema", error="invalid", stage="compile",
                  **native) == 1
    misses = _total(fams, "structgate_cache_misses", "_total", **native)
    hits = _total(fams, "structgate_cache_hits", "_total", **native)
    # each engine lookup that missed was compiled (or failed): the engine's counters, counted once
    fails = _total(fams, "structgate_compile_failures", "_total", stage="compile", **native)
    assert misses == compiles + fails, (misses, compiles, fails)
    assert hits >= len(reqs)
    assert _total(fams, "structgate_mask_fill_seconds", "_count", **native) > 0
    assert _total(fams, "structgate_mask_fill_rows", "_total", **native) > 0
    # one engine's cache: the constraints this module sent that compiled (two requests in flight with
    # the same constraint may both miss and compile, so compiles can exceed it)
    assert _total(fams, "structgate_cache_entries", "", **native) == len(distinct)
    info = fams["structgate_info"].samples
    assert len(info) == 1 and info[0].labels["backends"] == "native", info
    assert {"metrics-registry", "metrics-multiproc-route", "manager-grammar-init"} <= set(
        info[0].labels["patches"].split(","))
