"""Recursion through the native backend (schema_to_grammar + the pushdown engine), token by token
with the real Llama 3 vocabulary: the issue's acceptance shapes, jsonschema as the oracle."""
from __future__ import annotations

import json

import jsonschema
import pytest

from structgate.backends.interface import Constraint
from test_field_cases import walk
from test_json_schema_grammar import LIST, TREE, _at_depth, _chain, _tree, nest


@pytest.fixture(scope="module")
def native(llama3_vocab):
    from structgate.native.backend import NativeBackend

    return NativeBackend(llama3_vocab)


def _check(native, vocab, schema, good, bad):
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid(good) and not v.is_valid(bad)
    g = native.compile(Constraint.json_schema(schema))
    text = json.dumps(good)
    assert walk(g, vocab, text)[:2] == (True, True)
    assert walk(g, vocab, json.dumps(good, separators=(",", ":")))[:2] == (True, True)
    for cut in (len(text) - 1, len(text) // 2):  # truncated: a live prefix, never complete
        ok, eos, more = walk(g, vocab, text[:cut])
        assert ok and not eos and more
    assert walk(g, vocab, json.dumps(bad))[:2] != (True, True)


def test_tree_30_deep(native, llama3_vocab):
    t = _tree(30)
    bad = json.loads(json.dumps(t))
    node = bad
    for _ in range(19):
        node = node["children"][0]
    node["value"] = "x"  # a wrong type at depth 20
    _check(native, llama3_vocab, TREE, t, bad)


def test_linked_list_50_long(native, llama3_vocab):
    d = _chain(50)
    bad = json.loads(json.dumps(d))
    _at_depth(bad, ["next"] * 20)["v"] = [1]
    _check(native, llama3_vocab, LIST, d, bad)


@pytest.mark.parametrize("schema", [{"type": "object"}, {}], ids=["object", "empty"])
def test_values_30_deep(native, llama3_vocab, schema):
    good = {"a": [nest(30)]}
    bad = json.loads(json.dumps(good))
    _check(native, llama3_vocab, {**schema, "type": "object", "properties": {"a": {"type": "array"}}},
           good, {"a": {"k": bad}})
    g = native.compile(Constraint.json_schema(schema))
    assert walk(g, llama3_vocab, json.dumps(good))[:2] == (True, True)
    assert walk(g, llama3_vocab, json.dumps(good)[:-1])[:2] == (True, False)


_DEEP = {
    "tree": (Constraint.json_schema({"type": "object", "properties": {"child": {"$ref": "#"}}}),
             {"whitespace": "compact"}, '{"child":', '}{'),
    # the optional whitespace after "," kept a dead path looking alive (found by a fuzzing helper)
    "list": (Constraint.json_schema({"$defs": {"t": {"type": "array", "minItems": 1, "items": False,
                                                     "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/t"}]}},
                                     "$ref": "#/$defs/t"}), {}, "[0,", "]"),
    "free-array": (Constraint.json_schema({"type": "array"}), {}, "[", "]"),
    "gbnf-parens": (Constraint.grammar('root ::= "(" " "? root " "? ")" | "x"', "gbnf"), {}, "(", ")x"),
    "lark-brackets": (Constraint.grammar('start: "[" " "? start ("," " "? start)* " "? "]" | "0"', "lark"),
                      {}, "[", "]0"),
}


@pytest.mark.parametrize("depth", [3, 40])
@pytest.mark.parametrize("case", sorted(_DEEP))
def test_the_depth_bound_never_leaves_a_dead_end(case, depth, llama3_vocab):
    """Interface rule 1 at ``max_recursion_depth``: a token is allowed only if the output can still
    be completed. A walk that opens as deep as the mask lets it (one byte token at a time, the
    case's opening bytes first), then closes: at every step the mask is non-empty, the walk gets at
    least ``depth`` levels deep (the bound is not cut short), and the output completes. Before the
    fix, a key or separator whose value had to open one more level was allowed at the bound and
    then nothing was (40 > :attr:`PushdownIndex.DEPTH_HORIZON`: the horizon's path; 3: below it)."""
    import numpy as np

    from structgate.native.backend import NativeBackend

    constraint, opts, opening, closing = _DEEP[case]
    v = llama3_vocab
    m = NativeBackend(v, max_recursion_depth=depth, **opts).compile(constraint).matcher()
    bm = np.zeros((1, (v.vocab_size + 31) // 32), dtype=np.int32)
    byte_tok = {}
    for ch in set(opening + closing + " "):
        (t,) = v.encode(ch)
        byte_tok[ch] = t

    def allowed(t):
        return (int(bm[0, t >> 5]) >> (t & 31)) & 1

    opened, phase, steps = 0, opening, 0
    while True:
        m.fill_bitmask(bm, 0)
        assert bm.any(), f"{case}: empty mask after {opened} opening bytes ({steps} steps)"
        if any(allowed(e) for e in v.eos_token_ids) and phase is closing:
            break
        pick = next((c for c in phase if allowed(byte_tok[c])), None)
        if pick is None and phase is opening:
            phase = closing
            continue
        if pick is None:  # anything the mask allows (whitespace, a digit): never a dead end
            pick_t = int(np.flatnonzero(np.unpackbits(bm[0].view(np.uint8), bitorder="little"))[0])
        else:
            pick_t = byte_tok[pick]
            opened += phase is opening and pick == opening[0]
        assert m.advance(pick_t)
        steps += 1
        assert steps < 40 * depth + 100
    assert opened >= depth
    assert m.advance(v.eos_token_ids[0]) and m.is_terminated()
