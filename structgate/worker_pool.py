"""Worker processes for compiles that must not hold the caller's GIL: the mechanism shared by the
native backend's :class:`~structgate.native.backend.CompilePool` and outlines-core's index pool
(:class:`~structgate.adapters.outlines_core.IndexPool`).

Why: vLLM's engine core is one Python process. A compile run in one of its threads holds the GIL
for as long as it computes in pure Python, or for the whole of one C/Rust call (outlines-core's
``Index``), so every running request's step waits on it, and no deadline can stop a call already
running. In a worker process the compile runs on another core; the caller only waits on a future
(GIL released) and can stop the compile at its deadline by terminating the worker.

:class:`WorkerPool` is a ``spawn``-context :class:`~concurrent.futures.ProcessPoolExecutor` (no fork
of a multi-threaded engine) with: a start that can be begun early (:meth:`WorkerPool.warm`, not
charged to a compile's deadline), :meth:`WorkerPool.run` with a deadline (past it the pool's
workers are terminated and a replacement pool started: ``CompileLimitError`` from the caller's
``on_timeout``), ``CompileLimitError("compile_process")`` when a worker dies, and a retry on the
replacement for a job whose pool another job's timeout stopped. Pools are kept per subclass and
key (:meth:`WorkerPool._get_or_make`).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, ClassVar

from .errors import CompileLimitError

__all__ = ["WorkerPool", "ignore_sigint"]

#: seconds :meth:`WorkerPool._wait_ready` waits at most for the workers' start
START_WAIT_S = 60.0


def ignore_sigint() -> None:
    """Worker-side: ignore SIGINT. Ctrl-C and vLLM's shutdown signal the whole process group; the
    owner stops its workers itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ping() -> None:
    """A no-op job (starts a worker)."""


class WorkerPool:
    """``n`` worker processes (``spawn``) running compile jobs with a deadline.

    Subclasses define their own ``_pools`` (key -> pool) and ``_lock`` class attributes and a
    ``get`` that calls :meth:`_get_or_make`.

    Parameters
    ----------
    key : hashable
        The pool's key in its class's ``_pools``.
    n : int
        Number of worker processes.
    initializer : callable, optional
        Run once in each worker as it starts (imports, per-worker state such as a vocabulary),
        with ``initargs`` (pickled once per worker).
    warm_job : callable, optional
        The job :meth:`warm` submits once per worker (default: a no-op).
    """

    _pools: ClassVar[dict] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, key: Any, n: int, initializer: Callable | None = None, initargs: tuple = (),
                 warm_job: Callable | None = None) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.key = key
        self.n = n
        self._dropped = False  # set by _drop: its jobs fail with BrokenProcessPool / CancelledError
        self._ready: list = []
        self._warm_lock = threading.Lock()  # one warm() submits the warm jobs (a thread may warm a replacement)
        self._warm_job = warm_job or _ping
        self._remake: Callable[[], "WorkerPool"] | None = None  # set by _get_or_make
        self._ex = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=initializer, initargs=initargs)

    # -- the pools of a class ---------------------------------------------------------------------
    @classmethod
    def _get_or_make(cls, key: Any, make: Callable[[], "WorkerPool"]) -> "WorkerPool":
        """The live pool of this class under ``key``, made with ``make()`` when there is none (the
        replacement of a dropped pool is made the same way)."""
        with cls._lock:
            p = cls._pools.get(key)
            if p is None:
                p = make()
                p._remake = make
                cls._pools[key] = p
            return p

    def _replacement(self) -> "WorkerPool":
        """The live pool under this pool's key (a fresh one once this one is dropped)."""
        if self._remake is None:
            raise RuntimeError("a WorkerPool not made by _get_or_make has no replacement")
        return type(self)._get_or_make(self.key, self._remake)

    @classmethod
    def _drop(cls, pool: "WorkerPool") -> None:
        """Forget ``pool`` (the next ``get`` makes a fresh one) and terminate its workers; its running
        and queued jobs fail (the callers retry them on the replacement). Dropping twice is
        harmless."""
        with cls._lock:
            if cls._pools.get(pool.key) is pool:
                del cls._pools[pool.key]
        pool._dropped = True
        # ``_processes`` is None once the executor has shut down (a second drop of the same pool)
        procs = list((getattr(pool._ex, "_processes", None) or {}).values())
        pool._ex.shutdown(wait=False, cancel_futures=True)
        for pr in procs:
            try:
                pr.terminate()
            except Exception:  # already gone
                pass

    # -- start ------------------------------------------------------------------------------------
    def warm(self) -> None:
        """Start the workers (one ``warm_job`` each; returns once they are spawned, not started)."""
        with self._warm_lock:
            try:
                if not self._ready:
                    self._ready = [self._ex.submit(self._warm_job) for _ in range(self.n)]
            except RuntimeError:  # shut down meanwhile
                pass

    def _wait_ready(self) -> float:
        """Wait (at most ``START_WAIT_S``) for the workers' start; returns the seconds waited (a
        worker's start, about a second, is not charged to a compile's deadline)."""
        t = time.monotonic()
        for f in self._ready:
            try:
                f.result(timeout=START_WAIT_S)
            except Exception:  # a broken pool surfaces at submit / result in run()
                pass
        return time.monotonic() - t

    # -- jobs -------------------------------------------------------------------------------------
    def run(self, fn: Callable, args: tuple, deadline: float | None,
            on_timeout: Callable[[], BaseException], _retries: int = 0) -> tuple[Any, float]:
        """``(fn(*args) computed in a worker, seconds waited for the workers' start)``.

        ``deadline`` is a ``time.monotonic()`` value (None: no limit), moved later by the seconds
        waited for the workers' start (their spawn included). ``fn`` and ``args`` must pickle (module-level function).

        Raises
        ------
        Exception
            What ``fn`` raised in the worker (re-raised here, same type and message when it pickles).
        BaseException
            ``on_timeout()`` past ``deadline``: the pool's workers are terminated and a replacement
            pool is started.
        CompileLimitError
            ``compile_process`` when the worker died (memory?).
        """
        from concurrent.futures import CancelledError
        from concurrent.futures import TimeoutError as FutTimeout
        from concurrent.futures.process import BrokenProcessPool

        t = time.monotonic()
        self.warm()  # (spawning the workers, when not yet started, blocks until they read their arguments)
        self._wait_ready()
        waited = time.monotonic() - t
        if deadline is not None:
            deadline += waited
        try:
            fut = self._ex.submit(fn, *args)
        except (BrokenProcessPool, RuntimeError):
            type(self)._drop(self)
            if _retries >= 3:
                raise CompileLimitError("compile_process", "worker exited", self.n,
                                        "the compile worker processes could not be started") from None
            out, w2 = self._replacement().run(fn, args, deadline, on_timeout, _retries + 1)
            return out, waited + w2
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            return fut.result(timeout=timeout), waited
        except FutTimeout:
            type(self)._drop(self)
            # the replacement starts now, off this thread: spawning blocks until the new workers
            # have read their arguments (0.5 s with outlines-core's vocabulary), and this compile's
            # error should not wait for that
            threading.Thread(target=self._replacement().warm, name="structgate-pool-warm", daemon=True).start()
            raise on_timeout() from None
        except (BrokenProcessPool, CancelledError):
            if self._dropped and _retries < 3:
                # another compile's timeout (or death) stopped this pool's workers while this job
                # ran or waited: not this compile's failure; run it again on the replacement pool
                out, w2 = self._replacement().run(fn, args, deadline, on_timeout, _retries + 1)
                return out, waited + w2
            type(self)._drop(self)
            raise CompileLimitError("compile_process", "worker exited", self.n,
                                    "the compile worker process died (memory?)") from None
