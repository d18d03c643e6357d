"""Ambiguous counted repeats (a break-it finding): in ``(?:a{100,}|a){50,200}`` a run of ``a`` is one
repetition or many, so one configuration held the same position of the item under up to ``hi``
counts, one stack frame each (5,450 items after 200 ``a``), and every configuration of a long run
was a new one: walking 300-500 characters took 4-29 s of CPU, each step under ``step_timeout_s``.
The engine now merges the frames of one counter that differ only by their count into frames of
*a to b more repetitions* (:meth:`structgate.native.pushdown.PushdownIndex._merge_counts`,
:class:`structgate.native.pushdown.RepeatCounter`'s ``("r", a, b)`` states).

Asserted here: the matcher accepts exactly what the oracle accepts (``re.fullmatch``; where
``re`` backtracks exponentially on a near miss, a closed form checked against ``re.fullmatch`` on
a small-count variant over every short string), the mask and the advance agree at every step,
the masks are the same with merging turned off (``COUNT_MERGE_LEVELS = 0``, on texts short enough
for the unmerged walk), and a walk of ~500 accepted characters finishes with small configurations
(a hang guard, not a benchmark).

Repeats inside a counter's item (a later finding): a repeat of 32 or more inside the item of a
:class:`~structgate.native.pushdown.RepeatCounter` that repeats more times than the outer repeat is
a counter too, however small its expansion (:func:`structgate.native.pushdown.count_large_repeats`,
``NESTED_REPEAT_MIN_COUNT``): expanded, ``.{100,}`` in ``(?:.{100,}|\\d){40,}`` held its 100
positions at once (901 items). Asserted: acceptance against ``re.fullmatch``, the masks equal to
those of the expanded inner repeat (``NESTED_REPEAT_MIN_COUNT = 0``), which repeats are counted,
and the largest configuration's item count on walks where the expansion held hundreds.

The same inside an expanded repeat's item (an outer ``+``/``*``, or a repeat too small to count)
and inside a rule referenced from one: ``(?:.{100,}|\\d)+`` held 902 items over a digit run, 11
now; asserted as above, against ``re.fullmatch`` and the expanded masks."""
from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest

from structgate import Constraint, get_backend
from structgate.native.pushdown import PushdownIndex

from _matching import assert_same_masks, walk_rows

pytestmark = pytest.mark.timeout(300)


def _ab_reps(lo: int, hi: int):
    """``(?:ab|a|b){lo,hi}`` over ``{a, b}``: a repetition is one character or ``ab``, and the
    ``ab`` of a string never overlap, so the counts reachable are ``len - #ab .. len``."""
    return lambda t: set(t) <= {"a", "b"} and len(t) >= lo and len(t) - t.count("ab") <= hi


def _run_splits(lo: int, hi: int, seg_lo: int, seg_hi: int):
    """``(?:(?:a{L,}|a){seg_lo,seg_hi}|b){lo,hi}`` over ``{a, b}`` with every run of ``a`` shorter
    than ``L``: each ``b`` is a repetition, a run of ``r`` ``a`` is ``k`` of them for every ``k``
    from ``ceil(r / seg_hi)`` to ``floor(r / seg_lo)``."""
    def ok(t: str) -> bool:
        if not set(t) <= {"a", "b"}:
            return False
        mn = mx = t.count("b")
        for run in re.findall("a+", t):
            r = len(run)
            k0, k1 = -(-r // seg_hi), r // seg_lo
            if k0 > k1:
                return False
            mn, mx = mn + k0, mx + k1
        return mn <= hi and mx >= lo
    return ok


def _short_strings(alpha: str, n: int):
    for L in range(n + 1):
        for t in itertools.product(alpha, repeat=L):
            yield "".join(t)


def test_closed_forms_agree_with_re_on_small_counts():
    rx = re.compile("(?:ab|a|b){4,6}")
    f = _ab_reps(4, 6)
    assert all((rx.fullmatch(t) is not None) == f(t) for t in _short_strings("ab", 11))
    rx = re.compile("(?:(?:a{9,}|a){2,3}|b){3,5}")
    f = _run_splits(3, 5, 2, 3)
    assert all((rx.fullmatch(t) is not None) == f(t) for t in _short_strings("ab", 8))


# (pattern, alphabet of the random texts, lengths around the bounds, oracle or None: re.fullmatch)
CASES = [
    ("(?:a{100,}|a){50,200}", "a", [0, 1, 49, 50, 51, 99, 100, 101, 149, 150, 199, 200, 201, 250, 300], None),
    ("(?:a{139,}|.){67,281}", "ab\u00e9", [66, 67, 68, 138, 139, 140, 205, 206, 280, 281, 282, 300, 420], None),
    ("(?:a{40,}|a){35,90}", "a", [34, 35, 36, 74, 75, 89, 90, 91, 130, 131], None),
    ("(?:[ab]{50,}|a){40,100}", "ab", [39, 40, 41, 99, 100, 101, 150], None),
    ("(?:ab|a|b){200,300}", "ab", [199, 200, 201, 299, 300, 301, 400, 401], _ab_reps(200, 300)),
    ("(?:(?:a{600,}|a){2,40}|b){35,80}", "ab", [34, 35, 36, 79, 80, 81, 120], _run_splits(35, 80, 2, 40)),
    ("(?:.{100,}|\\d){40,}", "a1", [39, 40, 41, 141], None),
    ("(?:x|[a-z]{20,}){33,70}", "xa", [32, 33, 34, 69, 70, 71, 120], None),
    ("(?:a{100,}|a){50,200}b(?:a{30,}|a){40,50}", "ab", [90, 91, 92, 150, 200], None),
]


def _texts(alpha: str, lens, seed: int):
    rnd = random.Random(seed)
    out = []
    for n in lens:
        out.append(alpha[0] * n)
        out.append("".join(rnd.choice(alpha) for _ in range(n)))
        if n > 3:
            s = list(alpha[0] * n)
            s[rnd.randrange(n)] = alpha[-1]
            out.append("".join(s))
            s = list("".join(rnd.choice(alpha) for _ in range(n // 2)) + alpha[0] * (n - n // 2))
            out.append("".join(s))
    return out


def _largest_configuration(g, vocab, text: str) -> tuple[bool, int]:
    """Walk ``text`` (a mask fill and an advance per token, each token allowed): whether the end
    accepts, and the item count of the largest configuration the walk made."""
    m = g.matcher()
    row = np.zeros((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
    for tk in vocab.encode(text):
        m.fill_bitmask(row, 0)
        assert m.advance(tk)
    return m.is_accepting(), max(len(k) for k in m.token_index._cfg_keys)


def _compile(vocab, pattern: str):
    return get_backend("native", vocab, compile_cache_size=0).compile(Constraint.regex(pattern))


@pytest.mark.parametrize("pattern,alpha,lens,oracle", CASES, ids=[c[0] for c in CASES])
def test_accepts_what_the_oracle_accepts(llama3_vocab, pattern, alpha, lens, oracle):
    g = _compile(llama3_vocab, pattern)
    rx = re.compile(pattern)
    want_of = oracle or (lambda t: rx.fullmatch(t) is not None)
    for t in _texts(alpha, lens, seed=len(pattern)):
        got, _rows = walk_rows(g, llama3_vocab, t)
        assert got == want_of(t), (pattern, len(t), t)


@pytest.mark.parametrize("pattern,alpha,lens", [
    ("(?:a{100,}|a){50,200}", "a", [49, 50, 120, 150]),
    ("(?:a{139,}|.){67,281}", "ab", [66, 67, 140]),
    ("(?:ab|a|b){200,300}", "ab", [130]),
    ("(?:(?:a{600,}|a){2,40}|b){35,80}", "ab", [79, 80, 81]),
])
def test_masks_equal_the_unmerged_masks(llama3_vocab, monkeypatch, pattern, alpha, lens):
    merged = _compile(llama3_vocab, pattern)
    monkeypatch.setattr(PushdownIndex, "COUNT_MERGE_LEVELS", 0)
    plain = _compile(llama3_vocab, pattern)
    for t in _texts(alpha, lens, seed=7):
        monkeypatch.setattr(PushdownIndex, "COUNT_MERGE_LEVELS", 3)
        a, rows_a = walk_rows(merged, llama3_vocab, t)
        monkeypatch.setattr(PushdownIndex, "COUNT_MERGE_LEVELS", 0)
        b, rows_b = walk_rows(plain, llama3_vocab, t)
        assert a == b and len(rows_a) == len(rows_b), (pattern, t)
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            assert np.array_equal(ra, rb), (pattern, len(t), i)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pattern,text", [
    ("(?:a{100,}|a){50,200}", "a" * 500),
    ("(?:a{139,}|.){67,281}", "a" * 480),
    ("(?:a{139,}|.){67,281}", "ab" * 140),
])
def test_a_long_walk_keeps_configurations_small(llama3_vocab, pattern, text):
    assert re.fullmatch(pattern, text)
    g = _compile(llama3_vocab, pattern)
    ok, _rows = walk_rows(g, llama3_vocab, text)
    assert ok
    ix = g.matcher().token_index
    # one frame per count: thousands of items (5,450 after 200 "a" in the first pattern)
    assert max(len(k) for k in ix._cfg_keys) < 1_000


# --- repeats inside a counter's item (count_large_repeats, NESTED_REPEAT_MIN_COUNT) ----------------
# Expanded, ``.{100,}`` in ``(?:.{100,}|\d){40,}`` was 100 copies of ``.``; where the outer item is
# ambiguous every copy was alive at once (901 items, a new configuration each step: 7 s for 140
# characters). A repeat of 32 or more inside a RepeatCounter's item that repeats more times than
# the outer repeat is now a counter too, whose frames merge into intervals.

NESTED = [
    ("(?:.{100,}|\\d){40,}", "1a", [39, 40, 41, 140, 141]),
    ("(?:a{100,}|b){40,}", "ba", [39, 40, 41, 139, 140, 141]),
    ("(?:a{100,}|a){35,60}", "a", [34, 35, 36, 59, 60, 61, 99, 100, 160, 161, 300]),
    ("(?:[a-z]{50,80}|\\d){40,}", "1a", [39, 40, 41, 100, 130]),
    ("(?:x{40}|y){10,33}", "xy", [9, 10, 399, 400, 401, 440, 1320, 1321]),
]

#: outer repeats left expanded (``+``, ``*``, or too small to count) around a large inner one
OUTER = [
    ("(?:.{100,}|\\d)+", "1a", [1, 2, 99, 100, 101, 140, 201]),
    ("(?:.{100,}|\\d)*", "a1", [0, 1, 99, 100, 150]),
    ("(?:[a-z]{1,100}\\s?)+", "a ", [1, 2, 100, 101, 102, 230]),
    ("(?:x|[a-z]{40,60}y?){2,5}", "xay", [1, 2, 39, 40, 41, 60, 61, 130, 200, 301]),
    ("(?:[a-zA-Z0-9-]{1,63}\\.)+[a-zA-Z]{2,63}", "a.-", [3, 4, 63, 64, 65, 66, 127, 130, 140]),
]


@pytest.mark.parametrize("pattern,alpha,lens", NESTED + OUTER, ids=[c[0] for c in NESTED + OUTER])
def test_counted_inner_repeats_accept_what_re_accepts(llama3_vocab, pattern, alpha, lens):
    """Inside a counter's item (``NESTED``), and inside an expanded repeat's item (``OUTER``)."""
    g = _compile(llama3_vocab, pattern)
    rx = re.compile(pattern)
    for t in _texts(alpha, lens, seed=len(pattern)):
        got, _rows = walk_rows(g, llama3_vocab, t)
        assert got == (rx.fullmatch(t) is not None), (pattern, len(t), t)


#: inner repeats counted inside a counter's item (seed 11), and inside an expanded repeat's item (an
#: outer ``+`` or a repeat too small to count; seed 13)
COUNTED_INNER = [
    ("(?:.{100,}|\\d){40,}", "1a", [41, 120], 11),
    ("(?:.{100,}|\\d){40,}", "a1", [60], 11),
    ("(?:a{100,}|b){40,}", "ba", [40, 141], 11),
    ("(?:[a-z]{50,80}|\\d){40,}", "1a", [40, 130], 11),
    ("(?:x{40}|y){10,33}", "xy", [400, 401], 11),
    ("(?:.{100,}|\\d)+", "1a", [60, 120], 13),
    ("(?:[a-z]{1,100}\\s?)+", "a ", [101, 150], 13),
    ("(?:x|[a-z]{40,60}y?){2,5}", "xay", [61, 130], 13),
    ("(?:[a-zA-Z0-9-]{1,63}\\.)+[a-zA-Z]{2,63}", "a.-", [66, 130], 13),
]


@pytest.mark.parametrize("pattern,alpha,lens,seed", COUNTED_INNER)
def test_counted_inner_repeats_mask_as_expanded(llama3_vocab, monkeypatch, pattern, alpha, lens, seed):
    from structgate.native import pushdown

    counted = _compile(llama3_vocab, pattern)
    monkeypatch.setattr(pushdown, "NESTED_REPEAT_MIN_COUNT", 0)
    expanded = _compile(llama3_vocab, pattern)
    assert_same_masks(counted, expanded, llama3_vocab, _texts(alpha, lens, seed=seed), pattern)


def test_which_inner_repeats_are_counted(llama3_vocab):
    from structgate.native import pushdown

    be = get_backend("native", llama3_vocab, compile_cache_size=0)

    def counters(pattern: str, **kw) -> int:
        g, _ = pushdown.count_large_repeats(be.to_grammar(Constraint.regex(pattern)), lazy=True, **kw)
        return g.__dict__.get("_n_counters", 0)

    assert counters("(?:.{100,}|\\d){40,}") == 2
    assert counters("(?:.{100,}|\\d){40,}", nested_min_count=0) == 1  # the switch
    assert counters("(?:[a-z]{50,80}|\\d){40,}") == 2
    # as many counts outside as inside: expanded, as before (the outer count's mask alias sees it)
    assert counters("(?:.{100,}|\\d){400,}") == 1
    assert counters("(?:x{30}|y){10,50}") == 1  # under 32 repetitions


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pattern,text,bound", [
    ("(?:.{100,}|\\d){40,}", "a1" * 70, 100),  # 901 items expanded
    ("(?:.{100,}|\\d){40,}", "1" * 140, 450),  # 902 expanded; a diagonal of (outer, inner) counts
    ("(?:a{100,}|b){40,}", "a" * 140, 10),  # 47 expanded
    ("(?:[a-z]{50,80}|\\d){40,}", "a" * 400, 20),  # 81 expanded
])
def test_nested_counters_keep_configurations_small(llama3_vocab, pattern, text, bound):
    accepting, largest = _largest_configuration(_compile(llama3_vocab, pattern), llama3_vocab, text)
    assert accepting == (re.fullmatch(pattern, text) is not None)
    assert largest < bound


# --- repeats inside an expanded repeat's item, and through rule references ---------------------
# An outer ``+``/``*`` (or a repeat too small to be a counter) is expanded, so its item's large
# repeat was too: ``(?:.{100,}|\d)+`` over digits held every position of ``.{100,}`` at once (902
# items, 2.6 s for 140 characters). The repeats of an expanded repeat's item are now counted as a
# counter's are (more repetitions than the outer repeat), and so are those of a rule referenced
# inside such an item (``y ::= (x | [0-9])+``, ``x ::= [^\n]{100,}``).


_GBNF = 'root ::= y\ny ::= (x | [0-9])+\nx ::= [^\\n]{100,}\n'
#: the same with a rule between the repeat's item and the large repeat
_GBNF_VIA = ['root ::= y\ny ::= (x | [0-9])+\nx ::= w\nw ::= [^\\n]{100,}\n',
             'root ::= y\ny ::= (x | [0-9])+\nx ::= w "z"?\nw ::= v\nv ::= [^\\n]{100,}\n']
_GBNF_RE = "(?:[^\\n]{100,}|[0-9])+"


def _compile_gbnf(vocab, text: str):
    return get_backend("native", vocab, compile_cache_size=0).compile(Constraint.grammar(text, "gbnf"))


def test_repeat_through_a_reference_accepts_what_re_accepts(llama3_vocab):
    g = _compile_gbnf(llama3_vocab, _GBNF)
    rx = re.compile(_GBNF_RE)
    for t in _texts("1a\u00e9", [1, 2, 99, 100, 101, 150], seed=3):
        got, _rows = walk_rows(g, llama3_vocab, t)
        assert got == (rx.fullmatch(t) is not None), (len(t), t)


def test_repeat_through_a_reference_masks_as_expanded(llama3_vocab, monkeypatch):
    from structgate.native import pushdown

    default = pushdown.NESTED_REPEAT_MIN_COUNT
    for text in [_GBNF] + _GBNF_VIA:
        monkeypatch.setattr(pushdown, "NESTED_REPEAT_MIN_COUNT", default)
        counted = _compile_gbnf(llama3_vocab, text)
        monkeypatch.setattr(pushdown, "NESTED_REPEAT_MIN_COUNT", 0)
        expanded = _compile_gbnf(llama3_vocab, text)
        assert_same_masks(counted, expanded, llama3_vocab, _texts("1az", [70, 110], seed=5), text)


def test_which_repeats_in_expanded_items_are_counted(llama3_vocab):
    from structgate.native import pushdown

    be = get_backend("native", llama3_vocab, compile_cache_size=0)

    def counters(c: Constraint, **kw) -> int:
        g, _ = pushdown.count_large_repeats(be.to_grammar(c), lazy=True, **kw)
        return g.__dict__.get("_n_counters", 0)

    assert counters(Constraint.regex("(?:.{100,}|\\d)+")) == 1
    assert counters(Constraint.regex("(?:.{100,}|\\d)+"), nested_min_count=0) == 0  # the switch
    assert counters(Constraint.regex("(?:[a-z]{1,100}\\s?)*")) == 1
    assert counters(Constraint.regex("(?:[a-z]{1,31}\\s?)*")) == 0  # under 32 repetitions
    assert counters(Constraint.regex("(?:x|[a-z]{40,60}y?){2,5}")) == 1
    assert counters(Constraint.regex("(?:x|[a-z]{4,6}y?){2,5}")) == 0
    assert counters(Constraint.grammar(_GBNF, "gbnf")) == 1
    assert counters(Constraint.grammar(_GBNF, "gbnf"), nested_min_count=0) == 0
    for g in _GBNF_VIA:  # through a rule between (a break-it finding: 0 counters, the old 902 items)
        assert counters(Constraint.grammar(g, "gbnf")) == 1, g
    # not inside a repeat's item: as before (too small to count)
    assert counters(Constraint.grammar('root ::= x "b"\nx ::= [a-z]{40,}\n', "gbnf")) == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("constraint,text,bound", [
    (Constraint.regex("(?:.{100,}|\\d)+"), "1" * 140, 50),  # 902 items expanded
    (Constraint.regex("(?:.{100,}|\\d)*"), "a1" * 70, 50),
    (Constraint.regex("(?:[a-z]{1,100}\\s?)+"), "abcdefghij" * 14, 30),  # 110 expanded
    (Constraint.grammar(_GBNF, "gbnf"), "1" * 140, 50),  # 902 expanded
])
def test_repeats_in_expanded_items_keep_configurations_small(llama3_vocab, constraint, text, bound):
    g = get_backend("native", llama3_vocab, compile_cache_size=0).compile(constraint)
    accepting, largest = _largest_configuration(g, llama3_vocab, text)
    assert accepting
    assert largest < bound
