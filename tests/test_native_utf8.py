"""UTF-8 range → byte-range sequences: brute force against str.encode."""
from __future__ import annotations

import itertools
import random

import pytest

from structgate.native.regex.utf8 import utf8_sequences, utf8_sequences_for_ranges

BOUNDARIES = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xCFFF, 0xD000, 0xD7FF, 0xD800, 0xDBFF,
              0xDC00, 0xDFFF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0xFFFFF, 0x100000,
              0x10FFFF]


def n_codepoints(lo: int, hi: int) -> int:
    """Non-surrogate code points in lo..hi."""
    if lo > hi:
        return 0
    n = hi - lo + 1
    s_lo, s_hi = max(lo, 0xD800), min(hi, 0xDFFF)
    return n - max(0, s_hi - s_lo + 1)


def expand(seqs):
    out = []
    for seq in seqs:
        for combo in itertools.product(*[range(a, b + 1) for a, b in seq]):
            out.append(bytes(combo))
    return out


def encodings(lo: int, hi: int):
    return [chr(c).encode() for c in range(lo, hi + 1) if not 0xD800 <= c <= 0xDFFF]


def check_exact_small(lo: int, hi: int) -> None:
    got = expand(utf8_sequences(lo, hi))
    want = encodings(lo, hi)
    assert len(got) == len(set(got)), "sequences overlap"
    assert sorted(got) == sorted(want)


def product_size(seq) -> int:
    n = 1
    for a, b in seq:
        n *= b - a + 1
    return n


def disjoint(s1, s2) -> bool:
    if len(s1) != len(s2):
        return True
    return any(a1 > b2 or a2 > b1 for (a1, b1), (a2, b2) in zip(s1, s2))


def check_exact_large(lo: int, hi: int, rng: random.Random) -> None:
    seqs = utf8_sequences(lo, hi)
    # count: sum of the products equals the number of encodable code points
    assert sum(product_size(s) for s in seqs) == n_codepoints(lo, hi)
    # pairwise disjoint, so no string is counted twice
    for s1, s2 in itertools.combinations(seqs, 2):
        assert disjoint(s1, s2), (s1, s2)
    # every string of every sequence (corners + random samples) is a valid encoding in range
    for seq in seqs:
        corners = [bytes(x) for x in itertools.product(*[(a, b) for a, b in seq])]
        samples = [bytes(rng.randint(a, b) for a, b in seq) for _ in range(20)]
        for bs in corners + samples:
            s = bs.decode("utf-8")  # strict: raises on an invalid string
            assert len(s) == 1 and lo <= ord(s) <= hi
    # and random code points of the range are covered
    for _ in range(50):
        c = rng.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF:
            continue
        e = chr(c).encode()
        assert any(len(s) == len(e) and all(a <= x <= b for x, (a, b) in zip(e, s)) for s in seqs)


def test_known_tables():
    assert utf8_sequences(0x80, 0x7FF) == (((0xC2, 0xDF), (0x80, 0xBF)),)
    assert utf8_sequences(0, 0x7F) == (((0, 0x7F),),)
    assert utf8_sequences(0, 0x10FFFF) == (
        ((0x00, 0x7F),),
        ((0xC2, 0xDF), (0x80, 0xBF)),
        ((0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)),
        ((0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)),
        ((0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)),
        ((0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)),
    )


def test_surrogates_and_empty():
    assert utf8_sequences(0xD800, 0xDFFF) == ()
    assert utf8_sequences(5, 4) == ()
    check_exact_small(0xD700, 0xE100)
    with pytest.raises(ValueError):
        utf8_sequences(0, 0x110000)


def test_emoji_range_exact():
    # field case outlines-emoji-range-multitoken: [😀-🙏] is U+1F600..U+1F64F
    check_exact_small(0x1F600, 0x1F64F)
    assert utf8_sequences(0x1F600, 0x1F64F) == (
        ((0xF0, 0xF0), (0x9F, 0x9F), (0x98, 0x98), (0x80, 0xBF)),
        ((0xF0, 0xF0), (0x9F, 0x9F), (0x99, 0x99), (0x80, 0x8F)),
    )


def test_boundary_ranges_exhaustive():
    for b in BOUNDARIES:
        for lo, hi in [(b - 70, b + 70), (b, b), (b - 1, b + 1), (b - 300, b), (b, b + 300)]:
            lo, hi = max(0, lo), min(0x10FFFF, hi)
            check_exact_small(lo, hi)


def test_random_small_ranges_exhaustive():
    rng = random.Random(1234)
    for _ in range(300):
        lo = rng.choice([rng.randint(0, 0x10FFFF), rng.randint(0, 0x1000), rng.choice(BOUNDARIES)])
        hi = min(0x10FFFF, lo + rng.choice([0, 1, 5, 63, 64, 65, 200, 1500]))
        check_exact_small(lo, hi)


def test_random_large_ranges():
    rng = random.Random(99)
    pairs = [(0, 0x10FFFF), (0x80, 0x10FFFF), (0x800, 0xFFFF), (0x10000, 0x10FFFF), (0xD7FF, 0xE000)]
    for _ in range(150):
        a, b = sorted(rng.choice([rng.randint(0, 0x10FFFF), rng.choice(BOUNDARIES)]) for _ in range(2))
        pairs.append((a, b))
    for lo, hi in pairs:
        check_exact_large(lo, hi, rng)


def test_for_ranges_concatenates():
    rs = [(0x41, 0x5A), (0xE9, 0xE9), (0x4E2D, 0x4E2D)]
    got = expand(utf8_sequences_for_ranges(rs))
    assert sorted(got) == sorted(encodings(0x41, 0x5A) + ["é".encode(), "中".encode()])
