"""``VllmServer`` (structgate/plugin/server.py) when another process takes its port first.

The port a ``VllmServer`` chooses is free when chosen, not when ``vllm serve`` binds it: with two test
workers, or beside other servers, another process can bind it in between (seen in CI: "Address
already in use", a server that never started). A stand-in for ``vllm serve`` (a few lines of
Python that bind ``--port`` and answer ``/health``) is used, so no vLLM is needed.
"""
from __future__ import annotations

import socket
import sys
import textwrap

import pytest

httpx = pytest.importorskip("httpx")

from structgate.plugin.server import ServerStartError, VllmServer  # noqa: E402

FAKE_SERVE = textwrap.dedent("""
    import http.server, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    try:
        srv = http.server.HTTPServer(("127.0.0.1", port), H)
    except OSError as e:
        print(f"OSError: {e}", flush=True)   # e.g. [Errno 98] Address already in use
        sys.exit(1)
    print("ready", port, flush=True)
    srv.serve_forever()
""")


def _occupied_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def _fake(srv: VllmServer, port: int) -> VllmServer:
    """Point ``srv`` at the stand-in and at ``port`` (as if another process had just taken it)."""
    srv.port = port
    srv.cmd = [sys.executable, "-c", FAKE_SERVE, "--port", str(port)]
    return srv


def test_a_chosen_port_taken_before_the_server_binds_it_is_replaced(tmp_path):
    holder, taken = _occupied_port()
    srv = _fake(VllmServer("native", model=str(tmp_path), log_path=str(tmp_path / "s.log")), taken)
    try:
        srv.start()
        srv.wait_ready(timeout_s=60, poll_s=0.05)
        assert srv.port != taken and srv.url.endswith(f":{srv.port}")
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
        assert f"--port {srv.port}" in " ".join(srv.cmd)
    finally:
        srv.stop(timeout_s=5)
        holder.close()


def test_a_port_the_caller_gave_is_kept_and_the_clash_reported(tmp_path):
    holder, taken = _occupied_port()
    srv = _fake(VllmServer("native", model=str(tmp_path), port=taken, log_path=str(tmp_path / "s.log")), taken)
    try:
        srv.start()
        with pytest.raises(ServerStartError, match="exited with status 1") as ei:
            srv.wait_ready(timeout_s=60, poll_s=0.05)
        assert "Address already in use" in ei.value.log_tail and srv.port == taken
    finally:
        srv.stop(timeout_s=5)
        holder.close()


def test_retries_are_bounded(tmp_path):
    holders = [_occupied_port() for _ in range(5)]
    ports = iter(p for _, p in holders[1:])
    srv = _fake(VllmServer("native", model=str(tmp_path), log_path=str(tmp_path / "s.log")), holders[0][1])
    import structgate.plugin.server as server_mod

    orig = server_mod.free_port
    server_mod.free_port = lambda: next(ports)  # every new port is taken too
    try:
        srv.start()
        with pytest.raises(ServerStartError, match="exited with status 1"):
            srv.wait_ready(timeout_s=60, poll_s=0.05)
        assert srv.port_retries == 0 and srv.port == holders[3][1]  # three new ports tried, then it gave up
    finally:
        server_mod.free_port = orig
        srv.stop(timeout_s=5)
        for s, _ in holders:
            s.close()
