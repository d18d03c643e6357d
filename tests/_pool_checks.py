"""Checks the compile-pool tests share (native ``compile_processes``, outlines-core
``outlines_compile_processes``): two grammars walked side by side, and a slow compile racing an
innocent one."""
from __future__ import annotations

import random
import threading
from typing import Any, Callable

import numpy as np


def mask_ids(row: np.ndarray, vocab) -> np.ndarray:
    """Token ids allowed by one packed int32 bitmask row."""
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])


def walk_same_masks(ga, gb, vocab, seed: int, walks: int, steps: int) -> int:
    """Walk fresh matchers of ``ga`` and ``gb`` together by random allowed non-EOS tokens
    (``walks`` walks of up to ``steps`` tokens, ``random.Random(seed)``), asserting equal masks and
    acceptance at every step; returns the number of tokens taken."""
    a = np.zeros((1, (vocab.vocab_size + 31) // 32), np.int32)
    b = np.zeros_like(a)
    rng = random.Random(seed)
    taken = 0
    for _walk in range(walks):
        ma, mb = ga.matcher(), gb.matcher()
        for _ in range(steps):
            ma.fill_bitmask(a, 0)
            mb.fill_bitmask(b, 0)
            assert (a == b).all()
            assert ma.is_accepting() == mb.is_accepting()
            ids = [t for t in mask_ids(a[0], vocab).tolist() if t not in vocab.eos_token_ids]
            if not ids:
                break
            t = rng.choice(ids)
            assert ma.advance(t) and mb.advance(t)
            taken += 1
    return taken


def race(slow: Callable[[], Any], innocent: Callable[[], Any], join_s: float,
         innocent_delay_s: float = 0.0) -> tuple[Any, Any]:
    """Run ``slow`` and, once it started (plus ``innocent_delay_s``), ``innocent`` in two threads;
    returns their results, an exception raised standing for its result. Asserts that neither thread
    is still running after ``join_s`` seconds each."""
    out: dict = {}
    started = threading.Event()

    def run(name, fn, wait):
        if wait:
            started.wait()
            if innocent_delay_s:
                threading.Event().wait(innocent_delay_s)
        else:
            started.set()
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - the caller checks it
            out[name] = e

    ts = [threading.Thread(target=run, args=("slow", slow, False)),
          threading.Thread(target=run, args=("innocent", innocent, True))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(join_s)
    assert not any(t.is_alive() for t in ts), "a compile hung"
    return out["slow"], out["innocent"]


# -- jobs for WorkerPool tests (module level: a spawned worker imports them by name) --------------
def sleep_job(seconds: float) -> int:
    """Sleep, then return the worker's pid."""
    import os
    import time

    time.sleep(seconds)
    return os.getpid()


def touch_job(path: str) -> str:
    """Create ``path`` (evidence that the job ran)."""
    open(path, "w").close()
    return path
