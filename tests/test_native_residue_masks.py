"""Token masks inside a lazily generated remainder automaton, computed from the residues.

An integer ``multipleOf`` / ``not multipleOf`` whose moduli's lcm ``L`` is above
``eager_residue_max`` is a :class:`structgate.native.json_schema._automata.ResidueProduct` whose
state is (range state ``q``, value mod ``L``). Each position inside a literal is a new state, and
the trie walk of its mask built a rule and a table row for every digit prefix of the vocabulary
(~1,110 on Llama 3 once ``L`` > 1,110: ~0.1-0.2 s a mask, every mask of every literal). The engine
now takes such a state's walk from the automaton (:meth:`PushdownIndex._automaton_walk`): the
tokens' walks from ``q`` once, vectorised, and per state the liveness of ``(q', (r · 10**n + v) mod
L)`` for the tokens read whole and the residue of each prefix that ends the literal mid-token.

Oracles: every token's advance (a hand-built vocabulary whose tokens end a literal mid-token:
``4}``, ``34,``, ``0,\\n``), the engine's own walk (the new path switched off on one index), the
eager remainder automaton (``eager_residue_max`` raised), and arithmetic.
"""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from _matching import accepts
from _residue import integer_schema
from structgate import Constraint, get_backend
from structgate.vocab import Vocabulary

# every byte alone (so any text has a spelling), the 2- and 3-digit strings (as Llama 3), and
# tokens that end a literal mid-token or start one after other bytes
MIXED = ["4}", "34,", "0,", "0}", "1234}", "5 ", "3\n", "7,\n", "00}", "-1", "-12", "12-", "-0", "-05",
         '"n":', '": ', ": -", ":-1", "1]", "23],", ", -", ",1", "}\n", "8}}", "0]", "-", "--", "9 }"]
TOKENS = [bytes([b]) for b in range(256)] + [f"{i:02d}".encode() for i in range(100)] + \
    [f"{i:03d}".encode() for i in range(1000)] + [t.encode() for t in MIXED]
TOKENS = list(dict.fromkeys(TOKENS))
TOK_ID = {t: i for i, t in enumerate(TOKENS)}
HAND = Vocabulary(TOKENS + [b""], eos_token_ids=[len(TOKENS)], name="residue-hand")


def _ids(pieces: list[str]) -> list[int]:
    return [TOK_ID[p.encode()] for p in pieces]


def _index(compiled):
    return compiled.matcher().token_index


def _row(idx, state: int) -> np.ndarray:
    out = np.zeros(idx.width, dtype=np.int32)
    idx.fill_row(state, out)
    return out


def _bits(row: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(row.view(np.uint8), bitorder="little")[:n].astype(bool)


def _brute_force_walk(compiled, vocab: Vocabulary, ids: list[int]) -> bool:
    """Walk ``ids``; at each configuration the mask is computed first, then every token's advance
    is compared with its bit (and EOS with acceptance). Returns whether ``ids`` is accepted."""
    idx = _index(compiled)
    from structgate.native.pushdown import START
    state = START
    eos = set(vocab.eos_token_ids)
    for t in ids + [None]:
        bits = _bits(_row(idx, state), vocab.vocab_size)
        want = np.array([i not in eos and idx.next_state(state, i) != 0 for i in range(vocab.vocab_size)])
        for e in eos:
            want[e] = idx.is_accepting(state)
        bad = np.flatnonzero(bits != want)
        assert not bad.size, [(vocab.token_bytes[i], bool(bits[i])) for i in bad[:10]]
        if t is None:
            return idx.is_accepting(state)
        state = idx.next_state(state, t)
        if state == 0:
            return False
    return False


def _want(case, x: int) -> bool:
    mo, negs, lo, hi = case
    return ((mo is None or x % mo == 0) and all(x % m for m in negs)
            and (lo is None or x >= lo) and (hi is None or x <= hi))


def _cases(seed: int, n: int) -> list:
    """``n`` random (multipleOf, not-multipleOf moduli, minimum, maximum) with lcm above 1,000."""
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        mo = rnd.choice([None, rnd.randrange(1001, 30000), rnd.randrange(2, 200)])
        negs = rnd.sample([2, 3, 7, 11, 97, 1009], rnd.randrange(0, 3))
        L = math.lcm(mo or 1, *negs)
        if L <= 1000 or L > 25000 or (mo and any(mo % m == 0 for m in negs)):
            continue
        lo = rnd.choice([None, -10 ** rnd.randrange(3, 9), 0, rnd.randrange(1, 10 ** 6)])
        hi = rnd.choice([None, 10 ** rnd.randrange(4, 10), -1])
        if lo is not None and hi is not None and (hi - lo) // (mo or 1) < 2000:
            continue  # (few candidates are written as their values: no automaton)
        out.append((mo, negs, lo, hi))
    return out


def _literals(case, rnd: random.Random) -> list[int]:
    """Accepted values (multiples of the lcm near the bounds and far out) and near misses."""
    mo, negs, lo, hi = case
    L = math.lcm(mo or 1, *negs)
    xs = []
    centres = [0, L * rnd.randrange(1, 10 ** 6), -L * rnd.randrange(1, 10 ** 6)]
    for c in centres + [b for b in (lo, hi) if b is not None]:
        base = c // L * L
        xs += [base + d for d in (-L, 0, L, 2 * L, 1, -1)]
    return [x for x in xs if _want(case, x)][:4] + [x for x in xs if not _want(case, x)][:3]


@pytest.mark.parametrize("case", _cases(29, 6), ids=str)
def test_masks_equal_every_tokens_advance_hand_vocabulary(case):
    """Inside an object and an array, where a literal ends mid-token (``1234}``, ``34,``) or at a
    token's end, every token's bit is what its advance does, at every position."""
    be = get_backend("native", HAND)
    obj = be.compile(Constraint.json_schema({"type": "object", "properties": {"n": integer_schema(*case)},
                                             "required": ["n"]}))
    arr = be.compile(Constraint.json_schema({"type": "array", "items": integer_schema(*case)}))
    rnd = random.Random(str(case))
    for x in _literals(case, rnd):
        # digits in threes (one character each if a three is no token), the last digit glued to
        # the byte after the literal where the vocabulary has that token (``4}``, ``0,``, ``1]``)
        head, last = str(x)[:-1], str(x)[-1]
        pieces = [head[i:i + 3] for i in range(0, len(head), 3)]
        if not all(p.encode() in TOK_ID for p in pieces):
            pieces = list(head)

        def ending(c: str) -> list[str]:
            return [last + c] if (last + c).encode() in TOK_ID else [last, c]

        ok_obj = _brute_force_walk(obj, HAND, _ids(["{", '"n":', *pieces, *ending("}")]))
        assert ok_obj == _want(case, x), (case, x)
        ok_arr = _brute_force_walk(arr, HAND, _ids(["[", *pieces, *ending(","), *pieces, *ending("]")]))
        assert ok_arr == _want(case, x), (case, x)
    # (the rows inside the literals were the automaton's: its walks were taken)
    assert _index(obj)._tok_walks and _index(arr)._tok_walks


def test_literal_ending_mid_token_hand_vocabulary():
    """``1234}``, ``34,``, ``0,``, ``7,\\n``, ``-12``: tokens whose prefix completes the literal at an
    accepted residue or not."""
    be = get_backend("native", HAND)
    sch = {"type": "array", "items": {"type": "integer", "multipleOf": 1234}}
    arr = be.compile(Constraint.json_schema(sch))
    obj = be.compile(Constraint.json_schema({"type": "object", "properties": {"n": {
        "type": "integer", "multipleOf": 1234, "not": {"multipleOf": 7}}, "m": {"type": "integer"}}}))
    assert _brute_force_walk(obj, HAND, _ids(["{", '"n":', "1234}"]))
    assert _brute_force_walk(obj, HAND, _ids(["{", '"n":', "12", "34", "0}"])) == (12340 % 7 != 0)
    assert not _brute_force_walk(obj, HAND, _ids(["{", '"n":', "123", "4", "7,\n", "}"]))
    assert _brute_force_walk(obj, HAND, _ids(["{", '"n":', "-12", "34", " ", "}"]))
    assert _brute_force_walk(obj, HAND, _ids(["{", '"n":', "12", "34,", '"', "m", '": ', "5", "}"]))
    assert not _brute_force_walk(obj, HAND, _ids(["{", '"n":', "12", "3", "34,", '"', "m", '": ', "5", "}"]))
    assert _brute_force_walk(obj, HAND, _ids(["{", '"n":', "8", "638", "}"])) is False  # 7 * 1234
    assert _brute_force_walk(arr, HAND, _ids(["[", "123", "4", ",", "24", "68", ", -", "12", "34", "]"]))
    assert not _brute_force_walk(arr, HAND, _ids(["[", "0,", "12", "34,", "-0"]))
    assert _brute_force_walk(arr, HAND, _ids(["[", "0,", "-1", "234", "]"]))
    assert not _brute_force_walk(arr, HAND, _ids(["[", "123", "4", ",", "123", "1]"]))
    assert not _brute_force_walk(arr, HAND, _ids(["[", "123", "5", "]"]))
    assert _brute_force_walk(arr, HAND, _ids(["[", "-", "1", "23", "4", "]"]))


def _walk_rows(compiled, vocab, text: str):
    """Mask rows (int32) before each token of ``text`` and at the end, and whether it is accepted."""
    idx = _index(compiled)
    from structgate.native.pushdown import START
    state, rows = START, []
    for t in vocab.encode(text) + [None]:
        rows.append(_row(idx, state))
        if t is None:
            return idx.is_accepting(state), rows
        state = idx.next_state(state, t)
        if state == 0:
            return False, rows


@pytest.mark.parametrize("case", _cases(1729, 6), ids=str)
def test_masks_equal_the_engines_walk_and_the_eager_automaton_llama3(llama3_vocab, case):
    """On Llama 3, at every position of literals inside objects, arrays and alone: the rows equal
    the engine's trie walk of the same states (the automaton's walk switched off on that index),
    and the eager remainder automaton's; accepted literals are exactly the values wanted."""
    schemas = [integer_schema(*case), {"type": "array", "items": integer_schema(*case)},
               {"type": "object", "properties": {"n": integer_schema(*case), "m": {"type": "boolean"}}, "required": ["n"]}]
    rnd = random.Random(str(case))
    xs = _literals(case, rnd)
    for sch in schemas:
        fast = get_backend("native", llama3_vocab).compile(Constraint.json_schema(sch))
        slow = get_backend("native", llama3_vocab).compile(Constraint.json_schema(sch))
        _index(slow)._automaton_walk = lambda cr: None
        for x in xs:
            text = json.dumps(x if sch["type"] == "integer" else [x, x] if sch["type"] == "array"
                              else {"n": x, "m": True})
            ok_f, rows_f = _walk_rows(fast, llama3_vocab, text)
            ok_s, rows_s = _walk_rows(slow, llama3_vocab, text)
            assert ok_f == ok_s == _want(case, x), (sch, x)
            assert len(rows_f) == len(rows_s)
            for i, (a, b) in enumerate(zip(rows_f, rows_s)):
                assert np.array_equal(a, b), (sch, text, i)
        assert _index(fast)._tok_walks and not _index(slow)._tok_walks
    # the eager automaton (a product of L states per range state: only the unbounded cases, alone)
    mo, negs, lo, hi = case
    if lo is None and hi is None and math.lcm(mo or 1, *negs) <= 3000:
        eager = get_backend("native", llama3_vocab, eager_residue_max=10 ** 6).compile(
            Constraint.json_schema(integer_schema(*case)))
        fast = get_backend("native", llama3_vocab).compile(Constraint.json_schema(integer_schema(*case)))
        for x in xs:
            ok_e, rows_e = _walk_rows(eager, llama3_vocab, str(x))
            ok_f, rows_f = _walk_rows(fast, llama3_vocab, str(x))
            assert ok_e == ok_f and all(np.array_equal(a, b) for a, b in zip(rows_e, rows_f)), x


def test_eager_and_lazy_rows_agree_at_every_position(llama3_vocab):
    """multipleOf 1234, not multipleOf 3 and -12,340..12,340 plus far values: the eager automaton
    and the residue arithmetic give the same row at every position."""
    sch = {"type": "integer", "multipleOf": 1234, "not": {"multipleOf": 3}}
    eager = get_backend("native", llama3_vocab, eager_residue_max=10 ** 6).compile(Constraint.json_schema(sch))
    lazy = get_backend("native", llama3_vocab).compile(Constraint.json_schema(sch))
    for x in [1234 * k for k in range(-10, 11)] + [1234 * 987654321, 1233, -1235, 1234 * 3 * 10 ** 5 + 1]:
        ok_e, rows_e = _walk_rows(eager, llama3_vocab, str(x))
        ok_l, rows_l = _walk_rows(lazy, llama3_vocab, str(x))
        assert ok_e == ok_l == (x % 1234 == 0 and x % 3 != 0), x
        assert all(np.array_equal(a, b) for a, b in zip(rows_e, rows_l)), x
        assert accepts(lazy, llama3_vocab, str(x)) == ok_l


@pytest.mark.parametrize("sch,value", [
    ({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 9973}}, "required": ["n"]},
     {"n": 9973 * 987654321}),
    # (nearly every prefix of a digit token ends the literal here: ~2,100 pairs to check against
    # the array's rest, which the engine's walk would have taken by walking the state directly)
    ({"type": "array", "items": {"type": "integer", "not": {"multipleOf": 9973}}}, [9973 * 987654321 + 1, -5]),
], ids=["multipleOf-in-object", "not-multipleOf-in-array"])
def test_a_mask_inside_a_literal_builds_few_states(llama3_vocab, sch, value):
    """The mask at a position inside a literal of ``multipleOf 9973`` (or ``not``) builds a
    handful of configurations and generated rules, not one configuration per digit prefix of the
    vocabulary (1,110 with the trie walk: shown by switching the automaton's walk off; there the
    first mask before the literal also generates a rule for nearly every residue of the range
    state)."""
    text = json.dumps(value)
    built = {}
    for name in ("fast", "slow"):
        g = get_backend("native", llama3_vocab).compile(Constraint.json_schema(sch))
        idx = _index(g)
        if name == "slow":
            idx._automaton_walk = lambda cr: None
        from structgate.native.pushdown import START
        state = START
        grown = []
        for t in llama3_vocab.encode(text):
            cfgs, rules = len(idx._cfg_keys), len(idx.gnfa.dyn_node)
            _row(idx, state)
            grown.append((len(idx._cfg_keys) - cfgs, len(idx.gnfa.dyn_node) - rules))
            state = idx.next_state(state, t)
            assert state != 0
        built[name] = grown
    # positions inside a literal: after a digit
    ids = llama3_vocab.encode(text)
    inside = [i for i in range(1, len(ids)) if llama3_vocab.token_bytes[ids[i - 1]].isdigit()]
    assert inside
    for i in inside:
        assert built["fast"][i][0] <= 8 and built["fast"][i][1] <= 8, built["fast"]
    assert max(built["slow"][i][0] for i in inside) >= 1000, built["slow"]
    # before the literal: its first digit starts a state whose row is arithmetic (tokens such as
    # ``:1`` still walk into a few states), where the trie walk generated a rule per residue
    assert max(c for c, _ in built["fast"]) <= 30 and sum(r for _, r in built["fast"]) <= 200, built["fast"]
    assert sum(r for _, r in built["slow"]) >= 5000, built["slow"]


UNIONS = [
    {"anyOf": [{"type": "integer", "multipleOf": 1234}, {"type": "integer", "multipleOf": 2345}]},
    {"anyOf": [{"type": "integer", "multipleOf": 1234}, {"type": "number", "maximum": 5}]},
    {"anyOf": [{"type": "integer", "multipleOf": 4321, "minimum": -10 ** 9}, {"type": "string"}]},
    {"type": "array", "items": {"type": "integer", "not": {"multipleOf": 1013}}, "maxItems": 3},
]


@pytest.mark.parametrize("sch", UNIONS, ids=str)
def test_unions_beside_remainder_automata_llama3(llama3_vocab, sch):
    """Where a literal may be read by two automata, or by an automaton and another number rule,
    the rows equal the engine's walk (the automaton's walk switched off) at every position."""
    fast = get_backend("native", llama3_vocab).compile(Constraint.json_schema(sch))
    slow = get_backend("native", llama3_vocab).compile(Constraint.json_schema(sch))
    _index(slow)._automaton_walk = lambda cr: None
    texts = ["1234", "-2345", "2468", "1234.5", "4.5", "-8642", "12345678", "0", '"x"', "[1013, 1014, -2026]",
             "[5, 0]", "[3039]", str(1234 * 2345 * 7), "1234e3"]
    for text in texts:
        ok_f, rows_f = _walk_rows(fast, llama3_vocab, text)
        ok_s, rows_s = _walk_rows(slow, llama3_vocab, text)
        assert ok_f == ok_s, (sch, text)
        assert len(rows_f) == len(rows_s) and all(np.array_equal(a, b) for a, b in zip(rows_f, rows_s)), (sch, text)
