"""NativeMatcher: the EOS/termination/rollback rules of structgate.backends.interface, and masks that
agree with the matcher's own advance (and with an independent byte walk) along random walks."""
from __future__ import annotations

import re

import numpy as np
import pytest

from structgate.bitmask import allocate_bitmask, allowed_ids
from structgate.errors import BitmaskError, MatcherStateError
from structgate.native.matcher import NativeMatcher
from structgate.native.token_index import TERMINATED, TokenIndex
from structgate.vocab import Vocabulary

from test_native_token_index import literal_dfa, oracle_allowed, random_dfa, synthetic_vocab

TOKS = [b"t", b"r", b"u", b"e", b"tr", b"ue", b"true", b"f", b"false", b"x", b" ", b"", b""]
EOS = 12


@pytest.fixture()
def vocab():
    # ids 0..10 text, 11 BOS (special), 12 EOS; logits 40 wide (ids 13..39 are padding)
    return Vocabulary(TOKS, eos_token_ids=[EOS], special_token_ids=[11], vocab_size=40, name="tiny")


@pytest.fixture()
def boolean(vocab):
    return TokenIndex(literal_dfa([b"true", b"false"]), vocab)


def ids(vocab, *pieces):
    return [vocab.token_bytes.index(p) for p in pieces]


def test_advance_is_atomic_and_rejects_cleanly(vocab, boolean):
    m = NativeMatcher(boolean)
    assert m.advance(ids(vocab, b"tr")) is True
    before = m.state
    assert m.advance(ids(vocab, b"u", b"x")) is False  # second token bad: nothing applied
    assert m.state == before and m.num_tokens_rollbackable() == 1
    assert m.advance(11) is False  # special token
    assert m.advance(30) is False  # padding id
    assert m.advance(10_000) is False  # beyond logits: rejected, no crash
    assert m.advance(EOS) is False  # EOS in a non-accepting state
    with pytest.raises(MatcherStateError):
        m.advance(-1)
    assert m.state == before
    assert m.advance(ids(vocab, b"ue")) and m.is_accepting() and m.is_final()


def test_eos_termination_and_rollback_across_it(vocab, boolean):
    m = NativeMatcher(boolean)
    assert m.advance(ids(vocab, b"true"))
    assert m.is_accepting() and m.is_final() and not m.is_terminated()
    row = allowed_ids(_row(m), vocab.vocab_size)
    assert row.tolist() == [EOS]  # final: EOS only
    assert m.advance(EOS) and m.is_terminated() and m.state == TERMINATED
    assert m.advance(EOS) and m.num_tokens_rollbackable() == 2  # EOS again: no change
    assert m.advance(ids(vocab, b"x")) is False and m.is_terminated()
    assert allowed_ids(_row(m), vocab.vocab_size).tolist() == [EOS]
    m.rollback(1)
    assert not m.is_terminated() and m.is_accepting()
    m.rollback(1)
    assert m.state == 1 and not m.is_accepting()
    with pytest.raises(MatcherStateError):
        m.rollback(1)
    with pytest.raises(MatcherStateError):
        m.rollback(-1)
    # an EOS inside a list: later EOS ok, later text rejects the whole list
    assert m.advance(ids(vocab, b"true") + [EOS, EOS]) and m.is_terminated()
    m.reset()
    assert m.advance(ids(vocab, b"true") + [EOS] + ids(vocab, b"x")) is False and m.state == 1


def test_validate_is_longest_prefix_without_state_change(vocab, boolean):
    m = NativeMatcher(boolean)
    m.advance(ids(vocab, b"f"))
    s = m.state
    assert m.validate(ids(vocab, b"x")) == 0
    assert m.validate([]) == 0
    assert m.validate(ids(vocab, b"false")) == 0  # 'f' + 'false' leaves the language
    assert m.state == s and m.num_tokens_rollbackable() == 1
    m2 = NativeMatcher(boolean)
    full = ids(vocab, b"false")
    assert m2.validate(full + [EOS, EOS, 3]) == 3  # EOS counts, EOS after EOS counts, text after does not
    assert m2.state == 1 and m2.num_tokens_rollbackable() == 0
    m2.advance(ids(vocab, b"true") + [EOS])
    assert m2.validate([EOS, 0]) == 1 and m2.is_terminated()


def test_max_rollback_tokens(vocab):
    idx = TokenIndex(literal_dfa([b"t" * 10]), vocab)
    m = NativeMatcher(idx, max_rollback_tokens=3)
    assert m.advance([0] * 6)
    assert m.num_tokens_rollbackable() == 3
    m.rollback(3)
    with pytest.raises(MatcherStateError, match="max_rollback_tokens=3"):
        m.rollback(1)
    assert m.advance([0] * 7) and m.is_accepting()
    m0 = NativeMatcher(idx, max_rollback_tokens=0)
    assert m0.advance(0) and m0.num_tokens_rollbackable() == 0


def test_fill_bitmask_rows_numpy_and_torch(vocab, boolean):
    torch = pytest.importorskip("torch")
    m = NativeMatcher(boolean)
    bm = allocate_bitmask(3, vocab.vocab_size)
    assert m.fill_bitmask(bm, 1) is True
    assert (bm[0] == -1).all() and (bm[2] == -1).all()
    assert set(allowed_ids(bm[1], vocab.vocab_size).tolist()) == set(ids(vocab, b"t", b"tr", b"true", b"f", b"false"))
    tb = torch.full((2, 2), -1, dtype=torch.int32)
    m.fill_bitmask(tb, 0)
    assert (tb[0].numpy() == bm[1]).all() and (tb[1] == -1).all()
    with pytest.raises(BitmaskError):
        m.fill_bitmask(np.zeros((1, 3), np.int32))
    with pytest.raises(BitmaskError):
        m.fill_bitmask(np.zeros((1, 2), np.int64))
    with pytest.raises(BitmaskError):
        m.fill_bitmask(bm, 3)


def test_default_is_final_agrees(vocab, boolean):
    from structgate.backends.interface import Matcher

    m = NativeMatcher(boolean)
    for piece in (b"t", b"r", b"u", b"e"):
        assert m.is_final() == Matcher.is_final(m)
        m.advance(ids(vocab, piece))
    assert m.is_final() and Matcher.is_final(m)


@pytest.mark.parametrize("seed", range(4))
def test_random_walks_mask_agrees_with_advance_and_oracle(seed):
    rng = np.random.default_rng(seed)
    v = synthetic_vocab(rng, n_random=800)
    dfa = random_dfa(rng, 25, 7, p_dead=0.2)
    idx = TokenIndex(dfa, v)
    m = NativeMatcher(idx)
    eos = set(v.eos_token_ids)
    for _ in range(25):
        allowed = allowed_ids(_row(m), v.vocab_size)
        want = np.flatnonzero(oracle_allowed(dfa, v, m.state))
        assert allowed.tolist() == want.tolist()
        if allowed.size == 0:
            break
        forbidden = np.setdiff1d(rng.integers(0, v.vocab_size, 20), allowed)
        for t in forbidden[:5]:
            assert m.advance(int(t)) is False
        t = int(rng.choice(allowed))
        before = m.state
        assert m.advance(t)
        if t in eos:
            assert m.is_terminated()
            m.rollback(1)
            assert m.state == before
            continue
        assert m.state == dfa.step(before, v.token_bytes[t])


def test_end_to_end_against_python_re(llama3_vocab):
    """Texts tokenized by the real Llama 3 tokenizer, walked through a hand DFA for
    ``(true|false|null)`` with the mask checked before each advance, agree with re.fullmatch."""
    idx = TokenIndex(literal_dfa([b"true", b"false", b"null"]), llama3_vocab)
    m = NativeMatcher(idx)
    pat = re.compile(r"true|false|null")
    for text in ["true", "false", "null", "tru", "nul", "truefalse", "True", " true", "nulll", ""]:
        m.reset()
        ok = True
        for t in llama3_vocab.encode(text):
            if not (t in allowed_ids(_row(m), llama3_vocab.vocab_size) and m.advance(t)):
                ok = False
                break
        ok = ok and m.is_accepting()
        assert ok == bool(pat.fullmatch(text)), text


def _row(m):
    words = np.empty((m.vocab.vocab_size + 31) // 32, dtype=np.int32)
    m.fill_bitmask(words)
    return words
