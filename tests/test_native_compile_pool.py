"""The native backend's compile processes (``compile_processes`` / ``$STRUCTGATE_COMPILE_PROCESSES``,
:class:`structgate.native.backend.CompilePool`): grammars built in a worker give the same masks as
in-process ones (an independent construction of the same tables), typed errors arrive with their
type and message, ``compile_timeout_s`` stops a compile preemptively and the pool recovers."""
from __future__ import annotations

import json
import pickle
import time

import pytest

from structgate import Constraint, get_backend
from structgate.errors import (CompileLimitError, ConstraintKindError, GrammarSyntaxError, InvalidConstraintError,
                               UnsupportedFeatureError)
from structgate.native.backend import CompilePool

from _pool_checks import walk_same_masks

pytestmark = pytest.mark.timeout(300)

CONSTRAINTS = [
    Constraint("json_schema", {"type": "object", "properties": {"a": {"type": "integer", "minimum": 3},
                                                                "b": {"type": "string", "maxLength": 500}},
                               "required": ["a"]}),
    Constraint("json_schema", {"$ref": "#/$defs/t", "$defs": {"t": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}}}),
    Constraint("regex", r"(?:[a-z]+\d{2,4})+"),
    Constraint("regex", r"^ab$|^cd"),  # anchors inside: the eager-DFA path, built in the caller
    Constraint("choice", ["yes", "no", "maybe"]),
    Constraint("json_object", None),
    # pattern x length: an automaton generated on demand in the IR, compiled by the caller
    Constraint("json_schema", {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+)*$", "maxLength": 300}),
]


@pytest.fixture(scope="module")
def pool_backend(llama3_vocab):
    return get_backend("native", llama3_vocab, compile_processes=1, compile_cache_size=0)


@pytest.mark.parametrize("i", range(len(CONSTRAINTS)))
def test_worker_built_grammars_give_the_same_masks(i, pool_backend, llama3_vocab):
    v = llama3_vocab
    c = CONSTRAINTS[i]
    local = get_backend("native", v, compile_processes=0, compile_cache_size=0).compile(c)
    walk_same_masks(local, pool_backend.compile(c), v, seed=i, walks=3, steps=40)


@pytest.mark.parametrize("c,err,needle", [
    (Constraint("json_schema", {"type": "object", "minProperties": "x"}), GrammarSyntaxError, "minProperties"),
    (Constraint("regex", "(ab"), GrammarSyntaxError, ""),
    (Constraint("json_schema", {"type": "string", "pattern": "(?=a)b"}), UnsupportedFeatureError, "lookahead"),
    # (a body with an anchor inside is expanded, the eager DFA's path; (?:a?b?){3000000} and
    # (?:^|a){3000000} are counters of their non-empty forms since regex.parser.repeat_node)
    (Constraint("regex", "(?:a^|b){3000000}"), CompileLimitError, "max_nfa_states"),
])
def test_typed_errors_cross_the_process_boundary(c, err, needle, pool_backend, llama3_vocab):
    with pytest.raises(err) as remote:
        pool_backend.compile(c)
    with pytest.raises(err) as local:
        get_backend("native", llama3_vocab, compile_processes=0, compile_cache_size=0).compile(c)
    assert str(remote.value) == str(local.value) and needle in str(remote.value)
    assert type(remote.value) is type(local.value)


def test_every_error_type_pickles():
    for e in [UnsupportedFeatureError("oneOf", "detail", "/a"), CompileLimitError("max_nfa_states", 5, 4, "d"),
              GrammarSyntaxError("msg", "pat", 2, "rule x"), InvalidConstraintError("bad"),
              ConstraintKindError("native", "grammar", {"regex"})]:
        r = pickle.loads(pickle.dumps(e))
        assert type(r) is type(e) and str(r) == str(e) and r.__dict__ == e.__dict__


def test_timeout_stops_the_worker_and_the_pool_recovers(llama3_vocab):
    v = llama3_vocab
    # the pool's worker is up (pools are per process and size: this one is shared)
    get_backend("native", v, compile_processes=1, compile_cache_size=0).compile(Constraint("choice", ["warm"]))
    be = get_backend("native", v, compile_processes=1, compile_cache_size=0, compile_timeout_s=0.2)
    big = Constraint("json_schema", {"type": "object", "properties": {
        f"p{i}": {"enum": [f"v{i}_{j}_" + "x" * (j % 7) for j in range(300)]} for i in range(120)}})
    t = time.monotonic()
    with pytest.raises(CompileLimitError) as e:
        be.compile(big)
    assert e.value.limit_name == "compile_timeout_s"
    assert time.monotonic() - t < 5.0  # stopped at the deadline, not after the whole compile
    ok = be.compile(Constraint("json_schema", {"type": "integer"}))  # a fresh worker serves the next one
    m = ok.matcher()
    assert m.advance(v.encode(json.dumps(42))) and m.is_accepting()


def test_bad_compile_processes_is_a_typed_error(llama3_vocab):
    with pytest.raises(InvalidConstraintError, match="compile_processes"):
        get_backend("native", llama3_vocab, compile_processes="two")
    for bad in (-1, 10_000):  # never thousands of processes
        with pytest.raises(InvalidConstraintError, match="compile_processes"):
            get_backend("native", llama3_vocab, compile_processes=bad)
    assert not any(n > 32 for n in CompilePool._pools)


def teardown_module(module):
    for p in list(CompilePool._pools.values()):
        CompilePool._drop(p)
