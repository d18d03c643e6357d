"""How two regular languages relate (disjoint, equal, one inside the other, or overlapping):
a breadth-first walk over the pairs of states of their two byte DFAs.

Used by the JSON Schema compiler to split the keys of ``patternProperties`` by which patterns
match them (a key matching several patterns must satisfy all their schemas).
"""
from __future__ import annotations

import numpy as np

from ..regex import RegexOptions, compile_regex

__all__ = ["relation", "Relations", "DEFAULT_MAX_PAIRS"]

#: most state pairs :func:`relation` visits before giving up
DEFAULT_MAX_PAIRS = 200_000
#: seconds each of the two DFAs of :func:`relation` may take to build (``RegexOptions.timeout_s``);
#: past it the relation is undecided (None). A search pattern such as ``[^b]{1,500}$`` determinises
#: into states that each hold hundreds of NFA states: 23 s and 2.5 GB under the 20,000-state cap,
#: a raw ``MemoryError`` at ``{1,800}`` (found by a break-it helper, 2026-12-06)
RELATION_TIMEOUT_S = 10.0
#: :func:`relation`'s walk keeps the pairs it has seen in a bitmap (one byte a pair) when the two
#: DFAs have at most this many pairs of states, else in a set
_DENSE_PAIRS = 1 << 25


def relation(rx_a: str, rx_b: str, max_pairs: int = DEFAULT_MAX_PAIRS,
             max_states: int = 20_000) -> str | None:
    """The relation of the full-match languages ``L(rx_a)`` and ``L(rx_b)``.

    Parameters
    ----------
    rx_a, rx_b : str
        Regexes in the native dialect (full match, over UTF-8 bytes).
    max_pairs : int
        Bound on visited (state of a, state of b) pairs.
    max_states : int
        DFA state bound for each regex (and :data:`RELATION_TIMEOUT_S` seconds to build each).

    Returns
    -------
    str | None
        ``"disjoint"`` (no common string), ``"equal"``, ``"subset"`` (L(a) ⊊ L(b)),
        ``"superset"`` (L(a) ⊋ L(b)), ``"overlap"`` (a common string, and each has one the other
        lacks); None when the walk or a DFA exceeded its bound (undecided).
    """
    if rx_a == rx_b:
        return "equal"
    da = _dfa(rx_a, max_states)
    db = None if da is None else _dfa(rx_b, max_states)
    return None if db is None else _walk(da, db, max_pairs)


#: :func:`_dfa`'s DFAs by (regex, max_states), for the process (cleared whole past
#: :data:`_DFAS_MAX`): the same ``patternProperties`` patterns recur under many objects of a schema
#: (MaskBench ``Github_ultra---o12652``: 17 builds of 8 patterns, ~40 % of its compile) and across
#: schemas. Only built DFAs are kept (one past a bound is tried again: the time bound depends on
#: load), at most :data:`_DFAS_MAX` of them and :data:`_DFAS_MAX_BYTES` together
_DFAS: dict[tuple[str, int], object] = {}
_DFAS_MAX = 64
_DFAS_MAX_BYTES = 32 << 20
_dfas_bytes = [0]


def _dfa(rx: str, max_states: int):
    """The byte DFA of ``rx`` (:data:`RELATION_TIMEOUT_S` seconds and ``max_states`` states to
    build), or None past either bound. The DFA is shared (:data:`_DFAS`): callers only read it."""
    from ...errors import CompileLimitError

    hit = _DFAS.get((rx, max_states))
    if hit is not None:
        return hit
    try:
        d = compile_regex(rx, options=RegexOptions(max_states=max_states, timeout_s=RELATION_TIMEOUT_S))
    except CompileLimitError:
        return None
    size = d.memory_size_bytes
    if size <= _DFAS_MAX_BYTES // 4:  # (a larger one is not kept)
        if len(_DFAS) >= _DFAS_MAX or _dfas_bytes[0] + size > _DFAS_MAX_BYTES:
            _DFAS.clear()
            _dfas_bytes[0] = 0
        _DFAS[(rx, max_states)] = d
        _dfas_bytes[0] += size
    return d


#: the relation of (b, a) from that of (a, b)
_FLIP = {"subset": "superset", "superset": "subset", "equal": "equal", "disjoint": "disjoint",
         "overlap": "overlap", None: None}


class Relations:
    """:func:`relation` over a fixed set of regexes, each DFA built once and each unordered pair
    walked once (``n`` patterns: ``n`` DFAs instead of ``2 n (n - 1)``; six large search patterns
    of a ``patternProperties`` took 51 s of their 61 in DFA builds, found by a break-it helper).

    ``Relations(rxs)(a, b)`` is ``relation(rxs[a], rxs[b])`` (``rxs``: a mapping)."""

    def __init__(self, rxs, max_pairs: int | None = None, max_states: int = 20_000):
        self.rxs = rxs
        self.max_pairs = DEFAULT_MAX_PAIRS if max_pairs is None else max_pairs
        self.max_states = max_states
        self._dfas: dict = {}
        self._rel: dict = {}

    def __call__(self, a, b) -> str | None:
        if (b, a) in self._rel:
            return _FLIP[self._rel[(b, a)]]
        if (a, b) not in self._rel:
            ra, rb = self.rxs[a], self.rxs[b]
            if ra == rb:
                self._rel[(a, b)] = "equal"
            else:
                da = self._dfa(a)
                db = None if da is None else self._dfa(b)
                self._rel[(a, b)] = None if db is None else _walk(da, db, self.max_pairs)
        return self._rel[(a, b)]

    def _dfa(self, a):
        if a not in self._dfas:
            self._dfas[a] = _dfa(self.rxs[a], self.max_states)
        return self._dfas[a]


def _walk(da, db, max_pairs: int) -> str | None:
    """:func:`relation` of two built DFAs: the breadth-first walk over their state pairs (pair
    ``(a, b)`` numbered ``a * nb + b``; the pairs seen so far in a bitmap when there are at most
    :data:`_DENSE_PAIRS` of them, else in a set)."""
    ta, tb = da.byte_table(), db.byte_table()
    acc_a, acc_b = da.accepting, db.accepting
    both = a_only = b_only = False
    na, nb = ta.shape[0], tb.shape[0]
    start = 1 * nb + 1
    dense = na * nb <= _DENSE_PAIRS
    if dense:
        seen_bits = np.zeros(na * nb, dtype=bool)
        seen_bits[[0, start]] = True  # (the dead pair (0, 0) is never walked)
    seen = {start}
    n_seen = 1
    frontier = np.array([start], dtype=np.int64)
    while frontier.size:
        sa, sb = frontier // nb, frontier % nb
        # every non-dead state is live: a pair with one side dead has a string only the other has
        if ((sa == 0) & (sb != 0)).any():
            b_only = True
        if ((sb == 0) & (sa != 0)).any():
            a_only = True
        live = (sa != 0) & (sb != 0)
        sa, sb = sa[live], sb[live]
        aa, ab = acc_a[sa], acc_b[sb]
        both |= bool((aa & ab).any())
        a_only |= bool((aa & ~ab).any())
        b_only |= bool((ab & ~aa).any())
        if both and a_only and b_only:
            return "overlap"
        nxt = (ta[sa].astype(np.int64) * nb + tb[sb]).ravel()
        if dense:
            new_a = np.unique(nxt[~seen_bits[nxt]])
            seen_bits[new_a] = True
            n_seen += new_a.size
        else:
            new = [int(x) for x in np.unique(nxt) if int(x) not in seen and x != 0]
            seen.update(new)
            n_seen = len(seen)
            new_a = np.array(new, dtype=np.int64)
        if n_seen > max_pairs:
            return None
        frontier = new_a
    if not both:
        return "disjoint"
    if not a_only and not b_only:
        return "equal"
    return "subset" if not a_only else "superset" if not b_only else "overlap"
