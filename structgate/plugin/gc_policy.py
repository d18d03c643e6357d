"""What the cyclic garbage collector does around an engine compile (opt-in, engine-core process).

Measured (``bench/README.md``, "vLLM: one heavy schema while 4 requests stream"): a native compile
of a large schema allocates ~200,000 container objects with the collector paused
(:class:`structgate.native.pushdown.no_gc`). The first collection after it is resumed scans all of
them: a generation-0 pause of 230-330 ms, in whichever thread allocates next, holding the GIL, so the
engine core's step loop (and every stream) waits for it; the object survive into generations 1 and
2 and are scanned again there (100-370 ms each, growing with the number of cached grammars).
Compiled native grammars hold no reference cycles (dropping one frees it by reference counting:
``gc.collect()`` then finds 0 objects), and a compile leaves no cyclic garbage of its own, so they
never need the cyclic collector (both checked in tests/test_plugin_gc_policy.py).

With ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE=1``, :func:`run_compile` keeps the collector paused for
the whole compile and then moves everything allocated so far into the permanent generation
(``gc.freeze()``, as vLLM's engine core does after start-up) before resuming it: no pause. The cost:
cyclic garbage that existed in the process at that moment (not the grammar: other objects of the
engine) is never collected; reference counting still frees everything acyclic. Off by default.
"""
from __future__ import annotations

import gc
import os
from typing import Any, Callable

__all__ = ["ENV_FREEZE", "freeze_enabled", "run_compile"]

ENV_FREEZE = "STRUCTGATE_GC_FREEZE_AFTER_COMPILE"


def freeze_enabled() -> bool:
    """True when ``$STRUCTGATE_GC_FREEZE_AFTER_COMPILE`` is ``1`` / ``true`` / ``yes``."""
    return os.environ.get(ENV_FREEZE, "").strip().lower() in ("1", "true", "yes")


def run_compile(fn: Callable[[], Any]) -> Any:
    """``fn()``; with the freeze policy on, the collector stays paused during it and what it
    allocated is frozen (``gc.freeze()``) before the collector resumes. The collector's state
    (enabled or not) is restored. Exceptions of ``fn`` propagate (nothing is frozen then)."""
    if not freeze_enabled():
        return fn()
    was = gc.isenabled()
    gc.disable()
    try:
        out = fn()
        gc.freeze()
        return out
    finally:
        if was:
            gc.enable()
