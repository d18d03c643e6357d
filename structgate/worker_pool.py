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

A job whose deadline passes while it still waits in the queue is abandoned (it never runs) and
stops nothing; only a job that is running when its deadline passes has its pool's workers
terminated. At interpreter exit, on ``KeyboardInterrupt`` / ``SystemExit`` in a waiting caller, the
workers are terminated (not waited for); a worker whose parent died exits by itself; a child made
by ``os.fork()`` starts without the parent's pools.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any, Callable, ClassVar

from .errors import CompileLimitError

__all__ = ["WorkerPool", "ignore_sigint", "worker_count"]

#: seconds :meth:`WorkerPool._wait_ready` waits at most for the workers' start
START_WAIT_S = 60.0
#: abandoned job ids remembered per pool (a ring; a job waits behind at most a few others)
ABANDONED_RING = 256
#: seconds between a worker's checks that its parent process is still alive
PARENT_POLL_S = 1.0

_job_ids = itertools.count(1)

# worker-side state (set by _worker_init in each worker process)
_shared: tuple | None = None  # (lock, executing[n], abandoned[ABANDONED_RING])
_slot = 0


class _Abandoned:
    """A job's result when its caller gave it up before it started (the caller never reads it)."""


def _watch_parent(ppid: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != ppid:  # re-parented: the owner died (SIGKILL, OOM) without stopping us
            os._exit(1)


def _worker_init(shared: tuple, counter: Any, n: int, initializer: Callable | None, initargs: tuple) -> None:
    """Worker-side start: take a slot in the pool's shared table, watch the parent, then run the
    pool's own ``initializer``."""
    global _shared, _slot
    _shared = shared
    with shared[0]:
        _slot = counter.value % n
        counter.value += 1
    threading.Thread(target=_watch_parent, args=(os.getppid(),), name="structgate-parent-watch",
                     daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


def _run_job(job_id: int, fn: Callable, args: tuple) -> Any:
    """Worker-side: ``fn(*args)`` unless the caller already abandoned ``job_id`` (its deadline passed
    while it waited in the queue); the job is marked running in the shared table meanwhile."""
    if _shared is None:  # not started through _worker_init
        return fn(*args)
    lock, executing, abandoned = _shared
    with lock:
        if job_id in abandoned[:]:
            return _Abandoned()
        executing[_slot] = job_id
    try:
        return fn(*args)
    finally:
        with lock:
            executing[_slot] = 0


def ignore_sigint() -> None:
    """Worker-side: ignore SIGINT. Ctrl-C and vLLM's shutdown signal the whole process group; the
    owner stops its workers itself."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def worker_count(value: Any, *, engine: str, option: str, env: str, in_process: str, maximum: int) -> int:
    """A worker-process count option (native's ``compile_processes``, outlines-core's
    ``outlines_compile_processes``): ``value``, else the environment variable ``env``, else 0.
    Integers, integral floats and ASCII decimal integer strings are taken (:func:`~structgate._env.int_value`); ``engine`` and ``in_process`` word the
    message.

    Raises
    ------
    InvalidConstraintError
        Not an integer from 0 to ``maximum``; names the option, or the variable it came from.
    """
    from ._env import int_value, shown
    from .errors import InvalidConstraintError

    src = f"option {option!r}"
    if value is None:
        value = os.environ.get(env, "") or 0
        if os.environ.get(env):
            src = f"${env} (default of option {option!r})"
    n = int_value(value)
    if n is None:
        raise InvalidConstraintError(f"{engine} {src} must be an integer, got {shown(value)}")
    if not 0 <= n <= maximum:
        raise InvalidConstraintError(f"{engine} {src} must be 0 ({in_process}) to {maximum}, got {shown(value)}")
    return n


#: why a script's workers cannot start: multiprocessing's ``spawn`` imports the main script again in
#: each new process, so a script creating the backend at top level makes each worker try to start
#: workers of its own (multiprocessing refuses that while the worker bootstraps)
_SPAWN_IMPORTS = ("worker processes are started with multiprocessing's 'spawn', which imports the main "
                  "script again in each worker")
SPAWN_GUARD_HINT = (_SPAWN_IMPORTS + ": a script must create the backend (and compile) under "
                    "`if __name__ == \"__main__\":`")


def _check_not_bootstrapping() -> None:
    """Refuse to make a pool inside a worker that is still importing the parent's main script (the
    unguarded script of :data:`SPAWN_GUARD_HINT`), with that hint, instead of multiprocessing's
    ``RuntimeError`` deep in a start that the parent then retries and reports only as a pool that
    "could not be started".

    Raises
    ------
    CompileLimitError
        ``compile_process``, in such a worker.
    """
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        from .errors import CompileLimitError

        raise CompileLimitError("compile_process", "started while a worker imports the main script", 0,
                                SPAWN_GUARD_HINT)


def _start_failure_hint() -> str:
    """Why workers may have exited while starting, from the main module: :data:`SPAWN_GUARD_HINT`
    for a script file or a module run with ``-m`` (both imported again in each worker), a hint that
    a script read from standard input cannot be imported again; ``""`` otherwise (``python -c``, an
    interactive session: nothing is imported again)."""
    import sys

    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path:
        return ""
    if not os.path.isfile(path):  # "<stdin>"
        return f" ({_SPAWN_IMPORTS}: a script read from {path} cannot be; run it from a file)"
    return f" ({SPAWN_GUARD_HINT})"


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
        ctx = multiprocessing.get_context("spawn")
        # which job each worker runs (0: none) and the jobs given up while queued, under one lock
        self._shared = (ctx.Lock(), ctx.Array("q", n, lock=False), ctx.Array("q", ABANDONED_RING, lock=False))
        self._ring = 0
        self._ex = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init,
                                       initargs=(self._shared, ctx.Value("q", 0, lock=False), n,
                                                 initializer, initargs))
        _install_process_hooks()

    # -- the pools of a class ---------------------------------------------------------------------
    @classmethod
    def _get_or_make(cls, key: Any, make: Callable[[], "WorkerPool"]) -> "WorkerPool":
        """The live pool of this class under ``key``, made with ``make()`` when there is none (the
        replacement of a dropped pool is made the same way)."""
        _check_not_bootstrapping()
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
        if deadline is not None and _retries == 0:  # a replacement's start (after a drop) is charged
            deadline += waited
        job = next(_job_ids)
        try:
            fut = self._ex.submit(_run_job, job, fn, args)
        except (BrokenProcessPool, RuntimeError):
            type(self)._drop(self)
            if _retries >= 3:
                raise CompileLimitError("compile_process", "worker exited", self.n,
                                        "the compile worker processes could not be started"
                                        + _start_failure_hint()) from None
            out, w2 = self._replacement().run(fn, args, deadline, on_timeout, _retries + 1)
            return out, waited + w2
        # (a deadline years away, e.g. compile_timeout_s=1e18, is no limit: a wait past
        # threading.TIMEOUT_MAX raises OverflowError)
        timeout = None if deadline is None else min(max(deadline - time.monotonic(), 0.0), threading.TIMEOUT_MAX)
        try:
            return fut.result(timeout=timeout), waited
        except FutTimeout:
            if not self._give_up(job):  # still queued: it will not run, and nothing else is stopped
                fut.cancel()
                raise on_timeout() from None
            type(self)._drop(self)
            # the replacement starts now, off this thread: spawning blocks until the new workers
            # have read their arguments (0.5 s with outlines-core's vocabulary), and this compile's
            # error should not wait for that
            threading.Thread(target=self._replacement().warm, name="structgate-pool-warm", daemon=True).start()
            raise on_timeout() from None
        except (BrokenProcessPool, CancelledError):
            if self._dropped:
                # another compile's timeout (or death) stopped this pool's workers while this job
                # ran or waited: not this compile's failure; run it again on the replacement pool
                if _retries < 3:
                    out, w2 = self._replacement().run(fn, args, deadline, on_timeout, _retries + 1)
                    return out, waited + w2
                raise CompileLimitError("compile_process", "worker stopped", self.n,
                                        "the compile's worker was stopped by other compiles' timeouts "
                                        "4 times") from None
            type(self)._drop(self)
            raise CompileLimitError("compile_process", "worker exited", self.n,
                                    "the compile worker process died (memory?)") from None
        except (KeyboardInterrupt, SystemExit):
            # the caller is going away (Ctrl-C, a shutdown signal): stop the work instead of leaving
            # it to the executor's exit handler, which would wait for it
            type(self)._drop(self)
            raise

    def _give_up(self, job: int) -> bool:
        """Abandon ``job`` (past its deadline); True when it is running in a worker now (its workers
        must be stopped), False when it has not started (it never will) or has finished."""
        lock, executing, abandoned = self._shared
        with lock:
            abandoned[self._ring % ABANDONED_RING] = job
            self._ring += 1
            return job in executing[:]


def _all_pool_classes() -> list[type]:
    out, todo = [], [WorkerPool]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _drop_all() -> None:
    """Terminate every pool's workers (interpreter exit: the executors' own exit handler would wait
    for running compiles, minutes for a pathological one)."""
    for c in _all_pool_classes():
        for p in list(c.__dict__.get("_pools", {}).values()):
            try:
                c._drop(p)
            except Exception:  # noqa: BLE001 - exit goes on
                pass


def _forget_all_in_child() -> None:
    """After ``os.fork()``, in the child: the parent's pools (their workers, queues and locks) are not
    the child's; it makes its own."""
    for c in _all_pool_classes():
        if "_pools" in c.__dict__:
            c._pools = {}
        if "_lock" in c.__dict__:
            c._lock = threading.Lock()


_hooks_installed = False


def _install_process_hooks() -> None:
    """Once per process, after ``concurrent.futures.process`` registered its exit handler: ours runs
    before it (``threading._register_atexit`` calls its handlers last registered first), and forks
    forget the pools."""
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    reg = getattr(threading, "_register_atexit", None)
    if reg is not None:
        reg(_drop_all)
    else:  # pragma: no cover - CPython < 3.9
        import atexit

        atexit.register(_drop_all)
    os.register_at_fork(after_in_child=_forget_all_in_child)
