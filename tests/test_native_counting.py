"""Large counted repeats as binary counters on the pushdown stack
(:func:`structgate.native.pushdown.count_large_repeats`), against independent oracles:

* the language: every rewritten ``x{m,n}`` matches exactly what Python ``re`` matches, on strings
  of every count around the bounds and on corruptions of them;
* the masks: every step of random walks gives the same token bitmask as the same grammar with every
  repeat expanded (``count_repeats_over=0``, the construction of the v1 engine), and the same as one
  direct walk of the configuration;
* JSON Schema strings with ``maxLength`` of 32,767 to 1,000,000 code points (real schemas that were
  ``max_nfa_states`` errors) compile, and their lengths are judged as ``jsonschema`` judges them;
* the counter's own frames do not use up the recursion-depth bound: a counted repeat costs the
  one level of the call into it (like any rule call), whatever its count.
"""
from __future__ import annotations

import json
import random
import re

import jsonschema
import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.backends.interface import CompileOptions
from structgate.native.backend import _share_json_string
from structgate.native.ir import Grammar
from structgate.native.json_schema import schema_to_grammar
from structgate.native.pushdown import PushdownIndex, build_grammar_nfa, count_large_repeats
from structgate.native.regex import parse_regex
from structgate.native.regex.parser import Repeat
from _matching import accepts as _accepts


def _ids(row, vocab):
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size])


def _has_repeat_over(node, n) -> bool:
    stack, seen = [node], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Repeat) and max(x.min, x.max or 0) >= n:
            return True
        stack.extend(getattr(x, "items", ()) or ((x.item,) if isinstance(x, Repeat) else ()))
    return False


@pytest.mark.parametrize("item,parts", [("(?:ab|c)", ["ab", "c"]), ("[a-c]", ["a", "b", "c"]),
                                        ("a(?:b|cd)", ["ab", "acd"]), ("é|x", ["é", "x"])])
@pytest.mark.parametrize("lo,hi", [(0, 5), (3, 3), (2, 9), (0, 64), (7, 37), (13, None), (0, 100)])
@pytest.mark.parametrize("lazy", [False, True], ids=["binary", "unary-lazy"])
def test_counted_language_equals_python_re(item, parts, lo, hi, lazy, llama3_vocab):
    q = f"{{{lo},{'' if hi is None else hi}}}"
    rx = f"(?:{item}){q}z"
    g = Grammar({"root": parse_regex(rx)}, "root").check()
    g2, counting = count_large_repeats(g, min_expand=0, min_count=2, lazy=lazy)
    assert not _has_repeat_over(g2.rules["root"], 2), "the repeat was not rewritten"
    assert bool(counting) != lazy  # binary counters are counting rules; a RepeatCounter is generated
    pi = PushdownIndex(build_grammar_nfa(g2, count_repeats_over=0), llama3_vocab)
    assert bool(pi.gnfa.dyn_node) == lazy or lo + (hi or 0) < 2
    oracle = re.compile(rx)
    rng = random.Random(rx)
    top = (hi if hi is not None else lo) + 3
    for count in list(range(0, min(top, 12))) + list(range(max(0, top - 6), top)):
        for _ in range(3):
            s = "".join(rng.choice(parts) for _ in range(count)) + "z"
            cands = [s, s[:-1], s + "z", s[1:]]
            if len(s) > 2:
                i = rng.randrange(len(s) - 1)
                cands.append(s[:i] + rng.choice("abcdxz") + s[i + 1:])
            for t in cands:
                assert pi.matches(t.encode()) == bool(oracle.fullmatch(t)), (rx, t)


def _json_index(schema, vocab, **kw):
    g = _share_json_string(schema_to_grammar(schema, CompileOptions())).check()
    return PushdownIndex(build_grammar_nfa(g, **kw), vocab)


@pytest.mark.parametrize("schema", [
    {"type": "string", "minLength": 3, "maxLength": 70},
    {"type": "array", "items": {"type": "string", "maxLength": 40}, "minItems": 2, "maxItems": 60},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 100}, "b": {"type": "integer"}},
     "required": ["a", "b"], "additionalProperties": False},
])
@pytest.mark.parametrize("lazy,min_slack", [(False, None), (True, 16), (True, 1)],
                         ids=["binary", "unary-lazy", "unary-lazy-slack1"])
def test_counted_masks_equal_the_expanded_grammar(schema, lazy, min_slack, llama3_vocab, monkeypatch):
    """With the lazy counter, rows far from the bounds come from the count-free alias
    (``_aliased_row``); ``ALIAS_MIN_SLACK`` 1 makes the exact check of long tokens run near them."""
    v = llama3_vocab
    aliased = []
    if min_slack is not None:
        monkeypatch.setattr(PushdownIndex, "ALIAS_MIN_SLACK", min_slack)
        real = PushdownIndex._aliased_row
        monkeypatch.setattr(PushdownIndex, "_aliased_row",
                            lambda self, st, al, sl: aliased.append(sl) or real(self, st, al, sl))
    counted = _json_index(schema, v, lazy_counters=lazy)
    expanded = _json_index(schema, v, count_repeats_over=0)
    assert len(counted.gnfa.nfa) * 4 < len(expanded.gnfa.nfa), "counting did not apply"
    a = np.empty(counted.width, np.int32)
    b = np.empty(counted.width, np.int32)
    rng = random.Random(json.dumps(schema))
    for walk in range(4):
        s1 = s2 = 1
        for step in range(90):
            counted.fill_row(s1, a)
            expanded.fill_row(s2, b)
            assert (a == b).all(), f"walk {walk} step {step}: {np.count_nonzero(a != b)} words differ"
            assert (a == counted.direct_row(s1)).all()
            assert counted.is_accepting(s1) == expanded.is_accepting(s2)
            ids = [t for t in _ids(b, v).tolist() if t not in v.eos_token_ids]
            if not ids:
                break
            short = [t for t in ids if len(v.token_bytes[t]) <= 2]
            t = rng.choice(short if short and rng.random() < 0.7 else ids)
            s1, s2 = counted.next_state(s1, t), expanded.next_state(s2, t)
            assert s1 > 0 and s2 > 0
    # (a counter inside a called rule, a bounded string's, is generated when that rule is built)
    assert (bool(counted.gnfa.dyn_node) if lazy else any(counted.gnfa.rule_counting))
    if lazy:
        assert aliased, "no row came from a count-free alias"
        assert min_slack != 1 or min(aliased) < 8  # the long-token check ran close to a bound


@pytest.mark.parametrize("lo,hi", [(0, 1_000_000), (40, 65_535), (5, 32_767), (1000, None)])
def test_huge_string_bounds_compile_and_count_code_points(lo, hi, llama3_vocab):
    v = llama3_vocab
    schema = {"type": "string", "minLength": lo}
    if hi is not None:
        schema["maxLength"] = hi
    g = get_backend("native", v).compile(Constraint("json_schema", schema))
    val = jsonschema.Draft202012Validator(schema)
    rng = random.Random(lo)
    for n in sorted({0, 1, max(lo - 1, 0), lo, lo + 1, lo + 17}):
        for alphabet in ("a", "é", "日x", "a\"\\\n"):
            s = "".join(rng.choice(alphabet) for _ in range(n))
            text = json.dumps(s, ensure_ascii=rng.random() < 0.5)
            assert _accepts(g, v, text) == val.is_valid(s), (schema, n, alphabet)


def test_real_schema_with_maxlength_32767_compiles_exactly(llama3_vocab):
    # the shape of MaskBench Github_easy---o9931 / Snowplow schemas: was max_nfa_states (~5M states)
    v = llama3_vocab
    schema = {"type": "object", "properties": {
        "templateContext": {"type": "string", "maxLength": 32767},
        "note": {"type": "string", "minLength": 2, "maxLength": 1_000_000},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 255}, "maxItems": 10_000}},
        "required": ["templateContext"], "additionalProperties": False}
    g = get_backend("native", v).compile(Constraint("json_schema", schema))
    val = jsonschema.Draft202012Validator(schema)
    docs = [{"templateContext": "x" * 300, "note": "ab", "tags": ["a" * 255, "b"]},
            {"templateContext": "", "note": "a"}, {"templateContext": "t", "tags": ["a" * 256]},
            {"templateContext": "t", "tags": [str(i) for i in range(40)]}, {"note": "abc"},
            {"templateContext": "t", "extra": 1}]
    for d in docs:
        assert _accepts(g, v, json.dumps(d)) == val.is_valid(d), d


def _deepest_accepted(g, vocab, leaf: str, limit: int) -> int:
    best = 0
    for d in range(1, limit):
        if not _accepts(g, vocab, "[" * d + leaf + "]" * d):
            break
        best = d
    return best


@pytest.mark.parametrize("lazy", [False, True], ids=["binary", "unary-lazy"])
def test_counter_frames_do_not_use_up_the_depth_bound(lazy, llama3_vocab):
    v = llama3_vocab
    schema = {"$ref": "#/$defs/n", "$defs": {"n": {"anyOf": [
        {"type": "string", "maxLength": 600}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}}}
    c = Constraint("json_schema", schema)
    import structgate.native.pushdown as pd

    kw = pd.build_grammar_nfa.__kwdefaults__
    kw["lazy_counters"] = lazy
    try:
        counted = get_backend("native", v, max_recursion_depth=40).compile(c)
    finally:
        kw["lazy_counters"] = None
    assert any(counted.token_index.gnfa.rule_counting)
    assert bool(counted.token_index.gnfa.dyn_node) == lazy

    old = pd.build_grammar_nfa.__kwdefaults__["count_repeats_over"]
    pd.build_grammar_nfa.__kwdefaults__["count_repeats_over"] = 0
    try:
        expanded = get_backend("native", v, max_recursion_depth=40).compile(c)
    finally:
        pd.build_grammar_nfa.__kwdefaults__["count_repeats_over"] = old
    assert not any(getattr(expanded.token_index.gnfa, "rule_counting", ()))
    leaf = json.dumps("y" * 300)
    d1 = _deepest_accepted(counted, v, leaf, 60)
    assert 20 < d1 < 59
    assert d1 == _deepest_accepted(expanded, v, leaf, 60) - 1  # the one level of the call


# -- the count-free alias at every count around the bounds ------------------------------------------------
@pytest.mark.parametrize("schema,unit", [
    ({"type": "string", "minLength": 60, "maxLength": 120}, "a"),   # "low" below 60, "mid" above
    ({"type": "string", "minLength": 40}, "é"),                     # low, then the saturated count
    ({"type": "array", "items": {"type": "integer"}, "minItems": 40, "maxItems": 90}, "1,"),
])
@pytest.mark.parametrize("max_checks,column_min", [(PushdownIndex.ALIAS_MAX_CHECKS, 0),
                                                    (PushdownIndex.ALIAS_MAX_CHECKS, 10**9), (0, 0)],
                         ids=["columns", "token-by-token", "walk"])
def test_every_row_around_the_bounds_equals_the_direct_walk(schema, unit, max_checks, column_min, llama3_vocab,
                                                            monkeypatch):
    """The row of the configuration after every prefix of ``unit * n`` (n around both bounds) is
    the direct walk's: a "low" count, which cannot end, serves a row only where no token is longer
    than its slack (tokens such as ``..."`` end the string past ``minLength``), a "mid" one with
    the long tokens it allows checked; ``ALIAS_MIN_SLACK`` 1 puts the check next to the bound;
    ``ALIAS_MAX_CHECKS`` 0 sends every row that needs a check to the walk instead; the long tokens
    are checked column by column (``ALIAS_COLUMN_MIN`` 0) or one by one."""
    v = llama3_vocab
    monkeypatch.setattr(PushdownIndex, "ALIAS_MIN_SLACK", 1)
    monkeypatch.setattr(PushdownIndex, "ALIAS_MAX_CHECKS", max_checks)
    monkeypatch.setattr(PushdownIndex, "ALIAS_COLUMN_MIN", column_min)
    pi = _json_index(schema, v, lazy_counters=True)
    assert pi.gnfa.dyn_node
    lo = schema.get("minLength", schema.get("minItems"))
    hi = schema.get("maxLength", schema.get("maxItems"))
    opener = '"' if schema["type"] == "string" else "["
    counts = set(range(0, 4)) | set(range(lo - 6, lo + 4)) | ({*range(hi - 6, hi + 1)} if hi else set())
    for n in sorted(counts):
        st = pi.step_bytes(1, (opener + unit * n).encode())
        if schema["type"] == "array" and n:
            st = pi.step_bytes(1, (opener + (unit * n)[:-1]).encode())  # after the item, before ","
        assert st > 0, n
        assert np.array_equal(pi.row(st), pi.direct_row(st)), (schema, n)
