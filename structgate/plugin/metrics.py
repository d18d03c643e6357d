"""structgate's series on vLLM's ``/metrics`` (Prometheus, through ``prometheus_client`` as vLLM).

vLLM serves ``/metrics`` from the API-server process(es), but structgate compiles and fills masks in
the engine-core process(es). So each process keeps its counters in memory (:func:`record_compile`,
:func:`record_compile_failure`, :func:`record_fill`, :func:`record_fallback`, cache figures) and a
daemon thread writes them, at most once a second and only when they changed, as one JSON file per
process (``<pid>.json``, written atomically) into the metrics folder ``$STRUCTGATE_METRICS_DIR``.
The plugin sets that variable in the first vLLM process (a fresh temporary folder, removed at its
exit) so every process vLLM starts inherits it. The API server's registry (whatever
``vllm.v1.metrics.prometheus.get_prometheus_registry`` returns: the default one, or the
multiprocess one under ``--api-server-count N``) gets a :class:`StructgateCollector` (ledger entry
``metrics-registry``) that sums those files at scrape time, each process once (the scraped
process's own figures fresh from memory, not also from its file), so every API server renders the
same totals. Under ``--api-server-count N`` the ``GET /metrics`` route is made to render that
registry (ledger entry ``metrics-multiproc-route``). Scrapes lag the engine by at most ~1 s.

Series (all prefixed ``structgate_``):

=====================================  =========  ==============================================
name                                   type       labels / meaning
=====================================  =========  ==============================================
``compile_seconds``                    histogram  ``backend``, ``kind``: one engine compile
                                                  (cache misses only)
``compile_failures_total``             counter    ``backend``, ``kind``, ``error`` (the error's
                                                  ``kind``: limit, syntax, unsupported, ...),
                                                  ``stage``: ``validate`` (refused by the API
                                                  server's request validation, HTTP 400 before
                                                  the engine sees it) or ``compile`` (the engine)
``decode_failures_total``              counter    ``backend``, ``error`` (the error's ``kind``),
                                                  ``limit`` (its ``limit_name``, or empty): a
                                                  request whose grammar failed during decoding
                                                  and then allowed only EOS
                                                  (:mod:`structgate.plugin.grammar_failure`)
``mask_fill_seconds``                  histogram  ``backend``: one step's bitmask fill (all rows)
``mask_fill_rows_total``               counter    ``backend``: rows filled
``fallbacks_total``                    counter    ``reason``: structgate took vLLM's slower path
``cache_hits_total`` / ``_misses_``    counter    ``backend``: compiled-grammar cache lookups
``forced_draft_tokens_total``          counter    ``backend``: grammar-forced speculative drafts
``cache_hit_rate``                     gauge      ``backend``: hits / (hits + misses)
``cache_entries`` / ``cache_bytes``    gauge      ``backend``: compiled grammars kept, their size
``engine_cache_entries`` / ``_bytes``  gauge      ``backend``, ``cache``: the engine's process-wide
                                                  caches shared by its grammars
                                                  (:meth:`Backend.engine_cache_stats`: native's
                                                  shared walks, class tries, regex nodes)
``engine_cache_hit_rate``              gauge      ``backend``, ``cache``: hits / lookups, where
                                                  the engine counts them
``info``                               gauge (1)  ``version``, ``backends``, ``patches``
=====================================  =========  ==============================================

Nothing here imports vLLM; ``prometheus_client`` is imported only by :class:`StructgateCollector`.
"""
from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterable

from ..vocab import Vocabulary

__all__ = ["ENV_DIR", "COMPILE_BUCKETS", "FILL_BUCKETS", "ensure_dir", "metrics_dir", "record_compile",
           "record_compile_failure", "record_decode_failure", "record_fill", "record_fallback", "register_cache",
           "set_info",
           "snapshot", "flush", "read_all", "StructgateCollector", "render_text"]

ENV_DIR = "STRUCTGATE_METRICS_DIR"

#: compile-time histogram buckets, seconds
COMPILE_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                      10.0, 30.0, 60.0)
#: per-step mask-fill histogram buckets, seconds
FILL_BUCKETS: tuple[float, ...] = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                   0.1, 0.25, 0.5)

_lock = threading.Lock()
_hist: dict[tuple, list] = {}          # (name, labels...) -> [bucket counts..., count, sum]
_counters: dict[tuple, float] = {}     # (name, labels...) -> value
_caches: list[tuple[str, Callable[[], dict]]] = []
_engine_caches: dict[str, Callable[[], dict]] = {}  # backend -> its engine_cache_stats (one per process)
_info: dict[str, str] = {}
_dirty = False
_writer: threading.Thread | None = None
_created_dir: str | None = None


# -- folder ----------------------------------------------------------------------------------------
def metrics_dir() -> str | None:
    """The metrics folder of this vLLM deployment (``$STRUCTGATE_METRICS_DIR``), or None."""
    return os.environ.get(ENV_DIR) or None


def ensure_dir() -> str:
    """Return the metrics folder, creating a temporary one (and setting ``$STRUCTGATE_METRICS_DIR``
    for the processes started from here) when none is set. The folder this process created is
    removed when it exits."""
    global _created_dir
    d = metrics_dir()
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    d = tempfile.mkdtemp(prefix="structgate-metrics-")
    os.environ[ENV_DIR] = d
    _created_dir = d
    creator = os.getpid()
    atexit.register(lambda: os.getpid() == creator and shutil.rmtree(d, ignore_errors=True))
    return d


# -- recording (engine side) -----------------------------------------------------------------------
def _observe(name: str, labels: tuple, value: float, buckets: tuple[float, ...]) -> None:
    global _dirty
    key = (name, *labels)
    with _lock:
        h = _hist.get(key)
        if h is None:
            h = _hist[key] = [0] * len(buckets) + [0, 0.0]
        for i, b in enumerate(buckets):
            if value <= b:
                h[i] += 1
        h[-2] += 1
        h[-1] += float(value)
        _dirty = True
    _start_writer()


def _inc(name: str, labels: tuple, n: float = 1) -> None:
    global _dirty
    key = (name, *labels)
    with _lock:
        _counters[key] = _counters.get(key, 0) + n
        _dirty = True
    _start_writer()


def record_compile(backend: str, kind: str, seconds: float) -> None:
    """One compile (a cache miss) of constraint ``kind`` took ``seconds``."""
    _observe("compile_seconds", (backend, kind), seconds, COMPILE_BUCKETS)


def record_compile_failure(backend: str, kind: str, error: str, stage: str = "compile") -> None:
    """A constraint of ``kind`` was refused by engine ``backend`` with an error of kind ``error``
    (``limit``, ``syntax``, ...), at ``stage`` ``"validate"`` (the API server's request validation)
    or ``"compile"`` (the engine core's compile). A request is counted once: one refused in
    validation never reaches the engine."""
    _inc("compile_failures_total", (backend, kind, error, stage))


def record_decode_failure(backend: str, error: str, limit: str = "") -> None:
    """A request's grammar failed during decoding (a mask fill or an advance raised an error of
    kind ``error``, ``limit`` its limit name if any) and was ended with EOS-only rows
    (:func:`structgate.plugin.grammar_failure.fail_grammar`). Counted once per request."""
    _inc("decode_failures_total", (backend, error, limit))


def record_fill(backend: str, seconds: float, rows: int) -> None:
    """One step's bitmask fill: ``rows`` rows in ``seconds``."""
    _observe("mask_fill_seconds", (backend,), seconds, FILL_BUCKETS)
    _inc("mask_fill_rows_total", (backend,), rows)


def record_fallback(reason: str, n: int = 1) -> None:
    """structgate took vLLM's (slower) path, for ``reason``."""
    _inc("fallbacks_total", (reason,), n)


def record_forced_drafts(backend: str, n: int) -> None:
    """``n`` grammar-forced tokens were proposed as speculative drafts (:mod:`structgate.plugin.drafter`)."""
    _inc("forced_draft_tokens_total", (backend,), n)


def record_cache(backend: str, hit: bool) -> None:
    """One compiled-grammar cache lookup."""
    _inc("cache_hits_total" if hit else "cache_misses_total", (backend,))


def register_cache(backend: str, stats: Callable[[], dict]) -> None:
    """Register a cache whose ``stats()`` returns ``{"entries": int, "bytes": int}`` (read at flush)."""
    with _lock:
        _caches.append((backend, stats))
    _start_writer()


def register_engine_caches(backend: str, stats: Callable[[], dict]) -> None:
    """Register an engine's process-wide caches: ``stats()`` returns ``{cache name: {"entries":
    int, "bytes": int?, "hits": int?, "misses": int?}}`` (:meth:`Backend.engine_cache_stats`, read
    at flush). Once per backend name and process: the caches are the process's, whatever the
    number of bridges over them."""
    with _lock:
        _engine_caches[backend] = stats
    _start_writer()


def set_info(**labels: str) -> None:
    """Labels of the ``structgate_info`` series (version, backends, patches)."""
    global _dirty
    with _lock:
        _info.update({k: str(v) for k, v in labels.items()})
        _dirty = True


def snapshot() -> dict:
    """This process's figures as a JSON-able dict (what :func:`flush` writes)."""
    with _lock:
        caches: dict[str, dict] = {}
        for backend, fn in list(_caches):
            try:
                st = fn()
            except Exception:  # noqa: BLE001 - a destroyed backend
                continue
            c = caches.setdefault(backend, {"entries": 0, "bytes": 0})
            c["entries"] += int(st.get("entries", 0))
            c["bytes"] += int(st.get("bytes", 0))
        engine: dict[str, dict] = {}
        for backend, fn in list(_engine_caches.items()):
            try:
                st = fn()
            except Exception:  # noqa: BLE001 - a broken third-party engine never breaks the metrics
                continue
            engine[backend] = {str(name): {k: int(v) for k, v in fig.items()
                                           if k in ("entries", "bytes", "hits", "misses")}
                               for name, fig in (st or {}).items()}
        return {"pid": os.getpid(), "time": time.time(),
                "hist": [[list(k), v] for k, v in _hist.items()],
                "counters": [[list(k), v] for k, v in _counters.items()],
                "caches": caches, "engine_caches": engine, "info": dict(_info)}


def flush() -> str | None:
    """Write this process's snapshot to the metrics folder now (atomically). Returns the path, or
    None when no folder is set."""
    global _dirty
    d = metrics_dir()
    if not d:
        return None
    snap = snapshot()
    path = os.path.join(d, f"{os.getpid()}.json")
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            # dumps, not dump: json.dump always takes the pure-Python encoder, whose nested
            # closures leave ~32 objects of cyclic garbage a call (in the writer thread, every
            # flush: seen in another test's count of garbage, CI at 56a2f6a)
            f.write(json.dumps(snap))
        os.replace(tmp, path)
    except OSError:
        return None
    with _lock:
        _dirty = False
    return path


def _start_writer() -> None:
    global _writer
    if _writer is not None or not metrics_dir():
        return
    with _lock:
        if _writer is not None:
            return

        def loop() -> None:
            while True:
                time.sleep(1.0)
                if _dirty or _caches or _engine_caches:
                    flush()

        _writer = threading.Thread(target=loop, name="structgate-metrics", daemon=True)
        _writer.start()
    atexit.register(flush)


# -- reading (API-server side) ------------------------------------------------------------------------
def read_all(directory: str | None = None) -> list[dict]:
    """Every process snapshot in the metrics folder (unreadable or torn files are skipped), plus
    this process's own figures (fresh) if it recorded any."""
    d = directory or metrics_dir()
    snaps: dict[int, dict] = {}
    if d and os.path.isdir(d):
        for name in os.listdir(d):
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    s = json.load(f)
                snaps[int(s["pid"])] = s
            except (OSError, ValueError, KeyError, TypeError):
                continue
    with _lock:
        mine = bool(_hist or _counters or _caches or _engine_caches or _info)
    if mine:
        snaps[os.getpid()] = snapshot()
    return list(snaps.values())


_HELP = {
    "compile_seconds": "structgate: wall time of one grammar compile in the engine (cache misses)",
    "compile_failures_total": "structgate: constraints refused, by error kind and stage (validate / compile)",
    "decode_failures_total": "structgate: requests whose grammar failed during decoding (then EOS only), by "
                             "error kind and limit",
    "mask_fill_seconds": "structgate: wall time of one engine step's bitmask fill (all rows)",
    "mask_fill_rows_total": "structgate: bitmask rows filled",
    "fallbacks_total": "structgate: times structgate took vLLM's slower path, by reason",
    "cache_hits_total": "structgate: compiled-grammar cache hits",
    "cache_misses_total": "structgate: compiled-grammar cache misses",
    "forced_draft_tokens_total": "structgate: grammar-forced tokens proposed as speculative drafts",
}
_LABELS = {"compile_seconds": ("backend", "kind"), "compile_failures_total": ("backend", "kind", "error", "stage"),
           "decode_failures_total": ("backend", "error", "limit"),
           "mask_fill_seconds": ("backend",), "mask_fill_rows_total": ("backend",),
           "fallbacks_total": ("reason",), "cache_hits_total": ("backend",), "cache_misses_total": ("backend",),
           "forced_draft_tokens_total": ("backend",)}
_BUCKETS = {"compile_seconds": COMPILE_BUCKETS, "mask_fill_seconds": FILL_BUCKETS}


def _aggregate(snaps: Iterable[dict]):
    hist: dict[tuple, list] = {}
    counters: dict[tuple, float] = {}
    caches: dict[str, dict] = {}
    engine: dict[tuple[str, str], dict] = {}  # (backend, cache) -> figures summed over processes
    info: dict[str, str] = {}
    for s in snaps:
        for k, v in s.get("hist", ()):
            k = tuple(k)
            cur = hist.get(k)
            hist[k] = list(v) if cur is None else [a + b for a, b in zip(cur, v)]
        for k, v in s.get("counters", ()):
            k = tuple(k)
            counters[k] = counters.get(k, 0) + v
        for b, c in s.get("caches", {}).items():
            t = caches.setdefault(b, {"entries": 0, "bytes": 0})
            t["entries"] += c.get("entries", 0)
            t["bytes"] += c.get("bytes", 0)
        for b, per in s.get("engine_caches", {}).items():
            for name, fig in per.items():
                t = engine.setdefault((b, name), {})
                for k, v in fig.items():
                    t[k] = t.get(k, 0) + v
        for k, v in s.get("info", {}).items():  # union of what each process reports
            if k in ("backends", "patches") and info.get(k) and v:
                v = ",".join(sorted(set(info[k].split(",")) | set(v.split(","))))
            info[k] = v if v else info.get(k, "")
    return hist, counters, caches, info, engine


class StructgateCollector:
    """A ``prometheus_client`` custom collector: the sum of every process snapshot at scrape time.

    Parameters
    ----------
    directory : str | None
        Metrics folder; default ``$STRUCTGATE_METRICS_DIR`` read at each scrape.
    """

    def __init__(self, directory: str | None = None):
        self.directory = directory

    def describe(self):  # no up-front description: families are produced at collect time
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        hist, counters, caches, info, engine = _aggregate(read_all(self.directory))
        for name in ("compile_seconds", "mask_fill_seconds"):
            fam = HistogramMetricFamily(f"structgate_{name}", _HELP[name], labels=_LABELS[name])
            buckets = _BUCKETS[name]
            for k, v in sorted(hist.items()):
                if k[0] != name:
                    continue
                cum = [(floatToGoString(b), v[i]) for i, b in enumerate(buckets)]
                cum.append(("+Inf", v[-2]))
                fam.add_metric(list(k[1:]), cum, v[-1])
            yield fam
        for name in ("compile_failures_total", "decode_failures_total", "mask_fill_rows_total", "fallbacks_total",
                     "cache_hits_total", "cache_misses_total", "forced_draft_tokens_total"):
            fam = CounterMetricFamily(f"structgate_{name[:-len('_total')]}", _HELP[name], labels=_LABELS[name])
            for k, v in sorted(counters.items()):
                if k[0] == name:
                    fam.add_metric(list(k[1:]), v)
            yield fam
        rate = GaugeMetricFamily("structgate_cache_hit_rate", "structgate: compiled-grammar cache hits / "
                                 "lookups", labels=["backend"])
        backends = {k[1] for k in counters if k[0] in ("cache_hits_total", "cache_misses_total")}
        for b in sorted(backends):
            h = counters.get(("cache_hits_total", b), 0)
            m = counters.get(("cache_misses_total", b), 0)
            rate.add_metric([b], h / (h + m) if h + m else 0.0)
        yield rate
        ent = GaugeMetricFamily("structgate_cache_entries", "structgate: compiled grammars cached", labels=["backend"])
        byt = GaugeMetricFamily("structgate_cache_bytes", "structgate: approximate bytes of the cached compiled "
                                "grammars", labels=["backend"])
        for b, c in sorted(caches.items()):
            ent.add_metric([b], c["entries"])
            byt.add_metric([b], c["bytes"])
        yield ent
        yield byt
        e_ent = GaugeMetricFamily("structgate_engine_cache_entries", "structgate: entries of the engines' "
                                  "process-wide caches shared by their grammars", labels=["backend", "cache"])
        e_byt = GaugeMetricFamily("structgate_engine_cache_bytes", "structgate: approximate bytes of the "
                                  "engines' process-wide caches", labels=["backend", "cache"])
        e_hit = GaugeMetricFamily("structgate_engine_cache_hit_rate", "structgate: hits / lookups of the "
                                  "engines' process-wide caches", labels=["backend", "cache"])
        for (b, name), fig in sorted(engine.items()):
            if "entries" in fig:
                e_ent.add_metric([b, name], fig["entries"])
            if "bytes" in fig:
                e_byt.add_metric([b, name], fig["bytes"])
            if "hits" in fig and "misses" in fig:
                n = fig["hits"] + fig["misses"]
                e_hit.add_metric([b, name], fig["hits"] / n if n else 0.0)
        yield e_ent
        yield e_byt
        yield e_hit
        if info:
            keys = sorted(info)
            fam = GaugeMetricFamily("structgate_info", "structgate: version, active backends and applied patches",
                                    labels=keys)
            fam.add_metric([info[k] for k in keys], 1.0)
            yield fam


def render_text(directory: str | None = None) -> str:
    """The structgate series in Prometheus text format (``structgate-vllm --metrics``, tests)."""
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry(auto_describe=False)
    reg.register(StructgateCollector(directory))
    return generate_latest(reg).decode()


def grammar_nbytes(compiled: Any) -> int:
    """Bytes held by a compiled grammar, for the ``cache_bytes`` gauge: its own
    ``memory_size_bytes`` (:attr:`structgate.CompiledGrammar.memory_size_bytes`, cheap: native
    sums its arrays) when it reports one, else :func:`approx_nbytes`."""
    try:
        n = int(getattr(compiled, "memory_size_bytes", 0) or 0)
    except Exception:  # noqa: BLE001 - a third-party grammar's failing property never breaks a compile
        n = 0
    return n if n > 0 else approx_nbytes(compiled)


#: objects :func:`approx_nbytes` visits at most (the walk holds the GIL, in the engine process)
APPROX_MAX_OBJECTS = 2000


def approx_nbytes(obj: Any, _depth: int = 0, _seen: set | None = None) -> int:
    """Approximate size in bytes of a compiled grammar that does not report its own
    (``memory_size_bytes`` 0): numpy arrays (``nbytes``), bytes, and containers / attributes two
    levels down, at most :data:`APPROX_MAX_OBJECTS` objects and 200 items of a container; the
    vocabulary (shared by every grammar of a backend) is not counted. A rough figure for the
    ``cache_bytes`` gauge; an object may report its own with an ``nbytes`` attribute or method."""
    seen = _seen if _seen is not None else set()
    if id(obj) in seen or len(seen) >= APPROX_MAX_OBJECTS or isinstance(obj, Vocabulary):
        return 0
    seen.add(id(obj))
    nb = getattr(obj, "nbytes", None)
    if isinstance(nb, int):
        return nb
    if callable(nb) and _depth == 0:
        try:
            return int(nb())
        except Exception:  # noqa: BLE001
            pass
    if isinstance(obj, (bytes, bytearray, str)):
        return sys.getsizeof(obj)
    if _depth >= 3:
        return sys.getsizeof(obj) if not hasattr(obj, "__dict__") else 0
    total = sys.getsizeof(obj) if isinstance(obj, (list, tuple, dict, set, frozenset)) else 0
    if isinstance(obj, dict):
        items = list(itertools.islice(obj.values(), 200))
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(itertools.islice(obj, 200))
    else:
        items = list(getattr(obj, "__dict__", {}).values())
        for s in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, s):
                items.append(getattr(obj, s))
    for it in items:
        if isinstance(it, (int, float, bool)) or it is None:
            continue
        total += approx_nbytes(it, _depth + 1, seen)
    return total
