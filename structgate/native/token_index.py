"""TokenIndex: which tokens keep a DFA alive from each state, as packed int32 bitmask rows.

For a :class:`~structgate.native.automaton.DFA` and a :class:`~structgate.vocab.Vocabulary`, the
allowed set of state ``s`` is every token whose bytes, fed from ``s``, never reach the dead state 0
(every other state is live by the DFA contract), plus every EOS id iff ``s`` is accepting.
Special tokens (empty bytes) and padding ids ``>= vocab.n_tokens`` are never allowed.

How it is fast (the toktrie idea of llguidance ``docs/toktrie.md``, vectorised with numpy)
-----------------------------------------------------------------------------------------
1. **Per vocabulary, once** (:class:`VocabTrie`, cached per token-bytes content): a byte
   trie over every non-empty token, stored level by level (breadth first). Node ``n`` of level
   ``d`` has a byte label and a parent in level ``d-1``; each token points at the node of its last
   byte. Llama 3 (128,256 tokens, 831 kB of token bytes) gives about 330k nodes.
2. **Per byte partition, once** (:func:`structgate.native.pushdown.class_trie`, cached per vocabulary and
   partition, shared with the pushdown engine): the byte labels are mapped to the DFA's
   byte equivalence classes and the trie is *quotiented*: two nodes with the same parent class node
   and the same class label merge (one ``np.unique`` per level). All tokens with the same
   class string share one class node, so the trie to walk shrinks to the distinct class strings
   (for a JSON-string state almost all letters fall into one class).
3. **Per state, on first visit**: walk the class trie level by level from ``s`` with one
   vectorised table gather per level (``state[child] = table[state[parent], class[child]]``),
   restricting each level to the children of live parents when few are live (pruning dead
   prefixes), then gather the end state of each token's class node, compare with 0, set the EOS
   bits and ``np.packbits`` into the row. Rows are cached per state, so a later visit is a row copy.

Costs (``bench/test_bench_native.py``, Llama 3 128,256 tokens, 2 busy CPU cores, CPU time):

=====================================================  =====================
class-trie build per grammar (vocab trie cached)        ~10-30 ms
first visit, fresh index, structural state               0.3-0.6 ms
first visit, fresh index, inside a JSON string           0.8-1.2 ms
mean over every state of vLLM's schema 1 (333 states)    ~0.45 ms
cached fill (row copy into the caller's bitmask)         ~2-3 us
``fill_rows`` for 64 requests                            ~75 us
=====================================================  =====================

Thread safety: a compiled grammar (and its TokenIndex) is shared between requests and threads; the
cache fill is serialised by a lock, reads of computed rows take no lock.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Sequence

import numpy as np

from ..errors import IncompatibleVocabularyError
from ..vocab import Vocabulary
from .automaton import DEAD, DFA

__all__ = ["VocabTrie", "TokenIndex", "TERMINATED", "vocab_trie"]

#: pseudo-state of a matcher that accepted EOS: its row allows only the EOS ids
TERMINATED = -1


class VocabTrie:
    """Breadth-first byte trie over the non-empty tokens of one vocabulary (grammar independent).

    Attributes
    ----------
    level_bounds : numpy.ndarray
        int64 ``(depth + 1,)``: nodes of level ``d`` (1-based depth) are ``level_bounds[d-1] ..
        level_bounds[d]-1``.
    node_byte : numpy.ndarray
        uint8 ``(n_nodes,)``: the byte on the edge into each node.
    node_parent : numpy.ndarray
        int32 ``(n_nodes,)``: parent node *local to the previous level* (``0`` for level 1, whose
        parent is the root). Within a level, nodes are sorted by (parent, byte).
    token_node : numpy.ndarray
        int32 ``(n_tokens,)``: node of the token's last byte; ``-1`` for tokens with no bytes.
    token_len : numpy.ndarray
        int32 ``(n_tokens,)``: byte length of each token.
    """

    def __init__(self, token_bytes: Sequence[bytes]) -> None:
        n = len(token_bytes)
        lens = np.fromiter((len(b) for b in token_bytes), dtype=np.int64, count=n)
        self.token_len = lens.astype(np.int32)
        maxlen = int(lens.max()) if n else 0
        offs = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        flat = np.frombuffer(b"".join(token_bytes), dtype=np.uint8)
        bounds = [0]
        node_byte = []
        node_parent = []
        token_node = np.full(n, -1, dtype=np.int64)
        # tokens still alive at depth d (len >= d), with their node id local to level d-1
        toks = np.flatnonzero(lens > 0)
        cur = np.zeros(toks.shape[0], dtype=np.int64)  # local node at previous level (root = 0)
        for d in range(1, maxlen + 1):
            keep = lens[toks] >= d
            toks = toks[keep]
            cur = cur[keep]
            if toks.size == 0:
                break
            b = flat[offs[toks] + d - 1].astype(np.int64)
            key = cur * 256 + b
            uniq, inv = np.unique(key, return_inverse=True)
            node_parent.append((uniq >> 8).astype(np.int32))
            node_byte.append((uniq & 255).astype(np.uint8))
            base = bounds[-1]
            bounds.append(base + uniq.shape[0])
            ends = lens[toks] == d
            token_node[toks[ends]] = base + inv[ends]
            cur = inv.astype(np.int64)
        self.level_bounds = np.asarray(bounds, dtype=np.int64)
        self.node_byte = np.concatenate(node_byte) if node_byte else np.zeros(0, np.uint8)
        self.node_parent = np.concatenate(node_parent) if node_parent else np.zeros(0, np.int32)
        self.token_node = token_node.astype(np.int32)

    @property
    def depth(self) -> int:
        return int(self.level_bounds.shape[0] - 1)

    @property
    def n_nodes(self) -> int:
        return int(self.level_bounds[-1])


_trie_by_vocab: "weakref.WeakKeyDictionary[Vocabulary, VocabTrie]" = weakref.WeakKeyDictionary()
_trie_by_bytes: "OrderedDict[int, tuple[tuple[bytes, ...], VocabTrie]]" = OrderedDict()
_trie_lock = threading.Lock()
_TRIE_BYTES_CACHE = 4


def vocab_trie(vocab: Vocabulary) -> VocabTrie:
    """The :class:`VocabTrie` of ``vocab``, built once and shared by every grammar: cached per
    vocabulary object, and per token-bytes content, so equal vocabularies (e.g. the same tokenizer
    with a wider logits width, :meth:`Vocabulary.with_vocab_size`) share one trie. The trie
    depends on the token bytes only."""
    t = _trie_by_vocab.get(vocab)
    if t is not None:
        return t
    with _trie_lock:
        t = _trie_by_vocab.get(vocab)
        if t is not None:
            return t
        tb = vocab.token_bytes
        for key, (other, trie) in _trie_by_bytes.items():
            # tuple equality short-cuts on identical bytes objects: ~1 ms for 128k tokens
            if other is tb or (len(other) == len(tb) and other == tb):
                t = trie
                _trie_by_bytes.move_to_end(key)
                break
        if t is None:
            t = VocabTrie(tb)
            _trie_by_bytes[id(t)] = (tb, t)
            while len(_trie_by_bytes) > _TRIE_BYTES_CACHE:
                _trie_by_bytes.popitem(last=False)
        _trie_by_vocab[vocab] = t
        return t


class TokenIndex:
    """Allowed-token bitmask rows of one DFA over one vocabulary, computed lazily and cached.

    Parameters
    ----------
    dfa : DFA
        Dense byte DFA (state 0 dead, 1 start, every other state live).
    vocab : Vocabulary
        Token bytes, EOS ids and logits width (``vocab_size``) of the rows.

    Attributes
    ----------
    width : int
        Words per row, ``ceil(vocab.vocab_size / 32)``.
    n_class_nodes : int
        Nodes of the class-quotiented token trie walked per state.

    Notes
    -----
    Row layout as in :mod:`structgate.bitmask`: int32, bit ``t % 32`` of word ``t // 32`` set iff
    token ``t`` is allowed. Bits of ids ``>= vocab_size`` in the last word are 0.
    """

    #: fraction of live parents under which a level is walked by expanding child ranges
    PRUNE_BELOW = 0.25
    #: levels smaller than this are always walked in full (fewer numpy calls)
    PRUNE_MIN_NODES = 2048
    #: rows reserved up front (zero pages until touched); beyond, the row store doubles
    ROW_RESERVE = 1024

    def __init__(self, dfa: DFA, vocab: Vocabulary) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self.width = (vocab.vocab_size + 31) // 32
        nc = dfa.n_classes
        ns = dfa.n_states
        if ns < 2 or np.asarray(dfa.table[0]).any() or dfa.accepting[0]:
            raise ValueError("DFA violates the automaton contract: state 0 must be dead and 1 the start")
        self._n_classes = nc
        # transposed table, flat: next state of (s, c) is _table_t[c * n_states + s]
        self._table_t = np.ascontiguousarray(np.asarray(dfa.table, dtype=np.int32).T).ravel()
        self._accepting = np.asarray(dfa.accepting, dtype=bool)
        self._byte_classes = np.asarray(dfa.byte_classes, dtype=np.int64)
        # per-byte table for next_state when it is small (<= 16 MiB), else class lookups
        self._byte_table = (np.ascontiguousarray(dfa.byte_table(), dtype=np.int32)
                            if ns * 256 * 4 <= 16 << 20 else None)
        self._table = np.ascontiguousarray(dfa.table, dtype=np.int32)
        self._byte_class_list = [int(c) for c in dfa.byte_classes]

        # -- the trie quotiented by the DFA's byte classes (shared per vocabulary and partition) ---
        from .pushdown import class_trie

        ct = class_trie(vocab, np.asarray(dfa.byte_classes, dtype=np.uint8))
        levels: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        for base, par, cls, bounds in ct.levels:
            levels.append((base, par, (cls * ns).astype(np.int32), bounds.astype(np.int32)))
        cbase = ct.n_nodes
        self._levels = levels
        self.n_class_nodes = cbase
        self._buf = np.empty(max([lv[1].shape[0] for lv in levels] or [1]), dtype=np.int32)
        self._ends = np.zeros(cbase + 1, dtype=np.int32)  # walk output, reused under the lock
        # per level: (base, output view, parents, class offsets, child bounds, scratch view)
        self._plan = [(lv[0], self._ends[lv[0]: lv[0] + lv[1].shape[0]], lv[1], lv[2], lv[3],
                       self._buf[: lv[1].shape[0]]) for lv in levels]
        # class node of each token; specials point at a slot (n_class_nodes) that is always dead
        tok_c = np.full(vocab.vocab_size, cbase, dtype=np.int32)
        tok_c[: vocab.n_tokens] = ct.token_cnode[: vocab.n_tokens]
        self._eos = np.asarray(sorted(set(vocab.eos_token_ids)), dtype=np.intp)
        tok_c[self._eos] = cbase  # EOS follows the accepting rule only, even if it has bytes
        self._token_cnode = tok_c
        self._eos_set = frozenset(int(e) for e in self._eos)
        self._eos_word = self._eos >> 5
        self._eos_bit = (np.ones(1, dtype=np.uint32) << (self._eos & 31).astype(np.uint32)).view(np.int32)

        # -- row cache --------------------------------------------------------------------------
        n_states = dfa.n_states
        # slot of each state's row; index n_states (== TERMINATED == -1) is the EOS-only row
        self._slot = np.full(n_states + 1, -1, dtype=np.int64)
        # np.zeros is calloc-backed: untouched rows cost no memory, so reserve room for every state
        # (up to ROW_RESERVE) and avoid copies on growth
        self._rows = np.zeros((max(4, min(n_states + 2, self.ROW_RESERVE)), self.width), dtype=np.int32)
        self._n_allowed: list[int] = []  # per slot: allowed ids (incl. EOS)
        self._n_non_eos: list[int] = []  # per slot: allowed non-EOS ids
        self._lock = threading.Lock()
        # the terminated pseudo-state row (EOS only)
        with self._lock:
            row = np.zeros(self.width, dtype=np.int32)
            self._set_eos(row)
            self._store(n_states, row, len(self._eos), 0)

    # -- internals ----------------------------------------------------------------------------
    def _set_eos(self, row: np.ndarray) -> None:
        for w, b in zip(self._eos_word, self._eos_bit):
            row[w] |= b

    def _store(self, state_slot: int, row: np.ndarray, n_allowed: int, n_non_eos: int) -> int:
        slot = len(self._n_allowed)
        if slot >= self._rows.shape[0]:
            grown = np.zeros((self._rows.shape[0] * 2, self.width), dtype=np.int32)
            grown[:slot] = self._rows[:slot]
            self._rows = grown
        self._rows[slot] = row
        self._n_allowed.append(n_allowed)
        self._n_non_eos.append(n_non_eos)
        self._slot[state_slot] = slot  # publish last
        return slot

    def _walk(self, state: int) -> np.ndarray:
        """End state (0 = dead) of every class node fed from ``state``: int32 ``(n_class_nodes+1,)``,
        the last entry (special tokens) always 0. Returns a buffer reused by the next call: the
        caller holds the lock and consumes it before releasing."""
        table = self._table_t
        out = self._ends
        prune_below = self.PRUNE_BELOW
        prune_min = self.PRUNE_MIN_NODES
        count_nonzero = np.count_nonzero
        plan = self._plan
        if not plan:  # no token has bytes
            return out
        cbase, dst, par, cls_off, bounds, b = plan[0]
        table.take(cls_off + state, out=dst, mode="clip")
        prev = dst
        for d in range(1, len(plan)):
            cbase, dst, par, cls_off, bounds, b = plan[d]
            n = b.shape[0]
            if n >= prune_min:
                n_alive = count_nonzero(prev)
                if n_alive == 0:
                    out[cbase:] = 0
                    break
                if n_alive < prune_below * prev.shape[0]:
                    alive = np.flatnonzero(prev)
                    st = bounds[alive]
                    c = bounds[alive + 1] - st
                    cs = np.cumsum(c)
                    tot = int(cs[-1])
                    if tot == 0:
                        out[cbase:] = 0
                        break
                    # expand the child ranges [bounds[p], bounds[p+1]) of the live parents p
                    idx = np.repeat(st - (cs - c), c)
                    idx += np.arange(tot, dtype=np.intp)
                    dst.fill(0)
                    dst[idx] = table[prev[par[idx]] + cls_off[idx]]
                    prev = dst
                    continue
            elif (n < 256 or not (d & 3)) and not count_nonzero(prev):
                # deep levels are small: check liveness on each of them, every 4th level above
                out[cbase:] = 0
                break
            prev.take(par, out=b, mode="clip")
            b += cls_off
            table.take(b, out=dst, mode="clip")
            prev = dst
        return out

    def _compute(self, state: int) -> int:
        """Compute and cache the row of ``state``; returns its slot. Caller holds the lock."""
        if state == DEAD:
            row = np.zeros(self.width, dtype=np.int32)
            return self._store(state, row, 0, 0)
        live = self._walk(state) != 0
        allowed = live.take(self._token_cnode, mode="clip")
        n_non_eos = int(np.count_nonzero(allowed))
        acc = bool(self._accepting[state])
        pad = (-allowed.shape[0]) % 32
        if pad:
            allowed = np.concatenate([allowed, np.zeros(pad, dtype=bool)])
        row = np.packbits(allowed, bitorder="little").view(np.int32)
        n_allowed = n_non_eos
        if acc:
            row = row.copy()
            self._set_eos(row)
            n_allowed += len(self._eos)
        return self._store(state, row, n_allowed, n_non_eos)

    def _slot_of(self, state: int) -> int:
        slot = int(self._slot[state])
        if slot < 0:
            with self._lock:
                slot = int(self._slot[state])
                if slot < 0:
                    slot = self._compute(state)
        return slot

    # -- public API ---------------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return self.dfa.n_states

    @property
    def n_cached(self) -> int:
        """Rows computed so far (including the dead and terminated rows)."""
        return len(self._n_allowed)

    def row(self, state: int) -> np.ndarray:
        """The cached row of ``state`` (computed on first visit). Read-only view; do not modify.

        Parameters
        ----------
        state : int
            DFA state ``0 .. n_states-1``, or :data:`TERMINATED` (``-1``) for the EOS-only row.

        Returns
        -------
        row : numpy.ndarray
            int32 ``(width,)``.
        """
        state = self._check_state(state)
        slot = self._slot_of(state)
        r = self._rows[slot].view()
        r.flags.writeable = False  # a view of the shared cache: callers must not write through it
        return r

    def fill_row(self, state: int, out: np.ndarray) -> bool:
        """Copy the row of ``state`` into ``out`` (int32 ``(width,)``, writable).

        Returns
        -------
        need_apply : bool
            True if some id of ``0 .. vocab_size-1`` is forbidden.
        """
        state = self._check_state(state)
        slot = self._slot_of(state)
        out[...] = self._rows[slot]
        return self._n_allowed[slot] < self.vocab.vocab_size

    def fill_rows(self, states: np.ndarray, out: np.ndarray) -> None:
        """Gather the rows of many states into a batch bitmask in one vectorised copy.

        Parameters
        ----------
        states : numpy.ndarray
            int ``(k,)``: DFA states (or :data:`TERMINATED`), one per output row.
        out : numpy.ndarray | torch.Tensor
            int32 ``(k, width)``, C-contiguous, CPU, writable (``bitmask[a:b]`` is a view;
            ``bitmask[rows]`` with a list is a copy: scatter ``rows[slots(states)]`` instead).

        Raises
        ------
        IndexError
            A state outside ``-1 .. n_states-1``.
        """
        if not isinstance(out, np.ndarray):
            out = out.numpy()  # a CPU torch tensor: shares memory
        states = np.asarray(states, dtype=np.int64)
        if states.size and (states.min() < -1 or states.max() >= self.n_states):
            raise IndexError(f"state out of range 0..{self.n_states - 1} (or -1): {states}")
        slots = self._slot[states]
        if (slots < 0).any():
            for s in np.unique(states[slots < 0]):
                self._slot_of(int(s))
            slots = self._slot[states]
        np.take(self._rows, slots, axis=0, out=out)

    def slots(self, states: np.ndarray) -> np.ndarray:
        """Row indices into :attr:`rows` for ``states`` (computing missing rows first)."""
        states = np.asarray(states, dtype=np.int64)
        slots = self._slot[states]
        if (slots < 0).any():
            for s in np.unique(states[slots < 0]):
                self._slot_of(int(s))
            slots = self._slot[states]
        return slots

    @property
    def rows(self) -> np.ndarray:
        """All cached rows, int32 ``(capacity, width)`` (use with :meth:`slots`)."""
        return self._rows

    def is_cached(self, state: int) -> bool:
        """True if the row of ``state`` is computed (a fill is then a row copy)."""
        return bool(self._slot[self._check_state(state)] >= 0)

    def n_allowed(self, state: int) -> int:
        """Number of allowed ids in ``state`` (EOS included)."""
        return self._n_allowed[self._slot_of(self._check_state(state))]

    def has_non_eos(self, state: int) -> bool:
        """True if some non-EOS token is allowed in ``state``."""
        return self._n_non_eos[self._slot_of(self._check_state(state))] > 0

    def is_accepting(self, state: int) -> bool:
        """True if ``state`` is accepting; :data:`TERMINATED` counts as accepting."""
        return state == TERMINATED or (state >= 0 and bool(self._accepting[state]))

    def next_state(self, state: int, token_id: int) -> int:
        """State after feeding token ``token_id``'s bytes from ``state``; 0 if the token is
        rejected (dead, no bytes, padding, or EOS — EOS is handled by the matcher)."""
        if not (0 <= token_id < self.vocab.n_tokens) or state <= 0 or token_id in self._eos_set:
            return DEAD
        data = self.vocab.token_bytes[token_id]
        if not data:
            return DEAD
        bt = self._byte_table
        if bt is not None:
            for b in data:
                state = bt[state, b]
                if state == 0:
                    return DEAD
            return int(state)
        t, bc = self._table, self._byte_class_list
        for b in data:
            state = t[state, bc[b]]
            if state == 0:
                return DEAD
        return int(state)

    def check_start(self) -> None:
        """Raise :class:`IncompatibleVocabularyError` if no token at all is allowed in the start
        state (the vocabulary cannot spell any output of this grammar)."""
        from .automaton import START

        if self.n_allowed(START) == 0:
            pat = self.dfa.pattern
            shown = (pat[:80] + "...") if len(pat) > 80 else pat
            raise IncompatibleVocabularyError(
                f"no token of vocabulary {self.vocab.name!r} can start an output of this grammar"
                + (f" ({shown!r})" if shown else ""))

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held: computed rows, the class trie and tables."""
        n = (self.n_cached * self.width * 4 + self._slot.nbytes + self._token_cnode.nbytes
             + self._table_t.nbytes + self._table.nbytes + self._ends.nbytes + self._buf.nbytes)
        if self._byte_table is not None:
            n += self._byte_table.nbytes
        for _, par, cls_off, bounds in self._levels:
            n += par.nbytes + cls_off.nbytes + bounds.nbytes
        return int(n)

    def _check_state(self, state: int) -> int:
        s = int(state)
        if s == TERMINATED:
            return self.n_states
        if not 0 <= s < self.n_states:
            raise IndexError(f"state {s} out of range 0..{self.n_states - 1}")
        return s
