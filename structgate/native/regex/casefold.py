"""Case-insensitive matching (the ``i`` flag): close a code-point set under case equivalence.

Two characters are equivalent when Python's ``re`` would let one match the other as a literal
under ``re.IGNORECASE`` (Unicode): they have the same *simple* lowercase mapping
(``_sre.unicode_tolower``, the UnicodeData field, e.g. U+0130 İ → i), or their lowercase forms are
linked by ``re``'s extra case table (``re._casefix._EXTRA_CASES``: i/ı, s/ſ, µ/μ, ...). Under the
flag a set matches every character equivalent to one of its members; a negated class is the
complement of the closed set (``(?i)[^a]`` rejects ``a`` and ``A``).
"""
from __future__ import annotations

import threading

import numpy as np

__all__ = ["fold_ranges"]

_LOCK = threading.Lock()
_TABLE: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[int, ...]]] | None = None
_SCAN_END = 0x20000  # no cased characters above U+1FFFF


def _tolower():
    try:
        import _sre

        return _sre.unicode_tolower
    except (ImportError, AttributeError):  # pragma: no cover - non-CPython
        def low(cp: int) -> int:
            s = chr(cp).lower()
            return ord(s) if len(s) == 1 else cp
        return low


def _extra_cases() -> dict[int, tuple[int, ...]]:
    try:
        from re import _casefix

        return dict(_casefix._EXTRA_CASES)
    except (ImportError, AttributeError):  # pragma: no cover
        return {}


def _table():
    global _TABLE
    if _TABLE is not None:
        return _TABLE
    with _LOCK:
        if _TABLE is not None:
            return _TABLE
        low = _tolower()
        parent: dict[int, int] = {}

        def find(x: int) -> int:
            root = x
            while parent.get(root, root) != root:
                root = parent[root]
            while parent.get(x, x) != root:
                parent[x], x = root, parent[x]
            return root

        def union(a: int, b: int) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        for cp in range(_SCAN_END):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            k = low(cp)
            if k != cp:
                union(cp, k)
        for k, vs in _extra_cases().items():
            for v in vs:
                union(k, v)
        groups: dict[int, list[int]] = {}
        for x in list(parent):
            groups.setdefault(find(x), []).append(x)
        for r in list(groups):
            if r not in groups[r]:
                groups[r].append(r)
        mem: list[int] = []
        gid: list[int] = []
        of: dict[int, tuple[int, ...]] = {}
        for g, members in enumerate(groups.values()):
            t = tuple(sorted(set(members)))
            if len(t) < 2:
                continue
            for c in t:
                mem.append(c)
                gid.append(g)
                of[c] = t
        order = np.argsort(np.array(mem, dtype=np.int64), kind="stable")
        mem_a = np.array(mem, dtype=np.int64)[order]
        gid_a = np.array(gid, dtype=np.int64)[order]
        _TABLE = (mem_a, gid_a, np.empty(0), np.empty(0), of)
        return _TABLE


def fold_ranges(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Close normalized code-point ``ranges`` under case equivalence (normalized result)."""
    from .parser import normalize_ranges

    if not ranges:
        return ranges
    mem, gid, _, _, of = _table()
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        eq = of.get(ranges[0][0])
        if eq is None:
            return ranges
        return normalize_ranges([(c, c) for c in eq])
    starts = np.array([lo for lo, _ in ranges], dtype=np.int64)
    ends = np.array([hi for _, hi in ranges], dtype=np.int64)
    idx = np.searchsorted(starts, mem, side="right") - 1
    inside = (idx >= 0) & (mem <= ends[np.maximum(idx, 0)])
    if not inside.any():
        return ranges
    hit = np.isin(gid, np.unique(gid[inside]))
    extra = mem[hit & ~inside].tolist()
    if not extra:
        return ranges
    return normalize_ranges(list(ranges) + [(c, c) for c in extra])


def fold_ranges_ascii(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Close normalized code-point ``ranges`` under ASCII case equivalence only (``a``-``z`` with
    ``A``-``Z``): Python's ``re.IGNORECASE`` under ``re.ASCII`` (``(?ai)``), where ``k`` does not match
    the Kelvin sign U+212A nor ``é`` match ``É`` (normalized result)."""
    from .parser import normalize_ranges

    extra = []
    for lo, hi in ranges:
        for a, b, shift in ((0x61, 0x7A, -32), (0x41, 0x5A, 32)):
            x, y = max(lo, a), min(hi, b)
            if x <= y:
                extra.append((x + shift, y + shift))
    return normalize_ranges(list(ranges) + extra) if extra else ranges
