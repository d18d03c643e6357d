"""Per-call micro-benchmarks of every registered backend (pytest-benchmark).

Run (not part of the CI suite; ``tests/`` is the test path)::

    .venv/bin/pytest bench/test_bench_backends.py --benchmark-only --benchmark-autosave
    .venv/bin/pytest-benchmark compare --group-by=group --columns=min,median,mean,max,rounds

Each benchmark is parametrised by backend name and put in a ``group`` per operation × schema, so
``compare --group-by=group`` lines the backends up. ``STRUCTGATE_BENCH_BACKENDS=a,b`` restricts the
backends (default: every available one). Tokenizer: ``STRUCTGATE_BENCH_TOKENIZER`` (default llama3).

Operations (all single-threaded, ``threads=1``):

* ``compile``: ``backend.compile`` of a fixed schema; a unique ``description`` per round defeats
  compile caches without changing the language;
* ``first_visit_mask``: ``fill_bitmask`` at a state never filled before (fresh grammar, advanced
  by a prefix, then one fill);
* ``fill_cached``: ``fill_bitmask`` at a state already filled once (engines with per-state caches
  hit them);
* ``advance``: one ``advance(token)`` from that state (fresh matcher per round, built in setup).
"""
from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

SCHEMAS = {
    "object": {"type": "object",
               "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                              "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}},
               "required": ["name", "age"]},
    "nested": {"type": "object",
               "properties": {"name": {"type": "string", "maxLength": 40},
                              "address": {"type": "object",
                                          "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "[0-9]{5}"},
                                                         "geo": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}},
                                          "required": ["street", "zip"]},
                              "kind": {"enum": ["home", "work", "other"]},
                              "active": {"type": "boolean"},
                              "score": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
               "required": ["name", "address", "kind"]},
    "enum": {"enum": [f"option-{i:02d}-{w}" for i, w in enumerate(["alpha", "beta", "gamma", "delta", "epsilon"] * 4)]},
}
#: a prefix that puts the matcher inside a string value (a large mask: most tokens allowed)
PREFIX = {"object": '{"name": "', "nested": '{"name": "', "enum": '"option-1'}

_counter = itertools.count()


def _backend_names() -> list[str]:
    env = os.environ.get("STRUCTGATE_BENCH_BACKENDS")
    if env:
        return [x.strip() for x in env.split(",") if x.strip()]
    from structgate_bench.runner import resolve_backends

    names, _ = resolve_backends(None, kind="json_schema")
    return names


BACKENDS = _backend_names()


@pytest.fixture(scope="module")
def vocab():
    from structgate_bench._vocab import load_bench_vocabulary

    return load_bench_vocabulary(os.environ.get("STRUCTGATE_BENCH_TOKENIZER", "llama3"))


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request, vocab):
    from structgate import get_backend

    try:
        return get_backend(request.param, vocab, threads=1, whitespace="flexible")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"{request.param}: {type(e).__name__}: {e}")


def _constraint(schema_name: str, unique: bool = False):
    from structgate import Constraint

    s = dict(SCHEMAS[schema_name])
    if unique:
        s["description"] = f"bench run {next(_counter)}"
    return Constraint.json_schema(s)


def _compile_or_skip(backend, schema_name: str, unique: bool = False):
    try:
        return backend.compile(_constraint(schema_name, unique))
    except Exception as e:  # noqa: BLE001 - an engine that cannot do the schema is skipped, not failed
        pytest.skip(f"{backend.name} cannot compile {schema_name}: {type(e).__name__}: {e}")


def _at_prefix(grammar, vocab, schema_name: str):
    m = grammar.matcher()
    ids = vocab.encode(PREFIX[schema_name])
    if not m.advance(ids):
        pytest.skip(f"{schema_name}: prefix {PREFIX[schema_name]!r} rejected")
    return m


def _bitmask(vocab):
    return np.full((1, (vocab.vocab_size + 31) // 32), -1, dtype=np.int32)


@pytest.mark.parametrize("schema_name", list(SCHEMAS))
def test_compile(benchmark, backend, schema_name):
    benchmark.group = f"compile-{schema_name}"
    _compile_or_skip(backend, schema_name, unique=True)  # warm-up (imports, lazy engine state)

    def setup():
        return (_constraint(schema_name, unique=True),), {}

    g = benchmark.pedantic(backend.compile, setup=setup, rounds=3, iterations=1)
    assert g is not None


@pytest.mark.parametrize("schema_name", list(SCHEMAS))
def test_first_visit_mask(benchmark, backend, vocab, schema_name):
    benchmark.group = f"first_visit_mask-{schema_name}"
    bm = _bitmask(vocab)
    _compile_or_skip(backend, schema_name, unique=True)

    def setup():
        g = _compile_or_skip(backend, schema_name, unique=True)
        return (_at_prefix(g, vocab, schema_name),), {}

    def fill(m):
        return m.fill_bitmask(bm, 0)

    benchmark.pedantic(fill, setup=setup, rounds=3, iterations=1)
    assert bm.any()


@pytest.mark.parametrize("schema_name", list(SCHEMAS))
def test_fill_cached(benchmark, backend, vocab, schema_name):
    benchmark.group = f"fill_cached-{schema_name}"
    g = _compile_or_skip(backend, schema_name)
    m = _at_prefix(g, vocab, schema_name)
    bm = _bitmask(vocab)
    m.fill_bitmask(bm, 0)  # first visit, not timed
    benchmark(m.fill_bitmask, bm, 0)
    assert bm.any()


@pytest.mark.parametrize("schema_name", list(SCHEMAS))
def test_advance(benchmark, backend, vocab, schema_name):
    benchmark.group = f"advance-{schema_name}"
    g = _compile_or_skip(backend, schema_name)
    # the next token of a valid continuation after the prefix
    cont = {"object": '{"name": "Ada", "age": 36}', "nested": '{"name": "Ada", "address": {"street": "x", "zip": "12345"}, "kind": "home"}',
            "enum": '"option-10-alpha"'}[schema_name]
    full = vocab.encode(cont)
    k = len(full) // 2
    pre, tok = full[:k], full[k]
    bm = _bitmask(vocab)

    def setup():
        m = g.matcher()
        assert m.advance(pre), f"{schema_name}: valid prefix rejected"
        m.fill_bitmask(bm, 0)  # as in decoding: the mask was computed before the token was sampled
        return (m,), {}

    def adv(m):
        return m.advance(tok)

    ok = benchmark.pedantic(adv, setup=setup, rounds=200, iterations=1)
    assert ok is True
