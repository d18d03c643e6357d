"""Grammar mode builds the "any key but the listed names" language (``additionalProperties`` next to
``properties``) as IR directly (:func:`structgate.native.json_schema._grammar.key_not_in_ir`),
without a regex text. Checked against two oracles:

* Python ``re`` on the text form (:func:`structgate.native.json_schema._type_string._key_not_in`,
  the regex-mode construction) for names with special characters (quote, backslash, slash,
  controls, non-ASCII, astral, the empty name, prefixes of each other);
* ``json.loads``: a canonically spelled key is accepted exactly when its decoded value is not a
  listed name.

And the schema-level check: with ``additionalProperties`` the compiled grammar accepts an object
with an unlisted key and rejects a listed key whose value breaks its schema, as ``jsonschema`` does.
"""
from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from structgate import Constraint, get_backend
from structgate.native.ir import Grammar, Ref, lit, seq
from structgate.native.json_schema._grammar import KEY_TAIL_RULE, key_not_in_ir, shared_rule_ir
from structgate.native.json_schema._type_string import _key_not_in
from structgate.native.pushdown import PushdownIndex, build_grammar_nfa

NAME_SETS = [
    ["a"],
    ["id", "name", "names", "n"],
    ["", "x"],
    ['q"uote', "back\\slash", "sl/ash", "tab\tx", "nl\n", "\x01ctl"],
    ["é", "éa", "日本", "😀x", "a😀"],
    ["type", "properties", "required", "additionalProperties", "items", "prop", "propert"],
]
ALPHABET = ["a", "b", "e", "i", "n", "x", "/", '"', "\\", "\t", "\n", "\x01", "é", "日", "😀", " ", "_"]


def _canonical(s: str) -> str:
    """The canonical JSON spelling the key grammar uses (json.dumps without ASCII escaping,
    ``/`` plain, controls as lowercase \\u00xx or their short escape)."""
    return json.dumps(s, ensure_ascii=False)


def _index(names, llama3_vocab):
    g = Grammar({"root": seq(Ref("__keyx"), Ref("end")), "__keyx": key_not_in_ir(tuple(names)),
                 KEY_TAIL_RULE: shared_rule_ir(KEY_TAIL_RULE), "end": lit("!")},
                "root", keep_calls={KEY_TAIL_RULE}).check()
    return PushdownIndex(build_grammar_nfa(g), llama3_vocab)


@pytest.mark.parametrize("names", NAME_SETS, ids=lambda n: ",".join(map(repr, n))[:40])
def test_key_exclusion_ir_equals_text_form_and_json_loads(names, llama3_vocab):
    pi = _index(names, llama3_vocab)
    oracle = re.compile(_key_not_in(list(names)) + "!", re.DOTALL)
    rng = random.Random(",".join(names))
    cands = set(names)
    for n in names:
        cands.update(n[:i] for i in range(len(n)))
        cands.update(n + c for c in ALPHABET)
        cands.update(c + n for c in ALPHABET[:4])
    for _ in range(200):
        cands.add("".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 6))))
    for s in sorted(cands):
        text = _canonical(s) + "!"
        got = pi.matches(text.encode())
        assert got == bool(oracle.fullmatch(text)), (names, text)
        assert got == (json.loads(_canonical(s)) not in names), (names, text)
    # non-canonical spellings are outside the language (sound: the keys generated are a subset)
    for bad in ['"\\u0061"!', '"\\/"!', '"a"b"!', '"!', 'a"!']:
        assert pi.matches(bad.encode()) == bool(oracle.fullmatch(bad)), (names, bad)


@pytest.mark.parametrize("schema,doc", [
    ({"type": "object", "properties": {"id": {"type": "integer"}, "idx": {"type": "string"}}},
     {"id": 1, "idy": [1, {"a": None}], "i": "x", "": 0}),
    ({"type": "object", "properties": {"id": {"type": "integer"}, "idx": {"type": "string"}}},
     {"idx": 1}),
    ({"type": "object", "properties": {"id": {"type": "integer"}}}, {"id": "one"}),
    ({"type": "object", "properties": {"a/b": {"const": 1}}}, {"a/b": 2}),
    ({"type": "object", "properties": {"a/b": {"const": 1}}}, {"a/b": 1, "a/bc": 2}),
])
def test_additional_properties_verdicts_equal_jsonschema(schema, doc, llama3_vocab):
    be = get_backend("native", llama3_vocab, whitespace="compact", additional_properties=True)
    g = be.compile(Constraint("json_schema", schema))
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    m = g.matcher()
    accepted = m.advance(llama3_vocab.encode(text)) and m.is_accepting()
    assert accepted == jsonschema.Draft202012Validator(schema).is_valid(doc), (schema, text)
