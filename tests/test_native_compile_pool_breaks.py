"""Compile processes (:class:`structgate.native.backend.CompilePool`) under concurrent compiles:
one compile's ``compile_timeout_s`` stops the pool's workers; a compile from another thread that
was running (or waiting) in the same pool is not at fault and must still succeed, with the same
verdicts as ``jsonschema`` (it was a raw ``AttributeError`` from ``_drop`` on the already
shut-down executor, or ``CompileLimitError("compile_process", ... died (memory?))``)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError
from structgate.native.backend import CompilePool

from _pool_checks import race

pytestmark = pytest.mark.timeout(300)

BIG = {"type": "object", "properties": {
    f"p{i}": {"enum": [f"v{i}_{j}_" + "x" * (j % 7) for j in range(300)]} for i in range(120)}}
MED = {"type": "object", "properties": {
    f"p{i}": {"enum": [f"v{i}_{j}_" + "x" * (j % 7) for j in range(100)]} for i in range(40)},
    "required": ["p0"]}


@pytest.mark.parametrize("n", [1, 2])
def test_a_timeout_elsewhere_does_not_fail_a_concurrent_compile(n, llama3_vocab):
    v = llama3_vocab
    plain = get_backend("native", v, compile_processes=n, compile_cache_size=0)
    plain.compile(Constraint("choice", ["warm"]))  # the workers are up
    hasty = get_backend("native", v, compile_processes=n, compile_cache_size=0, compile_timeout_s=0.3)
    slow, g = race(lambda: hasty.compile(Constraint("json_schema", BIG)),
                   lambda: plain.compile(Constraint("json_schema", MED)), join_s=240)
    assert isinstance(slow, CompileLimitError) and slow.limit_name == "compile_timeout_s"
    assert not isinstance(g, Exception), f"the concurrent compile failed: {g!r}"
    val = jsonschema.Draft202012Validator(MED)
    for doc in [{"p0": "v0_3_xxx"}, {"p0": "v0_3_"}, {"p1": "v1_0_"}, {"p0": "v0_99_", "p39": "v39_1_x"},
                {"p0": "v0_0_", "p2": "v3_0_"}]:
        m = g.matcher()
        got = m.advance(v.encode(json.dumps(doc))) and m.is_accepting()
        assert got == val.is_valid(doc), doc


def test_dropping_a_pool_twice_is_harmless(llama3_vocab):
    p = CompilePool.get(1)
    get_backend("native", llama3_vocab, compile_processes=1, compile_cache_size=0).compile(
        Constraint("choice", ["x"]))
    CompilePool._drop(p)
    CompilePool._drop(p)  # was AttributeError: the shut-down executor's _processes is None


def teardown_module(module):
    for p in list(CompilePool._pools.values()):
        CompilePool._drop(p)
