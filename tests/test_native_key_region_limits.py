"""``patternProperties`` key regions at their limits (break-it findings F2-F4 in bench/README.md,
"A break-it helper on the new key regions"): :class:`._overlap.Relations` first.
"""
from __future__ import annotations

import pytest


RXS = {"a": '"a.*"', "b": '".*b"', "ab": '"ab.*"', "a2": '"a.*"', "d": '"[0-9]+"', "n": '"[0-9]{2}"',
       "e": '"(?:a|b)*"', "x": '"x{3,5}"'}


@pytest.mark.parametrize("dense", [True, False])
def test_relations_memo_equals_relation(monkeypatch, dense):
    """:class:`_overlap.Relations` (each DFA built once, each unordered pair walked once, the walk's
    seen pairs in a bitmap or a set) gives :func:`_overlap.relation`'s answer for both orders."""
    from structgate.native.json_schema import _overlap

    if not dense:
        monkeypatch.setattr(_overlap, "_DENSE_PAIRS", 0)
    rel = _overlap.Relations(RXS)
    want = {("a", "b"): "overlap", ("a", "ab"): "superset", ("a", "a2"): "equal", ("a", "d"): "disjoint",
            ("n", "d"): "subset", ("e", "a"): "overlap", ("x", "e"): "disjoint"}
    for (p, q), r in want.items():
        assert rel(p, q) == r == _overlap.relation(RXS[p], RXS[q]), (p, q)
        assert rel(q, p) == _overlap._FLIP[r] == _overlap.relation(RXS[q], RXS[p]), (q, p)
    for p in RXS:
        for q in RXS:
            if p != q:
                assert rel(p, q) == _overlap.relation(RXS[p], RXS[q]), (p, q)
