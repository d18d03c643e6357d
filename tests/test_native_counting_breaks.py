"""Counted repeats (binary counters, :func:`structgate.native.pushdown.count_large_repeats`) compile
in milliseconds, but each count of a counter is its own pushdown configuration and every
configuration's row interns its targets for every byte class (~9 configurations per character), so
the length of one counted output is bounded by ``max_dfa_states`` (docs/design.md, "Errors and
limits"; found by a new-user pass: with the default 200,000 a string under ``maxLength: 32767``
stops at ~22,000 characters). Asserted here, on a small bound so the test is quick: past the limit
the advance raises the typed ``CompileLimitError("max_dfa_states")`` (never a wrong mask, never an
untyped error), and a larger ``max_dfa_states`` lets the same string through, as ``jsonschema``
accepts it."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.errors import CompileLimitError

pytestmark = pytest.mark.timeout(300)


def _advance_all(g, ids) -> bool:
    m = g.matcher()
    return all(m.advance(t) for t in ids) and m.is_accepting()


def test_a_long_counted_string_is_bounded_by_max_dfa_states_typed(llama3_vocab):
    v = llama3_vocab
    schema = {"type": "string", "maxLength": 32767}
    s = "a" * 3000
    assert jsonschema.Draft202012Validator(schema).is_valid(s)
    ids = v.encode(json.dumps(s))
    # one configuration per count reached (about 3,100 for 3,000 characters): the limit is typed
    small = get_backend("native", v, compile_cache_size=0, max_dfa_states=2_000).compile(Constraint("json_schema", schema))
    with pytest.raises(CompileLimitError) as e:
        _advance_all(small, ids)
    assert e.value.limit_name == "max_dfa_states"
    big = get_backend("native", v, compile_cache_size=0, max_dfa_states=60_000).compile(Constraint("json_schema", schema))
    assert _advance_all(big, ids)
    assert not _advance_all(big, v.encode(json.dumps("a" * 3000)[:-1] + "\\"))  # a dangling escape: rejected
