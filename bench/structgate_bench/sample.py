"""The MaskBench sample the in-process profiling scripts share (``bench/first_visits.py``,
``bench/gap_by_schema.py``): every STEP-th schema of a split, tokenized for one vocabulary."""
from __future__ import annotations

import argparse

from . import _vocab
from .corpora import load_maskbench, tokenize_items

#: the options ``structgate bench maskbench`` and ``bench jsts`` compile with (flexible JSON
#: whitespace, undeclared properties allowed as the specification says): a script that compiles
#: with other options measures other grammars (with the defaults an in-process compile p50 was
#: ~1.7 ms against the benchmark's ~3 ms, bench/README.md Day-21)
JSON_BENCH_OPTIONS = {"whitespace": "flexible", "additional_properties": True}


def bench_options(**extra) -> dict:
    """A fresh dict of :data:`JSON_BENCH_OPTIONS` with ``extra`` on top (e.g. ``threads=1``)."""
    return {**JSON_BENCH_OPTIONS, **extra}


def add_sample_args(ap: argparse.ArgumentParser, step: int) -> None:
    """``--corpus``, ``--prefix``, ``--step`` (default ``step``), ``--tokenizer``."""
    ap.add_argument("--corpus", required=True, help="MaskBench folder (*.jsonl)")
    ap.add_argument("--prefix", default="", help="only schemas whose id starts with this (a split)")
    ap.add_argument("--step", type=int, default=step, help="every STEP-th schema of the selection")
    ap.add_argument("--tokenizer", default="llama3")


def load_sample(ap: argparse.ArgumentParser, a: argparse.Namespace):
    """``(items, vocab, bitmask width in int32 words, EOS ids)`` of the parsed arguments ``a``
    (a ``--step`` below 1 is a usage error of ``ap``)."""
    if a.step < 1:
        ap.error(f"--step must be >= 1, got {a.step}")
    items = [i for i in load_maskbench(a.corpus) if i.id.startswith(a.prefix)][:: a.step]
    vocab = _vocab.load_bench_vocabulary(a.tokenizer)
    tokenize_items(items, vocab)
    return items, vocab, (vocab.vocab_size + 31) // 32, tuple(vocab.eos_token_ids)


def compiled_items(be, items):
    """``(item, compiled grammar)`` for each item ``be`` compiles, in order; items it refuses
    (any exception: a typed refusal, a limit) are skipped, as the profiling scripts skip them
    (no masks to time)."""
    from structgate import Constraint

    for it in items:
        try:
            g = be.compile(Constraint(it.kind, it.value, None))
        except Exception:  # noqa: BLE001  (refused schemas: nothing to walk)
            continue
        yield it, g
