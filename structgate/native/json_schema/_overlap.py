"""How two regular languages relate (disjoint, equal, one inside the other, or overlapping):
a breadth-first walk over the pairs of states of their two byte DFAs.

Used by the JSON Schema compiler to split the keys of ``patternProperties`` by which patterns
match them (a key matching several patterns must satisfy all their schemas).
"""
from __future__ import annotations

import numpy as np

from ..regex import RegexOptions, compile_regex

__all__ = ["relation", "DEFAULT_MAX_PAIRS"]

#: most state pairs :func:`relation` visits before giving up
DEFAULT_MAX_PAIRS = 200_000
#: seconds each of the two DFAs of :func:`relation` may take to build (``RegexOptions.timeout_s``);
#: past it the relation is undecided (None). A search pattern such as ``[^b]{1,500}$`` determinises
#: into states that each hold hundreds of NFA states: 23 s and 2.5 GB under the 20,000-state cap,
#: a raw ``MemoryError`` at ``{1,800}`` (found by a break-it helper, 2026-12-06)
RELATION_TIMEOUT_S = 10.0


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
    from ...errors import CompileLimitError

    try:
        opts = RegexOptions(max_states=max_states, timeout_s=RELATION_TIMEOUT_S)
        da = compile_regex(rx_a, options=opts)
        db = compile_regex(rx_b, options=opts)
    except CompileLimitError:
        return None
    ta, tb = da.byte_table(), db.byte_table()
    acc_a, acc_b = da.accepting, db.accepting
    both = a_only = b_only = False
    nb = tb.shape[0]
    seen = {1 * nb + 1}
    frontier = np.array([1 * nb + 1], dtype=np.int64)
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
        nxt = np.unique((ta[sa].astype(np.int64) * nb + tb[sb]).ravel())
        new = [int(x) for x in nxt if int(x) not in seen and x != 0]
        seen.update(new)
        if len(seen) > max_pairs:
            return None
        frontier = np.array(new, dtype=np.int64)
    if not both:
        return "disjoint"
    if not a_only and not b_only:
        return "equal"
    return "subset" if not a_only else "superset" if not b_only else "overlap"
