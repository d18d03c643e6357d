"""Head-to-head benchmarks of structgate backends (``structgate bench maskbench|jsts|regex``).

* :mod:`.corpora` — MaskBench JSONL, JSON-Schema-Test-Suite and regex corpus loaders;
* :mod:`.worker` — one isolated, persistent worker process per backend (time + memory limits);
* :mod:`.runner` — runs items on backends with a progress bar, builds the ``meta`` block;
* :mod:`.report` — aggregation into the documented JSON shapes, markdown tables;
* :mod:`.plots` — CDF and per-split PNG plots (matplotlib);
* :mod:`.oracle` — Python ``re`` in a subprocess with a time limit;
* :mod:`.commands` — :func:`bench_maskbench`, :func:`bench_jsts`, :func:`bench_regex`.

Heavy modules are imported lazily: ``import structgate_bench`` is cheap.
"""
from __future__ import annotations

__all__ = ["bench_maskbench", "bench_jsts", "bench_regex"]


def __getattr__(name):
    if name in __all__:
        from . import commands

        return getattr(commands, name)
    raise AttributeError(name)
