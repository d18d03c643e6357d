"""The native compile leaves the start state's mask to the first fill when its table row already
proves some token allowed (:meth:`PushdownIndex.check_start`), and the vLLM bridge computes that
mask in the compile job (:func:`structgate.plugin.bridge._start_row`).

Oracle: the brute-force walk of every token's bytes from the start (``step_bytes``), and the
computed row itself."""
from __future__ import annotations

import numpy as np
import pytest

from structgate import Constraint
from structgate.errors import CompileLimitError, IncompatibleVocabularyError
from structgate.native.automaton import DEAD, START
from structgate.native.backend import NativeBackend
from structgate.vocab import Vocabulary


def _brute_allowed(index, vocab: Vocabulary) -> set[int]:
    """Token ids allowed at the start, by walking each token's bytes (EOS: the start accepts)."""
    out = {i for i, b in enumerate(vocab.token_bytes)
           if b and i not in vocab.special_token_ids and index.step_bytes(START, b) != DEAD}
    if index.is_accepting(START):
        out |= set(vocab.eos_token_ids)
    return out


def _row_ids(index, vocab: Vocabulary) -> set[int]:
    row = index.row(START).view(np.uint32)
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[: vocab.vocab_size]
    return set(np.flatnonzero(bits).tolist())


SMALL = Vocabulary([b"a", b"b", b"ab", b"ba", b"{", b'{"', b'"', b"x", b"1", b"12", b" ", b""],
                   eos_token_ids=[11], name="small")
#: no one-byte token at all: the table row cannot decide, the start's mask is computed
PAIRS = Vocabulary([b"ab", b"ba", b"aa", b"{}", b"12", b""], eos_token_ids=[5], name="pairs")
#: EOS spells "x" but is never an ordinary token: no token can start "x"
EOS_X = Vocabulary([b"a", b"x"], eos_token_ids=[1], name="eos-x")

CASES = [
    (SMALL, Constraint.regex("(ab)+")),
    (SMALL, Constraint.regex("x?")),
    (SMALL, Constraint.regex("12|1")),
    (SMALL, Constraint.json_schema({"type": "object", "properties": {"x": {"type": "integer"}}})),
    (SMALL, Constraint.json_schema({"type": "string"})),
    (PAIRS, Constraint.regex("(ab)+")),
    (PAIRS, Constraint.regex("a(ab)*b")),
    (PAIRS, Constraint.regex("1[0-9]*")),
    (PAIRS, Constraint.regex("b?")),
    (PAIRS, Constraint.regex("x+")),
    (SMALL, Constraint.regex("[0-9]{3}")),
]


@pytest.mark.parametrize("vocab,constraint", CASES, ids=[f"{v.name}-{c.value}" for v, c in CASES])
def test_start_verdict_matches_brute_force(vocab, constraint):
    """Compile succeeds exactly when some token is allowed at the start, and the first mask (when
    it is computed, now or at the first fill) is the brute-force set."""
    try:
        g = NativeBackend(vocab).compile(constraint)
    except IncompatibleVocabularyError:
        from structgate.native.pushdown import PushdownIndex

        _grammar, gnfa = _nfa(NativeBackend(vocab), constraint)
        assert _brute_allowed(PushdownIndex(gnfa, vocab), vocab) == set(), f"{constraint.value!r} refused"
        return
    idx = g.token_index
    brute = _brute_allowed(idx, vocab)
    assert brute, f"{constraint.value!r} compiled, but no token can start it"
    assert _row_ids(idx, vocab) == brute


def _nfa(backend, constraint):
    from structgate.native.backend import _grammar_and_nfa

    return _grammar_and_nfa(backend, constraint, backend.inline_max_size, lambda: None, lazy=True)


def test_eos_spelling_is_not_a_starting_token():
    """The one-byte shortcut counts ordinary tokens only: EOS spelling "x" does not start "x"."""
    with pytest.raises(IncompatibleVocabularyError, match="eos-x"):
        NativeBackend(EOS_X).compile(Constraint.regex("x"))
    g = NativeBackend(EOS_X).compile(Constraint.regex("x?a*"))  # accepting start: EOS allowed
    assert _row_ids(g.token_index, EOS_X) == _brute_allowed(g.token_index, EOS_X) == {0, 1}


def test_start_mask_left_to_first_fill(llama3_vocab):
    """With a one-byte token live at the start the compile computes no mask; the first fill does."""
    g = NativeBackend(llama3_vocab).compile(Constraint.json_schema(
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))
    idx = g.token_index
    assert not idx.is_cached(START)
    row = _row_ids(idx, llama3_vocab)
    assert idx.is_cached(START)
    assert idx.step_bytes(START, b"{") != DEAD and llama3_vocab.token_bytes.index(b"{") in row


def test_start_mask_computed_when_undecided():
    """No one-byte token: the compile computes the start's mask to decide."""
    g = NativeBackend(PAIRS).compile(Constraint.regex("(ab)+"))
    assert g.token_index.is_cached(START)


def test_bridge_computes_start_row_in_compile_job(llama3_vocab):
    """The vLLM bridge's compile job computes the start's mask (off the engine step), and a limit
    reached within the first token's lookahead fails the compile there, typed."""
    from structgate.backends.interface import warm_start_row as _start_row

    g = _start_row(NativeBackend(llama3_vocab).compile(Constraint.regex("[a-z]+@[a-z]+")))
    assert g.token_index.is_cached(START)
    small = NativeBackend(llama3_vocab, max_dfa_states=20)
    g = small.compile(Constraint.regex("[ab]*a[ab]{8}"))
    with pytest.raises(CompileLimitError) as ei:
        _start_row(g)
    assert ei.value.limit_name == "max_dfa_states"


def test_warm_start_keeps_compile_timeout(llama3_vocab, monkeypatch):
    """``compile_timeout_s`` counts the start's mask computed after the compile (the compile and
    :meth:`warm_start` together), as it counted it when the compile computed it."""
    from structgate.backends.interface import warm_start_row

    g = NativeBackend(llama3_vocab, compile_timeout_s=5).compile(Constraint.regex("[a-z]{3}@[a-z]+"))
    assert not g.token_index.is_cached(START)
    g.compile_s = 5.0  # the compile itself took the whole budget
    with pytest.raises(CompileLimitError) as ei:
        warm_start_row(g)
    assert ei.value.limit_name == "compile_timeout_s"
    g2 = NativeBackend(llama3_vocab, compile_timeout_s=5).compile(Constraint.regex("[a-z]{4}@[a-z]+"))
    assert warm_start_row(g2) is g2 and g2.token_index.is_cached(START)


def test_auto_warms_start_inside_fallback(llama3_vocab):
    """``structgate-auto`` computes native's start mask inside its fallback: a limit met there moves
    the constraint on (tests/test_auto_backend.py has the llguidance case); a grammar that passes
    arrives with its start mask cached."""
    from structgate.backends.registry import get_backend

    auto = get_backend("structgate-auto", llama3_vocab)
    g = auto.compile(Constraint.regex("[a-z]+@[a-z]+"))
    assert g.served_by == "native" and g.inner.token_index.is_cached(START)


EOS_BYTES = Vocabulary([b"(b", b"xa", b")", b"", b"(b(xc", b")cb"], eos_token_ids=[0], special_token_ids=[3],
                       name="eos-bytes")


def test_eos_bit_only_where_the_start_accepts():
    """An EOS id that spells bytes ("(b") is allowed by acceptance alone, never because its bytes
    are a viable prefix (a rule call at the start, tokens completing it mid-token checked against
    the stack: the bit was set there; found by a break-it helper, 2026-12-06)."""
    from structgate.bitmask import allocate_bitmask

    g = NativeBackend(EOS_BYTES, compile_cache_size=0, max_recursion_depth=3, inline_max_size=0).compile(
        Constraint.grammar('root ::= r0\nr0 ::= r1 r1 r0*\nr1 ::= "x" | ("" "(" | [^a] "b")', "gbnf"))
    m = g.matcher()
    bm = allocate_bitmask(1, EOS_BYTES.vocab_size)
    m.fill_bitmask(bm, 0)
    bits = np.unpackbits(np.asarray(bm[0]).view(np.uint8), bitorder="little")[: EOS_BYTES.vocab_size]
    assert not g.token_index.is_accepting(START)
    assert not bits[0]
    assert set(np.flatnonzero(bits).tolist()) == _brute_allowed(g.token_index, EOS_BYTES) - {0}
