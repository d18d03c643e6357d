"""Code-point ranges → exact sequences of UTF-8 byte ranges.

A character class is a set of Unicode scalar ranges; the byte automaton needs, for each range,
a list of *sequences* ``((lo1, hi1), (lo2, hi2), ...)`` of byte ranges such that the byte strings
``b1 b2 ...`` with ``lo_i <= b_i <= hi_i`` are **exactly** the UTF-8 encodings of the code points
in the range (nothing more, nothing less, surrogates excluded).

Method (RE2 ``utf8.cc`` / rust-lang ``regex-syntax/src/utf8.rs``, ``Utf8Sequences``):

1. split the range around the surrogates U+D800..U+DFFF (they have no UTF-8 encoding);
2. split where the encoded length changes (U+007F, U+07FF, U+FFFF);
3. split until, for every continuation-byte position, the piece covers whole blocks of 64
   (``(start & m) == 0`` and ``(end & m) == m`` for ``m = 2**(6*i) - 1`` whenever the pieces
   differ above bit ``6*i``);
4. each remaining piece is the product of the byte ranges between the encodings of its ends.

Table of encoded lengths::

    U+0000   .. U+007F    1 byte   [00-7F]
    U+0080   .. U+07FF    2 bytes  [C2-DF][80-BF]
    U+0800   .. U+FFFF    3 bytes  [E0][A0-BF][80-BF] | [E1-EC][80-BF][80-BF] | [ED][80-9F][80-BF] | [EE-EF][80-BF][80-BF]
    U+10000  .. U+10FFFF  4 bytes  [F0][90-BF][80-BF][80-BF] | [F1-F3][80-BF]{3} | [F4][80-8F][80-BF][80-BF]

Example: ``utf8_sequences(0x80, 0x7FF) == [((0xC2, 0xDF), (0x80, 0xBF))]``.
"""
from __future__ import annotations

from functools import lru_cache

__all__ = ["utf8_sequences", "utf8_sequences_for_ranges", "MAX_CODE_POINT", "SURROGATES"]

MAX_CODE_POINT = 0x10FFFF
#: the surrogate block, which has no UTF-8 encoding
SURROGATES = (0xD800, 0xDFFF)

Sequence = tuple[tuple[int, int], ...]


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8")


@lru_cache(maxsize=4096)
def utf8_sequences(start: int, end: int) -> tuple[Sequence, ...]:
    """The byte-range sequences whose strings are exactly the UTF-8 encodings of ``start..end``.

    Parameters
    ----------
    start, end : int
        Inclusive code-point bounds, ``0 <= start``, ``end <= 0x10FFFF``. An empty range
        (``start > end``) or a range made only of surrogates gives ``()``.

    Returns
    -------
    sequences : tuple[tuple[tuple[int, int], ...], ...]
        In increasing code-point order; each sequence has 1..4 ``(lo, hi)`` byte ranges.

    Raises
    ------
    ValueError
        A bound outside ``0 .. 0x10FFFF``.
    """
    if start < 0 or end > MAX_CODE_POINT:
        raise ValueError(f"code-point range {start:#x}..{end:#x} outside 0..0x10FFFF")
    out: list[Sequence] = []
    stack = [(start, end)]
    while stack:
        s, e = stack.pop()
        while True:
            if s < 0xE000 and e > 0xD7FF:  # split around the surrogates
                stack.append((0xE000, e))
                e = 0xD7FF
                continue
            if s > e:
                break
            split = False
            for mx in (0x7F, 0x7FF, 0xFFFF):  # encoded-length boundaries
                if s <= mx < e:
                    stack.append((mx + 1, e))
                    e = mx
                    split = True
                    break
            if split:
                continue
            if e <= 0x7F:
                out.append(((s, e),))
                break
            for i in (1, 2, 3):
                m = (1 << (6 * i)) - 1
                if (s & ~m) != (e & ~m):
                    if s & m:
                        stack.append(((s | m) + 1, e))
                        e = s | m
                        split = True
                        break
                    if (e & m) != m:
                        stack.append((e & ~m, e))
                        e = (e & ~m) - 1
                        split = True
                        break
            if split:
                continue
            bs, be = _encode(s), _encode(e)
            out.append(tuple(zip(bs, be)))
            break
    return tuple(out)


def utf8_sequences_for_ranges(ranges) -> list[Sequence]:
    """Concatenated :func:`utf8_sequences` of sorted, disjoint code-point ranges ``[(lo, hi), ...]``."""
    out: list[Sequence] = []
    for lo, hi in ranges:
        out.extend(utf8_sequences(lo, hi))
    return out
