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
import numpy as np
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


def test_key_position_masks_from_suffix_walks_equal_one_walk(llama3_vocab):
    """At the positions of a names trie the walk takes the tokens after a character that leaves
    the trie from one cached walk of the key-tail configuration (``PushdownIndex._walk_summary``'s
    suffix walks); every row must equal the plain walk of the whole configuration
    (``direct_row``), along documents with listed and unlisted keys, and the suffix walks must
    have been used and shared."""
    v = llama3_vocab
    be = get_backend("native", v, whitespace="flexible", additional_properties=True)
    names = ["require-author", "require-bin", "require-bugs", "require-name", "no-restricted",
             "prefer-property-order", "valid-values-license", "name-format", "version-format"]
    # extra keys: any value; and integers only, so that a character that continues a listed name
    # at one position and leaves the names at another gives different tokens there
    for extra, value in ((True, lambda r: r.choice(["x", 3, [1, "a"]])), ({"type": "integer"}, lambda r: r.randrange(99))):
        schema = {"type": "object", "properties": {n: {"enum": ["error", "warning", "off"]} for n in names},
                  "additionalProperties": extra}
        g = be.compile(Constraint("json_schema", schema))
        ix = g.token_index
        rng = random.Random(11)
        docs = []
        for _ in range(6):
            # listed keys in declared order, extra keys after them (the documented policies)
            keys = sorted(rng.sample(names, 4), key=names.index) + rng.sample(
                ["require-authorx", "zz-" + rng.choice(names), "requir", "name", "version-forma"], 3)
            docs.append(json.dumps({k: rng.choice(["error", "off"]) if k in names else value(rng) for k in keys}))
        checked = 0
        for doc in docs:
            m = g.matcher()
            for tok in v.encode(doc):
                s = m.state
                assert np.array_equal(ix.row(s), ix.direct_row(s)), (doc, s)
                checked += 1
                assert m.advance(tok), doc
            assert m.is_accepting()
        assert checked > 100
        # every position inside the keys, also those no tokenisation stops at ("require-nam")
        for key in names + ["require-authorx", "zz-name", "requir"]:
            for i in range(len(key) + 1):
                s = ix.step_bytes(1, ('{"' + key[:i]).encode())
                assert s > 0
                assert np.array_equal(ix.row(s), ix.direct_row(s)), key[:i]
        used = [e for e in ix._sw_cache.values() if e[0].sum() >= PushdownIndex.SUFFIX_MIN_ROOTS]
        assert used, "no suffix walk was used"


def test_suffix_walks_mask_the_first_bytes_that_continue_a_listed_name(monkeypatch):
    """A suffix walk of the key-tail configuration built where ``b`` leaves the names (after
    ``"c``) must not lend its tokens under ``b`` to a position where ``b`` continues a listed name
    (after ``"a``, towards ``"ab"``): there ``b":"`` (a string value) is wrong, because ``ab``'s
    value is an integer, while as an extra key's (strings) it is right. A small vocabulary with
    such tokens (the real ones rarely join a key's last letter, its quote and the value), and the
    thresholds lowered to its size."""
    from structgate.vocab import Vocabulary

    monkeypatch.setattr(PushdownIndex, "SUFFIX_MIN_NODES", 1)
    monkeypatch.setattr(PushdownIndex, "SUFFIX_MIN_ROOTS", 4)
    toks = [bytes([b]) for b in range(256)]
    for x in ("a", "b", "c", "x", "ab", "bc", "cb", "xb"):
        toks += [x.encode() + t for t in (b'":"', b'":1', b'": "', b'":', b'"')]
    toks += [b"ab", b"bc", b"ca", b"xy", b'{"', b'"}', b'1}', b'"}']
    eos = len(toks)
    vocab = Vocabulary(toks + [b""], eos_token_ids=[eos], name="keys")
    inner = {"type": "object", "properties": {"ab": {"type": "integer"}, "b": {"type": "integer"},
                                              "ca": {"type": "integer"}},
             "additionalProperties": {"type": "string"}}
    # the key rule inlined into its object; and called (the names shared by two objects, calls
    # kept): then the key rule's walk is re-rooted and the tokens that complete it mid-token (its
    # accepting nodes) go on in the caller, and those must be masked to the group too
    other = {**inner, "properties": {k: {"type": "boolean"} for k in inner["properties"]}}
    for schema, prefix, inline in ((inner, '{"', 4096), ({"type": "object", "properties": {"p": inner, "q": other}},
                                                         '{"q":{"', 1)):
        be = get_backend("native", vocab, whitespace="flexible", additional_properties=True, inline_max_size=inline)
        g = be.compile(Constraint("json_schema", schema))
        ix = g.token_index
        for key in ("ca", "cb", "xb", "ab", "a", "b", "bc"):
            for i in range(len(key) + 1):
                s = ix.step_bytes(1, (prefix + key[:i]).encode())
                assert s > 0
                assert np.array_equal(ix.row(s), ix.direct_row(s)), (prefix, key[:i])
        # the verdicts themselves, against jsonschema
        for body in ('{"ab":1}', '{"ab":"x"}', '{"cb":"x"}', '{"cb":1}', '{"a":"y"}', '{"b":2}', '{"b":true}'):
            doc = body if prefix == '{"' else '{"q":' + body + "}"
            m = g.matcher()
            ok = all(m.advance(t) for t in _greedy(vocab, doc)) and m.is_accepting()
            assert ok == jsonschema.Draft202012Validator(schema).is_valid(json.loads(doc)), doc
        assert any(e[0].sum() >= 4 for e in ix._sw_cache.values()), "no suffix walk was used"


def _greedy(vocab, text: str) -> list[int]:
    """Longest-match tokenisation over ``vocab``'s byte strings (the small test vocabulary has no
    encoder)."""
    data, out, i = text.encode(), [], 0
    best = {b: t for t, b in enumerate(vocab.token_bytes) if b}
    while i < len(data):
        for j in range(min(len(data), i + 8), i, -1):
            t = best.get(data[i:j])
            if t is not None:
                out.append(t)
                i = j
                break
    return out


def test_key_chain_memo_gives_the_fresh_trie_ir_and_language(llama3_vocab):
    """A trie node on one name's path alone is that name's rest, built once per process and shared
    (``_key_chain_ir``): the IR is equal to the one built with an empty memo, whatever sets were
    built before (shared rests, a rest that is a suffix of another, the empty name), and the
    language is the text form's."""
    from structgate.native.json_schema import _grammar as G

    sets = [s for s in NAME_SETS] + [["firstName", "lastName"], ["Name", "xName", "ame", "Nam"],
                                     ["lastName"], ["", "e"], ["name", "names", "nameX"]]
    build = G.key_not_in_ir.__wrapped__  # past the per-tuple lru_cache
    fresh = {}
    for s in sets:
        G._KEY_CHAINS.clear()
        fresh[tuple(s)] = build(tuple(s))
    G._KEY_CHAINS.clear()
    for s in sets + sets[::-1]:
        assert build(tuple(s)) == fresh[tuple(s)], s
    assert G._KEY_CHAINS["Name"] is G._key_chain_ir("Name")  # (rests shared across sets)
    for names in (["firstName", "lastName"], ["lastName", "Name"]):
        pi = _index(names, llama3_vocab)
        oracle = re.compile(_key_not_in(list(names)) + "!", re.DOTALL)
        for s in ["firstName", "lastName", "Name", "ame", "lastNam", "lastNames", "x", "", "firstname"]:
            text = _canonical(s) + "!"
            assert pi.matches(text.encode()) == bool(oracle.fullmatch(text)) == (s not in names), (names, s)


def test_key_chain_memo_stays_small_for_long_names(monkeypatch):
    """A name longer than ``KEY_CHAIN_MEMO_LEN`` keeps only its last ``KEY_CHAIN_MEMO_LEN``
    characters' rests in the memo (every rest as a key held ~n²/2 characters: ~1 GB for a
    40,000-character name), and its IR is the one built with the memo cleared (the long and the
    short rests alike), also when a shorter name with the same ending was built first."""
    from structgate.native.json_schema import _grammar as G

    build = G.key_not_in_ir.__wrapped__
    long_name = "".join(chr(0x61 + (i * 7) % 26) for i in range(20_000))
    G._KEY_CHAINS.clear()
    build((long_name,))
    assert all(len(k) <= G.KEY_CHAIN_MEMO_LEN for k in G._KEY_CHAINS)
    assert sum(map(len, G._KEY_CHAINS)) <= (G.KEY_CHAIN_MEMO_LEN + 1) ** 2
    # the same IR with and without the memo, past the memoised length (a short one here, so the
    # IR stays shallow enough for ``==``)
    monkeypatch.setattr(G, "KEY_CHAIN_MEMO_LEN", 8)
    name = long_name[:60]
    G._KEY_CHAINS.clear()
    fresh = build((name,))
    G._KEY_CHAINS.clear()
    build((name[-20:],))  # a shorter name ending the same way, first
    assert build((name,)) == fresh
    G._KEY_CHAINS.clear()
    two = build((name, name[:30] + "zz"))
    build((name[-9:],))
    assert build((name, name[:30] + "zz")) == two
    assert all(len(k) <= 8 for k in G._KEY_CHAINS)
    G._KEY_CHAINS.clear()


@pytest.mark.parametrize("levels", [2, 3])
def test_deeper_suffix_groups_mask_to_their_own_nodes(monkeypatch, levels):
    """Groups taken from suffix walks below the first level (``SUFFIX_LEVELS``): after an object
    key's ``"`` the bytes that leave the listed names enter the key-tail rule (re-rooted when the
    key rule is called), and a walk of that configuration cached below other second-level nodes
    must not lend them its tokens. Every threshold lowered to a small vocabulary whose tokens start
    with ``"`` and run through a key into its value; rows against the direct walk."""
    from structgate.vocab import Vocabulary

    monkeypatch.setattr(PushdownIndex, "SUFFIX_LEVELS", levels)
    monkeypatch.setattr(PushdownIndex, "SUFFIX_MIN_NODES", 1)
    monkeypatch.setattr(PushdownIndex, "SUFFIX_MIN_ROOTS", 4)
    monkeypatch.setattr(PushdownIndex, "SUFFIX_DEEP_MIN_NODES", 1)
    monkeypatch.setattr(PushdownIndex, "SUFFIX_DEEP_MIN_ROOTS", 1)
    toks = [bytes([b]) for b in range(256)]
    for x in ("a", "b", "c", "x", "ab", "bc", "cb", "xb", "ca"):
        for t in (b'":"', b'":1', b'": "', b'":', b'"', b'":{"'):
            toks += [x.encode() + t, b'"' + x.encode() + t, b' "' + x.encode() + t]
        toks.append(b'"' + x.encode())
    toks += [b"ab", b"bc", b"ca", b"xy", b'{"', b'"}', b'1}', b',"', b', "']
    eos = len(toks)
    vocab = Vocabulary(toks + [b""], eos_token_ids=[eos], name="keys2")
    inner = {"type": "object", "properties": {"ab": {"type": "integer"}, "b": {"type": "integer"},
                                              "ca": {"type": "integer"}},
             "additionalProperties": {"type": "string"}}
    other = {**inner, "properties": {k: {"type": "boolean"} for k in inner["properties"]}}
    deep = 0
    nested = {"type": "object", "properties": {"p": inner, "q": other}}
    for schema, prefix, inline, bodies in (
            (inner, "{", 4096, ('"ab":1,"', '"cb":"x", "', '"b":2,"ca":3,"')),
            (nested, '{"q":{', 1, ('"ab":true,"', '"cb":"x", "', '"b":false,"ca":true,"'))):
        be = get_backend("native", vocab, whitespace="flexible", additional_properties=True, inline_max_size=inline)
        g = be.compile(Constraint("json_schema", schema))
        ix = g.token_index
        for body in bodies:
            for i in range(len(body) + 1):
                s = ix.step_bytes(1, (prefix + body[:i]).encode())
                assert s > 0
                assert np.array_equal(ix.row(s), ix.direct_row(s)), (prefix, body[:i])
        deep += sum(len(k) == 3 for k in ix._sw_cache)
    assert deep, "no suffix walk below the first level was used"
