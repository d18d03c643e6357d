"""Deferred subtrees of the root rule (:data:`structgate.native.pushdown.DEFER`): with a lazy build,
a large concatenation, alternation or repeat inside the root rule is a placeholder state until a
closure first reaches it, so a compile builds the states its first mask needs and a generation the
properties it visits. Oracle: the same grammar built whole (``defer_min_size=0``): equal rows,
transitions and acceptance at every step of the valid instances and of random walks, and the plain
walk of each configuration (``direct_row``)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError
from structgate.native.pushdown import DEFER, DEFER_MIN_SIZE, PushdownIndex, build_grammar_nfa

DATA = Path(__file__).parent / "data"


def _sample():
    out = []
    for line in (DATA / "maskbench_sample" / "sample.jsonl").read_text().splitlines():
        d = json.loads(line)
        texts = [t["data"] if isinstance(t["data"], str) else json.dumps(t["data"]) for t in d["tests"] if t["valid"]]
        out.append((d["id"], d["schema"], texts))
    props = {f"p{i}": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "string"}},
                       "required": ["x"]} for i in range(12)}
    out += [
        ("array of objects", {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
            "n": {"type": "number"}}, "required": ["name"]}}, ['[{"name": "a", "tags": ["x", "y"]}, {"name": "", "n": 1}]']),
        ("twelve nested objects", {"type": "object", "properties": props, "additionalProperties": False},
         ['{"p3": {"x": 1, "y": "q"}, "p11": {"x": -2}}']),
        ("anyOf of objects", {"anyOf": [{"type": "object", "properties": {"kind": {"const": k}, "v": {"type": "array"}},
                                         "required": ["kind"]} for k in ("alpha", "beta", "gamma")]},
         ['{"kind": "beta", "v": [1, {"a": null}]}']),
    ]
    return out


CASES = _sample()


def _indices(be, schema, vocab, *defer_min_sizes):
    g = be.to_grammar(Constraint("json_schema", schema))
    out = []
    for d in (0, *defer_min_sizes):
        gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=d)
        out.append(PushdownIndex(gn, vocab, max_depth=be.options.max_recursion_depth))
    return out


def _ids(row, vocab):
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_deferred_build_gives_the_masks_of_the_whole_build(case, llama3_vocab):
    name, schema, texts = case
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    # 4: nearly every subtree deferred; the default: what a compile does
    whole, stress, default = _indices(be, schema, v, 4, DEFER_MIN_SIZE)
    assert not whole.gnfa.deferred
    if len(whole.gnfa.nfa) > 200:
        assert stress.gnfa.deferred, "a large root rule should have been deferred"
    ra, rb = np.empty(whole.width, np.int32), np.empty(whole.width, np.int32)
    for deferred in (stress, default):
        _compare(name, texts, whole, deferred, v, ra, rb)
    # the placeholders keep the eager build's sharing (a subtree before a loop and the loop's
    # body copy continue into one state): no configuration is split in two
    assert len(default._cfg_keys) <= len(whole._cfg_keys) * 1.02 + 2, (len(default._cfg_keys), len(whole._cfg_keys))


def _compare(name, texts, whole, deferred, v, ra, rb):
    def same(sa: int, sb: int) -> None:
        whole.fill_row(sa, ra)
        deferred.fill_row(sb, rb)
        assert (ra == rb).all(), f"{name}: the deferred build's mask differs"
        assert (rb == deferred.direct_row(sb)).all()
        assert (ra == whole.direct_row(sa)).all()  # (both indices walk the same configurations)
        assert whole.is_accepting(sa) == deferred.is_accepting(sb)

    for text in texts:
        sa = sb = 1
        for t in v.encode(text):
            same(sa, sb)
            sa, sb = whole.next_state(sa, t), deferred.next_state(sb, t)
            assert (sa > 0) == (sb > 0) and sa > 0, f"{name}: a valid instance was cut at token {t}"
        same(sa, sb)
        assert deferred.is_accepting(sb)
    rng = random.Random(7)
    for _ in range(3):
        sa = sb = 1
        for _ in range(40):
            same(sa, sb)
            whole.fill_row(sa, ra)
            ids = [t for t in _ids(ra, v).tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            t = rng.choice(ids)
            sa, sb = whole.next_state(sa, t), deferred.next_state(sb, t)
            assert sa > 0 and sb > 0


def test_compile_builds_what_the_first_mask_needs(llama3_vocab):
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = next(c[1] for c in CASES if c[0] == "twelve nested objects")
    whole, deferred = _indices(be, schema, v, 32)
    whole.check_start()
    deferred.check_start()
    n_whole, n_first = len(whole.gnfa.nfa), len(deferred.gnfa.nfa)
    assert n_first * 2 < n_whole, (n_first, n_whole)
    # one property visited: its subtree is built, the other eleven are not
    s = 1
    for t in v.encode('{"p5": {"x": 3}}'):
        s = deferred.next_state(s, t)
        assert s > 0
    assert deferred.is_accepting(s)
    assert len(deferred.gnfa.nfa) * 3 < n_whole * 2, (len(deferred.gnfa.nfa), n_whole)
    assert sum(1 for k in deferred.gnfa.nfa.kind if k == DEFER) > 0


def test_a_deferred_subtree_past_the_state_cap_raises_a_typed_error_every_time(llama3_vocab):
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = next(c[1] for c in CASES if c[0] == "twelve nested objects")
    g = be.to_grammar(Constraint("json_schema", schema))
    gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=16)
    pi = PushdownIndex(gn, v)
    gn.nfa.max_states = len(gn.nfa) + 2  # the next subtree built outgrows the cap
    toks = v.encode('{"p0": {"x": 1}}')
    for _ in range(2):  # the cut-short build is redone (and fails the same way), never half-used
        with pytest.raises(CompileLimitError) as e:
            s = 1
            for t in toks:
                s = pi.next_state(s, t)
        assert e.value.limit_name == "max_nfa_states"
    gn.nfa.max_states = 2_000_000
    s = 1
    for t in toks:
        s = pi.next_state(s, t)
        assert s > 0
    assert pi.is_accepting(s)


@pytest.mark.parametrize("defer_min_size", [8, 32, DEFER_MIN_SIZE])
def test_repeated_elements_reuse_the_first_elements_configurations(llama3_vocab, defer_min_size):
    """The first element of an array and the loop's copy of it are one subtree with one
    continuation: deferred or not, they are one set of states, so the second element walks the
    configurations of the first (a placeholder that stood for the subtree must keep standing for
    it after it is built)."""
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True, compile_cache_size=0)
    schema = {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "n": {"type": "number"}, "kind": {"enum": ["alpha", "beta", "gamma", "delta"]}}, "required": ["name"]}}
    one = '{"name": "a", "tags": ["x"], "n": 1, "kind": "beta"}'
    whole, deferred = _indices(be, schema, v, defer_min_size)
    for pi in (whole, deferred):
        s = 1
        for t in v.encode("[" + ", ".join([one] * 3) + "]"):
            s = pi.next_state(s, t)
            assert s > 0
        assert pi.is_accepting(s)
    assert len(deferred._cfg_keys) == len(whole._cfg_keys)


_WORDS = "|".join(f"word{i:03d}" for i in range(60))


@pytest.mark.parametrize("pattern", [
    f"({_WORDS})|[\\ud800-\\udfff]",  # a class of surrogates only: no UTF-8 encoding, matches nothing
    f"x({_WORDS}|ab[\\ud800-\\udfff])",  # ... at the end of a branch: its prefix is dead
    f"({_WORDS})|[^\\x00-\\U0010FFFF]",  # an empty class
])
def test_a_grammar_that_can_make_a_dead_state_is_not_deferred(llama3_vocab, pattern):
    """Whatever matches nothing makes a FAIL state and a liveness pass, which deferred
    placeholders would not survive (found by a review: a surrogate class hid every deferred
    branch, or left a dead prefix allowed). Oracle: the whole build and Python ``re``."""
    import re

    v = llama3_vocab
    be = get_backend("native", v, compile_cache_size=0)
    g = be.to_grammar(Constraint("regex", pattern))
    whole = PushdownIndex(build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True, defer_min_size=0), v)
    gn = build_grammar_nfa(g, inline_max_size=be.inline_max_size, lazy=True)
    assert not gn.deferred
    pi = PushdownIndex(gn, v)
    ra, rb = np.empty(pi.width, np.int32), np.empty(pi.width, np.int32)
    text = "xword007" if pattern.startswith("x") else "word007"
    assert re.fullmatch(pattern, text)
    sa = sb = 1
    for t in v.encode(text):
        whole.fill_row(sa, ra)
        pi.fill_row(sb, rb)
        assert (ra == rb).all()
        sa, sb = whole.next_state(sa, t), pi.next_state(sb, t)
        assert sb > 0
    assert pi.is_accepting(sb)
    if pattern.startswith("x"):  # "xa" leads only into the dead branch: not allowed
        s = pi.next_state(1, v.encode("x")[0])
        pi.fill_row(s, rb)
        a = v.encode("a")
        assert len(a) == 1 and not (int(rb[a[0] >> 5]) >> (a[0] & 31)) & 1
    m = be.compile(Constraint("regex", pattern)).matcher()
    assert all(m.advance(t) for t in v.encode(text)) and m.is_accepting()
