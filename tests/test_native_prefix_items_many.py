"""Long ``prefixItems`` lists: each optional position nests the next one, so 1,000 positions were
built by 1,000 nested calls (``CompileLimitError("nesting_depth")`` for a valid, flat schema). The
positions are now built from the last one without recursion, and in grammar mode every
``PREFIX_CHUNK`` positions the rest becomes a rule, so the regex text nests boundedly too.

Oracle: ``jsonschema`` (draft 2020-12) on arrays of every length around the bounds and the chunk
edges, each also with one wrong element.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.native.json_schema import _type_array
from _matching import accepts as _accepts

PREFIX_CHUNK = getattr(_type_array, "PREFIX_CHUNK", 64)  # (absent before the fix: the test still runs)


@pytest.fixture(scope="module")
def native(llama3_vocab):
    return get_backend("native", llama3_vocab, compile_cache_size=0)


def _positions(n: int):
    return [{"type": "integer"} if i % 2 else {"type": "string"} for i in range(n)]


@pytest.mark.parametrize("n,extra", [
    (1000, {}),
    (1000, {"items": False}),
    (1000, {"minItems": 700, "items": False}),
    (300, {"minItems": 150, "maxItems": 200}),
    (2 * PREFIX_CHUNK + 1, {"items": {"type": "boolean"}}),
], ids=lambda x: json.dumps(x) if isinstance(x, dict) else str(x))
def test_long_prefix_items_compile_and_match_the_validator(native, llama3_vocab, n, extra):
    schema = {"type": "array", "prefixItems": _positions(n), **extra}
    g = native.compile(Constraint.json_schema(schema))
    v = jsonschema.Draft202012Validator(schema)
    mn = extra.get("minItems", 0)
    lengths = {0, 1, 2, mn - 1, mn, mn + 1, n - 1, n, n + 1, 200, 201}
    lengths |= {k * PREFIX_CHUNK + d for k in (1, 2) for d in (-1, 0, 1)}
    for m in sorted(x for x in lengths if x >= 0):
        good = ["s" if i % 2 == 0 else i for i in range(m)]
        if m > n:
            good[n:] = [True] * (m - n)
        cases = [good]
        if m:
            bad = list(good)
            bad[m // 2] = None
            cases.append(bad)
        for arr in cases:
            text = json.dumps(arr)
            assert _accepts(g, llama3_vocab, text) == v.is_valid(arr), (n, extra, m, arr[m // 2] if m else None)
