"""The opt-in GC policy around engine compiles (structgate.plugin.gc_policy): with it on, what a
compile allocated is frozen before the collector resumes (no generation-0 pause afterwards), the
collector's state is restored, and a native compiled grammar holds no reference cycles (so freezing
it leaks nothing: dropping it frees it by reference counting)."""
from __future__ import annotations

import gc

import pytest

from structgate import Constraint
from structgate.plugin import gc_policy


def _alloc():
    return [[i, (i,)] for i in range(50_000)]


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(gc_policy.ENV_FREEZE, raising=False)
    before = gc.get_freeze_count()
    assert len(gc_policy.run_compile(_alloc)) == 50_000
    assert gc.get_freeze_count() == before


def test_on_freezes_and_restores(monkeypatch):
    monkeypatch.setenv(gc_policy.ENV_FREEZE, "1")
    assert gc.isenabled()
    try:
        out = gc_policy.run_compile(_alloc)
        assert gc.isenabled()
        assert gc.get_count()[0] < 1000  # the young generation holds nothing left to scan
        assert gc.get_freeze_count() >= 50_000
        del out
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        gc_policy.run_compile(lambda: None)
        assert not gc.isenabled()  # a disabled collector stays disabled
    finally:
        gc.enable()
        gc.unfreeze()


def test_on_error_nothing_frozen(monkeypatch):
    monkeypatch.setenv(gc_policy.ENV_FREEZE, "yes")
    gc.unfreeze()
    before = gc.get_freeze_count()

    def boom():
        _alloc()
        raise ValueError("x")

    try:
        gc_policy.run_compile(boom)
    except ValueError:
        pass
    assert gc.get_freeze_count() == before and gc.isenabled()


_NO_CYCLE_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {
        "type": "string", "maxLength": 8}}, "c": {"$ref": "#"}}, "required": ["a"]},
    # a root rule with deferred subtrees left unbuilt, and called rules never reached
    {"type": "object", "properties": {f"p{i}": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "string"}, "z": {"$ref": "#/$defs/t"}}} for i in range(12)},
     "$defs": {"t": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#/$defs/t"}}]}}},
    # counters generated on demand (a dynamic grammar)
    {"type": "object", "properties": {"a": {"type": "integer"}, "s": {"type": "string", "maxLength": 500},
                                      "t": {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+)*$", "maxLength": 300}}},
]


#: run in a fresh interpreter: in the suite's worker, other tests' threads may leave cyclic garbage
#: of their own between the two collections below, which the count here must not see (CI at
#: 56a2f6a: 32 objects, most likely the metrics writer thread's ``json.dump``, 32 objects a flush:
#: fixed, tests/test_vllm_metrics.py::test_flush_leaves_no_cyclic_garbage). Each schema twice:
#: cold, then with every process-wide cache filled by the first round
_NO_CYCLE_CHECK = r"""
import collections, gc, json, sys
from structgate import Constraint, load_vocabulary
from structgate.native.backend import NativeBackend

vocab = load_vocabulary("llama3")
be = NativeBackend(vocab, compile_cache_size=0)
out = []
for rnd in ("cold", "warm"):
    for i, schema in enumerate(json.loads(sys.argv[1])):
        gc.collect()
        g = be.compile(Constraint.json_schema(schema))
        m = g.matcher()
        m.allowed_token_ids()
        m.advance(vocab.encode('{"a": 1'))
        m.allowed_token_ids()
        # anything else left so far collected first (a compile leaves nothing:
        # test_native_compile_leaves_no_cyclic_garbage), so that the count below is the grammar's
        # and matcher's
        while gc.collect():
            pass
        del g, m
        gc.set_debug(gc.DEBUG_SAVEALL)
        n = gc.collect()
        gc.set_debug(0)
        kinds = collections.Counter(type(o).__qualname__ for o in gc.garbage)
        gc.garbage.clear()
        out.append([rnd, i, n, dict(kinds.most_common(8))])
print(json.dumps(out))
"""


def test_native_compiled_grammar_has_no_cycles():
    """Dropping a compiled grammar and its matcher (after masks and an advance) leaves no cyclic
    garbage: it is freed by reference counting alone, for each schema of :data:`_NO_CYCLE_SCHEMAS`
    (ids ``recursive``, ``deferred``, ``dynamic``), cold and warm."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _NO_CYCLE_CHECK, json.dumps(_NO_CYCLE_SCHEMAS)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rounds = json.loads(proc.stdout.strip().splitlines()[-1])
    names = ["recursive", "deferred", "dynamic"]
    assert len(rounds) == 2 * len(names)
    cyclic = [(rnd, names[i], n, kinds) for rnd, i, n, kinds in rounds if n]
    assert not cyclic, cyclic


#: what a native compile runs through: counters (count_large_repeats), a pattern with length bounds
#: (the code-point automata of json_schema._pattern/_automata), anchors at a regex's edges
#: (regex.nfa._strip_edge_anchors), a GBNF and a Lark grammar, JSON mode. Each entry ``[kind,
#: value]`` or ``[kind, value, options]``: the backend's options (``backend``: which one, by
#: registry name; native by default). A compile that raises is counted too: the error (its type
#: name, in the output) dropped before the collection, as a caller that refuses the request does
_COMPILE_GARBAGE_CHECK = r"""
import gc, json, sys
from structgate import Constraint, load_vocabulary
from structgate.backends.registry import get_backend
from structgate.native.backend import NativeBackend

vocab = load_vocabulary("llama3")
cases = json.loads(sys.argv[1])
bes = []
for case in cases:
    opts = dict(case[2]) if len(case) > 2 else {}
    name = opts.pop("backend", None)
    be = get_backend(name, vocab, **opts) if name else NativeBackend(vocab, compile_cache_size=0, **opts)
    for n in getattr(be, "chain", ()):  # structgate-auto: its engines made (and imported) up front
        be.engine(n)
    bes.append(be)
out = []
for rnd in ("cold", "warm"):
    for case, be in zip(cases, bes):
        kind, value = case[:2]
        c = Constraint.grammar(value) if kind == "grammar" else Constraint(kind, value, None)
        if hasattr(be, "clear_cache"):
            be.clear_cache()
        gc.collect()
        gc.disable()
        err = None
        try:
            try:
                g = be.compile(c)
                g.matcher().allowed_token_ids()
                del g
            except Exception as e:
                err = type(e).__name__
            gc.set_debug(gc.DEBUG_SAVEALL)
            n = gc.collect()
        finally:
            gc.set_debug(0)
            gc.enable()
        fns = sorted({o.__qualname__ for o in gc.garbage if type(o).__name__ == "function"})
        gc.garbage.clear()
        out.append([rnd, kind, n, fns, err])
print(json.dumps(out))
"""

#: overlapping oneOf branches, compiled exactly (allOf [A, not B]: _union._negation_in kept the
#: refusal of its first try)
_ONEOF_OVERLAP = {"oneOf": [{"type": "integer", "minimum": 5}, {"type": "integer", "maximum": 10}]}

_COMPILE_GARBAGE_CONSTRAINTS = [
    ["json_schema", schema] for schema in _NO_CYCLE_SCHEMAS] + [
    ["json_schema", {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$",
                                                             "minLength": 3, "maxLength": 40}}}],
    ["regex", r"^[a-z]+@[a-z]+\.(com|org)$"],
    ["regex", r"(?:.{100,}|\d)+"],
    ["grammar", 'root ::= "a" x\nx ::= [0-9]{200,}'],
    ["grammar", 'start: "[" item ("," item)* "]"\nitem: /[a-z]{1,300}/ | start\n'],
    ["json_object", None],
    # the cases below each left ~3-3,000 objects a compile (a break-it finding)
    ["json_schema", _ONEOF_OVERLAP],
    # a piece in a float multipleOf's left-out zone (_type_number: the piece's refusal was kept)
    ["json_schema", {"type": "integer", "multipleOf": 3.0, "minimum": 0, "maximum": 2**53 + 100,
                     "not": {"const": 2**53 + 50}}],
    # a few multiples enumerated (_literals_text's recursive trie)
    ["json_schema", {"type": "integer", "multipleOf": 100003, "minimum": 0, "maximum": 1000000}],
    # members in any order (_members_any_order's recursive after)
    ["json_schema", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
     {"property_order": "any"}],
    ["structural_tag", {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": _ONEOF_OVERLAP}}],
]


def test_native_compile_leaves_no_cyclic_garbage():
    """A native compile (and its first mask) leaves nothing for the cyclic collector: its
    temporaries are freed by reference counting. Under ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE``
    (:func:`gc_policy.run_compile`) cyclic garbage left by a compile would be frozen for good: the
    local recursive functions of count_large_repeats, the pattern automata and the regex anchors'
    strip left ~70-130 objects a compile. In a fresh interpreter, each constraint cold and warm."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _COMPILE_GARBAGE_CHECK, json.dumps(_COMPILE_GARBAGE_CONSTRAINTS)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rounds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(rounds) == 2 * len(_COMPILE_GARBAGE_CONSTRAINTS)
    assert not [r for r in rounds if r[4]], rounds  # each compiles
    left = [r for r in rounds if r[2]]
    assert not left, left


def _garbage_rounds(cases) -> list:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _COMPILE_GARBAGE_CHECK, json.dumps(cases)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rounds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(rounds) == 2 * len(cases)
    return rounds


#: refused compiles: ``[kind, value, options, the error's type]``
_REFUSED_COMPILES = [
    # oneOf with overlapping branches and no exact form ("a@b" matches both; not format has none)
    ["json_schema", {"oneOf": [{"format": "email"}, {"pattern": "@"}]}, {}, "UnsupportedFeatureError"],
    # not anyOf with no branch negatable (_negation._negate_all kept the refusals in a list)
    ["json_schema", {"not": {"anyOf": [{"format": "email"}, {"multipleOf": 0.5}]}}, {},
     "UnsupportedFeatureError"],
    # every piece in a float multipleOf's left-out zone (_type_number: the refusal re-raised from a local)
    ["json_schema", {"type": "integer", "multipleOf": 1e-5, "not": {"const": 5}}, {}, "UnsupportedFeatureError"],
    # an NFA over its state limit, met inside json_schema._automata.from_ast's recursive build
    ["json_schema", {"type": "object", "propertyNames": {"pattern": "^(ab){600}$"}}, {"max_product_states": 50},
     "CompileLimitError"],
]


def test_refused_native_compile_leaves_no_cyclic_garbage():
    """A refused compile leaves nothing for the cyclic collector once its error is dropped: no
    exception kept in a local of a frame its own traceback holds (a caught refusal kept to re-raise
    or to word the final error), no local recursive function left linked when the compile raises.
    Under ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE`` that garbage was frozen by the next compile (~70-90
    objects a refusal). Fresh interpreter, cold and warm."""
    rounds = _garbage_rounds([c[:3] for c in _REFUSED_COMPILES])
    for r, case in zip(rounds, _REFUSED_COMPILES * 2):
        assert r[4] == case[3], (r, case)
    left = [r for r in rounds if r[2]]
    assert not left, left


def test_auto_fallback_compile_leaves_no_cyclic_garbage():
    """structgate-auto compiling with a fallback (the first engine refuses, the next compiles)
    leaves nothing for the cyclic collector: the first engine's refusal (whose traceback holds the
    auto backend's compile frame) is not kept in that frame (116 objects a compile before, frozen
    for good under ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE`` since the compile succeeds); nor when the
    whole chain refuses."""
    pytest.importorskip("outlines_core")
    auto = {"backend": "structgate-auto", "auto_chain": "structgate-outlines-core, native"}
    rounds = _garbage_rounds([["json_object", None, auto],
                              ["json_schema", {"oneOf": [{"format": "email"}, {"pattern": "@"}]}, auto]])
    assert [r[4] for r in rounds] == [None, "UnsupportedFeatureError"] * 2, rounds
    left = [r for r in rounds if r[2]]
    assert not left, left


def test_failed_grammar_is_freed_by_reference_counting():
    """A request's grammar that failed during decoding (a limit met in ``accept_tokens``) is freed
    by reference counting once dropped: its :class:`FailedMatcher` keeps the error, whose traceback
    (logged once, at DEBUG) held the bridge's ``accept_tokens`` frame, and so the grammar itself (a
    cycle pinning the failed grammar and its shared index until the cyclic collector ran; frozen for
    good by a compile meanwhile under ``STRUCTGATE_GC_FREEZE_AFTER_COMPILE``). The error's type and
    message stay."""
    import weakref

    from structgate.native.backend import NativeBackend
    from structgate.plugin.bridge import StructgateVllmGrammar
    from structgate.plugin.grammar_failure import FailedMatcher
    from structgate.vocab import Vocabulary

    vocab = Vocabulary([b"a", b"b", b"ab", b"ba", b""], eos_token_ids=[4], vocab_size=40)
    a, ab = 0, 2
    be = NativeBackend(vocab, max_dfa_states=20, compile_cache_size=0)
    for seq in ([a, ab, a, ab, a, ab, a], [a, ab, a, ab, a, ab, a, a]):  # the limit met: that token refused
        g = StructgateVllmGrammar(be.compile(Constraint.regex("[ab]*a[ab]{8}")).matcher(), "native",
                                  frozenset({4}))
        was = gc.isenabled()
        gc.disable()
        try:
            for t in seq:
                g.accept_tokens("r1", [t])
            assert isinstance(g.matcher, FailedMatcher)
            err = g.matcher.error
            assert type(err).__name__ == "CompileLimitError" and str(err)
            del err
            w = weakref.ref(g)
            del g
            assert w() is None  # freed by reference counting alone
        finally:
            if was:
                gc.enable()
