"""TokenIndex: bitmask rows checked token by token against an independent byte walk through the DFA.

The oracle for state ``s`` and token ``t``: allowed iff ``t`` has bytes and ``DFA.step(s, bytes)``
is not 0; EOS ids iff ``accepting[s]``; padding ids never. DFAs are random (pruned to the DFA
contract) or built by hand, so these tests need neither the regex compiler nor a tokenizer file;
the Llama 3 checks use the bundled vocabulary.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from structgate.bitmask import allowed_ids, bitmask_to_bool, bool_to_bitmask
from structgate.errors import IncompatibleVocabularyError
from structgate.native.automaton import DFA
from structgate.native.token_index import TERMINATED, TokenIndex, VocabTrie, vocab_trie
from structgate.vocab import Vocabulary


# -- helpers (imported by the other native tests) -------------------------------------------------
def dfa_from_byte_table(byte_table, accepting, pattern: str = "") -> DFA:
    """DFA (contract layout) from a dense ``(n_states, 256)`` table whose state 0 is dead and whose
    every other state is live; byte classes are the distinct columns."""
    bt = np.asarray(byte_table, dtype=np.int32)
    cols, inv = np.unique(bt.T, axis=0, return_inverse=True)
    return DFA(byte_classes=inv.astype(np.uint8).ravel(), table=np.ascontiguousarray(cols.T, dtype=np.int32),
               accepting=np.asarray(accepting, dtype=bool), pattern=pattern)


def prune(bt: np.ndarray, acc: np.ndarray) -> DFA:
    """Redirect every state that cannot reach an accepting state to 0, drop unreachable ones,
    renumber (start = 1) and return a contract DFA."""
    n = bt.shape[0]
    live = acc.copy()
    live[0] = False
    while True:
        nxt = live | live[bt].any(axis=1)
        nxt[0] = False
        if (nxt == live).all():
            break
        live = nxt
    if not live[1]:
        return dfa_from_byte_table(np.zeros((2, 256), np.int32), [False, False])
    bt = np.where(live[bt], bt, 0)
    order, seen = [1], {1}
    i = 0
    while i < len(order):
        for t in np.unique(bt[order[i]]):
            t = int(t)
            if t and t not in seen:
                seen.add(t)
                order.append(t)
        i += 1
    num = np.zeros(n, dtype=np.int32)
    for k, s in enumerate(order):
        num[s] = k + 1
    new = np.zeros((len(order) + 1, 256), dtype=np.int32)
    new_acc = np.zeros(len(order) + 1, dtype=bool)
    for s in order:
        new[num[s]] = num[bt[s]]
        new_acc[num[s]] = acc[s]
    return dfa_from_byte_table(new, new_acc)


def random_dfa(rng: np.random.Generator, n_states: int, n_classes: int, p_dead: float = 0.3) -> DFA:
    classes = rng.integers(0, n_classes, 256)
    t = rng.integers(1, n_states, (n_states, n_classes))
    t[rng.random(t.shape) < p_dead] = 0
    t[0] = 0
    acc = rng.random(n_states) < 0.3
    acc[0] = False
    return prune(t[:, classes], acc)


def literal_dfa(words: list[bytes]) -> DFA:
    """Trie DFA accepting exactly ``words``."""
    rows = [np.zeros(256, np.int32), np.zeros(256, np.int32)]
    acc = [False, False]
    for w in words:
        s = 1
        for b in w:
            if rows[s][b] == 0:
                rows.append(np.zeros(256, np.int32))
                acc.append(False)
                rows[s][b] = len(rows) - 1
            s = int(rows[s][b])
        acc[s] = True
    return dfa_from_byte_table(np.stack(rows), acc)


def synthetic_vocab(rng: np.random.Generator, n_random: int = 3000, pad: int = 37) -> Vocabulary:
    """256 single bytes, random multi-byte tokens over a skewed alphabet (so tries share prefixes),
    long runs, duplicates-by-class, specials (incl. two EOS) and padding ids."""
    alphabet = np.frombuffer(b'ab0123"\\ {}:,-x\xc3\xa9\xe4\xb8\xad', dtype=np.uint8)
    toks = [bytes([b]) for b in range(256)]
    for _ in range(n_random):
        n = int(rng.integers(2, 13))
        if rng.random() < 0.5:
            toks.append(bytes(rng.choice(alphabet, n)))
        else:
            toks.append(bytes(rng.integers(0, 256, n).astype(np.uint8)))
    toks += [b" " * k for k in range(2, 70, 3)] + [b"-" * 40, b"ab" * 20]
    toks += [b"", b"", b""]  # specials: BOS, EOS, EOT
    n = len(toks)
    return Vocabulary(toks, eos_token_ids=[n - 2, n - 1], special_token_ids=[n - 3], vocab_size=n + pad,
                      name="synthetic")


def oracle_allowed(dfa: DFA, vocab: Vocabulary, state: int) -> np.ndarray:
    """bool ``(vocab_size,)`` by a per-token byte walk (independent of the trie)."""
    out = np.zeros(vocab.vocab_size, dtype=bool)
    if state <= 0:
        if state == TERMINATED:
            out[list(vocab.eos_token_ids)] = True
        return out
    bt = dfa.byte_table()
    for i, b in enumerate(vocab.token_bytes):
        if not b:
            continue
        s = state
        for x in b:
            s = bt[s, x]
            if s == 0:
                break
        out[i] = s != 0
    if dfa.accepting[state]:
        out[list(vocab.eos_token_ids)] = True
    return out


@pytest.fixture(scope="module")
def svocab():
    return synthetic_vocab(np.random.default_rng(0))


# -- tests -----------------------------------------------------------------------------------------
def test_vocab_trie_spells_every_token(svocab):
    trie = VocabTrie(svocab.token_bytes)
    depth_of = np.searchsorted(trie.level_bounds, np.arange(trie.n_nodes), side="right")
    for tid in range(svocab.n_tokens):
        b = svocab.token_bytes[tid]
        node = int(trie.token_node[tid])
        if not b:
            assert node == -1
            continue
        # climb to the root, reading bytes backwards
        got = []
        d = int(depth_of[node])
        while True:
            got.append(int(trie.node_byte[node]))
            if d == 1:
                break
            node = int(trie.level_bounds[d - 2] + trie.node_parent[node])
            d -= 1
        assert bytes(reversed(got)) == b


# walk strategies: each level either restricted to the children of live parents or walked in full
WALK_MODES = {"auto": {},
              "always-prune": {"PRUNE_MIN_NODES": 0, "PRUNE_BELOW": 1.01},
              "never-prune": {"PRUNE_MIN_NODES": 0, "PRUNE_BELOW": 0.0}}


@pytest.mark.parametrize("mode", list(WALK_MODES))
@pytest.mark.parametrize("seed", range(6))
def test_rows_match_oracle_random_dfa(svocab, seed, mode, monkeypatch):
    rng = np.random.default_rng(100 + seed)
    dfa = random_dfa(rng, n_states=int(rng.integers(3, 40)), n_classes=int(rng.integers(2, 12)))
    for k, v in WALK_MODES[mode].items():
        monkeypatch.setattr(TokenIndex, k, v)
    idx = TokenIndex(dfa, svocab)
    for s in rng.permutation(dfa.n_states).tolist():
        want = oracle_allowed(dfa, svocab, s)
        row = idx.row(s)
        assert row.shape == ((svocab.vocab_size + 31) // 32,) and row.dtype == np.int32
        got = bitmask_to_bool(row, svocab.vocab_size)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"state {s}: tokens {[svocab.describe(int(t)) for t in bad[:5]]}"
        # bits past vocab_size stay 0
        assert not bitmask_to_bool(row, row.shape[0] * 32)[svocab.vocab_size:].any()
        assert idx.n_allowed(s) == int(want.sum())
        assert idx.has_non_eos(s) == bool(np.delete(want, list(svocab.eos_token_ids)).any())


def test_next_state_matches_byte_walk(svocab):
    rng = np.random.default_rng(7)
    dfa = random_dfa(rng, 30, 8, p_dead=0.15)
    idx = TokenIndex(dfa, svocab)
    for s in range(1, dfa.n_states):
        for t in rng.integers(0, svocab.vocab_size, 300):
            t = int(t)
            b = svocab.token_bytes[t] if t < svocab.n_tokens else b""
            want = dfa.step(s, b) if b else 0
            assert idx.next_state(s, t) == want
    assert idx.next_state(1, svocab.vocab_size + 5) == 0
    assert idx.next_state(0, 97) == 0


def test_padding_specials_eos_and_terminated_rows(svocab):
    # accepts any run of 'a' including the empty string: start is accepting
    dfa = literal_dfa([b"", b"a", b"aa", b"aaa"])
    idx = TokenIndex(dfa, svocab)
    ids = set(allowed_ids(idx.row(1), svocab.vocab_size).tolist())
    eos = set(svocab.eos_token_ids)
    assert eos <= ids
    assert svocab.n_tokens - 3 not in ids  # the non-EOS special
    assert not any(i >= svocab.n_tokens for i in ids)  # padding
    assert {svocab.token_bytes[i] for i in ids - eos} == {b"a", b"aa", b"aaa"} & set(svocab.token_bytes)
    term = allowed_ids(idx.row(TERMINATED), svocab.vocab_size)
    assert set(term.tolist()) == eos
    assert not idx.row(0).any()
    out = np.zeros(idx.width, np.int32)
    assert idx.fill_row(1, out) is True and (out == idx.row(1)).all()
    with pytest.raises(IndexError):
        idx.row(dfa.n_states)


def test_fill_rows_batch_gather(svocab):
    dfa = random_dfa(np.random.default_rng(3), 20, 6)
    idx = TokenIndex(dfa, svocab)
    states = np.array([1, TERMINATED, dfa.n_states - 1, 1, 0, 2 % dfa.n_states], dtype=np.int64)
    out = np.full((len(states), idx.width), 123, dtype=np.int32)
    idx.fill_rows(states, out)
    for r, s in enumerate(states):
        want = bool_to_bitmask(oracle_allowed(dfa, svocab, int(s)))
        assert (out[r] == want).all(), r
    # rows of a bigger bitmask via slots / rows
    big = np.full((8, idx.width), -1, dtype=np.int32)
    big[[5, 2]] = idx.rows[idx.slots(np.array([1, TERMINATED]))]
    assert (big[5] == idx.row(1)).all() and (big[2] == idx.row(TERMINATED)).all()
    assert (big[0] == -1).all()
    with pytest.raises(IndexError):
        idx.fill_rows(np.array([dfa.n_states]), out[:1])


def test_concurrent_first_visits_agree(svocab):
    dfa = random_dfa(np.random.default_rng(11), 40, 10, p_dead=0.2)
    idx = TokenIndex(dfa, svocab)
    results: dict[int, list[np.ndarray]] = {s: [] for s in range(dfa.n_states)}
    lock = threading.Lock()

    def worker(seed):
        order = np.random.default_rng(seed).permutation(dfa.n_states)
        for s in order:
            r = idx.row(int(s)).copy()
            with lock:
                results[int(s)].append(r)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert idx.n_cached == dfa.n_states + 1  # + the terminated row
    for s, rows in results.items():
        want = bool_to_bitmask(oracle_allowed(dfa, svocab, s))
        assert all((r == want).all() for r in rows), s


def test_vocab_trie_is_shared():
    v1 = synthetic_vocab(np.random.default_rng(5), n_random=50)
    v2 = v1.with_vocab_size(v1.vocab_size + 64)
    assert vocab_trie(v1) is vocab_trie(v1)
    # same token bytes, wider logits: the trie is shared, the rows are wider
    assert vocab_trie(v2) is vocab_trie(v1)
    idx = TokenIndex(literal_dfa([b"ab"]), v2)
    assert idx.width == (v2.vocab_size + 31) // 32
    assert allowed_ids(idx.row(1), v2.vocab_size).tolist() == [v1.token_bytes.index(b"a")]


def test_rejects_dfa_breaking_the_contract(svocab):
    bt = np.zeros((3, 256), np.int32)
    bt[0, 0x61] = 2  # the dead state must be absorbing
    bt[1, 0x61] = 2
    with pytest.raises(ValueError, match="contract"):
        TokenIndex(dfa_from_byte_table(bt, [False, False, True]), svocab)


def test_check_start_incompatible_vocabulary():
    toks = [b"a", b"b", b"ab", b""]
    v = Vocabulary(toks, eos_token_ids=[3], name="ab-only")
    idx = TokenIndex(literal_dfa([b"7"]), v)
    with pytest.raises(IncompatibleVocabularyError, match="ab-only"):
        idx.check_start()
    TokenIndex(literal_dfa([b"ab"]), v).check_start()  # spellable: no error
    TokenIndex(literal_dfa([b""]), v).check_start()  # EOS only: fine


# -- real vocabulary -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama3(llama3_vocab):
    return llama3_vocab


def test_llama3_digits_start_row(llama3):
    digits = np.zeros((3, 256), np.int32)
    digits[1, 0x30:0x3A] = 2
    digits[2, 0x30:0x3A] = 2
    dfa = dfa_from_byte_table(digits, [False, False, True])
    idx = TokenIndex(dfa, llama3)
    got = set(allowed_ids(idx.row(1), llama3.vocab_size).tolist())
    want = {i for i, b in enumerate(llama3.token_bytes) if b and b.isdigit() and b.isascii()}
    assert got == want and len(want) == 1110  # Llama 3 splits digits into runs of 1-3
    got2 = set(allowed_ids(idx.row(2), llama3.vocab_size).tolist())
    assert got2 == want | set(llama3.eos_token_ids)


@pytest.mark.parametrize("seed", range(2))
def test_llama3_random_dfa_sampled_states(llama3, seed):
    rng = np.random.default_rng(seed)
    dfa = random_dfa(rng, 25, 10, p_dead=0.1)
    idx = TokenIndex(dfa, llama3)
    for s in rng.choice(np.arange(1, dfa.n_states), size=min(4, dfa.n_states - 1), replace=False):
        want = oracle_allowed(dfa, llama3, int(s))
        got = bitmask_to_bool(idx.row(int(s)), llama3.vocab_size)
        assert (got == want).all()


@pytest.mark.parametrize("name", ["llama2", "cl100k"])
def test_other_bundled_vocabularies_real_dfa(name):
    """SentencePiece byte-fallback tokens (<0xNN>, '▁' = space) and tiktoken ranks: every token
    of every visited state checked against the byte walk, for a regex mixing emoji (split across
    byte tokens) and spaces."""
    from structgate.native.regex import compile_regex
    from structgate.vocab import load_vocabulary

    v = load_vocabulary(name)
    dfa = compile_regex(r"[😀-🙏]+( [a-z]{1,6})?")
    idx = TokenIndex(dfa, v)
    for s in range(dfa.n_states):
        want = oracle_allowed(dfa, v, s)
        got = bitmask_to_bool(idx.row(s), v.vocab_size)
        assert (got == want).all(), (name, s, [v.describe(int(t)) for t in np.flatnonzero(got != want)[:5]])
    start = allowed_ids(idx.row(1), v.vocab_size)
    assert start.size > 0 and all(v.token_bytes[t][:1] == b"\xf0" for t in start)


def test_eos_with_bytes_follows_the_accepting_rule_only():
    # a tokenizer whose EOS id also has text bytes: the text path must never allow it
    toks = [b"a", b"b", b"a"]
    v = Vocabulary(toks, eos_token_ids=[2], name="eos-with-bytes")
    idx = TokenIndex(literal_dfa([b"aa"]), v)
    assert allowed_ids(idx.row(1), v.vocab_size).tolist() == [0]
    assert idx.next_state(1, 2) == 0
    s = idx.next_state(1, 0)
    assert allowed_ids(idx.row(s), v.vocab_size).tolist() == [0]
    end = idx.next_state(s, 0)
    assert allowed_ids(idx.row(end), v.vocab_size).tolist() == [2]


def test_next_state_without_byte_table(svocab, monkeypatch):
    dfa = random_dfa(np.random.default_rng(21), 30, 8, p_dead=0.15)
    idx = TokenIndex(dfa, svocab)
    idx._byte_table = None  # the large-DFA path: class lookups
    for s in range(1, dfa.n_states):
        for t in range(0, svocab.n_tokens, 7):
            b = svocab.token_bytes[t]
            want = dfa.step(s, b) if b and t not in svocab.eos_token_ids else 0
            assert idx.next_state(s, t) == want
    assert idx.memory_size_bytes > idx.width * 4


def test_vocabulary_of_specials_only():
    v = Vocabulary([b"", b""], eos_token_ids=[1], vocab_size=40, name="specials")
    idx = TokenIndex(literal_dfa([b"", b"a"]), v)
    assert allowed_ids(idx.row(1), v.vocab_size).tolist() == [1]
    with pytest.raises(IncompatibleVocabularyError):
        TokenIndex(literal_dfa([b"a"]), v).check_start()


def test_fill_rows_into_torch_view(svocab):
    torch = pytest.importorskip("torch")
    dfa = random_dfa(np.random.default_rng(9), 12, 5)
    idx = TokenIndex(dfa, svocab)
    bm = torch.full((4, idx.width), -1, dtype=torch.int32)
    idx.fill_rows(np.array([1, TERMINATED]), bm[1:3])
    assert (bm[1].numpy() == idx.row(1)).all() and (bm[2].numpy() == idx.row(TERMINATED)).all()
    assert (bm[0] == -1).all() and (bm[3] == -1).all()
