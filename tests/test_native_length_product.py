"""``pattern`` / ``format`` × ``minLength``/``maxLength`` as a lazily generated product automaton.

The product of a pattern's automaton with a length counter has ``states × (bound + 1)`` states.
It used to be built eagerly, and past ``max_product_states`` (10,000) or ``max_automaton_rules``
(256) it was a ``CompileLimitError``: 14 schemas of the MaskBench development subset (for example
``(\\S+\\s+){0,99}\\S+`` with ``maxLength`` 5000, ``format: uri`` with ``maxLength`` 255,
``([a-z][0-9])+`` with ``minLength`` 10000). In grammar mode it is now a
:class:`~structgate.native.json_schema._automata.LengthProduct`: one rule per state ``(q, count)``,
generated when the matcher reaches it, and mask rows far from the bounds shared through a
count-free alias (:meth:`PushdownIndex._count_alias`).

Oracles: ``jsonschema`` (the instance's validity), :meth:`PushdownIndex.direct_row` (one walk of
the whole configuration, no stack split and no alias) for every mask row.
"""
from __future__ import annotations

import itertools
import json

import jsonschema
import numpy as np
import pytest

from structgate.backends.interface import Constraint
from structgate.backends.registry import get_backend
from structgate.native.json_schema import schema_to_grammar
from structgate.native.json_schema._refs import RefsMixin
from structgate.native.pushdown import PushdownIndex


@pytest.fixture(scope="module")
def backend(llama3_vocab):
    return get_backend("native", llama3_vocab)


def _valid(schema, value) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


# -- the language: every string over a small alphabet, lazy product forced ---------------------------
SMALL = [
    ("^(ab|c)*$", 2, 7, "abc"),
    ("[0-9]x", 3, 6, "1x "),            # unanchored: the length counts the whole value
    ("^a+b?$", 4, None, "ab"),          # no maximum: the count saturates at minLength
    ("^(\\S+\\s){0,2}\\S+$", 1, 6, "a \u00e9"),
    ("^$|^x.+y$", 0, 4, "xy\t"),        # a control character (escaped in JSON; not \\n: Python $ matches before it)
    ("^(a|bc)+d?$", 0, 5, "abd"),
]


@pytest.mark.parametrize("pattern,lmin,lmax,alphabet", SMALL)
def test_lazy_product_accepts_exactly_the_valid_strings(pattern, lmin, lmax, alphabet, backend, monkeypatch):
    monkeypatch.setattr(RefsMixin, "EAGER_PRODUCT_MAX", 0)  # every product lazy, however small
    schema = {"type": "string", "pattern": pattern, "minLength": lmin}
    if lmax is not None:
        schema["maxLength"] = lmax
    g = backend.compile(Constraint.json_schema(schema))
    idx = g.token_index
    assert isinstance(idx, PushdownIndex) and idx.gnfa._dynamic  # the lazy path really ran
    top = (lmax if lmax is not None else lmin + 3) + 1
    n_ok = 0
    for n in range(top + 1):
        for t in itertools.product(alphabet, repeat=n):
            s = "".join(t)
            want = _valid(schema, s)
            assert idx.matches(json.dumps(s).encode()) == want, (schema, s)
            n_ok += want
    assert n_ok  # the case accepts something


# -- mask rows: aliased rows equal the direct walk ---------------------------------------------------------
DOCS = [  # each string ends a few code points short of maxLength: the last rows are near the bound
    ({"type": "string", "pattern": "^(\\S+\\s+){0,99}\\S+$", "maxLength": 120}, "word " * 18 + "\u00e9" * 28),
    ({"type": "string", "pattern": "^[a-z]+( [a-z]+)*$", "minLength": 3, "maxLength": 400}, "abc def " * 49 + "abcdefg"),
    ({"type": "string", "pattern": "^([a-z][0-9])+$", "minLength": 600}, "a1" * 310),
    ({"type": "string", "format": "uri", "maxLength": 300}, "http://example.com/" + "ab/" * 93),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[^\\s,]+(,[^\\s,]+)*$",
                                                       "maxLength": 260}},
      "required": ["s"]}, {"s": "x\u00e9\\," * 64 + "ab"}),
]


@pytest.mark.parametrize("min_slack", [1, PushdownIndex.ALIAS_MIN_SLACK])
@pytest.mark.parametrize("schema,doc", DOCS)
def test_mask_rows_equal_the_direct_walk(schema, doc, min_slack, llama3_vocab, monkeypatch):
    """Every row on the way through a long string equals :meth:`direct_row`; with ``min_slack``
    1 the aliased rows also go through the check of the tokens longer than the slack."""
    monkeypatch.setattr(PushdownIndex, "ALIAS_MIN_SLACK", min_slack)
    aliased = []
    orig = PushdownIndex._aliased_row

    def spy(self, state, alias, slack):
        aliased.append(slack)
        return orig(self, state, alias, slack)

    monkeypatch.setattr(PushdownIndex, "_aliased_row", spy)
    text = json.dumps(doc)
    assert _valid(schema, doc)
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))  # fresh: no rows cached
    m = g.matcher()
    idx = m.token_index
    for t in llama3_vocab.encode(text):
        s = m.state
        assert np.array_equal(idx.row(s), idx.direct_row(s)), (schema, t)
        assert m.advance([t])
    assert m.is_accepting()
    assert aliased, "no row was shared through a count-free alias"
    if min_slack == 1 and "maxLength" in json.dumps(schema):
        assert min(aliased) < 16  # the long-token check ran near the bound


@pytest.mark.parametrize("n_words", [20, 45])
def test_depth_alias_rows_equal_the_direct_walk(n_words, llama3_vocab, monkeypatch):
    """Pattern states that no string as long as the longest token tells apart share a count-free
    alias (``LengthProduct.canonical``'s depth classes: a word count unrolled in the pattern's DFA,
    MaskBench ``Github_easy---o21053``). Every row on the way equals the direct walk, in the words
    whose states merge (the first ~36 of 99 at Llama 3's 128-byte tokens) and past them (the direct
    walk, the oracle, exhausts ``max_dfa_states`` further on; the bound itself:
    ``test_long_strings_at_the_bound``)."""
    from structgate.native.json_schema._automata import LengthProduct

    moved = []
    orig = LengthProduct.canonical

    def spy(self, state, depth=None):
        r = orig(self, state, depth)
        if r is not None and r[0][0] != state[0]:
            moved.append(state)
        return r

    monkeypatch.setattr(LengthProduct, "canonical", spy)
    schema = {"type": "string", "pattern": "^(\\S+\\s+){0,99}\\S+$", "maxLength": 5000}
    doc = " ".join(f"w{i}x" for i in range(n_words)) + " \u00e9z"
    want = _valid(schema, doc)
    assert want
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))  # fresh: no rows cached
    m = g.matcher()
    idx = m.token_index
    ok = True
    for t in llama3_vocab.encode(json.dumps(doc)):
        s = m.state
        assert np.array_equal(idx.row(s), idx.direct_row(s)), (n_words, t)
        if not m.advance([t]):
            ok = False
            break
    assert (ok and m.is_accepting()) == want
    assert moved, "no pattern state was aliased to an equivalent one"


# -- long strings: exact at the bound, configurations grow slowly -----------------------------------------
def test_long_strings_at_the_bound(backend, llama3_vocab):
    """MaskBench ``Github_easy---o21053``'s shape: its long invalid instances used to exhaust
    ``max_dfa_states`` mid-document (200,000 configurations for 2,375 tokens)."""
    schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 1, "maxLength": 5000,
                                                     "pattern": "^(\\S+\\s+){0,99}\\S+$"}}}
    g = backend.compile(Constraint.json_schema(schema))
    words = ["lorem", "ipsum", "dolor", "sit", "amet"]
    base = " ".join(words[i % 5] for i in range(30))
    for value in [base + " " + "x" * (5000 - len(base) - 1), base + " " + "x" * (5000 - len(base)),
                  base + " " * 2 + "x" * (4999 - len(base) - 2), " ".join(["ab"] * 101), " ".join(["ab"] * 100)]:
        doc = json.dumps({"q": value})
        toks = llama3_vocab.encode(doc)
        m = g.matcher()
        want = _valid(schema, {"q": value})
        ok = m.advance(toks) and m.is_accepting()
        assert ok == want, (len(value), want)
        if want:  # the masks along the way
            m = g.matcher()
            for t in toks:
                row = m.token_index.row(m.state)
                assert row[t >> 5] >> (t & 31) & 1
                assert m.advance([t])
    assert g.token_index.n_states < 50_000


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": "^([a-z][0-9])+$", "minLength": 10000},
    {"type": "string", "maxLength": 32767, "pattern": "^[^<>]*$"},
    {"type": "object", "properties": {"p": {"type": "string", "format": "uri", "maxLength": 255},
                                      "d": {"type": "string", "pattern": "^(\\w+\\s?)+$", "maxLength": 32767}}},
])
def test_large_bounds_compile_without_a_limit(schema, backend, llama3_vocab):
    g = backend.compile(Constraint.json_schema(schema))
    schema_to_grammar(schema).check()
    m = g.matcher()
    assert m.token_index.n_allowed(m.state) > 0


def test_a_worker_leaves_lazy_grammars_to_the_caller():
    """Generated rules are closures over the grammar: the compile pool's worker returns None (the
    caller builds the grammar itself) instead of failing to pickle the NFA."""
    from structgate.backends.interface import CompileOptions
    from structgate.native.backend import _build_in_worker

    c = Constraint.json_schema({"type": "string", "pattern": "^(\\S+\\s+){0,99}\\S+$", "maxLength": 5000})
    assert _build_in_worker(c, CompileOptions(), 4096, frozenset({"json_schema"})) is None
    c2 = Constraint.json_schema({"type": "string", "maxLength": 5})
    assert _build_in_worker(c2, CompileOptions(), 4096, frozenset({"json_schema"})) is not None
    # a large counted repeat becomes a generated counter while the NFA is built: the IR (which
    # pickles) comes back and the caller builds the NFA
    from structgate.native.ir import Grammar

    c3 = Constraint.json_schema({"type": "string", "maxLength": 3000})
    assert isinstance(_build_in_worker(c3, CompileOptions(), 4096, frozenset({"json_schema"})), Grammar)


def test_a_pool_compile_of_a_counted_string_gives_the_in_process_masks(llama3_vocab):
    v = llama3_vocab
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 40, "maxLength": 300}},
              "required": ["s"]}
    doc = json.dumps({"s": "lorem ipsum " * 20})
    pooled = get_backend("native", v, compile_processes=1).compile(Constraint.json_schema(schema))
    local = get_backend("native", v).compile(Constraint.json_schema(schema))
    m1, m2 = pooled.matcher(), local.matcher()
    for t in v.encode(doc):
        assert np.array_equal(m1.token_index.row(m1.state), m2.token_index.row(m2.state))
        assert m1.advance([t]) and m2.advance([t])
    assert m1.is_accepting() and m2.is_accepting()
    # the generated counter, built in this process (when the string's rule was first reached)
    assert pooled.token_index.gnfa.dyn_node


@pytest.mark.parametrize("schema,unit", [
    # (one-state patterns such as ^[a-z.]+$ become a counted repeat, not a product)
    ({"type": "string", "pattern": "^[a-z.]+( [a-z.]+)*$", "minLength": 60, "maxLength": 150}, "a"),
    ({"type": "string", "pattern": "\\.", "minLength": 60, "maxLength": 150}, "a."),
    ({"type": "string", "pattern": "^([a-z][0-9])+$", "minLength": 80}, "a1"),
    ({"type": "string", "pattern": "^[^,]+(,[^,]+)*$", "minLength": 50, "maxLength": 90}, "é"),
    ({"type": "string", "pattern": "^[a-z.]+( [a-z.]+)*$", "minLength": 400, "maxLength": 700}, "ab."),
])
def test_every_row_around_the_bounds_equals_the_direct_walk(schema, unit, llama3_vocab, monkeypatch):
    """The row after every prefix ``"`` + ``unit * n`` (n around both bounds) is the direct walk's.
    A "low" state cannot end, so it must not serve rows where a token longer than its slack can
    end the string just past ``minLength`` (``..."``, ``1"}``): it serves one only where every
    token fits in the slack."""
    monkeypatch.setattr(RefsMixin, "EAGER_PRODUCT_MAX", 0)
    monkeypatch.setattr(PushdownIndex, "ALIAS_MIN_SLACK", 1)
    g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(schema))
    idx = g.token_index
    assert idx.gnfa._dynamic
    lo, hi = schema["minLength"], schema.get("maxLength")
    counts = set(range(0, 3)) | set(range(lo - 8, lo + 3)) | ({*range(hi - 8, hi + 1)} if hi else set())
    for n in sorted(counts):
        st = idx.step_bytes(1, ('"' + (unit * n)[:n]).encode())
        assert st > 0, n
        assert np.array_equal(idx.row(st), idx.direct_row(st)), (schema, n)
    if lo > 300:  # far below minLength every token fits: the "low" states served rows there
        assert any("low" in r for r in idx.gnfa.rule_names)


def test_frames_left_mid_token_by_most_tokens_are_walked_directly(llama3_vocab, monkeypatch):
    """A value inside a counted word pattern (MaskBench ``Github_hard---o21072``, ``o21053``) is a
    one-character rule called per character: nearly every token leaves that frame mid-token, and
    checking each token's rest one by one from the caller cost ~65 ms a mask (58,017 pairs). Past
    :attr:`PushdownIndex.SUFFIX_OK_MAX` pairs the configuration is walked directly: no check of more
    pairs is made, and every row on the way equals the direct walk."""
    sizes = []
    orig = PushdownIndex._suffix_ok

    def spy(self, p, toks, offs):
        sizes.append(toks.shape[0])
        return orig(self, p, toks, offs)

    monkeypatch.setattr(PushdownIndex, "_suffix_ok", spy)
    word = {"minLength": 1, "maxLength": 5000, "pattern": "^$|(^(?:\\S+\\s+){0,99}\\S+$)", "type": "string"}
    schema = {"type": "object", "properties": {"question": word, "answer": word},
              "required": ["question", "answer"], "additionalProperties": False}
    doc = {"question": "What is the meaning of life?", "answer": "The answer is 42 and " + "a " * 30 + "end"}
    assert _valid(schema, doc)
    g = get_backend("native", llama3_vocab, whitespace="compact").compile(Constraint.json_schema(schema))
    m = g.matcher()
    idx = m.token_index
    for t in llama3_vocab.encode(json.dumps(doc, separators=(",", ":"))):
        s = m.state
        assert np.array_equal(idx.row(s), idx.direct_row(s)), t
        assert m.advance([t])
    assert m.is_accepting()
    assert max(sizes, default=0) <= PushdownIndex.SUFFIX_OK_MAX, max(sizes)
