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


# -- NativeBackend ---------------------------------------------------------------------------------
from structgate.backends.interface import Constraint  # noqa: E402
from structgate.errors import (CompileLimitError, ConstraintKindError, GrammarSyntaxError,  # noqa: E402
                               IncompatibleVocabularyError)


def _walk_text(grammar, vocab, text):
    m = grammar.matcher()
    for t in vocab.encode(text):
        if t not in set(m.allowed_token_ids().tolist()):
            assert not m.advance(t)
            return False
        assert m.advance(t)
    return m.is_accepting()


@pytest.fixture(scope="module")
def native(llama3_vocab):
    from structgate.native.backend import NativeBackend

    return NativeBackend(llama3_vocab)


REGEX_CASES = [
    (r"[0-9]{2,3}-[a-z]+", ["12-ab", "123-x", "1-ab", "1234-a", "12-", "12-AB", "99-zz z"]),
    (r"(ab)*c", ["c", "abc", "ababc", "ab", "abac", "cc", ""]),
    (r"-?\d+(\.\d+)?", ["0", "-12.5", "3.", ".5", "1.2.3", "42", "--1"]),
    (r"[😀-🙏]+", ["😀", "😨😍", "🚀", "😀a", "🙏🙏🙏"]),
    (r'"[^"\\]{0,8}"', ['""', '"hello"', '"hello world"', '"a"b"', '"é中"', '"\\n"']),
    (r"(true|false|null)( (true|false|null))*", ["true", "true false", "null  null", "truefalse", "true "]),
]


@pytest.mark.parametrize("pattern,texts", REGEX_CASES, ids=[p for p, _ in REGEX_CASES])
def test_backend_end_to_end_against_python_re(native, llama3_vocab, pattern, texts):
    g = native.compile(Constraint.regex(pattern))
    rx = re.compile(pattern)
    for text in texts:
        assert _walk_text(g, llama3_vocab, text) == bool(rx.fullmatch(text)), text


def test_backend_masks_sampled_tokens_against_byte_walk(native, llama3_vocab):
    v = llama3_vocab
    g = native.compile(Constraint.regex(r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,6}"))
    from structgate.native.regex import compile_regex

    # oracle: an independent eager minimal DFA of the same regex, walked byte by byte
    dfa = compile_regex(g.regex)
    rng = np.random.default_rng(0)
    sample = rng.integers(0, v.vocab_size, 3000)
    m = g.matcher()
    ds = 1
    for t in v.encode("jane.doe@example.org"):
        allowed = set(m.allowed_token_ids().tolist())
        for tok in sample:
            b = v.token_bytes[tok]
            want = bool(b) and dfa.step(ds, b) != 0
            if tok in v.eos_token_ids:
                want = bool(dfa.accepting[ds])
            assert (int(tok) in allowed) == want, (m.state, v.describe(int(tok)))
        assert t in allowed and m.advance(t)
        ds = dfa.step(ds, v.token_bytes[t])
    assert m.is_accepting()


def test_compile_cache_lru(llama3_vocab):
    from structgate.native.backend import NativeBackend

    b = NativeBackend(llama3_vocab, compile_cache_size=2)
    a1 = b.compile(Constraint.regex("a+"))
    assert b.compile(Constraint.regex("a+")) is a1
    b.compile(Constraint.regex("b+"))
    b.compile(Constraint.regex("a+"))  # refresh a+
    b.compile(Constraint.regex("c+"))  # evicts b+
    assert b.cache_len == 2 and b.compile(Constraint.regex("a+")) is a1
    nocache = NativeBackend(llama3_vocab, compile_cache_size=0)
    assert nocache.compile(Constraint.regex("a+")) is not nocache.compile(Constraint.regex("a+"))


def test_limits(llama3_vocab):
    from structgate.native.backend import NativeBackend

    # the compile leaves the start's mask to the first fill (the vLLM bridge computes it in the
    # compile job: tests/test_native_lazy_start.py); the limit is typed by then
    with pytest.raises(CompileLimitError) as ei:
        _first_mask(NativeBackend(llama3_vocab, max_dfa_states=20), Constraint.regex("[ab]*a[ab]{8}"))
    assert ei.value.limit_name == "max_dfa_states"
    with pytest.raises(CompileLimitError) as ei:
        NativeBackend(llama3_vocab, compile_timeout_s=1e-9).compile(Constraint.regex("[ab]*a[ab]{3}"))
    assert ei.value.limit_name == "compile_timeout_s"


def _first_mask(backend, constraint):
    """Compile ``constraint`` and fill the first mask (where a limit reached within the first
    token's lookahead is raised at the latest)."""
    g = backend.compile(constraint)
    g.matcher().fill_bitmask(allocate_bitmask(1, g.vocab.vocab_size), 0)
    return g


def test_validate_is_cheap_and_typed(native, monkeypatch):
    import structgate.native.backend as nb

    import structgate.native.pushdown as pd

    def boom(*a, **k):
        raise AssertionError("validate must not build an NFA or a token index")

    monkeypatch.setattr(nb, "TokenIndex", boom)
    monkeypatch.setattr(pd, "PushdownIndex", boom)
    monkeypatch.setattr(pd, "build_grammar_nfa", boom)
    native.validate(Constraint.regex("x[0-9]{3}y"))
    native.validate(Constraint.json_schema({"type": "object", "properties": {"q": {"type": "integer"}}}))
    with pytest.raises(GrammarSyntaxError):
        native.validate(Constraint.regex("a(b"))
    with pytest.raises(AssertionError, match="must not build"):
        native.compile(Constraint.regex("x[0-9]{3}z"))


def test_incompatible_vocabulary():
    from structgate.native.backend import NativeBackend

    v = Vocabulary([b"a", b"b", b"ab", b""], eos_token_ids=[3], name="letters")
    b = NativeBackend(v)
    with pytest.raises(IncompatibleVocabularyError, match="letters"):
        b.compile(Constraint.regex("[0-9]+"))
    g = b.compile(Constraint.regex("(ab)+"))
    m = g.matcher()
    assert m.advance([2, 0, 1]) and m.is_accepting()


def test_choice_is_exact(native, llama3_vocab):
    choices = ["a.b", "(x)", "1+1?", "\\", "[ü]", "tab\there", "new\nline", "$^|*{2}", ""]
    g = native.compile(Constraint.choice(choices))
    for c in choices:
        assert g.token_index.matches(c.encode()), c
    for bad in ["axb", "x", "11", "1+1", "ü", "tab here", "{2}", "a.b "]:
        assert not g.token_index.matches(bad.encode()), bad
    assert _walk_text(g, llama3_vocab, "a.b") and not _walk_text(g, llama3_vocab, "a.bc")


def test_json_object(native, llama3_vocab):
    import json

    g = native.compile(Constraint.json_object())
    for obj in [{}, {"a": 1}, {"name": "x", "tags": ["u", 2, None], "n": {"k": True}}]:
        assert _walk_text(g, llama3_vocab, json.dumps(obj)), obj
    for bad in ["[]", "1", '"x"', "{", '{"a":}', "{'a': 1}"]:
        assert not _walk_text(g, llama3_vocab, bad), bad


def test_registry_builds_native(llama3_vocab):
    from structgate.backends.registry import get_backend
    from structgate.native.backend import NativeBackend

    b = get_backend("native", llama3_vocab, max_dfa_states=1234)
    assert isinstance(b, NativeBackend) and b.options.max_dfa_states == 1234


def test_shared_grammar_across_threads(llama3_vocab):
    import threading

    from structgate.native.backend import NativeBackend

    g = NativeBackend(llama3_vocab).compile(Constraint.json_schema(
        {"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
         "required": ["id", "tag"]}))
    text = '{"id": 12, "tag": "héllo"}'
    ids = llama3_vocab.encode(text)
    rows: list[list[np.ndarray]] = []
    errors = []

    def run():
        try:
            m = g.matcher()
            mine = []
            for t in ids:
                mine.append(_row(m).copy())
                assert m.advance(t)
            assert m.is_accepting()
            rows.append(mine)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(rows) == 4
    for other in rows[1:]:
        assert all((a == b).all() for a, b in zip(rows[0], other))


def test_validate_skips_determinisation(llama3_vocab, monkeypatch):
    import structgate.native.regex as rx
    from structgate.native.backend import NativeBackend

    b = NativeBackend(llama3_vocab, max_dfa_states=20)
    real = rx.compile_regex

    def boom(*a, **k):
        raise AssertionError("validate must not determinise")

    monkeypatch.setattr(rx, "compile_regex", boom)
    b.validate(Constraint.json_object())  # schema translation + parse only
    b.validate(Constraint.regex("[ab]*a[ab]{8}"))  # the state limit is found by the walks, not here
    # a counted repeat of an item with an anchor inside is expanded (the eager DFA's path)
    # (non-nullable ones, (a{2000}){2000}, are binary counters that compile, and so is a
    # nullable body once its empty string is left out: (a?b?){3000000} is (?:ab?|b){0,3000000},
    # (?:^|a){3000000} is a{3000000}|^a{0,2999999}, regex.parser.repeat_node): over
    # max_nfa_states, found without determinising
    with pytest.raises(CompileLimitError) as ei:
        b.validate(Constraint.regex("(?:a^|b){3000000}"))
    assert ei.value.limit_name == "max_nfa_states"
    b.validate(Constraint.regex("(a?b?){3000000}"))
    b.validate(Constraint.regex("(?:^|a){3000000}"))
    b.validate(Constraint.regex("(a{2000}){2000}"))
    monkeypatch.setattr(rx, "compile_regex", real)
    with pytest.raises(CompileLimitError):
        _first_mask(b, Constraint.regex("[ab]*a[ab]{8}"))


def test_fork_is_independent(vocab, boolean):
    m = NativeMatcher(boolean, max_rollback_tokens=5)
    assert m.advance(ids(vocab, b"tr"))
    f = m.fork()
    assert f.state == m.state and f.num_tokens_rollbackable() == 1 and f.max_rollback_tokens == 5
    assert f.advance(ids(vocab, b"ue") + [EOS]) and f.is_terminated()
    assert not m.is_terminated() and m.num_tokens_rollbackable() == 1
    f.rollback(3)
    assert f.state == 1 and m.state != 1
