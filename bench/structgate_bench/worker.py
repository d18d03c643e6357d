"""Isolated benchmark workers: one persistent subprocess per backend, restarted after a timeout,
an out-of-memory death or a crash.

Parent side: :class:`BackendWorker` (``start``, ``run(item, timeout_s)``, ``close``). Child side:
:func:`_worker_main`. They talk over a :func:`multiprocessing.Pipe` (spawn context, so no engine
thread pool is ever forked). In the child:

* ``resource.setrlimit(RLIMIT_AS, max_memory_mb)`` caps the address space, so a runaway compile
  dies with ``MemoryError`` / ``std::bad_alloc`` / a Rust allocation abort instead of taking the
  machine down;
* the thread env vars (``OMP_NUM_THREADS``, ``RAYON_NUM_THREADS``, ``MKL_NUM_THREADS``,
  ``OPENBLAS_NUM_THREADS``, ``TOKENIZERS_PARALLELISM``, ``MALLOC_ARENA_MAX``) are set before any
  import, and the backend gets ``threads=N`` (XGrammar's compiler pool; torch ``set_num_threads``);
* stderr goes to a log file that the parent reads to classify a death (OOM vs crash).

The walk (the MaskBench method, guidance-ai/jsonschemabench ``maskbench``): for each token of the
serialised instance, time ``fill_bitmask`` + bit check + ``advance``; at the end fill once more and
require an EOS bit for acceptance (then advance by EOS). One sample per step, nanoseconds.

Item (dict, picklable)::

    {"id": str, "kind": "json_schema"|"regex"|..., "value": schema-or-pattern,
     "tests": [{"ids": [int, ...]} , ...]}

Result (dict)::

    {"id", "status": "ok"|"compile_error"|"timeout"|"oom"|"crash",
     "phase": "compile"|"walk"|None, "ttfm_ns": int|None, "error_kind": str|None, "error": str|None,
     "tests": [{"accepted": bool, "rejected_at": int|None, "n_tokens": int,
                "mismatch": bool, "error": str|None}],
     "tbm_ns": numpy.ndarray[int64]}
"""
from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = ["BackendWorker", "WorkerStartError", "THREAD_ENV_VARS", "thread_env"]

#: env vars set in every worker to pin engine thread pools
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

_OOM_MARKERS = ("memory allocation of", "bad_alloc", "MemoryError", "Cannot allocate memory",
                "out of memory", "std::length_error")


class WorkerStartError(RuntimeError):
    """The worker could not create the backend (not installed, import error, init crash)."""


#: held while the environment is changed for a spawn: os.environ is process-wide, and two scheduler
#: slots starting workers at once would otherwise restore each other's values mid-spawn
_ENV_LOCK = threading.Lock()


@contextmanager
def thread_env(threads: int):
    """Temporarily set the thread env vars (inherited by spawned children); one caller at a time
    (the environment is process-wide)."""
    with _ENV_LOCK:
        saved = {k: os.environ.get(k) for k in (*THREAD_ENV_VARS, "TOKENIZERS_PARALLELISM", "MALLOC_ARENA_MAX")}
        try:
            for k in THREAD_ENV_VARS:
                os.environ[k] = str(threads)
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
            os.environ["MALLOC_ARENA_MAX"] = "2"
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _is_oom_exc(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    msg = f"{type(e).__name__}: {e}"
    return any(m in msg for m in _OOM_MARKERS)


def _error_kind(e: BaseException) -> str:
    from structgate.errors import StructgateError

    if isinstance(e, StructgateError):
        return getattr(e, "kind", "error")
    return f"engine:{type(e).__name__}"


# ------------------------------------------------------------------------------------------ child
def _make_backend(name: str, vocab, options: dict):
    if ":" in name:  # "module:factory" (plugins that are not registered; harness tests)
        import importlib

        mod, _, attr = name.partition(":")
        return getattr(importlib.import_module(mod), attr)(vocab, **options)
    from structgate.backends.registry import get_backend

    return get_backend(name, vocab, **options)


def _walk(grammar, tests: list[dict], eos_ids: tuple[int, ...], width: int) -> tuple[list[dict], np.ndarray]:
    pc = time.perf_counter_ns
    samples: list[int] = []
    add = samples.append
    out = []
    bm = np.empty((1, width), dtype=np.int32)
    row = bm[0]
    eos0 = eos_ids[0]
    for t in tests:
        ids = t["ids"]
        if ids is None:  # could not be tokenised: not walked
            out.append({"accepted": None, "rejected_at": None, "n_tokens": 0, "mismatch": False, "error": None,
                        "skipped": True})
            continue
        rec = {"accepted": False, "rejected_at": None, "n_tokens": len(ids), "mismatch": False, "error": None}
        try:
            m = grammar.matcher()
            i = 0
            for tok in ids:
                t0 = pc()
                m.fill_bitmask(bm, 0)
                ok = (int(row[tok >> 5]) >> (tok & 31)) & 1
                adv = m.advance(tok) if ok else False
                add(pc() - t0)
                if not ok or not adv:
                    rec["rejected_at"] = i
                    rec["mismatch"] = bool(ok and not adv)
                    break
                i += 1
            else:
                t0 = pc()
                m.fill_bitmask(bm, 0)
                eos_ok = any((int(row[e >> 5]) >> (e & 31)) & 1 for e in eos_ids)
                adv = m.advance(eos0) if eos_ok else False
                add(pc() - t0)
                if eos_ok and adv:
                    rec["accepted"] = True
                else:
                    rec["rejected_at"] = len(ids)
                    rec["mismatch"] = bool(eos_ok and not adv)
        except MemoryError:
            raise
        except Exception as e:  # an engine failing mid-walk: recorded, the worker goes on
            if _is_oom_exc(e):
                raise MemoryError(str(e)) from e
            rec["error"] = f"{type(e).__name__}: {e}"[:500]
        out.append(rec)
    return out, np.asarray(samples, dtype=np.int64)


def _worker_main(conn, config: dict) -> None:  # pragma: no cover - runs in the child
    log_path = config.get("log_path")
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)
        os.close(fd)
    mb = config.get("max_memory_mb") or 0
    if mb > 0:
        import resource

        lim = int(mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    try:
        import sys

        if "torch" in sys.modules or config.get("torch_threads"):
            import torch

            torch.set_num_threads(int(config.get("threads", 1)))
        from structgate.vocab import Vocabulary

        payload = conn.recv()
        vocab = Vocabulary(**payload)
        t0 = time.perf_counter()
        options = dict(config.get("options") or {})
        options.setdefault("threads", int(config.get("threads", 1)))
        backend = _make_backend(config["backend"], vocab, options)
        init_s = time.perf_counter() - t0
        conn.send(("ready", {"init_s": init_s, "pid": os.getpid()}))
    except BaseException as e:  # noqa: BLE001
        conn.send(("init_error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"))
        return
    from structgate.backends.interface import Constraint

    width = (vocab.vocab_size + 31) // 32
    eos = tuple(vocab.eos_token_ids)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        item = msg
        res: dict[str, Any] = {"id": item["id"], "status": "ok", "phase": "compile", "ttfm_ns": None,
                               "error_kind": None, "error": None, "tests": [], "tbm_ns": np.zeros(0, np.int64)}
        try:
            c = Constraint(item["kind"], item["value"], item.get("grammar_format"))
            t0 = time.perf_counter_ns()
            grammar = backend.compile(c)
            res["ttfm_ns"] = time.perf_counter_ns() - t0
        except MemoryError as e:
            res.update(status="oom", error=f"MemoryError: {e}"[:500])
            conn.send(("done", res))
            continue
        except Exception as e:  # noqa: BLE001
            if _is_oom_exc(e):
                res.update(status="oom", error=f"{type(e).__name__}: {e}"[:500])
            else:
                res.update(status="compile_error", error_kind=_error_kind(e), error=f"{type(e).__name__}: {e}"[:500])
            conn.send(("done", res))
            continue
        conn.send(("compiled", res["ttfm_ns"]))
        res["phase"] = "walk"
        try:
            res["tests"], res["tbm_ns"] = _walk(grammar, item["tests"], eos, width)
            res["phase"] = None
        except MemoryError as e:
            res.update(status="oom", error=f"MemoryError: {e}"[:500])
        del grammar
        conn.send(("done", res))


# ----------------------------------------------------------------------------------------- parent
class BackendWorker:
    """A persistent worker process for one backend, restarted as needed.

    Parameters
    ----------
    backend : str
        Registry name (or ``"module:factory"``).
    vocab_payload : dict
        ``Vocabulary`` constructor kwargs without the encoder (picklable).
    options : dict
        Backend options (:class:`~structgate.CompileOptions` fields).
    threads : int
        Thread count for the engine (env vars + ``threads`` option).
    max_memory_mb : int
        ``RLIMIT_AS`` of the worker, MiB (``<= 0``: no limit).
    init_timeout_s : float
        Limit on process start + backend creation, seconds.
    """

    def __init__(self, backend: str, vocab_payload: dict, options: dict | None = None, *, threads: int = 1,
                 max_memory_mb: int = 4096, init_timeout_s: float = 300.0):
        self.backend = backend
        self.vocab_payload = vocab_payload
        self.options = dict(options or {})
        self.threads = threads
        self.max_memory_mb = max_memory_mb
        self.init_timeout_s = init_timeout_s
        self.proc = None
        self.conn = None
        self.init_s: list[float] = []
        self.restarts = 0
        fd, self.log_path = tempfile.mkstemp(prefix=f"structgate-bench-{backend.replace(':', '_').replace('/', '_')}-",
                                             suffix=".log")
        os.close(fd)
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process and create the backend. Raises :class:`WorkerStartError`."""
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        config = {"backend": self.backend, "options": self.options, "threads": self.threads,
                  "max_memory_mb": self.max_memory_mb, "log_path": self.log_path}
        with thread_env(self.threads):
            proc = ctx.Process(target=_worker_main, args=(child, config), daemon=True,
                               name=f"structgate-bench-{self.backend}")
            proc.start()
        child.close()
        self.proc, self.conn = proc, parent
        try:
            parent.send(self.vocab_payload)
            if not parent.poll(self.init_timeout_s):
                self._kill()
                raise WorkerStartError(f"backend {self.backend!r}: worker did not start in {self.init_timeout_s:.0f} s")
            tag, info = parent.recv()
        except (EOFError, OSError, BrokenPipeError) as e:
            self._kill()
            raise WorkerStartError(f"backend {self.backend!r}: worker died during start ({e}); "
                                   f"log: {self._log_tail()}") from e
        if tag != "ready":
            self._kill()
            raise WorkerStartError(f"backend {self.backend!r}: {info}")
        self.init_s.append(float(info["init_s"]))

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self._kill()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    def _kill(self) -> None:
        p = self.proc
        if p is not None:
            if p.is_alive():
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.join(10)
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.proc = self.conn = None

    def _log_tail(self, n: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    # -- one item --------------------------------------------------------------------------------
    def run(self, item: dict, timeout_s: float) -> dict:
        """Compile ``item`` and walk its tests within ``timeout_s`` (compile + walk), isolated.

        Returns the result dict described in the module docstring; on a timeout, OOM or crash the
        worker is killed / reaped and restarted before the next item (lazily).
        """
        if self.proc is None or not self.proc.is_alive():
            if self.proc is not None:
                self._kill()
            self.restarts += 1 if self.init_s else 0
            self.start()
        log_mark = self._log_size()
        base = {"id": item["id"], "status": "ok", "phase": "compile", "ttfm_ns": None, "error_kind": None,
                "error": None, "tests": [], "tbm_ns": np.zeros(0, np.int64)}
        t_start = time.perf_counter()
        deadline = t_start + timeout_s
        ttfm = None
        try:
            self.conn.send(item)
            while True:
                left = deadline - time.perf_counter()
                if left <= 0 or not self.conn.poll(left):
                    self._kill()
                    base.update(status="timeout", ttfm_ns=ttfm, error=f"time limit {timeout_s:g} s",
                                phase="compile" if ttfm is None else "walk")
                    base["elapsed_s"] = time.perf_counter() - t_start
                    return base
                tag, payload = self.conn.recv()
                if tag == "compiled":
                    ttfm = payload
                    continue
                payload["elapsed_s"] = time.perf_counter() - t_start
                if payload["status"] == "oom":
                    self._kill()  # a process that hit its address-space cap is not trusted further
                return payload
        except (EOFError, OSError, BrokenPipeError):
            proc = self.proc
            if proc is not None:
                proc.join(5)
            code = proc.exitcode if proc is not None else None
            tail = self._log_tail()
            new_log = tail if self._log_size() > log_mark else ""
            oom = any(m in new_log for m in _OOM_MARKERS) or code == -signal.SIGKILL
            self._kill()
            base.update(status="oom" if oom else "crash", ttfm_ns=ttfm,
                        phase="compile" if ttfm is None else "walk",
                        error=f"worker died (exit code {code}): {new_log.strip()[-300:]}")
            base["elapsed_s"] = time.perf_counter() - t_start
            return base
