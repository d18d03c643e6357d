"""A walk's packed row written straight from its token ids (:meth:`PushdownIndex._allowed_row`,
few tokens) equals the row through a bool array over the vocabulary and ``packbits``, and the
masks of whole walks are the same either way.

Oracle: the set of token ids ending on the walked nodes, computed token by token from the trie's
``token_cnode`` map, and the bool path itself (``DIRECT_ROW_MAX = -1``)."""
from __future__ import annotations

import numpy as np
import pytest

from structgate import Constraint
from structgate.native.backend import NativeBackend
from structgate.native.pushdown import PushdownIndex


def _ids(row: np.ndarray, vocab_size: int) -> set[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size]
    return set(np.flatnonzero(bits).tolist())


@pytest.fixture(scope="module")
def index(llama3_vocab):
    g = NativeBackend(llama3_vocab).compile(Constraint.json_schema(
        {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}))
    return g.token_index


@pytest.mark.parametrize("n_nodes", [0, 1, 3, 40, 400, 3000])
def test_direct_row_equals_token_set(index, n_nodes, monkeypatch):
    trie = index._trie
    rng = np.random.default_rng(n_nodes)
    nodes = np.unique(rng.integers(0, trie.n_nodes, size=n_nodes)).astype(np.int64)
    vs = index.vocab.vocab_size
    want = set(np.flatnonzero(np.isin(trie.token_cnode[:vs], nodes)).tolist()) - set(index._eos.tolist())
    direct = index._allowed_row(trie, nodes, index._token_cnode)
    monkeypatch.setattr(PushdownIndex, "DIRECT_ROW_MAX", -1)
    packed = index._allowed_row(trie, nodes, index._token_cnode)
    assert direct.dtype == np.int32 and direct.shape == (index.width,) and direct.flags.writeable
    assert _ids(direct, vs) == want == _ids(packed, vs)
    assert np.array_equal(direct, packed)


def test_eos_never_in_a_direct_row(index):
    trie = index._trie
    eos_nodes = trie.token_cnode[index._eos]
    eos_nodes = eos_nodes[eos_nodes < trie.n_nodes]
    row = index._allowed_row(trie, eos_nodes.astype(np.int64), index._token_cnode)
    assert not (_ids(row, index.vocab.vocab_size) & set(index._eos.tolist()))


def test_masks_equal_with_and_without_direct_rows(llama3_vocab, monkeypatch):
    """Every mask along valid documents, from two fresh compiles (direct rows, then the bool
    path only), is the same."""
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "bc"]}},
                                               "who": {"type": "string", "maxLength": 12}}, "required": ["id"]}
    docs = ['{"id": 12, "tags": ["a", "bc"], "who": "ann"}', '{ "id" : -3 }', '{"id":0,"who":"x y z"}']
    rows = []
    for limit in (PushdownIndex.DIRECT_ROW_MAX, -1):
        monkeypatch.setattr(PushdownIndex, "DIRECT_ROW_MAX", limit)
        g = NativeBackend(llama3_vocab, compile_cache_size=0).compile(Constraint.json_schema(schema))
        out = []
        for d in docs:
            m = g.matcher()
            for t in llama3_vocab.encode(d):
                out.append(np.asarray(m.token_index.row(m.state)).copy())
                assert m.advance(t)
            out.append(np.asarray(m.token_index.row(m.state)).copy())
        rows.append(out)
    assert len(rows[0]) == len(rows[1]) > 20
    assert all(np.array_equal(a, b) for a, b in zip(*rows))
