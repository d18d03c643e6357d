"""Counted repeats (binary counters, :func:`structgate.native.pushdown.count_large_repeats`) must
not only compile: a string inside the bound must be *generatable*. Each count of a counter is its
own pushdown configuration, and every configuration's row interns the targets of every byte class
(~8 per character), so the lazily built configuration automaton reaches ``max_dfa_states``
(200,000) after ~22,000 characters: ``advance`` then raises ``CompileLimitError`` in the middle of
a string that ``jsonschema`` accepts (maxLength 32,767: the real Snowplow / MaskBench shape that the
counters were written for)."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend

pytestmark = pytest.mark.timeout(300)


def test_a_30000_char_string_under_maxlength_32767_is_accepted(llama3_vocab):
    v = llama3_vocab
    schema = {"type": "string", "maxLength": 32767}
    s = "a" * 30000
    assert jsonschema.Draft202012Validator(schema).is_valid(s)
    g = get_backend("native", v, compile_cache_size=0).compile(Constraint("json_schema", schema))
    m = g.matcher()
    assert m.advance(v.encode(json.dumps(s))) and m.is_accepting()
