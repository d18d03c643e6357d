"""Helpers the matcher tests share (``from _matching import accepts, walk_rows, assert_same_masks``)."""
from __future__ import annotations

import numpy as np


def accepts(grammar, vocab, text: str) -> bool:
    """Whether a fresh matcher of ``grammar`` takes the tokens of ``text`` (``vocab.encode``) and
    may end there (EOS allowed)."""
    m = grammar.matcher()
    return m.advance(vocab.encode(text)) and m.is_accepting()


def walk_rows(grammar, vocab, text: str):
    """``(accepted, mask rows)`` of a fresh matcher fed the tokens of ``text``: the packed row
    (int32) before each token and at the end; asserts at each step that the token's mask bit says
    what its advance does (stops at the first refused token)."""
    width = (vocab.vocab_size + 31) // 32
    m = grammar.matcher()
    rows = []
    row = np.zeros((1, width), dtype=np.int32)
    for tk in vocab.encode(text):
        m.fill_bitmask(row, 0)
        rows.append(row[0].copy())
        bit = bool((int(row[0][tk >> 5]) >> (tk & 31)) & 1)
        ok = m.advance(tk)
        assert bit == ok, (text, tk)
        if not ok:
            return False, rows
    m.fill_bitmask(row, 0)
    rows.append(row[0].copy())
    return m.is_accepting(), rows


def assert_same_masks(a, b, vocab, texts, label="") -> None:
    """Grammars ``a`` and ``b`` accept the same texts of ``texts`` with the same mask at every
    step (:func:`walk_rows`)."""
    for t in texts:
        ok_a, rows_a = walk_rows(a, vocab, t)
        ok_b, rows_b = walk_rows(b, vocab, t)
        assert ok_a == ok_b and len(rows_a) == len(rows_b), (label, t)
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            assert np.array_equal(ra, rb), (label, len(t), i)


def jsonschema_disagreements(backend, vocab, schema, values) -> list:
    """``(value, valid)`` for each of ``values`` on which ``backend``'s grammar for ``schema``
    (draft 2020-12 unless it says otherwise) disagrees with ``jsonschema``: the text ``json.dumps(v)``
    walked through the token path (:func:`accepts`) against ``Draft202012Validator.is_valid``."""
    import json

    import jsonschema

    from structgate import Constraint

    full = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    g = backend.compile(Constraint.json_schema(full))
    check = jsonschema.Draft202012Validator(full)
    return [(v, check.is_valid(v)) for v in values if accepts(g, vocab, json.dumps(v)) != check.is_valid(v)]
